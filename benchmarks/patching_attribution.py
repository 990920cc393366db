"""Attribution patching against activation patching on the shipped ``lm-4l-en`` (and ``attention-only-2l-en``):
the Pearson correlation of their head effects over every layer × head and of their residual-stream effects over
every layer × position, and the cost of each (passes, seconds), on the induction task of
:func:`attnkit.attribution.patching.repeated_tokens_pair` (20 random tokens repeated twice, the first copy
redrawn), seeds 0..4 one row each, and three batches of 8 rows (seeds 0..7, 8..15, 16..23: the metric the
mean over the rows), both directions. Writes benchmarks/results/patching_attribution.json.

    PYTHONPATH=src python benchmarks/patching_attribution.py
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

from attnkit.attribution.attribution_patching import compare_with_activation_patching
from attnkit.attribution.patching import repeated_tokens_pair
from attnkit.service import open_model


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for name in ("lm-4l-en", "attention-only-2l-en"):
        lm = open_model(name).impl.model
        for direction in ("denoise", "noise"):
            for seed in range(5):
                clean, corrupt, target = repeated_tokens_pair(lm.config.vocab_size, 20, seed=seed)
                c = compare_with_activation_patching(
                    lm, clean, corrupt, target, direction=direction, residual=seed == 0
                )
                row = {"model": name, "seed": seed, **c.to_dict()}
                rows.append(row)
                print(json.dumps(row), flush=True)
            for start in (0, 8, 16):
                trip = [repeated_tokens_pair(lm.config.vocab_size, 20, seed=s) for s in range(start, start + 8)]
                clean = torch.stack([t[0] for t in trip])  # (8, 39)
                corrupt = torch.stack([t[1] for t in trip])
                c = compare_with_activation_patching(
                    lm, clean, corrupt, [t[2] for t in trip], direction=direction, residual=False
                )
                row = {"model": name, "seeds": [start, start + 7], **c.to_dict()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = Path(__file__).parent / "results" / "patching_attribution.json"
    out.parent.mkdir(exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "threads": 1,
        "note": "2 shared CPU cores: seconds are indicative",
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
