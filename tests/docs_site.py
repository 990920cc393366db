"""Building the documentation site for the tests, once per test run.

``mkdocs build --strict`` executes every tutorial notebook (~100 s of CPU). Under pytest-xdist the run's
controller starts the build in the background as the run starts (:func:`start`), so the workers run other
tests meanwhile instead of one of them building while the other waits; the docs tests then wait for its status
file (:func:`wait`). Run alone (no xdist), the docs tests build the site themselves (:func:`build`).

    python tests/docs_site.py OUT     # builds into OUT, then writes OUT.status.json (the log of a failure)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The environment variables through which the controller tells the workers where its build goes, and its process.
ENV = "ATTNKIT_TEST_DOCS_SITE"
PID_ENV = "ATTNKIT_TEST_DOCS_SITE_PID"
TIMEOUT_S = 1800  # a hung notebook kernel fails the docs tests instead of the suite


def build(out: Path) -> str | None:
    """``mkdocs build --strict`` into ``out``, the notebooks executed (mkdocs.yml reads ATTNKIT_DOCS_EXECUTE;
    Material's notice about its successor is no warning): None when it succeeded, else what it printed."""
    env = dict(os.environ, ATTNKIT_DOCS_EXECUTE="true", NO_MKDOCS_2_WARNING="1")
    config = str(ROOT / "mkdocs.yml")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", config, "--site-dir", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"mkdocs build did not end within {TIMEOUT_S} s"
    return None if proc.returncode == 0 else f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def status_file(out: Path) -> Path:
    return out.with_name(out.name + ".status.json")


def start(out: Path) -> subprocess.Popen:
    """Build into ``out`` in a background process, which writes :func:`status_file` when it ends."""
    return subprocess.Popen(
        [sys.executable, __file__, str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    """End a background build and the notebook kernels it started (its own process group)."""
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


def wait(out: Path, pid: int | None = None) -> str | None:
    """Wait for a background build into ``out`` (by process ``pid``); None when it succeeded, else its log."""
    status, deadline = status_file(out), time.monotonic() + TIMEOUT_S + 60
    while not status.is_file():
        if pid is not None and _gone(pid) and not status.is_file():
            return f"the background docs build (process {pid}) ended without a status: killed?"
        if time.monotonic() > deadline:
            return f"no status from the background docs build into {out} after {TIMEOUT_S + 60} s"
        time.sleep(0.5)
    return json.loads(status.read_text(encoding="utf-8"))["log"]


def _main(out: Path) -> None:
    try:
        log = build(out)
    except Exception as exc:  # mkdocs missing, say: the tests report it
        log = repr(exc)
    tmp = status_file(out).with_suffix(".tmp")
    tmp.write_text(json.dumps({"log": log}), encoding="utf-8")
    tmp.replace(status_file(out))  # whole or absent: a worker never reads half of it


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
