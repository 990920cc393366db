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

    PYTHONPATH=src python benchmarks/markup_transfer.py [--translate] [--output results/markup_transfer.json]
"""

from __future__ import annotations

import argparse
import html
import json
import random
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
                if ok(c, d) and (c, d) != (s.start, s.end):
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--translate", action="store_true", help="also translate the tagged verses as HTML")
    ap.add_argument("--output", default=None, help="also write the table as JSON here")
    args = ap.parse_args()
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
