"""What every translation model provides, and the typed record its attention comes in.

A translation model is an ``nn.Module`` with

- ``forward(src (B, S), src_lengths (B,), tgt_in (B, T), *, need_weights=False) -> (logits (B, T, V), weights)``
  for teacher forcing (training); with ``features_only=True`` it returns the output layer's inputs
  ``(B, T, E)`` instead of the logits, and ``output_layer() -> (weight (V, E), bias (V,) or None)``
  is that layer, so the loss can project only the real target positions, in chunks
  (:func:`attnkit.training.linear_cross_entropy.linear_cross_entropy`);
- ``start`` / ``step`` / ``reorder`` for :mod:`attnkit.decoding` (greedy and beam search), with a
  typed decoder state that :func:`attnkit.decoding.reorder_state` can reorder; ``step`` is
  ``step_features`` (the output layer's input for one step) followed by the output layer, so a
  search can prepare that layer ahead of the steps (:class:`attnkit.decoding.OutputLayerDecoder`);
- ``attention_maps(src, src_lengths, tgt_in) -> AttentionMaps``: every attention the model has, for
  one teacher-forced pass. The CLI, the plots, the alignment evaluation and the explorer read
  attention only through this, so none of them branches on the kind of model.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checks import Range
from ..config import option
from ..data.spelling import SPELLINGS, default_spelling

__all__ = ["AttentionMaps", "LanguagePair", "TiedOutputLayer", "TranslationModel"]


@dataclass
class LanguagePair:
    """What a translation model's config says about its data, so that it travels with the model:
    the source and target languages, the corpus it was trained on and, when the two sides have
    separate vocabularies, the source vocabulary's size (``vocab_size`` is then the target's).

    Set from the corpus when training starts (never command-line flags). A ``config.json`` written
    before these fields existed loads with their defaults: the Bible, Spanish → English, one joint
    vocabulary.
    """

    src_lang: str = option("es", "source language code (set from the corpus)", cli=False)
    tgt_lang: str = option("en", "target language code (set from the corpus)", cli=False)
    corpus: str = option("bible", "the corpus the model was trained on (set from the corpus)", cli=False)
    src_vocab_size: int | None = option(
        None,
        "source vocabulary size when it is separate from the target's; None: one joint vocabulary",
        cli=False,
        check=Range(4),
    )
    src_spelling: str | None = option(
        None,
        "the spelling of the source side's training text: rv1909 (the 1909 Reina-Valera; input in today's "
        "spelling is rewritten to it before tokenizing) or modern; None: rv1909 for the built-in Bible "
        "read from Spanish, modern otherwise",
        cli=False,
    )

    def check_language_pair(self) -> None:
        """:class:`attnkit.errors.ConfigError` naming the first text field of the pair that is not valid
        (``src_vocab_size``'s range is checked with the config's other numbers, by ``check_fields``)."""
        from ..errors import ConfigError

        for name in ("src_lang", "tgt_lang", "corpus"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{name} must be a non-empty str, got {v!r}")
        if self.src_spelling is not None and self.src_spelling not in SPELLINGS:
            raise ConfigError(f"src_spelling must be one of {', '.join(SPELLINGS)} or None, got {self.src_spelling!r}")

    @property
    def source_spelling(self) -> str:
        """The source side's spelling: ``src_spelling``, or the corpus's default
        (:func:`attnkit.data.spelling.default_spelling`)."""
        return self.src_spelling or default_spelling(self.corpus, self.src_lang)

    @property
    def source_vocab_size(self) -> int:
        """The size of the source side's vocabulary: ``src_vocab_size``, or the joint ``vocab_size``."""
        return self.src_vocab_size or self.vocab_size  # type: ignore[attr-defined]


