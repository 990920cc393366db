"""Attention as word alignment: subword attention turned into word attention, links extracted from it
and scored against a hand-made gold standard (AER), rollout and diagnostics for the explorer."""

from .aer import AERCounts, aer_counts, argmax_links, diagonal_links, grow_diag_final_and, threshold_links
from .diagnostics import attention_diagnostics, is_punctuation
from .rollout import attention_rollout
from .words import word_attention, word_spans, words_from_pieces

__all__ = [
    "AERCounts",
    "aer_counts",
    "argmax_links",
    "attention_diagnostics",
    "attention_rollout",
    "diagonal_links",
    "grow_diag_final_and",
    "is_punctuation",
    "threshold_links",
    "word_attention",
    "word_spans",
    "words_from_pieces",
]
