"""Gradient-weighted attention relevance for translators (Chefer, Gur & Wolf 2021, the encoder-decoder rules;
:func:`attnkit.attribution.attention_relevance.relevance_pairs`): against a float64 hand computation on a tiny
2+2-layer Transformer, its weights and gradients taken by a path of its own (the model's encoder and decoder
called with their weights asked for, torch.autograd for the gradients) and on a tiny Hugging Face Marian (its
eager copy's ``output_attentions``); through the CLI and ``explain``; an RNN refused in one line naming what it
lacks."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.attention_relevance import relevance_pairs, residual_normalised
from attnkit.attribution.forced import ForcedTranslation
from tiny import saved_tiny_transformer, tiny_transformer


def _pair(src: list[int], tgt: list[int], bos: int = 1) -> ForcedTranslation:
    s, t = torch.tensor(src), torch.tensor(tgt)
    return ForcedTranslation(
        s, t, torch.cat([torch.tensor([bos]), t[:-1]]), [str(i) for i in src], [str(i) for i in tgt]
    )


def _weights_by_the_models_own_stacks(model, pair):
    """``(logits (T, V), encoder [(1, H, S, S)], decoder self [(1, H, T, T)], cross [(1, H, T, S)])``, the weights
    in the graph (with their batch axis: a gradient is taken with respect to these tensors themselves): the
    encoder and the decoder called with ``need_weights=True`` (no hooks)."""
    with torch.enable_grad():
        memory, mask, enc = model.encode(pair.src[None], torch.tensor([len(pair.src)]), need_weights=True)
        out = model.decoder(
            model._embed_tgt(pair.tgt_in[None]), memory, memory_key_padding_mask=mask, need_weights=True
        )
        logits = F.linear(out.output, *model.output_layer())[0]  # (T, V)
    return logits, enc, out.self_weights, out.cross_weights


def _bar_by_hand(a, g):
    """Ā[i, j] = (1/H) Σ_h max(0, g[h, i, j] · a[h, i, j]), entry by entry."""
    heads, n, m = a.shape
    out = torch.zeros(n, m, dtype=torch.float64)
    for i in range(n):
        for j in range(m):
            out[i, j] = sum(max(0.0, float(g[h, i, j]) * float(a[h, i, j])) for h in range(heads)) / heads
    return out


def _normalised_by_hand(r):
    """R̄: R − I, each row divided by its sum (a zero row kept), I added back."""
    n = r.shape[0]
    out = r.clone()
    for i in range(n):
        out[i, i] -= 1.0
        total = float(out[i].sum())
        if total > 0:
            out[i] = out[i] / total
        out[i, i] += 1.0
    return out


def _relevance_by_hand(logits, enc, dec, cross, positions, targets):
    """Row ``positions[k]`` of R^{ts} under ∂ logits[positions[k], targets[k]] / ∂A: R^{ss} = Π(I + Ā_enc), then per
    decoder layer R^{tt} += Ā R^{tt}, R^{ts} += Ā R^{ts}, R^{ts} += R̄^{ttᵀ} Ā R̄^{ss}; weights ``(1, H, ., .)``."""
    maps = [*enc, *dec, *cross]
    s, t_len = enc[0].shape[-1], dec[0].shape[-1]
    out = []
    for t, y in zip(positions, targets):
        grads = [g[0] for g in torch.autograd.grad(logits[t, y], maps, retain_graph=True)]
        g_enc, g_dec, g_cross = grads[: len(enc)], grads[len(enc) : len(enc) + len(dec)], grads[len(enc) + len(dec) :]
        r_ss = torch.eye(s, dtype=torch.float64)
        for a, g in zip(enc, g_enc):
            r_ss = r_ss + _bar_by_hand(a[0].detach(), g) @ r_ss
        r_tt, r_ts = torch.eye(t_len, dtype=torch.float64), torch.zeros(t_len, s, dtype=torch.float64)
        for a, g, c, gc in zip(dec, g_dec, cross, g_cross):
            bar = _bar_by_hand(a[0].detach(), g)
            r_tt, r_ts = r_tt + bar @ r_tt, r_ts + bar @ r_ts
            cross_bar = _bar_by_hand(c[0].detach(), gc)
            r_ts = r_ts + torch.einsum("ut,uv,vj->tj", _normalised_by_hand(r_tt), cross_bar, _normalised_by_hand(r_ss))
        out.append(r_ts[t])
    return torch.stack(out)


def test_the_rules_by_hand_in_float64():
    """attnkit's Transformer in float64: the method's rows equal the rules written out within 1e-10."""
    model = tiny_transformer(60, seed=3).double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)  # larger weights: sharper attention, gradients of both signs everywhere
    pair = _pair([5, 17, 9, 40, 2, 33], [4, 8, 51, 12, 2])
    logits, enc, dec, cross = _weights_by_the_models_own_stacks(model, pair)
    with torch.no_grad():
        own, _ = model(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    torch.testing.assert_close(logits, own[0], atol=1e-12, rtol=0)  # the same forward pass
    t_len = len(pair.tgt)
    expected = _relevance_by_hand(logits, enc, dec, cross, range(t_len), pair.tgt.tolist())
    got = relevance_pairs(model, pair).scores
    assert got.dtype == torch.float64 and got.shape == (t_len, len(pair.src))
    assert float((got - expected).abs().max()) <= 1e-10
    assert float(expected.min()) >= 0 and float(expected.sum(-1).min()) > 0


def test_a_hugging_face_marian_by_hand_in_float64():
    """A tiny Marian in float64: the rows equal the rules over the maps its own eager copy returns with
    ``output_attentions=True`` (its ``</s>`` kept in the composition, left out of the rows), within 1e-10; its
    attention implementation is put back after."""
    pytest.importorskip("transformers")
    from attnkit.attribution.forced import forced_translation
    from attnkit.tasks.translation import Translator
    from hf_tiny import eager_copy, saved_tiny

    tr = Translator.load(saved_tiny("marian"))
    adapter = tr.model.double()
    before = adapter.hf.config._attn_implementation
    pair = forced_translation(tr, "hola mundo", target=[7, 30, 12, 5])
    got = relevance_pairs(adapter, pair).scores
    assert adapter.hf.config._attn_implementation == before
    reference = eager_copy("marian")[0].double()
    src = torch.tensor([[*adapter.src_prefix, *pair.src.tolist(), *adapter.src_suffix]])
    dec_in = torch.tensor([[*adapter.decoder_prefix, *pair.tgt_in[1:].tolist()]])
    with torch.enable_grad():
        out = reference(input_ids=src, decoder_input_ids=dec_in, output_attentions=True, use_cache=False)
    row0 = len(adapter.decoder_prefix) - 1
    positions = [row0 + t for t in range(len(pair.tgt))]
    expected = _relevance_by_hand(
        out.logits[0],
        out.encoder_attentions,
        out.decoder_attentions,
        out.cross_attentions,
        positions,
        pair.tgt.tolist(),
    )
    col0 = len(adapter.src_prefix)
    expected = expected[:, col0 : col0 + len(pair.src)]
    assert got.shape == expected.shape and float((got - expected).abs().max()) <= 1e-10


def test_the_normalisation_keeps_a_zero_row():
    r = torch.tensor([[1.0, 0, 0], [0.5, 2.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    want = torch.tensor([[1.0, 0, 0], [0.5 / 1.5, 1.0 / 1.5 + 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(residual_normalised(r), want, atol=1e-15, rtol=0)


def test_through_the_cli_and_explain(tmp_path, capsys):
    """A saved tiny Transformer: the CLI's JSON rows and explain(...)'s are the method's rows, normalised; --layer
    is refused in one line."""
    from attnkit.attribution import explain, methods_for
    from attnkit.attribution.forced import forced_translation
    from attnkit.cli import main
    from attnkit.tasks.translation import Translator

    folder = saved_tiny_transformer(tmp_path / "tiny")
    tr = Translator.load(folder)
    source, target = "Jesús lloró.", "Jesus wept."
    assert "attention_relevance" in methods_for(tr)
    att = explain(tr, source, target=target, method="attention_relevance")
    rows = relevance_pairs(tr.model, forced_translation(tr, source, target)).scores
    torch.testing.assert_close(att.scores.double(), rows / rows.sum(-1, keepdim=True), atol=1e-6, rtol=0)
    assert att.method == "attention_relevance" and not att.needs_gradients  # Captum's input gradients: none
    capsys.readouterr()
    argv = ["explain", "--model", str(folder), "--method", "attention_relevance", "--target", target, "--json"]
    assert main([*argv, source]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "attention_relevance" and len(out["scores"]) == len(rows)
    torch.testing.assert_close(torch.tensor(out["scores"]).double(), att.scores.double(), atol=1e-4, rtol=0)
    assert main([*argv, "--layer", "1", source]) == 2
    err = capsys.readouterr().err.strip()
    assert "--layer and --head do not apply" in err and "\n" not in err


def test_an_rnn_is_refused_naming_the_capability(capsys):
    from attnkit.cli import main

    capsys.readouterr()
    assert main(["explain", "--model", "rnnsearch-es-en", "--method", "attention_relevance", "Jesús lloró."]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a Transformer (attention in the autograd graph)" in err and "\n" not in err
