"""Regenerate the documentation's pictures of the shipped models, so that they show the models
that ship (run it after a model is reshipped, and update the prose beside each picture from what it prints).

    PYTHONPATH=src .venv/bin/python tools/figures.py [--out docs] [--only NAME ...]

- ``rnnsearch-alignment.png``: RNNsearch's alignment of a held-out verse (Gen 13:8), beam 5, as
  ``attnkit translate --model rnnsearch-es-en --beam 5 --plot PNG "..."`` draws it;
- ``transformer-heads.png``: every layer and head of the Transformer on Deut 4:24, as
  ``attnkit translate --model transformer-es-en --beam 5 --plot PNG "..."`` draws it;
- ``alignment-gold.png``: a scored gold verse (Eph 3:4) with its gold links over the word matrix of the reading
  ``attnkit align`` uses for the Transformer (its guided head for a model trained with guided alignment);
- ``bleu_by_length.png``: greedy test BLEU by source length of the three Spanish → English models, as
  ``attnkit evaluate translation --model rnnencdec-es-en --model rnnsearch-es-en --model transformer-es-en
  --plot PNG`` draws it (its legend gives each model's test BLEU, the README's greedy column).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

GEN_13_8 = (
    "Entonces Abram dijo á Lot: No haya ahora altercado entre mí y ti, entre mis pastores y los tuyos, "
    "porque somos hermanos."
)
DEUT_4_24 = "Porque Jehová tu Dios es fuego que consume, Dios celoso."
GOLD_REF = "Eph 3:4"


def translate_plot(model: str, text: str, path: Path) -> str:
    """``attnkit translate --model MODEL --beam 5 --plot PATH TEXT``; its translation."""
    from attnkit.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["translate", "--model", model, "--beam", "5", "--plot", str(path), text])
    if code != 0:
        raise SystemExit(f"attnkit translate --model {model} failed ({code})")
    return out.getvalue().strip()


BY_LENGTH_MODELS = ("rnnencdec-es-en", "rnnsearch-es-en", "transformer-es-en")


def bleu_by_length(path: Path) -> str:
    """``attnkit evaluate translation --model ... --plot PATH`` on the whole test split; its table."""
    from attnkit.cli import main

    argv = ["evaluate", "translation", *(a for m in BY_LENGTH_MODELS for a in ("--model", m)), "--plot", str(path)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"attnkit {' '.join(argv)} failed ({code})")
    return out.getvalue().strip()


def gold_figure(path: Path) -> str:
    """The gold verse's links over the Transformer's default alignment reading; what it drew."""
    from attnkit.alignment import aer_counts
    from attnkit.alignment.gold import load_gold
    from attnkit.pretrained import resolve_model
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner, default_method, describe_reading
    from attnkit.viz import plot_alignment

    verse = next(v for v in load_gold() if v.ref == GOLD_REF)
    tr = Translator.load(resolve_model("transformer-es-en"))
    aligner = ModelAligner(tr, AttentionReading(default_method(tr)))
    wa = aligner.word_attention_batch([(verse.source, verse.target)])[0]  # (T words, S words)
    links = aligner.reading.links(wa)
    reading = describe_reading(aligner.reading)
    plot_alignment(
        wa,
        verse.source,
        verse.target,
        path,
        title=f"transformer-es-en, {reading}: {GOLD_REF}",
        sure=verse.sure,
        possible=verse.possible,
    )
    score = aer_counts(links, verse.sure, verse.possible).aer
    return f"{GOLD_REF}, {reading}: AER of this verse {score:.3f}"


FIGURES = {
    "rnnsearch-alignment": lambda p: translate_plot("rnnsearch-es-en", GEN_13_8, p),
    "transformer-heads": lambda p: translate_plot("transformer-es-en", DEUT_4_24, p),
    "alignment-gold": gold_figure,
    "bleu_by_length": bleu_by_length,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder for the pictures (default: docs)")
    ap.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="only these pictures")
    args = ap.parse_args()
    for name in args.only or FIGURES:
        path = Path(args.out) / f"{name}.png"
        print(f"{path}: {FIGURES[name](path)}")


if __name__ == "__main__":
    main()
