"""The hand-made Spanish–English gold word alignments of held-out Bible verses, and their checks.

Files (``data/gold-alignments/`` in the repository, package data in an installed attnkit):
``es-en.es`` / ``es-en.en`` (one verse a line, whitespace tokens), ``es-en.refs`` (verse references),
``es-en.sure`` / ``es-en.possible`` (Pharaoh format: ``i-j`` links, ``i`` a Spanish token index,
``j`` an English one, 0-based, space-separated; every sure link is also possible). Lines 1–50
are the **dev** part (for choosing a layer or head), lines 51–150 the **scored** part.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..data.parallel import read_lines

__all__ = [
    "DEV_VERSES",
    "GOLD_DIR",
    "GOLD_LANGUAGES",
    "GoldVerse",
    "format_links",
    "load_gold",
    "load_gold_files",
    "parse_gold_links",
    "parse_links",
    "validate_gold",
]

GOLD_DIR = Path(__file__).resolve().parent / "gold"
#: The built-in gold set's (source, target) languages: its links are (Spanish word, English word).
GOLD_LANGUAGES = ("es", "en")
DEV_VERSES = 50

Link = tuple[int, int]


@dataclass
class GoldVerse:
    """One verse pair with its gold links (sets of ``(spanish index, english index)``)."""

    ref: str
    source: list[str]
    target: list[str]
    sure: set[Link]
    possible: set[Link]

    def turned_around(self) -> GoldVerse:
        """The same verse read the other way (the built-in set: English → Spanish): sides swapped, each link
        ``(i, j)`` now ``(j, i)``."""
        return GoldVerse(
            self.ref,
            self.target,
            self.source,
            {(j, i) for i, j in self.sure},
            {(j, i) for i, j in self.possible},
        )

    def to_dict(self) -> dict:
        """For the explorer: the words and the links, as lists."""
        return {
            "ref": self.ref,
            "source": self.source,
            "target": self.target,
            "sure": sorted(self.sure),
            "possible": sorted(self.possible),
        }


def parse_links(line: str, *, where: str = "") -> set[Link]:
    """``"0-0 1-2"`` → ``{(0, 0), (1, 2)}``; a malformed link is a ValueError naming ``where``."""
    links = set()
    for item in line.split():
        a, sep, b = item.partition("-")
        if not sep or not a.isdigit() or not b.isdigit():
            raise ValueError(f"{where}: {item!r} is not a link i-j of two non-negative integers")
        links.add((int(a), int(b)))
    return links


def parse_gold_links(line: str, *, where: str = "") -> tuple[set[Link], set[Link]]:
    """One line of a gold file in the one-file convention of Lilt's ``alignment-scripts`` (used by
    Zenkel et al., Garg et al., Chen et al.): ``i-j`` a sure link, ``ipj`` (or ``i?j``) a possible
    one → ``(sure, possible)``, possible holding the sure links too."""
    sure, possible = set(), set()
    for item in line.split():
        sep = next((c for c in "-p?" if c in item), "")
        a, _, b = item.partition(sep) if sep else (item, "", "")
        if not sep or not a.isdigit() or not b.isdigit():
            raise ValueError(
                f"{where}: {item!r} is not a link i-j (sure) or ipj (possible) of two non-negative integers"
            )
        link = (int(a), int(b))
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def load_gold_files(source: str | Path, target: str | Path, gold: str | Path) -> list[GoldVerse]:
    """A user's gold set: line-parallel source, target and gold files (:func:`parse_gold_links`),
    checked with :func:`validate_gold`; any problem is a ValueError naming the file and line."""
    paths = {"source": Path(source), "target": Path(target), "gold": Path(gold)}
    lines = {k: [line for _, line in read_lines(p)] for k, p in paths.items()}  # UTF-8, no NUL: else named by line
    if len({len(v) for v in lines.values()}) != 1:
        raise ValueError(
            "the gold files must have one line per sentence pair; they have "
            + ", ".join(f"{paths[k]} {len(v)}" for k, v in lines.items())
        )
    verses = []
    for k, (s, t, g) in enumerate(zip(lines["source"], lines["target"], lines["gold"])):
        sure, possible = parse_gold_links(g, where=f"{paths['gold']} line {k + 1}")
        verses.append(GoldVerse(f"line {k + 1}", s.split(), t.split(), sure, possible))
    problems = [p for p in validate_gold(verses) if not p.endswith("no links")]
    if problems:
        raise ValueError(
            f"{paths['gold']}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if problems[1:] else "")
        )
    return verses


def format_links(links: Iterable[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def load_gold(folder: str | Path | None = None) -> list[GoldVerse]:
    """Every gold verse, in file order (dev first), with sure and possible links as sets."""
    folder = Path(folder) if folder is not None else GOLD_DIR
    refs, es, en = (_lines(folder / f"es-en.{x}") for x in ("refs", "es", "en"))
    sure, possible = _lines(folder / "es-en.sure"), _lines(folder / "es-en.possible")
    sizes = {len(refs), len(es), len(en), len(sure), len(possible)}
    if len(sizes) != 1:
        raise ValueError(
            f"{folder}: the five files must have one line per verse; they have "
            f"refs {len(refs)}, es {len(es)}, en {len(en)}, sure {len(sure)}, possible {len(possible)}"
        )
    return [
        GoldVerse(
            r,
            s.split(),
            t.split(),
            parse_links(a, where=f"es-en.sure line {k + 1}"),
            parse_links(b, where=f"es-en.possible line {k + 1}"),
        )
        for k, (r, s, t, a, b) in enumerate(zip(refs, es, en, sure, possible))
    ]


def validate_gold(verses: list[GoldVerse], corpus: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """Every problem found (an empty list when the set is sound): indices in range, sure ⊆ possible,
    no verse without links, and (given ``corpus``: ref → (spanish, english)) tokens equal to the
    corpus text of that verse."""
    problems = []
    for k, v in enumerate(verses, 1):
        for name, links in (("sure", v.sure), ("possible", v.possible)):
            bad = [f"{i}-{j}" for i, j in links if not (0 <= i < len(v.source) and 0 <= j < len(v.target))]
            if bad:
                problems.append(
                    f"line {k} ({v.ref}): {name} links out of range "
                    f"({len(v.source)} es × {len(v.target)} en tokens): {' '.join(bad)}"
                )
        if not v.sure <= v.possible:
            problems.append(f"line {k} ({v.ref}): sure links not in possible: {format_links(v.sure - v.possible)}")
        if not v.possible:
            problems.append(f"line {k} ({v.ref}): no links")
        if corpus is not None:
            if v.ref not in corpus:
                problems.append(f"line {k}: {v.ref} is not a verse of the corpus split")
            elif corpus[v.ref][0].split() != v.source or corpus[v.ref][1].split() != v.target:
                problems.append(f"line {k} ({v.ref}): tokens differ from the corpus text")
    return problems
