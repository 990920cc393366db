"""attnkit's commands on a Hugging Face model folder (a tiny random Marian saved with save_pretrained),
offline: translate (greedy equals the model's generate), align (links within the sentences), explain."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_tiny import saved_tiny

SRC = str(Path(__file__).resolve().parents[1] / "src")
SENTENCE = "En el principio creó Dios los cielos y la tierra."


def _cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_translate_equals_generate(family):
    import transformers

    folder = saved_tiny(family)
    out = _cli("translate", "--model", folder, "--beam", "1", SENTENCE).strip()
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    n = len(tok(SENTENCE, add_special_tokens=False)["input_ids"])
    # the Translator's step budget: min(200, 2 * source pieces + 10)
    ids = model.generate(**tok(SENTENCE, return_tensors="pt"), do_sample=False, num_beams=1, max_new_tokens=2 * n + 10)
    assert out == tok.decode(ids[0], skip_special_tokens=True).strip()
    assert out or family == "t5"  # the random Marian writes words; the random T5 writes only <pad>


def test_align_gives_links_inside_each_pair(tmp_path):
    src = ["En el principio creó Dios los cielos y la tierra .", "Jesús lloró ."]
    tgt = ["In the beginning God created the heavens and the earth .", "Jesus wept ."]
    (tmp_path / "a.es").write_text("\n".join(src) + "\n")
    (tmp_path / "a.en").write_text("\n".join(tgt) + "\n")
    for method in ("attention", "shift"):
        lines = _cli(
            "align",
            "--model",
            saved_tiny("marian"),
            "--method",
            method,
            "--src",
            tmp_path / "a.es",
            "--tgt",
            tmp_path / "a.en",
            "--no-progress",
        ).splitlines()
        assert len(lines) == 2
        for line, s, t in zip(lines, src, tgt):
            links = [tuple(map(int, x.split("-"))) for x in line.split()]
            assert links and all(0 <= i < len(s.split()) and 0 <= j < len(t.split()) for i, j in links)
            assert {j for _, j in links} == set(range(len(t.split())))  # every target word is linked


def test_explain_attention_and_the_methods_that_do_not_apply(tmp_path):
    out = _cli("explain", "--model", saved_tiny("marian"), "--method", "attention", "--json", "Jesús lloró.")
    import json

    data = json.loads(out)
    assert data["words"]["source"] == ["Jesús", "lloró."]  # the model's pieces grouped into the words
    words = torch.tensor(data["words"]["scores"])
    assert words.shape == (len(data["words"]["target"]), 2) and bool((words >= 0).all())
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnkit.cli",
            "explain",
            "--model",
            str(saved_tiny("marian")),
            "--method",
            "alti_plus",
            "x",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 2 and "alti_plus needs" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_explorer_serves_a_hugging_face_folder():
    """`attnkit serve --model FOLDER`'s app: the model is listed with its methods, and a translation
    comes back with the cross-attention of every layer and head over the source words."""
    fastapi_testclient = pytest.importorskip("fastapi.testclient")
    from attnkit.explorer.app import create_app, load_models

    folder = saved_tiny("marian")
    models = load_models([str(folder)])
    client = fastapi_testclient.TestClient(create_app(models))
    listed = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert folder.name in listed and "attention" in [m["name"] for m in listed[folder.name]["methods"]]
    r = client.post("/api/translate", json={"text": "Jesús lloró.", "model": folder.name, "beam": 1, "heads": True})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["translation"] and data["kind"] == "hf-marian"
    assert data["words"]["source"] == ["Jesús", "lloró."]  # the model's pieces grouped into words
    assert len(data["heads"]["cross"]) == 2 and len(data["heads"]["enc_self"]) == 2  # both layers


def test_self_attention_models_say_what_they_have():
    """explain and translate on an encoder-only folder: one line each, naming what the model has instead."""
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    folder = str(saved_tiny("bert"))
    for args in (["explain", "--model", folder, "x"], ["translate", "--model", folder, "x"]):
        r = subprocess.run(
            [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=env, timeout=300
        )
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "self-attention" in r.stderr


def test_evaluate_explanations_scores_a_hugging_face_folder():
    """`evaluate explanations` on the gold verses: the report covers the asked methods, with AERs in [0, 1]."""
    import json

    out = _cli(
        "evaluate",
        "explanations",
        "--model",
        saved_tiny("marian"),
        "--method",
        "attention",
        "--limit",
        "3",
        "--sanity-verses",
        "1",
        "--json",
    )
    report = json.loads(out)
    assert report["kind"] == "hf-marian" and report["verses"] == 3 and report["complete"]
    scores = report["methods"]["attention"]
    assert 0.0 <= scores["aer"] <= 1.0 and 0.0 <= scores["precision"] <= 1.0 and 0.0 <= scores["recall"] <= 1.0
