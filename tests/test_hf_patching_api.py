"""``attnkit heads --patching`` and ``/api/patching`` on a Hugging Face folder (a tiny random GPT-2 saved with
its tokenizer): the JSON equals the library's sweeps run on the ``transformers`` model itself with the task's
tokens drawn as :func:`repeated_tokens_pair` draws them (the tokenizer's special tokens left out), into the
best induction head :func:`hf_induction_scores` names; the page's answer equals the command's."""

from __future__ import annotations

import json

import pytest

from attnkit.attribution.patching import patch_heads, repeated_tokens_pair
from attnkit.attribution.path_patching import path_patch_senders
from attnkit.hf.induction import hf_induction_scores
from hf_tiny import saved_tiny

fastapi_testclient = pytest.importorskip("fastapi.testclient")


@pytest.fixture(scope="module")
def folder():
    return str(saved_tiny("gpt2"))


def test_cli_patching_on_a_hugging_face_folder_equals_the_library(folder, capsys):
    from attnkit.cli import main
    from attnkit.service import open_model

    argv = ["heads", "--model", folder, "--patching", "--repeated", "6", "--seed", "2", "--device", "cpu"]
    assert main([*argv, "--json"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    sa = open_model(folder).impl
    hf = sa.model
    layer, head, _ = hf_induction_scores(sa).best_induction_head()
    specials = tuple(sorted(sa.special_ids))
    clean, corrupt, target = repeated_tokens_pair(hf.config.vocab_size, 6, seed=2, special_ids=specials)
    assert not set(clean.tolist()) & set(specials)
    want = patch_heads(hf, clean, corrupt, target, direction="noise").to_dict()
    assert got["target"] == target and (got["induction_head"]["layer"], got["induction_head"]["head"]) == (layer, head)
    for a, b in zip(got["heads"]["cells"], want["cells"], strict=True):
        assert (a["layer"], a["head"]) == (b["layer"], b["head"]) and abs(a["effect"] - b["effect"]) <= 1e-9
    if layer > 1:
        k = path_patch_senders(hf, clean, corrupt, target, receiver=(layer - 1, head - 1), via="k", direction="noise")
        assert [s["effect"] for s in got["paths"]["k"]["senders"]] == pytest.approx(
            [s["effect"] for s in k.to_dict()["senders"]], abs=1e-9
        )
    assert main(argv) in (0, None)
    assert "activation patching of" in capsys.readouterr().out


def test_api_patching_on_a_hugging_face_model_equals_the_command(folder):
    from attnkit.cli.heads_patching import patching_report
    from attnkit.explorer.app import create_app, load_models
    from attnkit.service import open_model

    models = load_models([folder, str(saved_tiny("bert"))])
    gpt2, bert = list(models.self_attention)
    c = fastapi_testclient.TestClient(create_app(models, verses=[]), base_url="http://127.0.0.1")
    r = c.post("/api/patching", json={"model": gpt2, "length": 6, "seed": 2, "direction": "denoise"})
    assert r.status_code == 200, r.text
    a = r.json()
    want = patching_report(open_model(folder), 6, 2, "denoise")
    assert (a["target"], a["induction_head"]) == (want["target"], want["induction_head"])
    values = lambda cells: [v for x in cells for v in (x["score"], x["effect"])]
    assert values(a["heads"]["cells"]) == pytest.approx(values(want["heads"]["cells"]), abs=1e-9)
    r = c.post("/api/patching", json={"model": bert, "length": 6})
    assert r.status_code == 422 and "decoder-only" in r.json()["error"]
    r = c.post("/api/patching", json={"model": gpt2, "length": 999})
    assert r.status_code == 413 and "at most" in r.json()["error"]
