"""Tag transfer on the 100 scored gold verses: how well each word alignment moves inline tags across.

For each scored verse of the built-in Spanish-English gold set (never the 50 dev verses), one to three
tags are drawn at random over source word spans (seeded; nested and adjacent ones included), each over
words with at least one sure gold link. The reference target span of a tag is its projection through the
gold sure links; each method's span is its projection through that method's links, by the same rule
(:func:`attnkit.alignment.markup.project_spans`: first to last linked target word, nesting repaired).
The target is the gold verse's own English (forced decoding), so the words line up with the gold's.

Scores: exact span match (the share of tags whose span equals the reference's, with a 95 % bootstrap
interval over verses) and tag-word F1 (target words inside a tag, predicted against the reference,
micro-averaged over tags). Methods: the shipped es-en Transformer's guided head (read both ways, as
``attnkit align`` reads it), the guided heads of both directions (es-en and en-es, grow-diag-final-and, as
``attnkit align --symmetrize``), the last decoder layer's raw attention (head mean), eflomal
(grow-diag-final-and, as ``attnkit evaluate alignment``'s reference) and the position-proportional baseline
(no alignment). With ``--translate`` it also translates each verse as an HTML paragraph carrying its tags
(``attnkit translate --format html``) and counts well-formed outputs, tags present, and translations equal
to the plain verse's.

With ``--own`` it scores the tags on the model's *own* translations instead (``results/markup_own.json``):
the same 100 tagged verses translated by ``transformer-es-en`` (beam 5) as HTML paragraphs, each output
checked for well-formedness and every tag once, and each tag's output span compared with a reference span:
the tag projected through the gold sure links onto the gold English (as above), then carried onto the
output's words by a second alignment, output against reference. That alignment goes through the Spanish
source: ``transformer-en-es``'s guided head (read both ways), reading the output and forced to write the
source, gives output-source links, and the gold links give source-reference ones; a reference word and an
output word are linked when they share a source word. The en-es head is another model than the one that
moved the tags (its errors are not the es-en head's); eflomal was not used because output and reference are both
English and eflomal would have to learn an English-English table from 100 pairs. The score is bounded by
that aligner's own errors. Then BLEU with markup against without: the test verses (all 1,058 unless
``--limit``), random tags drawn over each, translated as one HTML document (tags stripped from the output
before scoring) and as plain sentences, both at beam 5.

    PYTHONPATH=src python benchmarks/markup_transfer.py [--translate] [--output results/markup_transfer.json]
    PYTHONPATH=src python benchmarks/markup_transfer.py --own [--limit N] [--output results/markup_own.json]
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
from html.parser import HTMLParser

from attnkit.alignment.gold import DEV_VERSES, load_gold
from attnkit.alignment.markup import TagSpan, project_spans, proportional_spans
from attnkit.alignment.symmetrize import grow_diag_final_and
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner

TAGS = ("b", "i", "a", "em", "span")


def draw_tags(rng: random.Random, n: int, linked: set[int]) -> list[TagSpan]:
    """One to three tags over ``n`` source words, each holding a word of ``linked``: the first anywhere,
    each next one nested in an earlier one, adjacent to it, or anywhere free."""

    def ok(a, b):
        return b > a and any(i in linked for i in range(a, b))

    for _ in range(100):
        a = rng.randrange(n)
        b = min(n, a + rng.randint(1, 4))
        if not ok(a, b):
            continue
        spans = [TagSpan(a, b)]
        for _ in range(rng.randint(0, 2)):
            k = rng.randrange(len(spans))
            s = spans[k]
            kind = rng.choice(("nested", "adjacent", "free"))
            if kind == "nested" and s.end - s.start >= 2:
                c = rng.randrange(s.start, s.end)
                d = rng.randint(c + 1, s.end)
                # beside s's other children, never across one (crossing tags are not a document)
                apart = all(d <= t.start or c >= t.end for t in spans if t.parent == k)
                if ok(c, d) and (c, d) != (s.start, s.end) and apart:
                    spans.append(TagSpan(c, d, k))
                continue
            # a sibling of s (same parent), not overlapping any tag of that parent
            lo, hi = (spans[s.parent].start, spans[s.parent].end) if s.parent is not None else (0, n)
            taken = [(t.start, t.end) for t in spans if t.parent == s.parent]
            c = s.end if kind == "adjacent" else rng.randrange(lo, hi)
            d = min(hi, c + rng.randint(1, 3))
            if ok(c, d) and all(d <= x or c >= y for x, y in taken):
                spans.append(TagSpan(c, d, s.parent))
        return spans
    return []


def scores(pred: list[list[tuple[int, int]]], ref: list[list[tuple[int, int]]], rng: random.Random) -> dict:
    per_verse = [(sum(p == r for p, r in zip(ps, rs)), len(rs)) for ps, rs in zip(pred, ref)]
    hit, total = sum(h for h, _ in per_verse), sum(n for _, n in per_verse)
    boot = []
    for _ in range(1000):
        sample = [per_verse[rng.randrange(len(per_verse))] for _ in per_verse]
        boot.append(sum(h for h, _ in sample) / max(1, sum(n for _, n in sample)))
    boot.sort()
    tp = fp = fn = 0
    for ps, rs in zip(pred, ref):
        for (a, b), (c, d) in zip(ps, rs):
            both = max(0, min(b, d) - max(a, c))
            tp, fp, fn = tp + both, fp + (b - a) - both, fn + (d - c) - both
    p, r = tp / max(1, tp + fp), tp / max(1, tp + fn)
    return {
        "exact": hit / total,
        "exact_95ci": [boot[25], boot[974]],
        "word_precision": p,
        "word_recall": r,
        "word_f1": 2 * p * r / max(1e-12, p + r),
    }


class _Check(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.ok, self.opened = [], True, []

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        self.opened.append(tag)

    def handle_endtag(self, tag):
        self.ok &= bool(self.stack) and self.stack.pop() == tag


def as_html(words: list[str], spans: list[TagSpan]) -> str:
    """The verse as a paragraph with its tags (each tag named by its index, so every one can be found)."""
    opens = {i: [] for i in range(len(words) + 1)}
    closes = {i: [] for i in range(len(words) + 1)}
    for k, s in enumerate(spans):
        opens[s.start].append((-(s.end - s.start), k))
        closes[s.end].append((s.end - s.start, -k))
    out = []
    for i in range(len(words) + 1):
        out += [f"</{TAGS[-k % len(TAGS)]}>" for _, k in sorted(closes[i])]
        out += [f'<{TAGS[k % len(TAGS)]} id="t{k}">' for _, k in sorted(opens[i])]
        if i < len(words):
            out.append(html.escape(words[i], quote=False) + " ")
    return "<p>" + "".join(out).strip() + "</p>"


class _Spans(HTMLParser):
    """A translated paragraph read back: its words (whitespace-split text) and each ``id="tK"`` tag's
    word span ``[start, end)``, from the character offsets where the tag opens and closes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.open, self.spans, self.names = "", {}, {}, []

    def handle_data(self, data):
        self.text += data

    def handle_starttag(self, tag, attrs):
        self.names.append(tag)
        key = dict(attrs).get("id")
        if key:
            self.open.setdefault(tag, []).append((key, len(self.text)))

    def handle_endtag(self, tag):
        if self.open.get(tag):
            key, at = self.open[tag].pop()
            self.spans[key] = (at, len(self.text))

    def words_and_spans(self) -> tuple[list[str], dict[str, tuple[int, int]]]:
        starts = [m.start() for m in re.finditer(r"\S+", self.text)]

        def before(c):  # words that start before character c
            return sum(s < c for s in starts)

        return self.text.split(), {k: (before(a), before(b)) for k, (a, b) in self.spans.items()}


