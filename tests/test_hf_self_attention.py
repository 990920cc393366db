"""Encoder-only and decoder-only Hugging Face models: self-attention of every layer and head equals the
eager implementation's, the head mean and rollout are the plain formulas on it, and streaming keeps
one layer at a time."""

import pytest
import torch

from attnkit.alignment import attention_rollout
from attnkit.hf.self_attention import SelfAttentionModel
from hf_tiny import SELF_ATTENTION, build_tiny, eager_copy

TEXT = "En el principio creó Dios los cielos y la tierra."


@pytest.mark.parametrize("family", SELF_ATTENTION)
def test_self_attention_equals_eager(family):
    model, tok = build_tiny(family)
    sa = SelfAttentionModel(model, tok, source=family)
    maps = sa.self_attention(TEXT)
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    eager, _ = eager_copy(family)
    with torch.no_grad():
        expected = torch.stack(eager(input_ids=ids, output_attentions=True).attentions)[:, 0]  # (L, H, N, N)
    torch.testing.assert_close(maps.attention, expected.float(), atol=1e-5, rtol=0)
    assert len(maps.pieces) == ids.shape[1]
    assert maps.causal == (family != "bert")
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
