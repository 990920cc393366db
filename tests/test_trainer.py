"""Trainer: bit-exact resume, stop requests and signals, early stopping, learning, logs."""

import json
import os
import random
import signal

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnkit.training import (
    ListBatches,
    RunConfig,
    StopReason,
    Trainer,
    inverse_sqrt_with_warmup,
    list_checkpoints,
    load_checkpoint,
)
from tiny import toy_batches

torch.set_num_threads(1)


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))


def loss_fn(model, batch):
    x, y = batch
    # touch every RNG the trainer promises to restore
    x = x + 0.01 * float(np.random.randn()) + 0.01 * random.random()
    logits = model(x)
    return F.cross_entropy(logits, y, reduction="sum"), y.numel(), {"acc": (logits.argmax(-1) == y).float().mean()}


def make_trainer(out_dir, *, model_seed=0, max_steps=None, max_epochs=100, loss=loss_fn, valid=True, **kw):
    model = make_model(model_seed)
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    sched = inverse_sqrt_with_warmup(opt, d_model=16, warmup_steps=4, factor=2.0)
    valid_x, valid_y = toy_batches(1, 8, seed=9)[0]

    def valid_fn(m):
        return {"valid_loss": F.cross_entropy(m(valid_x), valid_y).item()}

    kw.setdefault("save_every_steps", 3)
    kw.setdefault("log_every", 2)
    run = RunConfig(
        out_dir=str(out_dir), epochs=max_epochs, max_steps=max_steps, seed=123, progress=False, device=None, **kw
    )
    return Trainer(
        model,
        opt,
        run,
        loss_fn=loss,
        train_batches=ListBatches(toy_batches(4), shuffle_seed=11),
        valid_fn=valid_fn if valid else None,
        scheduler=sched,
    )


def assert_same_training_state(t1, t2):
    for (k, a), b in zip(t1.raw_model.state_dict().items(), t2.raw_model.state_dict().values()):
        assert torch.equal(a, b), k
    s1, s2 = t1.optimizer.state_dict()["state"], t2.optimizer.state_dict()["state"]
    for i in s1:
        for k in s1[i]:
            assert torch.equal(torch.as_tensor(s1[i][k]), torch.as_tensor(s2[i][k])), (i, k)
    assert t1.scheduler.state_dict() == t2.scheduler.state_dict()


@pytest.mark.parametrize("n", [5, 8])  # mid-epoch, and exactly at an epoch boundary (4 batches/epoch)
def test_resume_is_bit_exact(tmp_path, n):
    total = 13
    ref = make_trainer(tmp_path / "ref", max_steps=total)
    ref_summary = ref.fit()
    ref_rng = torch.get_rng_state()
    assert ref_summary["steps"] == total and ref_summary["stop_reason"] == "max_steps"

    first = make_trainer(tmp_path / "run", max_steps=n)
    assert first.fit()["steps"] == n
    second = make_trainer(tmp_path / "run", model_seed=99, max_steps=total)  # different init: must be overwritten
    summary = second.fit(resume=True)
    assert summary["resumed_from"].endswith(f"step-{n:08d}")
    assert summary["steps"] == total and second.epoch == ref.epoch
    assert_same_training_state(ref, second)
    assert torch.equal(ref_rng, torch.get_rng_state())
    assert second.best_metric == ref.best_metric and second.best_step == ref.best_step
    assert len(list_checkpoints(tmp_path / "run")) <= 3  # keep_last
    assert (tmp_path / "run" / "best" / "COMPLETE").is_file()


def test_request_stop_saves_and_resumes_exactly(tmp_path):
    ref = make_trainer(tmp_path / "ref", max_steps=10)
    ref.fit()
    holder = {}

    def stopping_loss(model, batch):
        out = loss_fn(model, batch)
        if holder["t"].step == 5:  # during the 6th step: stop after it
            holder["t"].request_stop()
        return out

    t = holder["t"] = make_trainer(tmp_path / "run", max_steps=10, loss=stopping_loss)
    s = t.fit()
    assert s["stop_reason"] == "interrupted" and s["steps"] == 6
    assert load_checkpoint(tmp_path / "run" / "step-00000006").step == 6
    t2 = make_trainer(tmp_path / "run", max_steps=10)
    assert t2.fit(resume=True)["steps"] == 10
    assert_same_training_state(ref, t2)


