"""Small helpers for ``torchrun`` (DDP on CPU with the gloo backend, or NCCL on GPUs).

``torchrun --nproc_per_node=N script.py`` sets ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_distributed` reads them. Without them everything
here degrades to the single-process answers (rank 0 of 1), so the same script runs both ways.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "all_gather_object",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "cleanup",
    "init_distributed",
    "is_distributed",
    "is_main_process",
    "local_rank",
    "rank",
    "world_size",
]


def init_distributed(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; returns ``(rank, world_size)``.

    Does nothing (returns ``(0, 1)``) when ``WORLD_SIZE`` is unset or 1, and nothing new when the
    group is already initialised. ``backend`` defaults to ``"gloo"`` (CPU); pass ``"nccl"`` for GPUs.
    ``timeout_s``: how long a collective waits for the slowest rank (PyTorch's default when
    None); a job whose ranks wait for one rank's pass over a whole input needs longer.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    ws = int(os.environ.get("WORLD_SIZE", "1"))
    if ws <= 1:
        return 0, 1
    if not dist.is_available():
        raise RuntimeError("init_distributed: WORLD_SIZE > 1 but torch.distributed is not available in this build")
    kwargs = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    dist.init_process_group(backend=backend or "gloo", init_method="env://", **kwargs)
    return dist.get_rank(), dist.get_world_size()


def is_distributed() -> bool:
    """True inside an initialised process group with more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """Rank 0 (or a single process): the one that writes checkpoints, logs and progress bars."""
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over ranks in place (identity in a single process) and return it."""
    if is_distributed():
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s picklable ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj: Any) -> list[Any]:
    """A list with every rank's ``obj``, in rank order."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def cleanup() -> None:
    """Destroy the process group if one is initialised."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
