"""One trace of a residual Transformer's blocks, whoever built the model: the records every
decomposition reads (attention-norm, value zeroing, ALTI, ALTI-Logit, direct logit attribution, the
logit lens, the information-flow routes), and :class:`BlockTracer`, what a model family implements to
produce them.

Every block's attention sub-block is read as a sum over its keys (Kobayashi et al. 2020, "Attention is
not only a weight")::

    a_i = Σ_h Σ_j α^h_ij f^h(u_j) + b_O,        f^h(u) = (W_V^h u + b_V^h) W_O^h

with ``u`` the normalised input the values are read from and ``α`` the weights the model really used.
Three layouts, by where the norms sit (``r`` the block's input, ``a`` the attention's output, ``m`` the
attention sub-block's result)::

    pre-norm   (GPT-2, Llama, attnkit's language model): m = r + a(N₁(r)),    out = m + MLP(N₂(m))
    sandwich   (Gemma 2/3, OLMo 2):                       m = r + P(a(N₁(r))), out = m + P'(MLP(N₂(m)))
    post-norm  (BERT; Vaswani et al. 2017):               m = LN(r + a(r)),    out = LN'(m + FFN(m))

A norm after the attention is linear once its input's statistics are held at their real values
(:func:`linearise_norm`), which is how the decompositions pass through it (Ferrando et al. 2022).

An encoder-decoder translator's blocks are the same record: an encoder layer is a self-attention block;
a decoder layer is a causal self-attention block whose rest (``rest``) runs the cross-attention block
and the feed-forward sub-layer, and a cross-attention block whose values are read from the encoder's
output (``source``, the key/value side's stream) instead of its own input (:func:`trace_encoder_decoder`
replays a whole translator from its layers' real inputs: attnkit's Transformer in
:mod:`attnkit.attribution.trace`, the Hugging Face encoder-decoders in :mod:`attnkit.hf.decomposition`).

A language-model family implements :class:`BlockTracer` once: how each block's parts are laid out
(:class:`BlockLayout`) and how the weights it used are captured. The Hugging Face families do it in
:mod:`attnkit.hf.lm_tracer`, attnkit's own language model in :mod:`attnkit.models.language_model_trace`
(with the model's own hook points: forward hooks on its blocks, removed in ``finally``). Every replayed
block is checked against the model's own output (:func:`check_replay`) and refused in one line when it
does not match, never decomposed by guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

import torch
from torch import Tensor, nn

from ..errors import TraceError

__all__ = [
    "BlockLayout",
    "BlockTracer",
    "DecoderLayerParts",
    "EncoderDecoderTrace",
    "LMLayerParts",
    "LMRecording",
    "LMRowParts",
    "LMTrace",
    "LayerRows",
    "NormLinear",
    "block_parts",
    "check_replay",
    "check_token_ids",
    "linearise_norm",
    "softmax_weights",
    "trace_encoder_decoder",
]


@dataclass
class BlockLayout:
    """One block's parts: ``kind`` (``pre``, ``sandwich`` or ``post``), ``attn`` (its attention module),
    ``pre_norm`` (N₁; None where the values read the block's input itself), ``post_norm`` (P or LN; None
    in a pre-norm block), ``values(u)`` → ``(v (H, N, Dh), W_O (H, Dh, D), b_O or None)`` and ``rest(m,
    r)`` → the block's output from the attention sub-block's result ``m`` and the block's input ``r``;
    ``weights(u, s)`` → ``α (H, Nq, Nk)`` from the queries' input ``u`` and the keys' input ``s``, for a
    family that recomputes the weights it used (the translators) instead of capturing them."""

    kind: str
    attn: nn.Module
    pre_norm: nn.Module | None
    post_norm: nn.Module | None
    values: Callable[[Tensor], tuple[Tensor, Tensor, Tensor | None]]
    rest: Callable[[Tensor, Tensor], Tensor] | None
    weights: Callable[[Tensor, Tensor], Tensor] | None = None

    def mix(self, residual: Tensor, attention: Tensor) -> Tensor:
        """``m`` from the block's input ``r (N, D)`` and the attention module's output ``a (N, D)``."""
        if self.kind == "pre":
            return residual + attention
        if self.kind == "sandwich":
            return residual + self.post_norm(attention)
        return self.post_norm(residual + attention)


def per_head_output(w_o: Tensor, nh: int, dh: int) -> Tensor:
    """``(H, Dh, D)`` from an ``nn.Linear`` output projection's weight ``(D, H·Dh)``."""
    return w_o.view(w_o.shape[0], nh, dh).permute(1, 2, 0)


