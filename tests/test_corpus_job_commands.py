"""``attnkit align`` and ``attnkit translate --file`` as corpus jobs (issue 58): the output of two
processes (``--processes 2``: ranks forked from the command, or torchrun's) and of a resumed ``--job-dir`` run, byte for byte
the one-process output of the same command; the flags a split job refuses, one line each."""

from __future__ import annotations

import contextlib
import inspect
import io
from pathlib import Path

import pytest

from attnkit.alignment.gold import load_gold
from attnkit.cli import main as cli_main
from attnkit.cli.corpus_job import without_processes
from attnkit.cli.translate_job import BATCH
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import ModelAligner


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """30 line-parallel Spanish-English pairs of the built-in gold set (one pair with an empty source)."""
    folder = tmp_path_factory.mktemp("pairs")
    verses = load_gold()[:30]
    src = [" ".join(v.source) for v in verses]
    src[7] = ""
    (folder / "a.es").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "a.en").write_text("\n".join(" ".join(v.target) for v in verses) + "\n", encoding="utf-8")
    return folder / "a.es", folder / "a.en"


def _align_argv(pairs, out):
    # --batch-size 2: the one-process run sorts and batches within buckets of 16 pairs, so parts of 16
    return ["align", "--src", str(pairs[0]), "--tgt", str(pairs[1]), "--batch-size", "2", "--output", str(out)]


