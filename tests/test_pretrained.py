"""Shipped models are package data, resolved by name; `attnkit models` lists them with their scores."""

import json

import pytest

from attnkit.cli import main as cli_main
from attnkit.pretrained import (
    DEFAULT_CAPTION_MODEL,
    DEFAULT_TRANSLATION_MODEL,
    PRETRAINED_DIR,
    UnknownModelError,
    known_models,
    resolve_model,
    shipped_models,
)
from attnkit.training.checkpoint import load_checkpoint
from tiny import SHIPPED


def test_every_shipped_model_is_listed_complete_and_verifiable():
    infos = {m.name: m for m in shipped_models()}
    assert list(infos) == SHIPPED
    for name, m in infos.items():
        assert m.path == PRETRAINED_DIR / name and m.source == "shipped"
        ck = load_checkpoint(m.path)  # sizes and sha256 of the COMPLETE manifest checked
        assert ck.config["model_type"] == m.model_type
        assert m.size_bytes == sum(f.stat().st_size for f in m.path.iterdir() if f.is_file())
    # the default translator is the best shipped one by test BLEU at `attnkit translate`'s default beam (5)
    bleu = {n: m.scores["test_beam5_bleu"] for n, m in infos.items() if "test_beam5_bleu" in m.scores}
    assert max(bleu, key=bleu.get) == DEFAULT_TRANSLATION_MODEL
    assert infos[DEFAULT_CAPTION_MODEL].task == "captioning"
    # a language model says its language (the explorer offers an example text in it); the others have none
    for name, m in infos.items():
        assert m.lang == ("en" if m.task == "language-model" else None), name
        assert m.to_dict()["lang"] == m.lang


def test_names_paths_and_local_models_resolve(tmp_path):
    assert resolve_model("rnnsearch-es-en") == PRETRAINED_DIR / "rnnsearch-es-en"
    assert resolve_model(str(PRETRAINED_DIR / "rnnsearch-es-en")) == PRETRAINED_DIR / "rnnsearch-es-en"
    local = tmp_path / "models" / "mine"
    local.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        (local / f).write_bytes((PRETRAINED_DIR / "rnnsearch-es-en" / f).read_bytes())
    assert resolve_model("mine", home=tmp_path) == local
    assert [m.name for m in known_models(tmp_path)][-1] == "mine"
    with pytest.raises(UnknownModelError, match=r"known: transformer-es-en, .*mine"):
        resolve_model("nope", home=tmp_path)
    with pytest.raises(UnknownModelError, match=r"folder .*does not exist"):
        resolve_model(str(tmp_path / "missing"))


def test_models_command(capsys):
    assert cli_main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows][: len(SHIPPED)] == SHIPPED
    assert rows[0]["scores"]["test_bleu"] == pytest.approx(34.68)
    assert cli_main(["models"]) == 0
    table = capsys.readouterr().out
    assert "transformer-es-en" in table and "BLEU 34.68" in table
    # a language model's line names its induction head only where one passes prefix matching 0.5
    lines = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "induction head L2.H2 (prefix matching 0.96" in lines["attention-only-2l-en"]
    assert "induction head L2." in lines["lm-4l-en"] and "no induction head" not in lines["lm-4l-en"]
    assert cli_main(["translate", "--model", "no-such-model", "Hola."]) == 2
    assert "known: transformer-es-en" in capsys.readouterr().err


def test_models_table_keeps_its_columns_apart_and_aligned(tmp_path, capsys):
    """Every column as wide as its widest cell, two spaces between: "language-model" and "language_model"
    (both 14 wide) do not run together, nor a local model's name longer than any shipped one."""
    import re
    import shutil

    long_name = "my-own-captioner-with-a-long-name"
    shutil.copytree(resolve_model("captioner-soft"), tmp_path / "models" / long_name)
    assert cli_main(["--home", str(tmp_path), "models"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+( \S+)*", header)]  # where each column's heading begins
    assert header.split("  ")[0].rstrip() == "name" and len(starts) == 7
    rows = {line.split()[0]: line for line in lines}
    for line in rows.values():
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == 7, line
        for start, cell in zip(starts[:4], cells[:4]):  # the left-aligned columns begin under their headings
            assert line[start : start + len(cell)] == cell and line[start - 2 : start] in ("  ", ""), line
    assert re.split(r"\s{2,}", rows["lm-4l-en"])[2:4] == ["language-model", "language_model"]
    assert re.split(r"\s{2,}", rows[long_name])[:3] == [long_name, "local", "captioning"]


def test_language_model_line_without_an_induction_head():
    """A language model whose best head stays under the bar is said to have none, naming the best one."""
    from attnkit.cli.models import INDUCTION_HEAD_BAR, _language_model_score

    sc = {"test_ppl": 29.06, "induction_head": "L4.H4", "induction_prefix_matching": 0.008, "induction_copying": 0.26}
    assert _language_model_score(sc) == "test perplexity 29.1, no induction head (best: L4.H4, prefix matching 0.01)"
    sc["induction_prefix_matching"] = INDUCTION_HEAD_BAR
    assert (
        _language_model_score(sc) == "test perplexity 29.1, induction head L4.H4 (prefix matching 0.50, copying 0.26)"
    )
    assert _language_model_score({"test_ppl": 3.0}) == "test perplexity 3.0"
