"""The user's own parallel corpus: reading the files, every bad input's one-line error, preparing
(atomic, held-out split, drops counted, test duplicates reported), the token cache, and the CLI."""

import gzip
import json
import random
import re
import shutil

import numpy as np
import pytest

from attnkit.cli import main as cli_main
from attnkit.data.corpus import CorpusError, UnknownCorpusError, known_corpora, open_corpus, prepare_parallel
from attnkit.data.parallel import ParallelDataError, count_lines, read_lines, read_parallel
from attnkit.data.token_cache import TokenArray, build_token_cache
from attnkit.data.tokenizer import Tokenizer
from attnkit.output_folder import OutputFolderError

WORDS = [
    "".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyzäöüéñ") for _ in range(3 + i % 5)) for i in range(150)
]


def sentence(rng: random.Random, n: int | None = None) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n or rng.randint(3, 9))).capitalize() + "."


def synthetic_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = sentence(rng)
        out.append((src, " ".join(w[::-1] for w in src.split())))  # a "translation": each word reversed
    return out


def write_aligned(folder, stem, pairs, src_lang="xx", tgt_lang="yy"):
    s, t = folder / f"{stem}.{src_lang}", folder / f"{stem}.{tgt_lang}"
    s.write_text("".join(p[0] + "\n" for p in pairs), encoding="utf-8")
    t.write_text("".join(p[1] + "\n" for p in pairs), encoding="utf-8")
    return s, t


# ------------------------------------------------------------------------------------------- reading


def test_reader_handles_bom_crlf_gzip_and_a_missing_final_newline(tmp_path):
    a = tmp_path / "a.txt"
    a.write_bytes("\ufeffÉl vino.\r\nY se fue.\r\nFin".encode())
    assert list(read_lines(a)) == [(1, "Él vino."), (2, "Y se fue."), (3, "Fin")]
    assert count_lines(a) == 3
    g = tmp_path / "b.txt.gz"
    with gzip.open(g, "wb") as f:
        f.write("\ufeffHe came.\nAnd left.\nEnd\n".encode())
    assert count_lines(g) == 3
    assert list(read_parallel((a, g))) == [
        (1, "Él vino.", "He came."),
        (2, "Y se fue.", "And left."),
        (3, "Fin", "End"),
    ]
    tsv = tmp_path / "p.tsv"
    tsv.write_bytes("\ufeffuno\tone\r\n\r\ndos\ttwo\n".encode())
    assert list(read_parallel((tsv,))) == [(1, "uno", "one"), (2, "", ""), (3, "dos", "two")]


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    a, b = tmp_path / "x.de", tmp_path / "x.en"
    a.write_text("1\n2\n3\n")
    b.write_text("1\n2\n")
    with pytest.raises(ParallelDataError) as e:
        read_parallel((a, b))
    msg = str(e.value)
    assert f"{a} has 3 lines" in msg and f"{b} has 2" in msg and "\n" not in msg


def test_invalid_utf8_names_file_and_line(tmp_path):
    a, b = tmp_path / "x.de", tmp_path / "x.en"
    a.write_bytes(b"gut\nsch\xf6n\n")
    b.write_text("good\nbeautiful\n")
    # "gut\n" is 4 bytes, "sch" 3 more: the bad byte is at offset 7 of the file, column 4 of line 2
    with pytest.raises(
        ParallelDataError, match=rf"^{a}:2: not valid UTF-8: byte 0xf6 at byte offset 7 \(column 4 of line 2\)"
    ):
        list(read_parallel((a, b)))


def test_missing_and_empty_files(tmp_path):
    a, b = tmp_path / "x.de", tmp_path / "x.en"
    b.write_text("good\n")
    with pytest.raises(ParallelDataError, match=rf"^{a}: no such file$"):
        read_parallel((a, b))
    a.write_text("")
    with pytest.raises(ParallelDataError, match=rf"^{a}: the file is empty$"):
        read_parallel((a, b))
    t = tmp_path / "e.tsv"
    t.write_bytes(b"")
    with pytest.raises(ParallelDataError, match="the file is empty"):
        read_parallel((t,))


@pytest.mark.parametrize("line, n", [("only one column", 1), ("a\tb\tc", 3)])
def test_tsv_line_without_two_columns_names_file_and_line(tmp_path, line, n):
    t = tmp_path / "p.tsv"
    t.write_text(f"uno\tone\n{line}\n")
    with pytest.raises(ParallelDataError, match=rf"^{t}:2: expected 2 tab-separated columns .*got {n}$"):
        list(read_parallel((t,)))


