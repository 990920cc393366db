"""Building the documentation site for the tests, once per test run.

``mkdocs build --strict`` renders every page, the tutorials with the outputs they store (they are executed and
compared with what they store by ``tests/test_tutorials.py``, not here). Under pytest-xdist the run's
controller starts the build in the background as the run starts (:func:`start`, :mod:`background`), so the
workers run other tests meanwhile instead of one of them building while the other waits; the docs tests then
wait for its status file (:func:`wait`). Run alone (no xdist), the docs tests build the site themselves (:func:`build`).

    python tests/docs_site.py OUT     # builds into OUT, then writes OUT.status.json (the log of a failure)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import background

ROOT = Path(__file__).resolve().parents[1]
#: The environment variables through which the controller tells the workers where its build goes, and its process.
ENV = "ATTNKIT_TEST_DOCS_SITE"
PID_ENV = "ATTNKIT_TEST_DOCS_SITE_PID"
TIMEOUT_S = 900  # a hung build fails the docs tests instead of the suite


def build(out: Path) -> str | None:
    """``mkdocs build --strict`` into ``out``, the notebooks shown with their stored outputs (mkdocs.yml reads
    ATTNKIT_DOCS_EXECUTE; Material's notice about its successor is no warning): None when it succeeded, else what
    it printed."""
    env = dict(os.environ, ATTNKIT_DOCS_EXECUTE="false", NO_MKDOCS_2_WARNING="1")
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


def start(out: Path) -> subprocess.Popen:
    """Build into ``out`` in a background process, which writes its status file when it ends."""
    return background.start(__file__, out)


def wait(out: Path, pid: int | None = None) -> str | None:
    """Wait for a background build into ``out`` (by process ``pid``); None when it succeeded, else its log."""
    return background.wait(out, pid, "docs build", TIMEOUT_S + 60)


if __name__ == "__main__":
    background.finish(Path(sys.argv[1]), build)
