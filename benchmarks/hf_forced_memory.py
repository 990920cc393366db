"""Peak memory of attributing every next token of a long text (``attnkit explain --text``) by attention
and rollout, on a GPT-2-small-sized model.

    PYTHONPATH=src .venv/bin/python benchmarks/hf_forced_memory.py [--tokens 1024] [--threads 1]

A GPT-2 of the small size (768 wide, 12 layers, 12 heads; random weights from its config) reads
``--tokens`` random tokens with teacher forcing, each mode in a fresh process:

- ``plain``: one forward pass, nothing read: the baseline;
- ``attention (attnkit)``: :func:`attnkit.attribution.explain_generation`'s rows of the last layer's
  head-mean attention for every position (one layer's maps captured);
- ``rollout (attnkit)``: the rollout's rows for every position, composed layer by layer as the model runs
  (one ``(n, n)`` product held);
- ``rollout, every layer held``: every layer's per-head maps held at once, then the rollout (what
  ``explain_generation`` did before it streamed: ``SelfAttentionModel.self_attention`` then ``rollout()``).

Memory is the process's peak resident set (``VmHWM``) reset after the model is built; ``extra`` is that
peak minus the resident set just before the pass; ratios against ``plain`` in the same run. Writes
benchmarks/results/hf_forced_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MODES = ("plain", "attention (attnkit)", "rollout (attnkit)", "rollout, every layer held")
TOKENIZER = Path(__file__).resolve().parent.parent / "tests" / "hf_tiny_tokenizer.json"


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_mode(mode: str, tokens: int, threads: int) -> dict:
    import time

    import torch
    import transformers

    from attnkit.attribution.generation import _attention_rows
    from attnkit.hf.self_attention import SelfAttentionModel

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=tokens + 1)  # the small size: 768 wide, 12 layers, 12 heads
    model = transformers.GPT2LMHeadModel(config).eval()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))  # only for the wrapper; ids given
    sa = SelfAttentionModel(model, tok, source="gpt2-small-random")
    ids = torch.randint(6, len(tok), (tokens + 1,)).tolist()  # n + 1 ids of the wrapper's vocabulary: n inputs, n rows
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on
    before = _status("VmRSS")
    t0 = time.perf_counter()
    with torch.no_grad():
        if mode == "plain":
            model(input_ids=torch.tensor([ids[:-1]]))
        elif mode == "attention (attnkit)":
            rows = _attention_rows(sa, ids, 1, "attention", None, None).scores
        elif mode == "rollout (attnkit)":
            rows = _attention_rows(sa, ids, 1, "rollout", None, None).scores
        else:
            rows = sa.self_attention(ids[:-1]).rollout()
    seconds = time.perf_counter() - t0
    peak = _status("VmHWM")
    if mode != "plain":
        assert rows.shape == (tokens, tokens)
    return {"mode": mode, "peak_bytes": peak, "extra_bytes": peak - before, "seconds": round(seconds, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)  # one mode, in this process
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.tokens, args.threads)))
        return
    rows = []
    for mode in MODES:
        cmd = [sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens), "--threads", str(args.threads)]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]
    mb = 1 << 20
    print(f"GPT-2 small, random weights, {args.tokens} tokens forced, {args.threads} thread(s)")
    print(f"{'mode':28s} {'peak MB':>8s} {'× plain':>8s} {'extra MB':>9s} {'× plain':>8s} {'s':>6s}")
    for r in rows:
        r["peak_ratio"] = round(r["peak_bytes"] / base["peak_bytes"], 3)
        r["extra_ratio"] = round(r["extra_bytes"] / base["extra_bytes"], 3)
        print(
            f"{r['mode']:28s} {r['peak_bytes'] / mb:8.0f} {r['peak_ratio']:8.2f} {r['extra_bytes'] / mb:9.0f} "
            f"{r['extra_ratio']:8.2f} {r['seconds']:6.1f}"
        )
    out = Path(__file__).resolve().parent / "results" / "hf_forced_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"tokens": args.tokens, "threads": args.threads, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
