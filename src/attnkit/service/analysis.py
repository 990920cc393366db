"""What an analysis computed, as typed records: :class:`TranslationAnalysis`, :class:`CaptionAnalysis` and
:class:`GenerationAnalysis`.

They hold tensors and plain values only (no model), so a worker process can return one (they pickle) and
every front end shows the same numbers: the server's JSON (:mod:`attnkit.explorer.payload`), the CLI's
output and the notebook's views are functions of an analysis. Attributions are
:class:`attnkit.attribution.Attribution` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


__all__ = [
    "Analysis",
    "CaptionAnalysis",
    "GenerationAnalysis",
    "GuidedLinks",
    "LMViewAnalysis",
    "RepeatedAnalysis",
    "TranslationAnalysis",
]


def _restore(cls, data: bytes):
    import pickle

    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(data))
    return obj


class _Portable:
    """Pickled whole, tensors inline (plain :mod:`pickle`), so an analysis sent from a worker process through
    a multiprocessing pipe carries its numbers: torch would otherwise send each tensor as a shared-memory
    handle, which dies with a worker that ends after its job (``--worker-tasks 1``)."""

    def __reduce__(self):
        import pickle

        return (_restore, (type(self), pickle.dumps(dict(vars(self)))))


@dataclass(frozen=True)
class GuidedLinks:
    """The links of a guided-alignment model's guided head (Garg et al. 2019), read as ``attnkit align``
    reads them: ``links`` as ``[source word, target word]``, the word matrix ``(Tw, Sw)`` they were read from,
    which head it is (``name``, layers and heads numbered from 1) and how they were read (``rule``)."""

    links: list[list[int]]
    matrix: Tensor
    name: str
    rule: str


@dataclass
class TranslationAnalysis(_Portable):
    """One translation (or forced target) and every view of it that was asked for.

    ``model``: the model's label; ``kind``: its type (from its config); ``request``: what was asked
    (:class:`~attnkit.service.requests.TranslationRequest`, its method canonical; None for a view made from
    another record); ``beam``: the search's beam (0: none); ``forced``: the target was given (teacher
    forcing), not searched; ``src_lang``/``tgt_lang``: the languages (None: not known); ``source_pieces`` and
    ``target_pieces``: the encoder's input and the output's subword pieces (S and T); ``attention``: the
    forced decoding of the output (:class:`attnkit.tasks.translation.TranslationAttention`, whose ``maps``
    hold every attention the model has), None for an empty translation or when none was made;
    ``attribution``: the method's :class:`~attnkit.attribution.Attribution`; ``guided``: a guided head's
    links; ``gold``: a gold verse's hand-made links (word indices, ``GoldVerse.to_dict()``); ``note``: what
    the engine cannot show; ``spec``: the model's spec (a training run's names the checkpoint used);
    ``seconds``: the analysis's wall-clock time."""

    model: str
    kind: str
    request: Any
    source: str
    translation: str
    source_pieces: list[str]
    target_pieces: list[str]
    beam: int = 0
    forced: bool = True
    src_lang: str | None = None
    tgt_lang: str | None = None
    attention: Any = None
    attribution: Any = None
    guided: GuidedLinks | None = None
    gold: dict | None = None
    note: str | None = None
    spec: Any = None
    seconds: float = 0.0


@dataclass
class CaptionAnalysis(_Portable):
    """One caption and each word's attention over the grid.

    ``attention``: ``(T, h·w)`` α_t of each word; ``grid``: ``(h, w)``; ``canvas``: the image's side;
    ``image``: ``(1, C, C)``; ``attention_type``: soft or hard; ``attribution``: the method's
    :class:`~attnkit.attribution.Attribution`; with a test scene, ``boxes`` (its items' boxes),
    ``word_items`` (the item each word names, -1 for none) and ``correctness`` (the attention's mass inside
    the named item's box, per word; None for words naming none: the attribution's maps when a method was
    asked for); ``scene``: the scene's ``{"index", "reference"}``."""

    model: str
    kind: str
    request: Any
    caption: str
    words: list[str]
    tokens: list[int]
    attention: Tensor
    grid: tuple[int, int]
    canvas: int
    image: Tensor
    attention_type: str = "soft"
    attribution: Any = None
    scene: dict | None = None
    boxes: list | None = None
    word_items: list[int] | None = None
    correctness: list[float | None] | None = None
    spec: Any = None
    seconds: float = 0.0


@dataclass
class GenerationAnalysis(_Portable):
    """A decoder-only model's continuation of a text (greedy or sampled), or the text itself (forced), each
    attributed token explained by the tokens before it: ``attention`` is the last layer's head-mean attention
    (an :class:`~attnkit.attribution.Attribution`, the page's matrix; None only for a model whose attention
    attnkit cannot read, asked for a gradient method), ``attribution`` the method
    asked for (None without a method); ``continuation`` the attributed tokens' text (the text after its first
    token, when forced); ``mode``: greedy, sample or forced; ``seed``: the seed a sampled continuation was
    drawn with (redo it with this seed); ``step_scores``: each attributed token's probability, the entropy of
    its next-token distribution (nats) and, with a contrast, the foil's probability
    (:func:`attnkit.attribution.generation.step_scores`); ``spec`` the model's spec; ``seconds`` the
    analysis's wall-clock time."""

    model: str
    kind: str
    request: Any
    text: str
    continuation: str
    attention: Any
    attribution: Any = None
    spec: Any = None
    seconds: float = 0.0
    mode: str = "greedy"
    seed: int | None = None
    step_scores: dict | None = None


