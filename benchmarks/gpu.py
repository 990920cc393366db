"""GPU measurements, for a machine with CUDA: training tokens/s, beam-5 decoding, attend vs SDPA in bf16.

    PYTHONPATH=src python benchmarks/gpu.py [--device cuda] [--steps 30] → benchmarks/results/gpu.json

1. Training throughput: target tokens/s of ``Trainer.train_step`` (the step training runs) for
   RNNsearch and the Transformer on the same 30 real batches of the Bible corpus, fp32 and bf16
   autocast.
2. Decoding: sentences/s of beam-5 search over the first 200 test verses with the shipped
   translators, fp32 and bf16 weights.
3. The attention core: ``attend(score="scaled_dot", need_weights=False)`` vs
   ``F.scaled_dot_product_attention`` in bf16 (B=8, H=8, D=64, N = 512…4096), forward time.

Every ratio compares two things timed in the same run. Without CUDA the script says so and exits:
no number in this repository was measured on a GPU unless benchmarks/RESULTS.md names the GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats=5):
    fn()
    sync(device)
    best = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync(device)
        best.append(time.perf_counter() - t)
    return sorted(best)[len(best) // 2]


def train_throughput(device, steps: int) -> list[dict]:
    from attnkit.data.batching import encode_pairs
    from attnkit.data.datasets.bible import load_pairs
    from attnkit.tasks.translation import (
        TranslationConfig,
        build_optimizer,
        build_translation_model,
        get_tokenizer,
        translation_batches,
        translation_loss_fn,
    )
    from attnkit.training import ListBatches, RunConfig, Trainer

    tok = get_tokenizer(8000)
    source = translation_batches(encode_pairs(load_pairs("train"), tok, 100), batch_size=64, max_tokens=None, seed=0)
    batches = list(itertools.islice(iter(source), steps + 3))
    rows = []
    for model_name, precision in itertools.product(("rnnsearch", "transformer"), ("fp32", "bf16")):
        cfg = TranslationConfig.from_options(model_name)
        torch.manual_seed(0)
        model = build_translation_model(cfg, tok.vocab_size)
        opt, sched = build_optimizer(cfg, model)
        with tempfile.TemporaryDirectory() as tmp:
            tr = Trainer(
                model,
                opt,
                RunConfig(out_dir=tmp, progress=False, device=device, precision=precision),
                loss_fn=translation_loss_fn(tok.pad_id, 0.1),
                train_batches=ListBatches(batches),
                scheduler=sched,
            )
            for b in batches[:3]:
                tr.train_step(b)
            sync(device)
            t, tokens = time.perf_counter(), 0
            for b in batches[3:]:
                tokens += tr.train_step(b)[1]
            sync(device)
            rows.append(
                {
                    "model": model_name,
                    "precision": precision,
                    "target_tokens_per_s": round(tokens / (time.perf_counter() - t), 1),
                }
            )
    return rows


def decoding(device) -> list[dict]:
    from attnkit.data.datasets.bible import load_pairs
    from attnkit.tasks.translation import Translator

    src = [p.src for p in load_pairs("test")[:200]]
    rows = []
    for name, dtype in itertools.product(("transformer-es-en", "rnnsearch-es-en"), (None, "bf16")):
        tr = Translator.load(name, device=device, dtype=dtype)
        tr.translate(src[:8], beam_size=5)
        sync(device)
        t = time.perf_counter()
        tr.translate(src, beam_size=5, truncate=True)
        sync(device)
        rows.append(
            {
                "model": name,
                "weights": dtype or "fp32",
                "beam5_sentences_per_s": round(len(src) / (time.perf_counter() - t), 1),
            }
        )
    return rows


def attention(device) -> list[dict]:
    from attnkit import attend

    rows = []
    for n in (512, 1024, 2048, 4096):
        q, k, v = (torch.randn(8, 8, n, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
        ours = timed(lambda q=q, k=k, v=v: attend(q, k, v, score="scaled_dot", need_weights=False), device)
        sdpa = timed(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v), device)
        rows.append(
            {
                "n": n,
                "attend_ms": round(ours * 1e3, 3),
                "sdpa_ms": round(sdpa * 1e3, 3),
                "attend_speed_vs_sdpa": round(sdpa / ours, 3),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "gpu.json"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here (torch.cuda.is_available() is False): nothing measured")
        return
    from attnkit.device import resolve_device

    device = resolve_device(args.device)
    report = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__}
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # each section is written as soon as it is measured, so a run cut short keeps what it measured
    for key, measure in (
        ("attention_bf16", lambda: attention(device)),
        ("train", lambda: train_throughput(device, args.steps)),
        ("decode", lambda: decoding(device)),
    ):
        report[key] = measure()
        output.write_text(json.dumps(report, indent=2))
        print(key, json.dumps(report[key]), flush=True)


if __name__ == "__main__":
    main()
