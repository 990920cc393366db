"""Encoder-only and decoder-only Hugging Face models: self-attention of every layer and head equals the
eager implementation's for every family attnkit reads, the head mean and rollout are the plain formulas
on it, streaming keeps one layer at a time, grouped-query heads name the key/value head they read, and
a model whose attention bypasses ``transformers``' attention interface is refused in one line."""

import pytest
import torch

from attnkit.alignment import attention_rollout
from attnkit.hf.capture import UntraceableModelError
from attnkit.hf.self_attention import SelfAttentionModel
from hf_tiny import ENCODER_ONLY, LM_FAMILIES, build_tiny, bypass_interface, eager_copy

TEXT = "En el principio creó Dios los cielos y la tierra."


@pytest.mark.parametrize("family", LM_FAMILIES)
def test_self_attention_equals_eager(family):
    """Every family, each with what sets its attention apart (hf_tiny._config): query/key norms (Qwen3,
    OLMo 2, Gemma 3), sliding windows shorter than the text (Mistral, Gemma 2 and 3), soft-capped scores
    (Gemma 2, which runs eager by default), grouped and multi-query attention, partial rotary (GPT-NeoX)."""
    model, tok = build_tiny(family)
    sa = SelfAttentionModel(model, tok, source=family)
    maps = sa.self_attention(TEXT)
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    assert ids.shape[1] > 8  # longer than the sliding windows (4 keys): the window shapes the maps
    eager, _ = eager_copy(family)
    with torch.no_grad():
        expected = torch.stack(eager(input_ids=ids, output_attentions=True).attentions)[:, 0]  # (L, H, N, N)
    torch.testing.assert_close(maps.attention, expected.float(), atol=1e-5, rtol=0)
    assert len(maps.pieces) == ids.shape[1]
    assert maps.causal == (family not in ENCODER_ONLY)
    if maps.causal:  # nothing to the right of the diagonal
        assert float(maps.attention.triu(1).abs().max()) == 0.0
    torch.testing.assert_close(maps.head_mean, expected.float().mean(1))
    torch.testing.assert_close(maps.rollout(), attention_rollout(expected.float()))


def test_pieces_group_into_words():
    from attnkit.alignment import words_from_pieces

    model, tok = build_tiny("bert")
    sa = SelfAttentionModel(model, tok, source="bert")
    _, pieces = sa.encode("Jesús lloró.")
    assert words_from_pieces(pieces) == ["<s>", "Jesús", "lloró.", "</s>"]  # specials are words of their own


def test_stream_hands_over_each_asked_layer_once():
    model, tok = build_tiny("llama")
    sa = SelfAttentionModel(model, tok, source="llama")
    seen = []
    sa.stream(TEXT, lambda layer, w: seen.append((layer, tuple(w.shape))), layers=[2], heads=[1, 4])
    n = len(tok(TEXT)["input_ids"])
    assert seen == [(2, (2, n, n))]  # the layer's number (1-based), its heads 1 and 4
    full = sa.self_attention(TEXT)
    part = sa.self_attention(TEXT, layers=[2], heads=[1, 4])
    torch.testing.assert_close(part.attention[0], full.attention[1, [0, 3]])  # tensor indices: from 0
    assert part.layers == [2] and part.heads == [1, 4]
    with pytest.raises(ValueError, match="rollout"):
        part.rollout()
    with pytest.raises(ValueError, match=r"layers must lie in 1\.\.2 \(this model has 2 layers\), got 3"):
        sa.self_attention(TEXT, layers=[3])
    with pytest.raises(ValueError, match=r"layers must lie in 1\.\.2 .*got 0"):
        sa.self_attention(TEXT, layers=[0])
    with pytest.raises(ValueError, match=r"heads must lie in 1\.\.4 \(this model has 4 heads\), got 0"):
        sa.stream(TEXT, lambda layer, w: None, heads=[0])
    with pytest.raises(TypeError, match="layers"):
        sa.self_attention(TEXT, layers=2)


def test_maps_number_layers_and_heads_from_one():
    model, tok = build_tiny("bert")
    sa = SelfAttentionModel(model, tok, source="bert")
    maps = sa.self_attention(TEXT)
    assert maps.layers == list(range(1, sa.num_layers + 1)) and maps.heads == list(range(1, sa.num_heads + 1))


