"""Ways to read the shipped Transformers' guided-alignment heads as word links, scored on the built-in gold set.

Each rule is applied to the same word attention (one forced pass per model over the 150 gold verses), and
scored on the 50 dev verses (where a rule is chosen) and on the 100 scored verses (what is reported). See
RESULTS.md, "How a guided head is read: both ways".

    PYTHONPATH=src python benchmarks/guided_reading.py [--output results/guided_reading.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from attnkit.alignment import attention_links, column_links, invert, symmetrize
from attnkit.alignment.gold import DEV_VERSES, load_gold
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner
from attnkit.tasks.translation.alignment_evaluate import _total, per_verse_counts


def word_attention(model: str, pairs, reverse: bool) -> list[torch.Tensor]:
    """The guided head's word attention of each pair, ``(target words, source words)`` of the pair as given."""
    tr = Translator.load(model)
    aligner = ModelAligner(tr, AttentionReading("guided"))
    out = []
    for start in range(0, len(pairs), 32):
        chunk = [(t, s) if reverse else (s, t) for s, t in pairs[start : start + 32]]
        out += [wa.T if reverse else wa for wa in aligner.word_attention_batch(chunk)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default=None, help="also write the table as JSON here")
    args = ap.parse_args()
    verses = load_gold()
    pairs = [(v.source, v.target) for v in verses]
    fwd = word_attention("transformer-es-en", pairs, reverse=False)  # (T_en, S_es) each
    bwd = word_attention("transformer-en-es", pairs, reverse=True)  # its (S_es, T_en), turned to (T_en, S_es)

    def both(m, rule):
        return symmetrize(attention_links(m), column_links(m), rule)

    mean = [(a + b) / 2 for a, b in zip(fwd, bwd)]
    product = [a * b for a, b in zip(fwd, bwd)]
    rules = {
        "es-en rows": [attention_links(a) for a in fwd],
        "es-en rows + columns, grow-diag-final-and": [both(a, "grow-diag-final-and") for a in fwd],
        "es-en rows with weight >= 0.5": [{(i, j) for i, j in attention_links(a) if a[j, i] >= 0.5} for a in fwd],
        "es-en rows ∩ columns": [both(a, "intersection") for a in fwd],
        "both, each rows, grow-diag-final-and": [
            symmetrize(attention_links(a), invert(attention_links(b.T)), "grow-diag-final-and")
            for a, b in zip(fwd, bwd)
        ],
        "both averaged, rows ∩ columns": [both(m, "intersection") for m in mean],
        "both averaged, grow-diag-final-and": [both(m, "grow-diag-final-and") for m in mean],
        "both multiplied, pairs >= 0.2": [{(i, j) for j, i in (m >= 0.2).nonzero().tolist()} for m in product],
        "both, each rows ∩ columns, grow-diag-final-and": [
            symmetrize(both(a, "intersection"), invert(both(b.T, "intersection")), "grow-diag-final-and")
            for a, b in zip(fwd, bwd)
        ],
    }
    table = []
    for name, links in rules.items():
        counts = per_verse_counts(links, verses)
        dev, scored = _total(counts[:DEV_VERSES]).aer, _total(counts[DEV_VERSES:]).aer
        table.append({"reading": name, "dev_aer": round(dev, 4), "scored_aer": round(scored, 4)})
        print(f"{name:55s} dev {dev:.4f}  scored {scored:.4f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"dev_verses": DEV_VERSES, "scored_verses": len(verses) - DEV_VERSES, "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
