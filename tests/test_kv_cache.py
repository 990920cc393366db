"""The decoder's key/value cache in reused buffers, against plain tensors; cross-attention shared by the
beams of a sentence, against one copy per beam; the Transformer's reorder, against a per-row state."""

import dataclasses
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.attention import KVCache, MultiHeadAttention
from attnkit.attention.transformer import DecoderLayerCache
from attnkit.decoding import reorder_state
from attnkit.models.transformer import TransformerConfig, TransformerTranslator

H, DH = 2, 3


def _rand(rows, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, H, n, DH, generator=g), torch.randn(rows, H, n, DH, generator=g)


def _same(cache, ref):
    k, v = ref
    assert len(cache) == k.shape[2]
    torch.testing.assert_close(cache.k, k, rtol=0, atol=0)
    torch.testing.assert_close(cache.v, v, rtol=0, atol=0)


# one operation: ("extend", which, n) a copy of cache `which` gets n more positions (a decoder step);
# ("reorder", which, index seed, rows) rows of cache `which`; ("drop", which) forget a cache
_op = st.one_of(
    st.tuples(st.just("extend"), st.integers(0, 99), st.integers(1, 2)),
    st.tuples(st.just("reorder"), st.integers(0, 99), st.integers(0, 10**6), st.integers(1, 5)),
    st.tuples(st.just("drop"), st.integers(0, 99)),
)


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 4), ops=st.lists(_op, min_size=1, max_size=30))
def test_every_cache_keeps_describing_its_keys_and_values(rows, ops):
    """Any mix of steps, branches (stepping one state twice), reorders and dropped states: every
    cache still alive holds exactly what plain ``torch.cat`` / ``index_select`` tensors hold."""
    k, v = _rand(rows, 1, 0)
    live = [(KVCache(k, v), (k, v))]
    for i, op in enumerate(ops):
        cache, (rk, rv) = live[op[1] % len(live)]
        if op[0] == "extend":
            nk, nv = _rand(rk.shape[0], op[2], i + 1)
            new = cache.copy()
            new.extend(nk, nv)
            live.append((new, (torch.cat([rk, nk], 2), torch.cat([rv, nv], 2))))
        elif op[0] == "reorder":
            g = torch.Generator().manual_seed(op[2])
            index = torch.randint(0, rk.shape[0], (op[3],), generator=g)
            live.append((cache.index_select(index), (rk[index], rv[index])))
        elif len(live) > 1:
            del live[op[1] % len(live)]
        for c, ref in live:
            _same(c, ref)


def test_two_steps_from_one_reordered_state_do_not_overwrite_each_other():
    """After a reorder the buffer has room for one more position: the first append takes it in
    place, the second (a branch from the same state) must copy instead of writing there too."""
    k, v = _rand(2, 1, 0)
    c = KVCache(k, v).index_select(torch.tensor([1, 0]))
    a, b = c.copy(), c.copy()
    a.extend(torch.ones(2, H, 1, DH), torch.ones(2, H, 1, DH))
    b.extend(torch.zeros(2, H, 1, DH), torch.zeros(2, H, 1, DH))
    assert torch.all(a.k[:, :, 1] == 1) and torch.all(b.k[:, :, 1] == 0) and len(c) == 1
    torch.testing.assert_close(a.k[:, :, :1], k[[1, 0]], rtol=0, atol=0)


def test_beam_steps_reuse_two_buffers():
    """Steps (copy, append) and reorders, the old state dropped each time as beam search does: the
    gather writes into the storage the step before read (two storages in turn, a new one only when
    the cache outgrows them), and the cache the attention reads is one contiguous buffer."""
    k, v = _rand(4, 8, 0)
    cache, ref = KVCache(k, v), (k, v)
    pointers = []
    for t in range(16):
        index = torch.randperm(4, generator=torch.Generator().manual_seed(t))
        cache, ref = cache.index_select(index), (ref[0][index], ref[1][index])
        cache = cache.copy()
        nk, nv = _rand(4, 1, 100 + t)
        got_k, _ = cache.extend(nk, nv)
        ref = (torch.cat([ref[0], nk], 2), torch.cat([ref[1], nv], 2))
        assert got_k.is_contiguous()
        _same(cache, ref)
        pointers.append(cache.k.untyped_storage().data_ptr())
        assert len(cache._family) <= 3
    assert all(a != b for a, b in itertools.pairwise(pointers))  # never gathered in place
    reused = sum(pointers[t] == pointers[t - 2] for t in range(2, 16))
    assert reused >= 10, pointers  # 8 -> 24 positions: a few new storages as the cache grows, the rest reused