# ------------------------------------------------------------------------------------------ preparing


def test_prepare_counts_drops_reports_test_duplicates_and_holds_out_deterministically(tmp_path):
    home = tmp_path / "home"
    pairs = synthetic_pairs(600)
    test = pairs[:20]
    train = pairs[20:] + test[:3]  # three test sentences also in the training data
    train += [("", "empty source"), ("empty target", "  "), (" ".join(["w"] * 30), "too long")]
    src, tgt = write_aligned(tmp_path, "train", train)
    ts, tt = write_aligned(tmp_path, "test", test)
    c = prepare_parallel(
        "toy", src_lang="xx", tgt_lang="yy", train=(src, tgt), test=(ts, tt), vocab_size=400, max_words=20, home=home
    )
    m = c.meta
    assert m["dropped"]["train"] == {"empty": 2, "nul": 0, "too_long": 1, "too_many_chars": 0}
    n = len(pairs) - 20 + 3
    assert m["dropped_lines"]["train"] == {
        "empty": [n + 1, n + 2],
        "nul": [],
        "too_long": [n + 3],
        "too_many_chars": [],
    }
    assert m["test_sources_in_train"] == 3
    assert m["splits"]["test"] == 20 and m["splits"]["train"] + m["splits"]["valid"] == len(train) - 3
    assert m["heldout"]["from_train"] == ["valid"] and m["splits"]["valid"] > 0
    assert (c.src_lang, c.tgt_lang) == ("xx", "yy") and known_corpora(home) == ["bible", "toy"]
    # the held-out split is a function of the source sentence: the same on a second prepare, and no
    # source sentence is in two splits
    c2 = prepare_parallel("toy2", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    c3 = prepare_parallel("toy3", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    for split in ("train", "valid", "test"):
        assert [p.src for p in c2.pairs(split)] == [p.src for p in c3.pairs(split)]
    by_split = {s: {p.src for p in c2.pairs(s)} for s in ("train", "valid", "test")}
    assert not (by_split["train"] & by_split["test"]) and not (by_split["train"] & by_split["valid"])
    assert c2.meta["test_sources_in_train"] == 0 and by_split["test"]
    # refs point back at the input file's line
    first = c.pairs("train", limit=1)[0]
    assert first.ref == "train.xx:1" and (first.src, first.tgt) == train[0]


def test_prepare_tsv_gz_and_the_token_cache_equals_the_tokenizer(tmp_path):
    home = tmp_path / "home"
    pairs = synthetic_pairs(400, seed=1)
    t = tmp_path / "pairs.tsv.gz"
    with gzip.open(t, "wt", encoding="utf-8") as f:
        f.write("".join(f"{a}\t{b}\r\n" for a, b in pairs))
    c = prepare_parallel("tsv", src_lang="xx", tgt_lang="yy", train=(t,), vocab_size=400, home=home, workers=2)
    src_tok, tgt_tok = c.tokenizers()
    assert src_tok is tgt_tok and src_tok.vocab_size == 400
    for split in ("train", "valid", "test"):
        ps = c.pairs(split)
        src, tgt = c.token_cache(split)
        assert len(src) == len(tgt) == len(ps) == c.split_size(split)
        for i, p in enumerate(ps):
            assert src[i].tolist() == src_tok.encode(p.src) and tgt[i].tolist() == tgt_tok.encode(p.tgt)
    # the cache is a cache: removed (not copied with the corpus), it is rebuilt the same, byte for byte
    before = {f.name: f.read_bytes() for f in (c.path / "cache").iterdir()}
    shutil.rmtree(c.path / "cache")
    again = open_corpus(c.name, home=home)
    for split in ("train", "valid", "test"):
        again.token_cache(split)
    assert {f.name: f.read_bytes() for f in (c.path / "cache").iterdir()} == before


def test_token_cache_is_the_same_whatever_the_number_of_workers(tmp_path):
    pairs = synthetic_pairs(300, seed=2)
    tok = Tokenizer.train([p for pair in pairs for p in pair], vocab_size=400)
    out = {}
    for w in (1, 2):
        n = build_token_cache(
            iter(pairs), tmp_path / f"w{w}", tok.to_bytes(), tok.to_bytes(), 400, workers=w, chunk_lines=7
        )
        assert n == 300
        out[w] = [(tmp_path / f"w{w}.{s}").read_bytes() for s in ("src.bin", "src.idx", "tgt.bin", "tgt.idx")]
    assert out[1] == out[2]
    arr = TokenArray(tmp_path / "w2.tgt", "uint16")
    assert np.array_equal(arr.lengths, [len(tok.encode(p[1])) for p in pairs])


def test_separate_vocabularies(tmp_path):
    pairs = synthetic_pairs(400, seed=3)
    src, tgt = write_aligned(tmp_path, "train", pairs)
    c = prepare_parallel(
        "sep", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, separate_vocab=True, home=tmp_path
    )
    s, t = c.tokenizers()
    assert s is not t and s.to_bytes() != t.to_bytes()
    sc, tc = c.token_cache("train")
    p = c.pairs("train", limit=1)[0]
    assert sc[0].tolist() == s.encode(p.src) and tc[0].tolist() == t.encode(p.tgt)


def test_an_interrupted_prepare_leaves_nothing_and_keeps_the_old_corpus(tmp_path, monkeypatch):
    home = tmp_path / "home"
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300, seed=4))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnkit.data.token_cache.build_token_cache", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    assert list((home / "corpora").iterdir()) == []  # no half corpus, no temp folder
    with pytest.raises(UnknownCorpusError, match=r"unknown corpus 'x' \(known: bible\)"):
        open_corpus("x", home)
    monkeypatch.undo()
    good = prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    monkeypatch.setattr("attnkit.data.token_cache.build_token_cache", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home, force=True)
    assert [p.name for p in (home / "corpora").iterdir()] == ["x"]
    assert open_corpus("x", home).meta == good.meta  # the corpus prepared before is intact