def test_load_from_a_folder_and_by_hf_name():
    from attnkit.hf import HFModelError, load_self_attention
    from hf_tiny import saved_tiny

    sa = load_self_attention(str(saved_tiny("gpt2")))
    assert sa.causal and sa.num_layers == 2 and sa.self_attention("Jesús lloró.").attention.shape[:2] == (2, 4)
    with pytest.raises(HFModelError, match="encoder-decoder"):
        load_self_attention(str(saved_tiny("marian")))


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_kv_groups_name_the_key_value_head_each_query_head_reads(family):
    """Scaling one key/value head's keys in the first layer of the eager model changes exactly the maps of
    the query heads that ``kv_groups`` puts in its group (Llama: 2 per group; Gemma: one group for all)."""
    model, tok = build_tiny(family)
    sa = SelfAttentionModel(model, tok, source=family)
    maps = sa.self_attention(TEXT)
    cfg = model.config
    assert sa.num_kv_heads == cfg.num_key_value_heads < sa.num_heads
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    size = cfg.head_dim if getattr(cfg, "head_dim", None) else cfg.hidden_size // cfg.num_attention_heads
    for j in range(cfg.num_key_value_heads):
        eager, _ = eager_copy(family)
        with torch.no_grad():
            eager.model.layers[0].self_attn.k_proj.weight[j * size : (j + 1) * size] *= 3.0
            changed = eager(input_ids=ids, output_attentions=True).attentions[0][0]  # (H, N, N)
        moved = [h + 1 for h in range(sa.num_heads) if float((changed[h] - maps.attention[0, h]).abs().max()) > 1e-4]
        assert moved == [h for h, g in zip(maps.heads, maps.kv_groups) if g == j + 1] and moved
    part = sa.self_attention(TEXT, layers=[1], heads=[2, 3])
    assert part.kv_groups == ([1, 2] if family == "llama" else [1, 1])
    bert = SelfAttentionModel(*build_tiny("bert"), source="bert")
    assert bert.self_attention(TEXT).kv_groups is None  # every head has its own keys and values


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_attention_that_bypasses_the_interface_is_refused_in_one_line(implementation):
    """A Llama whose attention modules run torch's attention themselves: the model still computes what it
    did, but attnkit sees no weights, and says so instead of handing on a missing or stale map."""
    model, tok = build_tiny("llama", attn_implementation=implementation)
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
        bypass_interface(model)
        torch.testing.assert_close(model(input_ids=ids).logits, before, atol=1e-5, rtol=0)  # a faithful bypass
    sa = SelfAttentionModel(model, tok, source="llama")
    seen = []
    with pytest.raises(UntraceableModelError) as err:
        sa.stream(TEXT, lambda layer, w: seen.append(layer))
    lacks = "do not call transformers' attention interface" if implementation == "sdpa" else "return no attention"
    assert str(err.value).startswith(
        "attnkit cannot read attention from llama: its attention modules (LlamaAttention) "
    )
    assert lacks in str(err.value) and len(str(err.value).splitlines()) == 1
    assert seen == []  # refused as the first layer returned: no map was handed on
    with pytest.raises(ValueError, match="cannot read attention from llama"):  # a ValueError, as user errors are
        sa.self_attention(TEXT)


def test_gradient_methods_run_on_a_model_whose_attention_cannot_be_read():
    """The gradient methods need no attention: on a Llama that bypasses the interface, the service gives the
    method's rows (equal to the same method on the untouched model) and no attention, and the page's
    answer says it has none; attention itself is still refused in one line."""
    from attnkit.explorer.self_attention import continuation_answer
    from attnkit.service import GenerationRequest, Model, ModelKind, ModelSpec, analyse

    model, tok = build_tiny("llama")
    plain = Model("llama", ModelKind.SELF_ATTENTION, SelfAttentionModel(model, tok, source="llama"), ModelSpec("x"))
    request = GenerationRequest(TEXT, mode="forced", method="input_x_gradient")
    reference = analyse(plain, request).attribution.scores
    bypassed, tok2 = build_tiny("llama")
    bypass_interface(bypassed)
    m = Model("llama", ModelKind.SELF_ATTENTION, SelfAttentionModel(bypassed, tok2, source="llama"), ModelSpec("x"))
    got = analyse(m, request)
    assert got.attention is None
    torch.testing.assert_close(got.attribution.scores, reference, atol=1e-5, rtol=0)
    answer = continuation_answer(got)
    assert answer.has_attention is False and answer.attention is None
    assert answer.attribution.method == "input_x_gradient"
    with pytest.raises(UntraceableModelError):
        analyse(m, GenerationRequest(TEXT, mode="forced", method="attention"))
