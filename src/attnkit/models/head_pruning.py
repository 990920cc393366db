"""Heads removed from a Transformer translator for good (Michel, Levy & Neubig 2019; Voita et al. 2019).

:func:`prune_heads` gives each attention that loses heads smaller projections
(:func:`attnkit.attention.head_pruning.pruned_attention`): the model then runs with fewer heads and computes
exactly what the full model computes with those heads zero-ablated
(:class:`attnkit.attribution.interventions.HeadAblation`, mode ``"zero"``), in teacher forcing, greedy and
beam search alike. An attention may lose all its heads: its output is then its output projection's bias.

The model's config records what was removed, ``pruned_heads``: per site (``"encoder"`` the encoder's
self-attention, ``"self"`` the decoder's, ``"cross"`` its cross-attention) one list per layer of the
removed heads, 0-based, numbered as in the unpruned model. A layer's head count is ``nhead`` less its list's
length; the model built from that config (:meth:`TransformerTranslator.__init__`, so ``Translator.load``)
has the pruned shapes, and the saved weights load into it. :func:`prune_heads` itself takes the heads as
the model to prune numbers them now (what :func:`~attnkit.attribution.head_importance.head_importance` and
the interventions report for it), and maps them back to the unpruned numbering for the config.
"""

from __future__ import annotations

import copy as copy_module
import dataclasses
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from ..attention.head_pruning import kept_heads, pruned_attention
from ..attention.multihead import MultiHeadAttention
from ..errors import ConfigError

__all__ = [
    "PRUNE_SITES",
    "check_pruned_heads",
    "full_heads",
    "head_counts",
    "head_mean",
    "kept_original_heads",
    "prune_heads",
    "shape_pruned",
]

#: the attention types of an encoder–decoder whose heads can be removed, in the order they are listed
PRUNE_SITES = ("encoder", "self", "cross")


def _layers(model: nn.Module, site: str) -> nn.ModuleList:
    return model.encoder.layers if site == "encoder" else model.decoder.layers


def _attribute(site: str) -> str:
    return "multihead_attn" if site == "cross" else "self_attn"


def _layer_counts(config) -> dict[str, int]:
    return {
        "encoder": config.num_encoder_layers,
        "self": config.num_decoder_layers,
        "cross": config.num_decoder_layers,
    }


def check_pruned_heads(config) -> None:
    """``config.pruned_heads`` well formed, else :class:`~attnkit.errors.ConfigError`: ``None``, or an object
    whose keys are some of :data:`PRUNE_SITES`, each a list with one list per layer of distinct heads in
    ``0..nhead-1``."""
    pruned = config.pruned_heads
    if pruned is None:
        return
    if not isinstance(pruned, dict) or not set(pruned) <= set(PRUNE_SITES):
        raise ConfigError(f"pruned_heads must map some of {PRUNE_SITES} to lists per layer, got {pruned!r}")
    for site, layers in pruned.items():
        n = _layer_counts(config)[site]
        if not isinstance(layers, list) or len(layers) != n:
            raise ConfigError(f"pruned_heads[{site!r}] must hold one list per layer ({n}), got {layers!r}")
        for heads in layers:
            bad = not isinstance(heads, list) or len(set(heads)) != len(heads)
            if bad or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < config.nhead for h in heads):
                raise ConfigError(
                    f"pruned_heads[{site!r}] lists distinct heads in 0..{config.nhead - 1} per layer, got {heads!r}"
                )


def kept_original_heads(config, site: str, layer: int) -> list[int]:
    """The heads (0-based, numbered as in the unpruned model) that layer ``layer`` of ``site`` still has."""
    removed = ((config.pruned_heads or {}).get(site) or [[]] * _layer_counts(config)[site])[layer]
    return kept_heads(config.nhead, removed)


def head_counts(config) -> dict[str, list[int]]:
    """Heads per layer of each site, ``{"encoder": [4, 3, 4], "self": [...], "cross": [...]}``."""
    return {s: [len(kept_original_heads(config, s, i)) for i in range(n)] for s, n in _layer_counts(config).items()}


