"""Gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability
for Interpreting Bi-Modal and Encoder-Decoder Transformers"), for a language model's next tokens and a
translator's target pieces.

Each token's relevance starts as itself, ``R = I`` (``n × n``), and every layer in order adds what its
attention moves, weighted by how much the prediction's score depends on it::

    Ā_l = E_h[(∇_{A_l} y ⊙ A_l)⁺],        R ← R + Ā_l · R

with ``A_l`` the layer's attention weights ``(H, n, n)``, ``y = log p(token)`` the score of the token being
explained and ``⁺`` the positive part; the row of ``R`` at the position that predicts the token is its
relevance over the input tokens. Where rollout averages the heads blindly, the gradient keeps the heads
(and the keys) the prediction actually uses; the self-attention rule is the paper's (its rules for
cross-attention and bi-modal models are for encoder-decoders). One forward pass with the weights in the
autograd graph, and one backward pass per explained token: a heavy method.

A translator (attnkit's Transformer, or a Bart-like Hugging Face encoder-decoder) follows the paper's
encoder-decoder rules. Three relevance maps start as
``R^{ss} = I`` (source × source), ``R^{tt} = I`` (target × target) and ``R^{ts} = 0`` (target × source);
``y_t`` is the logit of the forced target piece ``t`` (the paper's pre-softmax score), its gradients taken
on a copy of the sentence of its own (one forward and one backward pass of a batch of ``T`` copies), and
``Ā = E_h[(∇A ⊙ A)⁺]`` of each layer's weights as above (eq. 5)::

    encoder self-attention, each layer:   R^{ss} ← R^{ss} + Ā · R^{ss}                       (eq. 6)
    decoder self-attention, each layer:   R^{tt} ← R^{tt} + Ā · R^{tt},  R^{ts} ← R^{ts} + Ā · R^{ts}   (eqs. 6, 7)
    cross-attention, the same layer:      R^{ts} ← R^{ts} + (R̄^{tt})ᵀ · Ā · R̄^{ss}          (eq. 10)

with ``R̄ = R̂ / rowsum(R̂) + I``, ``R̂ = R − I`` (eqs. 8, 9: the self-relevance without its identity, each
row scaled to sum 1, the identity put back), ``R̄^{ss}`` the encoder's final map and ``R̄^{tt}`` the
decoder's as it stands at that layer. The paper's other cross rule, ``R^{tt} ← R^{tt} + Ā · R^{st}`` (eq. 11),
adds nothing here: the encoder never attends to the target, so ``R^{st}`` stays 0. Row ``t`` of ``R^{ts}``
after the last decoder layer, under the gradients of ``y_t``, is target piece ``t``'s relevance over the
source. A row of ``R̂`` summing to 0 (no positive gradient-weighted attention reached it) stays 0 rather
than 0/0. The weights are taken from the model's own attention modules by hooks for this call: attnkit's with
their ``need_weights`` forced on (the unfused path that returns the probabilities the values are multiplied
by), a Hugging Face model's under eager attention (its own implementation put back after), its special tokens
kept in the composition (as rollout keeps them) and left out of the rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from ..errors import InputError
from ..hooks import thread_hooks
from .result import MethodRows

__all__ = ["compose", "compose_encoder_decoder", "relevance_pairs", "relevance_rows", "residual_normalised"]


def compose(maps: list[Tensor], grads: list[Tensor]) -> Tensor:
    """``(n, n)``: ``R = Π_l (I + Ā_l)`` applied in layer order, ``Ā_l = E_h[(∇A_l ⊙ A_l)⁺]``, from each
    layer's weights ``maps[l] (H, n, n)`` and their gradients ``grads[l]``."""
    n = maps[0].shape[-1]
    r = torch.eye(n, dtype=torch.float64, device=maps[0].device)
    for a, g in zip(maps, grads, strict=True):
        r = r + _bar(a, g) @ r
    return r


def _bar(a: Tensor, g: Tensor) -> Tensor:
    """``Ā = E_h[(∇A ⊙ A)⁺]`` in float64: ``(..., H, n, m) -> (..., n, m)``."""
    return (g.double() * a.double()).clamp_min(0.0).mean(-3)


