"""A user's text files with the faults real files have: bytes that are not UTF-8, NUL bytes, lines a
megabyte long, a UTF-16 file. Every command that reads one names the file, the line and the byte
offset in one line (exit status 2); ``data prepare parallel`` drops and counts the lines it can
not use, so sentencepiece never sees them. Offsets and line numbers are checked against the files'
own bytes (``bytes.find``), not against the code's arithmetic.
"""

from __future__ import annotations

import io
import json
import random
import sys

import pytest

from attnkit.cli import main
from attnkit.data.corpus import open_corpus
from attnkit.data.parallel import ParallelDataError, decode_lines
from attnkit.tasks.translation.guided import read_links_file

WORDS = ["casa", "perro", "agua", "fuego", "tierra", "árbol", "niño", "camión", "luz", "pan", "sol", "mar"]


def _pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
        out.append((src, " ".join(w[::-1] for w in src.split())))
    return out


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnkit: error: ") and "Traceback" not in err, err
    return lines[0]


def _line_and_offset(data: bytes, needle: bytes) -> tuple[int, int]:
    """The 1-based line and the byte offset of the first ``needle`` in ``data``, by plain search."""
    offset = data.find(needle)
    return data[:offset].count(b"\n") + 1, offset


@pytest.fixture
def bad_files(tmp_path):
    """A Spanish file with a Latin-1 é on line 3, one with a NUL on line 2, and a good one."""
    good = tmp_path / "good.es"
    good.write_text("Hola.\nEl perro come.\n", encoding="utf-8")
    latin1 = tmp_path / "latin1.es"
    latin1.write_bytes("Hola.\nEl niño come.\nUn caf".encode() + b"\xe9 negro.\n")
    nul = tmp_path / "nul.es"
    nul.write_bytes(b"Hola.\nEl pe\x00rro come.\n")
    return good, latin1, nul


# ----------------------------------------------------------------------------- the commands' files


def test_translate_file_names_line_and_offset_of_bad_bytes(bad_files, capsys):
    _, latin1, nul = bad_files
    line, offset = _line_and_offset(latin1.read_bytes(), b"\xe9")
    assert main(["translate", "--file", str(latin1)]) == 2
    msg = _one_line_error(capsys)
    assert f"{latin1}:{line}: not valid UTF-8: byte 0xe9 at byte offset {offset} " in msg and "iconv" in msg
    line, offset = _line_and_offset(nul.read_bytes(), b"\x00")
    assert main(["translate", "--file", str(nul)]) == 2
    assert f"{nul}:{line}: a NUL byte at byte offset {offset} " in _one_line_error(capsys)


def test_translate_from_stdin_names_the_bad_line(monkeypatch, capsys):
    data = b"Hola.\n\xff\xfeAdi\xf3s\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["translate"]) == 2
    assert "<stdin>:2: not valid UTF-8: byte 0xff at byte offset 6 " in _one_line_error(capsys)


def test_decode_lines_strips_bom_and_crlf_and_keeps_nul_on_request():
    raw = [b"\xef\xbb\xbfuno\r\n", b"d\x00s\n", b"tres"]
    assert list(decode_lines(raw, "x", allow_nul=True)) == [(1, "uno"), (2, "d\x00s"), (3, "tres")]
    with pytest.raises(ParallelDataError, match=r"^x:2: a NUL byte at byte offset 9 \(column 2 of line 2\)"):
        list(decode_lines(raw, "x"))


def test_gzip_offsets_count_the_uncompressed_text(tmp_path):
    import gzip

    from attnkit.data.parallel import read_lines

    path = tmp_path / "a.es.gz"
    path.write_bytes(gzip.compress(b"uno\ndos\xff\n"))
    with pytest.raises(ParallelDataError, match=r"a\.es\.gz:2: .*byte offset 7 of the uncompressed text"):
        list(read_lines(path))


def test_align_files_with_bad_bytes(bad_files, capsys):
    good, latin1, nul = bad_files
    three = good.parent / "three.en"
    three.write_text("Hello.\nThe dog eats.\nA black coffee.\n")
    line, offset = _line_and_offset(latin1.read_bytes(), b"\xe9")
    assert main(["align", "--method", "eflomal", "--src", str(latin1), "--tgt", str(three)]) == 2
    assert f"{latin1}:{line}: not valid UTF-8: byte 0xe9 at byte offset {offset} " in _one_line_error(capsys)
    assert main(["align", "--method", "eflomal", "--src", str(good), "--tgt", str(nul)]) == 2
    assert f"{nul}:2: a NUL byte at byte offset 11 " in _one_line_error(capsys)


