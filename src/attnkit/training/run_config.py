"""The options of one training run that every task shares: :class:`RunConfig`.

Each task config (translation, captioning, classification) nests one ``RunConfig`` as its ``run``
field, with the task's own defaults (:func:`run_options`), and :class:`attnkit.training.Trainer`
takes it. A new run option is one field here: every task's command line (``--name``, through
:func:`attnkit.cli.options.add_config_arguments`, which flattens nested configs), its saved
``train_config.json`` and the trainer get it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..checks import FRACTION, LAYERS, LOSS_WEIGHT, POSITIVE, SECONDS, SEED, STEPS, THREADS, between, check_fields
from ..config import option

__all__ = ["RunConfig", "TaskConfig", "run_options"]

PRECISIONS = ("fp32", "bf16", "fp16", "auto")


@dataclass
class RunConfig:
    """How long, where and how a training run goes, whatever it trains (see :class:`attnkit.training.Trainer`)."""

    out_dir: str | None = option(None, "checkpoint folder (default: the task's, under runs/)")
    epochs: int = option(10, "at most this many passes over the training data", check=STEPS)
    max_steps: int | None = option(None, "stop after this many optimizer steps", check=STEPS)
    max_time_s: float | None = option(None, "stop (with a checkpoint) after this many seconds", check=SECONDS)
    budget_shortfall: float = option(
        0.1,
        "with --max-time-s: say so (on stderr, in the log and in train_config.json) when the run makes more than "
        "this share fewer steps than it first planned (a slower machine, or another job sharing it)",
        check=FRACTION,
    )
    patience: int | None = option(
        None, "stop after this many validations without a better validation score", check=STEPS
    )
    valid_every_epochs: int = option(
        1,
        "validate at the end of every this many epochs; 0: never at an epoch's end, and with no "
        "--valid-every-steps the run never validates (no best checkpoint, --patience never stops it: its "
        "last step is its result, as a peer's that does not validate)",
        check=between(0, 1_000_000_000, integer=True),
    )
    valid_every_steps: int | None = option(
        None,
        "also validate every this many steps (default: only at the epoch ends --valid-every-epochs picks); "
        "each validation shows its score on the progress line and takes time from a --max-time-s budget",
        check=STEPS,
    )
    save_every_steps: int = option(500, "write a step checkpoint this often", check=STEPS)
    keep_last: int = option(3, "step checkpoints kept (keep at least K for export --average-last K)", check=LAYERS)
    clip_grad_norm: float = option(1.0, "clip the gradient norm to this (0: no clipping)", check=LOSS_WEIGHT)
    seed: int = option(0, "random seed (weights, batches, dropout, sampling)", check=SEED)
    threads: int | None = option(None, "torch CPU threads (default: torch's choice)", check=THREADS)
    adapt_threads: bool = option(
        True,
        "on a CPU, use fewer threads while another job shares the cores and the chosen number again when they "
        "are free (measured from the cores each step gets; see attnkit.training.threads)",
    )
    device: str | None = option(
        "auto", "where to train: auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps"
    )  # None (from code only): where the model's parameters already are
    precision: str = option(
        "fp32",
        "training precision: fp32, bf16 or fp16 (autocast; fp32 master weights), "
        "or auto (bf16 where it is measured faster)",
        choices=PRECISIONS,
    )
    log_every: int = option(20, "steps between log lines", cli=False, check=POSITIVE)
    progress: bool = option(True, "show a progress bar", cli=False)

    def __post_init__(self) -> None:
        check_fields(self)

    def start(self) -> None:
        """Set torch's CPU threads (when given) and seed torch: call right before the model is built, so
        its initial weights depend on ``seed`` only."""
        if self.threads:
            torch.set_num_threads(self.threads)
        torch.manual_seed(self.seed)


def run_options(help: str = "the training run's options", **defaults: Any) -> Any:
    """The ``run`` field of a task config: a :class:`RunConfig` whose defaults are ``defaults`` (a task's
    own, e.g. ``epochs=30``); ``--help`` shows them, and a flag not given keeps them."""
    return option(default_factory=lambda: RunConfig(**defaults), help=help, cli=False, overrides=defaults)


class TaskConfig:
    """Base of the task configs (dataclasses with a ``run`` field made by :func:`run_options`); the command
    line builds one from its flags (:func:`attnkit.cli.options.task_config_from_args`)."""

    run: RunConfig
