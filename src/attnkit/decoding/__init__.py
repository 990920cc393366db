"""Decoding: greedy and batched beam search over the ``start`` / ``step`` / ``reorder`` protocol
(:mod:`attnkit.decoding.search`), and a model wrapper that prepares the output layer once per batch:
packed for the GEMM, and optionally restricted to a shortlist of the vocabulary
(:mod:`attnkit.decoding.output_layer`)."""
from .search import (PER_SOURCE, Hypothesis, IncrementalDecoder, beam_search, gnmt_length_penalty, greedy_search,
                     reorder_state)
from .output_layer import OutputLayerDecoder

__all__ = ["IncrementalDecoder", "Hypothesis", "greedy_search", "beam_search", "gnmt_length_penalty", "reorder_state",
           "PER_SOURCE", "OutputLayerDecoder"]
