"""RNNencdec and RNNsearch: shapes, masks, step-by-step decoding = teacher forcing, overfitting."""

import pytest
import torch

from attnkit.decoding import beam_search, greedy_search
from attnkit.errors import ConfigError
from attnkit.models.registry import model_class
from attnkit.models.seq2seq import RNNEncDec, RNNSearch, Seq2SeqConfig

V = 24


def tiny(kind="rnnsearch", score="additive", dropout=0.0, encoder_dim=None):
    """``kind``: rnnsearch, rnnencdec or rnnsearch-luong (attention after the GRU step)."""
    torch.manual_seed(0)
    kind, _, step = kind.partition("-")
    return (
        model_class(kind)
        .from_config(
            Seq2SeqConfig(
                vocab_size=V,
                emb_dim=12,
                hidden_dim=10,
                attn_dim=8,
                score=score,
                dropout=dropout,
                rnn_attention=step or "bahdanau",
                encoder_dim=encoder_dim,
            ),
        )
        .eval()
    )


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (3, 7), generator=g)
    lengths = torch.tensor([7, 4, 2])
    for b, n in enumerate(lengths):
        src[b, n:] = 0
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), torch.randint(4, V, (3, 5), generator=g)], 1)
    return src, lengths, tgt_in


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnsearch-luong"])
@pytest.mark.parametrize("score", ["additive", "dot", "general", "scaled_dot"])
def test_rnnsearch_weights_are_distributions_over_real_source_tokens(score, kind):
    m = tiny(kind, score=score)
    src, lengths, tgt_in = batch()
    logits, w = m(src, lengths, tgt_in, need_weights=True)
    assert logits.shape == (3, 6, V) and w.shape == (3, 6, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6))
    assert torch.all(w[1, :, 4:] == 0) and torch.all(w[2, :, 2:] == 0)


