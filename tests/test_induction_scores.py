"""Induction-head scores (Olsson et al. 2022) on a 2-layer attention-only model built by hand to have a
previous-token head in layer 1 and an induction head in layer 2, and on a random model (chance)."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.models.induction import icl_positions, induction_scores, repeated_random_tokens
from attnkit.models.language_model import LanguageModel, LanguageModelConfig

V, P = 16, 16  # vocabulary (0..3 special), positions
TOK, POS, PREV = slice(0, 16), slice(16, 32), slice(32, 48)  # residual subspaces


def _hand_built() -> LanguageModel:
    """Residual = [token one-hot | position one-hot | previous token one-hot]. Layer 1's head: query
    position i, key position j + 1 → attends to i − 1, copies its token into PREV. Layer 2's head:
    query the current token, key the previous token → attends to the position right after the current
    token's earlier occurrence, copies that token into TOK (strongly), which the tied unembedding reads."""
    cfg = LanguageModelConfig(
        vocab_size=V, d_model=48, n_layers=2, n_heads=1, max_len=P, shape="gpt2", attention_only=True
    )
    model = LanguageModel(cfg).eval()
    eye = torch.eye(16)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in [model.norm] + [b.input_layernorm for b in model.layers]:
            norm.weight.fill_(1.0)
        model.embed_tokens.weight[:, TOK] = eye
        model.embed_positions.weight[:, POS] = eye
        a1, a2 = model.layers[0].self_attn, model.layers[1].self_attn
        a1.q_proj.weight[0:16, POS] = 50 * eye
        a1.k_proj.weight[0:16, POS] = torch.eye(16).roll(1, dims=0)  # position j → key e_{j+1}
        a1.v_proj.weight[0:16, TOK] = eye
        a1.o_proj.weight[PREV, 0:16] = 0.2 * eye
        a2.q_proj.weight[0:16, TOK] = 50 * eye
        a2.k_proj.weight[0:16, PREV] = eye
        a2.v_proj.weight[0:16, TOK] = eye
        a2.o_proj.weight[TOK, 0:16] = 3.0 * eye
    return model


def test_hand_built_heads_score_near_one_where_built():
    s = induction_scores(_hand_built(), length=8, batch=4)
    assert s.previous_token[0][0] > 0.95 and s.prefix_matching[0][0] < 0.05
    # 15/16: position 0 has no previous token, so layer 1 copies its own token there, and the query at
    # position L (token r_0) splits its attention between positions 0 and 1 (one query in 2L per row)
    assert s.prefix_matching[1][0] == pytest.approx(15 / 16, abs=0.01) and s.previous_token[1][0] < 0.2
    assert s.copying[1][0] > 0.95 and s.copying[0][0] < 0.5
    assert s.best_induction_head()[:2] == (2, 1)
    d = s.to_dict()
    assert d["heads"][1]["layer"] == 2 and d["heads"][1]["head"] == 1
    assert d["heads"][1]["prefix_matching"] == pytest.approx(s.prefix_matching[1][0])


def test_prefix_matching_score_matches_a_plain_loop():
    model = _hand_built()
    with torch.no_grad():
        for p in model.layers[1].self_attn.parameters():
            p.add_(0.3 * torch.randn_like(p))  # a less clean head: the score is not just 1
    s = induction_scores(model, length=6, batch=3, seed=5)
    ids = repeated_random_tokens(V, 6, 3, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        w = model(ids, need_weights=True).attention[1][:, 0].double()  # (B, 12, 12)
    ref = sum(float(w[b, 6 + j, j + 1]) for b in range(3) for j in range(6)) / 18
    assert s.prefix_matching[1][0] == pytest.approx(ref, abs=1e-6)


def test_in_context_learning_score_is_the_loss_difference():
    model = _hand_built()
    ids = repeated_random_tokens(V, 8, 4, generator=torch.Generator().manual_seed(1))
    s = induction_scores(model, length=8, batch=2, text_ids=ids)
    early, late = s.icl_positions
    assert (early, late) == icl_positions(15) == (1, 14)
    with torch.no_grad():
        logits = model(ids).logits.double()
    ref = F.cross_entropy(logits[:, late], ids[:, late + 1]) - F.cross_entropy(logits[:, early], ids[:, early + 1])
    assert s.in_context_learning == pytest.approx(float(ref), abs=1e-4)
    assert s.in_context_learning < -1.0  # the induction head predicts the repeated half


def test_a_random_model_scores_near_chance():
    torch.manual_seed(0)
    cfg = LanguageModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_len=64, attention_only=True)
    s = induction_scores(LanguageModel(cfg), length=16, batch=4)
    uniform_prefix = sum(1 / (i + 1) for i in range(16, 32)) / 16  # uniform causal attention
    uniform_prev = sum(1 / (i + 1) for i in range(1, 32)) / 31
    for layer in range(2):
        for head in range(2):
            assert s.prefix_matching[layer][head] == pytest.approx(uniform_prefix, rel=0.2)
            assert s.previous_token[layer][head] == pytest.approx(uniform_prev, rel=0.2)
            assert 0.3 < s.copying[layer][head] < 0.7


def test_bad_length_names_the_argument():
    cfg = LanguageModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, max_len=8)
    with pytest.raises(ValueError, match="length"):
        induction_scores(LanguageModel(cfg), length=5)
