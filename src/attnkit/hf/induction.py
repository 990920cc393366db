"""Induction-head scores of a Hugging Face causal language model (Olsson et al. 2022, "In-context
Learning and Induction Heads"), from the attention ``transformers`` itself computes.

The same measurement as :func:`attnkit.models.induction.induction_scores` on attnkit's own model: the
same seeded rows of repeated random tokens ``[r; r]`` (:func:`~attnkit.models.induction.repeated_random_tokens`,
the tokenizer's special ids excluded), each row run through the model and its every layer's and head's
weights read by attnkit's capture (:meth:`attnkit.hf.self_attention.SelfAttentionModel.self_attention`),
then the one formula both share (:func:`~attnkit.models.induction.prefix_matching_from_attention`,
:func:`~attnkit.models.induction.previous_token_from_attention`). The copying score reads a head's OV
circuit through attnkit's own module names, so it is not measured here (``copying`` is None).
"""

from __future__ import annotations

import torch

from ..models.induction import (
    InductionScores,
    prefix_matching_from_attention,
    previous_token_from_attention,
    repeated_random_tokens,
)
from .loading import HFModelError

__all__ = ["hf_induction_scores", "hf_special_ids", "repeated_maps"]


def hf_special_ids(sa) -> tuple[int, ...]:
    """The ids of the tokenizer's special tokens (``<s>``, ``</s>``, padding, unknown…), sorted."""
    return tuple(sorted({int(i) for i in getattr(sa.hf_tokenizer, "all_special_ids", []) or []}))


@torch.no_grad()
def repeated_maps(
    sa, *, length: int | None = None, batch: int = 8, seed: int = 0, special_ids: tuple[int, ...] | None = None
) -> tuple[torch.Tensor, int]:
    """``(attention (Layers, B, H, 2L, 2L), L)``: every head's maps of text model ``sa`` (attnkit's language
    model or a Hugging Face one) on ``batch`` rows of ``L = length`` random tokens repeated twice (default:
    ``min(context // 2, 64)``), drawn with ``seed`` from the vocabulary less ``special_ids`` (default: the
    model's special tokens): what the induction and duplicate-token scores read."""
    context = sa.max_length()
    if length is None:
        length = 64 if context is None else min(context // 2, 64)
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ValueError(f"length must be an int >= 2, got {length!r}")
    if context is not None and 2 * length > context:
        raise ValueError(
            f"length must be at most {context // 2} (half the {context} positions {sa.source} reads), got {length}"
        )
    specials = tuple(sorted(sa.special_ids)) if special_ids is None else tuple(special_ids)
    gen = torch.Generator().manual_seed(seed)
    ids = repeated_random_tokens(int(sa.vocab_size), length, batch, generator=gen, special_ids=specials)  # (B, 2L)
    rows = [sa.self_attention(row.tolist()).attention for row in ids]  # each (Layers, H, 2L, 2L)
    return torch.stack(rows, dim=1), length  # (Layers, B, H, 2L, 2L)


@torch.no_grad()
def hf_induction_scores(
    sa, *, length: int | None = None, batch: int = 8, seed: int = 0, special_ids: tuple[int, ...] | None = None
) -> InductionScores:
    """Prefix-matching and previous-token scores of every head of ``sa`` (a decoder-only
    :class:`~attnkit.hf.self_attention.SelfAttentionModel`) on ``batch`` rows of ``length`` random tokens
    repeated twice (default ``length``: ``min(context // 2, 64)``), drawn with ``seed``; ``special_ids``
    default to the tokenizer's (:func:`hf_special_ids`)."""
    if not getattr(sa, "causal", False):
        raise HFModelError(
            f"{sa.source} is an encoder-only model: induction heads are measured on a causal language model"
        )
    attn, length = repeated_maps(sa, length=length, batch=batch, seed=seed, special_ids=special_ids)
    return InductionScores(
        prefix_matching_from_attention(attn, length), previous_token_from_attention(attn), None, length, batch
    )
