"""Run one corpus job on every rank of a ``torchrun`` launch (or in one process): the part loop and the gather.

Rank 0 builds the input's line index (one per input file: a job may read line-parallel files, as
``attnkit align`` reads a source and a target file) and writes (or checks) the manifest; the other
ranks wait, then open the same index. A setup error on rank 0 (an input missing, files of different
lengths, a folder holding another job) is sent to every rank, so all stop with it rather than wait.
Each rank does its unfinished parts; the ranks then exchange their errors (``all_gather_object``),
so a rank that failed stops the whole job with its message (the part and its lines) on every rank;
otherwise rank 0 assembles the output in input order. Without an initialised ``torch.distributed``
group it is the same job on one rank. The group's backend (gloo on CPU; nccl with one device a rank)
is the launcher's choice: only object collectives are used here, and only gloo is tested.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from attnkit.corpus_jobs.line_index import LineIndex, input_identity, open_line_index, remove_line_index
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


def _from_rank0(world: int, error: str | None) -> str | None:
    """Rank 0's error message (None: none) on every rank; doubles as the barrier after rank 0's step."""
    if world == 1:
        return error
    import torch.distributed as dist

    box = [error]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _index_dirs(job_dir: Path, n_inputs: int) -> list[Path]:
    """One input: its index in the job folder itself; several: ``input-1``, ``input-2``, ... in it."""
    return [job_dir] if n_inputs == 1 else [job_dir / f"input-{k + 1}" for k in range(n_inputs)]


def _open_indexes(paths: list, job_dir: Path) -> list[LineIndex]:
    indexes = [open_line_index(p, d) for p, d in zip(paths, _index_dirs(job_dir, len(paths)))]
    counts = [ix.n_lines for ix in indexes]
    if len(set(counts)) > 1:
        told = " but ".join(f"{p} has {n} lines" for p, n in zip(paths, counts))
        raise ValueError(f"{told}: line-parallel inputs must have one line each, in the same order")
    return indexes


def _read_lines(indexes: Sequence[LineIndex], start: int, stop: int) -> list:
    """Lines ``[start, stop)``: strings for one input, tuples of line-parallel strings for several."""
    if len(indexes) == 1:
        return indexes[0].read_lines(start, stop)
    return list(zip(*(ix.read_lines(start, stop) for ix in indexes)))


def _remove_job(store: PartStore, job_dir: Path, n_inputs: int) -> None:
    """Delete the job's own files (parts, counts, manifest, line indexes) and then its folders if empty."""
    store.remove()
    dirs = _index_dirs(job_dir, n_inputs)
    for d in dirs:
        remove_line_index(d)
    for d in [*(dirs if n_inputs > 1 else []), job_dir]:
        with contextlib.suppress(OSError):  # a file of someone else's left in it: keep the folder
            d.rmdir()


def run_job(
    input_path: str | os.PathLike | Sequence[str | os.PathLike],
    output: str | os.PathLike,
    job_dir: str | os.PathLike,
    options: dict,
    work: Callable[[list], bytes | tuple[bytes, dict]],
    part_lines: int | Callable[[int], int] = 1000,
    on_part: Callable[[int, int], None] | None = None,
    *,
    read: Callable[[Sequence[LineIndex], int, int], list] | None = None,
    on_assembled: Callable[[PartStore], None] | None = None,
    clean: bool = False,
) -> list[int]:
    """Do this rank's share of ``work`` over the lines of ``input_path``; rank 0 writes ``output``.

    ``input_path``: one file, or a list of line-parallel files (``work`` then gets tuples of lines).
    ``options`` (JSON-able) names everything that changes the output (the command and its flags);
    with the inputs' identities it is the key a rerun must match to reuse finished parts.
    ``read(indexes, start, stop)`` replaces the plain reading of lines ``[start, stop)`` (a command
    that decodes and numbers its lines itself). ``work`` returns a part's bytes, or ``(bytes, counts)``
    (:meth:`PartStore.run_rank`). ``part_lines`` may be a function of the input's number of lines (called
    on every rank once the line index is open). On rank 0, after the assembly, ``on_assembled(store)`` (read the
    summed counts, copy the output on) and, with ``clean``, the job's files are deleted.
    Returns the parts (0-based) this rank did in this run. Raises :class:`PartFailed` on every rank
    when any rank failed, and rank 0's setup or assembly error (``ValueError`` on the other ranks).
    """
    rank, world = _group()
    paths = [input_path] if isinstance(input_path, (str, os.PathLike)) else list(input_path)
    job_dir = Path(job_dir)

    def setup() -> tuple[list[LineIndex], dict]:
        indexes = _open_indexes(paths, job_dir)
        idents = [input_identity(p) for p in paths]
        return indexes, {"options": options, "input": idents[0] if len(paths) == 1 else idents}

    def plan(indexes: list[LineIndex]) -> PartPlan:
        n = indexes[0].n_lines
        return PartPlan(n, part_lines(n) if callable(part_lines) else part_lines, world)

    if rank == 0:
        failure = None
        try:
            indexes, key = setup()
            PartStore(job_dir, key, plan(indexes)).open()
        except (ValueError, OSError) as e:
            failure = e
        _from_rank0(world, None if failure is None else str(failure))
        if failure is not None:
            raise failure
    else:
        if (told := _from_rank0(world, None)) is not None:
            raise ValueError(told)
        indexes, key = setup()
    store = PartStore(job_dir, key, plan(indexes))
    reader = read or _read_lines
    error, done = None, []
    try:
        done = store.run_rank(rank, lambda start, stop: reader(indexes, start, stop), work, on_part)
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
        failure = None
        try:
            store.assemble(output)
            if on_assembled is not None:
                on_assembled(store)
            if clean:
                _remove_job(store, job_dir, len(paths))
        except Exception as e:
            failure = e
        _from_rank0(world, None if failure is None else f"rank 0: {failure}")
        if failure is not None:
            raise failure
    elif (told := _from_rank0(world, None)) is not None:
        raise ValueError(told)
    return done
