"""Slow shared preparations of a test run, made once in the background by the pytest-xdist controller.

A preparation is a script ``python SCRIPT OUT`` that builds ``OUT`` and ends by writing ``OUT.status.json``
(:func:`finish`): ``{"log": null}`` when it succeeded, else what went wrong. The controller starts it as the run
starts (:func:`start`) and tells the workers, which start after it, where ``OUT`` is and the process's id through
two environment variables; a worker that needs it waits for the status file (:func:`wait`), so no worker sits
waiting while another prepares. The documentation site (:mod:`docs_site`) and the prepared Bible
(:mod:`bible_home`) are made this way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def status_file(out: Path) -> Path:
    return out.with_name(out.name + ".status.json")


def start(script: str, out: Path) -> subprocess.Popen:
    """Run ``python script out`` in the background, in a process group of its own (:func:`stop`)."""
    return subprocess.Popen(
        [sys.executable, script, str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    """End a background preparation and every process it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (absent, or a zombie its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False  # no /proc to read: rely on the time limit
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def wait(out: Path, pid: int | None, what: str, timeout_s: float) -> str | None:
    """Wait for the background preparation of ``out`` (by process ``pid``) to end: None when it succeeded,
    else its log, or why there is none."""
    status, deadline = status_file(out), time.monotonic() + timeout_s
    while not status.is_file():
        if pid is not None and _gone(pid) and not status.is_file():
            return f"the background {what} (process {pid}) ended without a status: killed?"
        if time.monotonic() > deadline:
            return f"no status from the background {what} into {out} after {timeout_s:.0f} s"
        time.sleep(0.5)
    return json.loads(status.read_text(encoding="utf-8"))["log"]


def finish(out: Path, prepare: Callable[[Path], str | None]) -> None:
    """Run ``prepare(out)`` (None, or the log of a failure) and write its status file, whole or not at all."""
    try:
        log = prepare(out)
    except Exception as exc:  # a missing package, say: the tests that need it report it
        log = repr(exc)
    tmp = status_file(out).with_suffix(".tmp")
    tmp.write_text(json.dumps({"log": log}), encoding="utf-8")
    tmp.replace(status_file(out))  # a worker never reads half of it
