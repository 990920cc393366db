"""The one result type of every attribution method: how much each source piece (or image cell) counts
for each target piece, under forced decoding of one target.

``scores (T, S)`` is what is shown and scored: non-negative, every row sums to 1 (a row that is all
zero stays zero), row ``t`` for ``target[t]`` (the piece the model is forced to write at step ``t``),
column ``j`` for ``source[j]``. ``raw (T, S)`` keeps a method's signed per-piece values where it has
them: for gradient methods the sum over a piece's embedding dimensions of the attribution (for
integrated gradients these sum over ``j`` to ``log p(y_t) − log p_baseline(y_t)``, its completeness).
For captioners ``S = h·w`` grid cells in row-major order and ``grid = (h, w)``.

Word level (translation): :meth:`Attribution.word_scores` applies attnkit's one piece → word rule
(:func:`attnkit.alignment.word_attention`: sum over a source word's pieces, mean over a target word's
pieces), so rows still sum to 1. inseq's ``source_attributions`` are the transpose, ``(S, T)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["Attribution", "MethodRows", "normalise_rows"]


def normalise_rows(x: Tensor) -> Tensor:
    """``x (..., N)`` non-negative → every row divided by its sum (rows summing to 0 stay 0)."""
    if (x < 0).any():
        raise ValueError("normalise_rows needs non-negative values; take a norm or an absolute value first")
    total = x.sum(-1, keepdim=True)
    return torch.where(total > 0, x / total.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


@dataclass
class MethodRows:
    """What a method's function returns, before the registry times it and normalises its rows into an
    :class:`Attribution`: ``scores (T, S)`` (non-negative relevances), ``raw`` (signed values, where the method
    has them), ``extra`` (what the method reports besides: ALTI+'s source share, integrated gradients'
    convergence), ``logits (G, V)`` (a language model's predicting positions' logits, where the method's own
    pass has them: the step scores need no pass of their own) and ``pixels`` (a captioner's gradient per pixel)."""

    scores: Tensor
    raw: Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    logits: Tensor | None = None
    pixels: Tensor | None = None


@dataclass
class Attribution:
    """One method's attributions for one (source, target) pair (see the module docstring).

    ``method``: the registry name; ``params``: the options it ran with (layer, head, steps, ...);
    ``seconds``: wall-clock time of the computation (methods that need gradients report it);
    ``extra``: method-specific facts (``"convergence_delta"`` of integrated gradients per target
    piece; ``"source_share"`` of ALTI+, the share of each target piece's representation that comes
    from the source rather than the target prefix).
    """

    method: str
    source: list[str]
    target: list[str]
    scores: Tensor
    raw: Tensor | None = None
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    needs_gradients: bool = False
    grid: tuple[int, int] | None = None
    image: Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        expected = (len(self.target), self.grid[0] * self.grid[1] if self.grid else len(self.source))
        if not isinstance(self.scores, Tensor) or tuple(self.scores.shape) != expected:
            got = tuple(self.scores.shape) if isinstance(self.scores, Tensor) else type(self.scores).__name__
            raise ValueError(f"scores must have shape (len(target), len(source)) = {expected}, got {got}")
        if self.raw is not None and tuple(self.raw.shape) != expected:
            raise ValueError(f"raw must have the shape of scores {expected}, got {tuple(self.raw.shape)}")

    @property
    def is_image(self) -> bool:
        return self.grid is not None

    def word_scores(self) -> tuple[list[str], list[str], Tensor]:
        """``(source words, target words, (T_words, S_words))`` by attnkit's piece → word rule
        (translation only; a caption's target is already words)."""
        from ..alignment import word_attention, words_from_pieces

        if self.is_image:
            raise ValueError("word_scores is for translations; a caption's attributions are already per word")
        return (
            words_from_pieces(self.source),
            words_from_pieces(self.target),
            word_attention(self.scores, self.source, self.target),
        )

    def grid_scores(self) -> Tensor:
        """Captioners: ``(T, h, w)``, the scores over the image grid."""
        if not self.is_image:
            raise ValueError("grid_scores is for captioners; a translation's attributions are over source pieces")
        return self.scores.reshape(len(self.target), *self.grid)

    def to_dict(self, digits: int = 5) -> dict:
        """A JSON-able dict (matrices as lists of rows, rounded)."""
        rows = lambda t: None if t is None else torch.round(t.double(), decimals=digits).tolist()
        out = {
            "method": self.method,
            "params": self.params,
            "seconds": round(self.seconds, 4),
            "needs_gradients": self.needs_gradients,
            "source": self.source,
            "target": self.target,
            "scores": rows(self.scores),
            "raw": rows(self.raw),
            "extra": {k: (rows(v) if isinstance(v, Tensor) else v) for k, v in self.extra.items()},
        }
        if self.is_image:
            out["grid"] = list(self.grid)
        else:
            src, tgt, words = self.word_scores()
            out["words"] = {"source": src, "target": tgt, "scores": rows(words)}
        return out

    def _repr_html_(self) -> str | None:  # Jupyter, VS Code, Colab
        from ..display import html_for  # the explorer's view, registered there (display code lives in explorer/)

        return html_for(self)