@pytest.fixture(scope="module")
def align_reference(pairs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ref.align"
    assert cli_main([*_align_argv(pairs, out), "--no-progress"]) == 0
    return out.read_bytes()


def test_align_on_two_processes_writes_the_one_process_bytes(pairs, align_reference, tmp_path, capfd):
    out, job = tmp_path / "two.align", tmp_path / "job"
    argv = [*_align_argv(pairs, out), "--processes", "2", "--part-lines", "10", "--job-dir", str(job)]
    assert cli_main(argv) == 0
    err = capfd.readouterr().err
    assert out.read_bytes() == align_reference
    assert len(align_reference.split(b"\n")) == 31 and align_reference.split(b"\n")[7] == b""
    assert "parts of 16 pairs over 2 processes" in err  # 10 rounded up to a bucket; 2 parts, one a rank
    assert "30/30" in err  # rank 0's progress over both ranks
    assert not job.exists()  # the job's own files are deleted once the output is written


def test_align_under_torchruns_launcher_writes_the_one_process_bytes(pairs, align_reference, tmp_path, monkeypatch):
    """``ATTNKIT_LAUNCHER=torchrun``: the launcher a CUDA build uses (ranks as new interpreters), the
    same bytes as the forked ranks and one process; without ``--part-lines`` the parts are sized by the
    input (30 pairs: one bucket of 16 a part, so each rank has one)."""
    monkeypatch.setenv("ATTNKIT_LAUNCHER", "torchrun")
    out = tmp_path / "torchrun.align"
    assert cli_main([*_align_argv(pairs, out), "--processes", "2", "--no-progress"]) == 0
    assert out.read_bytes() == align_reference


def test_align_resumes_after_a_failed_part(pairs, align_reference, tmp_path, monkeypatch, capsys):
    out, job = tmp_path / "resumed.align", tmp_path / "job"
    argv = [*_align_argv(pairs, out), "--job-dir", str(job), "--part-lines", "16", "--no-progress"]
    real = ModelAligner.align
    seen = []

    def failing(self, pairs_, **kw):
        pairs_ = list(pairs_)
        seen.append(len(pairs_))
        if len(seen) == 2:
            raise RuntimeError("injected")
        return real(self, pairs_, **kw)

    monkeypatch.setattr(ModelAligner, "align", failing)
    assert cli_main(argv) == 2
    assert "part 2 (lines 17-30) failed: injected" in capsys.readouterr().err
    assert (job / "part-000000.out").is_file() and not (job / "part-000001.out").exists()
    assert not out.exists()

    # the same folder with other options is refused, not mixed
    assert cli_main([*argv, "--threshold", "0.5"]) == 2
    assert "holds the parts of a different job" in capsys.readouterr().err

    seen.clear()
    monkeypatch.setattr(ModelAligner, "align", lambda self, p, **kw: (seen.append(len(p)), real(self, p, **kw))[1])
    assert cli_main(argv) == 0
    assert seen == [14]  # only the unfinished part was redone
    assert out.read_bytes() == align_reference
    assert not job.exists()


@pytest.fixture(scope="module")
def translate_case(tmp_path_factory):
    """70 short lines (greedy decoding of long verses is most of a test's time), a blank one and one no
    model can read (skipped, named on stderr, exit status 1) among them, and one process's output: it
    translates the 68 sentences in length-sorted batches of 64, so a job has parts of 64 and 4."""
    lines = [" ".join(v.source[:4]) for v in load_gold()[:70]]
    lines[3], lines[20] = "", "\u200b\u200b"
    src = tmp_path_factory.mktemp("translate") / "in.es"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--file", str(src), "--beam", "1", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(argv) == 1
    assert out.getvalue().count("\n") == 68
    return argv, out.getvalue()


def test_translate_file_on_two_processes_prints_the_one_process_bytes(translate_case, tmp_path, capfd):
    argv, reference = translate_case
    assert cli_main([*argv, "--processes", "2", "--part-lines", "10", "--job-dir", str(tmp_path / "j")]) == 1
    two = capfd.readouterr()
    assert two.out == reference  # the scores too, to the last digit printed
    assert "parts of 64 sentences over 2 processes" in two.err
    assert f"{argv[2]} line 21" in two.err and "68/68" in two.err
    assert not (tmp_path / "j").exists()


def test_translate_file_resumes_after_a_failed_part(translate_case, tmp_path, monkeypatch, capsys):
    argv, reference = translate_case
    argv = [*argv, "--job-dir", str(tmp_path / "j"), "--part-lines", "64", "--no-progress"]
    real = Translator.translate
    assert inspect.signature(real).parameters["batch_size"].default == BATCH  # the parts hold whole batches
    calls = []

    def failing(self, sentences, **kw):
        calls.append(len(sentences))
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(self, sentences, **kw)

    monkeypatch.setattr(Translator, "translate", failing)
    assert cli_main(argv) == 2
    assert "part 2 (lines 65-68) failed: injected" in capsys.readouterr().err
    calls.clear()
    monkeypatch.setattr(Translator, "translate", lambda self, s, **kw: (calls.append(len(s)), real(self, s, **kw))[1])
    assert cli_main(argv) == 1
    assert capsys.readouterr().out == reference
    assert calls == [4]  # the finished part of 64 was kept; the pass's sorted file was not rewritten


def test_without_processes_drops_the_flag_in_each_spelling():
    assert without_processes(["align", "--processes", "2", "--src", "a"]) == ["align", "--src", "a"]
    assert without_processes(["align", "--processes=3", "--proc", "2", "--pro=2", "x"]) == ["align", "x"]
    assert without_processes(["translate", "--plot", "p.png", "--part-lines", "4"]) == [
        "translate",
        "--plot",
        "p.png",
        "--part-lines",
        "4",
    ]


def test_flags_a_split_job_refuses_are_one_line(pairs, tmp_path, capsys):
    f = str(pairs[0])
    cases = [
        (["translate", "hola", "--file", f, "--processes", "2"], "translate a --file only"),
        (["translate", "--file", f, "--processes", "2", "--plot", "x.png"], "--plot needs every sentence"),
        (["translate", "--file", f, "--job-dir", str(tmp_path), "--report-time"], "--report-time needs every"),
        (["translate", "--file", f, "--processes", "1"], "processes must be an int in [2, 4096]"),
        (["align", "--src", f, "--tgt", f, "--method", "eflomal", "--processes", "2"], "cannot be split"),
        (["evaluate", "translation", "--engine", "ctranslate2", "--processes", "2"], "with the PyTorch engine"),
    ]
    for argv, message in cases:
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_translations_on_two_ranks_are_the_one_process_translations(translate_case):
    """``evaluate translation`` under torchrun: each rank decodes every other batch of the one-process
    run; the gathered list equals one ``translate`` call's (run here as rank 1 then rank 0, the gather
    played by hand), so the scores computed from it are the one-process scores."""
    from attnkit.tasks.translation.split_translation import one_process_batches, translations_on_ranks

    tr = Translator.load("transformer-es-en")
    sources = [line for line in Path(translate_case[0][2]).read_text(encoding="utf-8").splitlines() if line.strip()]
    sources = [s for s in sources if s != "\u200b\u200b"][:20]  # batches of 8: 8, 8 and 4 sentences
    reference = [r.translation for r in tr.translate(sources, beam_size=1, truncate=True, batch_size=8)]
    assert [len(b) for b in one_process_batches(tr, sources, truncate=True, batch_size=8)] == [8, 8, 4]
    sent = {}

    class Sent(Exception):
        pass

    def gather_of_rank1(mine):
        sent[1] = mine
        raise Sent  # rank 1's own list is incomplete without rank 0's: only what it sends is checked

    with pytest.raises(Sent):
        translations_on_ranks(
            tr, sources, rank=1, world=2, gather=gather_of_rank1, beam_size=1, truncate=True, batch_size=8
        )
    assert len(sent[1]) == 8  # rank 1 decoded the second batch only
    got = translations_on_ranks(
        tr, sources, rank=0, world=2, gather=lambda mine: [mine, sent[1]], beam_size=1, truncate=True, batch_size=8
    )
    assert got == reference


def test_evaluate_alignment_on_two_ranks_is_the_one_process_table(tmp_path):
    """``evaluate alignment`` under torchrun: each rank reads every other run of 8 × batch_size pairs,
    the per-pair AER counts are gathered, and rank 0's table (AER, intervals, paired differences) is the
    one-process table (run here as rank 1 then rank 0, the gather played by hand)."""
    from attnkit.tasks.translation.alignment_evaluate import evaluate_alignment

    verses = load_gold()[:16]
    files = [tmp_path / name for name in ("g.es", "g.en", "g.links")]
    files[0].write_text("".join(" ".join(v.source) + "\n" for v in verses), encoding="utf-8")
    files[1].write_text("".join(" ".join(v.target) + "\n" for v in verses), encoding="utf-8")
    files[2].write_text(
        "".join(
            " ".join([f"{i}-{j}" for i, j in sorted(v.sure)] + [f"{i}p{j}" for i, j in sorted(v.possible - v.sure)])
            + "\n"
            for v in verses
        ),
        encoding="utf-8",
    )
    kw = dict(gold=tuple(files), methods=("guided", "attention"), samples=50, references=False, batch_size=1)
    reference = evaluate_alignment("transformer-es-en", **kw)  # units of 8 pairs: 2, one a rank
    sent = {}

    class Sent(Exception):
        pass

    def gather_of_rank1(mine):
        sent[1] = mine
        raise Sent

    with pytest.raises(Sent):
        evaluate_alignment("transformer-es-en", split=(1, 2, gather_of_rank1), **kw)
    assert [start for start, _ in sent[1]] == [8]
    table = evaluate_alignment("transformer-es-en", split=(0, 2, lambda mine: [mine, sent[1]]), **kw)
    assert table == reference
    assert reference["scored_verses"] == 16 and reference["rows"][1]["vs_first"]


def test_explain_file_in_parts_is_the_one_process_bytes_and_each_line_its_own_explain(pairs, tmp_path, capsys):
    """``explain --file``: one JSON object a line; run in parts (``--job-dir``, as each rank of a split job
    runs them) it writes the one-process bytes; a line equals ``explain --json`` of that line alone (less
    its timing), forced to the target file's line; an empty line is an error line and the job goes on."""
    import json

    src, tgt = (tmp_path / "s.es", tmp_path / "t.en")
    src.write_text("\n".join(pairs[0].read_text(encoding="utf-8").splitlines()[5:11]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(pairs[1].read_text(encoding="utf-8").splitlines()[5:11]) + "\n", encoding="utf-8")
    one, split = tmp_path / "one.jsonl", tmp_path / "split.jsonl"
    argv = ["explain", "--file", str(src), "--target-file", str(tgt), "--method", "attention"]
    assert cli_main([*argv, "--output", str(one)]) == 0
    assert cli_main([*argv, "--output", str(split), "--job-dir", str(tmp_path / "job"), "--part-lines", "2"]) == 0
    assert split.read_bytes() == one.read_bytes()
    own = tmp_path / "own.jsonl"  # no target file: the model's own translations, in parts as well
    argv_own = ["explain", "--file", str(src), "--method", "attention", "--output", str(own)]
    assert cli_main([*argv_own, "--job-dir", str(tmp_path / "job2"), "--part-lines", "4"]) == 0
    assert cli_main([*argv_own[:-1], str(tmp_path / "own1.jsonl")]) == 0
    assert own.read_bytes() == (tmp_path / "own1.jsonl").read_bytes()
    rows = [json.loads(line) for line in one.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6] and rows[2] == {"line": 3, "error": "the line is empty"}
    source, target = src.read_text(encoding="utf-8").splitlines()[0], tgt.read_text(encoding="utf-8").splitlines()[0]
    capsys.readouterr()
    assert cli_main(["explain", source, "--target", target, "--method", "attention", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    alone.pop("seconds"), alone.pop("model")
    assert rows[0] == {"line": 1, **alone}
    assert cli_main(["explain", "--file", str(src), "--target", "x"]) == 2
    assert "--file explains the file's lines" in capsys.readouterr().err
    assert cli_main(["explain", "Hola.", "--output", str(tmp_path / "o")]) == 2
    assert "--output goes with --file" in capsys.readouterr().err


@pytest.fixture(scope="module")
def explanations_case(tmp_path_factory):
    """``evaluate explanations`` of a tiny random translator (d_model 16, one layer a side) on the first 3 scored
    gold verses (the second is 56 × 64 words: most of the time), two methods, the sanity check on 2 verses: the
    command and one process's report (``--json``)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import saved_tiny_transformer

    model = saved_tiny_transformer(
        tmp_path_factory.mktemp("explain") / "tiny",
        max_len=256,
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
    )
    argv = ["evaluate", "explanations", "--model", str(model), "--limit", "3", "--sanity-verses", "2"]
    argv += ["--method", "attention", "--method", "alti_plus", "--json", "--no-progress"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(argv) == 0
    return argv, out.getvalue()


def _timing_aside(report: str) -> str:
    """A printed report with its one measured value (milliseconds per verse) blanked: the rest is computed."""
    import re

    return re.sub(r'"ms_per_sentence": [0-9.]+', '"ms_per_sentence": 0', report)


def test_evaluate_explanations_resumed_on_two_processes_prints_the_one_process_report(
    explanations_case, tmp_path, monkeypatch, capfd
):
    """A one-process ``--job-dir`` run that fails on its second verse keeps its first; the same command on two
    processes scores the other two (one a rank) and reuses the first verse's record as written (its seconds,
    set to 1 s here, show in the milliseconds); every computed number is the one-process report's."""
    import json

    from attnkit.attribution import explanation_verses

    argv, reference = explanations_case
    job, out = tmp_path / "job", tmp_path / "report.json"
    real = explanation_verses.score_verse

    def failing(run, k):
        if k == 1:
            raise RuntimeError("injected")
        return real(run, k)

    monkeypatch.setattr(explanation_verses, "score_verse", failing)
    assert cli_main([*argv, "--job-dir", str(job)]) == 2
    assert "part 2 (lines 2-2) failed: injected" in capfd.readouterr().err
    assert [p.name for p in job.glob("part-*.out")] == ["part-000000.out"]
    record = json.loads((job / "part-000000.out").read_text())
    for entry in record["methods"].values():
        entry["seconds"] = 1.0
    (job / "part-000000.out").write_text(json.dumps(record) + "\n")
    monkeypatch.undo()

    assert cli_main([*argv, "--processes", "2", "--job-dir", str(job), "--output", str(out)]) == 0
    two = capfd.readouterr()
    assert _timing_aside(two.out) == _timing_aside(reference)  # every score to the last digit printed
    report = json.loads(two.out)
    assert report["verses"] == 3 and list(report["methods"]) == ["attention", "alti_plus"]
    assert all(len(r["sanity"]["by_stage"]) > 1 for r in report["methods"].values())
    assert all(r["ms_per_sentence"] >= 1000 / 3 for r in report["methods"].values())  # the first verse's record, reused
    assert json.loads(out.read_text()) == report
    assert "3 gold verses, parts of 1 verses over 2 processes" in two.err
    assert not job.exists()  # the job's own files are deleted once the report is made
    assert cli_main([*argv, "--processes", "2", "--resume", "--output", str(out)]) == 2
    err = capfd.readouterr().err
    assert "a split run resumes from its parts" in err and err.count("\n") == 1
