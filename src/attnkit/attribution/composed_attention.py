"""The attention that a composition of a translator's layers reads, from the input up: the encoder's
self-attention per layer, then one layer's cross-attention (rollout and attention flow, Abnar & Zuidema 2020)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import decomposition
from .forced import ForcedTranslation
from .trace import is_transformer

__all__ = ["ComposableMaps", "composable_maps"]


@dataclass(frozen=True)
class ComposableMaps:
    """What a method composing a translator's attention layers reads (rollout, attention flow): the
    encoder's self-attention per layer ``enc_self (L, S', S')`` and one layer's cross-attention ``cross
    (T', S')``, heads averaged, with the special tokens a Hugging Face model adds kept (a composition over
    the pieces alone would renormalise rows that gave weight to ``</s>`` as if they had not); ``rows`` and
    ``cols`` index the pieces' rows and columns of a ``(T', S')`` result."""

    enc_self: Tensor
    cross: Tensor
    rows: Any = field(default_factory=lambda: slice(None))
    cols: Any = field(default_factory=lambda: slice(None))


@torch.no_grad()
def composable_maps(model, pair: ForcedTranslation, layer=None) -> ComposableMaps:
    """The :class:`ComposableMaps` of ``model`` (attnkit's Transformer or a Hugging Face encoder-decoder)
    forced to ``pair``, the cross-attention of ``layer`` (1-based, default the last)."""
    if not is_transformer(model):
        full = model.full_attention(pair.src, pair.tgt_in)
        li = decomposition._layer_index(full.cross.shape[0], layer)
        return ComposableMaps(full.enc_self.float().mean(1), full.cross[li].float().mean(0), full.rows, full.cols)
    maps = model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    cross = maps.cross[0].float()  # (L, H, T, S)
    li = decomposition._layer_index(cross.shape[0], layer)
    return ComposableMaps(maps.enc_self[0].float().mean(1), cross[li].mean(0))  # (L, S, S), (T, S)
