"""The output layer prepared per batch: packed weights against float64 ``F.linear``, the whole
vocabulary against the model's own search, a shortlist against a masked softmax; the lexical
shortlist against a plain-Python Dice count, its file, and its errors."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import int8
from attnkit.decoding import OutputLayerDecoder, beam_search, greedy_search, output_layer
from attnkit.models.registry import model_class
from attnkit.models.seq2seq import Seq2SeqConfig
from attnkit.tasks.translation import LexicalShortlist, ShortlistError
from tiny import tiny_transformer

V, PAD, BOS, EOS = 30, 0, 1, 2


def model(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    if kind == "transformer":
        return tiny_transformer(V, seed=seed, num_encoder_layers=1, num_decoder_layers=1, max_len=64)
    return (
        model_class("rnnsearch")
        .from_config(Seq2SeqConfig(vocab_size=V, emb_dim=12, hidden_dim=10, attn_dim=8, dropout=0.0, param_init=0.5))
        .eval()
    )


def inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (3, 6), generator=g)
    lengths = torch.tensor([6, 4, 2])
    for b, n in enumerate(lengths.tolist()):
        src[b, n:] = PAD
    return {"src": src, "src_lengths": lengths}


class MaskedVocabulary:
    """The reference: the model's own step with every logit outside ``ids`` set to -inf before the softmax."""

    def __init__(self, m, ids):
        self.m, self.outside = m, torch.ones(V, dtype=torch.bool)
        self.outside[ids] = False

    def start(self, **kw):
        return self.m.start(**kw)

    def step(self, prev, state):
        f, state, attn = self.m.step_features(prev, state)
        logits = torch.nn.functional.linear(f, *self.m.output_layer()).masked_fill(self.outside, float("-inf"))
        return torch.log_softmax(logits, dim=-1), state, attn

    def reorder(self, state, index):
        return self.m.reorder(state, index)


def search(m, bos, eos, beam, **kw):
    if beam == 1:
        return [[h] for h in greedy_search(m, inputs(), bos_id=bos, eos_id=eos, max_len=12, **kw)]
    return beam_search(m, inputs(), beam_size=beam, bos_id=bos, eos_id=eos, max_len=12, n_best=2, **kw)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 70),
    e=st.integers(1, 40),
    v=st.integers(1, 300),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_packed_linear_is_the_linear_layer(rows, e, v, bias, seed):
    """The packed projection against float64 math, with and without autograd (which takes F.linear)."""
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(rows, e, generator=g), torch.randn(v, e, generator=g)
    b = torch.randn(v, generator=g) if bias else None
    want = x.double() @ w.double().T + (b.double() if bias else 0)
    project = int8.packed_linear(w, b)
    with torch.no_grad():
        torch.testing.assert_close(project(x).double(), want, rtol=1e-5, atol=1e-4)
    wg = w.clone().requires_grad_()
    out = int8.packed_linear(wg, b)(x)
    out.sum().backward()  # with autograd on, a layer gradients flow through
    torch.testing.assert_close(
        wg.grad.double(), torch.ones(rows, v, dtype=torch.float64).T @ x.double(), rtol=1e-5, atol=1e-4
    )


def test_packed_linear_without_onednn_is_f_linear(monkeypatch):
    monkeypatch.setattr(int8, "_ONEDNN_LINEAR", False)
    x, w, b = torch.randn(5, 8), torch.randn(11, 8), torch.randn(11)
    with torch.no_grad():
        assert torch.equal(int8.packed_linear(w, b)(x), torch.nn.functional.linear(x, w, b))


@pytest.mark.parametrize("kind,beam,ids", list(itertools.product(["rnnsearch", "transformer"], [1, 3], [False, True])))
def test_the_whole_vocabulary_is_the_models_own_search(kind, beam, ids):
    """Without ids, or with every id: the model's own search (packing only changes rounding)."""
    m = model(kind)
    sl = OutputLayerDecoder(m, torch.arange(V) if ids else None)
    want = search(m, BOS, EOS, beam, return_attention=True)
    got = search(sl, sl.index_of(BOS), sl.index_of(EOS), beam, return_attention=True)
    for hs_w, hs_g in zip(want, got):
        for w, g in zip(hs_w, hs_g, strict=True):
            assert w.tokens == sl.vocabulary_ids(g.tokens) and w.finished == g.finished
            assert g.score == pytest.approx(w.score, abs=1e-4)
            torch.testing.assert_close(g.attention, w.attention)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["rnnsearch", "transformer"]),
    beam=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 10_000),
    size=st.integers(6, V - 1),
)
def test_a_subset_is_the_search_under_a_masked_softmax(kind, beam, seed, size):
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([torch.tensor([BOS, EOS]), 3 + torch.randperm(V - 3, generator=g)[: size - 2]])
    ids = ids[torch.randperm(len(ids), generator=g)]  # any order: the search works in the shortlist's own indices
    m = model(kind, seed % 3)
    sl = OutputLayerDecoder(m, ids)
    want = search(MaskedVocabulary(m, ids), BOS, EOS, beam)
    got = search(sl, sl.index_of(BOS), sl.index_of(EOS), beam)
    for hs_w, hs_g in zip(want, got):
        for w, h in zip(hs_w, hs_g, strict=True):
            assert sl.vocabulary_ids(h.tokens) == w.tokens
            assert set(w.tokens) <= set(ids.tolist())
            assert h.score == pytest.approx(w.score, abs=1e-4)


