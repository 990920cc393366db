"""Guided alignment (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer
Models"; for an RNN's one attention, supervised attention as in Mi et al. 2016 and Liu et al. 2016).

One cross-attention head is trained, next to translation, to put its mass where a word aligner's
links (e.g. eflomal's, :mod:`attnkit.alignment.eflomal`) say each target piece's source is. Word links
``(i, j)`` become piece links: every piece of target word ``j`` with every piece of source word ``i``.
Each target piece ``t`` with at least one link gets the target distribution

    ``G_ts = g_ts / Σ_s' g_ts'``   (``g_ts`` = 1 for a piece link, 0 otherwise),

and the head's attention ``A_ts`` pays the cross-entropy

    ``L_align = − Σ_t Σ_s G_ts log A_ts``   (pieces without a link: no term),

where ``A_t`` is, for a Transformer, the row of the step whose *input* is piece ``t`` (Shift-Att's
row, Chen et al. 2020), not the step that outputs it. The step that outputs ``y_t`` has not seen
``y_t``: a head asked there where ``y_t``'s source is can only guess what comes next (supervised that
way, the shipped Transformer's head aligned worse than read at the input step: measured in
benchmarks/RESULTS.md, section "Word alignment"). One step later
``y_t`` is the input and the head can look its source up, which is what Garg et al. get from their
extra decoder pass without the causal mask ("full context"), at no extra cost. The same holds for a
Luong-style RNN (its GRU reads ``y_t`` before it attends). Bahdanau's RNNsearch scores ``s_{t-1}``,
which has read only ``y_{t-2}``, so no nearby step of its sees ``y_t`` before attending: its
supervision stays at the output step, as in supervised attention (Mi et al. 2016, Liu et al. 2016).
:func:`guided_input_step` says which.

summed over the batch like the translation loss, which is ``L = L_nll + λ · L_align``
(OpenNMT-py's ``lambda_align``; Garg et al. use λ = 0.05). The head is the penultimate layer's
first by default for a Transformer (``alignment_layer``/``alignment_head`` in its config, which
``attnkit align --method guided`` reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ...alignment.gold import parse_links
from ...alignment.words import word_spans
from ...data.parallel import read_lines
from ...errors import InputError

__all__ = [
    "DEFAULT_WEIGHT",
    "GuidedAlignment",
    "add_alignment_targets",
    "guided_alignment_loss",
    "guided_head",
    "guided_input_step",
    "piece_links",
    "read_links_file",
]

DEFAULT_WEIGHT = 0.05

Link = tuple[int, int]


def guided_input_step(model_config) -> bool:
    """Whether guided alignment supervises (and reads) the row of the step whose input is the target
    piece (a Transformer, a Luong-style RNN) rather than the step that outputs it (Bahdanau's
    RNNsearch); see the module docstring."""
    return getattr(model_config, "rnn_attention", None) != "bahdanau"


def guided_head(model_config) -> tuple[int, int, bool] | None:
    """``(layer, head, input_step)`` of the cross-attention head a model was trained to align with
    (1-based, from its config's ``alignment_layer``/``alignment_head``; ``input_step`` as
    :func:`guided_input_step`), or None for a model trained without guided alignment."""
    layer, head = getattr(model_config, "alignment_layer", None), getattr(model_config, "alignment_head", None)
    if layer is None or head is None:
        return None
    return layer, head, guided_input_step(model_config)


@dataclass(frozen=True)
class GuidedAlignment:
    """What the loss supervises: ``weight`` λ; ``layer``/``head`` (1-based) of a Transformer's
    cross-attention, or ``None`` for a model with one attention (RNNsearch); ``input_step``: the row
    of the step whose input is each target piece (else the step that outputs it)."""

    weight: float = DEFAULT_WEIGHT
    layer: int | None = None
    head: int | None = None
    input_step: bool = True


def read_links_file(path: str | Path, n_pairs: int) -> list[set[Link]]:
    """The Pharaoh links of each training pair (one line per pair, in corpus order); a file with
    another number of lines, or a malformed link, is an InputError naming the file (and line)."""
    path = Path(path)
    lines = [line for _, line in read_lines(path)]  # a line that is not UTF-8 or holds a NUL byte: named
    if len(lines) != n_pairs:
        raise InputError(
            f"{path} has {len(lines)} lines of links but the training data has {n_pairs} pairs: "
            "give one line per training pair, in order (`attnkit data links` writes such a file)"
        )
    try:
        return [parse_links(line, where=f"{path} line {k + 1}") for k, line in enumerate(lines)]
    except ValueError as exc:
        raise InputError(str(exc)) from None


def piece_links(
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
    word_links: set[Link],
    n_words: tuple[int, int],
    max_len: int | None = None,
) -> Tensor:
    """Word links → piece links ``(K, 2)`` of ``(target piece, source piece)``, over the full
    sentences' pieces, keeping pieces before ``max_len`` (where training cuts each side). Pieces
    group into words by the ``▁`` rule (:func:`attnkit.alignment.word_spans`); when that does not
    give the text's ``n_words`` = (source words, target words) (the tokenizer normalised some
    whitespace), the pair gets no links: less supervised, never wrong."""
    src_spans, tgt_spans = word_spans(src_pieces), word_spans(tgt_pieces)
    if (len(src_spans), len(tgt_spans)) != tuple(n_words):
        return torch.zeros(0, 2, dtype=torch.long)
    cut = max_len if max_len is not None else max(len(src_pieces), len(tgt_pieces))
    pairs = [
        (t, s)
        for i, j in sorted(word_links)
        if i < len(src_spans) and j < len(tgt_spans)
        for t in tgt_spans[j]
        for s in src_spans[i]
        if t < cut and s < cut
    ]
    return torch.tensor(pairs, dtype=torch.long).reshape(-1, 2)


def add_alignment_targets(batch: dict, links: Sequence[Tensor]) -> dict:
    """``batch["align"] (B, T, S)``: the rows ``G_t`` of the module docstring for each example's
    piece links (``(K, 2)`` of ``(target piece, source piece)``; rows without a link are zero).
    ``T``, ``S`` are the batch's ``tgt_out`` and ``src`` widths; links past them are dropped."""
    b, t_len = batch["tgt_out"].shape
    s_len = batch["src"].shape[1]
    g = torch.zeros(b, t_len, s_len)
    for row, k in enumerate(links):
        if len(k):
            k = k[(k[:, 0] < t_len) & (k[:, 1] < s_len)]
            g[row, k[:, 0], k[:, 1]] = 1.0
    g = g / g.sum(-1, keepdim=True).clamp_min(1.0)  # each linked row sums to 1
    return {**batch, "align": g}


def guided_alignment_loss(attention: Tensor, targets: Tensor) -> Tensor:
    """``L_align = − Σ_{b,t,s} G_bts log A_bts`` (a sum, like the translation loss) for attention and
    targets ``(B, T, S)``; zero target rows add nothing. The log is taken of ``A`` clamped at 1e-18 so
    a weight that underflowed to 0 (a masked padding column never has target mass) stays finite."""
    if attention.shape != targets.shape:
        raise ValueError(
            f"attention {tuple(attention.shape)} and targets {tuple(targets.shape)} must have one shape (B, T, S)"
        )
    return -(targets.to(attention.dtype) * attention.clamp_min(1e-18).log()).sum()
