"""A command over a corpus split across processes (data-parallel over ranks): ``--processes N``,
``torchrun``, ``--job-dir``.

``attnkit translate --file`` and ``attnkit align`` run their lines as a corpus job
(:mod:`attnkit.corpus_jobs`) when

- they run under ``torchrun`` (``WORLD_SIZE`` > 1, on one machine or many): each rank joins a gloo
  group, does its parts, and rank 0 writes the output in input order;
- ``--processes N`` is given: the command launches ``torchrun --standalone --nproc-per-node N`` on
  itself (the same command line without ``--processes``), each rank at ``threads / N`` threads;
- ``--job-dir DIR`` is given in one process: the same parts, one after the other, so an interrupted
  run resumes.

The job's parts, manifest and line indexes are kept in ``--job-dir`` (default: a folder under
``ATTNKIT_HOME/jobs`` named by a hash of the command's options and its inputs' identities, so
rerunning the same command on the same files resumes it) and deleted once the output is written.
Rank 0 shows the progress of all ranks (lines in finished parts, lines a second, time left) by
polling the part files, which every rank writes into that shared folder.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..checks import arg_type, between
from ..data.parallel import ParallelDataError, decode_lines
from ..paths import attnkit_home
from .common import CLIError

__all__ = [
    "JobError",
    "add_corpus_job_flags",
    "add_processes_flag",
    "corpus_job_wanted",
    "group_backend",
    "is_rank0",
    "job_options",
    "launch",
    "numbered_reader",
    "rank_device",
    "run_corpus_job",
    "start_group",
    "torchrun_world",
    "without_processes",
]

_NOT_OPTIONS = {"func", "processes", "job_dir", "no_progress", "argv", "report_time", "home"}
_TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


class JobError(CLIError):
    """An error of the whole job, told to every rank: only rank 0 prints it (``quiet`` on the others)."""

    def __init__(self, message: str, *, quiet: bool = False):
        super().__init__(message)
        self.quiet = quiet


def add_processes_flag(parser: argparse.ArgumentParser, unit: str, same: str = "the output is byte for byte") -> None:
    """``--processes N``: the command relaunched on N ranks (``unit``: what is split, for the help)."""
    parser.add_argument(
        "--processes",
        type=arg_type(between(2, 4096, integer=True), "processes"),
        default=None,
        help=f"split the {unit} over N processes on this machine (torchrun --standalone, each at threads/N "
        f"threads); {same} the one-process output (default: one process)",
    )


def add_corpus_job_flags(
    parser: argparse.ArgumentParser,
    unit: str,
    *,
    part_lines: int | None = None,
    same: str = "the output is byte for byte",
) -> None:
    """``--processes``, ``--part-lines`` (default ``part_lines``; None: sized by the input, see
    :func:`~attnkit.corpus_jobs.auto_part_lines`) and ``--job-dir`` (``unit``: what a line is,
    ``same``: what equals the one-process run, for the help)."""
    add_processes_flag(parser, unit, same)
    told = "about 1/32 of the input, at most 1,024" if part_lines is None else str(part_lines)
    parser.add_argument(
        "--part-lines",
        type=arg_type(between(1, 10_000_000, integer=True), "part lines"),
        default=part_lines,
        help=f"{unit} per part of a split job, the unit that is resumed and dealt to the processes (default: {told})",
    )
    parser.add_argument(
        "--job-dir",
        default=None,
        help="where a split job keeps its parts (reused by a rerun, deleted when done); in one process, run "
        "the job in parts there so that a rerun resumes it (default: under ATTNKIT_HOME/jobs)",
    )


def torchrun_world() -> int:
    """The number of ranks of the ``torchrun`` launch this process is a rank of (1 outside one)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def corpus_job_wanted(args) -> bool:
    """Whether this run is a corpus job here: under torchrun, or in one process with ``--job-dir``
    (``--processes`` is handled before, by :func:`launch`)."""
    return args.processes is None and (torchrun_world() > 1 or args.job_dir is not None)


def is_rank0() -> bool:
    """Whether this process is rank 0 of a torchrun launch (or a plain process): the one that reports."""
    return os.environ.get("RANK", "0") == "0"


