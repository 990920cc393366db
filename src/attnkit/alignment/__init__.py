"""Attention as word alignment, tensors → links: subword attention turned into word attention
(``words``), links read from it (``extract``: plain and Shift-Att rows), two directions combined
(``symmetrize``), scored against a hand-made gold standard (``aer``, ``gold``) with bootstrap
intervals (``bootstrap``); the statistical reference aligner (``eflomal``); rollout and
diagnostics for the explorer. Loading models and corpora is the tasks' job
(:mod:`attnkit.tasks.translation.alignment`)."""

from .aer import AERCounts, aer_counts, argmax_links, diagonal_links, threshold_links
from .bootstrap import aer_interval, paired_aer_difference
from .diagnostics import attention_diagnostics, is_punctuation
from .extract import attention_links, column_links, shift_rows
from .markup import TagSpan, project_spans, proportional_spans
from .rollout import attention_rollout
from .symmetrize import SYMMETRIZATIONS, grow_diag, grow_diag_final, grow_diag_final_and, invert, symmetrize
from .words import span_attention, word_attention, word_spans, words_from_pieces

__all__ = [
    "SYMMETRIZATIONS",
    "AERCounts",
    "TagSpan",
    "aer_counts",
    "aer_interval",
    "argmax_links",
    "attention_diagnostics",
    "attention_links",
    "attention_rollout",
    "column_links",
    "diagonal_links",
    "grow_diag",
    "grow_diag_final",
    "grow_diag_final_and",
    "invert",
    "is_punctuation",
    "paired_aer_difference",
    "project_spans",
    "proportional_spans",
    "shift_rows",
    "span_attention",
    "symmetrize",
    "threshold_links",
    "word_attention",
    "word_spans",
    "words_from_pieces",
]