def test_sigint_is_handled_at_step_boundary(tmp_path):
    holder = {}

    def interrupting_loss(model, batch):
        if holder["t"].step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return loss_fn(model, batch)

    before = signal.getsignal(signal.SIGINT)
    t = holder["t"] = make_trainer(tmp_path, max_steps=50, loss=interrupting_loss)
    s = t.fit()
    assert s["stop_reason"] == "interrupted" and s["steps"] == 3
    assert (tmp_path / "step-00000003" / "COMPLETE").is_file()
    assert signal.getsignal(signal.SIGINT) is before


def test_early_stopping_and_best(tmp_path):
    seq = iter([1.0, 0.5, 0.6, 0.7, 0.4, 0.3])
    t = make_trainer(tmp_path, patience=2, save_every_steps=100)
    t.valid_fn = lambda m: {"valid_loss": next(seq)}
    s = t.fit()
    assert s["stop_reason"] == "early_stopping"
    assert s["epochs"] == 4 and s["best_metric"] == 0.5 and s["best_step"] == 8
    best = load_checkpoint(tmp_path / "best")
    assert best.step == 8 and best.trainer_state["best_metric"] == 0.5
    # resuming an early-stopped run does nothing more
    t2 = make_trainer(tmp_path, patience=2)
    assert t2.fit(resume=True)["stop_reason"] == "early_stopping" and t2.step == 16


@pytest.mark.parametrize("every, validated_epochs", [(1, [0, 1, 2, 3, 4]), (2, [1, 3]), (0, [])])
def test_valid_every_epochs_picks_the_epochs_that_validate(tmp_path, every, validated_epochs):
    """Every N-th epoch's end validates; 0 never does (no ``best``: the run's last step is its result)."""
    seen = []
    t = make_trainer(tmp_path, max_epochs=5, valid_every_epochs=every, save_every_steps=100)
    t.valid_fn = lambda m: seen.append(t.epoch) or {"valid_loss": 1.0 / (1 + len(seen))}
    s = t.fit()
    assert seen == validated_epochs and s["epochs"] == 5
    assert (tmp_path / "best").is_dir() == bool(validated_epochs)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log if e["event"] == "valid"] == [4 * (e + 1) for e in validated_epochs]
    if every == 0:  # patience counts validations: with none, it never stops the run
        t = make_trainer(tmp_path / "p", max_epochs=4, valid_every_epochs=0, patience=1)
        assert t.fit()["stop_reason"] == "max_epochs"


def test_loss_decreases_and_log_is_written(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)
    w = torch.tensor([[1.0], [-2.0], [0.5]])
    batches = []
    for _ in range(5):
        x = torch.randn(8, 3, generator=g)
        batches.append((x, x @ w))

    def mse_sum(m, b):
        x, y = b
        return ((m(x) - y) ** 2).sum(), y.numel(), {}

    t = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        RunConfig(
            out_dir=str(tmp_path), save_every_steps=50, epochs=6, seed=0, log_every=5, clip_grad_norm=0.0, device=None
        ),
        loss_fn=mse_sum,
        train_batches=ListBatches(batches, 0),
    )
    s = t.fit()
    assert s["steps"] == 30 and s["epochs"] == 6 and s["stop_reason"] == "max_epochs" and s["tokens_per_s"] > 0
    recs = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in recs if r["event"] == "train"]
    assert len(losses) == 6 and losses[-1] < 0.1 * losses[0]
    assert recs[-1]["event"] == "end"


