"""List every instance of the cases GUIDE.md's rules 8–15 decide, across the 150 gold verses.

An annotation aid for src/attnkit/alignment/gold/, not part of the package: it finds each pattern by
the words at each link (or at an unlinked word), prints the verse context and the link's kind (S = sure, P = possible only, - = none),
and marks with ``!`` an instance whose kind differs from what the rule says, so that an annotator
can read the verse pair and decide. It changes no file.

    python tools/gold/find_patterns.py [PATTERN ...] [--only-flagged]
        [--links FOLDER]   # e.g. the second-annotation/ folder: its sure/possible against these tokens

Patterns: aux, hay, el-que, art-poss, genitive, initial-y, personal-a, pro-drop.
"""

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "src" / "attnkit" / "alignment" / "gold"  # the gold set it reads


def plain(word: str) -> str:
    """The word without punctuation or quotes, lower-cased: ``“Blessed`` → ``blessed``."""
    return re.sub(r"[^\w’'-]", "", word).strip("’'").lower()


# English auxiliaries that carry tense, mood or aspect (rule 8)
AUX_FUTURE_MODAL = {
    "shall",
    "will",
    "would",
    "should",
    "may",
    "might",
    "must",
    "can",
    "could",
    "let",
    "shalt",
    "wilt",
    "wouldst",
    "shouldst",
    "mayest",
    "mightest",
    "canst",
    "couldst",
}
AUX_OTHER = {"have", "has", "had", "do", "does", "did"}
# Spanish words whose own meaning is the modal: poder, deber, querer, dejar/permitir, haber de / tener que
LEXICAL_MODAL = re.compile(r"^(pod|pued|pud|deb|quier|quer|quis|dej|permit|necesari)")
# tener → have and hacer → do are main verbs, not auxiliaries
LEXICAL_MAIN = re.compile(r"^(ten|tien|tuv|teng|hac|hic|hiz|hag|hech|har[eéá]?$|hará[ns]?$|harí)")
HABER = re.compile(r"^(he|has|ha|hemos|hab[eé]is|han|hab[ií]a\w*|hub\w+|habr[áée]\w*|haya\w*|haber\w*|habi[ée]ndo\w*)$")
HAY = {"hay", "había", "habia", "hubo", "habrá", "habría", "haya", "hubiese", "hubiera", "habrán"}
ARTICLES = {"el", "la", "los", "las", "lo"}
POSSESSIVES = {"my", "your", "his", "her", "its", "our", "their", "thy", "thine", "mine", "yours", "hers", "ours"}
GENITIVE_PRONOUNS = {"ellos", "ellas", "él", "ella", "nosotros", "vosotros", "ti", "mí"}
EN_PREPOSITIONS = {
    "to",
    "at",
    "unto",
    "into",
    "toward",
    "towards",
    "on",
    "upon",
    "for",
    "in",
    "by",
    "from",
    "of",
    "with",
    "against",
    "before",
    "after",
    "until",
    "till",
    "as",
    "among",
    "over",
    "under",
    "about",
    "through",
    "near",
}
SUBJECT_PRONOUNS = {"i", "he", "she", "we", "they", "thou", "ye", "you", "it"}
ES_PRONOUNS = {
    "yo",
    "tú",
    "tu",
    "él",
    "ella",
    "ello",
    "nosotros",
    "nosotras",
    "vosotros",
    "vosotras",
    "ellos",
    "ellas",
    "usted",
    "ustedes",
    "me",
    "te",
    "se",
    "le",
    "les",
    "lo",
    "la",
    "los",
    "las",
    "nos",
    "os",
    "mí",
    "ti",
    "sí",
    "quien",
    "quienes",
    "que",
    "cual",
    "cuales",
    "el",
    "aquel",
    "aquella",
    "aquellos",
    "aquellas",
    "éste",
    "ésta",
    "éstos",
    "éstas",
    "ése",
    "ésa",
    "ésos",
    "ésas",
    "este",
    "esta",
    "estos",
    "estas",
    "ese",
    "esa",
    "esos",
    "esas",
    "conmigo",
    "contigo",
    "consigo",
    "uno",
    "alguno",
    "ninguno",
    "nadie",
    "todos",
    "cada",
}
CLITIC_END = re.compile(r"(me|te|se|le|les|lo|la|los|las|nos|os)$")
# Instances read and judged to be right although the pattern flags them: (line, spanish index, english index)
JUDGED = {
    (104, 0, 5),  # Deut 25:12 La–her: La is the object clitic (the possessor), not an article: sure
    (104, 7, 10),  # Deut 25:12 perdonará–have: "have pity" renders perdonar; have is a main verb here: sure
}
INITIAL_Y_ROLES = {"and", "now", "so", "then", "but", "therefore", "also", "moreover", "yet", "for"}


