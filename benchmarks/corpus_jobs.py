"""Corpus jobs split across processes (issue 58): ``attnkit align`` and ``attnkit translate --file`` on N lines.

Three checks, each in fresh processes (``python -m attnkit``, as a user runs it):

- ``speed``: each command on N lines in one process at 1 thread (``OMP_NUM_THREADS=1``, the plain
  one-process path) against ``--processes 2`` at 1 thread a rank (``OMP_NUM_THREADS=2``, split in
  two); the two outputs must be byte-identical. Speed-up = one process's wall time / two processes'.
  The target is >= 1.8x for 20,000 lines, on an otherwise idle machine with at least 2 cores.
- ``kill``: each command ``--processes 2 --job-dir J`` is SIGKILLed (the launch and both ranks) once
  half of its parts are written; the same command run again must write the one-process bytes, and
  the parts missing at the kill (the ones the rerun redoes) must be at most one a rank.
- ``memory``: peak RSS of one rank that builds the line index of an input and reads 200 parts of
  1,000 lines through it, for 30,000 and 3,000,000 lines (the mechanism alone, each in a fresh process).

The lines are the prepared Bible's verses (``ATTNKIT_HOME/bible/pairs.tsv``: Spanish and English),
else the built-in gold set's 150 verses, repeated to N lines.

Usage: ``python benchmarks/corpus_jobs.py [--lines 20000] [--only speed,kill,memory] [--beam 5]
[--commands align,translate] [--out results/corpus_jobs.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = "verse {} in the beginning god created the heaven and the earth\n"
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

MEMORY = r"""
import resource, sys
from attnkit.corpus_jobs import PartPlan, open_line_index
idx = open_line_index(sys.argv[1], sys.argv[2])
plan = PartPlan(idx.n_lines, 1000, 2)
n = sum(len(idx.read_lines(*plan.part_range(p))) for p in plan.parts_of_rank(1)[:200])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, n)
"""


def _env(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    return {**env, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(threads)}


def write_inputs(tmp: Path, n: int) -> tuple[Path, Path, str]:
    """``n`` line-parallel Spanish and English verses, and where they came from."""
    from attnkit.paths import attnkit_home

    tsv = attnkit_home() / "bible" / "pairs.tsv"
    if tsv.is_file():
        rows = [line.rstrip("\n").split("\t") for line in tsv.read_text(encoding="utf-8").splitlines()[1:]]
        # verses of at most 40 words a side: the shipped translators read at most 100 pieces, and
        # `translate --file` stops at a longer line (both runs would stop alike, timing nothing)
        pairs = [(r[4], r[5]) for r in rows if len(r) == 6 and len(r[4].split()) <= 40 and len(r[5].split()) <= 40]
        source = f"{tsv} (Bible verses of at most 40 words a side)"
    else:
        from attnkit.alignment.gold import load_gold

        pairs = [(" ".join(v.source), " ".join(v.target)) for v in load_gold()]
        source = "the built-in gold set's 150 verses, repeated"
    es, en = tmp / "in.es", tmp / "in.en"
    es.write_text("".join(pairs[i % len(pairs)][0] + "\n" for i in range(n)), encoding="utf-8")
    en.write_text("".join(pairs[i % len(pairs)][1] + "\n" for i in range(n)), encoding="utf-8")
    return es, en, source


def commands(es: Path, en: Path, out: Path, beam: int) -> dict[str, list[str]]:
    """Each command's arguments (without ``--processes``); ``translate`` prints to stdout (captured into ``out``)."""
    return {
        "align": ["align", "--src", str(es), "--tgt", str(en), "--output", str(out), "--no-progress"],
        "translate": ["translate", "--file", str(es), "--beam", str(beam), "--no-progress"],
    }


def run(argv: list[str], threads: int, out: Path, cwd: Path) -> tuple[float, int]:
    """Run ``python -m attnkit argv``; its stdout goes to ``out`` when the command prints its output."""
    start = time.perf_counter()
    with open(out if argv[0] == "translate" else os.devnull, "wb") as stdout:
        rc = subprocess.run(
            [sys.executable, "-m", "attnkit", *argv], stdout=stdout, stderr=subprocess.PIPE, env=_env(threads), cwd=cwd
        )
    if rc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[0]} failed ({rc.returncode}): {rc.stderr.decode()[-2000:]}")
    return time.perf_counter() - start, rc.returncode


def _out(tmp: Path, name: str) -> Path:
    return tmp / f"{name}.out"


