"""Resumable batch sources for :class:`attnkit.training.Trainer`.

The trainer needs more than an iterable: to resume *exactly* it must save and restore where in
which epoch's order it stopped. Any object with this interface works::

    __iter__()            yields the batches of the current epoch, starting at the saved position
    set_epoch(epoch)      start epoch ``epoch`` from its first batch (the order may depend on it)
    state_dict() -> dict  {"epoch": ..., "position": ...} or anything torch.save-able with weights_only
    load_state_dict(d)    restore it; the next ``__iter__`` continues from there
    __len__()             optional: batches per epoch (gives the progress bar a total and an ETA)

The position must count batches *handed out* (advance before each ``yield``), so that a state
saved after the trainer has used batch ``i`` resumes at batch ``i + 1``.
Under DDP every rank iterates the same full order and keeps batches ``i % world_size == rank``.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch

__all__ = ["ListBatches"]


class ListBatches:
    """Reference resumable batch source over a list of ready-made batches.

    Each epoch visits every batch once, in an order that is a deterministic function of
    ``(shuffle_seed, epoch)`` (a private ``torch.Generator``, so the global RNG is untouched),
    or in list order when ``shuffle_seed`` is None.
    """

    def __init__(self, batches: Sequence[Any], shuffle_seed: int | None = None):
        if not isinstance(batches, Sequence) or isinstance(batches, (str, bytes)):
            raise TypeError(f"ListBatches: batches must be a sequence, got {type(batches).__name__}")
        if len(batches) == 0:
            raise ValueError("ListBatches: batches must not be empty")
        if shuffle_seed is not None and not isinstance(shuffle_seed, int):
            raise TypeError(f"ListBatches: shuffle_seed must be an int or None, got {type(shuffle_seed).__name__}")
        self.batches = list(batches)
        self.shuffle_seed = shuffle_seed
        self.epoch = 0
        self.position = 0

    def __len__(self) -> int:
        return len(self.batches)

    def order(self, epoch: int) -> list[int]:
        """The batch indices of ``epoch`` in visiting order."""
        n = len(self.batches)
        if self.shuffle_seed is None:
            return list(range(n))
        g = torch.Generator().manual_seed(self.shuffle_seed * 1_000_003 + epoch)
        return torch.randperm(n, generator=g).tolist()

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        self.epoch = int(epoch)
        self.position = 0

    def __iter__(self) -> Iterator[Any]:
        order = self.order(self.epoch)
        while self.position < len(order):
            i = order[self.position]
            self.position += 1
            yield self.batches[i]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "shuffle_seed": self.shuffle_seed}

    def load_state_dict(self, state: dict) -> None:
        if state.get("shuffle_seed", self.shuffle_seed) != self.shuffle_seed:
            raise ValueError(
                f"ListBatches.load_state_dict: state has shuffle_seed={state.get('shuffle_seed')}, "
                f"this source has {self.shuffle_seed}"
            )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
