"""Attention layers against torch's modules (copied weights) and plain references."""

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

from attnkit import (
    Attention,
    AttentionPooling,
    LearnedPositionalEncoding,
    MultiHeadAttention,
    SelfAttention,
    SelfAttentiveEncoder,
    SinusoidalPositionalEncoding,
    SpatialSelfAttention,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    attend,
    causal_mask,
    padding_mask,
)
from attnkit.attention import scores as attnkit_scores
from attnkit.attention.masks import to_torch_mha_mask


# ---- MultiHeadAttention vs torch.nn.MultiheadAttention -----------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kv_dims", [(None, None), (6, 10)])
def test_mha_matches_torch_with_copied_weights_and_masks(batch_first, kv_dims):
    torch.manual_seed(0)
    kdim, vdim = kv_dims
    theirs = nn.MultiheadAttention(16, 4, kdim=kdim, vdim=vdim, batch_first=batch_first).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()  # non-zero biases too
    ours = MultiHeadAttention.from_torch(theirs).eval()
    B, Nq, Nk = 3, 5, 7
    q = torch.randn(B, Nq, 16)
    k = torch.randn(B, Nk, kdim or 16)
    v = torch.randn(B, Nk, vdim or 16)
    lengths = torch.tensor([7, 4, 1])
    kpm = padding_mask(lengths, Nk)  # True = real
    attn_mask = torch.rand(Nq, Nk) < 0.8
    attn_mask[:, 0] = True  # keep every row non-empty (torch gives NaN for empty rows)
    tq, tk, tv = (q, k, v) if batch_first else (q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
    ref, ref_w = theirs(
        tq,
        tk,
        tv,
        key_padding_mask=to_torch_mha_mask(kpm),
        attn_mask=to_torch_mha_mask(attn_mask),
        need_weights=True,
        average_attn_weights=False,
    )
    if not batch_first:
        ref = ref.transpose(0, 1)
    out, w = ours(q, k, v, key_padding_mask=kpm, mask=attn_mask, need_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
    assert w.shape == (B, 4, Nq, Nk)
    out_fast, none = ours(q, k, v, key_padding_mask=kpm, mask=attn_mask)
    assert none is None
    torch.testing.assert_close(out_fast, ref, rtol=1e-4, atol=1e-4)
    # and back to torch
    back = ours.to_torch(batch_first=batch_first).eval()
    again, _ = back(tq, tk, tv, key_padding_mask=to_torch_mha_mask(kpm), attn_mask=to_torch_mha_mask(attn_mask))
    torch.testing.assert_close(again, ref if batch_first else ref.transpose(0, 1), rtol=1e-5, atol=1e-5)


def test_mha_gradients_match_torch():
    torch.manual_seed(1)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 6, 8)
    ref, _ = theirs(x, x, x, need_weights=False, attn_mask=to_torch_mha_mask(causal_mask(6)))
    out, _ = ours(x, causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    ref.square().sum().backward()
    out.square().sum().backward()
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, dict(theirs.named_parameters())[name].grad, rtol=1e-4, atol=1e-5)


def test_mha_average_weights_and_errors():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    _, w = m(x, need_weights=True)
    _, wa = m(x, need_weights=True, average_weights=True)
    torch.testing.assert_close(wa, w.mean(1))
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(4\)"):
        MultiHeadAttention(10, 4)
    with pytest.raises(
        ValueError, match=r"query must have shape \(B, Nq, embed_dim\) with last size 8, got \(2, 3, 7\)"
    ):
        m(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match=r"query must have shape .*got \(1, 2, 3, 8\) \(4-D\)"):
        m(torch.randn(1, 2, 3, 8))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, Nk\) = \(2, 3\), got \(2, 4\)"):
        m(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"query batch size 2 .* key batch size 1"):
        m(x, x[:1])
    with pytest.raises(TypeError, match=r"key_padding_mask must be bool"):
        m(x, key_padding_mask=torch.ones(2, 3))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 8), seed=st.integers(0, 1000))
