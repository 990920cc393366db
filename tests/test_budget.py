"""Budget-fitted schedules (Li et al. 2020) against plain-Python references; the trainer fits them to a
step budget and to a (simulated) time budget, keeps them continuous, restores them exactly on resume,
and warns when a recipe's warm-up cannot finish within the budget."""

import io
import itertools
import json
import math

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnkit.training import ListBatches, RunConfig, Trainer, inverse_sqrt_with_warmup, load_checkpoint
from attnkit.training.budget import (
    BudgetSchedule,
    Recurring,
    StepClock,
    budget_schedule,
    estimate_total_steps,
    unreachable_warmup,
)
from tiny import toy_batches

torch.set_num_threads(1)
INV_SQRT = {"kind": "inverse_sqrt", "d_model": 16, "warmup_steps": 2000, "factor": 0.5}
CONST = {"kind": "constant", "value": 1.0}


def reference_fresh(k: int, total: int, frac: float, peak: float) -> float:
    """Linear warm-up over W = max(1, round(frac T)) steps to ``peak``, then linear decay to 0 at step T."""
    w = max(1, round(frac * total))
    if k >= total:
        return 0.0
    if k < w:
        return peak * (k + 1) / w
    return peak * (total - k) / (total - w + 1)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 3000), frac=st.floats(0.0, 0.5), peak=st.floats(1e-5, 10.0))
