"""Spanish spelling: the 1909 Reina-Valera's orthography and today's, in both directions.

The built-in corpus's Spanish side is the Reina-Valera of 1909, spelled before the Real Academia's
reforms of 1952 and 2010 (*Ortografía de la lengua española*, 2010). People type today's spelling,
which the shipped models never saw: "En el principio creó Dios..." where the corpus has "crió".
:func:`modernize` rewrites 1909 text in today's spelling (to build a modern copy of a test set);
:func:`to_1909` rewrites today's spelling in the 1909 one (what a model trained on the 1909 text
reads best; :func:`attnkit.data.tokenizer.encode_sources` applies it to a translator's input).

Both work word by word and never split or join words, so a verse keeps its word count and word
alignments (gold links, attention read per word) stay valid across spellings.

**Modern spelling** (:func:`modernize`). The counts are the tokens of the 28,937 training verses'
Spanish side (``attnkit data prepare bible``) that each rule changes; 275 more follow from the same
general rules: *ui* is a diphthong (destruído → destruido, huído → huido), and names and misprints
(Sión → Sion, oyéndo → oyendo).

=====================================  ==========================================  =========
rule                                   1909 → modern (corpus example)              tokens
=====================================  ==========================================  =========
monosyllables take no accent, unless   fué → fue, dió → dio, vió → vio,            2,430
they are diacritic (él, tú, mí, sí,    fuí → fui, dí → di, ví → vi, tí → ti,
té, dé, sé, más, qué, quién, cuál,     há → ha, hé → he, piés → pies,
cuán: :data:`DIACRITIC`); closed +     guió → guio, fió → fio (2010: vowel pairs
open vowels count as one syllable      like *ie*, *io*, *ui* are diphthongs)
the words á, é, ó, ú take no accent    á la luz → a la luz; visibles é invisibles  19,532
                                       → visibles e invisibles; dos ó tres → o
a verb with one clitic follows the     levantóse → levantose, dióles → dioles,      1,949
general rules as a whole word          tomóla → tomola, fuése → fuese, harélos →
(a llana word ending in a vowel or     harelos; (two clitics keep it: diósela)
*s* takes no accent)
demonstratives and *solo* take no      éste → este, aquél → aquel, sólo → solo      590
accent (2010)
accent of a stressed í/ú in hiatus     oid → oíd, Oidme → Oídme                     123
criar *create* → crear (when the       crió Dios los cielos → creó Dios; criados    46
verse speaks of creating, see below)   → creados; Criador → Creador
archaic words                          priesa → prisa, apriesa → aprisa, aqueste    100
                                       → este, aquesta → esta, aquesto → esto,
                                       entrambos → ambos, obscuridad → oscuridad
=====================================  ==========================================  =========

The accents are decided by the general rules (an *aguda* word takes an accent when it ends in a
vowel, *n* or *s*; a *llana* one when it does not; an *esdrújula* always; a stressed *í*/*ú* beside
*a*, *e* or *o* always), from the syllables the 2010 rules count, so any word the table's examples do
not list is treated alike. Capitals keep their case ("Fué" → "Fue", "FUÉ" → "FUE").

*Criar* meant both *create* and *raise* in 1909 (*crear* never occurs in it). Its forms become
*crear*'s when the same verse names the Creator or the created (:data:`CREATION_CUES`: Dios,
Jehová, cielos, tierra, cosas, hombre...), else they stay *criar*'s in modern spelling (crió →
crio). Against the English side of the training verses (a verse whose reference says *create*,
*creator* or *creation*), this reads 36 of the 41 forms that mean *create* as *crear*, and 13 of
the 23 that do not as *criar*; of the 10 others, half are verses the English words otherwise ("he
who built all things is God" for "el que crió todas las cosas") and half real misses ("crió su
hijo" in a verse that names Jehová).
*Criado*/*criada* as nouns (*servant*, still Spanish) change only after a form of *haber* or
*ser* (fueron criados → fueron creados).

Not changed: the 1909 spellings of names (Ezechîas, Jerusalem), and the accent a capital lacked
("El" for "Él"), which need a reading of the sentence, not of the word.

**1909 spelling** (:func:`to_1909`): the modern words the 1909 text never writes, mapped to the
form it writes instead (:data:`TO_1909`): a → á, e → é, o → ó, u → ú (lower case; the 1909 text
writes capitals without accents), fue → fué, fui → fuí, dio → dió, vio → vió, fio → fió, guio →
guió, oíd → oid, creó → crió, crear → criar, creado → criado... Words the 1909 text writes both ways
(di and dí, ti and tí, este and éste, solo and sólo, prisa and priesa) and enclitic verbs
(levantose, which cannot be told from a noun without a dictionary) stay as they are: the model has
seen them. So ``to_1909(modernize(text)) == text`` holds for text whose words are in the tables,
and ``modernize(to_1909(text)) == text`` for modern text without *crear* (which needs its cue).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "CREATION_CUES",
    "DIACRITIC",
    "SPELLINGS",
    "TO_1909",
    "check_spelling",
    "default_spelling",
    "modernize",
    "normalize_source",
    "to_1909",
]

#: The spellings a model's source side can be in (``LanguagePair.src_spelling``): ``rv1909`` (the
#: 1909 Reina-Valera: input is rewritten with :func:`to_1909` before tokenizing) or ``modern``.
SPELLINGS = ("rv1909", "modern")

#: Monosyllables (and interrogatives) whose accent tells two words apart, so they keep it.
DIACRITIC = frozenset(
    [
        "él",
        "tú",
        "mí",
        "sí",
        "té",
        "dé",
        "sé",
        "más",
        "qué",
        "quién",
        "quiénes",
        "cuál",
        "cuáles",
        "cuán",
        "cuánto",
        "cuánta",
        "cuántos",
        "cuántas",
        "cómo",
        "cuándo",
        "dónde",
        "adónde",
        "aún",
    ]
)

#: Words that mark a verse as speaking of creation, for the forms of *criar* (see the module docstring).
CREATION_CUES = frozenset(
    [
        "dios",
        "jehová",
        "señor",
        "criador",
        "creador",
        "cielo",
        "cielos",
        "tierra",
        "cosas",
        "mundo",
        "hombre",
        "hombres",
        "criatura",
        "criaturas",
        "cristo",
        "principio",
    ]
)

# criar's forms the 1909 text uses, and crear's (the same ending after cr-i/cr-e)
_CRIAR_FORMS = frozenset(
    [
        "crió",
        "crié",
        "criaste",
        "criaron",
        "criará",
        "criaré",
        "crear",
        "criar",
        "criado",
        "criada",
        "criados",
        "criadas",
        "criaba",
        "criador",
    ]
)
_NOUN_FORMS = frozenset(["criado", "criada", "criados", "criadas"])  # servant(s): verb only after an auxiliary
_AUXILIARIES = frozenset(
    [
        "ha",
        "he",
        "has",
        "había",
        "habían",
        "han",
        "hemos",
        "habéis",
        "fué",
        "fue",
        "fueron",
        "sido",
        "es",
        "son",
        "será",
        "serán",
        "fuiste",
        "fuese",
        "fuesen",
        "era",
        "eran",
        "fuí",
        "fui",
        "sea",
        "sean",
    ]
)

#: Archaic words and their modern forms (lower case).
_ARCHAIC = {
    "priesa": "prisa",
    "apriesa": "aprisa",
    "aqueste": "este",
    "aquesta": "esta",
    "aquestos": "estos",
    "aquestas": "estas",
    "aquesto": "esto",
    "entrambos": "ambos",
    "obscuro": "oscuro",
    "obscura": "oscura",
    "obscuridad": "oscuridad",
}

#: Modern words the 1909 text never writes, and the form it writes instead (lower case); the
#: single letters only in lower case (a capital A is the 1909 text's own spelling).
TO_1909 = {
    "a": "á",
    "e": "é",
    "o": "ó",
    "u": "ú",
    "fue": "fué",
    "fui": "fuí",
    "dio": "dió",
    "vio": "vió",
    "fio": "fió",
    "guio": "guió",
    "oíd": "oid",
    "oídme": "oidme",
    "creó": "crió",
    "creé": "crié",
    "creaste": "criaste",
    "crearon": "criaron",
    "creará": "criará",
    "crearé": "criaré",
    "crear": "criar",
    "creado": "criado",
    "creada": "criada",
    "creados": "criados",
    "creadas": "criadas",
    "creaba": "criaba",
    "creador": "criador",
}
_LOWER_ONLY = frozenset("aeou")

_WORD = re.compile(r"\w+")
_WORD_AND_BETWEEN = re.compile(r"(\w+)")  # split() keeps each word: [between, word, between, ..., between]
_VOWELS = "aeiouáéíóúüâêîôû"
_ACCENTED = {"á": "a", "é": "e", "í": "i", "ó": "o", "ú": "u"}
_OPEN = set("aeoáéóâêô")
_STRONG = _OPEN | {"í", "ú"}  # open vowels, and closed ones carrying an accent (a hiatus)


def _nuclei(word: str) -> list[tuple[int, int]]:
    """The syllable nuclei of lower-case ``word`` as (start, end) spans, by the 2010 rules: *qu*/*gu*
    before e/i spell one consonant, an *h* between vowels does not part them, a final *y* after a
    vowel is one, and two strong vowels (open, or an accented closed one) are two syllables."""
    n = len(word)
    vowel = [c in _VOWELS for c in word]
    for i, c in enumerate(word):
        if c == "u" and 0 < i < n - 1 and word[i - 1] in "qg" and word[i + 1] in "eiéí":
            vowel[i] = False
        if c == "y" and i == n - 1 and i > 0 and vowel[i - 1]:
            vowel[i] = True
    # the letters that count, an h between vowels left out: (index in word, is a vowel)
    kept = [(i, vowel[i]) for i in range(n) if not (word[i] == "h" and 0 < i < n - 1 and vowel[i - 1] and vowel[i + 1])]
    spans: list[tuple[int, int]] = []
    prev = None  # (index of the previous letter kept, whether it was a vowel)
    for i, is_vowel in kept:
        if is_vowel:
            joined = prev is not None and prev[1] and not (word[prev[0]] in _STRONG and word[i] in _STRONG)
            if joined:
                spans[-1] = (spans[-1][0], i + 1)
            else:
                spans.append((i, i + 1))
        prev = (i, is_vowel)
    return spans


def _needs_accent(word: str, pos: int) -> bool:
    """Whether today's rules put an accent on the vowel at ``pos`` of lower-case ``word`` (where it
    stands accented): see the module docstring."""
    if word in DIACRITIC:
        return True
    vowel = word[pos]
    neighbours = word[pos - 1 : pos] + word[pos + 1 : pos + 2]
    after_h = word[pos + 2 : pos + 3] if word[pos + 1 : pos + 2] == "h" else ""
    before_h = word[pos - 2 : pos - 1] if pos > 1 and word[pos - 1] == "h" else ""
    if vowel in "íú" and any(c in _OPEN for c in neighbours + after_h + before_h):
        return True  # a stressed closed vowel beside an open one: a hiatus (día, oí, prohíbe)
    spans = _nuclei(word)
    stressed = next((k for k, (a, b) in enumerate(spans) if a <= pos < b), None)
    if stressed is None or len(spans) == 1:
        return False  # a monosyllable that tells no two words apart
    from_end = len(spans) - 1 - stressed
    ends_open = word[-1] in _VOWELS or word[-1] in "ns"
    return ends_open if from_end == 0 else (not ends_open if from_end == 1 else True)


def _recase(new: str, old: str) -> str:
    """``new`` (lower case) in the case pattern of ``old``."""
    if old.isupper() and len(old) > 1:
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def _modern_word(low: str, creation: bool, previous: str) -> str:
    if low in _ARCHAIC:
        return _ARCHAIC[low]
    if low == "oid" or low == "oidme":
        return "o" + "í" + low[2:]
    if low in _CRIAR_FORMS and creation and (low not in _NOUN_FORMS or previous in _AUXILIARIES):
        low = "cre" + low[3:]
    if low in ("criador",) and creation:
        return "creador"
    accented = [i for i, c in enumerate(low) if c in _ACCENTED]
    if len(accented) == 1 and not _needs_accent(low, accented[0]):
        i = accented[0]
        low = low[:i] + _ACCENTED[low[i]] + low[i + 1 :]
    return low


def check_spelling(spelling) -> str:
    """``spelling`` if it is one of :data:`SPELLINGS`, else a ``ValueError`` naming the argument."""
    if spelling not in SPELLINGS:
        raise ValueError(f"spelling must be one of {', '.join(SPELLINGS)}; got {spelling!r}")
    return spelling


def default_spelling(corpus: str, src_lang: str) -> str:
    """The spelling of a model's source side when its config does not say: ``rv1909`` for the
    built-in Bible corpus read from Spanish (its Spanish is the 1909 Reina-Valera), else ``modern``."""
    return "rv1909" if corpus == "bible" and src_lang == "es" else "modern"


def modernize(text: str) -> str:
    """``text`` (1909 Reina-Valera spelling) in today's spelling: see the rules in the module docstring."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text)
    words = _WORD.findall(text.lower())
    creation = any(w in CREATION_CUES for w in words)
    previous = [""]

    def one(m: re.Match) -> str:
        old = m.group(0)
        low = old.lower()
        new = _modern_word(low, creation, previous[0])
        previous[0] = low
        return old if new == low else _recase(new, old)

    return _WORD.sub(one, text)


def to_1909(text: str) -> str:
    """``text`` (today's spelling) in the 1909 Reina-Valera's: the words of :data:`TO_1909` replaced."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text)
    # the words and what lies between them, in turn (``_WORD``'s matches at the odd places): the words that
    # are no key are kept without a call per word, which a corpus job's pass over millions of lines feels
    parts = _WORD_AND_BETWEEN.split(text)
    words = parts[1::2]
    keys = TO_1909.keys() & map(str.lower, words)  # the words (lower-cased) that may change
    if not keys:
        return text
    parts[1::2] = [_word_1909(w) if w.lower() in keys else w for w in words]
    return "".join(parts)


def _word_1909(old: str) -> str:
    """One word of :func:`to_1909`: its 1909 spelling in its own case pattern (``a`` alone only in lower case)."""
    low = old.lower()
    new = TO_1909.get(low)
    if new is None or (low in _LOWER_ONLY and old != low):
        return old
    return _recase(new, old)


def normalize_source(text: str, spelling: str) -> str:
    """A translator's source ``text`` in the spelling its model was trained on: :func:`to_1909` for
    ``rv1909``, unchanged for ``modern``."""
    return to_1909(text) if check_spelling(spelling) == "rv1909" else text
