"""What the ``attnkit`` commands print for a user to read: models named as the user named them, empty
length buckets shown as no score, tables that fit a terminal, columns that stay apart."""

from __future__ import annotations

import json

import pytest

from attnkit.cli import main as cli_main

SOURCES = ["Jesús lloró.", "Y dijo Dios: Sea la luz: y fué la luz."]  # 2 and 10 words: 5 buckets hold none
REFERENCES = ["Jesus wept.", "God said, Let there be light, and there was light."]


def test_evaluate_translation_names_the_model_as_given_and_shows_empty_buckets_as_no_score(tmp_path, capsys):
    src, ref = tmp_path / "s.es", tmp_path / "r.en"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(REFERENCES) + "\n")
    argv = ["evaluate", "translation", "--model", "rnnsearch-es-en", "--src", str(src), "--ref", str(ref)]
    assert cli_main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "rnnsearch-es-en"  # not the folder it was loaded from
    by_length = report["by_length"]
    assert [b["n"] for b in by_length] == [1, 1, 0, 0, 0, 0, 0]
    assert [b["bleu"] for b in by_length][2:] == [None] * 5 and by_length[1]["bleu"] is not None
    assert cli_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rnnsearch-es-en (rnnsearch, es → en): BLEU")
    bleu_row = lines[3].split()
    assert bleu_row[0] == "BLEU" and bleu_row[3:] == ["–"] * 5 and bleu_row[2] == f"{by_length[1]['bleu']:.1f}"


def test_the_length_plot_marks_empty_buckets_and_draws_no_point_for_them():
    from attnkit.viz.curves import bleu_by_length_figure

    rows = [{"bucket": b, "n": n, "bleu": s} for b, n, s in [("0-10", 2, 30.0), ("10-20", 1, 12.5), ("20+", 0, None)]]
    fig = bleu_by_length_figure([{"model": "m", "model_type": "transformer", "bleu": 25.0, "by_length": rows}])
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0, 1] and list(line.get_ydata()) == [30.0, 12.5]
    marks = [t for t in ax.texts if t.get_text() == "–"]
    assert len(marks) == 1 and marks[0].get_position()[0] == 2


@pytest.mark.skipif(
    not __import__("pathlib").Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="dataset-fashion-mnist not installed",
)
def test_evaluate_captioning_names_the_model_as_given(tmp_path, capsys):
    argv = ["--home", str(tmp_path), "evaluate", "captioning", "--model", "captioner-hard", "--limit", "2"]
    assert cli_main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "captioner-hard"
