"""Parts of a corpus job: which lines each rank does, where each part's output goes, resume, assembly.

The input's lines are cut into parts of ``part_lines`` lines; part ``p`` belongs to rank
``p % world_size`` (round robin, so ranks finish together). Each part's output is written
atomically (temp file + ``os.replace``, :mod:`attnkit.paths`) as ``part-NNNNNN.out``: a part file
that exists is complete. A part may also carry a few counts (``part-NNNNNN.json``, written before
its ``.out``: lines skipped, say), which :meth:`PartStore.totals` sums over the finished parts, so a
resumed job reports the whole job's counts and not only this run's. The job folder's ``job.json``
(the manifest) records the job's key (the command's options and the input's identity) and the plan; a rerun with the same key reuses the
finished parts and redoes only the missing ones, a rerun with a different key is refused rather
than mixing outputs. Rank 0 assembles the output by concatenating the parts in input order, so
the result is byte-identical to one process writing the same lines.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnkit.paths import atomic_write_bytes, atomic_write_text, atomic_writer

__all__ = ["PartFailed", "PartPlan", "PartStore", "auto_part_lines", "lines_done"]

MANIFEST = "job.json"


class PartFailed(RuntimeError):
    """A part's work raised: names the part and its first line (1-based, as users count lines)."""


#: A job of unknown size is cut into about this many parts, so that every rank of a split job gets several
#: (round robin deals them; a command's parts of sorted lines grow longer from one part to the next).
AUTO_PARTS = 32
AUTO_PART_CAP = 1024


