"""One attention head at one query, step by step: what the explorer's step-through view shows and
recomputes in the page (temperature, the √d scale, a masked key, two keys swapped).

For a dot-product head (Vaswani et al. 2017) at query position ``i``::

    s_j = q_i · k_j            (the products)
    e_j = s_j · scale          (scale = 1/√d_h)
    α   = softmax_j(e_j + M_j) (M_j = −∞ where key j is masked: causal, padding)
    o_i = Σ_j α_j v_j          (the head's output: its d_h columns of Concat(head_1..head_H), before W_O)

``q_i``, ``K`` and ``V`` are the module's own, taken at its real input during one forward pass (forward
hooks through :func:`attnkit.hooks.thread_hooks`, or the call to ``transformers``' attention interface
for a Hugging Face model): after RoPE where the model rotates them, one key/value head per group under
grouped-query attention. ``weights`` is the model's own row (what its attention maps show) and
``output`` the head's slice of the concatenation as the model formed it (attnkit's models: the input of
``W_O`` read by a hook), both to check the recomputation against.

For an additive head (Bahdanau et al. 2015, RNNsearch) the score of key ``j`` is
``e_j = vᵀ tanh(W s + U h_j)``: there is no ``q·k`` to show, so ``scores`` holds ``e_j`` per key and the
values are the annotations ``h_j``; the temperature and the mask apply as to any score.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from ..hooks import thread_hooks
from .head_step_record import HeadStep, check_attends, check_number
from .head_step_translator import translator_step

__all__ = ["HEAD_STEP_SITES", "HeadStep", "head_step", "head_step_numbers"]

#: the attention sites a step-through can ask for: a text model's "self"; a translator's three
HEAD_STEP_SITES = ("self", "encoder", "decoder self", "cross")


def head_step_numbers(n_keys: int, head_dim: int) -> int:
    """How many numbers a step holds: ``q``, ``K`` and ``V`` (``(2n + 1)·d_h``), the row, mask and scores."""
    return (2 * n_keys + 2) * head_dim + 3 * n_keys


def head_step(
    impl,
    *,
    site: str = "self",
    layer: int = 1,
    head: int = 1,
    query: int = 1,
    text: str | None = None,
    source: str | None = None,
    target: str | None = None,
    label: str = "",
) -> HeadStep:
    """Head ``head`` of layer ``layer`` at position ``query`` (all from 1) of ``impl``: an attnkit language
    model or a Hugging Face encoder-only or decoder-only text model reading ``text`` (``site="self"``), or
    an attnkit Transformer translator (``site`` ``"encoder"``, ``"decoder self"`` or ``"cross"``) or
    RNNsearch (``"cross"``, layer 1, head 1) reading ``source`` and forced to write ``target`` (default:
    its greedy translation). Raises :class:`~attnkit.errors.InputError` naming the bad argument."""
    if site not in HEAD_STEP_SITES:
        raise InputError(f"site must be one of {', '.join(HEAD_STEP_SITES)}, got {site!r}")
    if source is not None or hasattr(impl, "attention_batch"):  # a translator
        if not isinstance(source, str) or not source.strip():
            raise InputError("source must be a non-empty text (a translator reads a source)")
        return translator_step(impl, source, target, site, layer, head, query, label)
    if not isinstance(text, str) or not text.strip():
        raise InputError("text must be a non-empty text")
    if site != "self":
        raise InputError(f"a text model has one attention site, 'self'; got site {site!r}")
    check_number(layer, "layer", impl.num_layers, f"the model has {impl.num_layers} layers")
    check_number(head, "head", impl.num_heads, f"the model has {impl.num_heads} heads")
    ids, pieces = impl.encode(text)
    check_number(query, "query", len(ids), f"the text has {len(ids)} tokens")
    if hasattr(impl, "hf_tokenizer"):
        return _hf_step(impl, ids, pieces, layer, head, query, label)
    return _lm_step(impl, ids, pieces, layer, head, query, label)


@torch.no_grad()
def _lm_step(lm, ids: list[int], pieces: list[str], layer: int, head: int, query: int, label: str) -> HeadStep:
    """attnkit's language model: :class:`~attnkit.attention.CausalSelfAttention`'s input read by a hook, q, k
    and v made from its weights as its forward makes them (RoPE included), its weights and ``W_O``'s input
    read by hooks."""
    attn = lm.model.layers[layer - 1].self_attn
    got: dict[str, Tensor] = {}

    def take(module, args, kwargs, output):
        got["x"], got["w"] = (args[0] if args else kwargs["x"]), output[1]

    def concat(module, args):
        got["ctx"] = args[0]

    with thread_hooks([(attn, take)], with_kwargs=True), thread_hooks([(attn.o_proj, concat)], pre=True):
        lm.model(torch.tensor([ids], device=lm.device), need_weights=True)
    x = got["x"][:1]  # (1, N, D)
    n, dh, g = x.shape[1], attn.head_dim, attn.groups
    qkv = F.linear(x, *attn.qkv_weight())  # (1, N, (H + 2 Hkv) Dh)
    q, k, v = qkv.split((attn.n_heads * dh, attn.n_kv_heads * dh, attn.n_kv_heads * dh), dim=-1)
    q = q.view(1, n, attn.n_heads, dh).transpose(1, 2)  # (1, H, N, Dh)
    k = k.view(1, n, attn.n_kv_heads, dh).transpose(1, 2)  # (1, Hkv, N, Dh)
    v = v.view(1, n, attn.n_kv_heads, dh).transpose(1, 2)
    if attn.rotary is not None:
        q, k = attn.rotary(q, k, offset=0)
    h, i, kv = head - 1, query - 1, (head - 1) // g
    mask = [j <= i for j in range(n)]
    cols = (h * dh, (h + 1) * dh)
    return HeadStep(
        model=label,
        site="self",
        layer=layer,
        head=head,
        num_heads=attn.n_heads,
        query=query,
        query_pieces=pieces,
        key_pieces=pieces,
        score="dot",
        formula="e_j = q_i · k_j / √d_h",
        q=q[0, h, i].float().cpu(),
        keys=k[0, kv].float().cpu(),
        scores=None,
        values=v[0, kv].float().cpu(),
        scale=1 / math.sqrt(dh),
        mask=mask,
        weights=got["w"][0, h, i].float().cpu(),
        output=got["ctx"][0, i, cols[0] : cols[1]].float().cpu(),
        columns=cols,
        width=attn.n_heads * dh,
        positions="rope"
        if attn.rotary is not None
        else ("absolute" if lm.model.embed_positions is not None else "none"),
        kv_group=kv + 1 if g > 1 else None,
    )


@torch.no_grad()
def _hf_step(sa, ids: list[int], pieces: list[str], layer: int, head: int, query: int, label: str) -> HeadStep:
    """A Hugging Face model: the queries, keys, values and mask its attention module hands to
    ``transformers``' attention interface (after RoPE, the key/value heads not repeated); its row as the
    explorer's maps compute it (:func:`attnkit.hf.capture.attention_weights`)."""
    from ..hf.capture import attention_weights, watch_attention_call
    from ..hf.transformers_internals import attention_implementation

    if attention_implementation(sa.model) != "sdpa":
        raise InputError(
            f"{label or 'this model'} runs {attention_implementation(sa.model)} attention; the step-through reads "
            "the queries and keys of sdpa attention (load it with attn_implementation='sdpa')"
        )
    site = sa.sites[layer - 1]
    got: dict = {}

    def record(module, q, k, v, mask, kwargs):
        got.update(q=q.detach(), k=k.detach(), v=v.detach(), mask=mask, kwargs=kwargs)

    with watch_attention_call(site.module, record, values=True):
        sa.model(input_ids=torch.tensor([ids], device=sa.device))
    if not got:
        raise InputError(f"{label or 'this model'}'s attention modules do not call transformers' attention interface")
    q, k, v, mask, kw = got["q"], got["k"], got["v"], got["mask"], got["kwargs"]
    if kw.get("position_bias") is not None:
        raise InputError(
            f"{label or 'this model'} adds a relative position bias to q·k; the step-through shows q·k only"
        )
    H, n, dh = q.shape[1], k.shape[2], q.shape[-1]
    g, h, i = H // k.shape[1], head - 1, query - 1
    kv = h // g
    causal = kw.get("is_causal")
    causal = bool(getattr(site.module, "is_causal", True) if causal is None else causal) and mask is None
    scaling = kw.get("scaling")
    scale = dh**-0.5 if scaling is None else float(scaling)
    row = attention_weights(q, k, mask, scaling=scale, is_causal=causal, heads=[h])[0, 0, i]  # (n,)
    if mask is None:
        may = [(j <= i) if causal and q.shape[2] > 1 else True for j in range(n)]
    else:
        m = mask[0, min(h, mask.shape[1] - 1), i, :n]
        may = (m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2).tolist()
    check_attends(row, may)
    cfg = sa.model.config
    rope = any(getattr(cfg, a, None) is not None for a in ("rope_theta", "rope_parameters", "rope_scaling"))
    return HeadStep(
        model=label,
        site="self",
        layer=layer,
        head=head,
        num_heads=H,
        query=query,
        query_pieces=pieces,
        key_pieces=pieces,
        score="dot",
        formula="e_j = q_i · k_j · scaling" + (" (scaling = 1/√d_h)" if abs(scale - dh**-0.5) < 1e-12 else ""),
        q=q[0, h, i].float().cpu(),
        keys=k[0, kv].float().cpu(),
        scores=None,
        values=v[0, kv].float().cpu(),
        scale=scale,
        mask=may,
        weights=row.float().cpu(),
        output=(row.to(v.dtype) @ v[0, kv]).float().cpu(),  # (d_h,)
        columns=(h * dh, (h + 1) * dh),
        width=H * dh,
        positions="rope" if rope else "absolute",
        kv_group=kv + 1 if g > 1 else None,
    )