def lines(folder: Path, name: str) -> list[str]:
    return (folder / f"es-en.{name}").read_text(encoding="utf-8").splitlines()


def links(line: str) -> set[tuple[int, int]]:
    return {tuple(int(x) for x in item.split("-")) for item in line.split()}


def load(links_folder: Path):
    refs, es, en = lines(HERE, "refs"), lines(HERE, "es"), lines(HERE, "en")
    sure, possible = lines(links_folder, "sure"), lines(links_folder, "possible")
    for k, row in enumerate(zip(refs, es, en, sure, possible), 1):
        r, s, t, a, b = row
        yield k, r, s.split(), t.split(), links(a), links(b)


def kind(i, j, sure, possible) -> str:
    return "S" if (i, j) in sure else "P" if (i, j) in possible else "-"


def context(words, idx, width=3):
    lo, hi = max(0, min(idx) - width), min(len(words), max(idx) + width + 1)
    return " ".join(f"[{w}]" if n in idx else w for n, w in enumerate(words[lo:hi], lo))


def find(pattern, verse):
    """Yield (spanish indices, english indices, links with their kinds, the kind the rule wants): the kind is
    S, P, or None where the annotator decides; a dict gives it per link."""
    line, _ref, es, en, sure, possible = verse
    pes, pen = [plain(w) for w in es], [plain(w) for w in en]
    linked = sorted(possible)
    if pattern == "aux":  # rule 8: an auxiliary that renders inflection is possible; a lexical modal is sure
        for i, j in linked:
            if pen[j] in AUX_FUTURE_MODAL | AUX_OTHER:
                if (line, i, j) in JUDGED:
                    want = None
                elif HABER.match(pes[i]) and (pen[j] in AUX_OTHER or "de" in pes[i + 1 : i + 3]):
                    want = "S"  # haber → have, haber de → will: a Spanish auxiliary word
                elif (
                    LEXICAL_MODAL.match(pes[i])
                    or (pen[j] in AUX_OTHER and LEXICAL_MAIN.match(pes[i]))
                    or (pen[j] == "will" and pes[i].startswith("volunt"))
                ):
                    want = None  # a lexical modal: the annotator decides (usually sure)
                else:
                    want = "P"
                yield [i], [j], [(i, j, kind(i, j, sure, possible))], want
    elif pattern == "hay":  # rule 9: existential haber → "there" + the verb, all sure
        for i, w in enumerate(pes):
            if w in HAY:
                js = sorted({j for a, j in possible if a == i})
                there = [j for j, x in enumerate(pen) if x == "there"]
                ls = [(i, j, kind(i, j, sure, possible)) for j in sorted(set(js + there))]
                yield [i], js + there, ls, {(i, j): "P" for j in js if pen[j] == "there"}
    elif pattern == "el-que":  # rule 10: article of a free relative → he/those/...; que → who/which; sure
        for i in range(len(pes) - 1):
            if pes[i] in ARTICLES | {"aquel", "aquellos", "aquella"} and pes[i + 1] in {"que", "cual", "cuales"}:
                js = sorted({j for a, j in possible if a in (i, i + 1)})
                ls = [(a, j, kind(a, j, sure, possible)) for a in (i, i + 1) for j in js]
                yield [i, i + 1], js, [x for x in ls if x[2] != "-"], None
    elif pattern == "art-poss":  # rule 11: an article where English has a possessive: possible
        for i, j in linked:
            if pes[i] in ARTICLES | {"al", "del"} and pen[j] in POSSESSIVES and (line, i, j) not in JUDGED:
                yield [i], [j], [(i, j, kind(i, j, sure, possible))], "P"
    elif pattern == "genitive":  # rule 12: de/del → X's / their: sure
        for i, w in enumerate(pes):
            if w not in {"de", "del"}:
                continue
            js = [j for a, j in linked if a == i and (pen[j] in POSSESSIVES or re.search(r"[’']s?$", en[j]))]
            nxt = pes[i + 1] if i + 1 < len(pes) else ""
            if js or nxt in GENITIVE_PRONOUNS:
                ls = [(i, j, kind(i, j, sure, possible)) for j in js]
                yield [i, i + 1] if nxt in GENITIVE_PRONOUNS else [i], js, ls, "P"
    elif pattern == "initial-y":  # rule 13: verse-initial Y → a verse-initial connective
        if pes and pes[0] == "y":
            js = sorted({j for a, j in possible if a == 0} | ({0} if pen and pen[0] in INITIAL_Y_ROLES else set()))
            others = {j for a, j in possible if a > 0}  # English words another Spanish word renders
            want = {(0, j): "S" if pen[j] == "and" and j == 0 else "P" for j in js if pen[j] in INITIAL_Y_ROLES}
            want.update({(0, j): None for j in js if j in others})
            yield [0], js, [(0, j, kind(0, j, sure, possible)) for j in js], want
    elif pattern == "personal-a":  # rule 14: personal a unaligned; al → the only for its article
        for i, j in linked:
            if (
                pes[i] in {"á", "a", "al"}
                and pen[j] not in EN_PREPOSITIONS
                and not (pes[i] == "al" and pen[j] == "the")
            ):
                yield [i], [j], [(i, j, kind(i, j, sure, possible))], None
    elif pattern == "pro-drop":  # rule 15: an English subject pronoun with no Spanish word: possible
        for i, j in linked:
            if pen[j] in SUBJECT_PRONOUNS and pes[i] not in ES_PRONOUNS:
                clitic = CLITIC_END.search(pes[i]) and len(pes[i]) >= 5  # an object clitic: rule 3, sure
                yield [i], [j], [(i, j, kind(i, j, sure, possible))], None if clitic or pen[j] == "it" else "P"


