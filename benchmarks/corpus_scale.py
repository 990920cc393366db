"""A corpus bigger than memory: prepare time and peak RSS, training start time, anonymous memory and
tokens/s of training from the memory-mapped token cache against the in-memory Bible.

The corpus is the Bible's training split repeated, with a line number added to each sentence so
that no two pairs are the same, to ``--pairs`` pairs (3,000,000 by default), written as two text
files, as a user would have them. Then, each in its own process (sampled every 0.1 s from /proc):

1. ``attnkit data prepare parallel scale --train big.es big.en``: wall time, and peak RSS and PSS of the
   whole process tree (the parent plus its tokenising workers, summed) and of the parent alone;
2. ``attnkit train translation --data scale`` and ``--data bible``, the same model and batches, for
   ``--steps`` steps: the seconds from launch to the trainer's ``start`` event and to the first
   logged step, the peak ``RssAnon`` (``/proc/PID/status``: the memory-mapped cache's pages are
   file-backed and belong to the page cache, not to the process's anonymous memory) and the
   training tokens/s the trainer reports.

Usage (run it on a quiet machine; the numbers go to benchmarks/results/corpus_scale.json)::

    PYTHONPATH=src python benchmarks/corpus_scale.py                 # 3M pairs, 300 steps
    PYTHONPATH=src python benchmarks/corpus_scale.py --pairs 50000 --steps 20   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    """Proportional set size: pages shared by several processes (libraries, a forked parent's heap)
    count a share each, so the sum over a process tree is the tree's real memory."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler:
    """Peaks of a running process: RSS and PSS of its whole tree (summed; RSS counts shared pages once
    per process, PSS shares them out), RSS and RssAnon of the process itself (kB)."""

    def __init__(self, pid: int, every: float = 0.1):
        self.pid, self.every = pid, every
        self.tree_rss = self.tree_pss = self.rss = self.rss_anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            tree = pss = 0
            todo = [self.pid]
            while todo:
                p = todo.pop()
                tree += _status_kb(p, "VmRSS")
                pss += _pss_kb(p)
                todo += _children(p)
            self.tree_rss = max(self.tree_rss, tree)
            self.tree_pss = max(self.tree_pss, pss)
            self.rss = max(self.rss, _status_kb(self.pid, "VmRSS"))
            self.rss_anon = max(self.rss_anon, _status_kb(self.pid, "RssAnon"))
            time.sleep(self.every)

    def stop(self):
        self._stop.set()
        self._thread.join()


def run(cmd: list[str], env: dict) -> tuple[float, Sampler, float]:
    """Run ``cmd`` to the end; ``(seconds, its sampler, launch time)``. A failure stops the benchmark."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid)
    out, _ = proc.communicate()
    sampler.stop()
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    return time.time() - t0, sampler, t0


def write_corpus(home: Path, work: Path, pairs: int) -> tuple[Path, Path]:
    from attnkit.data.datasets.bible import load_pairs

    train = load_pairs("train", home=home)
    src, tgt = work / "big.es", work / "big.en"
    with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
        for i in range(pairs):
            p = train[i % len(train)]
            fs.write(f"{i} {p.src}\n")
            ft.write(f"{i} {p.tgt}\n")
    return src, tgt


def train(data: str, args, env: dict, work: Path) -> dict:
    out = work / f"run-{data}"
    cmd = [sys.executable, "-m", "attnkit.cli", "--home", str(args.home), "train", "translation", "--data", data]
    cmd += ["--model", args.model, "--max-steps", str(args.steps), "--save-every-steps", "1000000"]
    cmd += ["--valid-bleu-sentences", "10", "--no-progress", "--threads", str(args.threads), "--out-dir", str(out)]
    cmd += ["--max-tokens", str(args.max_tokens), "--seed", "0"]
    if data == "bible":
        cmd += ["--vocab-size", "8000"]
    seconds, s, t0 = run(cmd, env)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    start = next(e for e in log if e["event"] == "start")
    first_step = next((e for e in log if e["event"] == "train"), None)
    end = next(e for e in log if e["event"] == "end")
    return {
        "data": data,
        "seconds": round(seconds, 1),
        "start_s": round(start["time"] - t0, 2),
        "first_logged_step_s": round(first_step["time"] - t0, 2) if first_step else None,
        "peak_rss_anon_mb": round(s.rss_anon / 1024, 1),
        "peak_rss_mb": round(s.rss / 1024, 1),
        "tokens_per_s": round(end["tokens_per_s"], 1),
        "steps": end["steps"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3_000_000)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--model", default="rnnsearch")
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/attnkit-corpus-scale"))
    ap.add_argument("--home", type=Path, default=None, help="ATTNKIT_HOME for both corpora (default: WORK/home)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "corpus_scale.json")
    ap.add_argument(
        "--prepare-only",
        action="store_true",
        help="measure the prepare again and keep the training rows already in --out",
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.home = args.home or args.work / "home"
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"), OMP_NUM_THREADS=str(args.threads))

    from attnkit.data.datasets.bible import prepare_bible

    prepare_bible(args.home)
    src, tgt = write_corpus(args.home, args.work, args.pairs)
    cmd = [sys.executable, "-m", "attnkit.cli", "--home", str(args.home), "data", "prepare", "parallel", "scale"]
    cmd += ["--src-lang", "es", "--tgt-lang", "en", "--train", str(src), str(tgt), "--force"]
    seconds, s, _ = run(cmd, env)
    meta = json.loads((args.home / "corpora" / "scale" / "meta.json").read_text())
    prepare = {
        "pairs": args.pairs,
        "seconds": round(seconds, 1),
        "peak_tree_rss_mb": round(s.tree_rss / 1024, 1),
        "peak_tree_pss_mb": round(s.tree_pss / 1024, 1),
        "peak_parent_rss_mb": round(s.rss / 1024, 1),
        "splits": meta["splits"],
        "tokenizer_sample": meta["spm_max_sentences"],
        "input_mb": round((src.stat().st_size + tgt.stat().st_size) / 1e6, 1),
    }
    print(json.dumps(prepare))
    if args.prepare_only:
        summary = json.loads(args.out.read_text())
        summary["prepare"] = prepare
        summary["prepare_loadavg_at_end"] = os.getloadavg()
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
        return
    runs = [train(d, args, env, args.work) for d in ("scale", "bible")]
    for r in runs:
        print(json.dumps(r))
    big, bible = runs
    summary = {
        "prepare": prepare,
        "train": runs,
        "rss_anon_ratio": round(big["peak_rss_anon_mb"] / bible["peak_rss_anon_mb"], 3),
        "tokens_per_s_ratio": round(big["tokens_per_s"] / bible["tokens_per_s"], 3),
        "conditions": {
            "cpus": len(os.sched_getaffinity(0)),
            "threads": args.threads,
            "model": args.model,
            "max_tokens": args.max_tokens,
            "steps": args.steps,
            "loadavg_at_end": os.getloadavg(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"prepare {args.pairs} pairs: {prepare['seconds']} s, peak PSS {prepare['peak_tree_pss_mb']} MB (tree); "
        f"training start {big['start_s']} s; RssAnon {big['peak_rss_anon_mb']} MB vs Bible "
        f"{bible['peak_rss_anon_mb']} MB ({summary['rss_anon_ratio']}x); tokens/s {big['tokens_per_s']} vs "
        f"{bible['tokens_per_s']} ({summary['tokens_per_s_ratio']}x) -> {args.out}"
    )


if __name__ == "__main__":
    main()
