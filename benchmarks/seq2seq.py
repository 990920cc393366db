"""RNNsearch speed: training tokens/s, decoding sentences/s, and what projecting the keys once buys.

    PYTHONPATH=src python benchmarks/seq2seq.py            # writes benchmarks/results/seq2seq.json
    PYTHONPATH=src python benchmarks/seq2seq.py --quick    # tiny sizes, to check it runs

1. Training throughput (target tokens/s) of RNNsearch and RNNencdec at the shipped sizes
   (vocab 8000, emb/hidden/attention 256, batch 64, 32-token sentences), forward+backward+Adam.
2. Decoding: sentences/s of greedy and beam-5 search on real held-out verses with the shipped
   model (``attnkit/pretrained/rnnsearch-es-en``) when present, else a randomly initialised one.
3. Bahdanau's score ``vᵀ tanh(W s_{t-1} + U h_j)``: attnkit computes ``U h_j`` once per sentence
   (``Attention.prepare``); the common tutorial form concatenates ``s_{t-1}`` with every ``h_j``
   and applies ``W_a [s; h]`` at every decoder step. Same weights, same outputs (checked), timed
   over a teacher-forced decoder pass and over greedy decoding.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from attnkit.attention.functional import masked_softmax  # noqa: E402
from attnkit.decoding import beam_search, greedy_search  # noqa: E402
from attnkit.models.registry import model_class  # noqa: E402
from attnkit.models.seq2seq import RNNSearch, Seq2SeqConfig  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"


def median_time(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def train_throughput(kind, V, dim, B, L, repeats):
    torch.manual_seed(0)
    m = model_class(kind).from_config(Seq2SeqConfig(vocab_size=V, emb_dim=dim, hidden_dim=dim, attn_dim=dim))
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    src, tgt = torch.randint(4, V, (B, L)), torch.randint(4, V, (B, L))
    lengths = torch.full((B,), L)

    def step():
        logits, _ = m(src, lengths, tgt)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    t = median_time(step, repeats)
    return round(B * L / t, 1)


class TutorialRNNSearch(RNNSearch):
    """The same model, scoring the tutorial way: ``W_a [s_{t-1}; h_j]`` recomputed at every step."""

    def _context(self, s_prev, state, need_weights):
        h = state.memory.values  # (B, S, 2H): the annotations
        sc = self.attention.score
        w_a = torch.cat([sc.w_query.weight, sc.w_key.weight], 1)  # (A, H + 2H)
        cat = torch.cat([s_prev.unsqueeze(1).expand(-1, h.shape[1], -1), h], -1)  # (B, S, 3H) every step
        e = torch.tanh(torch.nn.functional.linear(cat, w_a, sc.w_key.bias)) @ sc.v  # (B, S)
        a = masked_softmax(e, state.mask)
        return (a.unsqueeze(1) @ h).squeeze(1), a


def prepared_vs_tutorial(V, dim, B, L, repeats):
    torch.manual_seed(0)
    cfg = Seq2SeqConfig(vocab_size=V, emb_dim=dim, hidden_dim=dim, attn_dim=dim, dropout=0.0)
    ours = RNNSearch(cfg).eval()
    tut = TutorialRNNSearch(cfg).eval()
    tut.load_state_dict(ours.state_dict())
    src, tgt = torch.randint(4, V, (B, L)), torch.randint(4, V, (B, L))
    lengths = torch.randint(L // 2, L + 1, (B,))
    lengths[0] = L
    with torch.no_grad():
        lo, wo = ours(src, lengths, tgt, need_weights=True)
        lt, wt = tut(src, lengths, tgt, need_weights=True)
        diff = max(float((lo - lt).abs().max()), float((wo - wt).abs().max()))
        inputs = {"src": src, "src_lengths": lengths}
        g_o = greedy_search(ours, inputs, bos_id=1, eos_id=-1, max_len=L)
        g_t = greedy_search(tut, inputs, bos_id=1, eos_id=-1, max_len=L)
        same = all(a.tokens == b.tokens for a, b in zip(g_o, g_t))
        t_fw = {
            k: median_time(lambda m=m: m(src, lengths, tgt), repeats) for k, m in (("attnkit", ours), ("tutorial", tut))
        }
        t_gr = {
            k: median_time(lambda m=m: greedy_search(m, inputs, bos_id=1, eos_id=-1, max_len=L), repeats)
            for k, m in (("attnkit", ours), ("tutorial", tut))
        }
    return {
        "max_abs_difference": diff,
        "same_greedy_tokens": same,
        "teacher_forced_ms": {k: round(v * 1e3, 1) for k, v in t_fw.items()},
        "teacher_forced_speedup": round(t_fw["tutorial"] / t_fw["attnkit"], 2),
        "greedy_ms": {k: round(v * 1e3, 1) for k, v in t_gr.items()},
        "greedy_speedup": round(t_gr["tutorial"] / t_gr["attnkit"], 2),
    }


def decoding_speed(n, quick):
    model_dir = ROOT / "src" / "attnkit" / "pretrained" / "rnnsearch-es-en"
    if model_dir.is_dir() and not quick:
        from attnkit.data.datasets.bible import load_pairs
        from attnkit.tasks.translation import Translator

        tr = Translator.load(model_dir)
        sents = [p.src for p in load_pairs("test")[:n]]
        out = {"model": str(model_dir.relative_to(ROOT)), "sentences": len(sents)}
        for beam in (1, 5):
            t = time.perf_counter()
            tr.translate(sents, beam_size=beam, truncate=True)
            out[f"beam{beam}_sentences_per_s"] = round(len(sents) / (time.perf_counter() - t), 2)
        return out
    torch.manual_seed(0)
    m = (
        model_class("rnnsearch")
        .from_config(Seq2SeqConfig(vocab_size=200, emb_dim=32, hidden_dim=32, attn_dim=32))
        .eval()
    )
    src = torch.randint(4, 200, (n, 12))
    inputs = {"src": src, "src_lengths": torch.full((n,), 12)}
    out = {"model": "random tiny", "sentences": n}
    with torch.no_grad():
        for beam in (1, 5):
            t = time.perf_counter()
            if beam == 1:
                greedy_search(m, inputs, bos_id=1, eos_id=2, max_len=20)
            else:
                beam_search(m, inputs, beam_size=5, bos_id=1, eos_id=2, max_len=20)
            out[f"beam{beam}_sentences_per_s"] = round(n / (time.perf_counter() - t), 2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    q = args.quick
    reps = 2 if q else args.repeats
    V, dim, B, L = (200, 32, 8, 10) if q else (8000, 256, 64, 32)
    res = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    for kind in ("rnnsearch", "rnnencdec"):
        res[f"{kind}_train_tokens_per_s"] = train_throughput(kind, V, dim, B, L, reps)
        print(f"{kind}: {res[f'{kind}_train_tokens_per_s']} target tokens/s training (B={B}, {L}-token sentences)")
    res["prepared_vs_tutorial"] = prepared_vs_tutorial(V, dim, B, L, reps)
    p = res["prepared_vs_tutorial"]
    print(
        f"keys projected once vs tutorial per-step concat: teacher-forced {p['teacher_forced_speedup']}x, "
        f"greedy {p['greedy_speedup']}x (max |diff| {p['max_abs_difference']:.1e}, same tokens {p['same_greedy_tokens']})"
    )
    res["decoding"] = decoding_speed(16 if q else 200, q)
    print(f"decoding: {res['decoding']}")
    OUT.mkdir(exist_ok=True)
    name = "seq2seq_quick.json" if q else "seq2seq.json"
    (OUT / name).write_text(json.dumps(res, indent=2))
    print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