def test_a_fresh_fit_is_warmup_then_linear_decay_to_zero_at_the_end(total, frac, peak):
    f = BudgetSchedule(peak, INV_SQRT, frac)
    f.fit(0, total)
    for k in sorted({0, 1, total // 3, total // 2, total - 2, total - 1, total, total + 5} - {-1}):
        assert f(k) == pytest.approx(reference_fresh(k, total, frac, peak), rel=1e-9, abs=1e-12), k
    assert f(total - 1) > 0 and f(total) == 0.0
    assert max(f(k) for k in range(0, total, max(1, total // 50))) <= peak * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(total=st.integers(1, 2000))
def test_a_constant_recipe_fits_li_et_al_s_linear_schedule(total):
    """The RNNs' constant rate is at its peak: no warm-up, lr_k = peak (1 - k / T)."""
    f = BudgetSchedule(1.0, CONST, 0.05)
    f.fit(0, total)
    for k in (0, total // 2, total - 1, total):
        assert f(k) == pytest.approx(1.0 - k / total, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    first=st.integers(0, 40),
    fits=st.lists(st.tuples(st.integers(1, 60), st.integers(-50, 400)), min_size=1, max_size=8),
    base=st.sampled_from([INV_SQRT, CONST]),
)
def test_refits_never_make_the_rate_jump(first, fits, base):
    """Each re-fit at step s (a new estimate of T) keeps f(s); the rate stays in [0, peak] and is 0 from T."""
    peak = 1e-3 if base is INV_SQRT else 1.0
    f = BudgetSchedule(peak, base, 0.1)
    step = first
    f.fit(step, step + 100)
    for advance, delta in fits:
        step = min(step + advance, f.total_steps)  # training never passes the end
        before = f(step)
        f.fit(step, step + max(delta, 1))
        assert f(step) == pytest.approx(before, rel=1e-12, abs=1e-15)
        for k in range(step, f.total_steps + 2):
            assert -1e-15 <= f(k) <= peak * (1 + 1e-12)
        assert f(f.total_steps) == 0.0


def test_a_probe_on_the_recipe_then_a_warmup_from_where_it_got():
    """A time budget times 8 steps on the recipe (still far below the peak) before the first fit: the
    warm-up then climbs from there to the peak at max(W - 1, s + W), and decays to 0 at T."""
    f = BudgetSchedule(1e-3, INV_SQRT, 0.05)
    v8 = f(8)
    f.fit(8, 1000)  # W = 50
    assert f(8) == v8 and f(58) == pytest.approx(1e-3) and f(1000) == 0.0
    assert f(33) == pytest.approx(v8 + (1e-3 - v8) * 25 / 50)
    assert f(529) == pytest.approx(1e-3 * (1000 - 529) / (1000 - 58))
    f.fit(100, 600)  # a lower estimate after the warm-up: a straight line from f(100) to 0 at 600
    assert f(350) == pytest.approx(f(100) / 2) and f.warmup_steps == 59


def test_the_schedule_round_trips_through_a_weights_only_state_dict():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    sched = budget_schedule(opt, 1e-3, INV_SQRT, warmup_fraction=0.05)
    fn = sched.lr_lambdas[0]
    fn.fit(8, 500)
    fn.fit(30, 420)
    buf = io.BytesIO()
    torch.save(sched.state_dict(), buf)
    buf.seek(0)
    other = budget_schedule(torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0), 1e-3, INV_SQRT)
    other.load_state_dict(torch.load(buf, weights_only=True))
    g = other.lr_lambdas[0]
    assert g.knots == fn.knots and g.describe() == fn.describe()
    assert [g(k) for k in range(0, 430, 7)] == [fn(k) for k in range(0, 430, 7)]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(peak=0), "peak must be a positive number"),
        (dict(warmup_fraction=1.0), "warmup_fraction must be in"),
        (dict(mode="sometimes"), "mode must be one of"),
        (dict(base={"kind": "cosine"}), "base must be"),
    ],
)
def test_bad_arguments_are_named(kw, message):
    args = {"peak": 1.0, "base": CONST, **kw}
    with pytest.raises(ValueError, match=message):
        BudgetSchedule(**args)


def test_the_unreachable_warmup_warning_gives_the_numbers():
    msg = unreachable_warmup(2000, 1e-3, 562)
    assert "2000 steps" in msg and "about 562 steps" in msg and "28%" in msg and "0.000281" in msg
    assert unreachable_warmup(500, 1e-3, 3845) is None


def test_the_step_clock_leaves_out_the_first_steps_and_keeps_a_recent_window():
    clock = StepClock(skip=3, horizon_s=4.0, min_steps=2)
    for d in (9.0, 7.0, 5.0, 1.0, 1.2, 0.8):  # compile/warm-up, then steady steps
        clock.add(d)
    assert clock.seconds_per_step() == pytest.approx((1.0 + 1.2 + 0.8) / 3) and not clock.settled
    for d in (2.0, 2.0, 2.0):  # another job starts: the window now holds only the last 4 s of steps
        clock.add(d)
    assert clock.seconds_per_step() == pytest.approx(2.0) and clock.settled
    clock.add_event("valid", 30.0)  # an event is not a slow step
    assert clock.seconds_per_step() == pytest.approx(2.0) and clock.event_seconds("valid") == 30.0
    assert clock.event_seconds("save") == 0.0 and StepClock().seconds_per_step() is None
    assert StepClock.for_budget(600).horizon_s == 30.0 and StepClock.for_budget(60).horizon_s == 10.0
    assert StepClock.for_budget(36_000).horizon_s == 60.0
    with pytest.raises(ValueError, match="horizon_s"):
        StepClock(horizon_s=0)


def simulate_steps(step, seconds_left, sps, valid, spe, pos, cap, every=None, every_s=0.0):
    """A plain loop: steps of ``sps`` seconds, a validation of ``valid`` s at each epoch end and one of ``every_s``
    after every step whose number is a multiple of ``every``, until time runs out."""
    t, n = 0.0, step
    while t + sps <= seconds_left + 1e-9 and (cap is None or n < cap):
        t, n, pos = t + sps, n + 1, pos + 1
        if spe and pos == spe:
            t, pos = t + valid, 0
        if every and n % every == 0:
            t += every_s
    return n


@settings(max_examples=80, deadline=None)
@given(
    step=st.integers(0, 500),
    seconds_left=st.floats(1.0, 2000.0),
    sps=st.floats(0.05, 5.0),
    valid=st.floats(0.0, 60.0),
    spe=st.one_of(st.none(), st.integers(5, 400)),
    cap=st.one_of(st.none(), st.integers(501, 5000)),
    every=st.one_of(st.none(), st.integers(1, 300)),
    every_s=st.floats(0.0, 30.0),
)
def test_the_time_estimate_agrees_with_a_plain_simulation(step, seconds_left, sps, valid, spe, cap, every, every_s):
    pos = step % spe if spe else 0
    events = [Recurring.every(every, step, every_s)] if every else []
    got = estimate_total_steps(
        step, seconds_left=seconds_left, seconds_per_step=sps, epoch_end_seconds=valid, steps_per_epoch=spe,
        step_in_epoch=pos, events=events, cap=cap,
    )  # fmt: skip
    want = max(simulate_steps(step, seconds_left, sps, valid, spe, pos, cap, every, every_s), step + 1)
    assert got == want


# ---------------------------------------------------------------- the trainer fits it


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, reduction="sum"), y.numel(), {}


def make_trainer(out, *, mode="always", base=CONST, schedule=None, batches=5, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1 if base is CONST else 1.0)
    sched = schedule(opt) if schedule else budget_schedule(opt, 0.1 if base is INV_SQRT else 1.0, base, mode=mode)
    valid_x, valid_y = toy_batches(1, 8, seed=9)[0]
    kw["epochs"] = kw.pop("max_epochs", 100)
    kw.setdefault("save_every_steps", 4)
    run = RunConfig(out_dir=str(out), log_every=1, seed=0, progress=False, device=None, **kw)
    return Trainer(
        model, opt, run, loss_fn=loss_fn, train_batches=ListBatches(toy_batches(batches), shuffle_seed=3),
        valid_fn=lambda m: {"valid_loss": F.cross_entropy(m(valid_x), valid_y).item()}, scheduler=sched,
    )  # fmt: skip


def lrs(out):
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in log if r["event"] == "train"}, log


