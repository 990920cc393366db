"""On a CUDA machine: the service opens and analyses on the GPU as on the CPU, and a budgeted training on
the GPU keeps its threads (the thread governor is for CPU runs only).

    PYTHONPATH=src python benchmarks/gpu_service_check.py [--data en-es] [--seconds 60] [--output FILE]

1. ``open_model("transformer-es-en", device=…)`` on cpu and cuda; ``analyse`` with a ``TranslationRequest``
   (beam 5, and the ALTI+ attribution): the same translation, and the maxima of the differences of the
   cross-attention and the attribution between the devices.
2. ``attnkit train translation --data D --max-time-s S --device cuda --threads 2``: the budget's record, and
   that the log has no thread changes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = "En el principio creó Dios los cielos y la tierra."


def analyses(device: str) -> dict:
    import torch

    from attnkit.service import TranslationRequest, analyse, open_model

    t = time.perf_counter()
    model = open_model("transformer-es-en", device=device)
    opened = time.perf_counter() - t
    plain = analyse(model, TranslationRequest(SOURCE, beam=5))
    alti = analyse(model, TranslationRequest(SOURCE, beam=5, method="alti_plus"))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return {
        "device": str(model.impl.device),
        "open_s": round(opened, 3),
        "translation": plain.translation,
        "alignment": plain.attention.maps.alignment.float().cpu(),
        "alti_plus": alti.attribution.scores.float().cpu(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="en-es")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_service_check: no CUDA device here")
    cpu, gpu = analyses("cpu"), analyses("cuda")
    report = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "same_translation": cpu["translation"] == gpu["translation"],
        "translation": gpu["translation"],
        "open_s": {"cpu": cpu["open_s"], "cuda": gpu["open_s"]},
        "device": gpu["device"],
        "alignment_max_abs_diff": float((cpu["alignment"] - gpu["alignment"]).abs().max()),
        "alti_plus_max_abs_diff": float((cpu["alti_plus"] - gpu["alti_plus"]).abs().max()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "attnkit.cli", "train", "translation", "--data", args.data, "--max-time-s",
               str(args.seconds), "--device", "cuda", "--threads", "2", "--out-dir", str(out), "--no-progress"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        report["train_exit"] = done.returncode
        if done.returncode != 0:
            report["train_stderr"] = done.stderr[-2000:]
        else:
            log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
            record = json.loads((out / "train_config.json").read_text())
            report["train"] = {
                "steps": log[-1]["steps"],
                "time_s": round(log[-1]["time_s"], 1),
                "tokens_per_s": round(log[-1]["tokens_per_s"]),
                "budget": record.get("budget"),
                "thread_events": sum(r["event"] == "threads" for r in log),
            }
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