def test_a_dead_prepares_temporary_folder_is_never_read_and_is_cleaned(tmp_path):
    home = tmp_path / "home"
    stale = home / "corpora" / ".x.partial-999999999"
    stale.mkdir(parents=True)
    (stale / "meta.json").write_text("{}")
    assert known_corpora(home) == ["bible"]
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300, seed=5))
    prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    assert sorted(p.name for p in (home / "corpora").iterdir()) == ["x"]


def test_prepare_refuses_bad_arguments(tmp_path):
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(50))
    kw = dict(src_lang="xx", tgt_lang="yy", train=(src, tgt), home=tmp_path)
    with pytest.raises(CorpusError, match="corpus name 'bible'"):
        prepare_parallel("bible", **kw)
    with pytest.raises(CorpusError, match=r"corpus name '\.\./up'"):
        prepare_parallel("../up", **kw)
    with pytest.raises(CorpusError, match="--src-lang 'Spanish!'"):
        prepare_parallel("a", **{**kw, "src_lang": "Spanish!"})
    with pytest.raises(CorpusError, match="--vocab-size must be an int >= 300"):
        prepare_parallel("a", vocab_size=10, **kw)
    with pytest.raises(CorpusError, match=r"--vocab-size 8000: .* at most (\d+): give --vocab-size \d+ or less") as e:
        prepare_parallel("a", vocab_size=8000, **kw)
    assert "INTERNAL" not in str(e.value)  # sentencepiece's own words, translated
    assert not any(p.name.startswith(".") for p in (tmp_path / "corpora").iterdir())
    most = int(re.search(r"at most (\d+)", str(e.value)).group(1))
    assert prepare_parallel("fits", vocab_size=most, **kw).vocab_size == most  # the size it names does train
    with pytest.raises(CorpusError, match="no training pair left"):
        e = tmp_path / "e.tsv"
        e.write_text("\t\n \tx\n")
        prepare_parallel("a", **{**kw, "train": (e,)})


def test_open_corpus_of_the_bible_and_vocab_size_of_a_prepared_one(tmp_path):
    b = open_corpus("bible", tmp_path)
    assert (b.name, b.src_lang, b.tgt_lang, b.path, b.token_cache("train")) == ("bible", "es", "en", None, None)
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300))
    prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=tmp_path)
    with pytest.raises(CorpusError, match="prepared with a vocabulary of 400, not 8000"):
        open_corpus("x", tmp_path).tokenizers(8000)


