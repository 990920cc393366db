"""A real ``attnkit serve`` process for the browser tests: started on a free loopback port, waited for
until ``/api/models`` answers, stopped at the end."""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    """A TCP port free on localhost now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(*args: str, home: str | None = None, env: dict | None = None):
    """``attnkit [--home HOME] serve --port P ARGS...``; yields its URL. A server that exits before it
    answers raises with its own output, which says why."""
    port = free_port()
    cmd = [sys.executable, "-m", "attnkit.cli", *(["--home", home] if home else []), "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, *args],
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "api/models", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(proc.stdout.read()) from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
