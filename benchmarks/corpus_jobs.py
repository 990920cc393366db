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
- ``rank-memory``: the real commands (``--commands``) with ``--processes 2`` on inputs of 30,000 and
  3,000,000 lines (``--rank-memory-lines``), each stopped (SIGKILL of the launch and its ranks: the job is
  resumable, so stopping it loses nothing) once every rank has written ``--rank-memory-parts`` parts of
  ``--part-lines`` lines: the same lines, the first of the input, in both runs. Each rank's peak RSS is its
  ``VmHWM`` (``/proc/PID/status``) read just before the kill, the rank known by ``RANK`` in its
  environment. Target: a rank's peak at 3,000,000 lines <= 1.2x its peak at 30,000.

The lines are the prepared Bible's verses (``ATTNKIT_HOME/bible/pairs.tsv``: Spanish and English),
else the built-in gold set's 150 verses, repeated to N lines.

Usage: ``python benchmarks/corpus_jobs.py [--lines 20000] [--only speed,kill,memory,rank-memory] [--beam 5]
[--commands align,translate] [--part-lines 512] [--rank-memory-parts 2] [--rank-memory-lines 30000,3000000]
[--out results/corpus_jobs.json]``
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
    for path, side in ((es, 0), (en, 1)):  # streamed: 3,000,000 lines are 400 MB a side
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(pairs[i % len(pairs)][side] + "\n" for i in range(n))
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


def _status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/PID/status`` field in KiB (``VmHWM``: the peak resident set), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _ranks(launch_pid: int) -> dict[int, int]:
    """``{rank: pid}`` of the launch's descendants that are ranks (``RANK`` in their environment)."""
    import psutil

    out = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(launch_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                rank = child.environ().get("RANK")
                if rank is not None and rank.isdigit():
                    out[int(rank)] = child.pid
    return out


def rank_memory(tmp: Path, sizes: list[int], names: list[str], beam: int, part_lines: int, parts: int) -> dict:
    """Each command with ``--processes 2`` on inputs of each size, stopped once every rank has written ``parts``
    parts; each rank's peak RSS then (module docstring). The ratio is the largest size's peak over the smallest's."""
    import psutil

    result: dict = {"part_lines": part_lines, "parts_per_rank": parts}
    for n in sizes:
        folder = tmp / f"rank-memory-{n}"
        folder.mkdir()
        start = time.perf_counter()
        es, en, _ = write_inputs(folder, n)
        result[f"{n}_input_mib"] = round((es.stat().st_size + en.stat().st_size) / 2**20, 1)
        result[f"{n}_write_s"] = round(time.perf_counter() - start, 1)
        for name in names:
            out, job = folder / f"{name}.out", folder / f"job-{name}"
            argv = [*commands(es, en, out, beam)[name], "--processes", "2", "--job-dir", str(job)]
            argv += ["--part-lines", str(part_lines)]
            start = time.perf_counter()
            with open(out if name == "translate" else os.devnull, "wb") as stdout:
                launch = subprocess.Popen(
                    [sys.executable, "-m", "attnkit", *argv], stdout=stdout, stderr=subprocess.PIPE, env=_env(2)
                )
                peak: dict[int, int] = {}
                done_by_rank = [0, 0]
                while launch.poll() is None:
                    for rank, pid in _ranks(launch.pid).items():
                        hwm = _status_kib(pid, "VmHWM")
                        if hwm is not None:
                            peak[rank] = max(peak.get(rank, 0), hwm)
                    written = [int(p.name[5:11]) for p in job.glob("part-*.out")]
                    done_by_rank = [sum(1 for p in written if p % 2 == r) for r in range(2)]
                    if min(done_by_rank) >= parts and len(peak) == 2:
                        break
                    time.sleep(0.2)
                finished = launch.poll() is not None
                tree = (
                    [launch.pid, *(p.pid for p in psutil.Process(launch.pid).children(recursive=True))]
                    if not finished
                    else []
                )
                for pid in tree:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)
                err = launch.communicate()[1].decode(errors="replace")
            if finished and launch.returncode not in (0, 1):
                raise RuntimeError(f"{name} on {n} lines failed ({launch.returncode}): {err[-2000:]}")
            result.setdefault(name, {})[str(n)] = {
                "peak_rss_mib_by_rank": [round(peak.get(r, 0) / 1024, 1) for r in range(2)],
                "parts_written_by_rank": done_by_rank,
                "seconds_until_stopped": round(time.perf_counter() - start, 1),
                "finished_before_stop": finished,
                "returncode": launch.returncode if finished else None,
                "stderr_tail": err[-600:] if finished else None,  # why a launch ended before its parts
            }
            print(name, n, result[name][str(n)], flush=True)
    for name in names:
        small, big = result[name][str(min(sizes))], result[name][str(max(sizes))]
        ratios = [
            round(b / a, 3) if a else None for a, b in zip(small["peak_rss_mib_by_rank"], big["peak_rss_mib_by_rank"])
        ]
        result[name]["ratio_by_rank"] = ratios
        reached = not small["finished_before_stop"] and not big["finished_before_stop"]  # the same parts, both
        result[name]["target_met"] = reached and all(r is not None and r <= 1.2 for r in ratios)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=20_000, help="lines of each input (default: 20000)")
    ap.add_argument("--beam", type=int, default=5, help="translate's beam (default: 5, the command's)")
    ap.add_argument("--only", default="speed,kill,memory", help="which checks, comma-separated (default: all)")
    ap.add_argument("--commands", default="align,translate", help="speed: which commands (default: both)")
    ap.add_argument("--part-lines", type=int, default=512, help="rank-memory: lines a part (default: 512)")
    ap.add_argument("--rank-memory-parts", type=int, default=2, help="rank-memory: parts a rank writes (default: 2)")
    ap.add_argument(
        "--rank-memory-lines", default="30000,3000000", help="rank-memory: the input sizes (default: 30000,3000000)"
    )
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
        if "rank-memory" in only:
            sizes = [int(x) for x in args.rank_memory_lines.split(",")]
            names = args.commands.split(",")
            result["rank_memory"] = rank_memory(tmp, sizes, names, args.beam, args.part_lines, args.rank_memory_parts)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