def test_the_whole_vocabulary_layer_is_prepared_once_per_model_until_its_weights_change(monkeypatch):
    """Batches of one model share its prepared output layer; an in-place write to the weights (an optimizer
    step, load_state_dict) or another precision makes a new one, and the search follows the new weights."""
    made = []
    real = output_layer._prepare
    monkeypatch.setattr(output_layer, "_prepare", lambda w, b, int8: made.append(int8) or real(w, b, int8))
    m = model("transformer")
    first = OutputLayerDecoder(m)
    assert OutputLayerDecoder(m)._project is first._project and made == [False]
    assert OutputLayerDecoder(model("transformer", seed=1))._project is not first._project  # another model
    with torch.no_grad():
        m.output_layer()[0].mul_(2.0)  # the weights change in place
    again = OutputLayerDecoder(m)
    assert again._project is not first._project and len(made) == 3
    x = torch.randn(4, m.output_layer()[0].shape[1])
    w, b = m.output_layer()
    torch.testing.assert_close(again._project(x), torch.nn.functional.linear(x, w, b), atol=1e-5, rtol=1e-5)
    want = search(m, BOS, EOS, 3)
    got = search(again, BOS, EOS, 3)
    assert [[h.tokens for h in hs] for hs in want] == [[h.tokens for h in hs] for hs in got]
    m.precision = "int8"  # as quantize_int8 marks a model: the int8 layer, made once too
    assert OutputLayerDecoder(m)._project is OutputLayerDecoder(m)._project and made[-1] is True and len(made) == 4
    assert OutputLayerDecoder(m, torch.arange(V))._project is not OutputLayerDecoder(m, torch.arange(V))._project


def test_a_fused_adam_step_between_two_decodes_is_followed():
    """torch's fused Adam writes the parameters in place without bumping their version counters; a
    validation decoding between training steps must still use the stepped weights (as a fresh copy of
    the model does), not the layer prepared at the last validation."""
    import copy

    m = model("transformer")
    weight = m.output_layer()[0]
    opt = torch.optim.Adam(m.parameters(), lr=0.5, fused=True)
    before = OutputLayerDecoder(m)._project
    version = weight._version
    weight.grad = torch.randn_like(weight)
    opt.step()
    assert weight._version == version  # what makes a version check go stale
    after = OutputLayerDecoder(m)
    x = torch.randn(4, weight.shape[1])
    torch.testing.assert_close(
        after._project(x), torch.nn.functional.linear(x, *m.output_layer()), atol=1e-5, rtol=1e-5
    )
    assert not torch.allclose(before(x), after._project(x))
    fresh = copy.deepcopy(m)  # no prepared layer of its own yet
    assert [[h.tokens for h in hs] for hs in search(after, BOS, EOS, 3)] == [
        [h.tokens for h in hs] for hs in search(OutputLayerDecoder(fresh), BOS, EOS, 3)
    ]


def test_shortlist_decoder_rejects_bad_ids_and_models():
    m = model("rnnsearch")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 30\)"):
        OutputLayerDecoder(m, torch.tensor([1, 2, 30]))
    with pytest.raises(ValueError, match="must not repeat"):
        OutputLayerDecoder(m, torch.tensor([1, 2, 2]))
    with pytest.raises(ValueError, match="non-empty 1-D integer"):
        OutputLayerDecoder(m, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="token id 7 is not in the shortlist"):
        OutputLayerDecoder(m, torch.tensor([1, 2])).index_of(7)
    with pytest.raises(TypeError, match=r"must provide step_features\(\).*MaskedVocabulary does not"):
        OutputLayerDecoder(MaskedVocabulary(m, torch.tensor([1, 2])), torch.tensor([1, 2]))  # a whole-step model only


