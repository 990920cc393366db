"""Pictures of attention weights, written as PNG files (matplotlib, Agg canvas, no display).

Every function takes torch tensors or numpy arrays, creates the parent folders of ``path``,
writes a PNG there and returns the path as a ``pathlib.Path``.

- :func:`plot_alignment`, :func:`plot_alignments`, :func:`format_top_alignments`:
  source/target alignments (Bahdanau et al. 2015, Fig. 3), and a text version for terminals.
- :func:`plot_caption_attention`, :func:`upsample_attention`: attention over image regions
  per caption word (Xu et al. 2015, Fig. 2).
- :func:`plot_heads`, :func:`plot_transformer_heads`: per-layer x per-head maps.
"""

from .heads import plot_heads, plot_transformer_heads
from .heatmap import format_top_alignments, plot_alignment, plot_alignments
from .overlay import plot_caption_attention, upsample_attention

__all__ = [
    "format_top_alignments",
    "plot_alignment",
    "plot_alignments",
    "plot_caption_attention",
    "plot_heads",
    "plot_transformer_heads",
    "upsample_attention",
]
