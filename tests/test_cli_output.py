"""What the ``attnkit`` commands print for a user to read: models named as the user named them, empty
length buckets shown as no score, tables that fit a terminal, columns that stay apart."""

from __future__ import annotations

import json
from pathlib import Path

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


needs_fashion_mnist = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="dataset-fashion-mnist not installed"
)


@pytest.fixture(scope="module")
def scenes_home(tmp_path_factory):
    """An ATTNKIT_HOME whose scenes the first command that needs them prepares (the default set, ~6 s)."""
    return tmp_path_factory.mktemp("scenes_home")


@needs_fashion_mnist
def test_evaluate_captioning_names_the_model_as_given(scenes_home, capsys):
    argv = ["--home", str(scenes_home), "evaluate", "captioning", "--model", "captioner-hard", "--limit", "2"]
    assert cli_main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "captioner-hard"


@needs_fashion_mnist
def test_data_scene_writes_a_test_scene_that_caption_reads_back(scenes_home, tmp_path, capsys):
    import numpy as np
    from PIL import Image

    from attnkit.data.datasets.scenes import load_scenes
    from attnkit.tasks.captioning import load_image_file

    out = tmp_path / "scene.png"
    assert cli_main(["--home", str(scenes_home), "data", "scene", "3", "--out", str(out)]) == 0
    scene = load_scenes("test", scenes_home)[3]  # the scenes evaluate captioning scores
    assert capsys.readouterr().out.strip() == f'wrote {out}: test scene 3, "{scene["caption"]}"'
    pixels = np.asarray(Image.open(out))
    assert pixels.shape == (64, 64) and np.array_equal(pixels, scene["image"][0].mul(255).round().byte().numpy())
    assert load_image_file(out, 64).equal(scene["image"])  # caption reads exactly the scene
    assert cli_main(["caption", "--beam", "1", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(out)
    # a scene past the split's end: one line naming the range
    assert cli_main(["--home", str(scenes_home), "data", "scene", "1000", "--out", str(out)]) == 2
    assert "N: the test split has 1000 scenes: give 0 to 999, got 1000" in capsys.readouterr().err


def test_evaluate_alignment_all_heads_fits_100_columns_and_names_the_guided_head(tmp_path, capsys):
    from attnkit.alignment.gold import DEV_VERSES, load_gold

    verses = load_gold()[DEV_VERSES - 2 : DEV_VERSES + 6]
    (tmp_path / "s").write_text("".join(" ".join(v.source) + "\n" for v in verses))
    (tmp_path / "t").write_text("".join(" ".join(v.target) + "\n" for v in verses))
    (tmp_path / "g").write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(v.sure)) + "\n" for v in verses))
    argv = ["evaluate", "alignment", "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")]
    argv += ["--gold", str(tmp_path / "g"), "--dev", "2", "--all-heads", "--samples", "20"]
    assert cli_main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["guided_head"] == {"layer": 2, "head": 1}  # transformer-es-en's config: alignment layer 2, head 1
    first, *rest = r["rows"]
    assert first["method"] == "guided" and (first["layer"], first["head"]) == (2, 1) and not first["per_layer"]
    heads = [row for row in rest if row["per_layer"]]
    assert len(heads) == 3 + 3 * 4  # each layer's head mean, and each head
    # each head's row reads its plain attention rows: named attention, the guided head's marked as such
    assert all(row["method"] == "attention" and "guided:" not in row["name"] for row in heads)
    marked = [row for row in heads if "(the guided head)" in row["name"]]
    assert [(row["layer"], row["head"]) for row in marked] == [(2, 1)]
    assert cli_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100
    by_label = {line[2:37].strip(): line for line in lines if line.startswith("  L") and "[" in line}
    assert "L2H1 (guided)" in by_label and "L2H2" in by_label and "L1 mean" in by_label
    assert f"{heads[-1]['aer']:.3f}" in by_label["L3H4"]  # the row's numbers beside its label
    assert any(line.startswith("  guided L2H1 ") for line in lines)


def test_a_reader_that_stops_early_ends_the_command_quietly_with_a_closed_pipes_status(tmp_path):
    """`attnkit translate --file F --json | head -2` with a real pipe: the reader takes two lines and closes
    it while more than a pipe's buffer (64 KiB) is still to come; the command ends with 141 (128 + SIGPIPE,
    as a shell reports `yes | head -1`'s `yes`) and writes nothing to stderr."""
    import os
    import subprocess
    import sys

    text = tmp_path / "many.es"
    text.write_text("Jesús lloró.\n" * 1600)  # ~170 KB of JSON lines (107 bytes each): more than the pipe holds
    # (64 KiB) and the reader's buffer (8 KiB) together, so the writer must meet the closed pipe
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "attnkit.cli", "translate", "--file", str(text), "--json"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        first = [proc.stdout.readline(), proc.stdout.readline()]
        proc.stdout.close()  # the reader goes away
        err = proc.stderr.read().decode()
        status = proc.wait(timeout=120)
    assert [json.loads(line)["translation"] for line in first] == ["Jesus wept."] * 2
    assert status == 141, err
    assert err == ""  # no "Broken pipe", no traceback, no "Exception ignored"
