"""The Transformer translator: masks, padding, the KV cache against full recomputation, search,
overfitting a few pairs, checkpoints, input errors, attention maps."""

import pytest
import torch

from attnkit.decoding import beam_search, greedy_search
from attnkit.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.training.checkpoint import load_model, save_checkpoint
from tiny import tiny_transformer

V, PAD, BOS, EOS = 20, 0, 1, 2


def tiny(seed=0, **kw):
    return tiny_transformer(V, seed=seed, **{"d_model": 32, "dim_feedforward": 64, "max_len": 64, **kw})


def rand_ids(*shape, g=None):
    return torch.randint(3, V, shape, generator=g)


def batch(seed=0, B=3, S=7, T=6):
    g = torch.Generator().manual_seed(seed)
    src = rand_ids(B, S, g=g)
    lens = torch.tensor([S] + [max(1, S - 2 * i) for i in range(1, B)])
    for b, n in enumerate(lens.tolist()):
        src[b, n:] = PAD
    tgt = rand_ids(B, T, g=g)
    tgt[:, 0] = BOS
    return src, lens, tgt


# --------------------------------------------------------------------------------------- masks


@pytest.mark.parametrize("norm_first", [True, False])
def test_causal_mask_hides_future_target_tokens(norm_first):
    m = tiny(norm_first=norm_first)
    src, lens, tgt = batch(T=8)
    k = 4
    tgt2 = tgt.clone()
    tgt2[:, k:] = (tgt[:, k:] - 3 + 5) % (V - 3) + 3  # a different real token everywhere from k on
    with torch.no_grad():
        a, _ = m(src, lens, tgt)
        b, _ = m(src, lens, tgt2)
    torch.testing.assert_close(a[:, :k], b[:, :k], rtol=0, atol=1e-6)
    assert (a[:, k:] - b[:, k:]).abs().amax(dim=-1).min() > 1e-4  # every later position changes


