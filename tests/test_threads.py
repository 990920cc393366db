"""The thread governor: fewer torch threads while the cores are shared, the chosen number back when the
probe (or the machine's idle cores) shows them free; checked step by step with a simulated clock, and in
a real training run."""

import itertools
import json

import pytest
import torch
import torch.nn.functional as F

from attnkit.training import ListBatches, RunConfig, Trainer
from attnkit.training import trainer as trainer_module
from attnkit.training.threads import ThreadGovernor
from tiny import toy_batches


class Machine:
    """A simulated clock, the thread counts set, and the machine's idle cores to report."""

    def __init__(self):
        self.now = 0.0
        self.set = []
        self.idle = None

    def governor(self, threads=2, **kw):
        return ThreadGovernor(
            threads, clock=lambda: self.now, set_threads=self.set.append, idle_cores=lambda: self.idle, **kw
        )

    def run(self, gov, steps, seconds, cores):
        """``steps`` steps that got ``cores`` cores, of ``seconds`` each (or ``seconds[threads]`` at the
        governor's current thread count); the thread counts they chose."""
        chosen = []
        for _ in range(steps):
            s = seconds[gov.current] if isinstance(seconds, dict) else seconds
            self.now += s
            if (n := gov.step(s, s * cores)) is not None:
                chosen.append(n)
        return chosen


def test_a_quiet_machine_keeps_the_chosen_threads():
    m = Machine()
    gov = m.governor(threads=4)
    assert m.run(gov, 500, 0.5, 3.9) == [] and m.set == [] and gov.current == 4


def test_shared_cores_lower_the_threads_to_the_cores_got():
    m = Machine()
    gov = m.governor(threads=4)
    assert m.run(gov, 30, 1.0, 2.05) == [2]  # 2 of 4 cores: a team of 2
    assert m.set == [2] and gov.changes[0]["why"] == "shared cores" and gov.changes[0]["cores"] == 2.05
    m2 = Machine()
    assert m2.run(m2.governor(threads=2), 30, 1.0, 0.3) == [1]  # never below 1


def test_steps_of_many_seconds_are_judged_after_one():
    m = Machine()
    gov = m.governor(threads=2)  # the first step is skipped: it builds caches on one thread
    assert m.run(gov, 2, 16.0, 1.0) == [1] and m.now == 32.0


def test_a_lost_probe_returns_to_the_lowered_count_and_waits_twice_as_long():
    m = Machine()
    gov = m.governor(threads=2, probe_every_s=45.0)
    m.run(gov, 8, 1.0, 1.0)
    assert gov.current == 1
    # lowered: a step takes 0.8 s; at the chosen count (the probe) 1.8 s: the probe loses
    probes = []
    for _ in range(1000):
        seconds = 0.8 if gov.current == 1 else 1.8
        m.now += seconds
        if gov.step(seconds, seconds * 1.0) == 2:
            probes.append(m.now)
    assert gov.current == 1 and [c["why"] for c in gov.changes[:3]] == ["shared cores", "probe", "probe lost"]
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert len(probes) >= 3 and gaps[1] > 1.8 * gaps[0]  # 45 s, then 90 s, ...


def test_a_won_probe_keeps_the_chosen_count():
    m = Machine()
    gov = m.governor(threads=2, probe_every_s=20.0)
    m.run(gov, 8, 1.0, 1.0)
    assert gov.current == 1
    m.run(gov, 60, {1: 0.8, 2: 0.4}, 1.0)  # the other job has gone: at 2 threads 0.4 s a step
    assert gov.current == 2 and gov.changes[-1]["why"] == "probe"
    m.run(gov, 200, 0.4, 1.95)
    assert gov.current == 2 and len(gov.changes) == 2
    # a count that won with 1.3 cores is not lowered again for getting 1.3 cores
    m3 = Machine()
    g3 = m3.governor(threads=2, probe_every_s=20.0)
    m3.run(g3, 8, 1.0, 1.0)
    m3.run(g3, 60, {1: 1.0, 2: 0.8}, 1.0)  # the probe won with 2 threads at 0.8 s a step ...
    assert g3.current == 2
    m3.run(g3, 200, 0.8, 1.3)  # ... and 1.3 cores
    assert g3.current == 2


def test_idle_cores_start_a_probe_at_once_and_are_not_trusted_after_one_loses():
    m = Machine()
    gov = m.governor(threads=2, probe_every_s=1000.0)
    m.run(gov, 8, 1.0, 1.0)
    assert gov.current == 1
    m.idle = 1.0  # the other job ended: the next full window probes
    m.run(gov, 8, 0.8, 1.0)
    assert gov.current == 2 and gov.changes[-1]["why"] == "probe"
    m.run(gov, 20, 1.8, 1.0)  # but slower: the idle cores were someone else's (a container's host)
    assert gov.current == 1 and gov.changes[-1]["why"] == "probe lost"
    n = len(gov.changes)
    m.run(gov, 100, 0.8, 1.0)
    assert gov.current == 1 and len(gov.changes) == n  # idle cores no longer start probes


def test_one_thread_and_bad_arguments():
    m = Machine()
    gov = m.governor(threads=1)
    assert m.run(gov, 50, 1.0, 0.1) == [] and m.set == []
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"):
        ThreadGovernor(0)
    with pytest.raises(ValueError, match="share must be in"):
        ThreadGovernor(2, share=1.5)


def test_a_training_run_lowers_and_restores_torch_threads(tmp_path, monkeypatch):
    """A real run on 2 threads whose governor is told to lower at the first judged step: torch runs on 1
    thread while it trains, the log says why, and the run's 2 threads are back after it."""
    seen = []

    def governor(n):
        return ThreadGovernor(n, share=1.0, window_s=1e-9, min_steps=1, skip=0, idle_cores=lambda: None)

    monkeypatch.setattr(trainer_module, "ThreadGovernor", governor)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(m, batch):
        seen.append(torch.get_num_threads())
        x, y = batch
        return F.cross_entropy(m(x), y, reduction="sum"), y.numel(), {}

    before = torch.get_num_threads()
    try:
        run = RunConfig(out_dir=str(tmp_path / "r"), max_steps=6, threads=2, log_every=1, progress=False, device=None)
        run.start()
        Trainer(model, opt, run, loss_fn=loss_fn, train_batches=ListBatches(toy_batches(5))).fit()
        after = torch.get_num_threads()
        log = [json.loads(line) for line in (tmp_path / "r" / "train_log.jsonl").read_text().splitlines()]
        off = RunConfig(
            out_dir=str(tmp_path / "o"), max_steps=1, threads=2, adapt_threads=False, progress=False, device=None
        )
        assert (
            Trainer(model, opt, off, loss_fn=loss_fn, train_batches=ListBatches(toy_batches(5)))._thread_governor()
            is None
        )
    finally:
        torch.set_num_threads(before)
    assert seen[0] == 2 and seen[-1] == 1 and after == 2
    events = [r for r in log if r["event"] == "threads"]
    assert events and events[0]["from"] == 2 and events[0]["to"] == 1 and events[0]["why"] == "shared cores"
