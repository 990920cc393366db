"""Fuzz every text entry point for longer than ``make test`` does: the explorer's API (requests generated from its
OpenAPI schema by Schemathesis, and bodies whose text fields are arbitrary Unicode) and the ``translate`` command
line (arguments and ``--file`` lines), over tiny models (tests/fuzzing.py). Counts every answer by status and
fails on any 5xx, any error body that is not ``{"error": "..."}``, any command-line traceback or exit status
outside 0/1/2.

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fuzz.py --api 2000 --cli 2000
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import hypothesis.strategies as st  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402


def _settings(n: int):
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def fuzz_api(root: Path, n: int) -> tuple[collections.Counter, list]:
    """``n`` generated requests: half from the OpenAPI schema (Schemathesis), half with odd text in every field."""
    import schemathesis

    from fuzzing import bodies, check_answer, fuzz_app, post

    client, translators, readers = fuzz_app(root)
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app, headers={"Host": "127.0.0.1"})
    openapi = st.one_of([op.ok().as_strategy() for op in schema.get_all_operations()])
    counts, problems = collections.Counter(), []

    @_settings(n - n // 2)
    @given(st.data())
    def odd_text(data):
        route, body = data.draw(bodies(translators, readers))
        r = post(client, route, body)
        counts[("text", route, r.status_code)] += 1
        if (p := check_answer(r)) is not None:
            problems.append((route, body, p))

    @_settings(n // 2)
    @given(st.data())
    def from_schema(data):
        case = data.draw(openapi)
        r = case.call(base_url="http://127.0.0.1")
        counts[("openapi", f"{case.method} {case.path}", r.status_code)] += 1
        if (p := check_answer(r)) is not None:
            problems.append((case.path, case.body, p))

    odd_text()
    from_schema()
    return counts, problems


def fuzz_cli(root: Path, n: int) -> tuple[collections.Counter, list]:
    """``n`` generated command lines: ``translate TEXT TEXT`` and ``translate --file`` with the same texts as lines."""
    from attnkit.cli import main
    from fuzzing import texts
    from tiny import saved_tiny_transformer

    model = str(saved_tiny_transformer(root / "cli-model"))
    counts, problems = collections.Counter(), []
    path = root / "lines.txt"

    def run(argv, kind):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except BaseException as exc:  # a traceback is what is looked for
                rc = f"raised {type(exc).__name__}: {exc}"
        counts[(kind, rc)] += 1
        lines = err.getvalue().splitlines()
        ok = rc in (0, 1, 2) and "Traceback" not in err.getvalue()
        if rc == 2:
            ok = (
                ok
                and lines[-1].startswith("attnkit: error: ")
                and all(x.startswith("attnkit: warning: ") for x in lines[:-1])
            )
        if not ok:
            problems.append((argv, rc, err.getvalue()[-300:]))

    @_settings(n - n // 2)
    @given(texts(16), texts(16))
    def arguments(a, b):
        run(["translate", "--model", model, "--beam", "1", a, b], "arguments")

    @_settings(n // 2)
    @given(st.lists(texts(16), min_size=1, max_size=4))
    def file_lines(lines):
        path.write_bytes(b"".join(x.encode("utf-8", "surrogatepass") + b"\n" for x in lines))
        run(["translate", "--model", model, "--beam", "1", "--file", str(path)], "--file")

    arguments()
    file_lines()
    return counts, problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--api", type=int, default=2000, help="generated API requests (default: 2000)")
    p.add_argument("--cli", type=int, default=2000, help="generated command lines (default: 2000)")
    args = p.parse_args()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, fuzz in (("API", args.api, fuzz_api), ("CLI", args.cli, fuzz_cli)):
            if n <= 0:
                continue
            started = time.perf_counter()
            counts, problems = fuzz(Path(tmp), n)
            seconds = time.perf_counter() - started
            total = sum(counts.values())
            server_errors = sum(c for (*_, status), c in counts.items() if isinstance(status, int) and status >= 500)
            print(
                f"\n{name}: {total} generated inputs in {seconds:.1f} s (models' loading included); "
                f"5xx: {server_errors}; problems: {len(problems)}"
            )
            for key, c in sorted(counts.items(), key=str):
                print(f"  {' '.join(map(str, key))}: {c}")
            for problem in problems[:20]:
                print("  PROBLEM", problem)
            failed += len(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