def test_padding_never_changes_real_positions():
    m = tiny(1)
    g = torch.Generator().manual_seed(3)
    short_src, short_tgt = rand_ids(1, 4, g=g), rand_ids(1, 3, g=g)
    long_src, long_tgt = rand_ids(1, 9, g=g), rand_ids(1, 7, g=g)
    short_tgt[:, 0] = long_tgt[:, 0] = BOS
    src = torch.full((2, 9), PAD)
    src[0, :4], src[1] = short_src[0], long_src[0]
    tgt = torch.full((2, 7), PAD)
    tgt[0, :3], tgt[1] = short_tgt[0], long_tgt[0]
    with torch.no_grad():
        alone, w_alone = m(short_src, torch.tensor([4]), short_tgt, need_weights=True)
        both, w_both = m(src, torch.tensor([4, 9]), tgt, need_weights=True)
        long_alone, _ = m(long_src, torch.tensor([9]), long_tgt)
    torch.testing.assert_close(both[0, :3], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both[1], long_alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w_both[0, :3, :4], w_alone[0], rtol=1e-5, atol=1e-6)
    assert float(w_both[0, :, 4:].abs().max()) == 0.0  # no attention on source padding
    # the padding's token ids are irrelevant too
    src_junk = src.clone()
    src_junk[0, 4:] = rand_ids(5, g=g)
    with torch.no_grad():
        junk, _ = m(src_junk, torch.tensor([4, 9]), tgt)
    torch.testing.assert_close(junk[0, :3], alone[0], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- the cache


@pytest.mark.parametrize("positional,norm_first,tie", [("sinusoidal", True, True), ("learned", False, False)])
def test_cached_steps_equal_forward(positional, norm_first, tie):
    m = tiny(2, positional=positional, norm_first=norm_first, tie_embeddings=tie)
    src, lens, tgt = batch(seed=4, T=9)
    with torch.no_grad():
        logits, weights = m(src, lens, tgt, need_weights=True)
        state = m.start(src=src, src_lengths=lens)
        lps, attns = [], []
        for t in range(tgt.shape[1]):
            lp, state, a = m.step(tgt[:, t], state)
            lps.append(lp)
            attns.append(a)
    torch.testing.assert_close(torch.stack(lps, 1), logits.log_softmax(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.stack(attns, 1), weights, rtol=1e-5, atol=1e-6)
    assert state.step == tgt.shape[1]


def test_step_leaves_the_old_state_usable():
    m = tiny(3)
    src, lens, tgt = batch(seed=5)
    with torch.no_grad():
        s0 = m.start(src, lens)
        _, s1, _ = m.step(tgt[:, 0], s0)
        lp_a, _, _ = m.step(tgt[:, 1], s1)
        lp_b, _, _ = m.step(tgt[:, 1], s1)  # the same state again: the first call must not have grown it
        _, s1_again, _ = m.step(tgt[:, 0], s0)
        lp_c, _, _ = m.step(tgt[:, 1], s1_again)
        r = m.reorder(s1, torch.tensor([2, 0, 0]))
        lp_r, _, _ = m.step(tgt[[2, 0, 0], 1], r)
    torch.testing.assert_close(lp_a, lp_b, rtol=0, atol=0)
    torch.testing.assert_close(lp_a, lp_c, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lp_r, lp_a[[2, 0, 0]], rtol=1e-6, atol=1e-6)
    assert len(s1.cache[0].self_attn) == 1 and len(s0.cache[0].self_attn) == 0
    assert r.cache[0] is not s1.cache[0] and r.cache[0].cross_attn is not s1.cache[0].cross_attn


class NoCacheDecoder:
    """Reference decoder: every step re-runs the whole model over bos + the prefix so far."""

    def __init__(self, model):
        self.m = model

    def start(self, src, src_lengths):
        return {"src": src, "lens": src_lengths, "prefix": torch.zeros(src.shape[0], 0, dtype=torch.long)}

    def step(self, prev, state):
        prefix = torch.cat([state["prefix"], prev.unsqueeze(1)], dim=1)
        logits, w = self.m(state["src"], state["lens"], prefix, need_weights=True)
        return logits[:, -1].log_softmax(-1), dict(state, prefix=prefix), w[:, -1]

    def reorder(self, state, index):
        return {k: v.index_select(0, index) for k, v in state.items()}


def _check_hyps(a, b):
    assert a.tokens == b.tokens and a.finished == b.finished
    assert a.score == pytest.approx(b.score, abs=1e-4)
    torch.testing.assert_close(a.attention, b.attention, rtol=1e-4, atol=1e-5)


def _eos_biased(seed, bias):
    # an eos bias so that some hypotheses end early and others run to max_len
    m = tiny(seed)
    with torch.no_grad():
        m.out_bias[EOS] = bias
    src, lens, _ = batch(seed=7, B=4, S=6)
    return m, {"src": src, "src_lengths": lens}


def test_greedy_matches_full_recomputation():
    m, inputs = _eos_biased(6, 3.0)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len=10, return_attention=True)
    got, want = greedy_search(m, inputs, **kw), greedy_search(NoCacheDecoder(m), inputs, **kw)
    assert {h.finished for h in got} == {True, False}
    for a, b in zip(got, want):
        _check_hyps(a, b)


def test_beam_matches_full_recomputation():
    m, inputs = _eos_biased(13, 2.5)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len=10, return_attention=True, beam_size=3, n_best=3, length_penalty=0.6)
    got, want = beam_search(m, inputs, **kw), beam_search(NoCacheDecoder(m), inputs, **kw)
    lengths = {len(h.tokens) for hs in got for h in hs}
    assert len(lengths) > 3 and max(lengths) == 10  # short, long and unfinished hypotheses
    for hs_a, hs_b in zip(got, want):
        assert len(hs_a) == len(hs_b) == 3
        for a, b in zip(hs_a, hs_b):
            _check_hyps(a, b)


# ----------------------------------------------------------------------------------- learning


