"""attnkit's CPU dropout (attnkit.attention.dropout) and the attention training path that uses it.

References: the mask rebuilt from the same seed with plain integer arithmetic on the generator's 64-bit
draws (four unsigned 16-bit pieces each, a piece ``u`` kept when ``(u + 2¹⁵) mod 2¹⁶ ≥ round(p·2¹⁶)``), or
with ``torch.rand`` (``u >= p``) for a ``p`` off that grid; attention computed in float64 by hand
(softmax, mask, dropout, product) or by ``torch.nn.functional``."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit.attention.dropout as attnkit_dropout
from attnkit.attention import MultiHeadAttention, attend
from attnkit.attention.dropout import Dropout, dropout


def test_eval_and_zero_p_are_the_identity():
    x = torch.randn(4, 5)
    assert dropout(x, 0.3, training=False) is x
    assert torch.equal(dropout(x, 0.0, training=True), x)
    d = Dropout(0.3).eval()
    assert torch.equal(d(x), x)


def reference_keep(shape, p: float, seed: int) -> tuple[torch.Tensor, float]:
    """The keep mask and the effective drop rate dropout draws for ``shape`` after ``torch.manual_seed(seed)``,
    rebuilt from the 64-bit draws with Python integers (no views, no int16 reading)."""
    n = math.prod(shape)
    torch.manual_seed(seed)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1).tolist()
    drop = round(p * 65536)
    keep = []
    for w in words:
        w %= 2**64  # the draw's bits as an unsigned number
        for piece in range(4):  # little-endian 16-bit pieces, as the tensor's bytes hold them
            u = (w >> (16 * piece)) & 0xFFFF
            keep.append((u + 32768) % 65536 >= drop)
    return torch.tensor(keep[:n]).view(shape), drop / 65536


@pytest.mark.parametrize("p", [0.25, 0.1, 0.3])
def test_mask_is_rebuilt_from_the_seeded_generator_s_16_bit_draws(p):
    x = torch.randn(3, 7, 11)  # 231 entries: not a multiple of 4
    keep, p_eff = reference_keep(x.shape, p, seed=5)
    assert abs(p_eff - p) <= 2**-17
    torch.manual_seed(5)
    y = dropout(x, p, training=True)
    assert torch.allclose(y, torch.where(keep, x / (1.0 - p_eff), torch.zeros_like(x)), rtol=1e-6, atol=0)


@pytest.mark.parametrize("p", [0.01, 1 - 2**-18])
def test_a_p_off_the_16_bit_grid_is_drawn_as_u_at_least_p(p):
    """0.01 · 2¹⁶ = 655.36: the grid would move p by 5e-4 of itself; 1 - 2⁻¹⁸ would round to a drop rate of 1."""
    x = torch.randn(3, 7, 11)
    torch.manual_seed(5)
    keep = torch.rand(x.shape) >= p  # the independent reference of the mask
    torch.manual_seed(5)
    y = dropout(x, p, training=True)
    assert torch.equal(y, torch.where(keep, x * (1.0 / (1.0 - p)), torch.zeros_like(x)))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.01])
def test_keep_rate_and_gradient(p):
    n = 200_000
    x = (torch.rand(n) + 0.5).requires_grad_(True)  # no zeros: a dropped entry is exactly 0
    y = dropout(x, p, training=True)
    kept = y.detach() != 0
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(int(kept.sum()) - n * (1 - p)) < 6 * sigma
    assert torch.allclose(y[kept], x.detach()[kept] / (1 - p))
    y.sum().backward()
    assert torch.allclose(x.grad, kept.double().float() / (1 - p))


def test_module_is_a_torch_dropout_without_state():
    d = Dropout(0.2)
    assert isinstance(d, torch.nn.Dropout) and d.p == 0.2 and not d.state_dict()
    assert Dropout(0.2, inplace=True)(torch.ones(3)).shape == (3,)  # in place: torch's own dropout


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_draws_the_same_mask_and_scales_as_torch_does(dtype):
    """autocast's layers hand dropout bf16/fp16 tensors: the same 16-bit mask as float32, and the kept
    values times 1/(1 - p) rounded to the dtype, as ``torch.nn.functional.dropout`` scales them."""
    x = (torch.rand(50, 40) + 0.5).to(dtype).requires_grad_(True)
    assert attnkit_dropout.uses_fast_dropout(x, 0.1, True)
    keep, p_eff = reference_keep(x.shape, 0.1, seed=3)
    torch.manual_seed(3)
    y = dropout(x, 0.1, training=True)
    assert y.dtype == dtype
    scale = torch.tensor(1.0 / (1.0 - p_eff)).to(dtype)  # the scale in the tensor's own dtype
    assert torch.equal(y, torch.where(keep, x.detach() * scale, torch.zeros_like(x)))
    y.float().sum().backward()
    assert torch.equal(x.grad, torch.where(keep, scale, torch.zeros_like(scale)).expand_as(x))


def test_other_devices_keep_torch_dropout(monkeypatch):
    monkeypatch.setattr(attnkit_dropout, "FAST_DEVICES", ())
    assert not attnkit_dropout.uses_fast_dropout(torch.randn(3), 0.1, True)
    y = dropout(torch.ones(1000), 0.5, training=True)
    assert bool(((y == 0) | (y == 2)).all())


def _attention_reference(q, k, v, mask, p, keep):
    """softmax(q kᵀ/√d) with the mask, dropped by ``keep`` and scaled, times v, in float64."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    if keep is not None:
        w = w * keep / (1 - p)
    return w @ v.double()


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_attention_training_path_matches_float64_reference(p):
    """The training path (explicit products with the CPU dropout when p > 0, torch's fused kernel when
    p = 0) against float64 by hand: outputs and all three gradients to 1e-5."""
    torch.manual_seed(0)
    B, H, N, D = 3, 2, 6, 8
    q, k, v = (torch.randn(B, H, N, D, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([6, 3, 1])
    mask = (torch.arange(N)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, N) True = real key
    keep, p_eff = reference_keep((B, H, N, N), p, seed=9) if p else (None, 0.0)
    keep = keep.double() if p else None
    torch.manual_seed(9)
    out, _ = attend(q, k, v, mask=mask, dropout_p=p, training=True)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)

    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = _attention_reference(q64, k64, v64, mask, p_eff, keep)
    want = torch.autograd.grad(ref, (q64, k64, v64), grad_out.double())
    assert torch.allclose(out.double(), ref, atol=1e-5)
    for g, w in zip(got, want):
        assert torch.allclose(g.double(), w, atol=1e-5)


def test_multihead_attention_dropout_is_seeded_and_acts_only_in_training():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, dropout=0.3)
    theirs = ours.to_torch().eval()
    x = torch.randn(2, 5, 16)
    assert torch.allclose(ours.eval()(x)[0], theirs(x, x, x, need_weights=False)[0], atol=1e-5)
    ours.train()
    torch.manual_seed(1)
    a = ours(x)[0]
    torch.manual_seed(1)
    assert torch.equal(a, ours(x)[0])  # reproducible under the seed
    assert not torch.allclose(a, ours.eval()(x)[0])  # and dropout did act


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_gradients_match_torch_mha_in_float64(causal):
    """The packed self-attention's training path (one q/k/v GEMM split by ``unbind``) against
    ``torch.nn.MultiheadAttention`` with the same weights: output and every parameter's and the
    input's gradient, float64, with a key padding mask."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4).double().train()
    theirs = ours.to_torch().double().train()
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    real = torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None]  # (B, N) True = real token
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    a = ours(xa, key_padding_mask=real, causal=causal)[0]
    tmask = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1) if causal else None  # torch: True = blocked
    b = theirs(xb, xb, xb, key_padding_mask=~real, attn_mask=tmask, need_weights=False)[0]
    g = torch.randn_like(a)
    (a * g).sum().backward()
    (b * g).sum().backward()
    assert torch.allclose(a, b, atol=1e-10)
    assert torch.allclose(xa.grad, xb.grad, atol=1e-10)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-10), name
