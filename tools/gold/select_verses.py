"""Pick the 150 test verses of the gold alignment set (run once; the output is committed in src/attnkit/alignment/gold/).

Deterministic: verses of the Bible corpus's test split, stratified by book and by source length
(in whitespace words: under 15, 15-24, 25-40, over 40), then shuffled and split into a 50-verse
dev part (lines 1-50: choosing heads/layers) and a 100-verse scored part (lines 51-150).

    PYTHONPATH=src python tools/gold/select_verses.py
"""
import random
from collections import defaultdict
from pathlib import Path

from attnkit.data.datasets.bible import load_pairs

HERE = Path(__file__).resolve().parents[2] / "src" / "attnkit" / "alignment" / "gold"  # the gold set it reads
QUOTA = {(0, 15): 40, (15, 25): 45, (25, 41): 40, (41, 10_000): 25}  # 150 in all, 25 over 40 words

rng = random.Random(2015)
test = load_pairs("test")
chosen = []
for (lo, hi), n in QUOTA.items():
    by_book = defaultdict(list)
    for p in test:
        if lo <= len(p.src.split()) < hi:
            by_book[p.ref.split()[0]].append(p)
    for v in by_book.values():
        rng.shuffle(v)
    books = sorted(by_book)
    rng.shuffle(books)
    picked = []
    while len(picked) < n:  # round-robin over books: spread, not proportional to book size
        for b in books:
            if by_book[b] and len(picked) < n:
                picked.append(by_book[b].pop())
    chosen += picked
rng.shuffle(chosen)
(HERE / "es-en.refs").write_text("".join(p.ref + "\n" for p in chosen), encoding="utf-8")
(HERE / "es-en.es").write_text("".join(" ".join(p.src.split()) + "\n" for p in chosen), encoding="utf-8")
(HERE / "es-en.en").write_text("".join(" ".join(p.tgt.split()) + "\n" for p in chosen), encoding="utf-8")
print(f"wrote {len(chosen)} verse pairs from {len({p.ref.split()[0] for p in chosen})} books to {HERE}")
