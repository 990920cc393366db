"""The verse-aligned Spanish→English Bible corpus, for neural machine translation.

Source side: Reina-Valera 1909 (SWORD module ``spaRV1909eb``, Debian ``sword-text-sparv``);
target side: the World English Bible (``engWEB2015eb``, Debian ``sword-text-web``). Both are
public domain and installed under ``/usr/share/sword``. The Bible is a natural parallel corpus:
every verse has the same address (book, chapter, verse) in every translation, so we pair verses
by that key. We read the raw OSIS markup of each verse and clean it ourselves (footnotes,
cross references and non-canonical headings dropped, Strong's ``<w>`` word tags and the
translators' added words kept as text, every other tag turned into a word boundary so words are
never glued together, entities unescaped, Unicode NFC, single spaces). We keep the 66 books that
both modules have (the WEB's deuterocanon has no Spanish side), and drop pairs that are empty on
one side, whose lengths are wildly different (see :data:`MAX_WORD_RATIO`), or that sit in the few
passages the two translations number differently (detected from word counts, see ``_shifted``). That gives about 31,000 pairs, ~24 Spanish words a verse on
average, many over 40 — long sentences, where attention matters.

The split is by WHOLE CHAPTER: a chapter's "book chapter" key, salted with :data:`SPLIT_SALT`,
is hashed (SHA-256) into 1,000 buckets; buckets 0–29 are test (3%), 30–59 valid (3%), the rest
train (94%). So no test verse, and no neighbour of a test verse, is ever seen in training, and
the split is the same on every machine and every run.

``prepare_bible()`` writes ``$ATTNKIT_HOME/bible/pairs.tsv`` once (columns: split, book, chapter,
verse, es, en; a header line) plus a small ``meta.json``; ``load_pairs(split)`` reads it back.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import os
import re
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ...paths import atomic_write_text, attnkit_home

__all__ = [
    "DEFAULT_SWORD_PATH",
    "SPLITS",
    "CorruptCorpusError",
    "Pair",
    "SwordModuleNotFoundError",
    "bible_path",
    "clean_osis",
    "fix_drop_caps",
    "get_tokenizer",
    "load_pairs",
    "pair_verses",
    "prepare_bible",
    "read_module_verses",
    "split_of",
]

#: Where Debian installs SWORD modules; override with ``ATTNKIT_SWORD_PATH`` or ``sword_path=``.
DEFAULT_SWORD_PATH = Path("/usr/share/sword")
SOURCE_MODULE = "spaRV1909eb"
TARGET_MODULE = "engWEB2015eb"
#: The Debian package that carries each module, named in the error when one is missing.
DEBIAN_PACKAGES = {SOURCE_MODULE: "sword-text-sparv", TARGET_MODULE: "sword-text-web"}

SPLITS = ("train", "valid", "test")
#: Fixed salt of the chapter hash; changing it reshuffles which chapters are held out.
SPLIT_SALT = "attnkit-bible-v1"
#: Out of 1,000 hash buckets: [0, 30) test, [30, 60) valid, [60, 1000) train → 3% / 3% / 94%.
TEST_BUCKETS = 30
VALID_BUCKETS = 30

#: A pair is dropped as misaligned when one side has more than this many times the words of the
#: other and the longer side has at least :data:`RATIO_MIN_WORDS` words. Real Spanish/English verse
#: pairs sit within ~0.5–2×; beyond 3× it is almost always a merged or renumbered verse.
MAX_WORD_RATIO = 3.0
RATIO_MIN_WORDS = 6
#: Misnumbered-passage detection (see ``_shifted``): typical log word-count ratio es/en (the
#: corpus median, Spanish ~6% shorter), costs below which nothing is flagged, the shifts tried,
#: the window, how much better a shift must fit, and flags that condemn a whole chapter.
LOG_RATIO_CENTRE = -0.06
SHIFT_MIN_COST = 0.2
MAX_SHIFT = 6
SHIFT_WINDOW = 3
SHIFT_GAIN = 0.5
SHIFT_CHAPTER_FLAGS = 3

#: Bumped whenever cleaning, pairing or splitting changes, so a stale cache is rebuilt.
FORMAT_VERSION = 1
TSV_COLUMNS = ("split", "book", "chapter", "verse", "es", "en")


class Pair(NamedTuple):
    """One verse pair: ``src`` (Spanish), ``tgt`` (English) and ``ref`` such as ``"Gen 1:1"``."""

    src: str
    tgt: str
    ref: str


class SwordModuleNotFoundError(FileNotFoundError):
    """A SWORD module we need is not installed where we looked."""


class CorruptCorpusError(ValueError):
    """The prepared TSV does not have the shape we wrote; the message names file and line."""


# --------------------------------------------------------------------------------------------
# Cleaning raw OSIS
# --------------------------------------------------------------------------------------------

# Elements dropped together with their content: footnotes and cross references (not part of the
# text), speaker labels of the Song of Songs, and headings added by editors.
_DROP_WITH_CONTENT = re.compile(
    r"<note\b[^>]*/>|<note\b[^>]*>.*?</note>"
    r"|<speaker\b[^>]*>.*?</speaker>"
    r"|<title\b(?![^>]*canonical=\"true\")[^>]*/>"
    r"|<title\b(?![^>]*canonical=\"true\")[^>]*>.*?</title>",
    re.DOTALL,
)
# The WEB appends its glossary to the last verse of Revelation after the book's end marker.
_BOOK_END = re.compile(r"<div\b(?=[^>]*\btype=\"book\")(?=[^>]*\beID=)[^>]*>")
# Strong's word wrappers: the text inside is the word itself and spacing is already in the text.
_WORD_TAG = re.compile(r"</?w\b[^>]*>")
# Any other tag (poetry lines, paragraphs, milestones, quotes, added words, canonical psalm
# titles) is a boundary: it becomes a marker that turns into a space only between words.
_ANY_TAG = re.compile(r"<[^>]*>")
_B = "\x00"  # boundary marker, never present in the text itself
_OPENERS = "([{“‘«¿¡"
_CLOSERS = ",.;:!?)]}”’»"
_ODD_MARKS = dict.fromkeys(map(ord, "¶§\u200b\u200c\u200d\u2060\ufeff"), None)


def clean_osis(raw: str) -> str:
    """Turn one verse of raw OSIS markup into plain text.

    Notes, cross references, speaker labels and non-canonical titles are removed with their
    content; canonical psalm titles ("A Psalm by David.") are kept because the Spanish has them in
    the verse text too. ``<w>`` tags are removed keeping their text. Every other tag becomes a
    word boundary: a space between two words, nothing next to existing whitespace, after an
    opening quote/bracket or before closing punctuation — so "God<note>…</note>created" becomes
    "God created" while "<q>…</q>," stays "…,". Then HTML entities are unescaped, pilcrows and
    zero-width marks removed, Unicode NFC applied and whitespace collapsed to single spaces.
    """
    if not isinstance(raw, str):
        raise TypeError(f"raw must be a str, got {type(raw).__name__}")
    if "<" in raw:
        end = _BOOK_END.search(raw)
        if end is not None:
            raw = raw[: end.start()]
        raw = _DROP_WITH_CONTENT.sub(_B, raw)
        raw = _WORD_TAG.sub("", raw)
        raw = _ANY_TAG.sub(_B, raw)
    text = html.unescape(raw).translate(_ODD_MARKS)
    if _B in text:
        text = re.sub(rf"[\s{_B}]*\s[\s{_B}]*", " ", text)  # a boundary next to a space: one space
        text = re.sub(rf"(?<=[{re.escape(_OPENERS)}]){_B}+", "", text)
        text = re.sub(rf"{_B}+(?=[{re.escape(_CLOSERS)}])", "", text)
        text = text.replace(_B, " ")
    text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


_DROP_CAP = re.compile(r"\b([^\W\d_a-zà-ÿ]{2,})(?= [a-zà-ÿ])")


def fix_drop_caps(text: str) -> str:
    """Undo RV 1909's typographic capitals: "EN el principio" → "En el principio".

    The Spanish edition prints the first word of each chapter in capitals ("JEHOVÁ es mi pastor",
    "Y YO me paré"); kept, they would be rare distinct tokens for common words. An all-capital
    word directly followed by a lowercase word is title-cased; capitals elsewhere (acrostic
    letters "ALEPH.", inscriptions in capitals) are left alone.
    """
    return _DROP_CAP.sub(lambda m: m.group(1).capitalize(), text)


# --------------------------------------------------------------------------------------------
# Reading the SWORD modules
# --------------------------------------------------------------------------------------------


def _sword_path(sword_path: str | os.PathLike | None) -> Path:
    if sword_path is not None:
        if not isinstance(sword_path, (str, os.PathLike)):
            raise TypeError(f"sword_path must be a str or os.PathLike, got {type(sword_path).__name__}")
        return Path(sword_path)
    env = os.environ.get("ATTNKIT_SWORD_PATH")
    return Path(env) if env else DEFAULT_SWORD_PATH


def _missing(module: str, where: Path, why: str) -> SwordModuleNotFoundError:
    pkg = DEBIAN_PACKAGES.get(module, "the SWORD module package")
    return SwordModuleNotFoundError(
        f"SWORD module {module!r} not found: {why} (looked in {where}). "
        f"Install the Debian package {pkg} (sudo apt-get install {pkg}), "
        f"or point ATTNKIT_SWORD_PATH / sword_path= at a SWORD folder that has it."
    )


def _open_module(module: str, sword_path: Path):
    """Open ``module`` with pysword, raising :class:`SwordModuleNotFoundError` when it is not there."""
    from pysword.modules import SwordModules

    conf_dir = sword_path / "mods.d"
    if not conf_dir.is_dir():
        raise _missing(module, sword_path, f"no folder {conf_dir}")
    modules = SwordModules(str(sword_path))
    found = modules.parse_modules()
    if module not in found:
        raise _missing(module, sword_path, f"no [{module}] section in {conf_dir}/*.conf")
    data_path = sword_path / found[module].get("datapath", "")
    if not data_path.is_dir():
        raise _missing(module, sword_path, f"its data folder {data_path} does not exist")
    bible = modules.get_bible_from_module(module)
    # pysword decompresses the whole block (here: the whole book) for every verse it reads; keep
    # the last block so reading a book costs one decompression instead of one per verse.
    bible._decompressed_text = functools.lru_cache(maxsize=2)(bible._decompressed_text)
    return bible


def read_module_verses(
    module: str, sword_path: str | os.PathLike | None = None, raw: bool = False
) -> dict[tuple[str, int, int], str]:
    """Read every verse of a SWORD Bible module: ``{(osis_book, chapter, verse): text}``.

    Text is cleaned with :func:`clean_osis` unless ``raw=True``. Book keys are OSIS names
    ("Gen", "Matt", "Rev"), taken from the module's own versification, so the caller can match
    books across modules whatever their versification.
    """
    if not isinstance(module, str) or not module:
        raise TypeError(f"module must be a non-empty str, got {module!r}")
    bible = _open_module(module, _sword_path(sword_path))
    verses: dict[tuple[str, int, int], str] = {}
    for _testament, books in bible.get_structure().get_books().items():
        for book in books:
            keys = [
                (book.osis_name, c, v) for c, n in enumerate(book.chapter_lengths, start=1) for v in range(1, n + 1)
            ]
            texts = list(bible.get_iter(books=book.osis_name, clean=False))
            if len(texts) != len(keys):  # pysword skipped a verse: we could not key the rest
                raise RuntimeError(f"{module}: {book.osis_name} gave {len(texts)} verses, expected {len(keys)}")
            for key, text in zip(keys, texts):
                verses[key] = text if raw else clean_osis(text or "")
    return verses


# --------------------------------------------------------------------------------------------
# Pairing and splitting
# --------------------------------------------------------------------------------------------


def _aligned(es: str, en: str) -> bool:
    """True when both sides are non-empty and their word counts are within :data:`MAX_WORD_RATIO`."""
    n_es, n_en = len(es.split()), len(en.split())
    if n_es == 0 or n_en == 0:
        return False
    if max(n_es, n_en) < RATIO_MIN_WORDS:
        return True
    return max(n_es, n_en) <= MAX_WORD_RATIO * min(n_es, n_en)


def _log_ratio(n_es: int, n_en: int) -> float:
    return math.log((n_es + 1) / (n_en + 1)) - LOG_RATIO_CENTRE


def _shifted(keys: list[tuple[str, int, int]], n_es: list[int], n_en: list[int]) -> set:
    """Keys that look numbered differently on the two sides (the verse sits at another address).

    RV 1909 and the WEB number a few passages differently (Num 12:16/13:1, 1 Sam 23:29/24:1,
    Hos 11:12/12:1, Jonah 1:17/2:1, 1 Kgs 22:43, Rom 16:25-27, ...): there the Spanish verse n is
    the English verse n±k and every pair is wrong, though often of plausible length. We detect
    this from lengths alone: if matching Spanish verses with English verses ``k`` places away
    (|k| <= :data:`MAX_SHIFT`) fits the word-count ratios much better (cost below
    :data:`SHIFT_GAIN` of the unshifted cost) than matching them in place, the verses are
    shifted. Tested over a window of ±:data:`SHIFT_WINDOW` verses around each verse, and over
    each whole chapter; a chapter with :data:`SHIFT_CHAPTER_FLAGS` or more shifted verses, or
    shifted as a whole, is dropped entirely. Long runs of verses of similar length (poetry) can
    hide a shift, so a few misnumbered verses may remain.
    """
    n = len(keys)

    def cost(idx: range | list[int], off: int) -> float:
        vals = [
            abs(_log_ratio(n_es[j], n_en[j + off]))
            for j in idx
            if 0 <= j < n and 0 <= j + off < n and keys[j + off][0] == keys[j][0] and keys[j][0] == keys[idx[0]][0]
        ]
        return sum(vals) / len(vals) if len(vals) >= max(2, len(idx) // 2) else math.inf

    def is_shifted(idx) -> bool:
        c0 = cost(idx, 0)
        if c0 <= SHIFT_MIN_COST:
            return False
        best = min(cost(idx, off) for off in range(-MAX_SHIFT, MAX_SHIFT + 1) if off)
        return best < SHIFT_GAIN * c0

    flagged = {i for i in range(n) if is_shifted(range(max(0, i - SHIFT_WINDOW), min(n, i + SHIFT_WINDOW + 1)))}
    chapters: dict[tuple[str, int], list[int]] = {}
    for i, key in enumerate(keys):
        chapters.setdefault(key[:2], []).append(i)
    out = {keys[i] for i in flagged}
    for idx in chapters.values():
        if sum(i in flagged for i in idx) >= SHIFT_CHAPTER_FLAGS or is_shifted(idx):
            out.update(keys[i] for i in idx)
    return out


def pair_verses(
    source: dict[tuple[str, int, int], str], target: dict[tuple[str, int, int], str]
) -> tuple[list[tuple[str, int, int, str, str]], dict[str, int]]:
    """Pair verses that have the same (book, chapter, verse) key on both sides.

    Keys present on one side only (whole books such as the WEB deuterocanon, or the odd verse
    that one versification splits differently) are skipped; pairs empty on a side, failing the
    word ratio (:func:`_aligned`) or numbered differently on the two sides (:func:`_shifted`)
    are dropped. Returns the pairs in source (canonical) order and counts of what was dropped.
    """
    keys = [key for key in source if source[key] and target.get(key)]
    n_es = [len(source[k].split()) for k in keys]
    n_en = [len(target[k].split()) for k in keys]
    shifted = _shifted(keys, n_es, n_en)
    pairs = []
    both = sum(1 for key in source if key in target)
    stats = {
        "source_only": len(source) - both,
        "target_only": len(target) - both,
        "empty": both - len(keys),
        "ratio": 0,
        "shifted": 0,
    }
    for key in keys:
        es, en = source[key], target[key]
        if not _aligned(es, en):
            stats["ratio"] += 1
        elif key in shifted:
            stats["shifted"] += 1
        else:
            pairs.append((key[0], key[1], key[2], es, en))
    return pairs, stats


def split_of(book: str, chapter: int) -> str:
    """The split ("train", "valid" or "test") of a whole chapter, from a salted SHA-256 hash.

    Deterministic across machines and Python versions (unlike ``hash()``).
    """
    digest = hashlib.sha256(f"{SPLIT_SALT}:{book} {int(chapter)}".encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") % 1000
    if bucket < TEST_BUCKETS:
        return "test"
    if bucket < TEST_BUCKETS + VALID_BUCKETS:
        return "valid"
    return "train"


# --------------------------------------------------------------------------------------------
# Prepare (cached) and load
# --------------------------------------------------------------------------------------------


def bible_path(home: str | os.PathLike | None = None) -> Path:
    """Path of the prepared TSV: ``$ATTNKIT_HOME/bible/pairs.tsv``."""
    return attnkit_home(home) / "bible" / "pairs.tsv"


def _is_prepared(tsv: Path) -> bool:
    meta = tsv.with_name("meta.json")
    if not tsv.is_file() or not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text("utf-8")).get("format_version") == FORMAT_VERSION
    except (OSError, ValueError):
        return False


def prepare_bible(
    home: str | os.PathLike | None = None,
    force: bool = False,
    sword_path: str | os.PathLike | None = None,
) -> Path:
    """Build ``$ATTNKIT_HOME/bible/pairs.tsv`` from the installed SWORD modules; return its path.

    Cached: if the TSV (and its ``meta.json`` of the current format) exists it is returned as is,
    unless ``force``. Both files are written atomically. ``sword_path`` (or the
    ``ATTNKIT_SWORD_PATH`` environment variable) overrides ``/usr/share/sword``. Raises
    :class:`SwordModuleNotFoundError` (a ``FileNotFoundError``) naming the module, the folder
    looked in and the Debian package to install when a module is missing. Takes seconds (measured in
    benchmarks/RESULTS.md, section "Figures formerly in docstrings").
    """
    tsv = bible_path(home)
    if not force and _is_prepared(tsv):
        return tsv
    start = time.perf_counter()
    folder = _sword_path(sword_path)
    for module in (SOURCE_MODULE, TARGET_MODULE):  # fail fast, before seconds of reading
        _open_module(module, folder)
    source = {k: fix_drop_caps(v) for k, v in read_module_verses(SOURCE_MODULE, folder).items()}
    target = read_module_verses(TARGET_MODULE, folder)
    pairs, stats = pair_verses(source, target)

    lines = ["\t".join(TSV_COLUMNS)]
    counts = dict.fromkeys(SPLITS, 0)
    for book, chapter, verse, es, en in pairs:
        split = split_of(book, chapter)
        counts[split] += 1
        lines.append(f"{split}\t{book}\t{chapter}\t{verse}\t{es}\t{en}")
    atomic_write_text(tsv, "\n".join(lines) + "\n")
    meta = {
        "format_version": FORMAT_VERSION,
        "source_module": SOURCE_MODULE,
        "target_module": TARGET_MODULE,
        "pairs": len(pairs),
        "splits": counts,
        "dropped": stats,
        "split_salt": SPLIT_SALT,
        "split_buckets_per_1000": {
            "test": TEST_BUCKETS,
            "valid": VALID_BUCKETS,
            "train": 1000 - TEST_BUCKETS - VALID_BUCKETS,
        },
        "max_word_ratio": MAX_WORD_RATIO,
        "ratio_min_words": RATIO_MIN_WORDS,
        "seconds": round(time.perf_counter() - start, 2),
    }
    atomic_write_text(tsv.with_name("meta.json"), json.dumps(meta, indent=2) + "\n")
    return tsv


def _iter_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` of the data rows, checking the header and the row shape."""
    with open(path, encoding="utf-8", newline="") as f:
        header = f.readline().rstrip("\r\n")
        if tuple(header.split("\t")) != TSV_COLUMNS:
            raise CorruptCorpusError(
                f"{path}:1: expected header {' '.join(TSV_COLUMNS)!r}, got {header[:80]!r}; "
                "delete the file or run prepare_bible(force=True)"
            )
        for lineno, line in enumerate(f, start=2):
            line = line.rstrip("\r\n")
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != len(TSV_COLUMNS):
                raise CorruptCorpusError(
                    f"{path}:{lineno}: expected {len(TSV_COLUMNS)} tab-separated columns, "
                    f"got {len(fields)}; delete the file or run prepare_bible(force=True)"
                )
            if fields[0] not in SPLITS:
                raise CorruptCorpusError(f"{path}:{lineno}: unknown split {fields[0]!r} (expected one of {SPLITS})")
            if not (fields[2].isdigit() and fields[3].isdigit()):
                raise CorruptCorpusError(
                    f"{path}:{lineno}: chapter and verse must be integers, got {fields[2]!r} and {fields[3]!r}"
                )
            yield lineno, fields


