"""The one per-block record (attnkit.attention.block_trace.LMLayerParts) as a translator gives it: attnkit's
Transformer, replayed from its layers' real inputs, in float64, against the plain-loop float64 references of
test_attribution (the model's own hooked inputs, its raw weights, python loops), to float64 rounding; the shipped
transformer-es-en in float32 against those references on real verses; each record's terms adding up to the block's
real result; and a replay that does not reproduce a layer refused in one line."""

from __future__ import annotations

import functools

import pytest
import torch

from attnkit.attribution import decomposition, forced_translation
from attnkit.attribution.trace import trace_transformer
from attnkit.errors import TraceError
from attnkit.hooks import thread_hooks
from attnkit.tasks.translation import Translator
from test_attribution import (
    SOURCE,
    TARGET,
    _alti_plus_reference,
    _block_terms_loop,
    _transformer,
    _value_zeroing_reference,
)

VERSES = [
    ("En el principio creó Dios los cielos y la tierra.", "In the beginning God created the heaven and the earth."),
    ("Y vió Dios que la luz era buena.", "And God saw the light, that it was good."),
]


@functools.cache
def _tiny64(norm: str, tokenizer) -> Translator:
    return Translator(_transformer(norm_first=norm == "pre-norm").double(), tokenizer)


@functools.cache
def _shipped() -> Translator:
    return Translator.load("transformer-es-en")


def _cross_inputs(model, pair) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every decoder layer's cross-attention query input and memory, from the model's own forward (hooks)."""
    got = []

    def keep(module, args, kwargs):
        got.append((args[0][0].double(), args[1][0].double()))

    hooks = ((lyr.multihead_attn, keep) for lyr in model.decoder.layers)
    with thread_hooks(hooks, pre=True, with_kwargs=True), torch.no_grad():
        model(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    return got


@torch.no_grad()
def _attention_norm_reference(model, pair, layer: int) -> torch.Tensor:
    q, memory = _cross_inputs(model, pair)[layer]
    terms = _block_terms_loop(model.decoder.layers[layer].multihead_attn, q, memory, causal=False)
    return torch.tensor([[float(t.norm()) for t in row] for row in terms], dtype=torch.float64)  # (T, S)


@pytest.mark.parametrize("norm", ["pre-norm", "post-norm"])
def test_the_float64_trace_equals_the_float64_loop_references(norm, tokenizer):
    """ALTI+, value zeroing and attention-norm read from the record equal the loop references to float64
    rounding: the formulas over the one record are the ones the translators had."""
    tr = _tiny64(norm, tokenizer)
    pair = forced_translation(tr, SOURCE, TARGET)
    trace = trace_transformer(tr.model, pair.src, pair.tgt_in)
    alti, _ = decomposition.alti_plus(trace)
    torch.testing.assert_close(alti, _alti_plus_reference(tr.model, pair), atol=1e-10, rtol=0)
    for layer in (1, 2):
        vz = decomposition.value_zeroing(trace, layer=layer)
        ref = _value_zeroing_reference(tr.model, pair, layer - 1).clamp_min(0)
        torch.testing.assert_close(vz, ref, atol=1e-10, rtol=0)
        an = decomposition.attention_norm(trace, layer=layer)
        torch.testing.assert_close(an, _attention_norm_reference(tr.model, pair, layer - 1), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("verse", range(len(VERSES)))
def test_the_shipped_translator_in_float32_agrees_with_the_float64_references(verse):
    """transformer-es-en as it ships (float32) on real verses: ALTI+ and value zeroing within 5e-6 of the
    float64 loops, attention-norm within 1e-6 of its size (float32 rounding of a six-layer pass)."""
    tr = _shipped()
    pair = forced_translation(tr, *VERSES[verse])
    trace = trace_transformer(tr.model, pair.src, pair.tgt_in)
    alti, _ = decomposition.alti_plus(trace)
    torch.testing.assert_close(alti.double(), _alti_plus_reference(tr.model, pair), atol=5e-6, rtol=0)
    last = len(tr.model.decoder.layers)
    vz = decomposition.value_zeroing(trace, layer=last).double()
    torch.testing.assert_close(vz, _value_zeroing_reference(tr.model, pair, last - 1).clamp_min(0), atol=5e-6, rtol=0)
    an_ref = _attention_norm_reference(tr.model, pair, last - 1)
    an = decomposition.attention_norm(trace, layer=last).double()
    assert float((an - an_ref).abs().max()) <= 1e-6 * float(an_ref.abs().max())


@pytest.mark.parametrize("norm", ["pre-norm", "post-norm"])
def test_each_records_terms_add_up_to_its_blocks_result(norm, tokenizer):
    """ALTI's terms of every block (the residual on the diagonal, or column 0 in cross-attention), plus the
    output bias and β through the norm's linear part, are the block's real result ``mid``; every record ends
    at its layer's output."""
    tr = _tiny64(norm, tokenizer)
    pair = forced_translation(tr, SOURCE, TARGET)
    trace = trace_transformer(tr.model, pair.src, pair.tgt_in)
    blocks = [*trace.encoder, *(b for lt in trace.decoder for b in (lt.self_block, lt.cross_block))]
    norms = [lyr.norm1 for lyr in tr.model.encoder.layers]
    norms += [n for lyr in tr.model.decoder.layers for n in (lyr.norm1, lyr.norm2)]
    for parts, ln in zip(blocks, norms, strict=True):
        terms = parts.mixing_terms()  # (Nq, Nk, D) or (Nq, 1 + Nk, D)
        assert terms.shape[1] == parts.weights.shape[2] + (parts.source is not None)
        bias = torch.stack([parts.bias_at(i) for i in range(parts.mid.shape[0])])  # (Nq, D)
        beta = ln.bias if parts.scale is not None else 0.0
        torch.testing.assert_close(terms.sum(1) + bias + beta, parts.mid, atol=1e-10, rtol=0)
    for lt in trace.decoder:
        assert torch.equal(lt.self_block.out, lt.cross_block.out) and lt.out is lt.cross_block.out
    assert all(lt.cross_block.source is trace.memory for lt in trace.decoder)


def test_a_replay_that_is_not_the_layers_output_is_refused_in_one_line(tokenizer):
    tr = _tiny64("pre-norm", tokenizer)
    pair = forced_translation(tr, SOURCE, TARGET)
    layer = tr.model.encoder.layers[1]
    handle = layer.register_forward_hook(lambda m, a, out: (out[0] + 0.5, out[1]))  # a layer not of that form
    try:
        with pytest.raises(TraceError) as err:
            trace_transformer(tr.model, pair.src, pair.tgt_in)
    finally:
        handle.remove()
    msg = str(err.value)
    assert "\n" not in msg and "encoder layer 2" in msg and "does not give its output" in msg