def test_evaluate_translation_src_ref_with_bad_bytes(bad_files, capsys):
    good, latin1, nul = bad_files
    assert main(["evaluate", "translation", "--src", str(nul), "--ref", str(good)]) == 2
    assert f"{nul}:2: a NUL byte" in _one_line_error(capsys)
    ref = good.parent / "three.en"
    ref.write_text("Hello.\nThe boy eats.\nA black coffee.\n")
    assert main(["evaluate", "translation", "--src", str(latin1), "--ref", str(ref)]) == 2
    assert f"{latin1}:3: not valid UTF-8" in _one_line_error(capsys)


def test_evaluate_alignment_gold_with_bad_bytes(bad_files, capsys):
    good, _, _ = bad_files
    tgt = good.parent / "good.en"
    tgt.write_text("Hello.\nThe dog eats.\n")
    gold = good.parent / "gold.txt"
    gold.write_bytes(b"0-0\n0-0 1\xa01-1\n")
    argv = ["evaluate", "alignment", "--src", str(good), "--tgt", str(tgt), "--gold", str(gold), "--no-references"]
    assert main(argv) == 2
    line, offset = _line_and_offset(gold.read_bytes(), b"\xa0")
    assert f"{gold}:{line}: not valid UTF-8: byte 0xa0 at byte offset {offset} " in _one_line_error(capsys)


def test_guided_links_file_with_a_nul_byte(tmp_path):
    links = tmp_path / "links.txt"
    links.write_bytes(b"0-0 1-1\n0-0\x00\n")
    with pytest.raises(ParallelDataError, match=rf"^{links}:2: a NUL byte at byte offset 11 "):
        read_links_file(links, 2)


# --------------------------------------------------------------------------- data prepare parallel


def _prepare(home, name, *files, extra=()):
    return main(
        [
            "--home", str(home), "data", "prepare", "parallel", name, "--src-lang", "es", "--tgt-lang", "en",
            "--train", *map(str, files), "--vocab-size", "300", "--workers", "1", *extra,
        ]
    )  # fmt: skip


def test_prepare_drops_and_counts_nul_and_overlong_lines(tmp_path, capsys):
    """A TSV of 300 good pairs with, at known lines, NUL bytes, a 300-word line, a 500,000-word line, a
    30,000-character line without a space, and an empty side: each dropped under its reason, with its line number; the
    corpus, its tokenizer and its token cache hold none of them."""
    pairs = _pairs(300)
    bad = {
        10: ("el pe\x00rro", "the dog"),
        40: ("a " * 300, "three hundred words"),
        160: ("agua " * 500_000, "water"),  # 500,000 words: caught by the characters, before splitting
        70: ("x" * 30_000, "long"),
        100: ("casa", ""),
        130: ("árbol", "tr\x00ee"),
    }
    rows = [bad.get(n, p) for n, p in enumerate(pairs, start=1)]
    tsv = tmp_path / "train.tsv"
    tsv.write_bytes("".join(f"{s}\t{t}\n" for s, t in rows).encode())
    home = tmp_path / "home"
    assert _prepare(home, "dirty", tsv) == 0
    out = capsys.readouterr().out
    assert (
        "dropped from train: 1 empty on a side (line 100); 2 with a NUL byte (lines 10, 130); 1 over 250 words " in out
    )
    assert "(line 40); 2 over 2000 characters (lines 70, 160)" in out
    meta = json.loads((home / "corpora" / "dirty" / "meta.json").read_text())
    assert meta["dropped"]["train"] == {"empty": 1, "nul": 2, "too_long": 1, "too_many_chars": 2}
    assert meta["dropped_lines"]["train"] == {
        "empty": [100],
        "nul": [10, 130],
        "too_long": [40],
        "too_many_chars": [70, 160],
    }
    corpus = open_corpus("dirty", home)
    kept = [p for split in ("train", "valid", "test") for p in corpus.pairs(split)]
    assert len(kept) == 300 - len(bad)
    assert {int(p.ref.split(":")[1]) for p in kept} == set(range(1, 301)) - set(bad)  # exactly the others
    assert all("\x00" not in p.src + p.tgt and len(p.src) < 2000 for p in kept)
    src_tok, _ = corpus.tokenizers()
    assert src_tok.decode(src_tok.encode(kept[0].src)) == kept[0].src  # the tokenizer works on what was kept


