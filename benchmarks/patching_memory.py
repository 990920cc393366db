"""Peak memory of patching and ablation against a plain forward: a Llama-shaped 16-layer attnkit language model
(random weights; d_model 512, 8 heads, SwiGLU, vocab 2048) on one 1,024-token input, CPU, float32, no grad.

Each mode runs in its own process; the peak resident set is reset after the model is built and the inputs
drawn (``echo 5 > /proc/self/clear_refs`` resets ``VmHWM``), so the number is the peak *added* by the mode
(``VmHWM − VmRSS`` before it; weights excluded). Modes: ``forward`` (logits of the whole input);
``ablation`` (a head zeroed, an MLP zeroed and the residual stream zeroed at one position, in one forward);
``patch_head`` (record one layer's heads on the source input, ``record_heads(only=...)``, then the patched
forward); ``patch_residual`` (record one layer's residual stream, then the patched forward at one position).
Writes benchmarks/results/patching_memory.json. Linux only (/proc).

    PYTHONPATH=src python benchmarks/patching_memory.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MODES = ("forward", "ablation", "patch_head", "patch_residual")


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def run(mode: str) -> dict:
    import torch

    from attnkit.attribution.interventions import HeadAblation, HeadPatch, intervene, record_heads
    from attnkit.attribution.stream_interventions import MLPAblation, ResidualAblation, ResidualPatch, record_stream
    from attnkit.models.language_model import LanguageModel, LanguageModelConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LanguageModelConfig(vocab_size=2048, d_model=512, n_layers=16, n_heads=8, max_len=1024, shape="llama")
    model = LanguageModel(cfg).eval()
    ids = torch.randint(4, 2048, (1, 1024))
    other = torch.randint(4, 2048, (1, 1024))
    with torch.no_grad():
        model(ids[:, :8])  # warm the rotary tables and the allocator's first pages
    Path("/proc/self/clear_refs").write_text("5")
    before = _kib("VmRSS")
    with torch.no_grad():
        if mode == "forward":
            model(ids)
        elif mode == "ablation":
            with intervene(model, [HeadAblation(8, 3), MLPAblation(8), ResidualAblation(9, positions=(500,))]):
                model(ids)
        elif mode == "patch_head":
            with record_heads(model, only=[("self", 8)]) as rec:
                model(other)
            with intervene(model, [HeadPatch(8, 3, rec.get("self", 8, 3))]):
                model(ids)
        else:
            with record_stream(model, residual=[9]) as rec:
                model(other)
            with intervene(model, [ResidualPatch(9, rec.residual(9), positions=(500,))]):
                model(ids)
    peak = _kib("VmHWM")
    return {"mode": mode, "rss_before_kib": before, "peak_kib": peak, "added_mib": (peak - before) / 1024}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--mode":
        print(json.dumps(run(sys.argv[2])))
        return
    rows = []
    for mode in MODES:
        for trial in range(2):
            out = subprocess.run([sys.executable, __file__, "--mode", mode], capture_output=True, text=True, check=True)
            row = {**json.loads(out.stdout.strip().splitlines()[-1]), "trial": trial}
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = min(r["added_mib"] for r in rows if r["mode"] == "forward")
    ratios = {m: min(r["added_mib"] for r in rows if r["mode"] == m) / base for m in MODES}
    result = {
        "model": "llama, 16 layers, d_model 512, 8 heads, vocab 2048, random weights",
        "tokens": 1024,
        "rows": rows,
        "ratio_to_forward": ratios,
    }
    path = Path(__file__).parent / "results" / "patching_memory.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
