"""Rank 0's pass of a split ``translate --file`` (``attnkit.cli.translate_job._prepare``, issue 58): what it
writes equals a plain line-by-line reference of what the one-process run does (each line checked and
tokenised alone with ``Translator.encode_sources``, then a stable sort by length); the faster helpers it
calls (``to_1909`` without a call per word, ``_looks_english`` by C-level maps) equal their plain loops."""

from __future__ import annotations

import re
import unicodedata
from types import SimpleNamespace

import numpy as np
import pytest

from attnkit.alignment.gold import load_gold
from attnkit.cli.common import CLIError
from attnkit.cli.translate_job import _prepare
from attnkit.cli.translate_lines import _looks_english
from attnkit.data import spelling
from attnkit.data.parallel import read_lines
from attnkit.data.text import TextError
from attnkit.tasks.translation import Translator

# _looks_english's cue, written out again: the words of the reference loop
COMMON = frozenset(
    "the and of to he his they that was is with for you i it will which who him them have be not this are shall".split()  # noqa: SIM905
)


@pytest.fixture(scope="module")
def tr():
    return Translator.load("transformer-es-en")


def _reference(tr, path, truncate: bool):
    """The kept sentences in the one-process run's order, and each kept sentence's place in it."""
    kept = []
    for _, line in read_lines(path):
        text = line.strip()
        if not text:
            continue
        try:
            tr.encode_sources([text], truncate=True)
        except TextError:
            continue
        kept.append(text)
    lengths = [len(ids) for ids in tr.encode_sources(kept, truncate=truncate)] if kept else []
    order = sorted(range(len(kept)), key=lambda k: lengths[k])  # Python's sort is stable
    place = [0] * len(kept)
    for p, k in enumerate(order):
        place[k] = p
    return [kept[k] for k in order], place


def test_the_pass_writes_what_a_plain_line_by_line_loop_gives(tr, tmp_path, capsys):
    verses = load_gold()[:40]
    lines = [" ".join(v.source[: 3 + i % 9]) for i, v in enumerate(verses)]  # many equal lengths: ties kept
    lines[0] = "\ufeff" + lines[0]  # a byte-order mark on line 1
    lines[5], lines[9], lines[13] = "", "   ", "\u200b\u200b"  # empty, blank, unreadable
    lines[20] = "  " + lines[20] + "\t"
    path = tmp_path / "in.es"
    path.write_bytes(("\r\n".join(lines[:30]) + "\n" + "\n".join(lines[30:])).encode("utf-8"))  # CRLF and LF
    args = SimpleNamespace(file=str(path), truncate=False)
    files, counts = _prepare(tr, args, {"x": 1}, tmp_path / "job")
    want_sorted, want_place = _reference(tr, path, truncate=False)
    assert counts == {"inputs": 38, "skipped": 1}
    assert (tmp_path / "job" / "sorted.txt").read_text(encoding="utf-8") == "".join(s + "\n" for s in want_sorted)
    assert np.fromfile(tmp_path / "job" / "order.u64", dtype=np.uint64).tolist() == want_place
    assert files == [str(tmp_path / "job" / "sorted.txt")]
    assert f"{path} line 14: the text has" in capsys.readouterr().err


def test_an_overlong_line_is_named_or_cut_with_truncate(tr, tmp_path):
    words = " ".join(v.source[0] for v in load_gold()[:150] for _ in range(2))  # far over the model's pieces
    path = tmp_path / "long.es"
    path.write_text("hola amigo\n" + words + "\n" + "buenos días\n", encoding="utf-8")
    with pytest.raises(CLIError, match=rf"{re.escape(str(path))} line 2 has \d+ subword tokens, more than"):
        _prepare(tr, SimpleNamespace(file=str(path), truncate=False), {}, tmp_path / "a")
    _prepare(tr, SimpleNamespace(file=str(path), truncate=True), {}, tmp_path / "b")
    want_sorted, want_place = _reference(tr, path, truncate=True)
    assert (tmp_path / "b" / "sorted.txt").read_text(encoding="utf-8").splitlines() == want_sorted
    assert np.fromfile(tmp_path / "b" / "order.u64", dtype=np.uint64).tolist() == want_place == [0, 2, 1]


def test_a_line_that_is_not_utf8_is_named_with_its_byte_offset(tr, tmp_path):
    path = tmp_path / "latin.es"
    path.write_bytes(b"hola\nse\xf1or\n")
    with pytest.raises(ValueError, match=r"latin\.es:2: not valid UTF-8: byte 0xf1 at byte offset 7"):
        _prepare(tr, SimpleNamespace(file=str(path), truncate=False), {}, tmp_path / "job")


def _to_1909_plain(text: str) -> str:
    """``to_1909`` as it was written first: ``re.sub`` with a call for every word."""
    text = unicodedata.normalize("NFC", text)

    def one(m):
        old = m.group(0)
        low = old.lower()
        new = spelling.TO_1909.get(low)
        if new is None or (low in spelling._LOWER_ONLY and old != low):
            return old
        return spelling._recase(new, old)

    return re.sub(r"\w+", one, text)


def test_to_1909_and_looks_english_equal_their_plain_loops():
    verses = load_gold()
    texts = [" ".join(v.source) for v in verses] + [" ".join(v.target) for v in verses]
    texts += [spelling.modernize(" ".join(v.source)) for v in verses]  # today's Spanish: words that change
    texts += [t.upper() for t in texts[:50]] + [t.title() for t in texts[:50]]
    texts += ["A a Á fue FUE Fue, é: (creó) CREAR y_a a1 ", "", "¿Quién?", "THE (and) Of. \u0130t \u212a ok"]
    changed = 0
    for t in texts:
        assert spelling.to_1909(t) == _to_1909_plain(t), t
        changed += spelling.to_1909(t) != t
        words = [w.strip(".,;:!?\"'()").lower() for w in t.split()]
        common = sum(w in COMMON for w in words)
        assert _looks_english(t) == (len(words) >= 4 and common / len(words) > 0.3), t
    assert changed > 50  # the reference has something to check
    assert sum(_looks_english(" ".join(v.target)) for v in verses) > 50
