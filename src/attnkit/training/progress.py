"""The training log and the progress line of a :class:`~attnkit.training.Trainer` run.

Rank 0 writes one JSON object per line to ``out_dir/train_log.jsonl`` (``start``/``resume``, ``train``
every ``log_every`` steps, ``valid``, ``schedule``, ``checkpoint``, ``warning``, ``end``) and, when
``progress`` is on, draws a tqdm bar whose postfix shows the window's mean loss, tokens/s, the epoch, the
learning rate, the last validation score (and the best) and the steps the budget is expected to leave.
:func:`run_totals` reads a finished run's log back.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["LOG_NAME", "RunStats", "run_totals"]

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


class ProgressMixin:
    """The :class:`~attnkit.training.Trainer`'s log lines and progress bar (reads the trainer's counters)."""

    def _log(self, record: dict) -> None:
        """Append ``record`` (stamped with the wall time) to the run's log, flushed at once (rank 0 only)."""
        if not self.is_main or self._log_file is None:
            return
        record = {"time": round(time.time(), 3), **record}
        self._log_file.write(json.dumps(record, default=float) + "\n")
        self._log_file.flush()

    def _progress_bar(self):
        """A tqdm bar over the steps this run will take (rank 0, when ``progress``), or None."""
        if not (self.run.progress and self.is_main):
            return None
        from tqdm import tqdm

        spe = self._steps_per_epoch()
        total = None if spe is None else spe * self.run.epochs
        if self.run.max_steps is not None:
            total = self.run.max_steps if total is None else min(total, self.run.max_steps)
        return tqdm(total=total, initial=self.step, unit="step", dynamic_ncols=True, file=sys.stderr)

    def _log_window(self, stats: RunStats, grad_norm: float | None, pbar) -> None:
        """One ``train`` line of the log (the mean loss and tokens/s since the last one)."""
        now = time.perf_counter()
        rec = {
            "event": "train",
            "step": self.step,
            "epoch": self.epoch,
            "loss": stats.win_loss / max(stats.win_tokens, 1),
            "tokens_per_s": stats.win_tokens / max(now - stats.win_t, 1e-9),
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": grad_norm,
            **{k: v / stats.win_steps for k, v in stats.win_metrics.items()},
        }
        if self.run.max_time_s is not None and self.estimated_steps is not None:
            rec["estimated_steps"] = self.estimated_steps  # the budget's estimate as it moves
        self._log(rec)
        if pbar is not None:
            pbar.set_postfix(self._postfix(rec), refresh=False)
        stats.new_window(now)

    def _postfix(self, rec: dict) -> dict:
        """The progress line's fields: loss, tokens/s, epoch, lr, the last validation's score (and the best),
        and the steps the budget is expected to leave."""
        post = {"loss": f"{rec['loss']:.4f}", "tok_s": f"{rec['tokens_per_s']:.0f}", "epoch": self.epoch}
        post["lr"] = f"{rec['lr']:.2e}"
        if self._last_valid is not None and self.metric_for_best in self._last_valid:
            value = self._last_valid[self.metric_for_best]
            post[self.metric_for_best] = f"{value:.4g} (best {self.best_metric:.4g})"
        if self.estimated_steps is not None:
            post["steps_left"] = max(self.estimated_steps - self.step, 0)
        return post
