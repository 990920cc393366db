"""What every text model shares, attnkit's own language model
(:class:`attnkit.tasks.language_model.text_model.LanguageModelText`) and a Hugging Face encoder-only or
decoder-only one (:class:`attnkit.hf.self_attention.SelfAttentionModel`): :class:`TextModelBase`, the
part of the text-model protocol written over what each model gives, and :class:`SelfAttentionMaps`, one
text's self-attention as every text model answers it. Neither knows where a model came from, so attnkit's
model is not a subclass of a Hugging Face adapter's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import torch
from torch import Tensor

from ..alignment.rollout import attention_rollout
from ..errors import InputError

__all__ = ["SelfAttentionMaps", "TextModelBase"]


@dataclass
class SelfAttentionMaps:
    """One text's self-attention: ``attention (L, H, N, N)`` over ``pieces`` (row ``i`` is what piece
    ``i`` attends to; a decoder-only model's rows are zero right of the diagonal). ``layers``: the
    model's layer number (1-based, as every number a user sees: ``docs/api/index.md``) of each of the
    ``L`` maps; ``heads`` likewise (1-based).

    ``kv_groups``: for a model with grouped-query attention (Ainslie et al. 2023, "GQA"; Llama 3, Qwen,
    Mistral: fewer key/value heads than query heads; multi-query attention, Shazeer 2019, when there
    is one), the key/value group (1-based) of each of ``heads``: query head ``h`` reads key/value head
    ``⌊(h − 1) / (H / H_kv)⌋ + 1``, as ``transformers`` repeats them (``repeat_kv``). Heads of one group
    share their keys, so their maps differ by their queries only. None where every query head has
    its own keys and values."""

    pieces: list[str]
    attention: Tensor
    layers: list[int]
    heads: list[int]
    causal: bool
    kv_groups: list[int] | None = None

    @property
    def head_mean(self) -> Tensor:
        """``(L, N, N)``: each layer's attention averaged over its heads."""
        return self.attention.mean(dim=1)

    def rollout(self) -> Tensor:
        """``(N, N)``: attention rollout (Abnar & Zuidema 2020) through the layers held, which must be
        consecutive from the first (:func:`attnkit.alignment.attention_rollout`)."""
        if self.layers != list(range(1, len(self.layers) + 1)):
            raise ValueError(f"rollout composes layers 1..L in order; these maps hold layers {self.layers}")
        return attention_rollout(self.attention)

    def _repr_html_(self) -> str | None:  # Jupyter, VS Code, Colab
        from ..display import html_for  # the explorer's view, registered there (display code lives in explorer/)

        return html_for(self)


class TextModelBase:
    """What every text model shares, attnkit's language model (:class:`attnkit.tasks.language_model.text_model.
    LanguageModelText`) and a Hugging Face one (:class:`SelfAttentionModel`), over what each gives:
    ``num_heads``, ``num_kv_heads``, ``causal``, ``source``, ``tokenizer`` (``id_to_piece``), :meth:`encode`,
    :meth:`max_length` and :meth:`stream`."""

    def kv_groups(self, heads: Sequence[int] | None = None) -> list[int] | None:
        """The key/value group (1-based) of each of ``heads`` (1-based numbers; default every head) under
        grouped-query attention; None when every query head has its own (see :class:`SelfAttentionMaps`)."""
        if self.num_kv_heads == self.num_heads:
            return None
        size = self.num_heads // self.num_kv_heads  # query heads per key/value head
        wanted = range(1, self.num_heads + 1) if heads is None else heads
        return [(int(h) - 1) // size + 1 for h in wanted]

    def pieces_of(self, ids: Sequence[int]) -> list[str]:
        """The pieces of token ids, in the ``▁`` convention."""
        return [self.tokenizer.id_to_piece(int(i)) for i in ids]

    def _numbers(self, values: Sequence[int], name: str, top: int, what: str) -> list[int]:
        """``values`` (1-based layer or head numbers) as 0-based indices, each checked to lie in ``1..top``."""
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError(f"{name} must be a list of {what} numbers (1-based), got {type(values).__name__}")
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, Integral):
                raise TypeError(f"{name} must hold int {what} numbers (1-based), got {v!r}")
            if not 1 <= v <= top:
                raise ValueError(f"{name} must lie in 1..{top} (this model has {top} {what}s), got {v}")
            out.append(int(v) - 1)
        return out

    def _ids(self, text: str | Sequence[int]) -> tuple[list[int], list[str]]:
        """``(ids, pieces)`` of ``text`` (encoded) or of token ids given instead, within the model's positions."""
        if isinstance(text, str):
            ids, pieces = self.encode(text)
        else:
            ids = [int(i) for i in text]
            if not ids:
                raise ValueError("ids must hold at least one token id")
            pieces = self.pieces_of(ids)
        limit = self.max_length()
        if limit is not None and len(ids) > limit:
            raise InputError(f"the text has {len(ids)} tokens; {self.source} reads at most {limit} positions")
        return ids, pieces

    def self_attention(
        self, text: str | Sequence[int], *, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
    ) -> SelfAttentionMaps:
        """Every asked layer's and head's self-attention over ``text`` (or token ``ids``; ``layers``/``heads``:
        1-based numbers, default every layer and head), at once."""
        got: dict[int, Tensor] = {}
        pieces = self.stream(text, lambda layer, w: got.__setitem__(layer, w.cpu()), layers=layers, heads=heads)
        order = sorted(got)
        return SelfAttentionMaps(
            pieces=pieces,
            attention=torch.stack([got[i] for i in order]),  # (L, H, N, N)
            layers=order,
            heads=list(range(1, self.num_heads + 1)) if heads is None else [int(h) for h in heads],
            causal=self.causal,
            kv_groups=self.kv_groups(heads),
        )
