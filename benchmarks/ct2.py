"""attnkit's own decoding against CTranslate2 (and OpenNMT-py): sentences/s of each translate command.

    PYTHONPATH=src .venv/bin/python benchmarks/ct2.py                       # the shipped transformer-es-en
    PYTHONPATH=src .venv/bin/python benchmarks/ct2.py --peer runs/peer_opennmt/rnn          # + OpenNMT-py
    PYTHONPATH=src .venv/bin/python benchmarks/ct2.py --peer runs/peer_opennmt/transformer

Every row is one toolkit's own translate command on the same test verses (one per line), timed as a
whole process (loading included, as a user runs it), with ``OMP_NUM_THREADS`` = the thread count
(CTranslate2 reads it too: :meth:`attnkit.deploy.ct2_engine.CT2Translator.load`), batches of 64
sentences sorted by length, scored afterwards with sacrebleu. Each command also reports the seconds of
its translation alone (``attnkit translate --report-time``, ``onmt_translate -report_time``): the
second rate of each cell, without the start-up (torch's import, ~2–3 s for attnkit and OpenNMT-py, none
for CTranslate2) and the model's loading, what a server or a long job sees. Rows:

- ``attnkit fp32`` / ``attnkit int8``: ``attnkit translate --precision fp32|int8``;
- ``CT2 float32`` / ``CT2 int8``: ``attnkit translate --engine ctranslate2`` on ``attnkit export
  --format ctranslate2 --quantization float32|int8`` (Transformers only: CTranslate2 has no RNNs);
- ``CT2 int8 vmap``: the int8 export with the lexical shortlist (``attnkit shortlist``) as its
  vocabulary map, ``--vmap``;
- ``attnkit int8 shortlist``: attnkit's own decoding over the same shortlist;
- ``attnkit bf16``: ``attnkit translate --precision bf16`` (bf16 weights), only with the machine's own
  kernels on a CPU where bf16 matrix products are measured faster than fp32 (the rule of
  ``--precision auto``: native bf16 units, AVX512_BF16 or AMX);
- ``OpenNMT-py``: ``onmt_translate`` on the OpenNMT-py checkpoint of a ``benchmarks/peer_opennmt``
  run (``--peer WORK``), whose attnkit checkpoint then replaces the shipped model.

Each (row, beam, threads) is run ``--runs`` times, the runs of all rows alternating, and the median is
reported; ``--isa avx2`` limits torch, oneDNN, MKL and CTranslate2 to AVX2 kernels on an AVX-512 CPU
(what an AVX2-only CPU runs). A second table times the one-sentence command (``translate "Jesús lloró."``), where startup
(torch's import) dominates. The CPU is named from /proc/cpuinfo. Run it on a quiet machine: timings
taken while other work runs are not comparable. ``--limit 20 --runs 1`` checks that everything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.device import cpu_bf16_speedup  # noqa: E402
from attnkit.pretrained import resolve_model  # noqa: E402
from attnkit.tasks.translation import corpus_scores  # noqa: E402

sys.path.insert(0, str(HERE / "peer_opennmt"))
from run import onmt_env  # noqa: E402  (benchmarks/peer_opennmt/run.py: how OpenNMT-py is run)

ATTNKIT = [sys.executable, "-m", "attnkit.cli"]
ONE_SENTENCE = "Jesús lloró."


def cpu_name() -> str:
    """The CPU's model name and its widest x86 vector extension, from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name} ({vector}, {os.cpu_count()} logical CPUs)"


#: ``--isa avx2``: every library's kernels limited to AVX2 on a CPU that has more (AVX-512), so that one
#: machine measures what an AVX2-only CPU gets: torch's own kernels (ATen), oneDNN, MKL, CTranslate2.
ISA_ENV = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "DNNL_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
    },
}
ISA: dict[str, str] = {}


#: What each translate command prints about its own decoding time (``attnkit translate --report-time``,
#: ``onmt_translate -report_time``): the seconds spent translating, without start-up and loading.
DECODING_TIME = (
    re.compile(r"translated in ([0-9.]+) s"),
    re.compile(r"Total translation time \(s\): ([0-9.]+)"),
)


