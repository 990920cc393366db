"""attnkit's decoder-only language model: causality, the cached generation, attention maps, config checks."""

import pytest
import torch

from attnkit.models.language_model import LanguageModel, LanguageModelConfig, LanguageModelOutput

SHAPES = [
    {"shape": "llama", "n_kv_heads": 2},
    {"shape": "gpt2"},
    {"shape": "llama", "attention_only": True},
]


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = LanguageModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, max_len=32, **kw)
    return LanguageModel(cfg).eval()


@pytest.mark.parametrize("kw", SHAPES)
def test_changing_a_later_token_never_changes_an_earlier_logit(kw):
    model = _model(**kw)
    ids = torch.randint(4, 40, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 5) % 40
    a, b = model(ids).logits, model(changed).logits
    assert a.shape == (2, 10, 40)
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=0, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4  # and it does change the later ones


@pytest.mark.parametrize("kw", SHAPES)
def test_generate_with_the_cache_equals_rerunning_the_full_sequence(kw):
    model = _model(**kw)
    prompt = torch.randint(4, 40, (2, 4), generator=torch.Generator().manual_seed(2))
    out = model.generate(prompt, 8)
    ref = prompt
    with torch.no_grad():
        for _ in range(8):
            ref = torch.cat([ref, model(ref).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ref)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model = _model(shape="llama")
    prompt = torch.tensor([[1, 5, 6]])
    draw = [model.generate(prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(9)) for _ in range(2)]
    assert torch.equal(draw[0], draw[1])
    greedy = model.generate(prompt, 6)
    assert torch.equal(model.generate(prompt, 6, temperature=0.7, top_k=1, generator=torch.Generator()), greedy)


def test_eos_stops_a_row_and_then_repeats():
    model = _model(shape="gpt2")
    prompt = torch.tensor([[1, 7], [1, 9]])
    greedy = model.generate(prompt, 5)
    eos = int(greedy[0, 2])  # row 0's first new token
    out = model.generate(prompt, 5, eos_id=eos)
    assert torch.all(out[0, 2:] == eos)
    if eos not in greedy[1, 2:].tolist():
        assert torch.equal(out[1], greedy[1])


@pytest.mark.parametrize("kw", SHAPES)
def test_attention_maps_are_row_stochastic_and_causal(kw):
    model = _model(**kw)
    ids = torch.randint(4, 40, (2, 7))
    out = model(ids, need_weights=True)
    assert isinstance(out, LanguageModelOutput) and len(out.attention) == 2
    for w in out.attention:
        assert w.shape == (2, 4, 7, 7)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 7))
        assert torch.all(w.triu(1) == 0)
    torch.testing.assert_close(out.logits, model(ids).logits, atol=1e-5, rtol=1e-5)  # the fused path agrees


def test_parameter_names_follow_hugging_face_llama_and_attention_only_has_no_mlp():
    names = set(dict(_model(shape="llama").named_parameters()))
    assert {"embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "layers.1.mlp.gate_proj.weight"} <= names
    assert {"layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight", "norm.weight"} <= names
    only = _model(shape="llama", attention_only=True)
    assert not any(".mlp." in n for n, _ in only.named_parameters())
    assert only.lm_head.weight is only.embed_tokens.weight  # tied by default


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("vocab_size", {"vocab_size": 0}),
        ("d_model", {"d_model": -1}),
        ("n_heads", {"n_heads": 5}),
        ("n_kv_heads", {"n_kv_heads": 3}),
        ("n_kv_heads", {"shape": "gpt2", "n_kv_heads": 2}),
        ("shape", {"shape": "bert"}),
        ("dropout", {"dropout": 1.5}),
        ("max_len", {"max_len": 0}),
        ("d_ff", {"d_ff": 0}),
    ],
)
def test_config_validation_names_the_field(field, kw):
    args = {"vocab_size": 40, "d_model": 32, "n_heads": 4, **kw}
    with pytest.raises(ValueError, match=field):
        LanguageModelConfig(**args)


def test_bad_inputs_name_the_argument():
    model = _model(shape="gpt2")
    with pytest.raises(ValueError, match="ids"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(torch.tensor([[1, 2]]), 31)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(torch.tensor([[1, 2]]), 3, temperature=-1)