# ---------------------------------------------------------------- the lexical shortlist
def reference_shortlist(src, tgt, vocab, frequent, per_source):
    """Dice and frequencies counted with dicts, in float64, ranked by (-score, id)."""
    c_s, c_t, c_st, tokens = {}, {}, {}, {}
    for s, t in zip(src, tgt):
        for a in set(s):
            c_s[a] = c_s.get(a, 0) + 1
        for b in set(t):
            c_t[b] = c_t.get(b, 0) + 1
        for a in set(s):
            for b in set(t):
                c_st[a, b] = c_st.get((a, b), 0) + 1
        for b in t:
            tokens[b] = tokens.get(b, 0) + 1
    table = []
    for a in range(vocab):
        ranked = sorted((-(2.0 * n / (c_s[a] + c_t[b])), b) for (x, b), n in c_st.items() if x == a)
        table.append([b for _, b in ranked[:per_source]])
    top = [b for _, b in sorted((-n, b) for b, n in tokens.items())[:frequent]]
    return top, table


corpora = st.lists(
    st.tuples(st.lists(st.integers(0, 11), max_size=6), st.lists(st.integers(0, 11), max_size=6)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(corpus=corpora, frequent=st.integers(0, 6), per_source=st.integers(1, 5))
def test_lexical_shortlist_counts_dice_like_a_plain_loop(corpus, frequent, per_source):
    src, tgt = [c[0] for c in corpus], [c[1] for c in corpus]
    sl = LexicalShortlist.build(src, tgt, vocab_size=12, tokenizer_sha256="x", frequent=frequent, per_source=per_source)
    top, table = reference_shortlist(src, tgt, 12, frequent, per_source)
    assert sl.frequent.tolist() == top
    assert sl.table.shape == (12, per_source)
    for a in range(12):
        row = sl.table[a].tolist()
        assert row == table[a] + [-1] * (per_source - len(table[a]))
    batch = src[:3]
    want = set(top) | {b for s in batch for a in s for b in table[a]} | {1, 2}
    assert sl.ids_for(batch, always=(1, 2)).tolist() == sorted(want)


def test_lexical_shortlist_file_round_trip_and_corruption(tmp_path):
    sl = LexicalShortlist.build(
        [[3, 4], [4, 5]], [[6], [6, 7]], vocab_size=10, tokenizer_sha256="abc", frequent=2, per_source=2
    )
    path = sl.save(tmp_path / "sl.safetensors")
    back = LexicalShortlist.load(path)
    assert torch.equal(back.frequent, sl.frequent) and torch.equal(back.table, sl.table)
    assert back.tokenizer_sha256 == "abc"
    with pytest.raises(ShortlistError, match=r"missing\.safetensors: no such file; build a shortlist with"):
        LexicalShortlist.load(tmp_path / "missing.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(ShortlistError, match="corrupt shortlist file"):
        LexicalShortlist.load(cut)
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ShortlistError, match="not an attnkit shortlist"):
        LexicalShortlist.load(tmp_path / "other.safetensors")
    bad = LexicalShortlist(sl.frequent, torch.full((10, 2), 99, dtype=torch.int32), "abc").save(
        tmp_path / "b.safetensors"
    )
    with pytest.raises(ShortlistError, match="ids out of range"):
        LexicalShortlist.load(bad)


def test_lexical_shortlist_rejects_bad_arguments():
    with pytest.raises(ValueError, match="per_source must be an int >= 1"):
        LexicalShortlist.build([[1]], [[1]], vocab_size=4, tokenizer_sha256="x", per_source=0)
    with pytest.raises(ValueError, match=r"src_ids has 1 sentences but tgt_ids has 2"):
        LexicalShortlist.build([[1]], [[1], [2]], vocab_size=4, tokenizer_sha256="x")
    with pytest.raises(ValueError, match=r"tgt_ids\[0\] has ids outside \[0, 4\)"):
        LexicalShortlist.build([[1]], [[9]], vocab_size=4, tokenizer_sha256="x")
    sl = LexicalShortlist.build([[1]], [[2]], vocab_size=4, tokenizer_sha256="x")
    with pytest.raises(ValueError, match=r"src_ids must lie in \[0, 4\)"):
        sl.ids_for([[5]])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_are_written_with_the_users_umask(tmp_path, umask):
    """A shortlist, and every file written atomically, gets the mode any new file of the user's gets
    (0o666 less the umask), as a plain open() makes it: not the temp file's owner-only 0o600."""
    import os
    import stat

    from attnkit.paths import atomic_write_text

    sl = LexicalShortlist.build([[3, 4]], [[6]], vocab_size=10, tokenizer_sha256="abc", frequent=2, per_source=2)
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as f:  # the reference: what the user's umask gives
            f.write("x")
        sl.save(tmp_path / "sl.safetensors")
        atomic_write_text(tmp_path / "atomic.txt", "x")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["plain.txt", "sl.safetensors", "atomic.txt"], 0o666 & ~umask)
    assert LexicalShortlist.load(tmp_path / "sl.safetensors").tokenizer_sha256 == "abc"
