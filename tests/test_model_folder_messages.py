"""What a command says about a folder it cannot use (issue 56, "found on the way"): the message names
what the folder is, in one line, instead of another kind's error ("checkpoint … is incomplete: no
COMPLETE marker", "it is an attnkit PyTorch model")."""

import pytest

from attnkit.cli import main
from attnkit.deploy.manifest import DeployError, read_manifest
from hf_tiny import saved_tiny


def _run(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_evaluate_explanations_names_an_encoder_only_model(capsys):
    code, err = _run(capsys, "evaluate", "explanations", "--model", saved_tiny("bert"), "--limit", "1")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "is a Hugging Face bert model, encoder-only" in err and "predicts no next token" in err
    assert "scores translators" in err and "COMPLETE" not in err


def test_evaluate_explanations_names_an_empty_folder(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = _run(capsys, "evaluate", "explanations", "--model", empty, "--limit", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{empty} holds no model" in err and "COMPLETE" not in err


def test_ctranslate2_engine_on_a_hugging_face_folder_says_how_to_serve_it():
    folder = saved_tiny("marian")
    with pytest.raises(DeployError) as info:
        read_manifest(folder, engine="ctranslate2")
    message = str(info.value)
    assert "is a Hugging Face model" in message and "attnkit export MODEL OUT --format ctranslate2" in message
    assert "default engine" in message and "it is an attnkit PyTorch model" not in message


def test_serve_loads_both_models_whose_folders_share_a_name(tmp_path):
    """``serve --model a/bert b/bert``: both are served, under the shortest ends of their paths that differ."""
    import shutil

    from attnkit.explorer.app import load_models

    a, b = tmp_path / "a" / "bert", tmp_path / "b" / "bert"
    shutil.copytree(saved_tiny("bert"), a)
    shutil.copytree(saved_tiny("bert"), b)
    models = load_models([str(a), str(b)])
    assert sorted(models.self_attention) == ["a/bert", "b/bert"]
    assert sorted(models.info) == ["a/bert", "b/bert"] and models.info["a/bert"].name == "a/bert"
