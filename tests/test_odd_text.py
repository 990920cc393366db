"""Every text is valid input or a clear error: the one check (:mod:`attnkit.data.text`), the Python API
(``Translator.translate``/``attention``, the tokenizer) and the command line (``translate`` arguments, ``--file``
lines, ``align`` files), by hand for the odd cases users met and by Hypothesis over arbitrary Unicode (lone
surrogates, zero-width, direction marks, controls). The API's side is ``test_api_fuzz.py``."""

import pytest
from hypothesis import HealthCheck, given, settings

from attnkit.cli import main
from attnkit.data.text import TextError, UnreadableTextError, check_unicode, lone_surrogate
from attnkit.errors import AttnkitError
from attnkit.tasks.translation import Translator
from fuzzing import texts
from tiny import saved_tiny_transformer

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
INVISIBLE = ["\u200b", "\ufeff", "\x01\x02", "\u200f", "\u200b\u200c", "\x7f"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved_tiny_transformer(tmp_path_factory.mktemp("odd") / "tiny")


@pytest.fixture(scope="module")
def translator(model):
    return Translator.load(model)


def test_the_check_names_the_lone_surrogate_and_the_byte_it_stands_for():
    assert lone_surrogate("Hola") is None and lone_surrogate("añ\U0001f600") is None
    assert lone_surrogate("ab\ud800c") == 2
    with pytest.raises(TextError, match=r"the text is not valid Unicode: lone surrogate U\+D800 at position 2$"):
        check_unicode("ab\ud800c")
    with pytest.raises(
        TextError, match=r"argument 1 .* U\+DCFF at position 0 \(the byte 0xff: the input is not UTF-8\)"
    ):
        check_unicode("\udcffabc", "argument 1")
    assert issubclass(TextError, ValueError) and issubclass(TextError, AttnkitError) and TextError.status == 422


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_text_of_only_invisible_characters_is_one_clear_error(translator, text):
    with pytest.raises(UnreadableTextError, match="the text has no word the model can read"):
        translator.translate([text])
    with pytest.raises(UnreadableTextError, match="sentence 2 has no word"):
        translator.translate(["Hola.", text])
    with pytest.raises(UnreadableTextError, match="the target has no word"):
        translator.attention("Hola.", text)
    with pytest.raises(TextError, match="not valid Unicode"):
        translator.translate(["Hola \ud800"])


@settings(FUZZ, max_examples=80)  # benchmarks/fuzz.py runs 2,000
@given(text=texts())
def test_the_python_api_translates_any_text_or_says_why_not(translator, text):
    for call in (lambda: translator.translate([text], beam_size=1), lambda: translator.attention(text, "Hello")):
        try:
            call()
        except AttnkitError as exc:  # an InputError: empty, unreadable, not valid Unicode; never another error
            assert str(exc) and "\n" not in str(exc)


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_reported_command_lines(model, tmp_path, capsys):
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "\u200b"])
    assert (
        rc == 2
        and out == ""
        and err
        == "attnkit: error: argument 1: the text has no word the model can read (only invisible or control characters)\n"
    )
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "Hola", "\udcff\udcfe"])  # argv not UTF-8
    assert rc == 2 and out == "" and "argument 2 is not valid Unicode" in err and "0xff" in err and err.count("\n") == 1
    lines = tmp_path / "lines.txt"
    lines.write_text("Hola.\n\u200b\n\nY dijo Dios.\n\ufeff\x01\n", encoding="utf-8")
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "--file", str(lines), "--beam", "1"])
    assert rc == 1 and len(out.splitlines()) == 2  # the two readable lines, translated
    assert [line.split(": ")[2] for line in err.splitlines()] == [f"{lines} line 2", f"{lines} line 5"]
    assert all(line.endswith("; skipped") for line in err.splitlines())
    lines.write_text("\u200b\n\x01\n", encoding="utf-8")
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "--file", str(lines)])
    assert rc == 2 and "nothing to translate: none of the 2 inputs" in err


def test_align_gives_a_word_of_only_invisible_characters_no_link(model, tmp_path, capsys):
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("Hola \u200b amigo .\n\u200b\n", encoding="utf-8")
    tgt.write_text("Hello \u200b friend .\nhi\n", encoding="utf-8")
    rc, out, _ = _run(capsys, ["align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--no-progress"])
    assert rc == 0 and len(out.splitlines()) == 2
    assert all(not link.startswith("1-") for link in out.splitlines()[0].split())  # the invisible word: no link


@settings(FUZZ, max_examples=30)  # each example loads the model twice, as the command does (benchmarks/fuzz.py: 2,000)
@given(words=texts(16), more=texts(16))
def test_any_command_line_text_is_a_translation_or_one_error_line(model, tmp_path_factory, capsys, words, more):
    # arguments as Python holds them (lone surrogates included, as a command line that is not UTF-8 brings)
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "--beam", "1", words, more])
    assert rc in (0, 1, 2) and "Traceback" not in err
    if rc == 2:  # the inputs named one warning line each, then the one error line
        assert err.splitlines()[-1].startswith("attnkit: error: ") and out == ""
        assert all(line.startswith("attnkit: warning: ") for line in err.splitlines()[:-1])
    # the same texts as lines of a UTF-8 file (what UTF-8 cannot hold is written as bytes that are not UTF-8)
    path = tmp_path_factory.mktemp("lines") / "in.txt"
    path.write_bytes(_bytes(words, more))
    rc, out, err = _run(capsys, ["translate", "--model", str(model), "--beam", "1", "--file", str(path)])
    assert rc in (0, 1, 2) and "Traceback" not in err
    if rc == 2:
        assert err.splitlines()[-1].startswith("attnkit: error: ")
        assert all(line.startswith("attnkit: warning: ") for line in err.splitlines()[:-1])


def _bytes(*lines: str) -> bytes:
    return b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in lines)