# ------------------------------------------------------------------------------------------------ CLI


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnkit: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_cli_prepare_and_every_bad_input_is_one_line(tmp_path, capsys):
    home = str(tmp_path / "home")
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300))
    base = ["--home", home, "data", "prepare", "parallel"]
    assert (
        cli_main(
            [*base, "cli", "--src-lang", "xx", "--tgt-lang", "yy", "--train", str(src), str(tgt), "--vocab-size", "400"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "corpus cli (xx → yy)" in out and "attnkit train translation --data cli" in out
    assert json.loads((tmp_path / "home" / "corpora" / "cli" / "meta.json").read_text())["src_lang"] == "xx"

    short = tmp_path / "short.yy"
    short.write_text("one\n")
    bad_utf8 = tmp_path / "bad.xx"
    bad_utf8.write_bytes(b"ok\n\xff\n" + b"x\n" * 298)
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("a\tb\nc\n")
    empty = tmp_path / "empty.xx"
    empty.write_text("")
    cases = [
        (["--train", str(src), str(short)], f"{src} has 300 lines but {short} has 1"),
        (["--train", str(bad_utf8), str(tgt)], f"{bad_utf8}:2: not valid UTF-8"),
        (["--train", str(tmp_path / "nope.xx"), str(tgt)], f"{tmp_path / 'nope.xx'}: no such file"),
        (["--train", str(empty), str(tgt)], f"{empty}: the file is empty"),
        (["--train", str(tsv)], f"{tsv}:2: expected 2 tab-separated columns"),
        (["--train", str(src), str(tgt), str(tgt)], "--train: give two aligned files (SRC TGT) or one TSV file, got 3"),
    ]
    for extra, expected in cases:
        assert cli_main([*base, "c2", "--src-lang", "xx", "--tgt-lang", "yy", *extra]) == 2
        assert expected in _one_line_error(capsys)
    assert cli_main([*base, "--src-lang", "xx", "--tgt-lang", "yy", "--train", str(src), str(tgt)]) == 2
    assert "give the corpus a NAME" in _one_line_error(capsys)
    assert cli_main([*base, "c3", "--tgt-lang", "yy", "--train", str(src), str(tgt)]) == 2
    assert "--src-lang is required" in _one_line_error(capsys)
    assert cli_main([*base, "cli", "--src-lang", "xx", "--tgt-lang", "yy", "--train", str(src), str(tgt)]) == 2
    assert "already prepared" in _one_line_error(capsys)
    assert known_corpora(home) == ["bible", "cli"]


def test_cli_unknown_data_lists_the_known_corpora(tmp_path, capsys):
    home = tmp_path / "home"
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300))
    prepare_parallel("mine", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home)
    code = cli_main(["--home", str(home), "train", "translation", "--data", "nope", "--out-dir", str(tmp_path / "r")])
    assert code == 2
    assert "unknown corpus 'nope' (known: bible, mine)" in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_prepare_force_replaces_only_what_a_prepare_wrote(tmp_path, capsys):
    """A folder of the corpus's name that no prepare wrote, or a prepared corpus holding a file of the
    user's, is refused with or without --force, and every byte of it is kept (issue 54)."""
    home = tmp_path / "home"
    src, tgt = write_aligned(tmp_path, "train", synthetic_pairs(300, seed=6))
    mine = home / "corpora" / "x"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "notes.txt").write_text("mine")
    (mine / "x.tmp-123").write_text("mine too")
    for force in (False, True):
        with pytest.raises(OutputFolderError, match=r"is not a folder attnkit wrote .*sub/notes\.txt"):
            prepare_parallel(
                "x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home, force=force
            )
        assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == ["sub", "sub/notes.txt", "x.tmp-123"]
        assert (mine / "sub" / "notes.txt").read_text() == "mine"
    home2 = tmp_path / "home2"
    good = prepare_parallel("x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home2)
    assert "meta.json" in good.meta["written"] and "train.tsv" in good.meta["written"]
    again = prepare_parallel(
        "x", src_lang="xx", tgt_lang="yy", train=(src, tgt), vocab_size=400, home=home2, force=True
    )
    assert again.meta["splits"] == good.meta["splits"]  # its own corpus: replaced
    (again.path / "my-notes.txt").write_text("mine")
    argv = ["data", "prepare", "parallel", "x", "--src-lang", "xx", "--tgt-lang", "yy", "--train", str(src), str(tgt)]
    assert cli_main(["--home", str(home2), *argv, "--vocab-size", "400", "--force"]) == 2
    err = capsys.readouterr().err
    assert "my-notes.txt" in err and "nothing was removed" in err and "Traceback" not in err
    assert (again.path / "my-notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (home2 / "corpora").iterdir()) == ["x"]