def test_property_self_attention_is_permutation_equivariant(n, seed):
    torch.manual_seed(seed)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, n, 8)
    perm = torch.randperm(n)
    out, w = m(x, need_weights=True)
    out_p, w_p = m(x[:, perm], need_weights=True)
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w_p, w[:, :, perm][:, :, :, perm], rtol=1e-5, atol=1e-6)
    sa = SelfAttention(8, score="additive").eval()
    torch.testing.assert_close(sa(x[:, perm])[0], sa(x)[0][:, perm], rtol=1e-5, atol=1e-5)


def test_mha_kv_cache_equals_full_causal_pass():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    full, _ = m(x, causal=True)
    cache = m.new_cache()
    steps = [m(x[:, t : t + 1], cache=cache)[0] for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert len(cache) == 5
    mem = torch.randn(2, 4, 8)
    cross = m.new_cache(static=True)
    a = m(x[:, :1], mem, mem, cache=cross)[0]
    b = m(x[:, 1:2], cache=cross)[0]  # keys/values reused from the cache
    torch.testing.assert_close(torch.cat([a, b], 1), m(x[:, :2], mem, mem)[0], rtol=1e-5, atol=1e-5)
    prefilled = m.new_cache(mem)  # projected once, up front
    torch.testing.assert_close(m(x[:, 1:2], cache=prefilled)[0], b, rtol=0, atol=0)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        m(x, cache={})


# ---- Attention (query over inputs) ------------------------------------------------------------
@pytest.mark.parametrize("score", ["additive", "dot", "general", "scaled_dot"])
def test_attention_layer_single_query_and_prepared_keys(score):
    torch.manual_seed(0)
    att = Attention(6, 6, score=score)
    h = torch.randn(3, 7, 6)
    s = torch.randn(3, 6)
    kpm = padding_mask(torch.tensor([7, 3, 5]), 7)
    ctx, w = att(s, h, key_padding_mask=kpm, need_weights=True)
    assert ctx.shape == (3, 6) and w.shape == (3, 7)
    assert torch.all(w[1, 3:] == 0)
    e = att.score(s.unsqueeze(1), h).squeeze(1)  # (B, Nk) through the module's own forward
    ref_w = torch.softmax(e.masked_fill(~kpm, float("-inf")), -1)
    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ctx, (ref_w.unsqueeze(-1) * h).sum(1), rtol=1e-5, atol=1e-5)
    prep = att.prepare(h)
    ctx2, _ = att(s, prepared=prep, key_padding_mask=kpm)
    torch.testing.assert_close(ctx2, ctx)


def test_attention_layer_projections_hard_and_errors():
    att = Attention(4, 5, 3, score="additive", hidden_dim=8, key_proj_dim=6, value_proj_dim=2)
    q, h, v = torch.randn(2, 3, 4), torch.randn(2, 7, 5), torch.randn(2, 7, 3)
    ctx, w = att(q, h, v, need_weights=True)
    assert ctx.shape == (2, 3, 2) and w.shape == (2, 3, 7)
    ctx_h, w_h = att(q, h, v, need_weights=True, hard="argmax")
    assert torch.all(w_h.sum(-1) == 1)
    r = att.hard(q, h, v, mode="sample", generator=torch.Generator().manual_seed(0))
    assert r.log_prob.shape == (2, 3) and torch.all(r.log_prob <= 0)
    a = att.hard(q, h, v, mode="argmax")
    torch.testing.assert_close(a.context, ctx_h)
    torch.testing.assert_close(a.probs, w)
    single = att.hard(q[:, 0], prepared=att.prepare(h, v), mode="argmax")  # one query per row, as a decoder step
    torch.testing.assert_close(single.context, ctx_h[:, 0])
    with pytest.raises(ValueError, match=r"inputs must have shape \(B, Nk, Dk\) with last size 5, got \(2, 7, 4\)"):
        att(q, torch.randn(2, 7, 4), v)
    with pytest.raises(ValueError, match=r"query batch size 1"):
        att(q[:1], h, v)