def test_overfits_a_handful_of_pairs():
    g = torch.Generator().manual_seed(11)
    pairs = []
    for _ in range(5):
        s, t = int(torch.randint(5, 9, (1,), generator=g)), int(torch.randint(5, 9, (1,), generator=g))
        pairs.append((rand_ids(s, g=g).tolist(), rand_ids(t, g=g).tolist()))
    S, T = max(len(s) for s, _ in pairs), max(len(t) for _, t in pairs) + 1
    src = torch.full((len(pairs), S), PAD)
    tgt_in = torch.full((len(pairs), T), PAD)
    tgt_out = torch.full((len(pairs), T), PAD)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS, *t])
        tgt_out[i, : len(t) + 1] = torch.tensor([*t, EOS])
    lens = torch.tensor([len(s) for s, _ in pairs])
    m = tiny(12).train()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(300):
        logits, _ = m(src, lens, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    hyps = greedy_search(m, {"src": src, "src_lengths": lens}, bos_id=BOS, eos_id=EOS, max_len=T + 2)
    assert [h.tokens for h in hyps] == [t for _, t in pairs]
    assert all(h.finished for h in hyps)


# ------------------------------------------------------------------------- config, checkpoints, errors


def test_config_round_trip_ignores_unknown_keys():
    cfg = TransformerConfig(vocab_size=30, positional="learned", max_len=40)
    d = cfg.to_dict() | {"attnkit_version": "9.9", "something_new": 1}
    back = TransformerConfig.from_dict(d)
    assert back == cfg and back.max_src_len == 40
    m = TransformerTranslator.from_config(d)
    assert m.to_config()["model_type"] == "transformer" and m.config.max_src_len == 40
    with pytest.raises(ValueError, match="divisible"):
        TransformerTranslator(TransformerConfig(vocab_size=30, d_model=30, nhead=4))
    with pytest.raises(ValueError, match="positional"):
        TransformerTranslator(TransformerConfig(vocab_size=30, positional="rotary"))


def test_checkpoint_round_trip(tmp_path):
    m = tiny(8, tie_embeddings=True)
    src, lens, tgt = batch(seed=9)
    path = save_checkpoint(tmp_path / "ckpt", model=m, config=m.to_config())
    loaded, cfg, _ = load_model(path)
    assert isinstance(loaded, TransformerTranslator) and cfg["model_type"] == "transformer"
    assert loaded.out_proj is None  # still tied after loading
    with torch.no_grad():
        a, wa = m(src, lens, tgt, need_weights=True)
        b, wb = loaded(src, lens, tgt, need_weights=True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(wa, wb, rtol=0, atol=0)


def test_bad_inputs_raise_clear_errors():
    m = tiny()
    src, lens, tgt = batch()
    with pytest.raises(ValueError, match=r"src must be a \(B, S\) long"):
        m(src[0], lens, tgt)
    with pytest.raises(ValueError, match=r"src must be a \(B, S\) long"):
        m(src.float(), lens, tgt)
    with pytest.raises(ValueError, match="src_lengths must have shape"):
        m(src, lens[:2], tgt)
    with pytest.raises(ValueError, match="src_lengths >= 1"):
        m(src, torch.tensor([7, 0, 3]), tgt)
    with pytest.raises(ValueError, match="exceeds src length"):
        m(src, torch.tensor([8, 5, 3]), tgt)
    with pytest.raises(ValueError, match=r"src token ids must lie in \[0, 20\)"):
        m(src + V, lens, tgt)
    with pytest.raises(ValueError, match="tgt_in must be"):
        m(src, lens, tgt[:2])
    with pytest.raises(ValueError, match=r"src must be a \(B, S\) long"):
        m.start(src[0], lens)
    state = m.start(src, lens)
    with pytest.raises(ValueError, match="prev_tokens must have shape"):
        m.step(tgt[:2, 0], state)
    learned = tiny(positional="learned", max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        learned(rand_ids(1, 9), torch.tensor([9]), tgt[:1])


# ----------------------------------------------------------------------------------- pictures


class _Tok:
    bos_id, eos_id, pad_id = BOS, EOS, PAD

    def id_to_piece(self, i):
        return f"▁w{i}"


class _FakeTranslator:
    tokenizer = _Tok()

    def encode_sources(self, sentences):
        return [[3 + (len(w) % (V - 3)) for w in s.split()] for s in sentences]


def test_attention_maps_shapes_and_plot(tmp_path):
    m = tiny(10)
    tokens = [5, 6, 7, 8]
    ids = _FakeTranslator().encode_sources(["uno dos tres cuatro cinco"])[0]
    src, lens, tgt_in = torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([[BOS, *tokens[:-1]]])
    maps = m.attention_maps(src, lens, tgt_in).map_tensors(lambda t: t[0])
    assert maps.enc_self.shape == (2, 2, 5, 5)
    assert maps.dec_self.shape == (2, 2, 4, 4)
    assert maps.cross.shape == (2, 2, 4, 5)
    assert maps.scores is None and maps.context is None  # no RNN-style three steps in a Transformer
    torch.testing.assert_close(maps.cross.sum(-1), torch.ones(2, 2, 4))
    assert float(maps.dec_self.triu(1).abs().max()) == 0.0  # causal
    # rows line up with the step that produced each token: the last layer's mean equals the search's
    with torch.no_grad():
        _, w = m(src, lens, tgt_in, need_weights=True)
    torch.testing.assert_close(maps.cross[-1].mean(0), w[0])
    torch.testing.assert_close(maps.alignment, w[0])
    from attnkit.viz import plot_transformer_heads

    pieces = _FakeTranslator.tokenizer
    out = plot_transformer_heads(
        maps.enc_self,
        maps.dec_self,
        maps.cross,
        [pieces.id_to_piece(t) for t in ids],
        [pieces.id_to_piece(t) for t in tokens],
        tmp_path / "heads.png",
    )
    assert (tmp_path / "heads.png").stat().st_size > 0 and out is not None
    with pytest.raises(ValueError, match="tgt_in must be"):
        m.attention_maps(src, lens, torch.tensor([[BOS], [BOS]]))
