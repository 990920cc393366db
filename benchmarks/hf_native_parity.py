"""The shipped Transformer against its Hugging Face export read back through attnkit's HF path: the
attention maps and the AER on the gold set.

    PYTHONPATH=src .venv/bin/python benchmarks/hf_native_parity.py

``attnkit export transformer-es-en OUT --format huggingface`` (a stock ``PegasusForConditionalGeneration``),
then ``Translator.load(OUT)`` (:class:`attnkit.hf.seq2seq.HFSeq2Seq`: attention captured from the
running ``sdpa`` model) beside ``Translator.load("transformer-es-en")`` (attnkit's own layers):

- **maps**: every one of the 150 built-in gold verses, forced to write its reference as ``attnkit
  align`` forces it (``<s>`` then the reference's pieces), batches of 32; the largest ``|Δ|`` over
  every layer, head, query and key of ``enc_self``, ``dec_self`` and ``cross``; the source and target
  ids of both tokenizers are checked equal first;
- **AER**: :func:`attnkit.tasks.translation.alignment_evaluate.evaluate_alignment` on each (the rows of
  ``attnkit evaluate alignment --all-heads``: attention, Shift-Att, every layer × head, each
  layer's mean; 100 scored verses after 50 dev), and the largest ``|ΔAER|`` over the rows.

A quality measurement (no timing). Writes ``benchmarks/results/hf_native_parity.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from attnkit.alignment.gold import load_gold  # noqa: E402
from attnkit.deploy.hf_export import export_huggingface  # noqa: E402
from attnkit.pretrained import resolve_model  # noqa: E402
from attnkit.tasks.translation import Translator  # noqa: E402
from attnkit.tasks.translation.alignment_evaluate import evaluate_alignment  # noqa: E402

KINDS = ("enc_self", "dec_self", "cross", "alignment")


def batch(tr, verses):
    """``(src (B, S), lengths (B,), tgt_in (B, T))`` as ``align`` builds them, right-padded with 0."""
    src_ids = tr.encode_sources([" ".join(v.source) for v in verses], truncate=True)
    tgt_ids = [[tr.tokenizer.bos_id, *tr.tokenizer.encode(" ".join(v.target))] for v in verses]
    lengths = torch.tensor([len(i) for i in src_ids])
    src = torch.zeros(len(verses), int(lengths.max()), dtype=torch.long)
    tgt = torch.zeros(len(verses), max(map(len, tgt_ids)), dtype=torch.long)
    for b, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src[b, : len(s)] = torch.tensor(s)
        tgt[b, : len(t)] = torch.tensor(t)
    return src, lengths, tgt


@torch.no_grad()
def main() -> None:
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    folder = export_huggingface(resolve_model("transformer-es-en"), Path(tmp.name) / "hf")
    native, via_hf = Translator.load("transformer-es-en"), Translator.load(folder)
    verses = load_gold()
    worst = dict.fromkeys(KINDS, 0.0)
    for start in range(0, len(verses), 32):
        part = verses[start : start + 32]
        src, lengths, tgt = batch(native, part)
        src2, lengths2, tgt2 = batch(via_hf, part)
        if not (torch.equal(src, src2) and torch.equal(lengths, lengths2) and torch.equal(tgt, tgt2)):
            raise SystemExit(f"the tokenizers cut verses {start}..{start + len(part) - 1} differently")
        want = native.model.attention_maps(src, lengths, tgt)
        got = via_hf.model.attention_maps(src, lengths, tgt)
        for kind in KINDS:
            w, g = getattr(want, kind), getattr(got, kind)
            if w.shape != g.shape:
                raise SystemExit(f"{kind}: shapes {tuple(w.shape)} (native) and {tuple(g.shape)} (HF path)")
            worst[kind] = max(worst[kind], float((w.float() - g.float()).abs().max()))
    aer = {}
    for name, model in (("native", "transformer-es-en"), ("hf_path", str(folder))):
        table = evaluate_alignment(model, all_heads=True, references=False, samples=200)
        aer[name] = {row["name"].split(" ", 1)[1]: row["aer"] for row in table["rows"]}
    tmp.cleanup()
    rows = list(aer["native"])
    if rows != list(aer["hf_path"]):
        raise SystemExit(f"the two tables have different rows: {rows} / {list(aer['hf_path'])}")
    report = {
        "command": "PYTHONPATH=src python benchmarks/hf_native_parity.py",
        "torch": torch.__version__,
        "gold_verses_compared": len(verses),
        "max_abs_attention_difference": {k: float(f"{v:.3g}") for k, v in worst.items()},
        "aer_rows": len(rows),
        "aer_attention": {k: aer[k][rows[0]] for k in aer},
        "aer_shift": {k: aer[k][rows[1]] for k in aer},
        "max_abs_aer_difference": max(abs(aer["native"][r] - aer["hf_path"][r]) for r in rows),
        "aer": {r: [aer["native"][r], aer["hf_path"][r]] for r in rows},
    }
    out = HERE / "results" / "hf_native_parity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
