"""``--precision int8``: dynamic int8 quantization of the translators' linear and recurrent layers.

References: float64 ``x Wᵀ + b`` for the int8 output layer (within the quantization's own error
bound), and the float32 model's own translations for the quantized models (close, not equal).
"""

import pytest
import torch
from torch.ao.nn.quantized import dynamic as qdynamic

from attnkit.decoding import OutputLayerDecoder
from attnkit.device import place
from attnkit.errors import ConfigError
from attnkit.int8 import int8_linear


def test_int8_linear_is_within_the_quantization_error_of_float64():
    g = torch.Generator().manual_seed(0)
    w, b, x = torch.randn(300, 64, generator=g), torch.randn(300, generator=g), torch.randn(7, 64, generator=g)
    y = int8_linear(w, b)(x)
    ref = (x.double() @ w.double().T + b.double()).float()
    # per-row weight scale s_w = max|w_row| / 127 and per-call input scale s_x = (max x - min x) / 255:
    # each product is off by at most about |x| s_w / 2 + |w| s_x / 2, summed over the 64 inputs
    s_w = w.abs().amax(1) / 127
    s_x = (x.max() - x.min()) / 255
    bound = (x.abs().sum(1, keepdim=True) * s_w / 2 + w.abs().sum(1) * s_x / 2) * 1.5
    assert (y - ref).abs().le(bound).all()
    assert (y - ref).abs().max() > 0  # it is really int8 arithmetic, not a float path


def test_place_int8_quantizes_every_linear_and_recurrent_layer_and_marks_the_model():
    from attnkit.pretrained import resolve_model
    from attnkit.training.checkpoint import load_model

    for name, kinds in (
        ("transformer-es-en", (qdynamic.Linear,)),
        ("rnnsearch-es-en", (qdynamic.Linear, qdynamic.GRU)),
    ):
        model, _, _ = load_model(resolve_model(name))
        q = place(model, "cpu", "int8")
        assert q.precision == "int8"
        found = {type(m) for m in q.modules()}
        for k in kinds:
            assert k in found, (name, k)
        assert not any(type(m) is torch.nn.Linear for m in q.modules())  # none left behind
    # on a machine with CUDA the int8 refusal speaks; without, resolving "cuda" already fails
    match = "int8 runs on the CPU" if torch.cuda.is_available() else "CUDA is not available"
    with pytest.raises(ConfigError, match=match):
        place(torch.nn.Linear(2, 2), "cuda", "int8")


def test_int8_output_layer_log_probs_are_close_to_fp32():
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator

    torch.manual_seed(0)
    m = TransformerTranslator(
        TransformerConfig(vocab_size=50, d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
    ).eval()
    src, lengths = torch.randint(3, 50, (2, 5)), torch.tensor([5, 3])
    fp32 = OutputLayerDecoder(m)
    state = m.start(src, lengths)
    lp32, _, _ = fp32.step(torch.ones(2, dtype=torch.long), state)
    m.precision = "int8"
    lp8, _, _ = OutputLayerDecoder(m).step(torch.ones(2, dtype=torch.long), state)
    assert not torch.equal(lp8, lp32)
    torch.testing.assert_close(lp8, lp32, atol=0.05, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer-es-en", "rnnsearch-es-en"])
def test_int8_translations_are_close_to_fp32(name, bible_home):
    """On 40 test verses: BLEU within 1.5 of fp32 and most outputs the same (the full test split's
    numbers are in benchmarks/RESULTS.md)."""
    from attnkit.data.datasets.bible import load_pairs
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.metrics import corpus_scores

    pairs = load_pairs("test", home=bible_home, limit=40)
    src, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    out = {p: Translator.load(name, device="cpu", dtype=p).translate(src, beam_size=1) for p in ("fp32", "int8")}
    bleu = {p: corpus_scores([r["translation"] for r in o], refs)["bleu"] for p, o in out.items()}
    assert abs(bleu["int8"] - bleu["fp32"]) < 1.5, bleu
    same = sum(a["tokens"] == b["tokens"] for a, b in zip(out["fp32"], out["int8"]))
    assert same >= len(src) // 2, f"{same} of {len(src)} the same"


def test_cli_translate_and_evaluate_int8_run_end_to_end(bible_home, capsys):
    from attnkit.cli import main

    assert main(["translate", "--precision", "int8", "--device", "cpu", "Jesús lloró."]) == 0
    assert capsys.readouterr().out.strip() == "Jesus wept."
    args = ["--home", str(bible_home), "evaluate", "translation", "--model", "rnnsearch-es-en", "--limit", "5"]
    assert main([*args, "--precision", "int8"]) == 0
    out = capsys.readouterr()
    assert "BLEU" in out.out and out.err == ""


def test_explorer_serves_int8_models_without_attribution_methods(bible_home):
    """``serve --precision int8``: translations with every attention map; no attribution methods are
    offered (they read float weights), and asking for one is a 4xx, not a crash."""
    from fastapi.testclient import TestClient

    from attnkit.data.datasets.bible import load_pairs
    from attnkit.explorer.app import create_app, load_models

    models = load_models(["transformer-es-en"], device="cpu", dtype="int8")
    client = TestClient(create_app(models, verses=load_pairs("test", home=bible_home)[:3]), base_url="http://127.0.0.1")
    info = client.get("/api/models").json()["models"][0]
    assert info["methods"] == []
    p = client.post("/api/translate", json={"text": "Jesús lloró.", "heads": True}).json()
    assert p["translation"] == "Jesus wept." and p["heads"] is not None and p["attention"]
    r = client.post("/api/translate", json={"text": "Jesús lloró.", "method": "attention"})
    assert 400 <= r.status_code < 500