def auto_part_lines(n_lines: int, unit: int = 1, cap: int = AUTO_PART_CAP) -> int:
    """The lines a part holds when the command is not told (``--part-lines`` not given): about
    ``n_lines / AUTO_PARTS``, rounded up to a multiple of ``unit`` (a command's batching unit), at least one
    unit and at most ``cap`` rounded up to one. It depends on the input's size only, not on the number of
    processes, so a job resumes with another number of processes on the same parts."""
    if not isinstance(n_lines, int) or n_lines < 0:
        raise ValueError(f"n_lines must be an int >= 0, got {n_lines!r}")
    if not isinstance(unit, int) or unit < 1:
        raise ValueError(f"unit must be an int >= 1, got {unit!r}")
    units = max(1, -(-n_lines // (AUTO_PARTS * unit)))
    return min(units, max(1, -(-cap // unit))) * unit


@dataclass(frozen=True)
class PartPlan:
    """How ``n_lines`` lines are cut into parts of ``part_lines`` and dealt to ``world_size`` ranks."""

    n_lines: int
    part_lines: int = 1000
    world_size: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.n_lines, int) or self.n_lines < 0:
            raise ValueError(f"n_lines must be an int >= 0, got {self.n_lines!r}")
        if not isinstance(self.part_lines, int) or self.part_lines < 1:
            raise ValueError(f"part_lines must be an int >= 1, got {self.part_lines!r}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {self.world_size!r}")

    @property
    def n_parts(self) -> int:
        return -(-self.n_lines // self.part_lines)

    def part_range(self, part: int) -> tuple[int, int]:
        """Lines ``[start, stop)`` (0-based) of ``part``."""
        if not 0 <= part < self.n_parts:
            raise ValueError(f"part must be in 0..{self.n_parts - 1}, got {part}")
        start = part * self.part_lines
        return start, min(start + self.part_lines, self.n_lines)

    def parts_of_rank(self, rank: int) -> list[int]:
        """The parts rank ``rank`` does, in input order (round robin)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1}, got {rank}")
        return list(range(rank, self.n_parts, self.world_size))


class PartStore:
    """The folder of one job's part files and manifest (``job.json``)."""

    def __init__(self, folder: str | os.PathLike, key: dict, plan: PartPlan):
        self.folder = Path(folder)
        self.key = key
        self.plan = plan

    def _manifest(self) -> dict:
        # world_size is left out: a job may resume with a different number of ranks
        return {"key": self.key, "n_lines": self.plan.n_lines, "part_lines": self.plan.part_lines}

    def open(self) -> None:
        """Write the manifest, or check it against this job's (rank 0, before the others start).

        Raises ``ValueError`` if the folder holds parts of a different job (other options or input).
        """
        path = self.folder / MANIFEST
        want = self._manifest()
        if path.is_file():
            have = json.loads(path.read_text(encoding="utf-8"))
            if have != json.loads(json.dumps(want)):
                raise ValueError(
                    f"{self.folder} holds the parts of a different job (other options or input); "
                    "use another output or remove that folder"
                )
            return
        atomic_write_text(path, json.dumps(want, sort_keys=True, indent=1))

    def part_path(self, part: int) -> Path:
        return self.folder / f"part-{part:06d}.out"

    def counts_path(self, part: int) -> Path:
        return self.folder / f"part-{part:06d}.json"

    def is_done(self, part: int) -> bool:
        return self.part_path(part).is_file()

    def run_rank(
        self,
        rank: int,
        read: Callable[[int, int], list],
        work: Callable[[list], bytes | tuple[bytes, dict]],
        on_part: Callable[[int, int], None] | None = None,
    ) -> list[int]:
        """Do rank ``rank``'s unfinished parts; return the parts it did (finished ones are skipped).

        ``read(start, stop)`` gives a part's lines, ``work(lines)`` its output bytes, or
        ``(bytes, counts)`` with ``counts`` a dict of ints kept beside the part (:meth:`totals`);
        ``on_part(part, n_lines)`` is called after each part is written (progress).
        """
        done = []
        for part in self.plan.parts_of_rank(rank):
            if self.is_done(part):
                continue
            start, stop = self.plan.part_range(part)
            try:
                result = work(read(start, stop))
            except Exception as e:
                raise PartFailed(f"part {part + 1} (lines {start + 1}-{stop}) failed: {e}") from e
            data, counts = result if isinstance(result, tuple) else (result, None)
            if counts is not None:  # before the .out: a finished part always has its counts
                atomic_write_text(self.counts_path(part), json.dumps(counts, sort_keys=True))
            atomic_write_bytes(self.part_path(part), data)
            done.append(part)
            if on_part is not None:
                on_part(part, stop - start)
        return done

    def totals(self) -> dict[str, int]:
        """The counts of every finished part that has them, summed key by key."""
        out: dict[str, int] = {}
        for part in range(self.plan.n_parts):
            path = self.counts_path(part)
            if self.is_done(part) and path.is_file():
                for k, v in json.loads(path.read_text(encoding="utf-8")).items():
                    out[k] = out.get(k, 0) + int(v)
        return out

    def remove(self) -> None:
        """Delete this job's part files, their counts and the manifest (only those: the folder is
        removed only if nothing else is left in it), once the output is assembled."""
        for part in range(self.plan.n_parts):
            for path in (self.part_path(part), self.counts_path(part)):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.folder / MANIFEST).unlink()
        for leftover in self.folder.glob(".part-*.tmp"):  # a write of ours cut short by a kill
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    def missing(self) -> list[int]:
        return [p for p in range(self.plan.n_parts) if not self.is_done(p)]

    def assemble(self, output: str | os.PathLike) -> Path:
        """Concatenate every part in input order into ``output``, atomically and streaming (rank 0)."""
        if missing := self.missing():
            raise ValueError(f"cannot assemble {output}: parts {[p + 1 for p in missing[:5]]} are not finished")
        output = Path(output)
        with atomic_writer(output) as out:
            for part in range(self.plan.n_parts):
                with open(self.part_path(part), "rb") as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
        return output


def lines_done(folder: str | os.PathLike) -> tuple[int, int] | None:
    """``(lines in finished parts, lines of the job)`` of the job in ``folder``, read from its manifest
    and the part files there (any rank's, on any node sharing the folder); None before the manifest
    is written. What rank 0's progress bar polls."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        names = [e.name for e in os.scandir(folder)]
    except (OSError, ValueError):
        return None
    plan = PartPlan(int(manifest["n_lines"]), int(manifest["part_lines"]))
    done = 0
    for name in names:
        if name.startswith("part-") and name.endswith(".out") and name[5:-4].isdigit():
            part = int(name[5:-4])
            if part < plan.n_parts:
                start, stop = plan.part_range(part)
                done += stop - start
    return done, plan.n_lines
