"""induction_scores(copying_tokens=n): the copying score over a seeded sample of tokens, each ranked against every
non-special token, against a plain per-token loop (what a training run's validation logs on a large vocabulary)."""

import pytest
import torch

from attnkit.models.induction import induction_scores, repeated_random_tokens
from attnkit.models.language_model import LanguageModel, LanguageModelConfig

V, SPECIAL = 60, (0, 1, 2, 3)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(3)
    m = LanguageModel(LanguageModelConfig(vocab_size=V, d_model=16, n_layers=2, n_heads=2, max_len=16)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.5)  # far from the 0.02 initialisation: head scores away from 0.5
    return m


@torch.no_grad()
def _fractions(model, layer, head):
    """Per non-special token t, one at a time: the share of the other non-special tokens whose logit is below t's
    when the head's OV circuit reads t alone."""
    block, attn = model.layers[layer], model.layers[layer].self_attn
    dh = attn.head_dim
    tokens = [t for t in range(V) if t not in SPECIAL]
    out = []
    for t in tokens:
        x = block.input_layernorm(model.embed_tokens.weight[t])  # (D,)
        v = attn.v_proj(x)[head * dh : (head + 1) * dh]  # (Dh,), as many kv heads as heads here
        o = attn.o_proj.weight[:, head * dh : (head + 1) * dh] @ v  # (D,)
        logits = model.lm_head(model.norm(o))
        out.append(sum(float(logits[u] < logits[t]) for u in tokens if u != t) / (len(tokens) - 1))
    return torch.tensor(out, dtype=torch.float64)


def test_all_tokens_and_a_sample_match_the_plain_loop(model):
    full = induction_scores(model, length=4, batch=2)
    whole = induction_scores(model, length=4, batch=2, copying_tokens=V)  # more than there are: all of them
    gen = torch.Generator().manual_seed(0)  # the documented draw: the sequences first, then the sample
    repeated_random_tokens(V, 4, 2, generator=gen)
    picked = torch.randperm(V - len(SPECIAL), generator=gen)[:10]
    sampled = induction_scores(model, length=4, batch=2, copying_tokens=10)
    for layer in (0, 1):
        for head in (0, 1):
            frac = _fractions(model, layer, head)
            assert full.copying[layer][head] == pytest.approx(frac.mean().item(), abs=1e-6)
            assert whole.copying[layer][head] == full.copying[layer][head]
            assert sampled.copying[layer][head] == pytest.approx(frac[picked].mean().item(), abs=1e-6)
    assert sampled.prefix_matching == full.prefix_matching  # the sample is drawn after the sequences
    assert sampled.copying != full.copying
    with pytest.raises(ValueError, match="copying_tokens"):
        induction_scores(model, length=4, copying_tokens=0)