def expand_kv(v: Tensor, nh: int) -> Tensor:
    """``(H, N, Dh)`` from ``(Hkv, N, Dh)``: a key/value head's values serve its group of query heads."""
    return v if v.shape[0] == nh else v.repeat_interleave(nh // v.shape[0], dim=0)


def softmax_weights(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    """``α = softmax(q kᵀ · scale)`` ``(H, Nq, Nk)`` from ``q (H, Nq, Dh)`` and ``k (H, Nk, Dh)``, query i
    seeing keys ``j ≤ i`` only where ``causal``."""
    scores = (q @ k.transpose(1, 2)) * scale  # (H, Nq, Nk)
    if causal:
        allowed = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)


def linearise_norm(norm: nn.Module, x: Tensor) -> tuple[Tensor, bool, Tensor | None]:
    """A norm at its real input ``x (..., D)`` as a linear map with ``x``'s statistics held fixed:
    ``(scale (..., D), center, bias)`` with ``N(t) ≈ scale ⊙ (t − mean t if center else t) + bias``,
    exact for ``t = x``. LayerNorm: ``γ / σ(x)``, centred, ``β``; RMSNorm: ``g / rms(x)`` (Gemma's
    ``1 + w``), computed in at least float32 as the modules do."""
    if isinstance(norm, nn.LayerNorm):
        sigma = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        gain = norm.weight if norm.weight is not None else torch.ones_like(x[..., :1])
        return gain / sigma, True, norm.bias
    wide = torch.promote_types(x.dtype, torch.float32)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if eps is None:  # torch's RMSNorm with eps=None uses its dtype's machine epsilon
        eps = torch.finfo(x.dtype).eps
    inv = torch.rsqrt(x.to(wide).pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)
    w = norm.weight
    if w is None:
        w = torch.ones_like(x[..., :1])
    gain = 1.0 + w if "Gemma" in type(norm).__name__ else w  # Gemma's RMSNorm scales by (1 + w)
    return gain * inv, False, None


@dataclass
class LMLayerParts:
    """One traced block (``layer`` 0-based inside code): the attention module's output ``attention =
    Σ_h Σ_j weights[h, :, j] values[h, j] + out_bias``, the attention sub-block's result ``mid =
    mix(residual, attention)`` and the block's output ``out = mlp(mid)``. ``weights (H, N, N)``;
    ``head_values (H, N, Dh)`` (each query head's value vectors) and ``w_o (H, Dh, D)`` (its rows of
    the output projection), whose product is ``values (H, N, D)`` = ``f^h(u_j)``; ``residual``,
    ``attention``, ``mid``, ``out (N, D)``. Where a norm follows the attention, ``scale (N, D)`` and
    ``center`` are its linear part at each position's real input (:func:`linearise_norm`) and
    ``through_residual`` says whether the residual passes it too (post-norm) or not (Gemma 2/3, OLMo 2).
    A cross-attention block (a translator's decoder) reads its keys and values from ``source (Nk, D)``,
    the encoder's output, rather than from its own input: ``weights (H, Nq, Nk)``, ``head_values (H, Nk,
    Dh)``, and its residual is a term of its own (column 0 of :meth:`mixing_terms`), not a key's."""

    layer: int
    weights: Tensor
    head_values: Tensor
    w_o: Tensor
    out_bias: Tensor | None
    residual: Tensor
    attention: Tensor
    mid: Tensor
    mlp: Callable[[Tensor], Tensor]
    out: Tensor
    mix: Callable[[Tensor, Tensor], Tensor] = field(repr=False, default=lambda r, a: r + a)
    scale: Tensor | None = None
    center: bool = False
    through_residual: bool = False
    source: Tensor | None = None

    @cached_property
    def values(self) -> Tensor:
        """``(H, N, D)``: ``f^h(u_j) = v^h_j W_O^h``."""
        return self.head_values @ self.w_o

    def _through_norm(self, t: Tensor, i) -> Tensor:
        """``t (..., D)`` reaching position(s) ``i`` through the linear part of the norm after the attention."""
        if self.scale is None:
            return t
        if self.center:
            t = t - t.mean(-1, keepdim=True)
        return t * self.scale[i]

    def terms(self) -> Tensor:
        """``(N, N, D)``: ``T_ij = Σ_h α^h_ij f^h(u_j)``, what key j adds to the attention's output at i
        (heads summed, before any norm: Kobayashi et al. 2020's vectors)."""
        return torch.einsum("hij,hjd->ijd", self.weights, self.values)

    def mixing_terms(self) -> Tensor:
        """``(N, N, D)``: the terms of ``mid`` (less the bias and β, which belong to no token): each
        ``T_ij`` through the norm's linear part at i, and the residual ``r_i`` added to the diagonal term
        (through the norm too in a post-norm block). ALTI's terms. A cross-attention block's are ``(Nq,
        1 + Nk, D)``: the residual is column 0 (ALTI+, Ferrando et al. 2022)."""
        t = self.terms()
        if self.source is not None:
            r = self.residual.unsqueeze(1)  # (Nq, 1, D)
            if self.scale is None:
                return torch.cat([r, t], dim=1)
            if self.through_residual:
                return self._rows(torch.cat([r, t], dim=1))
            return torch.cat([r, self._rows(t)], dim=1)
        idx = torch.arange(t.shape[0], device=t.device)
        if self.through_residual:
            t[idx, idx] += self.residual
        if self.scale is not None:
            t = self._rows(t)
        if not self.through_residual:
            t[idx, idx] += self.residual
        return t

    def _rows(self, t: Tensor) -> Tensor:
        """``t (N, N, D)`` with row i through the norm's linear part at position i."""
        if self.center:
            t = t - t.mean(-1, keepdim=True)
        return t * self.scale[:, None, :]  # (N, N, D): row i scaled by position i's statistics

    def head_terms(self, i: int) -> Tensor:
        """``(H, D)``: what each head adds at position ``i`` (its keys summed), through the norm's linear part."""
        ctx = torch.einsum("hj,hjk->hk", self.weights[:, i], self.head_values)  # (H, Dh)
        return self._through_norm(torch.einsum("hk,hkd->hd", ctx, self.w_o), i)

    def source_terms(self, i: int) -> Tensor:
        """``(N, D)``: what each source token j adds at position ``i`` (heads summed), through the norm's linear part."""
        h, n, dh = self.head_values.shape
        weighted = self.weights[:, i, :, None] * self.head_values  # (H, N, Dh)
        summed = weighted.transpose(0, 1).reshape(n, h * dh) @ self.w_o.reshape(h * dh, -1)  # (N, D)
        return self._through_norm(summed, i)

    def bias_at(self, i: int) -> Tensor:
        """``(D,)``: the attention's output bias as it reaches position ``i`` (zeros where there is none)."""
        if self.out_bias is None:
            return self.residual.new_zeros(self.residual.shape[-1])
        return self._through_norm(self.out_bias, i)

    def attention_output(self) -> Tensor:
        """``(N, D)``: ``Σ_j T_ij + b_O``, the attention module's output."""
        return self.attention

    def mid_without(self, j: int) -> Tensor:
        """``(N, D)``: ``mid`` with token ``j``'s values zeroed in every head (any norm recomputed)."""
        g = torch.einsum("hk,hkd->hd", self.head_values[:, j], self.w_o)  # (H, D): f^h(u_j)
        return self.mix(self.residual, self.attention - self.weights[:, :, j].T @ g)


@dataclass
class LMRowParts:
    """One block at the query positions ``rows`` (sorted, 0-based) only: ``weights (H, k, K)`` (α of
    those rows over the keys ``0..K-1``, ``K = max(rows) + 1``), ``head_values (H, K, Dh)`` and ``w_o
    (H, Dh, D)`` (``f^h(u_j) = head_values[h, j] @ w_o[h]``), and ``residual``, ``mid``, ``out (k, D)``
    at the rows; ``scale (k, D)`` and ``center``: the linear part of the norm after the attention at
    each row's real input (None in a pre-norm block), as in :class:`LMLayerParts`."""

    layer: int
    rows: list[int]
    weights: Tensor
    head_values: Tensor
    w_o: Tensor
    residual: Tensor
    mid: Tensor
    out: Tensor
    scale: Tensor | None = None
    center: bool = False


@dataclass
class LMTrace:
    """What the pass gives besides the layers: the first layer's input ``embedding (N, D)`` (token and
    position embeddings), the last layer's output ``final (N, D)`` (the final norm's input) and the
    model's ``logits (N, V)`` (None for a model without a language-model head)."""

    embedding: Tensor
    final: Tensor
    logits: Tensor | None
    model_type: str


@dataclass
class NormLinear:
    """The final norm linearised at one real residual ``x`` (as direct logit attribution does in the
    field): ``N(t) ≈ scale ⊙ (t − mean t if center else t) + bias`` with the normaliser (σ or RMS) of
    ``x`` held fixed; exact for ``t = x``, and linear, so the terms of ``x`` add up to ``N(x)``."""

    scale: Tensor
    center: bool
    bias: Tensor | None

    def __call__(self, t: Tensor) -> Tensor:
        """``(..., D) -> (..., D)``: the linear part (no bias)."""
        return self.scale * (t - t.mean(-1, keepdim=True) if self.center else t)


@dataclass
class LMRecording:
    """One plain pass of a model, kept for :meth:`BlockTracer.replay`: each layer's input ``inputs[l] (N,
    D)`` (``inputs[0]`` the embeddings) and output ``outputs[l]``, what the family needs to rerun a layer's
    attention (``calls``: a Hugging Face attention module's arguments, by reference), and the pass's
    :class:`LMTrace`; ``position_logits (V,)``: the logits at the position asked for (``logits_at``; the
    trace then has no logits), else None."""

    model: nn.Module
    model_type: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    calls: list[tuple[tuple, dict]]
    trace: LMTrace
    position_logits: Tensor | None = None

    @property
    def n_layers(self) -> int:
        """How many layers the model has."""
        return len(self.inputs)


def check_token_ids(**ids: Tensor) -> None:
    """Each named argument must be a non-empty ``(N,)`` tensor of token ids (``ValueError`` naming it)."""
    for name, t in ids.items():
        if not isinstance(t, Tensor) or t.dim() != 1 or t.numel() == 0:
            raise ValueError(f"{name} must be a non-empty (N,) tensor of token ids, got {getattr(t, 'shape', t)}")


def check_replay(
    replayed: Tensor, real: Tensor, what: str, model_type: str, error: type[Exception] = TraceError
) -> None:
    """Refuse in one line (``error``) where a replayed block's output is not the model's own (beyond a
    tolerance of 1,000 ulps of its largest value)."""
    scale = max(1.0, float(real.abs().max()))
    tol = 1e3 * torch.finfo(real.dtype).eps * scale
    err = float((replayed - real).abs().max())
    if not err <= tol:
        raise error(
            f"replaying {what} of this {model_type} model as a residual attention block does not give its output "
            f"(max difference {err:.2g} > {tol:.2g}): the decompositions are not defined for its layers"
        )


def block_parts(
    lay: BlockLayout, i: int, x: Tensor, weights: Tensor | None = None, source: Tensor | None = None
) -> LMLayerParts:
    """Block ``i`` (0-based) of layout ``lay`` rebuilt from its real input ``x (N, D)`` and the attention
    weights ``(H, N, Nk)`` it used (None: ``lay.weights`` recomputes them): every part of
    :class:`LMLayerParts` (not yet checked: the caller holds the real output). ``source (Nk, D)``: the
    stream a cross-attention block reads its keys and values from (None: its own normalised input)."""
    u = x if lay.pre_norm is None else lay.pre_norm(x)
    kv = u if source is None else source
    v, w_o, bias = lay.values(kv)  # (H, Nk, Dh), (H, Dh, D)
    if weights is None:
        weights = lay.weights(u, kv)  # (H, N, Nk)
    weights = weights.to(v.dtype)
    ctx = weights @ v  # (H, N, Dh)
    attention = torch.einsum("hnk,hkd->nd", ctx, w_o)  # (N, D)
    if bias is not None:
        attention = attention + bias
    mid = lay.mix(x, attention)
    scale, center = None, False
    if lay.post_norm is not None:  # linear given the statistics of its real input
        scale, center, _ = linearise_norm(lay.post_norm, attention if lay.kind == "sandwich" else x + attention)

    def mlp(m: Tensor, rest=lay.rest, x=x) -> Tensor:
        return rest(m, x)

    return LMLayerParts(
        i, weights, v, w_o, bias, x, attention, mid, mlp, mlp(mid), lay.mix, scale, center, lay.kind == "post", source
    )


@dataclass
class DecoderLayerParts:
    """A translator's decoder layer: its causal self-attention block (whose ``mlp`` runs the rest of the
    layer: the cross-attention block and the feed-forward sub-layer) and its cross-attention block
    (``source`` the encoder's output; ``mlp`` the feed-forward sub-layer); both end at the layer's output."""

    self_block: LMLayerParts
    cross_block: LMLayerParts

    @property
    def out(self) -> Tensor:
        """``(T, D)``: the layer's output."""
        return self.cross_block.out


@dataclass
class EncoderDecoderTrace:
    """A translator on one sentence pair: one self-attention block per encoder layer, one
    :class:`DecoderLayerParts` per decoder layer, the encoder's output ``memory (S, D)`` (after its final
    norm where it has one), the model's ``logits (T, V)``, and the ``rows`` (of ``T``) and ``cols`` (of
    ``S``) that are the text's target positions and source pieces (all of them for attnkit's Transformer;
    a Hugging Face model's sequences also hold its special tokens)."""

    encoder: list[LMLayerParts]
    decoder: list[DecoderLayerParts]
    memory: Tensor
    logits: Tensor
    rows: slice = field(default_factory=lambda: slice(None))
    cols: slice = field(default_factory=lambda: slice(None))


def trace_encoder_decoder(
    encoder: list[tuple[BlockLayout, Tensor, Tensor]],
    decoder: list[tuple[BlockLayout, BlockLayout, Tensor, Tensor]],
    memory: Tensor,
    model_type: str,
    error: type[Exception] = TraceError,
) -> tuple[list[LMLayerParts], list[DecoderLayerParts]]:
    """Every block of a translator replayed from its layers' real inputs, each layer checked against its
    real output (:func:`check_replay`): ``encoder`` holds ``(layout, input (S, D), output)`` per layer,
    ``decoder`` ``(self-attention layout, cross-attention layout, input (T, D), output)`` (the
    self-attention layout's ``rest`` is left None: it is the cross-attention block and what follows)."""
    enc = []
    for i, (lay, x, real) in enumerate(encoder):
        parts = block_parts(lay, i, x)
        check_replay(parts.out, real, f"encoder layer {i + 1}", model_type, error)
        enc.append(parts)
    dec = []
    for i, (self_lay, cross_lay, z, real) in enumerate(decoder):
        first: list[LMLayerParts] = []

        def rest(m: Tensor, r: Tensor, lay=cross_lay, i=i, first=first) -> Tensor:
            cross = block_parts(lay, i, m, source=memory)
            if not first:  # the real pass: the cross-attention block on the self-attention block's result
                first.append(cross)
            return cross.out

        sb = block_parts(replace(self_lay, rest=rest), i, z)
        check_replay(sb.out, real, f"decoder layer {i + 1}", model_type, error)
        dec.append(DecoderLayerParts(sb, first[0]))
    return enc, dec


class LayerRows:
    """Layer ``i`` (0-based) of a recorded pass, ready to be replayed at any rows up to ``keys - 1``
    (:meth:`parts`): its values for the first ``keys`` positions, held until the object is dropped. A
    family gives the attention rows (:meth:`_weights`): a whole map taken once (attnkit's models; Hugging
    Face's eager attention), or each chunk's rows formed from the queries and keys (Hugging Face's sdpa)."""

    def __init__(self, rec: LMRecording, i: int, keys: int, layout: BlockLayout, error: type[Exception]) -> None:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
            raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
        n = int(rec.inputs[i].shape[0])
        if isinstance(keys, bool) or not isinstance(keys, int) or not 1 <= keys <= n:
            raise ValueError(f"keys must be a number of positions in 1..{n}, got {keys!r}")
        self.rec, self.i, self.keys, self.layout, self.error = rec, i, keys, layout, error
        x = rec.inputs[i]
        with torch.no_grad():
            self.u = x if layout.pre_norm is None else layout.pre_norm(x)  # (N, D)
            self.head_values, self.w_o, self.bias = layout.values(self.u[:keys])  # (H, K, Dh), (H, Dh, D)

    def _weights(self, rows: Tensor, keys: int) -> Tensor:
        """``(H, k, keys)``: α at ``rows`` over the first ``keys`` keys."""
        raise NotImplementedError

    def parts(self, rows: list[int]) -> LMRowParts:
        """The block at ``rows`` (sorted positions, each below ``keys``), checked against the recorded
        output at those rows (one line, the family's error, where the replay does not reproduce it)."""
        if not rows or rows != sorted(rows) or rows[0] < 0 or rows[-1] >= self.keys:
            raise ValueError(f"rows must be sorted positions in 0..{self.keys - 1}, got {rows!r}")
        lay, rec = self.layout, self.rec
        idx = torch.tensor(rows, dtype=torch.long, device=self.head_values.device)
        keys = rows[-1] + 1
        with torch.no_grad():
            weights = self._weights(idx, keys).to(self.head_values.dtype)  # (H, k, keys)
            v = self.head_values[:, :keys]  # (H, keys, Dh)
            attention = torch.einsum("hnk,hkd->nd", weights @ v, self.w_o)  # (k, D)
            if self.bias is not None:
                attention = attention + self.bias
            x = rec.inputs[self.i][idx]  # (k, D)
            mid = lay.mix(x, attention)
            scale, center = None, False
            if lay.post_norm is not None:  # linear given the statistics of its real input
                scale, center, _ = linearise_norm(lay.post_norm, attention if lay.kind == "sandwich" else x + attention)
            out = lay.rest(mid, x)
            check_replay(out, rec.outputs[self.i][idx], f"layer {self.i + 1}", rec.model_type, self.error)
        return LMRowParts(self.i, list(rows), weights, v, self.w_o, x, mid, out, scale, center)


class BlockTracer:
    """What a model family implements once so that every decomposition reads its blocks (module
    docstring): ``model``, ``model_type`` (named in messages), ``n_layers``, ``decoder`` (it predicts the
    next token), ``error`` (the family's one-line error class), and :meth:`trace`, :meth:`record`,
    :meth:`replay`, :meth:`layer_rows`, :meth:`final_norm`, :meth:`unembedding`, :attr:`softcap`. The
    readings built on those (:meth:`logits`, :meth:`final_norm_linear`, the refusals) are written here once."""

    model: nn.Module
    model_type: str
    n_layers: int
    decoder: bool
    error: type[Exception] = TraceError
    softcap: float | None = None  # the final logits' soft cap, c · tanh(z / c) (Gemma 2), where the model has one

    def trace(self, input_ids: Tensor, on_layer: Callable[[LMLayerParts], None]) -> LMTrace:
        """Run the model once on ``input_ids (N,)`` and call ``on_layer(parts)`` for each layer in order as
        it runs, each replay checked against the layer's real output; what the callback keeps is all that
        is kept."""
        raise NotImplementedError

    def record(self, input_ids: Tensor, *, logits_at: int | None = None) -> LMRecording:
        """One plain pass keeping each layer's input and output (``logits_at``: the logits of that
        position only, kept as ``position_logits``)."""
        raise NotImplementedError

    def replay(self, rec: LMRecording, i: int) -> LMLayerParts:
        """Layer ``i`` (0-based) of a recorded pass replayed whole, checked against the recorded output."""
        raise NotImplementedError

    def layer_rows(self, rec: LMRecording, i: int, keys: int) -> LayerRows:
        """Layer ``i`` of a recorded pass, to be replayed at chosen rows below ``keys`` (:class:`LayerRows`)."""
        raise NotImplementedError

    def final_norm(self) -> nn.Module:
        """The norm the last block's output passes before the unembedding."""
        raise NotImplementedError

    def unembedding(self) -> nn.Module | None:
        """The language-model head (an ``nn.Linear`` from the model width to the vocabulary), or None."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def refusal(self) -> str | None:
        """Why this model's blocks cannot be traced (one clause), or None where they can."""
        return None

    def require_decoder(self, what: str) -> nn.Module:
        """The unembedding; ``what`` (a method's name) refused in one line for a model that predicts no
        next token (an encoder-only model, or one without its language-model head)."""
        if not self.decoder:
            raise self.error(
                f"{self.model_type} is an encoder-only model, which predicts no next token: {what} is for "
                "decoder-only models (attention-norm, value zeroing and ALTI read its token representations)"
            )
        head = self.unembedding()
        if head is None:
            raise ValueError("model must have a language-model head (a ...ForCausalLM model)")
        return head

    def logits(self, x: Tensor) -> Tensor:
        """``(..., V)``: residuals ``x (..., D)`` read as the model reads its last one: final norm,
        unembedding, and the soft cap of the final logits where the model has one (``c · tanh(z / c)``)."""
        z = self.unembedding()(self.final_norm()(x))
        return z if not self.softcap else torch.tanh(z / self.softcap) * self.softcap

    def final_norm_linear(self, x: Tensor) -> NormLinear:
        """The final norm linearised at ``x (D,)`` (:class:`NormLinear`, :func:`linearise_norm`)."""
        scale, center, bias = linearise_norm(self.final_norm(), x)
        return NormLinear(scale, center, bias)

    def check_ids(self, input_ids: Tensor) -> None:
        """``input_ids`` must be a non-empty ``(N,)`` tensor of token ids (``ValueError`` otherwise)."""
        check_token_ids(input_ids=input_ids)