@dataclass
class LMViewAnalysis(_Portable):
    """A view of one prediction of a decoder-only model reading ``text`` (:class:`LMViewRequest`): ``pieces``
    the text's tokens, ``position`` (0-based inside code) the position whose prediction ``token`` (an id;
    ``token_piece`` its text) is viewed; ``lens`` the logit lens there (``LensRow`` list: the embeddings, then
    every block), ``dla`` the direct logit attribution
    (:class:`~attnkit.attribution.lm_mixing.DirectLogitAttribution`), ``graph`` the information-flow routes
    (:class:`~attnkit.attribution.information_flow.InformationFlowGraph`) and ``node_lens`` the logit lens at
    every position on the graph, ``attention_rows`` every head's attention row at each target of a kept
    head edge and the tokens each head's output there promotes and suppresses (by ``(layer, target)``, 0-based:
    :func:`~attnkit.attribution.lm_methods.head_details`); ``vocab`` the text of every token id shown. Its JSON, for
    the CLI, the server and the page (layers, heads and positions numbered from 1), is the explorer's
    ``LMView`` (:func:`attnkit.explorer.lm_view_answer.lm_view_answer`)."""

    model: str
    kind: str
    request: Any
    text: str
    pieces: list[str]
    position: int
    token: int
    token_piece: str
    layers: int
    heads: int
    lens: list | None = None
    dla: Any = None
    graph: Any = None
    node_lens: dict | None = None
    vocab: dict | None = None
    attention_rows: dict | None = None
    spec: Any = None
    seconds: float = 0.0

    def _repr_html_(self) -> str:  # Jupyter, VS Code, Colab: the same view as the page's
        from ..display import html_for

        return html_for(self) or f"<pre>{self.text!r}: {self.token_piece!r} at position {self.position + 1}</pre>"


@dataclass
class RepeatedAnalysis(_Portable):
    """A language model's attention on ``length`` random tokens repeated twice (:class:`RepeatedRequest`):
    ``ids`` and ``pieces`` the ``2 · length`` tokens, ``attention`` every layer's and head's map
    ``(L, H, 2·length, 2·length)``, ``prefix_matching`` and ``previous_token`` each head's score on this
    sequence (``[layer][head]``, 0-based lists: :func:`attnkit.models.induction.prefix_matching_from_attention`),
    ``best`` the best induction head ``(layer, head, score)`` and ``layer``, ``head`` the head shown, both
    numbered from 1.

    In the shown map two diagonals are marked: the induction stripe, where query ``i`` (of the second
    half) attends to key ``i − length + 1``, the token after the earlier occurrence of its own token; and
    the previous-token diagonal, key ``i − 1``. :meth:`to_dict` is the JSON of the CLI (positions from 1)."""

    model: str
    kind: str
    request: Any
    length: int
    seed: int
    ids: list[int]
    pieces: list[str]
    attention: Tensor
    prefix_matching: list[list[float]]
    previous_token: list[list[float]]
    best: tuple[int, int, float]
    layer: int
    head: int
    spec: Any = None
    seconds: float = 0.0

    def stripe(self) -> list[list[int]]:
        """The induction stripe's cells ``[query, key]`` (1-based): key = query − length + 1, for every
        query of the second half."""
        n = self.length
        return [[q, q - n + 1] for q in range(n + 1, 2 * n + 1)]

    def previous(self) -> list[list[int]]:
        """The previous-token diagonal's cells ``[query, key]`` (1-based): key = query − 1."""
        return [[q, q - 1] for q in range(2, 2 * self.length + 1)]

    def map(self, layer: int | None = None, head: int | None = None) -> Tensor:
        """The ``(2·length, 2·length)`` map of ``layer``, ``head`` (1-based; default the head shown)."""
        layer, head = layer or self.layer, head or self.head
        return self.attention[layer - 1, head - 1]

    def heads(self) -> list[dict]:
        """Every head's scores on this sequence, numbered from 1."""
        return [
            {"layer": li + 1, "head": hi + 1, "prefix_matching": p, "previous_token": self.previous_token[li][hi]}
            for li, row in enumerate(self.prefix_matching)
            for hi, p in enumerate(row)
        ]

    def to_dict(self) -> dict:
        """JSON-ready: the sequence, every head's scores, the best head, the shown head's map and the two
        marked diagonals (positions, layers and heads from 1)."""
        layer, head, score = self.best
        return {
            "model": self.model,
            "kind": self.kind,
            "length": self.length,
            "seed": self.seed,
            "ids": self.ids,
            "pieces": self.pieces,
            "heads": self.heads(),
            "best_head": {"layer": layer, "head": head, "prefix_matching": score},
            "layer": self.layer,
            "head": self.head,
            "prefix_matching": self.prefix_matching[self.layer - 1][self.head - 1],
            "previous_token": self.previous_token[self.layer - 1][self.head - 1],
            "scores": [[round(float(v), 5) for v in row] for row in self.map()],
            "stripe": self.stripe(),
            "previous_diagonal": self.previous(),
            "seconds": round(self.seconds, 3),
        }

    def _repr_html_(self) -> str:  # Jupyter, VS Code, Colab: the explorer's heads grid with the stripe marked
        from ..display import html_for

        return html_for(self) or f"<pre>{self.to_dict()}</pre>"


Analysis = TranslationAnalysis | CaptionAnalysis | GenerationAnalysis | LMViewAnalysis | RepeatedAnalysis