def shape_pruned(model: nn.Module) -> None:
    """Give ``model`` (a freshly built Transformer translator) the attention shapes its
    ``config.pruned_heads`` records, so that a pruned model's saved weights load into it. Nothing to do for
    an unpruned config."""
    c = model.config
    if not c.pruned_heads:
        return
    for site in PRUNE_SITES:
        for i, layer in enumerate(_layers(model, site)):
            old: MultiHeadAttention = getattr(layer, _attribute(site))
            n = len(kept_original_heads(c, site, i))
            if n != old.num_heads:
                bias = old.in_proj_bias is not None
                new = MultiHeadAttention(old.embed_dim, n, dropout=old.dropout, bias=bias, head_dim=old.head_dim)
                setattr(layer, _attribute(site), new.to(old.out_proj.weight.dtype))


def _check_heads(model: nn.Module, heads) -> dict[tuple[str, int], set[int]]:
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise TypeError(f"heads must be (site, layer, head) triples, got {type(heads).__name__}")
    by_attention: dict[tuple[str, int], set[int]] = {}
    for triple in heads:
        if not isinstance(triple, (tuple, list)) or len(triple) != 3:
            raise ValueError(f"heads must be (site, layer, head) triples, got {triple!r}")
        site, layer, head = triple
        if site not in PRUNE_SITES:
            raise ValueError(f"a head's site must be one of {PRUNE_SITES}, got {site!r}")
        layers = _layers(model, site)
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(layers):
            raise ValueError(f"{site} layer must be an int in 0..{len(layers) - 1} (0-based), got {layer!r}")
        h = getattr(layers[layer], _attribute(site)).num_heads
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < h:
            raise ValueError(f"{site} layer {layer} has heads 0..{h - 1} (0-based), got {head!r}")
        by_attention.setdefault((site, layer), set()).add(head)
    return by_attention


def prune_heads(model: nn.Module, heads: Iterable[tuple[str, int, int]], *, copy: bool = True) -> nn.Module:
    """Remove ``heads``, ``(site, layer, head)`` triples, 0-based and numbered as ``model`` has them now,
    from a Transformer translator (:class:`attnkit.models.TransformerTranslator`): a pruned copy
    (``copy=False``: ``model`` itself, changed in place). Its config gets ``pruned_heads`` (see the module
    docstring). Guided alignment's supervised head (``alignment_layer``/``alignment_head``) is renumbered
    when heads before it go; when it goes itself, those two fields are cleared."""
    if not all(hasattr(model, a) for a in ("encoder", "decoder", "config")) or not hasattr(model.config, "nhead"):
        raise TypeError(f"model must be attnkit's Transformer translator, got {type(model).__name__}")
    by_attention = _check_heads(model, heads)
    target = copy_module.deepcopy(model) if copy else model
    c = target.config
    kept_now = {s: [kept_original_heads(c, s, i) for i in range(n)] for s, n in _layer_counts(c).items()}
    align = c.alignment_layer, c.alignment_head
    for (site, layer), removed in sorted(by_attention.items()):
        owner = _layers(target, site)[layer]
        setattr(owner, _attribute(site), pruned_attention(getattr(owner, _attribute(site)), sorted(removed)))
        if site == "cross" and align[0] == layer + 1 and align[1] is not None:
            h = align[1] - 1
            align = (None, None) if h in removed else (align[0], h - sum(r < h for r in removed) + 1)
        kept_now[site][layer] = [k for j, k in enumerate(kept_now[site][layer]) if j not in removed]
    gone = {s: [[h for h in range(c.nhead) if h not in k] for k in v] for s, v in kept_now.items()}
    target.config = dataclasses.replace(c, pruned_heads=gone, alignment_layer=align[0], alignment_head=align[1])
    return target


def full_heads(weights: Tensor, config, site: str, layer: int) -> Tensor:
    """A pruned layer's attention weights ``(B, H', ...)`` placed at their heads' places in the unpruned
    model, ``(B, nhead, ...)``, the removed heads' maps all zero (a removed head attends nowhere)."""
    kept = kept_original_heads(config, site, layer)
    if len(kept) == config.nhead:
        return weights
    out = weights.new_zeros(weights.shape[0], config.nhead, *weights.shape[2:])
    out[:, torch.tensor(kept, dtype=torch.long, device=weights.device)] = weights
    return out


def head_mean(weights: Tensor) -> Tensor:
    """The mean over heads (dim 1) of ``(B, H, ...)`` weights; zeros when a pruned layer has no heads
    (where the mean of nothing would be NaN)."""
    if weights.shape[1] == 0:
        return weights.new_zeros(weights.shape[0], *weights.shape[2:])
    return weights.mean(dim=1)