# ---- other layers -----------------------------------------------------------------------------
def test_attention_pooling_and_spatial_self_attention():
    torch.manual_seed(0)
    pool = AttentionPooling(8, num_queries=3, num_heads=2)
    x = torch.randn(2, 5, 8)
    kpm = padding_mask(torch.tensor([5, 2]))
    y, w = pool(x, key_padding_mask=kpm, need_weights=True)
    assert y.shape == (2, 3, 8) and w.shape == (2, 2, 3, 5)
    assert torch.all(w[1, :, :, 2:] == 0)

    sp = SpatialSelfAttention(16)
    fmap = torch.randn(2, 16, 3, 4)
    out, w = sp(fmap, need_weights=True)
    torch.testing.assert_close(out, fmap)  # γ starts at 0: identity
    assert w.shape == (2, 12, 12)
    with torch.no_grad():
        sp.gamma.fill_(0.5)
    out, w = sp(fmap, need_weights=True)
    f = sp.f(fmap).flatten(2).transpose(1, 2)
    g = sp.g(fmap).flatten(2).transpose(1, 2)
    h = sp.h(fmap).flatten(2).transpose(1, 2)
    ref_w = torch.softmax(f @ g.transpose(1, 2), -1)
    o = (ref_w @ h).transpose(1, 2).reshape(2, 16, 3, 4)
    torch.testing.assert_close(out, 0.5 * sp.o(o) + fmap, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("base", ["gru", "lstm", "cnn", "linear"])
def test_self_attentive_encoder_concatenates_h_and_c(base):
    torch.manual_seed(0)
    enc = SelfAttentiveEncoder(5, 6, base=base)
    x = torch.randn(2, 4, 5)
    lengths = torch.tensor([4, 2])
    y, w = enc(x, lengths, need_weights=True)
    assert y.shape == (2, 4, 12)
    h, c = y[..., :6], y[..., 6:]
    # c_i = Σ_j a_ij h_j over the real positions, computed with a plain loop
    for b in range(2):
        n = int(lengths[b])
        for i in range(n):
            e = torch.stack([(h[b, i] * h[b, j]).sum() / math.sqrt(6) for j in range(n)])
            a = torch.softmax(e, 0)
            torch.testing.assert_close(c[b, i], (a.unsqueeze(1) * h[b, :n]).sum(0), rtol=1e-5, atol=1e-5)
        assert torch.all(y[b, n:] == 0) and torch.all(w[b, :, n:] == 0)
    if base in ("gru", "lstm"):
        # padding must not change the real positions
        y1, _ = enc(x[1:2, :2], torch.tensor([2]))
        torch.testing.assert_close(y1[0], y[1, :2], rtol=1e-5, atol=1e-5)


def test_positional_encodings():
    pe = SinusoidalPositionalEncoding(6)
    x = torch.zeros(1, 4, 6)
    out = pe(x)
    for p in range(4):
        for i in range(3):
            assert math.isclose(float(out[0, p, 2 * i]), math.sin(p / 10000 ** (2 * i / 6)), abs_tol=1e-6)
            assert math.isclose(float(out[0, p, 2 * i + 1]), math.cos(p / 10000 ** (2 * i / 6)), abs_tol=1e-6)
    torch.testing.assert_close(pe(x[:, :1], offset=3), out[:, 3:4])
    assert pe(torch.zeros(1, 3000, 6)).shape == (1, 3000, 6)  # grows beyond the initial cache
    lpe = LearnedPositionalEncoding(6, max_len=5)
    assert lpe(x).shape == (1, 4, 6)
    with pytest.raises(ValueError, match=r"exceed the learned table \(max_len=5\)"):
        lpe(x, offset=2)
    with pytest.raises(ValueError, match=r"dim must be even"):
        SinusoidalPositionalEncoding(5)
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 6\), got \(4, 6\)"):
        pe(torch.zeros(4, 6))


