"""Every speed row of attnkit against the tools people would pick instead, in one command (``make bench``).

    PYTHONPATH=src python benchmarks/bench.py                    # every row, native kernels then AVX2
    PYTHONPATH=src python benchmarks/bench.py --quick            # each row on a tiny slice: checks it runs
    PYTHONPATH=src python benchmarks/bench.py --rows ig --isa avx2

Rows (each runs the benchmark script that measures it, side by side with its peer in one run):

- ``transformer-training``: OpenNMT-py against attnkit, same network, same wall-clock budget, trained at
  the same time (``peer_opennmt/run.py --model transformer``), and attnkit's step throughput on the same
  batches (``train_throughput.py``, fp32 and ``--precision auto``); attnkit trains with ``--precision auto``,
  bf16 where a matmul probe measures it faster (bf16 units: AVX512_BF16, AMX), else fp32;
- ``rnn-training``: the same with the RNN (``peer_opennmt/run.py --model rnn``), and ``seq2seq.py``;
- ``transformer-beam5``: beam 5, fp32 and int8, attnkit against CTranslate2 (``ct2.py --beams 5``);
- ``transformer-greedy``: greedy, int8 with and without the shortlist, against CTranslate2 int8
  (``ct2.py --beams 1``);
- ``rnn-beam5``: attnkit's RNN against OpenNMT-py's ``onmt_translate`` (``ct2.py --peer``, on the
  checkpoints of a finished ``peer_opennmt`` RNN run);
- ``ig``: seconds per 40-word verse of integrated gradients and input × gradient
  (``attribution_speed.py``).

Each row runs twice: with the machine's native kernels and limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``,
oneDNN and MKL limited, ``CT2_FORCE_CPU_ISA=AVX2``: what an AVX2-only CPU runs); each table is headed by
the CPU (model name and its avx2 / avx512f / avx512_bf16 / amx flags) and the kernels in use (torch's
ATen capability under that environment, CTranslate2's ISA). A peer that is not installed (OpenNMT-py in
``runs/peer_opennmt/onmt-venv``, made by ``peer_opennmt/setup.sh``; the ``ctranslate2`` package) gives
a row that says so instead of failing. ``--quick`` runs every row on a tiny slice (a few verses, a step
or two, a 30-s training budget) with its outputs under ``runs/bench-quick``: a smoke test, not a
measurement. Results: the tables on stdout and in ``benchmarks/results/bench.md`` (``bench_quick.md``),
every run's command, status and output in ``bench.json`` (``bench_quick.json``). The full run takes
hours (two 10-minute training races per kernel set, whole test set decodes): run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable

#: Kernel sets: the machine's best, and every library limited to AVX2 (as benchmarks/ct2.py's --isa).
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

#: The CPU flags that pick the kernels (AVX2, AVX-512, its bf16 dot products, AMX tiles).
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")

ONMT_VENV = ROOT / "runs" / "peer_opennmt" / "onmt-venv"


@dataclass
class Row:
    """One row of the issue's table: what it compares, and the commands that measure it.

    ``commands(quick, isa, work)`` gives ``[(label, argv, needs)]``; ``needs`` (the row's, or a command's
    own) names what must be installed (``"ctranslate2"``, ``"opennmt"``, ``"opennmt-rnn-run"``); a missing
    one makes the row (or that command's line) say so, and the rest still runs."""

    name: str
    what: str
    commands: object
    needs: tuple[str, ...] = field(default_factory=tuple)


def _script(name: str) -> str:
    return str(HERE / name)


def _transformer_training(quick: bool, isa: str, work: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    peer = [PY, _script("peer_opennmt/run.py"), "--model", "transformer", "--work", str(work / "peer-transformer")]
    peer += ["--attnkit-args", "--precision auto"]  # bf16 where this CPU's kernels make it faster
    own = [PY, _script("train_throughput.py"), "--threads", "1", "--output", str(work / "train_throughput.json")]
    own += ["--precision", "fp32", "auto"]
    if quick:
        peer += ["--minutes", "0.5", "--test-limit", "5"]
        own += ["--steps", "1", "--warmup", "1"]
    else:
        peer += ["--minutes", "10"]
    return [("OpenNMT-py race", peer, ("opennmt",)), ("attnkit step throughput", own, ())]


def _rnn_training(quick: bool, isa: str, work: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    peer = [PY, _script("peer_opennmt/run.py"), "--model", "rnn", "--work", str(work / "peer-rnn")]
    # the same network on both sides; bf16 where this CPU's kernels make it faster
    peer += ["--attnkit-args", "--rnn-attention luong --encoder-dim 128 --precision auto"]
    own = [PY, _script("seq2seq.py"), "--threads", "1"] + (["--quick"] if quick else [])
    if quick:
        peer += ["--minutes", "0.5", "--test-limit", "5"]
    else:
        peer += ["--minutes", "10"]
    return [("OpenNMT-py race", peer, ("opennmt",)), ("attnkit RNNsearch speed", own, ())]


def _ct2(beams: str, peer: str | None = None):
    def commands(quick: bool, isa: str, work: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
        label = "ct2-rnn" if peer else "ct2-transformer"
        cmd = [PY, _script("ct2.py"), "--beams", beams, "--isa", isa, "--work", str(work / label)]
        cmd += ["--out", str(work / f"{label}-beam{beams}-{isa}.json")]
        if peer:
            cmd += ["--peer", peer]
        if quick:
            cmd += ["--limit", "5", "--runs", "1", "--threads", "1"]
        return [("decoding", cmd, ())]

    return commands


def _ig(quick: bool, isa: str, work: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    cmd = [PY, _script("attribution_speed.py"), "--output", str(work / f"attribution_speed-{isa}.json")]
    if quick:
        cmd += ["--verses", "1", "--repeats", "1", "--threads", "1", "--cases", "ixg"]
    else:
        cmd += ["--cases", "ixg", "ig32", "ig"]
    return [("attributions", cmd, ())]


ROWS = {
    r.name: r
    for r in (
        Row("transformer-training", "Transformer training, same network and budget, vs OpenNMT-py",
            _transformer_training),
        Row("rnn-training", "RNN training, same network, vs OpenNMT-py", _rnn_training),
        Row("transformer-beam5", "Transformer beam 5, fp32 (and int8), vs CTranslate2", _ct2("5"), ("ctranslate2",)),
        Row("transformer-greedy", "Transformer greedy, int8 + shortlist, vs CTranslate2 int8", _ct2("1"),
            ("ctranslate2",)),
        Row("rnn-beam5", "RNN beam 5, fp32, vs OpenNMT-py", _ct2("5", str(ROOT / "runs" / "peer_opennmt" / "rnn")),
            ("opennmt-rnn-run",)),
        Row("ig", "integrated gradients and input x gradient, seconds per 40-word verse", _ig),
    )
}  # fmt: skip


def missing(need: str) -> str | None:
    """Why ``need`` is not available (a sentence naming how to get it), or None when it is."""
    if need == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        return "CTranslate2 is not installed (pip install ctranslate2; the `deploy` extra)"
    if need in ("opennmt", "opennmt-rnn-run") and not (ONMT_VENV / "bin" / "onmt_train").exists():
        venv = ONMT_VENV.relative_to(ROOT) if ONMT_VENV.is_relative_to(ROOT) else ONMT_VENV
        return f"OpenNMT-py is not installed (bash benchmarks/peer_opennmt/setup.sh {venv})"
    if need == "opennmt-rnn-run" and not (ROOT / "runs" / "peer_opennmt" / "rnn" / "train_facts.json").is_file():
        return "no finished OpenNMT-py RNN run (PYTHONPATH=src python benchmarks/peer_opennmt/run.py --model rnn)"
    return None


def cpu_info() -> dict:
    """The CPU's model name and which of :data:`FLAGS` it has, from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"model": "unknown", "flags": [], "cpus": os.cpu_count()}
    lines = text.splitlines()
    model = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), "unknown")
    flags = set(next((x.split(":", 1)[1].split() for x in lines if x.startswith("flags")), []))
    return {"model": model, "flags": [f for f in FLAGS if f in flags], "cpus": os.cpu_count()}


def kernels(isa: str) -> str:
    """The kernels a process gets under ``isa``'s environment: torch's ATen capability (asked of torch in
    that environment), oneDNN's and CTranslate2's limits."""
    env = dict(os.environ, **ISA_ENV[isa])
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    try:
        aten = subprocess.run([PY, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        aten = "?"
    ct2 = env.get("CT2_FORCE_CPU_ISA", "its best for this CPU")
    onednn = env.get("ONEDNN_MAX_CPU_ISA", "its best")
    return f"ATen {aten}, oneDNN {onednn}, CTranslate2 {ct2}"


def header(row: Row, isa: str, cpu: dict, kernel_text: str) -> str:
    """The line above each row's table: the row, the CPU and its flags, the kernels."""
    flags = " ".join(cpu["flags"]) or "none of " + "/".join(FLAGS)
    return (
        f"### {row.name}: {row.what}\n"
        f"CPU: {cpu['model']} ({cpu['cpus']} logical CPUs; flags: {flags}); kernels [{isa}]: {kernel_text}"
    )


def run_row(row: Row, isa: str, quick: bool, work: Path, timeout: float | None = None) -> list[dict]:
    """Run ``row``'s commands under ``isa``'s environment; one record per command (or one saying what is
    missing). Output is streamed to this process's stdout and kept (its last 4,000 characters)."""
    for need in row.needs:
        why = missing(need)
        if why:
            print(f"not run: {why}")
            return [{"row": row.name, "isa": isa, "status": "not installed", "why": why}]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **ISA_ENV[isa])
    records = []
    for label, cmd, needs in row.commands(quick, isa, work):
        why = next(filter(None, map(missing, needs)), None)
        if why:
            print(f"{label}: not run: {why}")
            records.append({"row": row.name, "isa": isa, "part": label, "status": "not installed", "why": why})
            continue
        print(f"$ {' '.join(cmd[1:])}", flush=True)
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
            out, err = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            status, out, err = f"timed out after {timeout:g} s", e.stdout or "", e.stderr or ""
            out, err = (x.decode() if isinstance(x, bytes) else x for x in (out, err))
        print(out, end="" if out.endswith("\n") or not out else "\n")
        if status != "ok":
            print(f"{label}: {status}\n{err[-2000:]}")
        records.append(
            {
                "row": row.name,
                "isa": isa,
                "part": label,
                "command": cmd[1:],
                "status": status,
                "seconds": round(time.perf_counter() - t, 1),
                "stdout": out[-4000:],
            }
        )
    return records


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="each row on a tiny slice (checks it runs; no measurement)")
    ap.add_argument("--rows", nargs="+", choices=sorted(ROWS), default=list(ROWS), help="rows to run (default: all)")
    ap.add_argument("--isa", nargs="+", choices=sorted(ISA_ENV), default=["native", "avx2"], help="kernel sets")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: runs/bench or runs/bench-quick)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per command (default: none)")
    ap.add_argument(
        "--out", type=Path, default=None, help="JSON report (default: benchmarks/results/bench[_quick].json)"
    )
    args = ap.parse_args(argv)
    suffix = "_quick" if args.quick else ""
    args.work = args.work or ROOT / "runs" / f"bench{'-quick' if args.quick else ''}"
    args.out = args.out or HERE / "results" / f"bench{suffix}.json"
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    cpu = cpu_info()
    records, tables = [], []
    for isa in args.isa:
        kernel_text = kernels(isa)
        for name in args.rows:
            row = ROWS[name]
            head = header(row, isa, cpu, kernel_text)
            print(f"\n{head}", flush=True)
            recs = run_row(row, isa, args.quick, args.work, args.timeout)
            records += recs
            body = "\n".join(r.get("stdout", "").rstrip() or f"not run: {r.get('why', r['status'])}" for r in recs)
            tables.append(f"{head}\n\n```\n{body}\n```\n")
    report = {"cpu": cpu, "quick": args.quick, "records": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    args.out.with_suffix(".md").write_text("\n".join(tables))
    failed = [r for r in records if r["status"] not in ("ok", "not installed")]
    print(f"\nwrote {args.out} and {args.out.with_suffix('.md')}; {len(failed)} command(s) failed", file=sys.stderr)
    return records


if __name__ == "__main__":
    sys.exit(1 if any(r["status"] not in ("ok", "not installed") for r in main()) else 0)
