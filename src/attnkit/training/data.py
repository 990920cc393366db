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
Under DDP every rank walks the same full order and keeps batches ``i % world_size == rank``
(:meth:`Batches.shard` makes only those, so each rank reads only its share of the data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["Batches", "ListBatches", "shuffled"]


def shuffled(n: int, seed: int, epoch: int) -> list[int]:
    """A permutation of ``range(n)`` that is a pure function of ``(seed, epoch)`` (a private
    generator: the global RNG is untouched)."""
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=g).tolist()


class Batches:
    """The resumable batch source: every task's training and validation batches come through it.

    ``plan(epoch) -> list of index groups`` says which examples make each batch of ``epoch``, in
    visiting order (a pure function of the epoch, so a resumed run sees the same order);
    ``make(indices, epoch, i) -> batch`` builds batch ``i`` from its group (collate, paste images).
    This class keeps the position: it hands out batches from the saved position on, advancing
    before each ``yield``, and saves/restores ``{"epoch", "position"}`` plus a ``fingerprint``
    (e.g. the data size, the shuffle seed) that must match on resume.
    """

    def __init__(
        self,
        plan: Callable[[int], Sequence[Sequence[int]]],
        make: Callable[[Sequence[int], int, int], Any],
        *,
        fingerprint: dict | None = None,
    ):
        if not callable(plan) or not callable(make):
            raise TypeError("Batches: plan and make must be callables")
        self.plan, self.make = plan, make
        self.fingerprint = dict(fingerprint or {})
        self.epoch = 0
        self.position = 0
        self._planned: tuple[int, Sequence[Sequence[int]]] | None = None

    def batches(self, epoch: int) -> Sequence[Sequence[int]]:
        """The index groups of ``epoch`` (planned once per epoch)."""
        if self._planned is None or self._planned[0] != epoch:
            self._planned = (epoch, self.plan(epoch))
        return self._planned[1]

    def __len__(self) -> int:
        return len(self.batches(self.epoch))

    def __iter__(self) -> Iterator[Any]:
        groups = self.batches(self.epoch)
        while self.position < len(groups):
            i = self.position
            self.position += 1  # counted as handed out before the trainer uses it
            yield self.make(groups[i], self.epoch, i)

    def shard(self, rank: int, world_size: int) -> Iterator[Any]:
        """Rank ``rank``'s share of the rest of the epoch: batch ``rank`` of every group of
        ``world_size`` (the last incomplete group is skipped, so every rank takes as many steps).
        Only this rank's batches are made (read, collated); the position advances by a whole
        group before each ``yield``, exactly as iterating every batch and keeping this rank's."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        groups = self.batches(self.epoch)
        while self.position + world_size <= len(groups):
            i = self.position + rank
            self.position += world_size
            yield self.make(groups[i], self.epoch, i)
        self.position = len(groups)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        self.epoch, self.position = int(epoch), 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, **self.fingerprint}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict):
            raise TypeError(f"batch source state must be a dict, got {type(state).__name__}")
        missing = {"epoch", "position"} - state.keys()
        if missing:
            raise ValueError(f"batch source state is missing {sorted(missing)}")
        for k, v in self.fingerprint.items():
            if state.get(k, v) != v:
                raise ValueError(f"batch source state was saved with {k}={state.get(k)!r}, this one has {v!r}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


class ListBatches(Batches):
    """Ready-made batches: each epoch visits all of them, shuffled from ``(shuffle_seed, epoch)``,
    or in list order when ``shuffle_seed`` is None."""

    def __init__(self, batches: Sequence[Any], shuffle_seed: int | None = None):
        if not isinstance(batches, Sequence) or isinstance(batches, (str, bytes)):
            raise TypeError(f"ListBatches: batches must be a sequence, got {type(batches).__name__}")
        if len(batches) == 0:
            raise ValueError("ListBatches: batches must not be empty")
        if shuffle_seed is not None and not isinstance(shuffle_seed, int):
            raise TypeError(f"ListBatches: shuffle_seed must be an int or None, got {type(shuffle_seed).__name__}")
        items = list(batches)
        n = len(items)
        super().__init__(
            lambda e: [[i] for i in (range(n) if shuffle_seed is None else shuffled(n, shuffle_seed, e))],
            lambda idx, e, i: items[idx[0]],
            fingerprint={"shuffle_seed": shuffle_seed},
        )
        self.shuffle_seed = shuffle_seed

    def order(self, epoch: int) -> list[int]:
        """The batch indices of ``epoch`` in visiting order."""
        return [g[0] for g in self.batches(epoch)]
