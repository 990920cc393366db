"""Where the information-flow routes' peak memory comes from, phase by phase (issue 56, "Memory"): on the
random-weight Llama-3.2-1B-shaped model of ``benchmarks/lm_memory.py`` (``--layers``, ``--tokens`` to
shrink it), the process's peak resident set (``VmHWM``, reset before each phase) and CPU time of

- ``plain``: the plain forward pass (the baseline);
- ``record``: :func:`attnkit.hf.lm_decomposition.record_lm` alone (the pass that keeps each layer's input);
- ``layer L``: each item of :func:`attnkit.attribution.information_flow.information_flow_stream`, the
  last layer first (the first item includes the recording pass and the logit lens).

    PYTHONPATH=src nice .venv/bin/python benchmarks/lm_routes_phases.py --layers 4 --tokens 1024 [--out FILE]

Peaks are absolute (the resident model included); ``above_model`` is the peak less the resident set
after the model was built.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from lm_memory import _status, llama_1b


def _reset() -> None:
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threshold", type=float, default=0.04)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch

    from attnkit.attribution.information_flow import information_flow_stream
    from attnkit.hf.lm_decomposition import record_lm

    torch.set_num_threads(1)
    model, ids = llama_1b(args.layers, args.tokens)
    base = _status("VmRSS")
    rows = []

    def phase(name, fn):
        _reset()
        c0 = time.process_time()
        out = fn()
        rows.append(
            {
                "phase": name,
                "peak_bytes": _status("VmHWM"),
                "above_model": _status("VmHWM") - base,
                "cpu_seconds": time.process_time() - c0,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        return out

    with torch.no_grad():
        phase("plain", lambda: model(input_ids=ids[None], use_cache=False) and None)
        phase("record", lambda: record_lm(model, ids) and None)
        stream = information_flow_stream(model, ids, threshold=args.threshold)
        for layer in range(args.layers - 1, -1, -1):
            part = phase(f"layer {layer + 1}", lambda: next(stream))
            rows[-1]["edges"] = len(part.edges)
        phase("graph", lambda: next(stream))
    if args.out:
        args.out.write_text(json.dumps({"tokens": args.tokens, "layers": args.layers, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
