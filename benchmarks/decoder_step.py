"""The Transformer's decoding step through ``TransformerDecoder.step`` against the layers' ``forward`` with
caches (what decoding ran before it), in one process, alternating: sentences/s of beam 5 and greedy search.

    PYTHONPATH=src .venv/bin/python benchmarks/decoder_step.py [--device cuda] [--verses 200] [--threads 1]
        [--precision fp32|bf16|int8]

Both paths compute the same numbers (``tests/test_layers.py::test_decoder_step_is_forward_with_caches_bit_for_bit``);
the translations are checked identical. The ``forward`` path is taken by marking the decoder stack (not its
layers, which stay in eval mode) as training, which sends ``TransformerTranslator.step_features`` to the
stack's ``forward``. Best of ``--repeats`` passes each, after one untimed pass of each.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--verses", type=int, default=200, help="the first N test verses (default: 200)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.data.datasets.bible import load_pairs
    from attnkit.models.transformer import TransformerTranslator
    from attnkit.tasks.translation import Translator

    src = [p.src for p in load_pairs("test")[: args.verses]]
    tr = Translator.load(args.model, device=args.device, dtype=None if args.precision == "fp32" else args.precision)
    sync = torch.cuda.synchronize if tr.device.type == "cuda" else (lambda: None)
    step = TransformerTranslator.step_features

    def forward(self, prev_tokens, state):
        was, self.decoder.training = self.decoder.training, True  # step_features' forward branch
        try:
            return step(self, prev_tokens, state)
        finally:
            self.decoder.training = was

    def run(fn, beam):
        tr.model.step_features = types.MethodType(fn, tr.model)
        sync()
        t = time.perf_counter()
        out = tr.translate(src, beam_size=beam, truncate=True)
        sync()
        return time.perf_counter() - t, [o.translation for o in out]

    for beam in (5, 1):
        texts = {name: run(fn, beam)[1] for name, fn in (("forward", forward), ("step", step))}
        best = {"forward": float("inf"), "step": float("inf")}
        for _ in range(args.repeats):
            for name, fn in (("forward", forward), ("step", step)):
                best[name] = min(best[name], run(fn, beam)[0])
        n = len(src)
        print(
            f"{tr.device} {args.precision} beam {beam}: forward {n / best['forward']:.1f} sent/s, step {n / best['step']:.1f} sent/s "
            f"({best['forward'] / best['step']:.3f}x), identical translations: {texts['forward'] == texts['step']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
