"""The language model's fast paths against independent references (issue 57, throughput): the fused
attention call (one q/k/v product, ``is_causal``, ``enable_gqa``) against a float64 loop over heads and
positions, values and gradients; the rotary table kept across calls against fresh float64 angles; the
training loss through the chunked output layer against ``F.cross_entropy`` over the model's float64
logits, values and gradients; the checkpoints' parameter names unchanged."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention import CausalSelfAttention, RotaryEmbedding
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.tasks.language_model.loss import next_token_loss, next_token_loss_sum


def _attention_float64(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Causal grouped-query attention in float64, one query head and one position at a time."""
    x = x.double()
    b, n, _ = x.shape
    dh, groups = attn.head_dim, attn.groups
    q = (x @ attn.q_proj.weight.double().T).view(b, n, attn.n_heads, dh)
    k = (x @ attn.k_proj.weight.double().T).view(b, n, attn.n_kv_heads, dh)
    v = (x @ attn.v_proj.weight.double().T).view(b, n, attn.n_kv_heads, dh)
    if attn.rotary is not None:
        inv = attn.rotary.theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (Dh/2,)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv  # (N, Dh/2)
        cos, sin = torch.cat((ang, ang), -1).cos()[:, None], torch.cat((ang, ang), -1).sin()[:, None]  # (N, 1, Dh)

        def rot(t):
            t1, t2 = t[..., : dh // 2], t[..., dh // 2 :]
            return t * cos + torch.cat((-t2, t1), -1) * sin

        q, k = rot(q), rot(k)
    ctx = torch.zeros(b, n, attn.n_heads, dh, dtype=torch.float64)
    for h in range(attn.n_heads):
        g = h // groups
        for i in range(n):
            s = (k[:, : i + 1, g] @ q[:, i, h, :, None]).squeeze(-1) / math.sqrt(dh)  # (B, i + 1)
            ctx[:, i, h] = (s.softmax(-1)[..., None] * v[:, : i + 1, g]).sum(1)
    return ctx.reshape(b, n, -1) @ attn.o_proj.weight.double().T  # (B, N, D)


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_fused_attention_and_its_gradients_match_a_float64_loop(n_kv_heads):
    torch.manual_seed(0)
    attn = CausalSelfAttention(32, 4, n_kv_heads, rotary=RotaryEmbedding(8)).train()
    x = torch.randn(2, 7, 32, requires_grad=True)
    out = attn(x).context  # training, no weights asked for: the fused call
    ref = _attention_float64(attn, x)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    gy = torch.randn_like(out)
    out.backward(gy)
    got = [x.grad.clone(), *(p.grad.clone() for p in (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))]
    x.grad = None
    attn.zero_grad()
    (ref * gy.double()).sum().backward()
    want = [x.grad, attn.q_proj.weight.grad, attn.k_proj.weight.grad, attn.v_proj.weight.grad]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w.float(), atol=1e-4, rtol=1e-4)
    # the general path (asked for the weights) gives the same output
    torch.testing.assert_close(attn(x, need_weights=True).context, out, atol=1e-5, rtol=1e-5)


def test_several_new_queries_after_a_cache_equal_the_full_sequence():
    torch.manual_seed(1)
    attn = CausalSelfAttention(16, 4, 2, rotary=RotaryEmbedding(4)).eval()
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        full = attn(x).context
        cache = attn.new_cache()
        parts = [attn(x[:, :2], cache=cache).context, attn(x[:, 2:5], cache=cache).context]
        parts.append(attn(x[:, 5:], cache=cache).context)
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


def test_the_rotary_table_kept_across_calls_matches_fresh_angles():
    rot = RotaryEmbedding(8, theta=500.0)
    inv = 500.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    for n, offset in [(3, 0), (1, 90), (200, 5), (4, 2), (1, 0)]:  # grows past its first size, then slices
        cos, sin = rot.cos_sin(n, offset)
        ang = torch.arange(offset, offset + n, dtype=torch.float64)[:, None] * inv
        ang = torch.cat((ang, ang), -1)  # (N, D)
        assert cos.shape == (n, 8) and cos.dtype == torch.float32
        torch.testing.assert_close(cos.double(), ang.cos(), atol=2e-5, rtol=0)
        torch.testing.assert_close(sin.double(), ang.sin(), atol=2e-5, rtol=0)
        # the same numbers a new module computes for these positions alone
        fresh = RotaryEmbedding(8, theta=500.0).cos_sin(n, offset)
        assert torch.equal(cos, fresh[0]) and torch.equal(sin, fresh[1])
    assert rot.cos_sin(5, 1, dtype=torch.float64)[0].dtype == torch.float64
    # a table first made under inference mode serves a forward pass that is differentiated later
    late = RotaryEmbedding(8)
    with torch.inference_mode():
        late.cos_sin(4)
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    late(q, q.detach())[0].sum().backward()
    assert q.grad is not None


@pytest.mark.parametrize("tie", [True, False])
def test_the_training_loss_and_its_gradients_match_plain_cross_entropy_in_float64(tie):
    torch.manual_seed(2)
    cfg = LanguageModelConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, tie_embeddings=tie)
    model = LanguageModel(cfg)
    ids = torch.randint(0, 50, (3, 10))
    batch = {"ids": ids[:, :-1], "targets": ids[:, 1:]}
    total, count, extra = next_token_loss_sum(model, batch)
    assert count == 27 and extra == {}
    total.backward()
    got = {k: p.grad.clone() for k, p in model.named_parameters()}
    mean = next_token_loss(model, batch)
    ref_model = LanguageModel(cfg).double()
    ref_model.load_state_dict(model.state_dict())
    logits = ref_model(batch["ids"]).logits  # (3, 9, 50) float64
    ref = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), reduction="sum")
    ref.backward()
    assert total.item() == pytest.approx(ref.item(), rel=1e-5)
    assert mean.item() == pytest.approx(ref.item() / 27, rel=1e-5)
    for name, p in ref_model.named_parameters():
        torch.testing.assert_close(got[name], p.grad.float(), atol=1e-5, rtol=1e-4, msg=name)


def test_checkpoint_names_are_unchanged():
    model = LanguageModel(LanguageModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2))
    names = set(model.state_dict())
    for part in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert f"layers.0.self_attn.{part}.weight" in names
    for part in ("gate_proj", "up_proj", "down_proj"):
        assert f"layers.0.mlp.{part}.weight" in names
    assert not any("qkv" in n for n in names)