def residual_normalised(r: Tensor) -> Tensor:
    """``R̄ = R̂ / rowsum(R̂) + I`` with ``R̂ = R − I`` (the paper's eqs. 8, 9), ``r (..., n, n)``; a row of
    ``R̂`` summing to 0 is kept as it is (all zeros: every entry of ``R̂`` is non-negative)."""
    eye = torch.eye(r.shape[-1], dtype=r.dtype, device=r.device)
    hat = r - eye
    sums = hat.sum(-1, keepdim=True)  # (..., n, 1)
    return hat / torch.where(sums > 0, sums, torch.ones_like(sums)) + eye


def compose_encoder_decoder(encoder: list, decoder_self: list, cross: list) -> Tensor:
    """``R^{ts} (..., T, S)`` float64 by the encoder-decoder rules (module docstring), from each layer's
    ``(weights, gradients)``: ``encoder`` ``(..., H, S, S)`` per encoder layer, ``decoder_self`` ``(..., H, T, T)``
    and ``cross`` ``(..., H, T, S)`` per decoder layer, in layer order (``...``: any batch of compositions)."""
    if len(decoder_self) != len(cross):
        raise ValueError(
            f"decoder_self and cross must have one entry per decoder layer, got {len(decoder_self)} and {len(cross)}"
        )
    s, t = encoder[0][0].shape[-1], cross[0][0].shape[-2]
    batch, device = cross[0][0].shape[:-3], cross[0][0].device
    r_ss = torch.eye(s, dtype=torch.float64, device=device).expand(*batch, s, s)
    for a, g in encoder:
        r_ss = r_ss + _bar(a, g) @ r_ss  # (..., S, S)
    r_ss_bar = residual_normalised(r_ss)
    r_tt = torch.eye(t, dtype=torch.float64, device=device).expand(*batch, t, t)
    r_ts = torch.zeros(*batch, t, s, dtype=torch.float64, device=device)
    for (a_self, g_self), (a_cross, g_cross) in zip(decoder_self, cross):
        bar = _bar(a_self, g_self)  # (..., T, T)
        r_tt, r_ts = r_tt + bar @ r_tt, r_ts + bar @ r_ts
        r_ts = r_ts + residual_normalised(r_tt).transpose(-1, -2) @ _bar(a_cross, g_cross) @ r_ss_bar  # (..., T, S)
    return r_ts


def relevance_rows(sa, ids: list[int], prompt_len: int, *, layer=None, head=None) -> MethodRows:
    """The rows of :func:`attnkit.attribution.explain_generation` by gradient-weighted attention relevance:
    ``scores (G, n − 1)``, row ``t`` the relevance of every input token to ``log p(ids[P + t])`` at its
    predicting position ``P − 1 + t``. ``sa``: a text model (:meth:`attention_with_grad`)."""
    if layer is not None or head is not None:
        raise InputError("attention_relevance composes every layer and head: --layer and --head do not apply")
    logits, maps = sa.attention_with_grad(ids[:-1])  # (n-1, V), [(1, H, n-1, n-1)]
    logp = torch.log_softmax(logits.float(), dim=-1)
    rows = []
    positions = range(prompt_len - 1, len(ids) - 1)
    for t, p in enumerate(positions):
        grads = torch.autograd.grad(logp[p, ids[p + 1]], maps, retain_graph=t < len(positions) - 1)
        r = compose([a[0].detach() for a in maps], [g[0] for g in grads])
        rows.append(r[p])
    return MethodRows(torch.stack(rows).cpu())  # (G, n-1)


def _attention_modules(model) -> dict:
    """attnkit's Transformer's attention modules by site, each site's in layer order."""
    return {
        "encoder": [layer.self_attn for layer in model.encoder.layers],
        "self": [layer.self_attn for layer in model.decoder.layers],
        "cross": [layer.multihead_attn for layer in model.decoder.layers],
    }


def _hf_attention_modules(adapter) -> dict:
    """A Hugging Face encoder-decoder's attention modules by site (:mod:`attnkit.hf.capture`'s sites)."""
    kinds = {"encoder": "enc_self", "self": "dec_self", "cross": "cross"}
    return {
        site: [s.module for s in sorted((s for s in adapter.sites if s.kind == kind), key=lambda s: s.layer)]
        for site, kind in kinds.items()
    }