def test_a_step_budget_fits_the_schedule_and_ends_at_zero(tmp_path):
    s = make_trainer(tmp_path / "a", base=INV_SQRT, max_steps=40).fit()
    assert s["steps"] == 40 and s["stop_reason"] == "max_steps"
    got, log = lrs(tmp_path / "a")
    # the lr logged after step k is the one step k+1 runs with: reference_fresh(k) (0-based)
    for k in range(1, 41):
        assert got[k] == pytest.approx(reference_fresh(k, 40, 0.05, 0.1), abs=1e-12), k
    assert got[40] == 0.0
    # the budget's last step is validated, so `best` is the finished model
    assert [r["step"] for r in log if r["event"] == "valid"][-1] == 40
    # ... unless the run never validates (valid_every_epochs 0, no valid_every_steps): then not even there
    for every, want in ((1, [5, 10, 15, 18]), (0, [])):
        s = make_trainer(tmp_path / f"v{every}", base=INV_SQRT, max_steps=18, valid_every_epochs=every).fit()
        _, log = lrs(tmp_path / f"v{every}")
        assert s["stop_reason"] == "max_steps" and [r["step"] for r in log if r["event"] == "valid"] == want


def test_an_epoch_budget_fits_auto_and_a_long_one_keeps_the_recipe(tmp_path):
    short = make_trainer(tmp_path / "s", base=INV_SQRT, mode="auto", max_epochs=3)  # 15 steps, 3 epochs
    short.fit()
    assert short.scheduler.lr_lambdas[0].describe()["total_steps"] == 15
    long = make_trainer(tmp_path / "l", base=INV_SQRT, mode="auto", max_epochs=5)  # 5 epochs: the recipe
    long.fit()
    fn = long.scheduler.lr_lambdas[0]
    assert fn.describe()["schedule"] == "recipe"
    got, log = lrs(tmp_path / "l")
    ref = inverse_sqrt_with_warmup(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 16, 2000, 0.5)
    assert got[25] == ref.lr_lambdas[0](25)
    warn = [r for r in log if r["event"] == "warning"]
    assert len(warn) == 1 and "2000 steps" in warn[0]["message"] and "about 25 steps" in warn[0]["message"]


