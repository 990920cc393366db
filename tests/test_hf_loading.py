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


def _closed_port() -> int:
    """A localhost port nothing listens on (bound, then let go): a connection there is refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_uncached_name_with_the_hub_unreachable_is_one_line_without_retries(tmp_path):
    """No network (simulated: HF_ENDPOINT at a closed localhost port, HF_HUB_OFFLINE unset): one probe of the
    hub, then the one-line error, instead of huggingface_hub's retries, each a log line, over half a minute."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    environ = {**env, "PYTHONPATH": SRC, "HF_HOME": str(tmp_path / "hf"), "OMP_NUM_THREADS": "1"}
    environ["HF_ENDPOINT"] = endpoint
    r = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", "translate", "--model", "hf:nobody/no-such-model", "hola"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,  # a hang guard only: the retries it replaces took about 30 s
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # no "Retrying in 1s" lines
    assert lines[0].startswith("attnkit: error: cannot load hf:nobody/no-such-model: it is not in the Hugging Face")
    assert f"the hub cannot be reached ({endpoint}: " in lines[0] and "huggingface-cli download" in lines[0]


def test_a_cached_name_loads_offline_first_without_asking_the_hub(tmp_path):
    """A hub name in the local cache is read from it with no request at all: it translates with the hub
    unreachable and HF_HUB_OFFLINE unset, and nothing is logged about the network."""
    import shutil

    snapshot = tmp_path / "hf" / "hub" / "models--attnkit-tests--tiny-marian" / "snapshots" / ("0" * 40)
    shutil.copytree(saved_tiny("marian"), snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    environ = {**env, "PYTHONPATH": SRC, "HF_HOME": str(tmp_path / "hf"), "OMP_NUM_THREADS": "1"}
    environ["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    r = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", "translate", "--model", "hf:attnkit-tests/tiny-marian", "hola"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "127.0.0.1" not in r.stderr and "Retrying" not in r.stderr


def test_a_broken_folder_is_one_line(tmp_path, capsys):
    from attnkit.cli import main

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    assert main(["translate", "--model", str(folder), "hola"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(folder) in err
