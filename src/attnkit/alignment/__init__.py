"""Attention as word alignment: subword attention turned into word attention, and (in time) links
extracted from it and scored against a gold standard."""
from .diagnostics import attention_diagnostics, is_punctuation
from .rollout import attention_rollout
from .words import word_attention, word_spans, words_from_pieces

__all__ = ["word_attention", "word_spans", "words_from_pieces", "attention_rollout", "attention_diagnostics",
           "is_punctuation"]