def run(cmd: list, threads: int, stdout: Path | None = None) -> tuple[float, float | None]:
    """Wall seconds of ``cmd`` as a whole process, with ``threads`` threads, and the seconds it reports
    spending on translation alone (None when it reports none)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT / "src"), **ISA)
    if "onmt_translate" in str(cmd[0]):  # its stubs, and torch.load as OpenNMT-py 3.5.1 needs it
        env = {**onmt_env(threads), **ISA}
    t = time.perf_counter()
    with open(stdout or os.devnull, "w", encoding="utf-8") as fh:
        done = subprocess.run([str(c) for c in cmd], env=env, stdout=fh, stderr=subprocess.PIPE, check=True)
    wall = time.perf_counter() - t
    err = done.stderr.decode("utf-8", "replace")
    found = [m for pattern in DECODING_TIME for m in pattern.findall(err)]
    return wall, (float(found[-1]) if found else None)


def prepare(args, work: Path) -> dict:
    """The model, its exports, the shortlist and the test verses: built once, not timed."""
    work.mkdir(parents=True, exist_ok=True)
    facts: dict = {}
    if args.peer:
        peer = Path(args.peer)
        peer_facts = json.loads((peer / "train_facts.json").read_text())
        facts["model"] = peer_facts["attnkit_checkpoint"]
        facts["onmt_checkpoint"] = peer_facts["onmt_checkpoint"]
        facts["onmt_venv"] = str(peer.parent / "onmt-venv")
        srcs = (peer / "data" / "test.es.txt").read_text(encoding="utf-8").splitlines()
        pieces = (peer / "data" / "test.es").read_text(encoding="utf-8").splitlines()
        refs = (peer / "data" / "test.en.txt").read_text(encoding="utf-8").splitlines()
    else:
        facts["model"] = str(resolve_model(args.model))
        pairs = load_pairs("test", home=args.home)
        srcs, refs, pieces = [p.src for p in pairs], [p.tgt for p in pairs], None
    n = len(srcs) if args.limit is None else min(args.limit, len(srcs))
    (work / "test.es.txt").write_text("\n".join(srcs[:n]) + "\n", encoding="utf-8")
    if pieces is not None:
        (work / "test.es.pieces").write_text("\n".join(pieces[:n]) + "\n", encoding="utf-8")
    facts["refs"], facts["n"] = refs[:n], n
    kind = json.loads((Path(facts["model"]) / "config.json").read_text())["model_type"]
    facts["model_type"] = kind
    shortlist = work / "shortlist.safetensors"
    if not shortlist.is_file():
        subprocess.run(
            [
                *ATTNKIT,
                *(["--home", args.home] if args.home else []),
                "shortlist",
                "--model",
                facts["model"],
                "--output",
                shortlist,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        )
    facts["shortlist"] = shortlist
    if kind == "transformer":
        for name, extra in (
            ("ct2-float32", ["--quantization", "float32"]),
            ("ct2-int8", ["--quantization", "int8"]),
            ("ct2-int8-vmap", ["--quantization", "int8", "--shortlist", shortlist]),
        ):
            out = work / name
            subprocess.run(
                [*ATTNKIT, "export", facts["model"], out, "--format", "ctranslate2", "--force", *extra],
                check=True,
                stdout=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
            )
            facts[name] = out
    return facts


def commands(facts: dict, work: Path, beam: int) -> dict[str, list]:
    """Each row's translate command for ``beam`` (reading ``test.es.txt`` or, for OpenNMT-py, its pieces)."""
    text = work / "test.es.txt"
    common = ["--file", text, "--beam", beam, "--truncate", "--device", "cpu", "--report-time"]
    rows = {
        "attnkit fp32": [*ATTNKIT, "translate", "--model", facts["model"], *common, "--precision", "fp32"],
        "attnkit int8": [*ATTNKIT, "translate", "--model", facts["model"], *common, "--precision", "int8"],
        "attnkit int8 shortlist": [
            *ATTNKIT,
            "translate",
            "--model",
            facts["model"],
            *common,
            "--precision",
            "int8",
            "--shortlist",
            facts["shortlist"],
        ],
    }
    if facts.get("bf16"):
        rows["attnkit bf16"] = [*ATTNKIT, "translate", "--model", facts["model"], *common, "--precision", "bf16"]
    if facts["model_type"] == "transformer":
        ct2 = [*ATTNKIT, "translate", "--engine", "ctranslate2", *common]
        rows["CT2 float32"] = [*ct2, "--model", facts["ct2-float32"]]
        rows["CT2 int8"] = [*ct2, "--model", facts["ct2-int8"]]
        rows["CT2 int8 vmap"] = [*ct2, "--model", facts["ct2-int8-vmap"], "--vmap"]
    if "onmt_checkpoint" in facts:
        rows["OpenNMT-py"] = [
            Path(facts["onmt_venv"]) / "bin" / "onmt_translate",
            "-model", facts["onmt_checkpoint"], "-src", work / "test.es.pieces", "-output", work / "onmt.out",
            "-beam_size", beam, "-batch_size", 64, "-batch_type", "sents", "-max_length", 250, "-report_time",
        ]  # fmt: skip
    return rows


def hypotheses(row: str, out: Path, work: Path) -> list[str]:
    if row != "OpenNMT-py":
        return out.read_text(encoding="utf-8").splitlines()
    from attnkit.data.tokenizer import Tokenizer

    tok = Tokenizer.load(Path(json.loads((work / "facts.json").read_text())["model"]))
    lines = (work / "onmt.out").read_text(encoding="utf-8").splitlines()
    return [tok.decode([tok.piece_to_id(p) for p in line.split()]) for line in lines]


