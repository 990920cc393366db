"""The one range check (attnkit.checks) against plain comparisons, and the command line refusing bad
numbers and unwritable output paths with one line (exit status 2) before doing any work."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.checks import NON_NEGATIVE, POSITIVE, POSITIVE_INT, PROBABILITY, Range, arg_type, check, check_fields
from attnkit.cli import main as cli_main
from attnkit.errors import ConfigError
from attnkit.models.seq2seq import Seq2SeqConfig
from attnkit.tasks.captioning import CaptioningConfig

numbers = st.one_of(
    st.integers(-5, 5), st.floats(-5, 5), st.just(math.nan), st.booleans(), st.none(), st.text(max_size=2)
)


@given(numbers)
def test_ranges_agree_with_plain_comparisons(x):
    is_num = isinstance(x, (int, float)) and not isinstance(x, bool) and not (isinstance(x, float) and math.isnan(x))
    assert POSITIVE.holds(x) == (is_num and x > 0)
    assert NON_NEGATIVE.holds(x) == (is_num and x >= 0)
    assert POSITIVE_INT.holds(x) == (is_num and isinstance(x, int) and x >= 1)
    assert PROBABILITY.holds(x) == (is_num and 0 <= x < 1)


def test_messages_name_the_value_and_the_range():
    assert [str(r) for r in (POSITIVE, POSITIVE_INT, NON_NEGATIVE, PROBABILITY, Range(4))] == [
        "> 0",
        "an int >= 1",
        ">= 0",
        "in [0, 1)",
        ">= 4",
    ]
    assert check("beam", 3, POSITIVE_INT) == 3 and check("k", None, POSITIVE_INT, allow_none=True) is None
    with pytest.raises(ValueError, match=r"^beam must be an int >= 1, got 0$"):
        check("beam", 0, POSITIVE_INT)
    with pytest.raises(ConfigError, match=r"^k must be an int >= 1 or None, got True$"):
        check("k", True, POSITIVE_INT, allow_none=True, error=ConfigError)
    parse = arg_type(POSITIVE_INT)
    assert parse("7") == 7
    for bad in ("0", "-3", "2.5", "x"):
        with pytest.raises(Exception, match="int"):
            parse(bad)


def test_config_fields_carry_their_ranges():
    with pytest.raises(ConfigError, match=r"dropout must be in \[0, 1\), got 1.0"):
        Seq2SeqConfig(dropout=1.0)
    with pytest.raises(ConfigError, match=r"hidden_dim must be an int, got 2\.5"):
        Seq2SeqConfig(hidden_dim=2.5)
    with pytest.raises(ConfigError, match=r"encoder_dim must be an int in \[1, 65536\] or None, got 0"):
        Seq2SeqConfig(encoder_dim=0)
    with pytest.raises(ConfigError, match=r"encoder_dim must be an int in \[1, 65536\] or None, got 65537"):
        Seq2SeqConfig(encoder_dim=65537)
    assert Seq2SeqConfig(encoder_dim=None).enc_dim == 256
    with pytest.raises(ConfigError, match=r"scenes_per_epoch must be an int in \[0, 1_000_000_000\]"):
        CaptioningConfig(scenes_per_epoch=-1)
    check_fields(CaptioningConfig(scenes_per_epoch=0))  # 0: one whole pass


def _one_line_error(capsys, argv, *expected):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnkit: error: ") and "Traceback" not in err, err
    for text in expected:
        assert text in err, err


@pytest.mark.parametrize("beam", ["0", "-3", "two"])
def test_translate_refuses_a_bad_beam_before_loading_a_model(capsys, monkeypatch, beam):
    import attnkit.cli.translate as cli_translate

    monkeypatch.setattr(cli_translate, "_open_model", lambda *a, **k: pytest.fail("the model was loaded"))
    _one_line_error(capsys, ["translate", "--beam", beam, "hola"], "--beam")


@pytest.mark.parametrize(
    "argv",
    [
        ["caption", "--beam", "0", "x.png"],
        ["evaluate", "translation", "--limit", "0"],
        ["evaluate", "captioning", "--beam", "-1"],
        ["evaluate", "alignment", "--layer", "0"],
        ["export", "a", "b", "--average-last", "0"],
        ["serve", "--port", "70000"],
        ["shortlist", "--per-source", "0"],
        ["train", "translation", "--dropout", "1.5"],
        ["train", "translation", "--label-smoothing", "-0.1"],
        ["train", "translation", "--keep-last", "0"],
        ["translate", "--no-such-flag"],
    ],
)
def test_bad_numbers_and_flags_are_one_line(capsys, argv):
    _one_line_error(capsys, argv)


def test_unwritable_output_paths_are_one_line(capsys, tmp_path):
    in_the_way = tmp_path / "file"
    in_the_way.write_text("x")
    _one_line_error(capsys, ["export", "transformer-es-en", str(in_the_way / "x")], "out: cannot create")
    _one_line_error(capsys, ["translate", "--plot", str(in_the_way / "a.png"), "hola"], "--plot: cannot create")
    _one_line_error(capsys, ["translate", "--html", str(tmp_path), "hola"], "--html", "is a folder")
    _one_line_error(capsys, ["evaluate", "translation", "--output", str(in_the_way / "r.json")], "--output")
    _one_line_error(
        capsys, ["train", "classifier", "--out-dir", str(in_the_way / "run"), "--max-steps", "1"], "--out-dir"
    )
