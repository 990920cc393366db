"""Peak memory and time of one layer's attention and of the information-flow routes for one position,
against the plain forward pass, on a random-weight model of Llama-3.2-1B's configuration (issue 56,
target "Memory": ≤ 1.5× the plain forward's peak, ≤ 3× its time, at 4,096 tokens on CPU).

    PYTHONPATH=src nice .venv/bin/python benchmarks/lm_memory.py [--tokens 4096] [--layers 16] [--threads 1]
        [--modes plain,"one layer",routes] [--out benchmarks/results/lm_memory.json]

The model: ``LlamaConfig`` with Llama-3.2-1B's sizes (2,048 wide, 16 layers, 32 query heads over 8
key/value heads, 8,192 MLP, 128,256 vocabulary, tied embeddings, RoPE θ 500,000), random weights,
float32, sdpa; random tokens. ``--layers`` and ``--tokens`` shrink it for a quick look. Each mode runs
in a fresh process:

- ``plain``: one forward pass, nothing read (the baseline);
- ``one layer``: attnkit's capture of one layer's attention (every head), its map kept;
- ``routes``: :func:`attnkit.attribution.information_flow.information_flow_routes` for the last
  position (τ = 0.04): one plain pass keeping each layer's input, then the layers replayed top-down,
  importances only for the positions the graph reaches;
- ``routes tau 0``: the same at τ = 0, where every earlier position is reached below the last layer
  (the dense worst case: every target's importances in every layer but the last).

Memory is the process's peak resident set (``VmHWM``), reset after the model is built; time is wall
clock and the process's CPU time (the steadier of the two on a shared machine: with one thread it is
the work done, whatever else runs); the ratios are against ``plain`` in the same run (``--modes`` picks some, ``plain`` always among them:
``routes tau 0`` is out of reach at full size, a graph of every edge). Writes ``--out`` (default
benchmarks/results/lm_memory.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MODES = ("plain", "one layer", "routes", "routes tau 0")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def llama_1b(layers: int, tokens: int):
    """A random-weight ``LlamaForCausalLM`` of Llama-3.2-1B's configuration with ``layers`` layers (eval,
    float32, sdpa; seed 0) and ``tokens`` random token ids."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        vocab_size=128256,
        max_position_embeddings=max(131072, tokens),
        rope_theta=500000.0,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    return model, torch.randint(0, config.vocab_size, (tokens,))


def run_mode(mode: str, tokens: int, layers: int, threads: int) -> dict:
    import torch

    from attnkit.attribution.information_flow import information_flow_routes
    from attnkit.hf.capture import attention_sites, capture_attention

    torch.set_num_threads(threads)
    model, ids = llama_1b(layers, tokens)
    kept = {}
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on
    before = _status("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        if mode == "plain":
            model(input_ids=ids[None], use_cache=False)
        elif mode == "one layer":
            sites = [s for s in attention_sites(model) if s.layer == layers // 2]
            with capture_attention(model, lambda s, w: kept.__setitem__(s.layer, w), sites=sites):
                model(input_ids=ids[None], use_cache=False)
        else:
            graph = information_flow_routes(model, ids, threshold=0.0 if mode == "routes tau 0" else 0.04)
            kept["edges"] = len(graph.edges)
            kept["positions"] = len({e.source for e in graph.edges})  # reached at the first layer's input
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "mode": mode,
        "peak_bytes": _status("VmHWM"),
        "before_bytes": before,
        "seconds": seconds,
        "cpu_seconds": cpu,
        **{k: v for k, v in kept.items() if k in ("edges", "positions")},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to run (plain always runs)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "lm_memory.json")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode in this process
    args = ap.parse_args(argv)
    modes = ["plain", *(m for m in MODES[1:] if m in args.modes.split(","))]
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        ap.error(f"--modes: unknown {', '.join(sorted(unknown))} (choose from {', '.join(MODES)})")
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.tokens, args.layers, args.threads)))
        return
    rows = []
    for mode in modes:
        cmd = [sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens)]
        cmd += ["--layers", str(args.layers), "--threads", str(args.threads)]
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        print(rows[-1], flush=True)
    plain = rows[0]
    for r in rows:
        r["peak_ratio"] = r["peak_bytes"] / plain["peak_bytes"]
        r["time_ratio"] = r["seconds"] / plain["seconds"]
        r["cpu_ratio"] = r["cpu_seconds"] / plain["cpu_seconds"]
    out = args.out
    out.write_text(json.dumps({"tokens": args.tokens, "layers": args.layers, "rows": rows}, indent=2) + "\n")
    for r in rows:
        print(
            f"{r['mode']:>10}: peak {r['peak_bytes'] / 2**30:.2f} GiB ({r['peak_ratio']:.2f}×), "
            f"{r['seconds']:.1f} s ({r['time_ratio']:.2f}×), CPU {r['cpu_seconds']:.1f} s ({r['cpu_ratio']:.2f}×)"
        )


if __name__ == "__main__":
    main()