# ---- Transformer layers vs torch ---------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = TransformerEncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 5, 16)
    kpm = padding_mask(torch.tensor([5, 3]))
    with torch.no_grad():
        ref = theirs(x, src_key_padding_mask=to_torch_mha_mask(kpm))
        out, _ = ours(x, key_padding_mask=kpm)
    torch.testing.assert_close(out[0], ref[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out[1, :3], ref[1, :3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch_and_cache(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = TransformerDecoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    ours.load_state_dict(theirs.state_dict())
    tgt, mem = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    mkpm = padding_mask(torch.tensor([6, 4]))
    with torch.no_grad():
        ref = theirs(
            tgt,
            mem,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
            memory_key_padding_mask=to_torch_mha_mask(mkpm),
        )
        out, (sw, cw) = ours(tgt, mem, memory_key_padding_mask=mkpm, need_weights=True)
        cache = ours.new_cache()
        steps = [ours(tgt[:, t : t + 1], mem, memory_key_padding_mask=mkpm, cache=cache)[0] for t in range(5)]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(steps, 1), out, rtol=1e-4, atol=1e-4)
    assert sw.shape == (2, 4, 5, 5) and cw.shape == (2, 4, 5, 6)
    assert torch.all(sw.triu(1) == 0) and torch.all(cw[1, :, :, 4:] == 0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("beams", [1, 3])
def test_decoder_step_is_forward_with_caches_bit_for_bit(norm_first, beams):
    """``TransformerDecoder.step`` (what a search runs) gives exactly the numbers of ``forward`` with the same
    caches: outputs, the last layer's cross-attention and the caches it leaves, also with ``beams`` query rows
    per row of the cross caches (beam search) and source padding."""
    torch.manual_seed(0)
    dec = TransformerDecoder(16, 4, 3, 32, dropout=0.1, norm_first=norm_first).eval()
    mem, mkpm = torch.randn(2, 6, 16), padding_mask(torch.tensor([6, 4]))
    tgt = torch.randn(2 * beams, 4, 16)
    with torch.no_grad():
        general, lean = dec.new_cache(mem), dec.new_cache(mem)
        for t in range(4):
            general = [c.copy() for c in general]
            lean = [c.copy() for c in lean]
            x = tgt[:, t : t + 1]
            ref = dec(x, mem, memory_key_padding_mask=mkpm, causal=False, cache=general, need_weights="last")
            out, weights = dec.step(x, lean, mkpm)
            assert torch.equal(out, ref.output) and torch.equal(weights, ref.cross_weights[-1])
            assert weights.shape == (2 * beams, 4, 1, 6) and float(weights[beams:, :, :, 4:].abs().max()) == 0.0
        for g, c in zip(general, lean):
            assert torch.equal(g.self_attn.k, c.self_attn.k) and torch.equal(g.self_attn.v, c.self_attn.v)
    with pytest.raises(ValueError, match="projected"):
        dec.step(tgt[:, :1], dec.new_cache(), mkpm)  # cross-attention keys not yet projected
    with pytest.raises(ValueError, match="eval mode"):
        dec.train().step(tgt[:, :1], dec.new_cache(mem), mkpm)


def test_stacks_return_per_layer_weights_and_causality():
    torch.manual_seed(0)
    enc = TransformerEncoder(8, 2, 2, 16, dropout=0.0, norm_first=True).eval()
    dec = TransformerDecoder(8, 2, 3, 16, dropout=0.0).eval()
    src, tgt = torch.randn(1, 4, 8), torch.randn(1, 6, 8)
    mem, ew = enc(src, need_weights=True)
    out, sws, cws = dec(tgt, mem, need_weights=True)
    assert len(ew) == 2 and len(sws) == 3 and len(cws) == 3
    tgt2 = tgt.clone()
    tgt2[:, 4:] += 5.0
    out2 = dec(tgt2, mem).output
    torch.testing.assert_close(out2[:, :4], out[:, :4])  # the future never leaks into the past
    assert not torch.allclose(out2[:, 4:], out[:, 4:])


def test_attend_on_mha_heads_matches_manual_heads():
    # heads are batch dims: attnkit's per-head weights equal a loop over heads
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    _, w = m(x, need_weights=True)
    q, k, v = m._project_qkv(x, x, x)
    for h in range(2):
        torch.testing.assert_close(w[0, h], attend(q[0, h], k[0, h], v[0, h]).weights)


def test_mha_accepts_unbatched_inputs_like_torch():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    x, mem = torch.randn(3, 8), torch.randn(5, 8)
    ref, ref_w = theirs(x, mem, mem, average_attn_weights=False)
    out, w = ours(x, mem, mem, need_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
    import attnkit

    assert attnkit.scores is attnkit_scores  # one module, reachable as attnkit.scores