def test_caches_under_autograd_stay_differentiable():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    cache = m.new_cache()
    steps = torch.cat([m(x[:, t : t + 1], cache=cache)[0] for t in range(4)], 1)
    full, _ = m(x, causal=True)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad(steps.sum(), x)
    (g_full,) = torch.autograd.grad(full.sum(), x)
    torch.testing.assert_close(g, g_full, rtol=1e-5, atol=1e-6)


# -- cross-attention: the beams of a sentence share its keys ---------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
def test_rows_sharing_a_static_cache_row_equal_one_copy_per_row(need_weights):
    torch.manual_seed(1)
    m = MultiHeadAttention(8, 2).eval()
    memory = torch.randn(3, 5, 8)  # (A, S, E): 3 sentences
    pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])  # (A, S)
    q = torch.randn(3 * 4, 2, 8)  # 4 beams per sentence, 2 queries each
    with torch.no_grad():
        got, w = m(q, cache=m.new_cache(memory), key_padding_mask=pad, need_weights=need_weights)
        per_row = m.new_cache(memory.repeat_interleave(4, 0))
        want, w_want = m(q, cache=per_row, key_padding_mask=pad.repeat_interleave(4, 0), need_weights=need_weights)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    if need_weights:
        torch.testing.assert_close(w, w_want, rtol=1e-6, atol=1e-7)
        assert w.shape == (12, 2, 2, 5) and torch.all(w[4:8, :, :, 3:] == 0)
    else:
        assert w is None
    with pytest.raises(ValueError, match="multiple of the cache's 3 rows"):
        m(torch.randn(7, 1, 8), cache=m.new_cache(memory))


# -- the Transformer's reorder -------------------------------------------------------------------------


def _model():
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=20, d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32, dropout=0.0
    )
    return TransformerTranslator(cfg).eval()


def _per_row(state):
    """The same state with one memory row per decoder row (what a reorder without sharing gives)."""
    source = torch.arange(state.rows) // state.beams
    cache = [
        DecoderLayerCache(c.self_attn, c.cross_attn.index_select(source) if state.beams > 1 else c.cross_attn)
        for c in state.cache
    ]
    return dataclasses.replace(
        state, memory=state.memory[source], memory_mask=state.memory_mask[source], cache=cache, beams=1
    )


def test_reorder_shares_the_source_among_blocks_of_beams():
    m = _model()
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0], [11, 12, 13, 0]])
    lens = torch.tensor([4, 2, 3])
    with torch.no_grad():
        s = m.start(src, lens)
        _, s, _ = m.step(torch.full((3,), 1), s)
        expanded = m.reorder(s, torch.tensor([0, 0, 1, 1, 2, 2]))  # 2 beams per sentence
        assert expanded.beams == 2 and expanded.memory is s.memory  # the sources kept, not copied
        plain = reorder_state(s, torch.tensor([0, 0, 1, 1, 2, 2]))  # the generic per-row reorder
        tokens = torch.tensor([3, 4, 5, 6, 7, 8])
        lp, s2, attn = m.step(tokens, expanded)
        lp_ref, s2_ref, attn_ref = m.step(tokens, plain)
        torch.testing.assert_close(lp, lp_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(attn, attn_ref, rtol=1e-5, atol=1e-6)
        for index, beams, sources in (
            ([3, 2, 5, 4], 2, 2),  # sentence 0 finished: two sentences left, still 2 beams each
            ([1, 1, 3, 2, 4, 4], 2, 3),  # beams moved within their sentences
            ([5, 0, 3], 1, 3),  # not blocks of one source: one memory row per decoder row
        ):
            index = torch.tensor(index)
            r = m.reorder(s2, index)
            assert r.beams == beams and r.memory.shape[0] == sources
            lp, _, _ = m.step(torch.arange(3, 3 + len(index)), r)
            lp_ref, _, _ = m.step(torch.arange(3, 3 + len(index)), _per_row(m.reorder(s2_ref, index)))
            torch.testing.assert_close(lp, lp_ref, rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError, match=r"prev_tokens must have shape \(B,\) = \(6,\)"):
            m.step(torch.zeros(3, dtype=torch.long), expanded)