def test_an_explicit_schedule_stays_and_warns_with_the_numbers(tmp_path, capsys):
    make_trainer(
        tmp_path / "e", max_steps=30, schedule=lambda o: inverse_sqrt_with_warmup(o, 16, 2000, factor=0.5)
    ).fit()
    err = capsys.readouterr().err
    assert "warning: the schedule's warm-up of 2000 steps cannot finish: this budget allows about 30 steps" in err
    got, _ = lrs(tmp_path / "e")
    assert got[30] == pytest.approx(0.1 * 0.5 * 16**-0.5 * 31 * 2000**-1.5)  # the recipe (base lr 0.1), untouched


def test_resume_restores_the_fitted_schedule_exactly(tmp_path):
    straight = make_trainer(tmp_path / "a", max_steps=13)
    straight.fit()
    first = make_trainer(tmp_path / "b", max_steps=13)
    first.after_step = lambda m, metrics: first.step == 5 and first.request_stop()  # stop after 6 steps
    assert first.fit()["stop_reason"] == "interrupted"
    again = make_trainer(tmp_path / "b", max_steps=13)
    assert again.fit(resume=True)["steps"] == 13
    a = load_checkpoint(tmp_path / "a" / "step-00000013")
    b = load_checkpoint(tmp_path / "b" / "step-00000013")
    for k in a.state_dict:
        assert torch.equal(a.state_dict[k], b.state_dict[k]), k
    assert again.scheduler.lr_lambdas[0].knots == straight.scheduler.lr_lambdas[0].knots


class FakeClock:
    """``time.perf_counter`` for the trainer, advanced only by the steps: each takes exactly ``sps`` seconds."""

    def __init__(self, sps):
        self.now, self.sps = 1000.0, sps

    def __call__(self):
        return self.now

    def step(self):
        self.now += self.sps


def timed_trainer(out, clock, monkeypatch, max_time_s, *, batches=40, save_every_steps=40):
    """A trainer on the 1/√step recipe with a time budget, its clock advanced only by ``clock``: each step
    takes ``clock.sps`` seconds; no validation; epochs of ``batches`` steps and a checkpoint every
    ``save_every_steps`` (by default 40: a few hundred simulated steps without a checkpoint written every few)."""
    monkeypatch.setattr("attnkit.training.trainer.time.perf_counter", clock)

    def timed_loss(model, batch):
        clock.step()
        return loss_fn(model, batch)

    t = make_trainer(
        out, base=INV_SQRT, max_time_s=max_time_s, max_epochs=1000, batches=batches, save_every_steps=save_every_steps
    )
    t.valid_fn = None
    t.loss_fn = timed_loss
    return t


def test_a_time_budget_is_turned_into_steps_and_the_rate_reaches_zero_at_its_end(tmp_path, monkeypatch):
    s = timed_trainer(tmp_path / "t", FakeClock(0.5), monkeypatch, 30.0).fit()
    # 30 s of 0.5-s steps: 60 steps; the schedule fitted to them ends at 0 with the last one
    assert s["steps"] == 60 and s["stop_reason"] == "max_time"
    got, log = lrs(tmp_path / "t")
    assert got[60] == 0.0 and max(got.values()) == pytest.approx(0.1)
    steps = sorted(got)
    jumps = [abs(got[b] - got[a]) for a, b in itertools.pairwise(steps)]
    assert max(jumps) <= 0.1 / 3 + 1e-12  # warm-up of W = 3 steps is the steepest part: no jump
    record = [r for r in log if r["event"] == "schedule"]
    assert record[0]["step"] == 8 and record[0]["estimated_steps"] == 60
    assert math.isclose(got[7], 0.5 * 16**-0.5 * 8 * 2000**-1.5)  # the probe ran on the recipe