def _stripped(line: str) -> str:
    c = _Spans()
    c.feed(line)
    c.close()
    return " ".join(c.text.split())


def own_translations(args) -> dict:
    """``--own``: tags on the model's own beam-5 translations (see the module docstring)."""
    from attnkit.data.datasets.bible import load_pairs
    from attnkit.tasks.translation.markup import translate_document
    from attnkit.tasks.translation.metrics import corpus_scores

    rng = random.Random(args.seed)
    gold = load_gold()
    verses = gold[DEV_VERSES:]
    tags = [draw_tags(rng, len(v.source), {i for i, _ in v.sure}) for v in verses]
    ref = [project_spans(t, v.sure, len(v.source), len(v.target)) for t, v in zip(tags, verses)]
    es_en = Translator.load("transformer-es-en")
    en_es = Translator.load("transformer-en-es")
    docs = [as_html(v.source, t) for v, t in zip(verses, tags)]
    out = translate_document(es_en, "\n".join(docs) + "\n", "html", beam_size=5).text.splitlines()
    well_formed = present = 0
    outputs, spans_out = [], []
    for line, t in zip(out, tags):
        c = _Check()
        c.feed(line)
        c.close()
        well_formed += c.ok and not c.stack
        present += sorted(c.opened) == sorted(["p"] + [TAGS[k % len(TAGS)] for k in range(len(t))])
        r = _Spans()
        r.feed(line)
        r.close()
        words, found = r.words_and_spans()
        outputs.append(words)
        spans_out.append([found.get(f"t{k}") for k in range(len(t))])
    # output <-> reference through the source: en-es's guided head (output read, source written), gold links
    back = list(
        ModelAligner(en_es, AttentionReading("guided")).align(
            [(v.source, o) for v, o in zip(verses, outputs)], reverse=True
        )
    )  # (source word, output word)
    pred, want = [], []
    for v, t, r_spans, o, links, got in zip(verses, tags, ref, outputs, back, spans_out):
        by_source: dict[int, list[int]] = {}
        for i, j in links or ():
            by_source.setdefault(i, []).append(j)
        ref_out = {(r, j) for i, r in v.sure for j in by_source.get(i, ())}  # (reference word, output word)
        ref_tags = [TagSpan(a, b, s.parent) for (a, b), s in zip(r_spans, t)]
        want.append(project_spans(ref_tags, ref_out, len(v.target), len(o)))
        pred.append([g if g is not None else (-1, -1) for g in got])
    n_tags = sum(len(t) for t in tags)
    report = {
        "verses": len(verses),
        "tags": n_tags,
        "beam": 5,
        "well_formed": well_formed,
        "well_formed_pct": 100 * well_formed / len(verses),
        "every_tag_once": present,
        "every_tag_once_pct": 100 * present / len(verses),
        "tags_found": sum(g is not None for gs in spans_out for g in gs),
        "reference": "gold sure links onto the gold English, then reference<-source<-output by "
        "transformer-en-es's guided head (both ways, reading the output)",
        "span_match": scores(pred, want, random.Random(1)),
        "span_match_proportional_baseline": scores(
            [proportional_spans(t, len(v.source), len(o)) for t, v, o in zip(tags, verses, outputs)],
            want,
            random.Random(1),
        ),
    }
    print(
        f"own translations: {well_formed}/{len(verses)} well-formed, {present}/{len(verses)} with every tag once; "
        f"span match {report['span_match']['exact']:.3f} {report['span_match']['exact_95ci']}, "
        f"word F1 {report['span_match']['word_f1']:.3f}"
    )
    test = load_pairs("test", limit=args.limit)
    rng = random.Random(args.seed)
    test_tags = [draw_tags(rng, len(p.src.split()), set(range(len(p.src.split())))) for p in test]
    doc = "\n".join(as_html(p.src.split(), t) for p, t in zip(test, test_tags)) + "\n"
    marked = [_stripped(line) for line in translate_document(es_en, doc, "html", beam_size=5).text.splitlines()]
    # evaluate translation's convention: a verse longer than the model's input is cut (the markup path cuts it
    # at sentence ends instead and translates the parts)
    plain = [r.translation for r in es_en.translate([p.src for p in test], beam_size=5, truncate=True)]
    refs = [p.tgt for p in test]
    with_markup, without = corpus_scores(marked, refs), corpus_scores(plain, refs)
    report["bleu"] = {
        "verses": len(test),
        "tags": sum(len(t) for t in test_tags),
        "with_markup": with_markup["bleu"],
        "without_markup": without["bleu"],
        "difference": round(with_markup["bleu"] - without["bleu"], 2),
        "chrf_with_markup": with_markup["chrf"],
        "chrf_without_markup": without["chrf"],
        "same_text": sum(" ".join(a.split()) == " ".join(b.split()) for a, b in zip(marked, plain)),
        "signature": without["bleu_signature"],
    }
    b = report["bleu"]
    print(
        f"BLEU on {b['verses']} test verses, beam 5: {b['with_markup']} with markup (tags stripped), "
        f"{b['without_markup']} without ({b['difference']:+}); {b['same_text']} outputs with the plain text"
    )
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--translate", action="store_true", help="also translate the tagged verses as HTML")
    ap.add_argument("--output", default=None, help="also write the table as JSON here")
    ap.add_argument("--own", action="store_true", help="score tags on the model's own translations, and BLEU")
    ap.add_argument("--limit", type=int, default=None, help="with --own: the first N test verses for BLEU")
    args = ap.parse_args()
    if args.own:
        report = own_translations(args)
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
        return
    rng = random.Random(args.seed)
    gold = load_gold()
    verses = gold[DEV_VERSES:]
    tags = [draw_tags(rng, len(v.source), {i for i, _ in v.sure}) for v in verses]
    ref = [project_spans(t, v.sure, len(v.source), len(v.target)) for t, v in zip(tags, verses)]
    pairs = [(v.source, v.target) for v in verses]

    es_en = Translator.load("transformer-es-en")
    en_es = Translator.load("transformer-en-es")
    guided = list(ModelAligner(es_en, AttentionReading("guided")).align(pairs))
    back = list(ModelAligner(en_es, AttentionReading("guided")).align(pairs, reverse=True))
    rows_only = list(ModelAligner(es_en, AttentionReading("guided", both_ways="none")).align(pairs))
    last = es_en.model.config.num_decoder_layers
    raw = list(ModelAligner(es_en, AttentionReading("attention", last)).align(pairs))
    methods = {
        "guided head es-en (both ways, as `attnkit align`)": guided,
        "guided head es-en, rows only": rows_only,
        "guided heads es-en + en-es (grow-diag-final-and)": [grow_diag_final_and(f, b) for f, b in zip(guided, back)],
        f"raw attention, last layer ({last}) head mean": raw,
    }
    try:
        from attnkit.tasks.translation.alignment_evaluate import gold_eflomal_links

        methods["eflomal (grow-diag-final-and)"] = gold_eflomal_links(gold, builtin=True)[DEV_VERSES:]
    except Exception as exc:  # eflomal not installed
        print(f"eflomal skipped: {exc}")
    rows = {}
    for name, links in methods.items():
        pred = [project_spans(t, a or (), len(v.source), len(v.target)) for t, a, v in zip(tags, links, verses)]
        rows[name] = scores(pred, ref, random.Random(1))
    pred = [proportional_spans(t, len(v.source), len(v.target)) for t, v in zip(tags, verses)]
    rows["position-proportional baseline (no alignment)"] = scores(pred, ref, random.Random(1))
    n_tags = sum(len(t) for t in tags)
    nested = sum(s.parent is not None for t in tags for s in t)
    adjacent = sum(1 for t in tags for a in t for b in t if a is not b and a.parent == b.parent and a.end == b.start)
    report = {"verses": len(verses), "tags": n_tags, "nested": nested, "adjacent_pairs": adjacent, "rows": rows}
    print(f"{len(verses)} scored verses, {n_tags} tags ({nested} nested, {adjacent} adjacent pairs), seed {args.seed}")
    print(f"  {'method':<52} {'exact':>6} {'95% interval':>15} {'word F1':>8}")
    for name, r in rows.items():
        lo, hi = r["exact_95ci"]
        print(f"  {name:<52} {r['exact']:>6.3f} [{lo:.3f}, {hi:.3f}] {r['word_f1']:>8.3f}")
    if args.translate:
        from attnkit.tasks.translation.markup import translate_document

        docs = [as_html(v.source, t) for v, t in zip(verses, tags)]
        out = translate_document(es_en, "\n".join(docs) + "\n", "html").text.splitlines()
        plain = [r.translation for r in es_en.translate([" ".join(v.source) for v in verses], beam_size=5)]
        well_formed = present = same = 0
        for line, t, p in zip(out, tags, plain):
            c = _Check()
            c.feed(line)
            c.close()
            well_formed += c.ok and not c.stack
            present += sorted(c.opened) == sorted(["p"] + [TAGS[k % len(TAGS)] for k in range(len(t))])
            c2 = _Check()
            text = []
            c2.handle_data = text.append
            c2.feed(line)
            same += " ".join("".join(text).split()) == " ".join(p.split())
        report["translated"] = {
            "documents": len(out),
            "well_formed": well_formed,
            "tags_present": present,
            "same_words": same,
        }
        print(
            f"translated as HTML: {well_formed}/{len(out)} well-formed, {present}/{len(out)} with every tag once, "
            f"{same}/{len(out)} with the plain translation's words"
        )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