class TiedOutputLayer:
    """Mixin for the translators' output projection: ``out_proj`` (an ``nn.Linear``, untied) or, when
    it is None, the embedding matrix ``embedding.weight`` with its own ``out_bias`` (tied)."""

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """``(weight (V, E), bias (V,))`` of the output projection: ``logits = features @ weight.T + bias``."""
        if self.out_proj is not None:
            return self.out_proj.weight, self.out_proj.bias
        return self.embedding.weight, self.out_bias

    def step(self, prev_tokens: Tensor, state: Any) -> tuple[Tensor, Any, Tensor | None]:
        """One step of :mod:`attnkit.decoding`: ``log_softmax(W f + b)`` of the model's
        ``step_features(prev_tokens, state) -> (f (B, E), state, attention)``. The output layer
        is a separate stage so that :class:`attnkit.decoding.OutputLayerDecoder` can prepare it once
        per batch (packed, or restricted to a shortlist of the vocabulary)."""
        features, state, attn = self.step_features(prev_tokens, state)
        return torch.log_softmax(F.linear(features, *self.output_layer()), dim=-1), state, attn  # (B, V)


@dataclass
class AttentionMaps:
    """The attention of one teacher-forced pass over ``tgt_in`` (row ``t`` is the step whose output
    is target token ``t``, i.e. whose input is ``tgt_in[:, t]``). Every field is batch-first;
    ``None`` where the model has no such thing.

    - ``alignment (B, T, S)``: the model's attention over the source per target position, the one
      shown as "the" alignment: RNNsearch's ``α_tj``; the Transformer's last decoder layer's
      cross-attention averaged over heads. ``None`` for RNNencdec (it has no attention).
    - ``scores (B, T, S)``: the raw scores ``e_tj`` before the softmax (RNN attention), ``-inf``
      at padding.
    - ``context (B, T, C)``: the context vectors ``c_t = Σ_j α_tj h_j``.
    - ``annotations (B, S, C)``: the vectors ``h_j`` that are summed (so each source word's
      contribution ``α_tj h_j`` can be shown).
    - ``enc_self (B, L, H, S, S)``, ``dec_self (B, L, H, T, T)``, ``cross (B, L, H, T, S)``:
      every layer's and head's weights (Transformer).
    - ``score``: the score function's formula (e.g. ``e_j = vᵀ tanh(W s + U h_j + b)``).
    """

    alignment: Tensor | None
    scores: Tensor | None = None
    context: Tensor | None = None
    annotations: Tensor | None = None
    enc_self: Tensor | None = None
    dec_self: Tensor | None = None
    cross: Tensor | None = None
    score: str | None = None

    def unpad(self, i: int, target_len: int, source_len: int) -> AttentionMaps:
        """Pair ``i``'s maps out of a padded batch, batch dimension removed: rows past ``target_len`` and
        columns past ``source_len`` (padding) cut off."""
        T, S = target_len, source_len
        cut = {
            "alignment": (T, S),
            "scores": (T, S),
            "cross": (T, S),
            "enc_self": (S, S),
            "dec_self": (T, T),
            "context": (T, None),
            "annotations": (S, None),
        }
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                rows, cols = cut[f.name]
                v = v[i][..., :rows, :] if cols is None else v[i][..., :rows, :cols]
            out[f.name] = v
        return AttentionMaps(**out)

    def map_tensors(self, fn) -> AttentionMaps:
        """A copy with ``fn`` applied to every tensor field (e.g. ``lambda t: t[0].float().cpu()``)."""
        return AttentionMaps(
            **{f.name: (fn(v) if isinstance(v, Tensor) else v) for f in fields(self) for v in [getattr(self, f.name)]}
        )


@runtime_checkable
class TranslationModel(Protocol):
    """The interface of every translation model (see the module docstring)."""

    config: Any

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        *,
        need_weights: bool = False,
        features_only: bool = False,
    ): ...

    def output_layer(self) -> tuple[Tensor, Tensor | None]: ...

    def start(self, src: Tensor, src_lengths: Tensor) -> Any: ...

    def step(self, prev_tokens: Tensor, state: Any) -> tuple[Tensor, Any, Tensor | None]: ...

    def step_features(self, prev_tokens: Tensor, state: Any) -> tuple[Tensor, Any, Tensor | None]: ...

    def reorder(self, state: Any, index: Tensor, *, beams_only: bool = False) -> Any: ...

    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps: ...
