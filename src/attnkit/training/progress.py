"""The training log and the progress line of a :class:`~attnkit.training.Trainer` run.

Rank 0 writes one JSON object per line to ``out_dir/train_log.jsonl`` (``start``/``resume``, ``train``
every ``log_every`` steps, ``valid``, ``schedule``, ``checkpoint``, ``warning``, ``end``) and, when
``progress`` is on, draws a tqdm bar whose postfix shows the window's mean loss, tokens/s, the epoch, the
learning rate, the last validation score (and the best) and the steps the budget is expected to leave.
:class:`RunLog` holds both; :func:`run_totals` reads a finished run's log back.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = ["LOG_NAME", "RunLog", "RunStats", "run_totals"]

LOG_NAME = "train_log.jsonl"


def run_totals(out_dir) -> dict:
    """A whole run's training facts from its ``train_log.jsonl``: every ``end`` event counts (a resumed
    run has one per piece), so ``tokens_per_s`` = all target tokens / all training seconds.
    ``valid_s`` sums the validations' seconds (logged since 2026-11-27; 0 in older logs) and
    ``tokens_per_step_s`` leaves them out: the rate of the training steps alone, to set beside a peer
    that does not validate. ``steps``, ``epochs`` and ``best_metric`` are the last piece's."""
    path = Path(out_dir) / LOG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"out_dir: {out_dir} has no {LOG_NAME} (not a training run folder)")
    events = [json.loads(line) for line in path.read_text().splitlines()]
    ends = [e for e in events if e.get("event") == "end"]
    time_s, tokens = sum(e["time_s"] for e in ends), sum(e["tokens"] for e in ends)
    valid_s = sum(e.get("valid_s", 0.0) for e in events if e.get("event") == "valid")
    last = ends[-1] if ends else {}
    return {
        "time_s": time_s,
        "tokens": tokens,
        "tokens_per_s": tokens / time_s if time_s > 0 else None,
        "valid_s": valid_s,
        "tokens_per_step_s": tokens / (time_s - valid_s) if time_s > valid_s else None,
        "steps": last.get("steps"),
        "epochs": last.get("epochs"),
        "best_metric": last.get("best_metric"),
    }


@dataclasses.dataclass
class RunStats:
    """Counters of one ``fit`` call: its start, its tokens, and the window since the last log line."""

    t0: float
    tokens: int = 0
    win_loss: float = 0.0
    win_tokens: int = 0
    win_steps: int = 0
    win_metrics: dict = dataclasses.field(default_factory=dict)
    win_t: float = 0.0

    def __post_init__(self) -> None:
        self.win_t = self.t0

    def add(self, loss_sum: float, n_tokens: int, metrics: Mapping) -> None:
        self.tokens += n_tokens
        self.win_loss += loss_sum
        self.win_tokens += n_tokens
        self.win_steps += 1
        for k, v in metrics.items():
            self.win_metrics[k] = self.win_metrics.get(k, 0.0) + float(v)

    def new_window(self, now: float) -> None:
        self.win_loss, self.win_tokens, self.win_steps, self.win_t, self.win_metrics = 0.0, 0, 0, now, {}


@dataclasses.dataclass
class RunLog:
    """The run's JSON-lines log and its progress bar: rank 0 opens both; on the other ranks they stay None
    and every method does nothing. The trainer passes in what a line says (this class reads no trainer)."""

    file: TextIO | None = None  # out_dir/train_log.jsonl, open (appending) from the start of ``fit`` to its end
    bar: Any = None  # the tqdm bar over the run's steps (rank 0 with ``run.progress``), or None

    def open(self, path: Path) -> None:
        """Open the log for the whole run (each record is flushed as it is written; :meth:`close` ends it)."""
        self.file = open(path, "a")  # noqa: SIM115

    def write(self, record: dict) -> None:
        """Append ``record`` (stamped with the wall time) to the log, flushed at once (rank 0 only)."""
        if self.file is None:
            return
        record = {"time": round(time.time(), 3), **record}
        self.file.write(json.dumps(record, default=float) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def open_bar(self, total: int | None, initial: int) -> None:
        """Draw a tqdm bar over ``total`` steps (None: unknown), ``initial`` of them made (a resumed run)."""
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def advance(self) -> None:
        """One more step made."""
        if self.bar is not None:
            self.bar.update(1)

    def set_total(self, total: int) -> None:
        """The steps the run is now expected to take (a budget's estimate moves)."""
        if self.bar is not None and self.bar.total != total:
            self.bar.total = total

    def say(self, text: str) -> None:
        """A line above the bar (a validation's scores); nothing without a bar."""
        if self.bar is not None:
            self.bar.write(text)

    def log_window(
        self,
        stats: RunStats,
        *,
        step: int,
        epoch: int,
        lr: float,
        grad_norm: float | None,
        estimated_steps: int | None,
        timed: bool,
        last_valid: Mapping[str, float] | None,
        metric_for_best: str,
        best_metric: float | None,
    ) -> None:
        """One ``train`` line (the mean loss and tokens/s since the last one, ``stats``'s window), and the
        progress line's fields; then a new window. ``estimated_steps`` (the steps the budget is expected to
        reach) is logged in a run with a time budget (``timed``) and shown as the steps left whenever known."""
        now = time.perf_counter()
        rec = {
            "event": "train",
            "step": step,
            "epoch": epoch,
            "loss": stats.win_loss / max(stats.win_tokens, 1),
            "tokens_per_s": stats.win_tokens / max(now - stats.win_t, 1e-9),
            "lr": lr,
            "grad_norm": grad_norm,
            **{k: v / stats.win_steps for k, v in stats.win_metrics.items()},
        }
        if timed and estimated_steps is not None:
            rec["estimated_steps"] = estimated_steps  # the budget's estimate as it moves
        self.write(rec)
        if self.bar is not None:
            post = {"loss": f"{rec['loss']:.4f}", "tok_s": f"{rec['tokens_per_s']:.0f}", "epoch": epoch}
            post["lr"] = f"{rec['lr']:.2e}"
            if last_valid is not None and metric_for_best in last_valid:
                value = last_valid[metric_for_best]
                post[metric_for_best] = f"{value:.4g} (best {best_metric:.4g})"
            if estimated_steps is not None:
                post["steps_left"] = max(estimated_steps - step, 0)
            self.bar.set_postfix(post, refresh=False)
        stats.new_window(now)
