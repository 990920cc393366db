"""attnkit's commands on Hugging Face model folders (tiny random models saved with save_pretrained), run
in-process through the command's main function: translate (greedy equals the model's generate), align
(links within the sentences), explain, evaluate explanations, the explorer's API."""

import pytest
import torch

from attnkit.cli import main
from hf_tiny import saved_tiny

SENTENCE = "En el principio creó Dios los cielos y la tierra."


def _run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _cli(capsys, *args) -> str:
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_translate_equals_generate(family, capsys):
    import transformers

    folder = saved_tiny(family)
    out = _cli(capsys, "translate", "--model", folder, "--beam", "1", SENTENCE).strip()
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    n = len(tok(SENTENCE, add_special_tokens=False)["input_ids"])
    # the Translator's step budget: min(200, 2 * source pieces + 10)
    ids = model.generate(**tok(SENTENCE, return_tensors="pt"), do_sample=False, num_beams=1, max_new_tokens=2 * n + 10)
    assert out == tok.decode(ids[0], skip_special_tokens=True).strip()
    assert out or family == "t5"  # the random Marian writes words; the random T5 writes only <pad>


def test_align_gives_links_inside_each_pair(tmp_path, capsys):
    src = ["En el principio creó Dios los cielos y la tierra .", "Jesús lloró ."]
    tgt = ["In the beginning God created the heavens and the earth .", "Jesus wept ."]
    (tmp_path / "a.es").write_text("\n".join(src) + "\n")
    (tmp_path / "a.en").write_text("\n".join(tgt) + "\n")
    for method in ("attention", "shift"):
        lines = _cli(
            capsys,
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


def test_explain_attention_and_the_methods_that_do_not_apply(capsys):
    out = _cli(capsys, "explain", "--model", saved_tiny("marian"), "--method", "attention", "--json", "Jesús lloró.")
    import json

    data = json.loads(out)
    assert data["words"]["source"] == ["Jesús", "lloró."]  # the model's pieces grouped into the words
    words = torch.tensor(data["words"]["scores"])
    assert words.shape == (len(data["words"]["target"]), 2) and bool((words >= 0).all())
    code, _, err = _run(capsys, "explain", "--model", saved_tiny("t5"), "--method", "alti_plus", "x")
    assert code == 2 and "alti_plus is not defined for t5" in err and len(err.strip().splitlines()) == 1


def test_the_explorer_serves_a_hugging_face_folder():
    """`attnkit serve --model FOLDER`'s app: the model is listed with its methods, and a translation
    comes back with the cross-attention of every layer and head over the source words."""
    fastapi_testclient = pytest.importorskip("fastapi.testclient")
    from attnkit.explorer.app import create_app, load_models

    folder = saved_tiny("marian")
    models = load_models([str(folder)])
    client = fastapi_testclient.TestClient(create_app(models), base_url="http://127.0.0.1")  # a Host the guard allows
    listed = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert folder.name in listed and "attention" in [m["name"] for m in listed[folder.name]["methods"]]
    r = client.post("/api/translate", json={"text": "Jesús lloró.", "model": folder.name, "beam": 1, "heads": True})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["translation"] and data["kind"] == "hf-marian"
    assert data["words"]["source"] == ["Jesús", "lloró."]  # the model's pieces grouped into words
    assert len(data["heads"]["cross"]) == 2 and len(data["heads"]["enc_self"]) == 2  # both layers


def test_self_attention_models_say_what_they_have(capsys):
    """translate on an encoder-only folder, and a gradient method of explain on it: one line each, naming
    what the model has instead (explain's self-attention views: tests/test_hf_self_attention_views.py)."""
    folder = saved_tiny("bert")
    for command in (["translate"], ["explain", "--method", "saliency"]):
        code, _, err = _run(capsys, *command, "--model", folder, "x")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "self-attention" in err or "attention, rollout" in err


def test_evaluate_explanations_scores_a_hugging_face_folder(capsys):
    """`evaluate explanations` on the gold verses: the report covers the asked method, with AER, precision
    and recall in [0, 1]."""
    import json

    out = _cli(
        capsys,
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
