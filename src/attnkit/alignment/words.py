"""From subword pieces to words: which pieces make each word, and word-level attention.

sentencepiece marks the first piece of every whitespace word with ``▁`` (U+2581), so the pieces
``▁En ▁el ▁princip io`` make the words ``En el principio``. Word attention aggregates pieces by a
fixed rule:

- over the **source** pieces of a word, **sum**: a word receives all the attention its pieces
  receive, so each target row still sums to 1;
- over the **target** pieces of a word, **mean**: a word attends the way its pieces do on
  average, so the row still sums to 1.

``A_word[i, j] = mean_{t ∈ target word i} Σ_{s ∈ source word j} A_piece[t, s]``
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["WORD_START", "span_attention", "word_attention", "word_spans", "words_from_pieces"]

WORD_START = "\u2581"


def word_spans(pieces: Sequence[str]) -> list[list[int]]:
    """The piece indices of each word, in order: a piece starting with ``▁`` starts a new word
    (a first piece without it starts one too). ``["▁En", "▁princip", "io"] -> [[0], [1, 2]]``."""
    spans: list[list[int]] = []
    for i, p in enumerate(pieces):
        if not isinstance(p, str):
            raise TypeError(f"pieces must be strings, got {type(p).__name__} at position {i}")
        if p.startswith(WORD_START) or not spans:
            spans.append([i])
        else:
            spans[-1].append(i)
    return spans


def words_from_pieces(pieces: Sequence[str]) -> list[str]:
    """The words the pieces spell (``▁`` removed, pieces of a word joined)."""
    return ["".join(pieces[i] for i in span).replace(WORD_START, "") for span in word_spans(pieces)]


def word_attention(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str]) -> Tensor:
    """``(T, S)`` piece attention → ``(T_words, S_words)`` word attention (sum over a source word's
    pieces, mean over a target word's pieces; see the module docstring)."""
    if not isinstance(attention, Tensor) or attention.dim() != 2:
        raise ValueError(f"attention must be a (T, S) tensor, got {getattr(attention, 'shape', type(attention))}")
    if attention.shape != (len(target_pieces), len(source_pieces)):
        raise ValueError(
            f"attention has shape {tuple(attention.shape)}, but there are {len(target_pieces)} target "
            f"and {len(source_pieces)} source pieces: expected ({len(target_pieces)}, {len(source_pieces)})"
        )
    return span_attention(attention, word_spans(source_pieces), word_spans(target_pieces))


def span_attention(
    attention: Tensor, source_spans: Sequence[Sequence[int]], target_spans: Sequence[Sequence[int]]
) -> Tensor:
    """``(T, S)`` piece attention → ``(len(target_spans), len(source_spans))`` word attention by the
    rule of the module docstring, with the words' piece indices given. A word with no pieces (a
    character the tokenizer drops) gets a zero column (source) or a zero row (target)."""
    if not isinstance(attention, Tensor) or attention.dim() != 2:
        raise ValueError(f"attention must be a (T, S) tensor, got {getattr(attention, 'shape', type(attention))}")
    dtype = attention.dtype if attention.is_floating_point() else torch.float32
    a = attention.to(dtype)
    for name, spans, size in (("source_spans", source_spans, a.shape[1]), ("target_spans", target_spans, a.shape[0])):
        bad = [k for span in spans for k in span if not 0 <= k < size]
        if bad:
            raise ValueError(f"{name} name piece {bad[0]}, outside the attention's {size} pieces {tuple(a.shape)}")
    # A_word = M_t · A · M_s: M_s (S, S_words) sums each source word's pieces, M_t (T_words, T) averages
    # each target word's pieces; one product instead of a slice per word
    m_s = a.new_zeros(a.shape[1], len(source_spans))
    rows = [k for span in source_spans for k in span]
    cols = [w for w, span in enumerate(source_spans) for _ in span]
    m_s[rows, cols] = 1.0
    m_t = a.new_zeros(len(target_spans), a.shape[0])
    rows = [w for w, span in enumerate(target_spans) for _ in span]
    cols = [k for span in target_spans for k in span]
    m_t[rows, cols] = torch.tensor([1.0 / len(span) for span in target_spans for _ in span], dtype=a.dtype)
    return m_t @ a @ m_s  # (T_words, S_words)