@contextmanager
def _eager(adapter) -> Iterator[None]:
    """A Hugging Face model run under eager attention (whose modules return the weights they multiplied the
    values by) within the block, its own implementation put back after; attnkit's Transformer as it is."""
    hf = getattr(adapter, "hf", None)
    if hf is None:
        yield
        return
    from ..hf.transformers_internals import attention_implementation

    before = attention_implementation(hf)
    if before != "eager":
        hf.set_attn_implementation("eager")
    try:
        yield
    finally:
        if before != "eager":
            hf.set_attn_implementation(before)


def _forced_with_grad(model, pair, copies: int) -> tuple[Tensor, dict]:
    """One teacher-forced pass of ``model`` over ``copies`` copies of ``pair`` (a batch) in eval mode, grad
    enabled: ``(features (copies, T, D), {site: [weights (copies, H, ., .) per layer]})``, the features those
    the output layer reads, the weights those each attention module multiplied its values by, in the autograd
    graph: attnkit's modules with ``need_weights`` forced on by a pre-hook for this call, a Hugging Face model's
    under eager attention (their output's last element; its special tokens kept)."""
    hf = getattr(model, "hf", None) is not None
    sites = _hf_attention_modules(model) if hf else _attention_modules(model)
    taken: dict = {m: [] for mods in sites.values() for m in mods}

    def force(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def keep(module, args, output):
        taken[module].append(output[-1] if hf else output[1])

    was_training = model.training
    model.eval()
    try:
        with (
            _eager(model),
            thread_hooks([] if hf else ((m, force) for m in taken), pre=True, with_kwargs=True),
            thread_hooks((m, keep) for m in taken),
            torch.enable_grad(),
        ):
            lengths = torch.full((copies,), len(pair.src), device=pair.src.device)
            src, tgt_in = pair.src[None].expand(copies, -1), pair.tgt_in[None].expand(copies, -1)
            features, _ = model(src, lengths, tgt_in, features_only=True)  # (copies, T, D)
    finally:
        model.train(was_training)
    maps = {site: [taken[m][0] for m in mods] for site, mods in sites.items()}
    if not all(isinstance(w, Tensor) and w.dim() == 4 and w.requires_grad for ws in maps.values() for w in ws):
        raise InputError(
            f"attention_relevance needs {type(model).__name__}'s attention weights in the autograd graph, "
            "which it does not return"
        )
    return features, maps


def relevance_pairs(model, pair, *, layer=None) -> MethodRows:
    """A translator's rows (:func:`attnkit.attribution.explain`): ``scores (T, S)``, row ``t`` the relevance
    ``R^{ts}[t]`` of every source piece to the logit of target piece ``pair.tgt[t]`` by the encoder-decoder
    rules (module docstring). ``model``: attnkit's Transformer, or a Hugging Face encoder-decoder (its special
    tokens kept in the composition, as rollout keeps them, and left out of the rows); ``pair``: a
    :class:`~attnkit.attribution.forced.ForcedTranslation`."""
    if layer is not None:
        raise InputError("attention_relevance composes every layer and head: --layer and --head do not apply")
    count = len(pair.tgt)
    # copy t of the sentence carries target piece t's gradient: the copies do not interact, so one backward
    # pass of the sum of copy t's logit of piece t gives each copy its own piece's gradients
    features, maps = _forced_with_grad(model, pair, count)  # (T, T, D)
    flat = [w for site in ("encoder", "self", "cross") for w in maps[site]]
    enc, dec = len(maps["encoder"]), len(maps["self"])
    row0 = flat[-1].shape[-2] - count  # a Hugging Face model's decoder prefix before bos: rows of no piece
    col0 = len(getattr(model, "src_prefix", ()))  # its source prefix: columns of no piece
    steps = torch.arange(count, device=features.device)
    weight, bias = model.output_layer()  # the logits of the forced pieces alone, not (T, T, V)
    logits = (features[steps, steps] * weight[pair.tgt]).sum(-1) + (0 if bias is None else bias[pair.tgt])  # (T,)
    grads = torch.autograd.grad(logits.sum(), flat, allow_unused=True)
    pairs = [(w.detach(), torch.zeros_like(w) if g is None else g) for w, g in zip(flat, grads)]
    r_ts = compose_encoder_decoder(pairs[:enc], pairs[enc : enc + dec], pairs[enc + dec :])  # (T, T', S'): copy t's
    return MethodRows(r_ts[steps, row0 + steps, col0 : col0 + len(pair.src)].cpu())  # (T, S)