def load_pairs(split: str, home: str | os.PathLike | None = None, limit: int | None = None) -> list[Pair]:
    """Read the pairs of one split ("train", "valid", "test") from the prepared TSV.

    Prepares the corpus first if it is not there yet (see :func:`prepare_bible`). ``limit``
    keeps the first ``limit`` pairs in canonical order. Raises :class:`CorruptCorpusError`
    naming the file and the line when the TSV is malformed.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    path = bible_path(home)
    if not path.is_file():
        path = prepare_bible(home)
    pairs: list[Pair] = []
    for _lineno, fields in _iter_rows(path):
        if limit is not None and len(pairs) >= limit:
            break
        if fields[0] == split:
            pairs.append(Pair(fields[4], fields[5], f"{fields[1]} {fields[2]}:{fields[3]}"))
    return pairs


def get_tokenizer(vocab_size: int = 8000, home: str | os.PathLike | None = None):
    """The Bible's joint Spanish+English sentencepiece model (a :class:`attnkit.data.tokenizer.Tokenizer`),
    trained on its training split once and cached under ``$ATTNKIT_HOME/bible/spm-joint-{vocab_size}``."""
    from ..tokenizer import MODEL_FILENAME, Tokenizer  # sentencepiece, only when a tokenizer is asked for

    folder = attnkit_home(home) / "bible" / f"spm-joint-{vocab_size}"
    if (folder / MODEL_FILENAME).is_file():
        return Tokenizer.load(folder)
    train = load_pairs("train", home=home)
    texts = [p.src for p in train] + [p.tgt for p in train]
    return Tokenizer.train(texts, folder, vocab_size=vocab_size)


def _main(argv: list[str]) -> None:
    """``python -m attnkit.data.datasets.bible [--force]``: prepare and print counts and timing."""
    start = time.perf_counter()
    path = prepare_bible(force="--force" in argv)
    meta = json.loads(path.with_name("meta.json").read_text("utf-8"))
    print(
        f"{path}: {meta['pairs']} pairs {meta['splits']} dropped {meta['dropped']} "
        f"in {time.perf_counter() - start:.1f}s"
    )


if __name__ == "__main__":
    _main(sys.argv[1:])
