"""What a decoder step of the shipped Transformer costs in attnkit's modules, as bare tensor operations, and
compiled by ``torch.compile``: how much of a decoding step is module overhead, and whether compiling pays.

    PYTHONPATH=src .venv/bin/python benchmarks/compiled_step.py [--rows 64] [--threads 1] [--lengths 5 20 40]
        [--no-compile] [--output benchmarks/results/compiled_step.json]

The first ``--rows`` test verses (the Bible corpus) are encoded and decoded greedily for ``L`` steps with the
model's own :meth:`~attnkit.models.transformer.TransformerTranslator.step_features` (``L`` = each of
``--lengths``); then step ``L + 1`` is timed three ways on that very state, one thread, float32, no autograd:

- ``attnkit``: ``model.step_features`` (the decoder layers, their key/value caches, the argument checks);
- ``bare``: the same arithmetic written as one function of tensors (pre-norm layers: layer norm, packed
  q/k/v projection, attention over the cached keys with the new one appended, cross-attention over the
  source's projected keys with the padding as an additive bias, feed-forward; the final norm), the caches
  appended with ``torch.cat``;
- ``compiled``: ``torch.compile(bare, dynamic=True)`` (inductor's C++ for the CPU), compiled once beforehand.

The bare step's output is checked against the model's (max |diff| in the table). The output layer and the
search are left out (they are the same in all three). Each time is the median of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from seq2seq import median_time  # noqa: E402  (benchmarks/seq2seq.py: the median of timed calls)


def bare_step(model):
    """``step(y (R, D), self_k, self_v, cross_k, cross_v, bias) -> (out (R, D), self_k', self_v')`` for the
    model's pre-norm decoder: ``self_k[i] (R, H, L, Dh)``, ``cross_k[i] (R, H, S, Dh)``, ``bias (R, 1, 1, S)``
    (0 at real source pieces, -inf at padding)."""
    layers = model.decoder.layers
    if not all(layer.norm_first for layer in layers):
        raise ValueError("bare_step writes the pre-norm layer only")
    attn = layers[0].self_attn
    H, D = attn.num_heads, attn.embed_dim
    Dh = D // H
    scale = 1.0 / math.sqrt(Dh)
    final = model.decoder.norm

    def linear(module):
        """``module``'s product, called without ``nn.Module.__call__``: float weights through ``F.linear``,
        an int8 model's quantized layers (:func:`attnkit.device.quantize_int8`) through their own forward."""
        if isinstance(module, torch.nn.Linear):
            return lambda x: F.linear(x, module.weight, module.bias)
        return module.forward

    proj = []  # per layer: packed q/k/v of self-attention, the query of cross-attention, the four other products
    for layer in layers:
        sa, ca = layer.self_attn, layer.multihead_attn
        int8 = sa._int8 is not None
        proj.append(
            (
                sa._int8["qkv"].forward if int8 else (lambda x, m=sa: F.linear(x, m.in_proj_weight, m.in_proj_bias)),
                ca._int8["q"].forward
                if int8
                else (lambda x, m=ca: F.linear(x, m.in_proj_weight[:D], m.in_proj_bias[:D])),
                linear(sa.out_proj),
                linear(ca.out_proj),
                linear(layer.linear1),
                linear(layer.linear2),
            )
        )

    def step(y, self_k, self_v, cross_k, cross_v, bias):
        R = y.shape[0]
        x, new_k, new_v = y, [], []
        for i, layer in enumerate(layers):
            qkv, cross_q, self_out, cross_out, ff1, ff2 = proj[i]
            h = F.layer_norm(x, (D,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
            q, k, v = qkv(h).view(R, 3, H, Dh).unbind(1)  # (R, H, Dh)
            K = torch.cat([self_k[i], k.unsqueeze(2)], 2)  # (R, H, L + 1, Dh)
            V = torch.cat([self_v[i], v.unsqueeze(2)], 2)
            p = torch.softmax((q.unsqueeze(2) * scale) @ K.transpose(-1, -2), -1)  # (R, H, 1, L + 1)
            x = x + self_out((p @ V).reshape(R, D))
            h = F.layer_norm(x, (D,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
            q = cross_q(h).view(R, H, 1, Dh)
            p = torch.softmax((q * scale) @ cross_k[i].transpose(-1, -2) + bias, -1)  # (R, H, 1, S)
            x = x + cross_out((p @ cross_v[i]).reshape(R, D))
            h = F.layer_norm(x, (D,), layer.norm3.weight, layer.norm3.bias, layer.norm3.eps)
            x = x + ff2(F.relu(ff1(h)))
            new_k.append(K)
            new_v.append(V)
        return F.layer_norm(x, (D,), final.weight, final.bias, final.eps), new_k, new_v

    return step


def median_ms(fn, repeats: int) -> float:
    """Median milliseconds of ``fn()`` over ``repeats`` calls after one untimed call."""
    return median_time(fn, repeats) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", type=int, nargs="+", default=[5, 20, 40])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--precision", choices=["fp32", "int8"], default="fp32", help="int8: not compiled")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "compiled_step.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.data.datasets.bible import load_pairs
    from attnkit.tasks.translation import Translator

    tr = Translator.load(args.model, dtype=None if args.precision == "fp32" else args.precision)
    model = tr.model.eval()
    ids = tr.encode_sources([p.src for p in load_pairs("test")[: args.rows]], truncate=True)
    lens = torch.tensor([len(s) for s in ids])
    src = torch.zeros(len(ids), int(lens.max()), dtype=torch.long)
    for r, s in enumerate(ids):
        src[r, : len(s)] = torch.tensor(s)
    step = bare_step(model)
    compiled = None
    rows = []
    with torch.no_grad():
        for L in args.lengths:
            state = model.start(src, lens)
            tokens = torch.full((len(ids),), tr.tokenizer.bos_id)
            for _ in range(L):  # greedy steps up to the timed one
                h, state, _ = model.step_features(tokens, state)
                tokens = F.linear(h, *model.output_layer()).argmax(-1)
            y = model._embed_tgt(tokens.unsqueeze(1), offset=state.step)[:, 0]  # (R, D)
            bias = torch.zeros(state.memory_mask.shape).masked_fill_(~state.memory_mask, float("-inf"))
            inputs = (
                y,
                [c.self_attn.k.clone() for c in state.cache],
                [c.self_attn.v.clone() for c in state.cache],
                [c.cross_attn.k for c in state.cache],
                [c.cross_attn.v for c in state.cache],
                bias[:, None, None, :],
            )
            ours = model.step_features(tokens, state)[0]
            diff = float((step(*inputs)[0] - ours).abs().max())
            row = {
                "cached_positions": L,
                "attnkit_ms": median_ms(partial(model.step_features, tokens, state), args.repeats),
                "bare_ms": median_ms(partial(step, *inputs), args.repeats),
                "bare_max_abs_diff": diff,
            }
            if not args.no_compile and args.precision == "fp32":
                if compiled is None:
                    t = time.perf_counter()
                    compiled = torch.compile(step, dynamic=True)
                    compiled(*inputs)
                    row["compile_s"] = round(time.perf_counter() - t, 1)
                row["compiled_ms"] = median_ms(partial(compiled, *inputs), args.repeats)
                row["compiled_max_abs_diff"] = float((compiled(*inputs)[0] - ours).abs().max())
            rows.append(row)
            print(
                f"L {L:3d}: attnkit {row['attnkit_ms']:7.3f} ms  bare {row['bare_ms']:7.3f} ms"
                + (f"  compiled {row['compiled_ms']:7.3f} ms" if "compiled_ms" in row else "")
                + f"  (bare max |diff| {diff:.1e})",
                flush=True,
            )
    report = {
        "model": args.model,
        "rows": args.rows,
        "threads": args.threads,
        "precision": args.precision,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "steps": rows,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
