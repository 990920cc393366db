"""Word links from attention: which attention row belongs to which target word, and the links read from it.

**Plain attention**: the row of the step whose *output* is target piece ``t`` (row ``t`` of a
teacher-forced pass over ``[bos, y_0, …, y_{T-2}]``).

**Shift-Att** (Chen et al. 2020, "Accurate Word Alignment Induction from Neural Machine
Translation"): the row of the step whose *input* is target piece ``t``. At the step that outputs
``y_t`` the decoder has not yet seen ``y_t``, so its attention looks for what to say next; one step
later ``y_t`` is the input and the attention lines up with ``y_t``'s own source. With the forced
input ``[bos, y_0, …, y_{T-1}]`` (``T + 1`` rows, the last one predicting end of sentence) the
rows ``1 … T`` belong to ``y_0 … y_{T-1}``.

Links (``(source word, target word)`` pairs, as in Pharaoh ``i-j`` files): the word attention
(:func:`attnkit.alignment.span_attention`) of each target word links it to its argmax source word,
plus, with a ``threshold``, every source word whose word attention reaches it. Read the other way
(:func:`column_links`), each source word links to the target word that attends to it most; the two
directions of one matrix can be symmetrised like two aligners' (:mod:`attnkit.alignment.symmetrize`),
which keeps the one-to-many links a single argmax misses.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["attention_links", "column_links", "shift_rows"]

Link = tuple[int, int]


def shift_rows(attention: Tensor) -> Tensor:
    """Shift-Att's rows: ``(..., T + 1, S)`` attention over ``[bos, y_0, …, y_{T-1}]`` →
    ``(..., T, S)``, row ``t`` the step whose input is ``y_t`` (see the module docstring)."""
    if not isinstance(attention, Tensor) or attention.dim() < 2:
        raise ValueError(f"attention must be (..., T + 1, S), got {getattr(attention, 'shape', type(attention))}")
    if attention.shape[-2] < 2:
        raise ValueError(
            f"attention must have T + 1 >= 2 rows (bos and at least one target piece), got {tuple(attention.shape)}"
        )
    return attention[..., 1:, :]


def attention_links(word_attention: Tensor, *, threshold: float | None = None) -> set[Link]:
    """``(target words, source words)`` word attention → links ``(i, j)``: each target word ``j``
    with its argmax source word ``i``, and with ``threshold`` every ``i`` with ``A[j, i] >= threshold``.
    A target row of zeros (a word without pieces) gets no link."""
    if not isinstance(word_attention, Tensor) or word_attention.dim() != 2:
        raise ValueError(
            "word_attention must be (target words, source words), got "
            f"{getattr(word_attention, 'shape', type(word_attention))}"
        )
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if word_attention.shape[1] == 0 or word_attention.shape[0] == 0:
        return set()
    live = word_attention.abs().sum(dim=1) > 0  # (T_words,)
    links = {(int(i), j) for j, i in enumerate(word_attention.argmax(dim=1).tolist()) if live[j]}
    if threshold is not None:
        links |= {(int(i), int(j)) for j, i in (word_attention >= threshold).nonzero().tolist()}
    return links


def column_links(word_attention: Tensor) -> set[Link]:
    """The other direction of one matrix: each source word ``i`` with the target word that attends to
    it most, ``(i, argmax_j A[j, i])``; a column of zeros (a word without pieces) gets no link."""
    if not isinstance(word_attention, Tensor) or word_attention.dim() != 2:
        raise ValueError(
            "word_attention must be (target words, source words), got "
            f"{getattr(word_attention, 'shape', type(word_attention))}"
        )
    if word_attention.numel() == 0:
        return set()
    live = word_attention.abs().sum(dim=0) > 0  # (S_words,)
    return {(i, int(j)) for i, j in enumerate(word_attention.argmax(dim=0).tolist()) if live[i]}
