"""attnkit on real pretrained weights: all-MiniLM-L6-v2, a trained BERT from a registry package
(:mod:`real_models`). Captured attention is checked against `transformers`' own eager attention, and the
traits that only training gives (Clark et al. 2019: BERT's heads park attention on [CLS] and [SEP]; Ferrando
et al. 2022: ALTI's token self-contribution shrinks with depth as context mixes in) are checked on the real
weights and refused by the same model with its weights re-initialised (Adebayo et al. 2018's randomised-model
check), so a method that ignored the weights would fail one side."""

from __future__ import annotations

import functools
import json

import torch

from attnkit.attribution.lm_methods import layer_maps
from attnkit.cli import main
from attnkit.service import open_model
from hf_tiny import transformers
from real_models import minilm_folder

TEXT = "The quick brown fox jumps over the lazy dog."


@functools.cache
def _models():
    """The trained model in eager attention and a same-config model with fresh weights (seed 0), float64."""
    folder = minilm_folder()
    real = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval().double()
    torch.manual_seed(0)
    random = transformers.BertModel(real.config).eval().double()
    ids = transformers.AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"]
    return real, random, ids


def _attention(model, ids) -> torch.Tensor:  # (L, H, N, N)
    with torch.no_grad():
        return torch.stack(model(torch.tensor([ids]), output_attentions=True).attentions)[:, 0]


def test_captured_attention_equals_the_models_eager_attention():
    real, _, ids = _models()
    sa = open_model(str(minilm_folder())).impl
    got_ids, _ = sa.encode(TEXT)
    assert got_ids == ids  # attnkit cuts the text as the model's own tokenizer does
    got = sa.self_attention(ids).attention.double()  # (L, H, N, N)
    want = _attention(real, ids)
    assert got.shape == want.shape == (6, 12, len(ids), len(ids))
    assert torch.allclose(got, want, atol=1e-5)  # measured: 7e-7


def test_trained_heads_park_attention_on_cls_and_sep_and_random_ones_do_not():
    real, random, ids = _models()
    parked = lambda a: (a[..., 0] + a[..., -1]).mean(dim=(1, 2))  # (L,): mean share on [CLS] + [SEP]
    trained, fresh = parked(_attention(real, ids)), parked(_attention(random, ids))
    # measured on this sentence: trained 0.58-0.71 in layers 2-5; random 0.16-0.22 (2 of 11 tokens: ~0.18)
    assert (trained[1:5] > 0.45).all(), trained
    assert (fresh < 0.3).all(), fresh


def test_alti_self_contribution_shrinks_with_depth_only_in_the_trained_model():
    real, random, ids = _models()
    trained, fresh = layer_maps(real, ids, "alti"), layer_maps(random, ids, "alti")  # per layer (N, N)
    for maps in (trained, fresh):
        for m in maps:  # ALTI's rollout: each token's contributions are a distribution over the input tokens
            assert torch.allclose(m.sum(-1).double(), torch.ones(len(ids), dtype=torch.float64), atol=1e-6)
    diag = lambda maps: [float(m.diagonal().mean()) for m in maps]
    # measured: trained 0.78-0.83 at layer 1 down to 0.28-0.39 at layer 6; random about 0.99 and 0.94
    assert diag(trained)[-1] < 0.6 and diag(trained)[-1] < diag(trained)[0] - 0.2
    assert diag(fresh)[-1] > 0.85


def test_the_cli_explains_the_real_model(capsys):
    assert main(["explain", "--model", str(minilm_folder()), TEXT, "--method", "alti", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["causal"] is False and out["layer"] == 6
    assert out["pieces"][0].endswith("[CLS]") and out["pieces"][-1].endswith("[SEP]")
    assert len(out["scores"]) == len(out["pieces"]) == len(_models()[2])