def _rates(cell: dict) -> str:
    """A table cell: whole-process sentences/s, then the translation's own where it was reported."""
    own = cell["decoding_sentences_per_s"]
    return f"{cell['sentences_per_s']:.1f}" + (f" / {own:.1f}" if own else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="transformer-es-en", help="a shipped or local model (default: transformer-es-en)"
    )
    ap.add_argument("--peer", default=None, help="a finished benchmarks/peer_opennmt work folder (adds OpenNMT-py)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    ap.add_argument("--beams", type=int, nargs="+", default=[5, 1], help="beam sizes (default: 5 1)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row, alternating (default: 3; the median)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N test verses (default: all)")
    ap.add_argument("--home", default=None, help="ATTNKIT_HOME with the prepared Bible corpus")
    ap.add_argument(
        "--isa", choices=sorted(ISA_ENV), default="native", help="avx2: limit every library to AVX2 (default: native)"
    )
    ap.add_argument("--work", default=None, help="work folder (default: runs/ct2bench/MODEL)")
    ap.add_argument("--out", default=None, help="JSON report (default: WORK/report.json)")
    args = ap.parse_args()
    label = Path(args.peer).name if args.peer else args.model
    work = Path(args.work or ROOT / "runs" / "ct2bench" / label).resolve()
    facts = prepare(args, work)
    (work / "facts.json").write_text(json.dumps({k: str(v) for k, v in facts.items() if k != "refs"}, indent=2))
    ISA.update(ISA_ENV[args.isa])
    facts["bf16"] = args.isa == "native" and cpu_bf16_speedup() >= 1.2
    cpu = cpu_name() + (", kernels limited to AVX2 (--isa avx2)" if args.isa == "avx2" else "")
    results: list[dict] = []
    for threads in args.threads:
        for beam in args.beams:
            rows = commands(facts, work, beam)
            times: dict[str, list[float]] = {r: [] for r in rows}
            decoding: dict[str, list[float]] = {r: [] for r in rows}
            for _ in range(args.runs):  # alternate the rows within each run
                for row, cmd in rows.items():
                    out = work / f"out.{row.replace(' ', '_')}.b{beam}.t{threads}.txt"
                    wall, own = run(cmd, threads, out)
                    times[row].append(wall)
                    if own is not None:
                        decoding[row].append(own)
            for row in rows:
                out = work / f"out.{row.replace(' ', '_')}.b{beam}.t{threads}.txt"
                scores = corpus_scores(hypotheses(row, out, work), facts["refs"])
                secs = statistics.median(times[row])
                own = statistics.median(decoding[row]) if decoding[row] else None
                results.append(
                    {
                        "row": row,
                        "threads": threads,
                        "beam": beam,
                        "sentences_per_s": round(facts["n"] / secs, 2),
                        "seconds": [round(t, 2) for t in times[row]],
                        # the translation alone, as the command reports it (no start-up, no loading)
                        "decoding_sentences_per_s": round(facts["n"] / own, 2) if own else None,
                        "decoding_seconds": [round(t, 3) for t in decoding[row]],
                        "bleu": round(scores["bleu"], 2),
                    }
                )
    one = []
    model_args = {"attnkit fp32": ["--model", facts["model"]]}
    if facts["model_type"] == "transformer":
        model_args["CT2 int8"] = ["--engine", "ctranslate2", "--model", facts["ct2-int8"]]
    for row, extra in model_args.items():
        secs = [run([*ATTNKIT, "translate", *extra, "--device", "cpu", ONE_SENTENCE], 1)[0] for _ in range(args.runs)]
        one.append({"row": row, "seconds": round(statistics.median(secs), 2)})
    report = {
        "cpu": cpu,
        "model": facts["model"],
        "verses": facts["n"],
        "runs": args.runs,
        "rows": results,
        "one_sentence": one,
    }
    out = Path(args.out) if args.out else work / "report.json"
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False))

    print(f"\n{label}: {facts['n']} test verses, median of {args.runs} alternating runs; CPU: {cpu}")
    print("sent/s: the whole process (start-up and loading included) / the translation alone (as it reports)")
    print(
        "| engine | threads | "
        + " | ".join(f"beam {b} sent/s" for b in args.beams)
        + " | BLEU "
        + " / ".join(f"beam {b}" for b in args.beams)
        + " |"
    )
    print("|---|---|" + "---|" * (len(args.beams) + 1))
    for threads in args.threads:
        for row in dict.fromkeys(r["row"] for r in results):
            cells = {r["beam"]: r for r in results if r["row"] == row and r["threads"] == threads}
            rates = " | ".join(_rates(cells[b]) for b in args.beams)
            bleus = " / ".join(f"{cells[b]['bleu']:.2f}" for b in args.beams)
            print(f"| {row} | {threads} | {rates} | {bleus} |")
    print(
        f'\none sentence (`attnkit translate "{ONE_SENTENCE}"`, 1 thread): '
        + ", ".join(f"{o['row']} {o['seconds']} s" for o in one)
    )
    print(f"report: {out}")


if __name__ == "__main__":
    main()