def speed(tmp: Path, es: Path, en: Path, n: int, beam: int, names=("align", "translate")) -> dict:
    result = {}
    for name in names:
        one, two = _out(tmp, f"{name}-1"), _out(tmp, f"{name}-2")
        t1, _ = run(commands(es, en, one, beam)[name], 1, one, tmp)
        t2, _ = run([*commands(es, en, two, beam)[name], "--processes", "2"], 2, two, tmp)
        result[name] = {
            "one_process_s": round(t1, 2),
            "two_processes_s": round(t2, 2),
            "lines_per_s_one": round(n / t1, 1),
            "lines_per_s_two": round(n / t2, 1),
            "speedup": round(t1 / t2, 3),
            "identical_bytes": one.read_bytes() == two.read_bytes(),
        }
        print(name, result[name], flush=True)
    return result


def _parts_written(job: Path) -> tuple[int, int, list[int]]:
    """``(parts written, parts of the job, missing parts)`` from the job folder (0, 0, [] before its manifest)."""
    try:
        manifest = json.loads((job / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0, 0, []
    n_parts = -(-manifest["n_lines"] // manifest["part_lines"])
    done = {int(p.name[5:11]) for p in job.glob("part-*.out")}
    return len(done), n_parts, [p for p in range(n_parts) if p not in done]


def kill(tmp: Path, es: Path, en: Path, n: int, beam: int) -> dict:
    """SIGKILL each command's 2-process launch at half its parts, rerun it, compare with one process."""
    import psutil

    result = {}
    for name in ("align", "translate"):
        reference = _out(tmp, f"{name}-1")
        if not reference.exists():
            run(commands(es, en, reference, beam)[name], 1, reference, tmp)
        out, job = _out(tmp, f"{name}-killed"), tmp / f"job-{name}"
        argv = [*commands(es, en, out, beam)[name], "--processes", "2", "--job-dir", str(job), "--part-lines", "256"]
        with open(out if name == "translate" else os.devnull, "wb") as stdout:
            launch = subprocess.Popen(
                [sys.executable, "-m", "attnkit", *argv], stdout=stdout, stderr=subprocess.DEVNULL, env=_env(2)
            )
            while launch.poll() is None:
                written, n_parts, _ = _parts_written(job)
                if n_parts and written >= n_parts / 2:
                    break
                time.sleep(0.05)
            tree = [launch.pid, *(p.pid for p in psutil.Process(launch.pid).children(recursive=True))]
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            launch.wait()
        written, n_parts, missing = _parts_written(job)
        by_rank = [sum(1 for p in missing if p % 2 == r) for r in range(2)]
        t, _ = run(argv, 2, out, tmp)
        result[name] = {
            "parts": n_parts,
            "written_at_kill": written,
            "redone_by_rank": by_rank,
            "at_most_one_part_per_rank": max(by_rank, default=0) <= 1,
            "rerun_s": round(t, 2),
            "identical_bytes": out.read_bytes() == reference.read_bytes(),
            "job_folder_removed": not job.exists(),
        }
        print(name, "kill", result[name], flush=True)
    return result


def memory(tmp: Path) -> dict:
    out = {}
    for n in (30_000, 3_000_000):
        path = tmp / f"mem_{n}.txt"
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(LINE.format(i) for i in range(n))
        res = subprocess.run(
            [sys.executable, "-c", MEMORY, str(path), str(tmp / f"job_{n}")],
            capture_output=True,
            text=True,
            env=_env(1),
            check=True,
        )
        rss, lines = res.stdout.split()
        out[str(n)] = {"max_rss_mib": int(rss), "lines_read": int(lines), "input_bytes": path.stat().st_size}
    out["ratio"] = round(out["3000000"]["max_rss_mib"] / out["30000"]["max_rss_mib"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=20_000, help="lines of each input (default: 20000)")
    ap.add_argument("--beam", type=int, default=5, help="translate's beam (default: 5, the command's)")
    ap.add_argument("--only", default="speed,kill,memory", help="which checks, comma-separated (default: all)")
    ap.add_argument("--commands", default="align,translate", help="speed: which commands (default: both)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    only = set(args.only.split(","))
    result: dict = {"lines": args.lines, "beam": args.beam, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        es, en, result["input"] = write_inputs(tmp, args.lines)
        if "speed" in only:
            result["speed"] = speed(tmp, es, en, args.lines, args.beam, tuple(args.commands.split(",")))
        if "kill" in only:
            result["kill"] = kill(tmp, es, en, args.lines, args.beam)
        if "memory" in only:
            result["memory"] = memory(tmp)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