def test_bad_arguments(tmp_path):
    m = make_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    run = RunConfig(out_dir=str(tmp_path), save_every_steps=1, epochs=1, seed=0, log_every=1)
    with pytest.raises(TypeError, match="train_batches"):
        Trainer(m, opt, run, loss_fn=loss_fn, train_batches=[1, 2])
    run.save_every_steps = 0  # set after the config was built: the trainer checks it again
    with pytest.raises(ValueError, match="save_every_steps"):
        Trainer(m, opt, run, loss_fn=loss_fn, train_batches=ListBatches([1]))
    run.save_every_steps, run.patience = 1, 2
    with pytest.raises(ValueError, match="patience"):
        Trainer(m, opt, run, loss_fn=loss_fn, train_batches=ListBatches([1]))
    with pytest.raises(TypeError, match="run must be a RunConfig"):
        Trainer(m, opt, {"epochs": 1}, loss_fn=loss_fn, train_batches=ListBatches([1]))


def test_run_totals_sums_every_piece_of_a_resumed_run(tmp_path):
    from attnkit.training.trainer import run_totals

    lines = [
        {"event": "train", "step": 10, "tokens_per_s": 99.0},
        {"event": "end", "steps": 100, "epochs": 2, "time_s": 30.0, "tokens": 3000, "best_metric": 11.0},
        {"event": "valid", "step": 150},  # an older log: no seconds
        {"event": "valid", "step": 180, "valid_s": 5.0},
        {"event": "end", "steps": 200, "epochs": 4, "time_s": 10.0, "tokens": 2000, "best_metric": 12.5},
    ]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    t = run_totals(tmp_path)
    assert t["time_s"] == 40.0 and t["tokens"] == 5000 and t["tokens_per_s"] == pytest.approx(125.0)
    assert t["valid_s"] == 5.0 and t["tokens_per_step_s"] == pytest.approx(5000 / 35.0)
    assert (t["steps"], t["epochs"], t["best_metric"]) == (200, 4, 12.5)  # the last piece's
    with pytest.raises(FileNotFoundError, match="out_dir"):
        run_totals(tmp_path / "nothing")


def test_stop_reasons_are_the_strings_the_log_and_the_summary_write(tmp_path):
    """``StopReason``'s values are the strings runs have always written; a run's summary and its log's ``end``
    line carry the value (a plain string), and its checkpoint's trainer_state keeps the keys older runs saved."""
    assert {r.name: r.value for r in StopReason} == {
        "EARLY_STOPPING": "early_stopping",
        "INTERRUPTED": "interrupted",
        "MAX_STEPS": "max_steps",
        "MAX_TIME": "max_time",
        "MAX_EPOCHS": "max_epochs",
    }
    s = make_trainer(tmp_path, max_steps=3).fit()
    assert type(s["stop_reason"]) is str and s["stop_reason"] == StopReason.MAX_STEPS.value
    last = (tmp_path / "train_log.jsonl").read_text().splitlines()[-1]
    assert '"stop_reason": "max_steps"' in last and json.loads(last)["event"] == "end"
    assert list(load_checkpoint(tmp_path / "step-00000003").trainer_state) == [
        "step", "epoch", "optimizer", "scheduler", "sampler", "rng", "rng_per_rank", "world_size", "best_metric",
        "best_step", "metric_for_best", "bad_epochs", "early_stopped", "tokens_seen", "seed", "scaler",
    ]  # fmt: skip


def test_the_stop_decision_checks_in_its_order(tmp_path):
    """Patience first, then a stop request (not at the start), the step limit, then the epoch limit."""
    t = make_trainer(tmp_path, max_steps=4, max_epochs=2)
    assert t._stop_reason("step") is None
    t.epoch = 2
    assert t._stop_reason("epoch_end") is StopReason.MAX_EPOCHS
    t.step = 4
    assert t._stop_reason("start") is StopReason.MAX_STEPS and t._stop_reason("step") is StopReason.MAX_STEPS
    t.request_stop()
    assert t._stop_reason("start") is StopReason.MAX_STEPS  # a request is not checked before the first step
    assert t._stop_reason("step") is StopReason.INTERRUPTED
    t.validator.early_stopped = True
    assert t._stop_reason("epoch_end") is StopReason.EARLY_STOPPING and t.early_stopped
