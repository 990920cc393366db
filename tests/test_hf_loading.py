"""Naming a Hugging Face model: ``hf:NAME`` and model folders resolve through attnkit's one resolution
function, and the ways loading can fail are one-line errors that say what to do."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.pretrained import PRETRAINED_DIR, hf_source, model_task, resolve_model
from hf_tiny import saved_tiny

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_hf_names_resolve_to_themselves():
    p = resolve_model("hf:Helsinki-NLP/opus-mt-es-en")
    assert str(p) == "hf:Helsinki-NLP/opus-mt-es-en"
    assert hf_source(p) == "Helsinki-NLP/opus-mt-es-en"
    assert resolve_model(p) == p  # idempotent: a loader may resolve again


def test_an_empty_hf_name_is_refused():
    from attnkit.pretrained import UnknownModelError

    with pytest.raises(UnknownModelError, match="hf:NAME"):
        resolve_model("hf:")


def test_folders_are_told_apart():
    assert hf_source(PRETRAINED_DIR / "transformer-es-en") is None  # attnkit's own: COMPLETE manifest
    assert model_task(PRETRAINED_DIR / "transformer-es-en") == "translation"
    marian = saved_tiny("marian")
    assert resolve_model(str(marian)) == marian
    assert hf_source(marian) == str(marian)
    assert model_task(marian) == "translation"
    assert model_task(saved_tiny("bert")) == "self-attention"


def test_missing_transformers_names_the_extra(monkeypatch):
    from attnkit.hf import HFModelError, require_transformers

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(HFModelError, match=r"pip install 'attnkit\[hf\]'"):
        require_transformers()


def _cli(args, tmp_path, **env):
    environ = {**os.environ, "PYTHONPATH": SRC, "HF_HOME": str(tmp_path / "hf"), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=environ, timeout=300
    )


def test_uncached_name_offline_is_one_line_naming_both_ways(tmp_path):
    r = _cli(["translate", "--model", "hf:nobody/no-such-model", "hola"], tmp_path, HF_HUB_OFFLINE="1")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "hf:nobody/no-such-model" in lines[0]
    assert "network" in lines[0] and "huggingface-cli download" in lines[0] and "HF_HUB_OFFLINE" in lines[0]


def test_a_broken_folder_is_one_line(tmp_path, capsys):
    from attnkit.cli import main

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    assert main(["translate", "--model", str(folder), "hola"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(folder) in err
