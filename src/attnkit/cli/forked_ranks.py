"""``--processes N`` on one machine's CPUs: the ranks forked from the process that parsed the command.

``torchrun`` starts each rank as a new interpreter: each imports torch and attnkit again, on top of the
launcher's own import of ``torch.distributed.run``, so a split job paid that before its first line, and a
small job lost to one process (``benchmarks/RESULTS.md``, "forked ranks"). A rank forked from the command's
own process starts with every module already imported, and the ranks share those pages until they write them.

The launching process becomes a small supervisor, like torchrun's agent: it forks the ranks, each of
which sets torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), its thread count, and runs the same command line without ``--processes``
(:func:`attnkit.cli.main`), so a rank is exactly what torchrun would have run. The supervisor waits
for them: the first rank that fails stops the others (a rank's own error is printed by that rank, a
job's error by rank 0 alone), a rank stopped by a signal is named in one line, and Ctrl-C or a
``SIGTERM`` stops every rank. Each rank dies with the supervisor (``PR_SET_PDEATHSIG``), so a killed
launch leaves no rank behind; the parts already written are kept, and the same command resumes them.

Only where forking is safe: Linux, a PyTorch build without CUDA (CUDA cannot be used in a forked
child), and ``ATTNKIT_LAUNCHER`` not ``torchrun``; otherwise :func:`attnkit.cli.corpus_job.launch`
uses torchrun as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import time

__all__ = ["can_fork_ranks", "fork_ranks"]

#: How long the ranks still running get to finish on their own after one failed with an error of its own
#: (the job's error reaches every rank through a collective, and rank 0 prints it), before they are stopped.
GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1
_RESUME = "run the same command again to resume from the parts already written"


def can_fork_ranks() -> bool:
    """Whether ``--processes`` may fork its ranks here (module docstring); else torchrun starts them."""
    if os.environ.get("ATTNKIT_LAUNCHER", "").strip().lower() == "torchrun":
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    import torch

    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def _free_port() -> int:
    """A TCP port free on the loopback now, for rank 0's rendezvous store (as ``torchrun --standalone``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with(parent: int) -> None:
    """This rank gets ``SIGKILL`` when the supervisor dies (Linux), also if it died before the call."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _rank(rank: int, world: int, port: int, threads: int, argv: list[str], parent: int) -> None:
    """The body of a forked rank: never returns (``os._exit`` with the command's status)."""
    status = 1
    try:
        _die_with(parent)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which stops the ranks
        for name in ("SIGTERM", "SIGHUP"):  # not the supervisor's handler, which stops the ranks
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.environ.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS=str(threads),
        )
        import torch

        torch.set_num_threads(threads)
        # the running command's own ``attnkit.cli.main`` (imported: it called this), read from sys.modules
        # rather than imported here, where ``attnkit.cli`` importing this module would make a circle
        status = sys.modules["attnkit.cli"].main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a bug: its traceback, as the rank would have shown it under torchrun
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(status)


def _stop(pids, sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _reap(pids: dict[int, int], timeout: float) -> dict[int, int]:
    """Wait up to ``timeout`` seconds for the ranks in ``pids`` (pid → rank); their wait statuses."""
    done: dict[int, int] = {}
    end = time.monotonic() + timeout
    while len(done) < len(pids):
        for pid in pids:
            if pid not in done:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    done[pid] = status
        if len(done) < len(pids):
            if time.monotonic() >= end:
                break
            time.sleep(0.02)
    return done


def fork_ranks(argv: list[str], processes: int, threads: int) -> int:
    """Run ``attnkit <argv>`` (without ``--processes``) on ``processes`` forked ranks of ``threads`` threads
    each, supervised here. Returns the exit status: 0 when every rank succeeded, else the first failed
    rank's (its error already on stderr), 2 when a rank was stopped by a signal, 130 when interrupted."""
    port, parent = _free_port(), os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    ranks: dict[int, int] = {}  # pid → rank
    interrupted: list[int] = []

    def on_signal(signum, _frame) -> None:
        interrupted.append(signum)
        _stop(ranks, signal.SIGTERM)

    wanted = [signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    try:
        old = {s: signal.signal(s, on_signal) for s in wanted}
    except ValueError:  # not the main thread: the ranks are still stopped with this process (PDEATHSIG)
        old = {}
    try:
        for rank in range(processes):
            pid = os.fork()
            if pid == 0:
                _rank(rank, processes, port, threads, argv, parent)
            ranks[pid] = rank
        return _supervise(ranks, interrupted)
    finally:
        _stop([p for p in ranks if _alive(p)], signal.SIGKILL)
        _reap({p: r for p, r in ranks.items() if _alive(p)}, 1.0)
        for s, handler in old.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, handler)


def _alive(pid: int) -> bool:
    try:
        got, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return got == 0


def _supervise(ranks: dict[int, int], interrupted: list[int]) -> int:
    """Wait for every rank; on the first failure stop the others (at once for a signal's death, after
    :data:`GRACE_S` for a rank's own error, which rank 0 may still be printing)."""
    statuses: dict[int, int] = {}
    first_failure: tuple[int, int] | None = None  # (rank, wait status)
    while len(statuses) < len(ranks):
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid not in ranks:
            continue
        statuses[pid] = status
        failed = not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
        if failed and first_failure is None:
            first_failure = (ranks[pid], status)
            rest = {p: r for p, r in ranks.items() if p not in statuses}
            if not interrupted and os.WIFEXITED(status):
                statuses.update(_reap(rest, GRACE_S))
                rest = {p: r for p, r in rest.items() if p not in statuses}
            _stop(rest, signal.SIGTERM)
            statuses.update(_reap(rest, 5.0))
            _stop([p for p in rest if p not in statuses], signal.SIGKILL)
    if interrupted:
        name = signal.Signals(interrupted[0]).name
        print(f"attnkit: interrupted ({name}); {_RESUME}", file=sys.stderr)
        return 130
    if first_failure is None:
        return 0
    rank, status = first_failure
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        print(f"attnkit: error: rank {rank} was stopped ({name}); {_RESUME}", file=sys.stderr)
        return 2
    return os.WEXITSTATUS(status)