PATTERNS = ["aux", "hay", "el-que", "art-poss", "genitive", "initial-y", "personal-a", "pro-drop"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", metavar="PATTERN", help=f"any of {', '.join(PATTERNS)} (default: all)")
    ap.add_argument("--only-flagged", action="store_true", help="only instances whose kind differs from the rule")
    ap.add_argument("--links", type=Path, default=HERE, help="folder of es-en.sure / es-en.possible")
    args = ap.parse_args(argv)
    unknown = [p for p in args.patterns if p not in PATTERNS]
    if unknown:
        ap.error(f"unknown pattern {unknown[0]!r}; choose from {', '.join(PATTERNS)}")
    verses = list(load(args.links))
    for pattern in args.patterns or PATTERNS:
        counts = {"S": 0, "P": 0, "-": 0}
        found = flagged = 0
        print(f"### {pattern}")
        for v in verses:
            k, ref, es, en = v[:4]
            for ies, jen, ls, want in find(pattern, v):
                found += 1
                wants = want if isinstance(want, dict) else {(i, j): want for i, j, _ in ls}
                bad = any(wants.get((i, j)) not in (None, c) for i, j, c in ls)
                flagged += bad
                for x in ls:
                    counts[x[2]] += 1
                if args.only_flagged and not bad:
                    continue
                shown = " ".join(f"{es[i]}–{en[j]}:{c}" for i, j, c in ls) or "(no link)"
                print(f"{'!' if bad else ' '} line {k:3d} {ref:12s} {shown}")
                print(f"      es: {context(es, ies)}")
                print(f"      en: {context(en, jen) if jen else ' '.join(en[:8])}")
        print(f"# {pattern}: {found} instances, links S {counts['S']} P {counts['P']}, {flagged} flagged\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