def without_processes(argv: list[str]) -> list[str]:
    """``argv`` without ``--processes N`` / ``--processes=N`` (or an abbreviation argparse accepted)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        flag = a.split("=", 1)[0]
        if a.startswith("--pro") and "--processes".startswith(flag):
            skip = "=" not in a
            continue
        out.append(a)
    return out


def launch(argv: list[str], processes: int) -> int:
    """Run ``attnkit <argv without --processes>`` on ``processes`` ranks: forked from this process where
    :func:`~attnkit.cli.forked_ranks.can_fork_ranks` (CPUs on Linux), else with torchrun's launcher
    (``python -m torch.distributed.run --standalone --nproc-per-node N -m attnkit ...``, here in this
    process so that a failed rank is one line, not torchrun's traceback). Each rank gets
    ``threads / N`` threads (``OMP_NUM_THREADS`` if set, else the CPUs). Returns the exit status: the
    first failed rank's (its error is already on stderr), else 0."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", "")) or (os.cpu_count() or 1)
    except ValueError:
        threads = os.cpu_count() or 1
    from .forked_ranks import can_fork_ranks, fork_ranks

    if can_fork_ranks():  # the ranks start with this process's imports, not a new interpreter each
        return fork_ranks(without_processes(argv), processes, max(1, threads // processes))
    import logging

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    saved = {k: os.environ.get(k) for k in (*_TORCHRUN, "OMP_NUM_THREADS")}
    for k in _TORCHRUN:
        os.environ.pop(k, None)
    os.environ["OMP_NUM_THREADS"] = str(max(1, threads // processes))
    # torchrun's own reports (a failed rank, a signal), each logger with a level of its own: said here in one line
    names = ["torch.distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed."))]
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    # torchrun's agent sets its own handlers of these (to stop the ranks); a caller of main() gets its back
    signals = [getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n)]
    handlers = {sig: signal.getsignal(sig) for sig in signals}
    config = ["--standalone", "--nproc-per-node", str(processes), "-m", "attnkit", *without_processes(argv)]
    resume = "run the same command again to resume from the parts already written"
    try:
        run(get_args_parser().parse_args(config))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode < 0:
            print(f"attnkit: error: rank {rank} was stopped ({failure.signal_name()}); {resume}", file=sys.stderr)
            return 2
        return failure.exitcode
    except SignalException as exc:  # Ctrl-C or a kill of this launch: torchrun's agent stopped the ranks
        print(f"attnkit: interrupted ({exc.sigval.name}); {resume}", file=sys.stderr)
        return 130
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        for sig, handler in handlers.items():
            if handler is not None:
                with contextlib.suppress(ValueError):  # not the main thread: the agent could not set them either
                    signal.signal(sig, handler)
    return 0


#: How long a rank waits in a collective: the other ranks wait there while rank 0 indexes (and, for
#: ``translate --file``, sorts) the whole input once, which on a file of millions of lines outlasts
#: PyTorch's default timeout (``benchmarks/RESULTS.md``, "Corpus jobs: memory per rank").
GROUP_TIMEOUT_S = 7 * 24 * 3600.0


def rank_device(requested: str | None, local_rank: int, cuda_count: int) -> str:
    """The device one rank of a corpus job opens its model on: with ``--device cuda`` or ``auto`` (None) on a
    machine with ``cuda_count`` visible GPUs, ``cuda:{local_rank % cuda_count}`` (one GPU a rank, as
    torchrun's ``LOCAL_RANK`` numbers the ranks of a node); otherwise ``requested`` unchanged (``cpu``, ``mps``,
    a GPU named by its index, which every rank then shares; ``cuda`` without a GPU, which opening the model
    refuses in one line; ``auto`` without one). Pure: what it is given, not the machine, decides."""
    if not isinstance(local_rank, int) or isinstance(local_rank, bool) or local_rank < 0:
        raise ValueError(f"local_rank must be an int >= 0, got {local_rank!r}")
    if not isinstance(cuda_count, int) or isinstance(cuda_count, bool) or cuda_count < 0:
        raise ValueError(f"cuda_count must be an int >= 0, got {cuda_count!r}")
    if requested in (None, "auto", "cuda") and cuda_count > 0:
        return f"cuda:{local_rank % cuda_count}"
    return "auto" if requested is None else requested


def group_backend(requested: str | None, cuda_count: int) -> str:
    """The process group's backend for :func:`rank_device`'s choice: ``nccl`` when each rank has a GPU of its
    own (NCCL refuses two ranks on one GPU), ``gloo`` otherwise (CPU ranks, or every rank on the one GPU
    that ``--device cuda:N`` names; the job exchanges only small objects, which gloo carries as well)."""
    return "nccl" if requested in (None, "auto", "cuda") and cuda_count > 0 else "gloo"


def start_group(requested: str | None = "auto") -> str:
    """Join torchrun's process group and return the device this rank opens its model on
    (:func:`rank_device` of ``--device`` and ``LOCAL_RANK``), made the rank's current CUDA device before any
    model is loaded; collectives wait up to :data:`GROUP_TIMEOUT_S`. Call it before opening the model.
    Outside torchrun (one process): nothing is joined and ``requested`` is returned unchanged. Calling it
    again is harmless (the group is joined once)."""
    if torchrun_world() == 1:
        return requested
    import torch

    from ..training.distributed import init_distributed

    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = rank_device(requested, int(os.environ.get("LOCAL_RANK", "0")), cuda_count)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    init_distributed(group_backend(requested, cuda_count), timeout_s=GROUP_TIMEOUT_S)
    return device


def job_options(args, **extra) -> dict:
    """What names a job's output: the command's flags (not the ones that only say how it runs) and
    ``extra`` (the models' resolved folders), JSON-able."""
    opts = {k: v for k, v in vars(args).items() if k not in _NOT_OPTIONS}
    return json.loads(json.dumps({**opts, **extra}, sort_keys=True, default=str))


def _job_dir(args, command: str, options: dict, inputs: list[str]) -> Path:
    if args.job_dir is not None:
        return Path(args.job_dir)
    from ..corpus_jobs.line_index import input_identity

    key = json.dumps({"options": options, "inputs": [input_identity(p) for p in inputs]}, sort_keys=True)
    return attnkit_home(args.home) / "jobs" / f"{command}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def numbered_reader(names: list[str]) -> Callable:
    """``read(indexes, start, stop)`` for :func:`attnkit.corpus_jobs.run_job`: each input's lines
    ``[start, stop)`` as ``(line number from 1, text)``, decoded as ``read_lines`` decodes a whole
    file (UTF-8, no NUL, line 1 without its byte-order mark; an error names the file's own line)."""

    def read(indexes, start: int, stop: int) -> list:
        sides = []
        for ix, name in zip(indexes, names):
            raw = ix.read_bytes(start, stop)
            pieces = raw.split(b"\n")
            if raw.endswith(b"\n"):
                pieces.pop()
            raws = [p + b"\n" for p in pieces[:-1]] + pieces[-1:]
            sides.append(list(decode_lines(raws, name, first_line=start + 1, first_offset=int(ix.offsets[start]))))
        return sides[0] if len(sides) == 1 else list(zip(*sides))

    return read


class _Progress:
    """Rank 0's progress bar over every rank's finished parts (polled from the job folder)."""

    def __init__(self, job_dir: Path, unit: str, enabled: bool):
        self.job_dir, self.unit, self.enabled = job_dir, unit, enabled
        self.bar = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _update(self) -> None:
        from ..corpus_jobs.parts import lines_done

        if (got := lines_done(self.job_dir)) is None:
            return
        done, total = got
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit=self.unit, dynamic_ncols=True, file=sys.stderr)
        elif done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._update()

    def __enter__(self):
        if self.enabled:
            self._thread.start()
        return self

    def finish(self) -> None:
        """The job is assembled (its part files about to be deleted): stop polling, show it complete."""
        if self.enabled and not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._update()

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join()
            if self.bar is not None:
                self.bar.close()


def _shared(world: int, rank0: bool, step: Callable[[], object]):
    """``step()`` on rank 0, its result (or its error, as a :class:`JobError`) on every rank."""
    if world == 1:
        return step()
    from ..training.distributed import broadcast_object

    box = None
    if rank0:
        try:
            box = ("ok", step())
        except (CLIError, ValueError, OSError) as exc:
            box = ("error", str(exc))
    box = broadcast_object(box)
    if box[0] == "error":
        raise JobError(box[1], quiet=not rank0)
    return box[1]


def run_corpus_job(
    args,
    *,
    command: str,
    inputs: list[str],
    output: str | None,
    options: dict,
    work: Callable[[list], tuple[bytes, dict]],
    part_lines: int | None,
    unit: str,
    prepare: Callable[[Path], tuple[list[str], dict]] | None = None,
    deliver: Callable[[Path], None] | None = None,
    part_unit: int = 1,
    describe: Callable[[int], str] | None = None,
) -> dict | None:
    """Run ``work`` over the lines of ``inputs`` as a corpus job on this rank (joining torchrun's group
    first); rank 0 writes ``output`` (None: stdout) and gets the parts' summed counts, the other
    ranks None. Every error of the job is a :class:`JobError` on every rank, printed by rank 0.

    ``prepare(job_dir)``, run by rank 0 before the parts (the others wait for it), writes the files the
    parts are really made of into the job folder and returns them with counts of its own (then
    ``work`` gets plain lines, not numbered ones); ``deliver(assembled)`` on rank 0 turns the
    assembled parts into what stdout gets (default: a copy). Either deletes its own files.

    ``part_lines``: the lines of a part, a multiple of ``part_unit`` (the command's batching unit); None:
    :func:`~attnkit.corpus_jobs.auto_part_lines` of the input's size. ``describe(part_lines)``: the line
    rank 0 prints on stderr once the parts are known (`` over N processes`` added when split)."""
    from ..corpus_jobs import PartFailed, auto_part_lines, run_job

    for path in inputs:
        if str(path).endswith(".gz"):
            raise CLIError(f"{path}: a split job reads its input by byte ranges; decompress it first (gunzip)")
        if Path(path).is_file() and Path(path).stat().st_size == 0 and command == "translate":
            raise ParallelDataError(f"{path}: the file is empty")
    world = torchrun_world()
    start_group(
        getattr(args, "device", "auto")
    )  # already joined by the command, before it opened its model: nothing new
    rank0 = is_rank0()

    def sized(n_lines: int) -> int:
        lines = auto_part_lines(n_lines, part_unit) if part_lines is None else part_lines
        if rank0 and describe is not None:
            print(describe(lines) + (f" over {world} processes" if world > 1 else ""), file=sys.stderr)
        return lines

    job_dir = _job_dir(args, command, options, inputs)
    totals: dict = {}
    read = numbered_reader([str(p) for p in inputs])
    target = Path(output) if output is not None else job_dir / "unused"  # only rank 0 assembles
    try:
        if prepare is not None:
            parts_of, counts = _shared(world, rank0, lambda: prepare(job_dir))
            inputs, read = parts_of, None
            totals.update(counts)
        if output is None and rank0:  # a file of this run's own to assemble into, for stdout, then deleted
            job_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=".assembled-", suffix=".out", dir=job_dir)
            os.close(fd)
            target = Path(name)
        progress = _Progress(job_dir, unit, rank0 and not args.no_progress)

        def assembled(store) -> None:
            progress.finish()
            for k, v in store.totals().items():
                totals[k] = totals.get(k, 0) + v
            if output is None:
                (deliver or _copy_to_stdout)(target)

        with progress:
            run_job(
                inputs if len(inputs) > 1 else inputs[0],
                target,
                job_dir,
                options,
                work,
                sized,
                read=read,
                on_assembled=assembled,
                clean=True,
            )
    except (PartFailed, ValueError) as exc:
        raise JobError(str(exc), quiet=not rank0) from None
    finally:
        if output is None and rank0:  # the job failed before its copy: the temporary is still there
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        if world > 1:
            from ..training.distributed import cleanup

            cleanup()
    return totals if rank0 else None


def _copy_to_stdout(path: Path) -> None:
    """Stream the assembled output to stdout, then delete it (it is the job's own file)."""
    sys.stdout.flush()
    try:
        if hasattr(sys.stdout, "buffer"):
            with open(path, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
            sys.stdout.buffer.flush()
        else:  # a text stream only (a caller's io.StringIO)
            with open(path, encoding="utf-8", newline="") as f:
                shutil.copyfileobj(f, sys.stdout, 1 << 20)
            sys.stdout.flush()
    finally:  # a reader that stops early (`| head`) ends the command quietly: attnkit.cli.main
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
