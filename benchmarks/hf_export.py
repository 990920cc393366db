"""The shipped Transformer exported to Hugging Face's format, against attnkit itself.

    PYTHONPATH=src .venv/bin/python benchmarks/hf_export.py              # 1,058 test verses, one thread
    PYTHONPATH=src .venv/bin/python benchmarks/hf_export.py --limit 40   # a quick check that it runs

``attnkit export transformer-es-en OUT --format huggingface``, then the folder is loaded with plain
``transformers`` (``AutoModelForSeq2SeqLM``, ``AutoTokenizer``; no attnkit code on that side) and
both translate the prepared Bible test split:

- **agreement**: greedy translations, attnkit's ``Translator.translate(beam_size=1)`` against
  ``model.generate()`` with the export's own generation config: the share of verses with the
  same tokens, and the BLEU/chrF of each (sacrebleu, against the World English Bible);
- **speed**: beam 5, attnkit's batched beam search (GNMT length penalty 0.6, its default) against
  ``model.generate(num_beams=5)`` (HF's default length penalty 1.0 on its own formula), both
  with ``torch.set_num_threads(1)``, in the same process, batch by batch, the side that goes first
  alternating (a busy machine then slows both alike); the ratio is ``HF seconds / attnkit seconds``
  (> 1: attnkit faster), each side's seconds the mean over ``--runs``.

Both sides see the same batches: the verses sorted by length (as ``Translator.translate`` sorts them),
64 a batch, the same step limit per batch (``min(200, 2 · longest source + 10)``). Model loading is
not timed; one small batch warms each side up first. Writes ``benchmarks/results/hf_export.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.deploy.hf_export import export_huggingface  # noqa: E402
from attnkit.pretrained import resolve_model  # noqa: E402
from attnkit.tasks.translation import Translator, corpus_scores  # noqa: E402

BATCH = 64


def cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")


def batches(ids: list[list[int]]) -> list[list[int]]:
    """Indices of the verses in each batch: sorted by length, as Translator.translate_ids batches them."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    return [order[s : s + BATCH] for s in range(0, len(order), BATCH)]


@torch.no_grad()
def hf_translate(model, tok, ids: list[list[int]], *, beams: int, max_len: int = 200) -> list[list[int]]:
    """``model.generate`` over the same batches and step limits as attnkit; the tokens without
    the start token, ``</s>`` and padding."""
    out: list[list[int] | None] = [None] * len(ids)
    for chunk in batches(ids):
        longest = max(len(ids[i]) for i in chunk)
        src = torch.full((len(chunk), longest), tok.pad_token_id, dtype=torch.long)  # (B, S)
        for r, i in enumerate(chunk):
            src[r, : len(ids[i])] = torch.tensor(ids[i])
        gen = model.generate(
            input_ids=src,
            attention_mask=src != tok.pad_token_id,
            num_beams=beams,
            max_length=1 + min(max_len, longest * 2 + 10),  # the start token and attnkit's step limit
        )
        for i, row in zip(chunk, gen[:, 1:].tolist()):
            row = row[: row.index(tok.eos_token_id)] if tok.eos_token_id in row else row
            out[i] = [t for t in row if t != tok.pad_token_id]
    return out  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="only the first N test verses (default: all 1,058)")
    ap.add_argument("--runs", type=int, default=1, help="beam-5 passes over the verses (default: 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    ap.add_argument("--home", default=None, help="ATTNKIT_HOME with the prepared Bible corpus")
    ap.add_argument("--out", default=str(HERE / "results" / "hf_export.json"), help="JSON report")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers import __version__ as tf_version

    pairs = load_pairs("test", home=args.home)[: args.limit]
    srcs, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        folder = export_huggingface(resolve_model("transformer-es-en"), Path(tmp) / "hf")
        export_s = time.perf_counter() - t
        hf = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        hf_tok = AutoTokenizer.from_pretrained(folder)
    ours = Translator.load("transformer-es-en")
    ids = ours.encode_sources(srcs, truncate=True)  # the longest verses cut at the model's 100 pieces, as evaluate does
    hf_ids = hf_tok(srcs, truncation=True)["input_ids"]
    tokenizer_same = sum(a == b for a, b in zip(ids, hf_ids))

    # greedy (agreement, quality) and beam 5 (speed): batch by batch, the two sides alternating which
    # goes first, so that a busy machine slows both alike
    warm = ids[:8]
    for beams in (1, 5):
        ours.translate_ids(warm, beam_size=beams)
        hf_translate(hf, hf_tok, warm, beams=beams)
    results: dict = {}
    for beams in (1, 5):
        ours_out: list = [None] * len(ids)
        hf_out: list = [None] * len(ids)
        seconds = {"attnkit": 0.0, "hf_generate": 0.0}
        for run in range(1 if beams == 1 else args.runs):
            for n, chunk in enumerate(batches(ids)):
                part = [ids[i] for i in chunk]
                sides = [("attnkit", ours_out), ("hf_generate", hf_out)]
                for side, out in sides if (n + run) % 2 == 0 else sides[::-1]:
                    t = time.perf_counter()
                    if side == "attnkit":
                        got = [r.tokens for r in ours.translate_ids(part, beam_size=beams, batch_size=BATCH)]
                    else:
                        got = hf_translate(hf, hf_tok, part, beams=beams)
                    seconds[side] += time.perf_counter() - t
                    for i, g in zip(chunk, got):
                        out[i] = g
        runs = 1 if beams == 1 else args.runs
        results[beams] = (ours_out, hf_out, {k: v / runs for k, v in seconds.items()})
    ours_g, hf_g, t_g = results[1]
    ours_b, hf_b, t_b = results[5]
    same = [a == b for a, b in zip(ours_g, hf_g)]
    differ = [i for i, s in enumerate(same) if not s]
    first_diff = []
    for i in differ[:5]:
        a, b = ours_g[i], hf_g[i]
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        first_diff.append({"verse": i, "first_different_token": k, "attnkit_len": len(a), "hf_len": len(b)})
    tok = ours.tokenizer

    def scores(tokens, decode):
        s = corpus_scores(decode(tokens), refs)
        s.pop("bleu_signature", None)
        return s

    def ours_text(tokens):
        return [tok.decode(t) for t in tokens]

    def hf_text(tokens):
        return hf_tok.batch_decode(tokens, skip_special_tokens=True)

    report = {
        "command": "PYTHONPATH=src python benchmarks/hf_export.py" + (f" --limit {args.limit}" if args.limit else ""),
        "machine": f"{cpu_name()}, {args.threads} torch thread(s), shared with other work",
        "torch": torch.__version__,
        "transformers": tf_version,
        "architecture": type(hf).__name__,
        "verses": len(srcs),
        "export_seconds": round(export_s, 1),
        "tokenizer_identical": tokenizer_same,
        "greedy": {
            "identical": sum(same),
            "identical_share": round(sum(same) / len(same), 4),
            "first_differences": first_diff,
            "attnkit": scores(ours_g, ours_text) | {"seconds": round(t_g["attnkit"], 1)},
            "hf_generate": scores(hf_g, hf_text) | {"seconds": round(t_g["hf_generate"], 1)},
        },
        "beam5": {
            "runs": args.runs,
            "identical": sum(a == b for a, b in zip(ours_b, hf_b)),
            "attnkit": scores(ours_b, ours_text) | {"seconds": round(t_b["attnkit"], 1)},
            "hf_generate": scores(hf_b, hf_text) | {"seconds": round(t_b["hf_generate"], 1)},
            "hf_over_attnkit": round(t_b["hf_generate"] / t_b["attnkit"], 2),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
