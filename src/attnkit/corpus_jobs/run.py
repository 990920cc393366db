"""Run one corpus job on every rank of a ``torchrun`` launch (or in one process): the part loop and the gather.

Rank 0 builds the input's line index and writes (or checks) the manifest; the other ranks wait on
a barrier, then open the same index. Each rank does its unfinished parts; the ranks then exchange
their errors (``all_gather_object``), so a rank that failed stops the whole job with its message
(the part and its lines) on every rank; otherwise rank 0 assembles the output in input order.
Without an initialised ``torch.distributed`` group it is the same job on one rank. The group's
backend (gloo on CPU; nccl with one device a rank) is the launcher's choice: only the barrier and
one object gather are used here, and only gloo is tested.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from attnkit.corpus_jobs.line_index import input_identity, open_line_index
from attnkit.corpus_jobs.parts import PartFailed, PartPlan, PartStore

__all__ = ["run_job"]


def _group() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def run_job(
    input_path: str | os.PathLike,
    output: str | os.PathLike,
    job_dir: str | os.PathLike,
    options: dict,
    work: Callable[[list[str]], bytes],
    part_lines: int = 1000,
    on_part: Callable[[int, int], None] | None = None,
) -> list[int]:
    """Do this rank's share of ``work`` over the lines of ``input_path``; rank 0 writes ``output``.

    ``options`` (JSON-able) names everything that changes the output (the command and its flags);
    with the input's identity it is the key a rerun must match to reuse finished parts.
    Returns the parts (0-based) this rank did in this run. Raises :class:`PartFailed` on every rank
    when any rank failed.
    """
    rank, world = _group()
    job_dir = Path(job_dir)
    if rank == 0:
        index = open_line_index(input_path, job_dir)
    _barrier(world)
    if rank != 0:
        index = open_line_index(input_path, job_dir)
    store = PartStore(
        job_dir, {"options": options, "input": input_identity(input_path)}, PartPlan(index.n_lines, part_lines, world)
    )
    if rank == 0:
        store.open()
    _barrier(world)
    error, done = None, []
    try:
        done = store.run_rank(rank, index.read_lines, work, on_part)
    except PartFailed as e:
        error = f"rank {rank}: {e}"
    errors = [error]
    if world > 1:
        import torch.distributed as dist

        errors = [None] * world
        dist.all_gather_object(errors, error)
    if failed := [e for e in errors if e]:
        raise PartFailed("; ".join(failed))
    if rank == 0:
        store.assemble(output)
    _barrier(world)
    return done