def test_rnnencdec_has_one_context_and_no_weights():
    m = tiny("rnnencdec")
    src, lengths, tgt_in = batch()
    logits, w = m(src, lengths, tgt_in, need_weights=True)
    assert logits.shape == (3, 6, V) and w is None
    st = m.start(src, lengths)
    _, st2, attn = m.step(tgt_in[:, 0], st)
    assert attn is None and torch.equal(st2.context, st.context)  # the same c at every step


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnencdec", "rnnsearch-luong"])
def test_incremental_steps_equal_teacher_forcing(kind):
    m = tiny(kind)
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        logits, w = m(src, lengths, tgt_in, need_weights=True)
        state = m.start(src, lengths)
        for t in range(tgt_in.shape[1]):
            lp, state, attn = m.step(tgt_in[:, t], state)
            torch.testing.assert_close(lp, torch.log_softmax(logits[:, t], -1), rtol=1e-5, atol=1e-5)
            if w is not None:
                torch.testing.assert_close(attn, w[:, t], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnencdec", "rnnsearch-luong"])
def test_padding_does_not_change_real_outputs(kind):
    m = tiny(kind)
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        full, _ = m(src, lengths, tgt_in)
        alone, _ = m(src[2:3, :2], lengths[2:3], tgt_in[2:3])
    torch.testing.assert_close(alone[0], full[2], rtol=1e-5, atol=1e-5)


def test_prepared_keys_equal_the_per_step_concatenation_form():
    """Bahdanau's score computed the tutorial way (concatenate s_{t-1} with every h_j, every step)."""
    m = tiny()
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        _, w = m(src, lengths, tgt_in, need_weights=True)
        state = m.start(src, lengths)
        x = m.drop(m.embedding(src))
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(m.encoder(packed)[0], batch_first=True, total_length=7)
        sc = m.attention.score
        W = torch.cat([sc.w_query.weight, sc.w_key.weight], 1)  # W_a [s; h] = W s + U h
        maps = m.attention_maps(src, lengths, tgt_in)  # the three steps, kept for inspection
        s = state.h
        for t in range(tgt_in.shape[1]):
            cat = torch.cat([s.unsqueeze(1).expand(-1, 7, -1), h], -1)  # (B, S, H + 2H)
            e = torch.tanh(cat @ W.T + sc.w_key.bias) @ sc.v
            e = e.masked_fill(torch.arange(7) >= lengths.unsqueeze(1), float("-inf"))
            torch.testing.assert_close(torch.softmax(e, -1), w[:, t], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(maps.scores[:, t], e, rtol=1e-5, atol=1e-5)  # before the softmax
            torch.testing.assert_close(maps.context[:, t], (w[:, t].unsqueeze(1) @ h).squeeze(1), rtol=1e-5, atol=1e-5)
            _, state, _ = m.step(tgt_in[:, t], state)
            s = state.h
        torch.testing.assert_close(maps.alignment, w, rtol=1e-6, atol=1e-7)
        assert maps.score == "e_j = vᵀ tanh(W s + U h_j + b)"


def test_luong_attention_scores_the_new_state_as_a_plain_loop_does():
    """rnn_attention="luong", checked against a float64 loop written from the formulas:
    s_t = GRU(E y_{t-1}, s_{t-1}); e_tj = vᵀ tanh(W s_t + U h_j + b); c_t = Σ_j α_tj h_j."""
    m = tiny("rnnsearch-luong").double()
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        logits, w = m(src, lengths, tgt_in, need_weights=True)
        maps = m.attention_maps(src, lengths, tgt_in)
        state = m.start(src, lengths)
        h = state.memory.values  # (B, S, 2H) annotations
        g, sc = m.decoder_rnn, m.attention.score
        s = state.h
        for t in range(tgt_in.shape[1]):
            x = m.embedding(tgt_in[:, t])
            r, z, n = (x @ g.weight_ih_l0.T + g.bias_ih_l0).chunk(3, -1)
            hr, hz, hn = (s @ g.weight_hh_l0.T + g.bias_hh_l0).chunk(3, -1)
            r, z = torch.sigmoid(r + hr), torch.sigmoid(z + hz)
            s = (1 - z) * torch.tanh(n + r * hn) + z * s  # (B, H)
            e = torch.tanh((s @ sc.w_query.weight.T).unsqueeze(1) + h @ sc.w_key.weight.T + sc.w_key.bias) @ sc.v
            e = e.masked_fill(torch.arange(7) >= lengths.unsqueeze(1), float("-inf"))  # (B, S)
            a = torch.softmax(e, -1)
            torch.testing.assert_close(w[:, t], a)
            torch.testing.assert_close(maps.scores[:, t], e)
            torch.testing.assert_close(maps.context[:, t], (a.unsqueeze(1) @ h).squeeze(1))
            out = torch.tanh(m.deep_output(torch.cat([s, maps.context[:, t], x], -1)))
            torch.testing.assert_close(logits[:, t], out @ m.embedding.weight.T + m.out_bias)


def test_rnn_attention_is_checked_and_is_for_rnnsearch_only():
    with pytest.raises(ConfigError, match="rnn_attention"):
        Seq2SeqConfig(rnn_attention="input_feed")
    with pytest.raises(ConfigError, match="RNNsearch"):
        model_class("rnnencdec").from_config(Seq2SeqConfig(vocab_size=V, rnn_attention="luong"))


@pytest.mark.parametrize("rnn_attention", ["bahdanau", "luong"])
def test_overfits_a_handful_of_pairs_and_beam1_equals_greedy(rnn_attention):
    torch.manual_seed(0)
    m = model_class("rnnsearch").from_config(
        Seq2SeqConfig(vocab_size=V, emb_dim=32, hidden_dim=32, attn_dim=32, dropout=0.0, rnn_attention=rnn_attention),
    )
    g = torch.Generator().manual_seed(3)
    pairs = [(torch.randint(4, V, (n,), generator=g), torch.randint(4, V, (n + 1,), generator=g)) for n in (3, 4, 5, 6)]
    B, S, T = len(pairs), 6, 8
    src = torch.zeros(B, S, dtype=torch.long)
    lengths = torch.tensor([len(p[0]) for p in pairs])
    tgt_in = torch.zeros(B, T, dtype=torch.long)
    tgt_out = torch.zeros(B, T, dtype=torch.long)
    for b, (s, t) in enumerate(pairs):
        src[b, : len(s)] = s
        tgt_in[b, 0] = 1
        tgt_in[b, 1 : len(t) + 1] = t
        tgt_out[b, : len(t)] = t
        tgt_out[b, len(t)] = 2
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(150):
        logits, _ = m(src, lengths, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    inputs = {"src": src, "src_lengths": lengths}
    hyps = greedy_search(m, inputs, bos_id=1, eos_id=2, max_len=10, return_attention=True)
    for h, (_, t) in zip(hyps, pairs):
        assert h.tokens == t.tolist()
        assert h.attention.shape == (len(t), S)
    beams = beam_search(m, inputs, beam_size=1, bos_id=1, eos_id=2, max_len=10)
    for h, b in zip(hyps, beams):
        assert b[0].tokens == h.tokens
        assert b[0].score == pytest.approx(h.score, abs=1e-5)


def test_bad_inputs_are_reported():
    m = tiny()
    src, lengths, tgt_in = batch()
    with pytest.raises(ValueError, match=r"src_lengths must have shape \(B,\) = \(3,\), got \(2,\)"):
        m(src, lengths[:2], tgt_in)
    with pytest.raises(ValueError, match=r"src must be a \(B, S\) long tensor"):
        m(src.float(), lengths, tgt_in)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 24\)"):
        m(src + 100, lengths, tgt_in)
    with pytest.raises(ValueError, match=r"tgt_in must be \(B=3, T\)"):
        m(src, lengths, tgt_in[:2])
    with pytest.raises(ValueError, match=r"model_type 'lstm' is not registered"):
        model_class("lstm")
    assert isinstance(tiny(), RNNSearch) and isinstance(tiny("rnnencdec"), RNNEncDec)


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnencdec"])
def test_param_init_draws_every_weight_from_the_uniform_range(kind):
    torch.manual_seed(0)
    cfg = Seq2SeqConfig(vocab_size=V, emb_dim=12, hidden_dim=10, attn_dim=8, param_init=0.3)
    m = model_class(kind).from_config(cfg)
    for name, p in m.named_parameters():
        bound = p.detach().abs().max().item()
        assert bound <= 0.3, name
        if p.numel() >= 50 and name != "embedding.weight":
            assert bound > 0.25, (
                f"{name} does not fill [-0.3, 0.3] (max |w| = {bound:.3f})"
            )  # PyTorch's own are ≤ 1/√10
    assert torch.all(m.embedding.weight[cfg.pad_id] == 0)


def test_param_init_zero_keeps_pytorch_defaults_and_bad_values_are_refused():
    torch.manual_seed(0)
    m = model_class("rnnsearch").from_config(
        Seq2SeqConfig(vocab_size=V, emb_dim=12, hidden_dim=100, attn_dim=8, param_init=0.0)
    )
    assert m.encoder.weight_hh_l0.abs().max() <= 100**-0.5  # nn.GRU's U(-1/√H, 1/√H)
    for bad in (-0.1, 1.5, "0.1", True):
        with pytest.raises(ConfigError, match="param_init"):
            Seq2SeqConfig(param_init=bad)


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnsearch-luong", "rnnencdec"])
def test_encoder_dim_sets_the_encoder_width_and_steps_still_equal_teacher_forcing(kind):
    m = tiny(kind, encoder_dim=6)  # decoder 10, encoder 6 (per direction)
    assert m.encoder.hidden_size == 6
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        logits, _ = m(src, lengths, tgt_in)
        state = m.start(src, lengths)
        assert state.h.shape == (3, 10)
        if kind.startswith("rnnsearch"):
            assert state.memory.values.shape == (3, 7, 12)  # annotations [h→; h←], 2 x 6
        for t in range(tgt_in.shape[1]):
            lp, state, _ = m.step(tgt_in[:, t], state)
            torch.testing.assert_close(lp, torch.log_softmax(logits[:, t], -1), rtol=1e-5, atol=1e-5)
    again = model_class(m.model_type).from_config(m.to_config())  # config.json round trip keeps the width
    assert again.encoder.hidden_size == 6


def test_encoder_dim_defaults_to_hidden_dim_and_is_checked():
    old = Seq2SeqConfig(vocab_size=V, hidden_dim=10).to_dict()
    del old["encoder_dim"]  # a config.json written before the option existed
    assert Seq2SeqConfig.from_dict(old).enc_dim == 10
    assert model_class("rnnsearch").from_config(old).encoder.hidden_size == 10
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ConfigError, match="encoder_dim"):
            Seq2SeqConfig(vocab_size=V, encoder_dim=bad)
