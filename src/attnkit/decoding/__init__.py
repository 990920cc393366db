"""Decoding: greedy and batched beam search over the ``start`` / ``step`` / ``reorder`` protocol, and
``search(model, inputs, beam_size=...)``, the one place that picks between them (:mod:`attnkit.decoding.search`), and a model wrapper that prepares the output layer ahead of the steps
(once per model; a shortlist once per batch): packed for the GEMM, and optionally restricted to a shortlist of the vocabulary
(:mod:`attnkit.decoding.output_layer`)."""

from .output_layer import OutputLayerDecoder
from .sampling import Sampling
from .search import (
    PER_SOURCE,
    Hypothesis,
    IncrementalDecoder,
    beam_search,
    gnmt_length_penalty,
    greedy_search,
    reorder_state,
    search,
)

__all__ = [
    "PER_SOURCE",
    "Hypothesis",
    "IncrementalDecoder",
    "OutputLayerDecoder",
    "Sampling",
    "beam_search",
    "gnmt_length_penalty",
    "greedy_search",
    "reorder_state",
    "search",
]
