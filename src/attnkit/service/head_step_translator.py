"""The step-through of a translator's head (:func:`attnkit.service.head_step.head_step`): an attnkit
Transformer's encoder self-attention, decoder self-attention or cross-attention
(:class:`~attnkit.attention.MultiHeadAttention`: q, k and v projected from the inputs its forward was
called with, read by a hook), or RNNsearch's additive attention (Bahdanau et al. 2015: the scores
``e_tj``, weights ``α_tj``, annotations ``h_j`` and context ``c_t`` of its teacher-forced pass).

The pass is the explorer's own: :meth:`attnkit.tasks.translation.Translator.attention` of the source and
the target (teacher forcing). Decoder row ``t`` is the position whose output is target piece ``t``, as
the explorer's maps label it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import InputError
from ..hooks import thread_hooks
from .head_step_record import HeadStep, check_attends, check_number

__all__ = ["translator_step"]

_SITES = {"encoder": "enc_self", "decoder self": "dec_self", "cross": "cross"}


def _target_ids(tr, source: str, target: str | None) -> list[int]:
    """The forced target's ids: ``target``'s, or the greedy translation's."""
    if target is None:
        return list(tr.translate([source], beam_size=1)[0].tokens)
    if not isinstance(target, str) or not target.strip():
        raise InputError("target must be a non-empty text, or left out to force the greedy translation")
    return target


def translator_step(
    tr, source: str, target: str | None, site: str, layer: int, head: int, query: int, label: str
) -> HeadStep:
    """See the module docstring; ``site``: ``"encoder"``, ``"decoder self"`` or ``"cross"``."""
    from ..models.seq2seq import RNNSearch
    from ..models.transformer import TransformerTranslator

    model = getattr(tr, "model", None)
    if not hasattr(tr, "attention_batch"):
        raise InputError(f"{label or 'this model'} is not a translator attnkit can step through (give 'text')")
    if isinstance(model, RNNSearch):
        if site != "cross" or layer != 1 or head != 1:
            raise InputError(
                f"{label or 'RNNsearch'} has one attention (additive, decoder → encoder): ask site 'cross', "
                f"layer 1, head 1; got site {site!r}, layer {layer}, head {head}"
            )
        return _additive_step(tr, source, _target_ids(tr, source, target), query, label)
    if not isinstance(model, TransformerTranslator):
        raise InputError(
            f"{label or 'this translator'} ({type(model).__name__}) has no per-head attention to step through"
        )
    if site not in _SITES:
        raise InputError(f"a Transformer translator's sites are encoder, decoder self and cross; got {site!r}")
    stack = model.encoder.layers if site == "encoder" else model.decoder.layers
    check_number(layer, "layer", len(stack), f"the model has {len(stack)} layers")
    block = stack[layer - 1]
    attn = block.multihead_attn if site == "cross" else block.self_attn
    check_number(head, "head", attn.num_heads, f"the model has {attn.num_heads} heads")
    return _mha_step(tr, attn, source, _target_ids(tr, source, target), site, layer, head, query, label)


@torch.no_grad()
def _mha_step(tr, attn, source, target, site: str, layer: int, head: int, query: int, label: str) -> HeadStep:
    got: dict = {}

    def take(module, args, kwargs, output):
        query_in = args[0] if args else kwargs["query"]
        key_in = args[1] if len(args) > 1 else kwargs.get("key")
        value_in = args[2] if len(args) > 2 else kwargs.get("value")
        key_in = query_in if key_in is None else key_in
        got.update(
            query=query_in,
            key=key_in,
            value=key_in if value_in is None else value_in,
            kpm=kwargs.get("key_padding_mask"),
            mask=kwargs.get("mask"),
            causal=bool(kwargs.get("causal", False)),
            weights=output[1],
        )

    def concat(module, args):
        got["ctx"] = args[0]

    with thread_hooks([(attn, take)], with_kwargs=True), thread_hooks([(attn.out_proj, concat)], pre=True):
        att = tr.attention(source, target)
    src, tgt = att.source_pieces, att.target_pieces
    rows, cols = (src, src) if site == "encoder" else (tgt, tgt if site == "decoder self" else src)
    check_number(query, "query", len(rows), f"the {'source' if site == 'encoder' else 'target'} has {len(rows)} pieces")
    n, h, i = len(cols), head - 1, query - 1
    q = attn.project_query(got["query"][:1])[0, h, i]  # (Dh,)
    k, v = attn.project_kv(got["key"][:1], got["value"][:1])  # (1, H, Nk, Dh) each
    may = torch.ones(n, dtype=torch.bool)
    if got["kpm"] is not None:
        may &= got["kpm"][0, :n].cpu()
    if got["causal"]:
        may &= torch.arange(n) <= i
    if got["mask"] is not None:
        m = got["mask"]
        may &= (m[0] if m.dim() == 3 else m)[i, :n].cpu().bool()
    mask = may.tolist()
    weights = got["weights"][0, h, i, :n].float().cpu()
    check_attends(weights, mask)
    dh = attn.head_dim
    span = (h * dh, (h + 1) * dh)
    return HeadStep(
        model=label,
        site=site,
        layer=layer,
        head=head,
        num_heads=attn.num_heads,
        query=query,
        query_pieces=rows,
        key_pieces=cols,
        score="dot",
        formula="e_j = q_i · k_j / √d_h",
        q=q.float().cpu(),
        keys=k[0, h, :n].float().cpu(),
        scores=None,
        values=v[0, h, :n].float().cpu(),
        scale=1 / math.sqrt(dh),
        mask=mask,
        weights=weights,
        output=got["ctx"][0, i, span[0] : span[1]].float().cpu(),
        columns=span,
        width=attn.num_heads * dh,
        positions="absolute",
    )


def _additive_step(tr, source: str, target, query: int, label: str) -> HeadStep:
    att = tr.attention(source, target)
    m = att.maps
    rows, cols = att.target_pieces, att.source_pieces
    check_number(query, "query", len(rows), f"the target has {len(rows)} pieces")
    i = query - 1
    weights: Tensor = m.alignment[i].float()
    values: Tensor = m.annotations.float()  # (S, C)
    return HeadStep(
        model=label,
        site="cross",
        layer=1,
        head=1,
        num_heads=1,
        query=query,
        query_pieces=rows,
        key_pieces=cols,
        score="additive",
        formula=m.score or "e_j = vᵀ tanh(W s + U h_j)",
        q=None,
        keys=None,
        scores=m.scores[i].float(),
        values=values,
        scale=1.0,
        mask=[True] * len(cols),
        weights=weights,
        output=m.context[i].float(),
        columns=(0, values.shape[1]),
        width=values.shape[1],
        positions="recurrent",
    )
