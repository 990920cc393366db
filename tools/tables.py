"""Write the documentation's tables of slow figures from the results files that measured them, so that a rerun
cannot leave an old number behind on a page.

A table of a page is generated when it sits between two marker lines:

    <!-- table: NAME (from benchmarks/results/FILE.json: python tools/tables.py) -->
    | ... |
    <!-- /table -->

NAME is a key of :data:`TABLES`, whose function renders it from its files. A figure quoted in prose is one of
:data:`FIGURES`: the page's text right after an anchor must read as the file gives it. Each file is written by
the benchmark that measures it (named beside it), never by hand.

    .venv/bin/python tools/tables.py            # rewrite every marked table from its file
    .venv/bin/python tools/tables.py --check    # exit 1, naming each table or figure that differs

``tests/test_doc_tables.py`` runs the check in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"^<!-- table: (?P<name>[\w-]+)\b[^\n]*-->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)


def read(name: str) -> dict:
    """``benchmarks/results/NAME``, parsed."""
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _half_up(x: float) -> int:
    """``x`` rounded to a whole number, halves away from zero (12,370.5 ms is 12,371), as a reader rounds."""
    return int(Decimal(str(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)]) + "\n"


def _bold_best(values: list[float], text: list[str], best: Callable) -> list[str]:
    """``text`` with the best of ``values`` (``best``: max or min) in bold, ties included."""
    top = best(values)
    return [f"**{t}**" if v == top else t for v, t in zip(values, text)]


# ---------------------------------------------------------------------------------------------------------
# The tables. Each reads only its files; labels are the page's prose, numbers come from the files.
# ---------------------------------------------------------------------------------------------------------

TRANSLATORS = {  # model: its row's label; the first three are compared (bold: the best of them)
    "rnnencdec-es-en": "RNNencdec (Cho et al. 2014, no attention)",
    "rnnsearch-es-en": "RNNsearch (Bahdanau et al. 2015)",
    "transformer-es-en": "Transformer (3+3 layers, d 256, 4 heads, guided alignment)",
    "transformer-en-es": "*the other way:* Transformer English → Spanish (the same network)",
}


def translation_table() -> str:
    """Test BLEU and chrF, greedy / beam 5, of the shipped translators (``benchmarks/headline.py``)."""
    runs = {(r["model"], r["beam_size"]): r for r in read("headline.json")["translation"]}
    compared = list(TRANSLATORS)[:3]
    cells: dict[str, list[str]] = {m: [] for m in TRANSLATORS}
    for metric in ("bleu", "chrf"):
        for beam in (1, 5):
            values = [runs[m, beam][metric] for m in compared]
            for m, text in zip(compared, _bold_best(values, [f"{v:.2f}" for v in values], max)):
                cells[m].append(text)
            cells[list(TRANSLATORS)[3]].append(f"{runs[list(TRANSLATORS)[3], beam][metric]:.2f}")
    rows = [
        [label, f"{runs[m, 1]['parameters'] / 1e6:.1f} M", f"{c[0]} / {c[1]}", f"{c[2]} / {c[3]}"]
        for m, label in TRANSLATORS.items()
        for c in [cells[m]]
    ]
    return _table(["model", "params", "test BLEU greedy / beam 5", "test chrF greedy / beam 5"], rows)


def captioning_table() -> str:
    """BLEU-4, exact match and attention correctness of the shipped captioners (``benchmarks/headline.py``)."""
    rows = []
    for r in read("headline.json")["captioning"]:
        kind = "soft" if r["model"].endswith("soft") else "hard"
        rows.append(
            [f"{kind} attention", f"{r['bleu4']:.1f}", f"{r['exact_match']:.3f}", f"{r['attention_correctness']:.3f}"]
        )
    return _table(["captioner", "BLEU-4", "exact match", "attention correctness"], rows)


EXPLANATION_METHODS = {  # method: its row's label
    "attention": "attention (last layer, head mean)",
    "rollout": "rollout (Abnar & Zuidema 2020)",
    "attention_norm": "attention × ‖value‖ (Kobayashi et al. 2020)",
    "value_zeroing": "value zeroing (Mohebbi et al. 2023)",
    "attention_flow": "attention flow (Abnar & Zuidema 2020)",
    "alti_plus": "ALTI+ (Ferrando et al. 2022)",
    "attention_relevance": "attention relevance (Chefer, Gur & Wolf 2021)",
    "saliency": "saliency",
    "input_x_gradient": "input × gradient",
    "integrated_gradients": "integrated gradients (Sundararajan et al. 2017; complete within 1 % per piece)",
}
#: the runs whose quality figures (AER, deletion area, sanity) the table shows, newest first: a method's come
#: from the newest run that scored it
EXPLANATION_FILES = [
    "explanations_transformer_2026-12-08.json",
    "explanations_chefer_2026-12-08.json",
    "explanations_transformer_fast_2026-11-27.json",
    "explanations_transformer_ig_2026-11-27.json",
]
#: the runs whose times it shows: one quiet machine (2026-11-27); a method they did not time shows "–"
TIMED_FILES = ["explanations_transformer_fast_2026-11-27.json", "explanations_transformer_ig_2026-11-27.json"]


def _rows(files: list[str]) -> dict[str, dict]:
    methods: dict[str, dict] = {}
    for name in files:  # the earlier file's row wins; attention is in each, with the same numbers
        methods.update({m: r for m, r in read(name)["methods"].items() if m not in methods})
    return methods


def _explanation_rows() -> dict[str, dict]:
    return _rows(EXPLANATION_FILES)


def explanations_table() -> str:
    """``attnkit evaluate explanations`` on the 100 gold verses: AER, deletion area, sanity ρ, time."""
    m, timed = _explanation_rows(), _rows(TIMED_FILES)
    names = list(EXPLANATION_METHODS)
    aer = _bold_best([m[n]["aer"] for n in names], [f"{m[n]['aer']:.3f}" for n in names], min)
    area = _bold_best([m[n]["deletion_area"] for n in names], [f"{m[n]['deletion_area']:.3f}" for n in names], max)
    rows = []
    for i, n in enumerate(names):
        r = m[n]
        label = EXPLANATION_METHODS[n]
        if aer[i].startswith("**") and area[i].startswith("**"):  # best on both counts: the row is named so
            label = label.replace(label.split(" (")[0], f"**{label.split(' (')[0]}**", 1)
        sanity = f"{r['sanity']['spearman']:.2f}" + ("" if r["sanity"]["passes"] else " flagged")
        ms = f"{_half_up(timed[n]['ms_per_sentence']):,}" if n in timed else "–"
        rows.append([label, aer[i], area[i], sanity, ms])
    return _table(["method", "AER ↓", "deletion area ↑", "sanity ρ", "ms per verse"], rows)


MARKUP_ROWS = {  # markup_transfer.json's row: the README's label
    "guided head es-en (both ways, as `attnkit align`)": "the guided head read both ways — what `translate --format` uses",
    "guided heads es-en + en-es (grow-diag-final-and)": "the guided heads of both Transformers, grow-diag-final-and",
    "eflomal (grow-diag-final-and)": "eflomal",
    "raw attention, last layer (3) head mean": "raw attention, last layer, head mean",
    "position-proportional baseline (no alignment)": "each tag at the same relative position (no alignment)",
}


def markup_table() -> str:
    """Exact span match of tags moved across on the 100 gold verses (``benchmarks/markup_transfer.py``)."""
    rows = read("markup_transfer.json")["rows"]
    values = [round(rows[k]["exact"], 3) for k in MARKUP_ROWS]
    texts = _bold_best(values, [f"{v:.3f}" for v in values], max)
    out = []
    for (key, label), text in zip(MARKUP_ROWS.items(), texts):
        lo, hi = rows[key]["exact_95ci"]
        out.append([label, f"{text} [{lo:.3f}, {hi:.3f}]"])
    return _table(["tags moved by", "exact span match [95 % interval]"], out)


TABLES: dict[str, Callable[[], str]] = {
    "translation": translation_table,
    "captioning": captioning_table,
    "explanations": explanations_table,
    "markup": markup_table,
}


@dataclass(frozen=True)
class Figure:
    """A figure quoted in a page's prose: the text right after ``anchor`` (whitespace collapsed) must be
    ``value()``."""

    page: str
    anchor: str
    value: Callable[[], str]


def _eflomal_range() -> str:
    e = read("eflomal_runs.json")
    return f"{e['mean']:.3f} mean ({e['min']:.3f}–{e['max']:.3f})"


def _eflomal_runs() -> str:
    return ", ".join(f"{r['aer']:.3f}" for r in read("eflomal_runs.json")["runs"])


def _uniform_correctness() -> str:
    return f"{read('headline.json')['captioning'][0]['uniform_attention_correctness']:.3f}"


def _random_area() -> str:
    return f"{read(EXPLANATION_FILES[0])['random_area']:.3f}"


_MARKUP_KEYS = list(MARKUP_ROWS)


def _markup(row: str) -> Callable[[], str]:
    return lambda: f"{read('markup_transfer.json')['rows'][row]['exact']:.3f}"


def _own(path: list[str], fmt: str = ".3f") -> Callable[[], str]:
    """A figure of ``markup_own.json`` (``benchmarks/markup_transfer.py --own``) at ``path``."""

    def value() -> str:
        v = read("markup_own.json")
        for key in path:
            v = v[key]
        return format(v, fmt)

    return value


FIGURES = [
    Figure("README.md", "it samples and takes no seed, so five fresh runs | ", _eflomal_range),
    Figure("README.md", "(`python benchmarks/eflomal_runs.py --runs 5`: ", _eflomal_runs),
    Figure("README.md", "higher is better, random order ", _random_area),
    Figure("README.md", "the item it names; uniform attention would score ", _uniform_correctness),
    Figure("docs/howto/translate-markup.md", "| guided head, read both ways | ", _markup(_MARKUP_KEYS[0])),
    Figure("docs/howto/translate-markup.md", "| guided heads of both directions | ", _markup(_MARKUP_KEYS[1])),
    Figure("docs/howto/translate-markup.md", "| eflomal | ", _markup(_MARKUP_KEYS[2])),
    Figure("docs/howto/translate-markup.md", "| raw last-layer attention | ", _markup(_MARKUP_KEYS[3])),
    Figure("docs/howto/translate-markup.md", "| position-proportional baseline | ", _markup(_MARKUP_KEYS[4])),
    Figure("docs/howto/translate-markup.md", "through the Spanish source). ", _own(["span_match", "exact"])),
    Figure(
        "docs/howto/translate-markup.md", "had exactly the reference's words (word F1 ", _own(["span_match", "word_f1"])
    ),
    Figure(
        "docs/howto/translate-markup.md",
        "beam 5, BLEU was ",
        _own(["bleu", "with_markup"], ".2f"),
    ),
    Figure(
        "docs/howto/translate-markup.md", "(tags stripped before scoring) and ", _own(["bleu", "without_markup"], ".2f")
    ),
]


# ---------------------------------------------------------------------------------------------------------
# Reading and writing the pages.
# ---------------------------------------------------------------------------------------------------------


def rewrite(text: str) -> tuple[str, list[str]]:
    """The page's text with every marked table rendered anew, and the names of the tables that changed.
    An unknown table name is a ``KeyError`` naming it."""
    changed: list[str] = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"no table {name!r} in tools/tables.py (known: {', '.join(TABLES)})")
        body = TABLES[name]()
        if body != match["body"]:
            changed.append(name)
        whole, at = match.group(0), match.start()
        return whole[: match.start("body") - at] + body + whole[match.end("body") - at :]

    return _BLOCK.sub(fill, text), changed


def stale_figures(page: str, text: str) -> list[str]:
    """The figures of ``page`` whose text does not read as their file gives it."""
    flat = " ".join(text.split())
    wrong = []
    for f in FIGURES:
        if f.page != page:
            continue
        at = flat.find(f.anchor)
        want = f.value()
        if at < 0:
            wrong.append(f"{page}: the anchor {f.anchor!r} is gone")
        elif not flat[at + len(f.anchor) :].startswith(want):
            got = flat[at + len(f.anchor) : at + len(f.anchor) + len(want)]
            wrong.append(f"{page}: after {f.anchor!r} the page says {got!r}, the results file {want!r}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming what differs")
    args = ap.parse_args(argv)
    problems = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        text = page.read_text(encoding="utf-8")
        new, changed = rewrite(text)
        problems += [f"{name}: table {t!r} differs from its results file" for t in changed]
        problems += stale_figures(name, new)
        if changed and not args.check:
            page.write_text(new, encoding="utf-8")
            print(f"{name}: rewrote {', '.join(changed)}")
    for p in problems if args.check else [p for p in problems if "table" not in p]:
        print(p, file=sys.stderr)
    return 1 if (args.check and problems) or any("table" not in p for p in problems) else 0


if __name__ == "__main__":
    raise SystemExit(main())
