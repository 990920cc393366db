"""A first model in a fixed time: train each model on a corpus for ``--seconds`` and score it on the test split.

The English→Spanish Bible (the built-in Spanish→English pairs turned around) is written as three TSVs
and prepared as corpus ``en-es`` under ``$ATTNKIT_HOME`` (once), the way a user prepares a corpus of
their own; then, for each ``--config``, ``attnkit train translation --data en-es --max-time-s S
--threads T`` (the budget-fitted schedule unless the config says otherwise) and ``attnkit evaluate
translation --beam 5`` on the whole test split. Each run's steps, its schedule, the machine's load
before and after and the test BLEU go to a JSON file and a table.

    PYTHONPATH=src python benchmarks/budget_training.py --seconds 600 --threads 2 \\
        --config "transformer=--model transformer" --config "default=" --output benchmarks/results/budget.json

Trainings run one after another, niced to -10 when allowed (``--nice``): on a shared machine the load
before and after each is printed, and a result measured under load says so.

``--load-seconds S`` shares the machine on purpose: beside each run, a second training of the same
command (``--threads`` threads, not niced) runs for its first ``S`` seconds, as another user's job would;
the record then says how the budget held (the steps first planned and made, the learning rate of the last
step as a share of its peak, the wall time):

    PYTHONPATH=src python benchmarks/budget_training.py --seconds 600 --threads 2 --nice 0 \
        --config "quiet=" --output benchmarks/results/budget_quiet.json
    PYTHONPATH=src python benchmarks/budget_training.py --seconds 600 --threads 2 --nice 0 --load-seconds 300 \
        --config "loaded=" --output benchmarks/results/budget_loaded.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path


def attnkit_command(*args: str, nice: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "attnkit.cli", *args]
    return ["nice", "-n", str(nice), *cmd] if nice is not None else cmd


def attnkit(*args: str, nice: int | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(attnkit_command(*args, nice=nice), check=True, text=True, **kw)


def prepare_en_es(home: Path, workdir: Path) -> None:
    """The Bible's pairs turned around (en -> es), as three TSVs, prepared as corpus ``en-es``."""
    if (home / "corpora" / "en-es" / "meta.json").is_file():
        return
    from attnkit.data.datasets.bible import load_pairs

    workdir.mkdir(parents=True, exist_ok=True)
    files = {}
    for split in ("train", "valid", "test"):
        path = workdir / f"{split}.tsv"
        path.write_text("".join(f"{p.tgt}\t{p.src}\n" for p in load_pairs(split, home=home)), encoding="utf-8")
        files[split] = str(path)
    attnkit(
        "--home", str(home), "data", "prepare", "parallel", "en-es", "--src-lang", "en", "--tgt-lang", "es",
        "--train", files["train"], "--valid", files["valid"], "--test", files["test"],
    )  # fmt: skip


def prepare_kjv_web(home: Path, workdir: Path) -> None:
    """A second corpus: the King James Version (1769 text of the 1611 English, SWORD module
    ``engKJV2006eb``, Debian ``sword-text-kjv``) to the World English Bible, verse by verse, split by
    chapter as the built-in Bible is; prepared as corpus ``kjv-web`` (Early Modern to modern English)."""
    if (home / "corpora" / "kjv-web" / "meta.json").is_file():
        return
    from attnkit.data.datasets.bible import TARGET_MODULE, pair_verses, read_module_verses, split_of

    pairs, _ = pair_verses(read_module_verses("engKJV2006eb"), read_module_verses(TARGET_MODULE))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = {"train": [], "valid": [], "test": []}
    for book, chapter, _verse, kjv, web in pairs:
        rows[split_of(book, chapter)].append(f"{kjv}\t{web}\n")
    files = {}
    for split, lines in rows.items():
        files[split] = workdir / f"{split}.tsv"
        files[split].write_text("".join(lines), encoding="utf-8")
    attnkit(
        "--home", str(home), "data", "prepare", "parallel", "kjv-web", "--src-lang", "en", "--tgt-lang", "en",
        "--train", str(files["train"]), "--valid", str(files["valid"]), "--test", str(files["test"]),
    )  # fmt: skip


CORPORA = {"en-es": prepare_en_es, "kjv-web": prepare_kjv_web}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").is_file() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", action="append", default=[], help="NAME=FLAGS for `attnkit train translation`")
    ap.add_argument(
        "--data", default="en-es", help="the corpus (en-es and kjv-web are built from the SWORD Bibles when missing)"
    )
    ap.add_argument("--runs", default="/tmp/attnkit-budget-runs")
    ap.add_argument("--nice", type=int, default=-10)
    ap.add_argument("--output", default=None)
    ap.add_argument(
        "--load-seconds", type=float, default=0.0, help="a second training beside each run for its first S seconds"
    )
    args = ap.parse_args()
    from attnkit.paths import attnkit_home

    home = attnkit_home()
    if args.data in CORPORA:
        CORPORA[args.data](home, Path(args.runs) / f"{args.data}-files")
    nice = args.nice if os.geteuid() == 0 or args.nice >= 0 else None
    results = []
    for spec in args.config or ["default="]:
        name, _, flags = spec.partition("=")
        out = Path(args.runs) / name
        subprocess.run(["rm", "-rf", str(out)], check=True)
        before = load()
        other = None
        if args.load_seconds > 0:  # another user's job on the machine, for the run's first load_seconds
            subprocess.run(["rm", "-rf", f"{out}-load"], check=True)
            other = subprocess.Popen(
                attnkit_command(
                    "train", "translation", "--data", args.data, "--max-time-s", str(args.load_seconds),
                    "--threads", str(args.threads), "--out-dir", f"{out}-load", "--no-progress",
                    "--valid-every-epochs", "0",
                ),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        t0 = time.perf_counter()
        attnkit(
            "train", "translation", "--data", args.data, "--max-time-s", str(args.seconds), "--threads",
            str(args.threads), "--out-dir", str(out), "--no-progress", *shlex.split(flags), nice=nice,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if other is not None:
            other.wait()
        after = load()
        end = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()][-1]
        scores = json.loads(
            attnkit(
                "evaluate",
                "translation",
                "--model",
                str(out / "best"),
                "--beam",
                "5",
                "--json",
                nice=nice,
                capture_output=True,
            ).stdout
        )
        record = json.loads((out / "train_config.json").read_text())
        results.append(
            {
                "name": name, "flags": flags, "model": record["model"], "steps": end["steps"],
                "time_s": end["time_s"], "wall_s": wall, "schedule": record.get("schedule"),
                "budget": record.get("budget"), "load_seconds": args.load_seconds, "load_before": before,
                "load_after": after, "scores": scores,
            }
        )  # fmt: skip
        print(json.dumps(results[-1]), flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
