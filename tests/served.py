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
    answers raises with its own output, which says why.

    The browser tests check what the page draws, not admission control (tested in test_serve_abuse), so on
    a loaded test machine a slow request must not become a refusal: the fast lane never answers 503
    (``--fast-wait 0``, which a cold first request of a tiny Hugging Face model under load could trigger, and
    the page then waits up to a minute before asking again), and the heavy jobs' worker runs at the server's
    priority and is kept between jobs (``--worker-nice 0 --worker-tasks 1000``: a fresh nice-10 worker loading
    five models starves behind the other pytest workers). ARGS come after these and may override them."""
    port = free_port()
    cmd = [sys.executable, "-m", "attnkit.cli", *(["--home", home] if home else []), "serve", "--port", str(port)]
    cmd += ["--fast-wait", "0", "--worker-nice", "0", "--worker-tasks", "1000"]
    if "--model" not in args:  # the shipped translators and captioners (tiny.SERVED_IN_TESTS says why)
        from tiny import SERVED_IN_TESTS

        cmd += ["--model", *SERVED_IN_TESTS]
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