def test_checkpoint_stalls_count_against_a_time_budget(tmp_path, monkeypatch):
    """Checkpoints that cost as much as four steps (a big model's write on a fast GPU) are part of what a
    step costs: the fitted schedule still reaches zero at the run's last step, not halfway down."""
    clock = FakeClock(0.5)
    save = Trainer.save

    def slow_save(self, *args, **kwargs):
        clock.now += 2.0
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "save", slow_save)
    s = timed_trainer(tmp_path / "t", clock, monkeypatch, 60.0, batches=5, save_every_steps=4).fit()
    got, _ = lrs(tmp_path / "t")
    # 0.5-s steps, a 2-s checkpoint every 4 steps and at each epoch's end (5 steps): about 44 steps fit in
    # 60 s, not the 120 that the steps alone would take
    assert s["stop_reason"] == "max_time" and 40 <= s["steps"] <= 48, s
    assert max(got.values()) == pytest.approx(0.1) and got[s["steps"]] <= 0.02 * 0.1  # decayed to (nearly) 0


def test_the_progress_line_shows_the_validation_score_and_the_steps_left(tmp_path, capsys, monkeypatch):
    import tqdm

    class EveryStep(tqdm.tqdm):  # redraw at every update: tqdm skips redraws within 0.1 s, which fast steps are
        def __init__(self, *args, **kwargs):
            super().__init__(*args, mininterval=0, miniters=1, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", EveryStep)
    t = make_trainer(tmp_path / "p", max_steps=9, valid_every_steps=3)
    t.run.progress = True
    t.fit()
    out, err = capsys.readouterr()
    err = err.replace("\r", "\n")
    log = [json.loads(line) for line in (tmp_path / "p" / "train_log.jsonl").read_text().splitlines()]
    valid = [r for r in log if r["event"] == "valid"]
    assert [r["step"] for r in valid] == [3, 5, 6, 9]  # every 3 steps, and at the end of the 5-step epoch
    shown = f"valid_loss={valid[0]['valid_loss']:.4g} (best {valid[0]['best_metric']:.4g})"
    assert shown in err and "steps_left=5" in err  # after step 4: 9 - 4 left
    assert "step 3: valid_loss=" in out  # tqdm.write: above the bar, on stdout


class LoadedClock(FakeClock):
    """A :class:`FakeClock` whose steps take ``factor`` times as long from ``at`` seconds into the run (another
    job starting on the machine) until ``until`` (it stops)."""

    def __init__(self, sps, at, factor, until=float("inf")):
        super().__init__(sps)
        self.start, self.at, self.factor, self.until = self.now, at, factor, until
        self.ends: list[float] = []  # the seconds into the run at which each step ended

    def step(self):
        t = self.now - self.start
        self.now += self.sps * (self.factor if self.at <= t < self.until else 1.0)
        self.ends.append(self.now - self.start)


def budget_record(out):
    return json.loads((out / "train_config.json").read_text())["budget"]


@pytest.mark.parametrize(
    "at, factor, until",
    [(30.0, 2.0, float("inf")), (15.0, 2.0, 45.0), (50.0, 3.0, float("inf")), (0.0, 6.0, 20.0), (0.0, 1.0, 0.0)],
    ids=[
        "slower-for-the-second-half",
        "slower-for-the-middle-half",
        "much-slower-near-the-end",
        "much-slower-at-the-start",
        "quiet",
    ],
)
def test_the_rate_reaches_its_end_when_time_does_under_a_changing_load(tmp_path, monkeypatch, at, factor, until):
    """Another job slows the steps for part of a 60-s budget: the schedule, re-fitted to what the recent steps
    cost, still ends (within 5 % of its peak) at the run's last step, and the run uses its time."""
    clock = LoadedClock(0.25, at, factor, until)
    out = tmp_path / "t"
    t = timed_trainer(out, clock, monkeypatch, 60.0)
    out.mkdir(parents=True, exist_ok=True)
    t.record_path = out / "train_config.json"
    t.record_path.write_text("{}")
    s = t.fit()
    got, log = lrs(out)
    assert s["stop_reason"] == "max_time"
    assert clock.now - clock.start <= 60.0 + 0.25 * max(factor, 1.0) + 1e-9  # stopped at the budget
    assert clock.now - clock.start >= 60.0 - 2 * 0.25 * max(factor, 1.0)  # and used it
    record = budget_record(out)
    assert record["steps"] == s["steps"] and record["last_lr_share_of_peak"] <= 0.05, record
    assert max(got.values()) == pytest.approx(0.1) and got[s["steps"]] <= 0.05 * 0.1
    assert next(r for r in log if r["event"] == "budget")["planned_steps"] == record["planned_steps"]


def test_validations_are_charged_where_they_recur_and_a_shortfall_is_said(tmp_path, monkeypatch, capsys):
    """Validations of 3 s every 10 steps and a job that doubles the steps' cost from the 20th second: the
    estimate charges each validation where it will fall and keeps time for the budget's last one, the rate
    still ends at the last step, the run with its last validation ends within the budget, and, having made far
    fewer steps than its first ones planned, it says so on stderr, in the log and in the record."""
    clock = LoadedClock(0.25, 20.0, 2.0)
    out = tmp_path / "t"
    t = timed_trainer(out, clock, monkeypatch, 60.0)
    valid_x, valid_y = toy_batches(1, 8, seed=9)[0]

    def slow_valid(m):
        clock.now += 3.0
        return {"valid_loss": F.cross_entropy(m(valid_x), valid_y).item()}

    t.valid_fn = slow_valid
    t.run.valid_every_steps, t.run.valid_every_epochs = 10, 0
    out.mkdir(parents=True, exist_ok=True)
    t.record_path = out / "train_config.json"
    t.record_path.write_text("{}")
    s = t.fit()
    record = budget_record(out)
    assert s["stop_reason"] == "max_time" and record["last_lr_share_of_peak"] <= 0.05, record
    # the budget's last validation (3 s, as the others took) was kept inside it: the whole run fits in 60 s
    assert 57.0 <= clock.now - clock.start <= 60.0 + 0.5, clock.now - clock.start
    assert record["lost_share"] > 0.1 and "fewer" in record["warning"]
    assert "attnkit: warning: this run made" in capsys.readouterr().err
    _, log = lrs(out)
    assert any(r["event"] == "warning" and "fewer" in r["message"] for r in log)
    assert all("estimated_steps" in r for r in log if r["event"] == "train" and r["step"] > 8)


def test_a_busy_start_does_not_pull_the_rate_down_for_good(tmp_path, monkeypatch):
    """Steps six times slower for the first 20 s of a 60-s budget (another job starting beside this one): the
    first estimate of the steps is far too low, yet the rate follows the time left, linearly from the warm-up's
    end to the budget's, so at the budget's middle it is still over half its peak, and 0 at the end."""
    clock = LoadedClock(0.25, 0.0, 6.0, 20.0)
    out = tmp_path / "t"
    s = timed_trainer(out, clock, monkeypatch, 60.0).fit()
    got, log = lrs(out)
    first = next(r for r in log if r["event"] == "schedule")["estimated_steps"]
    assert first < 0.6 * s["steps"]  # the busy start's estimate: far below what the run made
    mid = next(k for k, end in enumerate(clock.ends, 1) if end >= 30.0)  # the first step to end past the middle
    warm = next(r for r in log if r["event"] == "schedule")["warmup_steps"]
    t_w = clock.ends[warm - 1]  # the decay runs linearly in time from the warm-up's end to the budget's
    want = 0.1 * (60.0 - clock.ends[mid - 1]) / (60.0 - t_w)
    assert got[mid] == pytest.approx(want, abs=0.05 * 0.1) and got[mid] >= 0.45 * 0.1, (mid, got[mid], want)
    assert got[s["steps"]] <= 0.05 * 0.1
