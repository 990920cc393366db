"""The decoder-only language model's attention pieces against references: rotary positions against
a float64 formula, grouped-query attention against torch's fused kernel, RMSNorm and SwiGLU."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention import CausalSelfAttention, RotaryEmbedding, SwiGLU, swiglu_width


def _rotary_float64(x: torch.Tensor, offset: int, theta: float) -> torch.Tensor:
    """Dimension i paired with i + D/2, rotated by p·θ^(-2i/D), in a plain loop over pairs."""
    x = x.double()
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        ang = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64) * theta ** (-2 * i / d)
        c, s = torch.cos(ang), torch.sin(ang)
        out[..., i] = x[..., i] * c - x[..., i + d // 2] * s
        out[..., i + d // 2] = x[..., i + d // 2] * c + x[..., i] * s
    return out


def test_rotary_matches_float64_formula_and_depends_on_relative_position():
    torch.manual_seed(0)
    rot = RotaryEmbedding(8, theta=100.0)
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 1, 5, 8)
    rq, rk = rot(q, k, offset=7)
    torch.testing.assert_close(rq.double(), _rotary_float64(q, 7, 100.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(rk.double(), _rotary_float64(k, 7, 100.0), atol=1e-5, rtol=0)
    # q_m·k_n depends on m - n only: shifting both positions keeps the scores
    a = rot(q[:, :1], k, offset=0)
    b = rot(q[:, :1], k, offset=11)
    torch.testing.assert_close(a[0] @ a[1].transpose(-2, -1), b[0] @ b[1].transpose(-2, -1), atol=1e-4, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_grouped_query_attention_matches_torch_sdpa(n_kv_heads):
    torch.manual_seed(1)
    attn = CausalSelfAttention(32, 4, n_kv_heads).eval()
    x = torch.randn(2, 6, 32)
    out, w = attn(x, need_weights=True)
    q = attn.q_proj(x).view(2, 6, 4, 8).transpose(1, 2)
    k = attn.k_proj(x).view(2, 6, n_kv_heads, 8).transpose(1, 2)
    v = attn.v_proj(x).view(2, 6, n_kv_heads, 8).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref = attn.o_proj(ref.transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 6))
    assert torch.all(w.triu(1) == 0)
    # without weights (the fused path) the output is the same
    torch.testing.assert_close(attn(x).context, out, atol=1e-5, rtol=1e-5)


def test_cached_steps_equal_the_full_sequence():
    torch.manual_seed(2)
    attn = CausalSelfAttention(16, 4, 2, rotary=RotaryEmbedding(4)).eval()
    x = torch.randn(1, 5, 16)
    full = attn(x).context
    cache = attn.new_cache()
    with torch.no_grad():
        first = attn(x[:, :3], cache=cache).context
        steps = [attn(x[:, t : t + 1], cache=cache).context for t in range(3, 5)]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, atol=1e-5, rtol=1e-5)


def test_rms_norm_is_torch_and_swiglu_matches_its_formula():
    torch.manual_seed(3)
    norm = torch.nn.RMSNorm(16, eps=1e-5)
    x = torch.randn(3, 16, dtype=torch.float64)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm.double()(x), ref)
    mlp = SwiGLU(16, 48)
    y = torch.randn(2, 4, 16)
    g, u = y @ mlp.gate_proj.weight.T, y @ mlp.up_proj.weight.T
    torch.testing.assert_close(mlp(y), (g / (1 + torch.exp(-g)) * u) @ mlp.down_proj.weight.T, atol=1e-6, rtol=1e-5)
    assert swiglu_width(256) == 704 and swiglu_width(64) == math.ceil(64 * 8 / 3 / 32) * 32


@pytest.mark.parametrize("kwargs", [{"n_heads": 3}, {"n_kv_heads": 3}])
def test_bad_heads_name_the_argument(kwargs):
    args = {"n_heads": 4, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        CausalSelfAttention(16, args["n_heads"], args.get("n_kv_heads"))
