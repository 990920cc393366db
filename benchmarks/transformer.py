"""Transformer benchmarks: (a) greedy decoding with vs without the KV cache, (b) attnkit's encoder
layer vs ``torch.nn.TransformerEncoderLayer``.

(a) **KV cache.** :class:`attnkit.models.transformer.TransformerTranslator` decodes with a
key/value cache (one new position per step; cross-attention keys/values projected once). The
baseline re-runs the whole decoder over bos + the prefix at every step (the encoder still runs
once), so a step costs O(t) positions instead of one and decoding n tokens costs O(n²)
positions. Both go through :func:`attnkit.decoding.greedy_search` with ``eos_id=-1`` (never
produced), so every row runs to the full output length. Random weights; d_model 256, 4 heads,
3+3 layers, ff 1024, batch 16, source length 32, vocabulary 8000; output lengths 16, 32, 64,
128. The baseline returns no attention weights (so it keeps the fused attention kernel
everywhere), while the cached step computes the last layer's cross-attention weights, as the
decoding protocol asks: the reported speed-up is, if anything, conservative. The tokens of both
are compared (they should agree; a rare argmax tie broken differently by rounding is possible).

(b) **Encoder layer.** One attnkit ``TransformerEncoderLayer`` and one
``torch.nn.TransformerEncoderLayer(batch_first=True)`` with the same weights (copied; sub-module
names and parameter layout are the same), d_model 512, nhead 8, ff 2048, B 8, N 256, dropout 0.1,
train mode; forward + backward of ``(out * g).sum()``. Repetitions alternate between the two in
the same process and the medians are compared (ratio = attnkit / torch; < 1 means attnkit is
faster). An eval-mode forward checks that the two layers compute the same function.

Output: a table on stdout and JSON in ``benchmarks/results/transformer.json``
(``transformer_quick.json`` with ``--quick``, a smoke test with tiny sizes).

The real numbers (run on a quiet machine, from the repository root)::

    PYTHONPATH=src python benchmarks/transformer.py --device cpu --threads 2 --repeats 5

and, with a GPU, ``--device cuda`` (``--out`` picks another JSON path).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attnkit.attention.transformer import TransformerEncoderLayer
from attnkit.decoding import greedy_search
from attnkit.models.transformer import TransformerConfig, TransformerTranslator

BOS = 1
NEVER = -1  # an eos id no step can produce: decoding runs to max_len


class NoCacheDecoder:
    """Greedy-search protocol without a KV cache: each step re-runs the decoder over the prefix."""

    def __init__(self, model: TransformerTranslator):
        self.m = model

    def start(self, src, src_lengths):
        memory, mask, _ = self.m.encode(src, src_lengths)
        return {"memory": memory, "mask": mask, "prefix": src.new_zeros(src.shape[0], 0)}

    def step(self, prev, state):
        prefix = torch.cat([state["prefix"], prev.unsqueeze(1)], dim=1)
        h = self.m.decoder(self.m._embed_tgt(prefix), state["memory"], memory_key_padding_mask=state["mask"]).output
        log_probs = torch.log_softmax(self.m._logits(h[:, -1]), dim=-1)
        return log_probs, dict(state, prefix=prefix), None

    def reorder(self, state, index):
        return {k: v.index_select(0, index) for k, v in state.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device):
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def bench_decoding(args, device) -> list[dict]:
    torch.manual_seed(args.seed)
    cfg = TransformerConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        nhead=args.nhead,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        dim_feedforward=args.ff,
        dropout=0.0,
        max_len=max(args.lengths) + 1,
    )
    model = TransformerTranslator(cfg).to(device).eval()
    nocache = NoCacheDecoder(model)
    src = torch.randint(3, args.vocab, (args.batch, args.src_len), device=device)
    inputs = {"src": src, "src_lengths": torch.full((args.batch,), args.src_len, device=device)}
    rows = []
    for n in args.lengths:

        def run(decoder, n=n):
            return greedy_search(decoder, inputs, bos_id=BOS, eos_id=NEVER, max_len=n)

        run(model), run(nocache)  # warm-up
        t_cache, t_nocache = [], []
        for _ in range(args.repeats):  # interleaved
            t, hyp_c = _timed(lambda: run(model), device)
            t_cache.append(t)
            t, hyp_n = _timed(lambda: run(nocache), device)
            t_nocache.append(t)
        assert all(len(h.tokens) == n for h in hyp_c), "decoding stopped before max_len"
        same = sum(a.tokens == b.tokens for a, b in zip(hyp_c, hyp_n)) / len(hyp_c)
        mc, mn = statistics.median(t_cache), statistics.median(t_nocache)
        rows.append(
            {
                "out_len": n,
                "cache_s": round(mc, 5),
                "nocache_s": round(mn, 5),
                "speedup": round(mn / mc, 2),
                "cache_tok_per_s": round(args.batch * n / mc, 1),
                "nocache_tok_per_s": round(args.batch * n / mn, 1),
                "same_tokens": same,
            }
        )
        print(
            f"  out_len {n:4d}: cache {mc * 1e3:9.1f} ms   no cache {mn * 1e3:9.1f} ms   "
            f"speed-up x{mn / mc:5.2f}   same tokens {same:.0%}",
            flush=True,
        )
    return rows


def bench_encoder_layer(args, device) -> dict:
    torch.manual_seed(args.seed)
    d, h, ff, B, N = args.enc_d_model, args.enc_nhead, args.enc_ff, args.enc_batch, args.enc_len
    theirs = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.1, batch_first=True, norm_first=args.norm_first)
    ours = TransformerEncoderLayer(d, h, ff, dropout=0.1, norm_first=args.norm_first)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    ours.to(device), theirs.to(device)
    x = torch.randn(B, N, d, device=device)
    g = torch.randn(B, N, d, device=device)
    with torch.no_grad():
        ours.eval(), theirs.eval()
        max_diff = float((ours(x)[0] - theirs(x)).abs().max())
    ours.train(), theirs.train()

    def fwd_bwd(layer, is_ours):
        def fn():
            layer.zero_grad(set_to_none=True)
            out = layer(x)[0] if is_ours else layer(x)
            (out * g).sum().backward()

        return fn

    f_ours, f_theirs = fwd_bwd(ours, True), fwd_bwd(theirs, False)
    for _ in range(2):  # warm-up
        f_ours(), f_theirs()
    t_ours, t_theirs = [], []
    for i in range(args.enc_repeats):  # interleaved, alternating which goes first
        pair = [(f_ours, t_ours), (f_theirs, t_theirs)]
        for fn, acc in pair if i % 2 == 0 else pair[::-1]:
            acc.append(_timed(fn, device)[0])
    mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
    res = {
        "d_model": d,
        "nhead": h,
        "dim_feedforward": ff,
        "batch": B,
        "seq_len": N,
        "dropout": 0.1,
        "norm_first": args.norm_first,
        "mode": "train, forward+backward",
        "repeats": args.enc_repeats,
        "attnkit_ms": round(mo * 1e3, 3),
        "torch_ms": round(mt * 1e3, 3),
        "ratio_attnkit_over_torch": round(mo / mt, 3),
        "eval_max_abs_diff": max_diff,
    }
    print(
        f"  attnkit {mo * 1e3:9.2f} ms   torch {mt * 1e3:9.2f} ms   ratio x{mo / mt:.3f}   "
        f"(eval outputs differ by at most {max_diff:.2e})",
        flush=True,
    )
    return res


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: checks that the script runs")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions per decoding length")
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--nhead", type=int, default=4)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--ff", type=int, default=1024)
    p.add_argument("--enc-d-model", type=int, default=512)
    p.add_argument("--enc-nhead", type=int, default=8)
    p.add_argument("--enc-ff", type=int, default=2048)
    p.add_argument("--enc-batch", type=int, default=8)
    p.add_argument("--enc-len", type=int, default=256)
    p.add_argument("--enc-repeats", type=int, default=20)
    p.add_argument("--norm-first", action="store_true", help="pre-norm encoder layers in (b)")
    p.add_argument("--skip", choices=["decode", "encoder"], action="append", default=[])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.lengths, args.batch, args.src_len, args.vocab = 1, [4, 8], 2, 5, 50
        args.d_model, args.nhead, args.layers, args.ff = 32, 2, 1, 64
        args.enc_d_model, args.enc_nhead, args.enc_ff, args.enc_batch, args.enc_len, args.enc_repeats = (
            32,
            2,
            64,
            2,
            16,
            3,
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    out = args.out or Path(__file__).resolve().parent / "results" / (
        "transformer_quick.json" if args.quick else "transformer.json"
    )

    report = {
        "benchmark": "transformer",
        "quick": args.quick,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
        "command": " ".join(["python", "benchmarks/transformer.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    if "decode" not in args.skip:
        report["decode_config"] = {
            "d_model": args.d_model,
            "nhead": args.nhead,
            "layers": args.layers,
            "ff": args.ff,
            "batch": args.batch,
            "src_len": args.src_len,
            "vocab": args.vocab,
            "repeats": args.repeats,
            "search": "greedy, runs to max_len (eos never produced)",
        }
        print(
            f"(a) greedy decoding, KV cache vs re-running the decoder over the prefix ({device}, "
            f"{torch.get_num_threads()} threads)"
        )
        report["decode"] = bench_decoding(args, device)
    if "encoder" not in args.skip:
        print("(b) one encoder layer, forward+backward in train mode: attnkit vs torch.nn.TransformerEncoderLayer")
        report["encoder_layer"] = bench_encoder_layer(args, device)

    if "decode" in report:
        print("\n| output length | cache (ms) | no cache (ms) | speed-up |\n|---:|---:|---:|---:|")
        for r in report["decode"]:
            print(f"| {r['out_len']} | {r['cache_s'] * 1e3:.1f} | {r['nocache_s'] * 1e3:.1f} | x{r['speedup']:.2f} |")
    if "encoder_layer" in report:
        e = report["encoder_layer"]
        print(
            f"\n| layer | fwd+bwd (ms) |\n|---|---:|\n| attnkit | {e['attnkit_ms']:.2f} |\n| torch | {e['torch_ms']:.2f} |"
            f"\n| ratio attnkit/torch | {e['ratio_attnkit_over_torch']:.3f} |"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
