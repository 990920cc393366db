"""Decoding: greedy and batched beam search over the ``start`` / ``step`` / ``reorder`` protocol
(:mod:`attnkit.decoding.search`), and the same searches over a shortlist of the output vocabulary
(:mod:`attnkit.decoding.shortlist`)."""
from .search import (PER_SOURCE, Hypothesis, IncrementalDecoder, beam_search, gnmt_length_penalty, greedy_search,
                     reorder_state)
from .shortlist import ShortlistDecoder

__all__ = ["IncrementalDecoder", "Hypothesis", "greedy_search", "beam_search", "gnmt_length_penalty", "reorder_state",
           "PER_SOURCE", "ShortlistDecoder"]
