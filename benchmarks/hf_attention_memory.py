"""Peak memory of reading attention from a GPT-2-small-sized model on a 2,048-token input.

    PYTHONPATH=src .venv/bin/python benchmarks/hf_attention_memory.py [--tokens 2048] [--layer 6] [--threads 1]

A GPT-2 of the small size (768 wide, 12 layers, 12 heads, 124 M parameters with its tied output layer;
random weights from its config, ``n_positions`` raised to the input length) runs one forward pass over
random tokens, each mode in a fresh process:

- ``plain``: the model as it is (sdpa), nothing read: the baseline;
- ``one layer``: attnkit's capture of one chosen layer (every head), its map kept;
- ``all layers streamed``: every layer captured and handed to a callback that keeps only its head mean
  (what a view streams), never all the per-head maps at once;
- ``eager output_attentions``: the model loaded in eager mode returning every layer's maps (what
  bertviz reads), for comparison.

Memory is the process's peak resident set (``VmHWM``), reset after the model is built
(``/proc/self/clear_refs``), so each row is the peak of the forward pass alone plus the resident
model; ``forward extra`` is that peak minus the resident set just before the pass. The ratios are
against ``plain`` measured in the same run. Writes benchmarks/results/hf_attention_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MODES = ("plain", "one layer", "all layers streamed", "eager output_attentions")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_mode(mode: str, tokens: int, layer: int, threads: int) -> dict:
    import time

    import torch
    import transformers

    from attnkit.hf.capture import attention_sites, capture_attention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=tokens)  # the small size: 768 wide, 12 layers, 12 heads
    if mode.startswith("eager"):
        config._attn_implementation = "eager"
    model = transformers.GPT2LMHeadModel(config).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (1, tokens))
    kept = {}
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on
    before = _status("VmRSS")
    t0 = time.perf_counter()
    with torch.no_grad():
        if mode == "plain":
            model(input_ids=ids)
        elif mode == "one layer":
            sites = [s for s in attention_sites(model) if s.layer == layer]
            with capture_attention(model, lambda s, w: kept.__setitem__(s.layer, w), sites=sites):
                model(input_ids=ids)
        elif mode == "all layers streamed":
            with capture_attention(model, lambda s, w: kept.__setitem__(s.layer, w.mean(1))):
                model(input_ids=ids)
        else:
            out = model(input_ids=ids, output_attentions=True)
            kept = dict(enumerate(out.attentions))
    seconds = time.perf_counter() - t0
    peak = _status("VmHWM")
    held = sum(t.numel() * t.element_size() for t in kept.values())
    return {
        "mode": mode,
        "parameters": params,
        "peak_bytes": peak,
        "forward_extra_bytes": peak - before,
        "maps_held_bytes": held,
        "seconds": round(seconds, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layer", type=int, default=6, help="the captured layer, 0-based (default: 6)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)  # one mode, in this process
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.tokens, args.layer, args.threads)))
        return
    rows = []
    for mode in MODES:
        cmd = [sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens), "--layer", str(args.layer)]
        cmd += ["--threads", str(args.threads)]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]
    mb = 1 << 20
    print(f"GPT-2 small ({base['parameters'] / 1e6:.0f} M parameters), {args.tokens} tokens, {args.threads} thread(s)")
    print(
        f"{'mode':26s} {'peak MB':>8s} {'× plain':>8s} {'forward extra MB':>17s} {'× plain':>8s} {'maps held MB':>13s} {'s':>6s}"
    )
    for r in rows:
        r["peak_ratio"] = round(r["peak_bytes"] / base["peak_bytes"], 3)
        r["forward_extra_ratio"] = round(r["forward_extra_bytes"] / base["forward_extra_bytes"], 3)
        print(
            f"{r['mode']:26s} {r['peak_bytes'] / mb:8.0f} {r['peak_ratio']:8.2f} {r['forward_extra_bytes'] / mb:17.0f} "
            f"{r['forward_extra_ratio']:8.2f} {r['maps_held_bytes'] / mb:13.0f} {r['seconds']:6.1f}"
        )
    out = Path(__file__).resolve().parent / "results" / "hf_attention_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"tokens": args.tokens, "layer": args.layer, "threads": args.threads, "rows": rows}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