def test_prepare_max_chars_is_an_option(tmp_path, capsys):
    pairs = _pairs(300)
    src, tgt = tmp_path / "t.es", tmp_path / "t.en"
    src.write_text("".join(s + "\n" for s, _ in pairs))
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    expected = [n for n, (s, t) in enumerate(pairs, start=1) if max(len(s), len(t)) > 40]
    assert expected  # the random sentences reach 40 characters now and then
    assert _prepare(tmp_path / "home", "short", src, tgt, extra=["--max-chars", "40"]) == 0
    meta = json.loads((tmp_path / "home" / "corpora" / "short" / "meta.json").read_text())
    assert meta["max_chars"] == 40 and meta["dropped"]["train"]["too_many_chars"] == len(expected)
    assert meta["dropped_lines"]["train"]["too_many_chars"] == expected[:5]
    out = capsys.readouterr().out
    assert f"{len(expected)} over 40 characters (lines {', '.join(map(str, expected[:5]))}, ...)" in out


def test_prepare_refuses_invalid_utf8_naming_line_and_offset(tmp_path, capsys):
    pairs = _pairs(300)
    src, tgt = tmp_path / "t.es", tmp_path / "t.en"
    src.write_bytes("".join(s + "\n" for s, _ in pairs).encode("latin-1"))  # a Latin-1 file: ñ, á are one byte
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    data = src.read_bytes()
    first = min(i for i in (data.find(c.encode("latin-1")) for c in "áéíóúñ") if i >= 0)
    line = data[:first].count(b"\n") + 1
    assert _prepare(tmp_path / "home", "latin", src, tgt) == 2
    msg = _one_line_error(capsys)
    assert f"{src}:{line}: not valid UTF-8: byte 0x{data[first]:02x} at byte offset {first} " in msg
    assert "iconv -f LATIN1 -t UTF-8" in msg
    assert not (tmp_path / "home" / "corpora" / "latin").exists()


def test_prepare_of_a_utf16_file_is_refused_at_its_first_byte(tmp_path, capsys):
    """Windows' "Unicode" text: UTF-16 with a byte-order mark, whose first byte is not UTF-8."""
    pairs = _pairs(300)
    src, tgt = tmp_path / "t.es", tmp_path / "t.en"
    src.write_bytes("".join(s + "\n" for s, _ in pairs).encode("utf-16"))
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    assert _prepare(tmp_path / "home", "wide", src, tgt) == 2
    assert f"{src}:1: not valid UTF-8: byte 0xff at byte offset 0 " in _one_line_error(capsys)


def test_prepare_where_every_pair_has_a_nul_says_so(tmp_path, capsys):
    pairs = _pairs(300)
    src, tgt = tmp_path / "t.es", tmp_path / "t.en"
    src.write_text("".join(s + "\x00\n" for s, _ in pairs))
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    assert _prepare(tmp_path / "home", "nuls", src, tgt) == 2
    msg = _one_line_error(capsys)
    assert "no training pair left (dropped 300 with a NUL byte (lines 1, 2, 3, 4, 5, ...))" in msg


# --------------------------------------------------------------------------- a missing input file


def test_every_input_file_that_is_not_there_is_named_in_one_wording(tmp_path, capsys):
    """Whichever command and flag reads it, and however it is opened: `attnkit: error: PATH: no such file`."""
    from attnkit.errors import no_such_file

    here = tmp_path / "here.es"
    here.write_text("Hola.\n")
    gone = str(tmp_path / "nope.en")
    cases = [
        ["translate", "--file", gone],
        ["explain", "--file", gone],
        ["align", "--src", str(here), "--tgt", gone],
        ["align", "--src", gone, "--tgt", str(here)],
        ["align", "--method", "eflomal", "--src", str(here), "--tgt", gone],
        ["evaluate", "translation", "--src", str(here), "--ref", gone],
        ["evaluate", "alignment", "--src", str(here), "--tgt", gone, "--gold", str(here)],
        ["evaluate", "alignment", "--src", str(here), "--tgt", str(here), "--gold", gone],
        ["caption", gone],
        ["translate", "--shortlist", gone, "Hola."],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        line = _one_line_error(capsys)
        assert line == f"attnkit: error: {no_such_file(gone)}" or (
            argv[1] == "--shortlist" and line.startswith(f"attnkit: error: {no_such_file(gone)}; ")
        ), (argv, line)
