"""The explorer's one JSON format, as pydantic models: what ``/api`` returns (FastAPI validates every
answer against these and shows them at ``/docs``) and what ``--html`` exports embed
(:func:`attnkit.explorer.html.write_explorer_html` validates its data with :class:`ExplorerData`).

This module says what the answers are, each field once; the builders make these objects themselves from
the typed analyses, and the routes return them: :mod:`attnkit.explorer.payload` (:class:`Translation`,
:class:`Caption`), :mod:`attnkit.explorer.self_attention` (:class:`SelfAttention`, :class:`Continuation`),
:mod:`attnkit.explorer.loading` (:class:`ModelInfo`). Scripts and exports that want JSON call
``.model_dump(mode="json")`` at that edge. Every matrix is
a list of rows (row = target position, or image row), values rounded to 5 decimals (4 for the
per-head maps). Fields that a model does not have are ``null``: RNNencdec has no ``attention``; only
models with RNN-style attention have ``steps``; only models with per-layer, per-head maps have
``heads``. The page asks which fields are there, never what kind of model it has.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ..data.text import lone_surrogate

__all__ = [
    "ApiErrorBody",
    "Attribution",
    "Caption",
    "CaptionAttribution",
    "Continuation",
    "Decoding",
    "Diagnostics",
    "ExplorerData",
    "GoldLinks",
    "HeadStep",
    "Heads",
    "Matrix",
    "MethodInfo",
    "ModelInfo",
    "ModelList",
    "SceneList",
    "SceneRef",
    "SceneThumb",
    "SelfAttention",
    "SelfAttentionLayer",
    "StepScores",
    "Steps",
    "Text",
    "Translation",
    "Verse",
    "VerseList",
    "WordView",
]

Matrix = list[list[float]]


def _valid_unicode(value: str) -> str:
    """``value`` unless it holds a lone surrogate (JSON can escape one, ``"\\ud800"``; no model reads it):
    a ``lone_surrogate`` validation error, which the API answers with 422 naming the field and position."""
    at = lone_surrogate(value)
    if at is not None:
        raise PydanticCustomError(
            "lone_surrogate",
            "is not valid Unicode: lone surrogate U+{code} at position {position}",
            {"code": f"{ord(value[at]):04X}", "position": at},
        )
    return value


#: a request's text field: any str that is valid Unicode (what else a model can read is the tokenizer's to say)
Text = Annotated[str, AfterValidator(_valid_unicode)]
PerHead = list[list[Matrix]]  # [layer][head][row][column]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WordView(_Strict):
    """Whole words instead of subword pieces: ``attention[i][j]`` is the mean over target word i's
    pieces of the sum over source word j's pieces (rows still sum to 1)."""

    source: list[str] = Field(description="source words (Sw)")
    target: list[str] = Field(description="target words (Tw)")
    attention: Matrix | None = Field(description="word attention, Tw × Sw; null without attention")
    rule: str = Field(description="the aggregation rule, in words (the page shows it)")
    links: list[list[int]] | None = Field(
        default=None, description="[source word, target word] links read from the word attention both ways"
    )
    links_matrix: Matrix | None = Field(
        default=None,
        description="the word matrix the links were read from, Tw × Sw, when it is not `attention`: a model "
        "trained with guided alignment links by its guided head (the page shows this matrix with them)",
    )
    links_from: str | None = Field(default=None, description="what `links_matrix` is, e.g. the guided head")
    links_rule: str = Field(
        default="argmax both ways, grow-diag-final-and",
        description="how `links` were read, in words: a matrix's row and column argmaxes by grow-diag-final-and, "
        "a guided head's by intersection (as `attnkit align` reads it)",
    )


class Diagnostics(_Strict):
    """Per target piece t: signs of attention gone wrong (see :mod:`attnkit.alignment.diagnostics`)."""

    entropy: list[float] = Field(description="H_t = −Σ_j α_tj log α_tj in nats (0 = one source piece)")
    eos_mass: list[float] = Field(
        description="α on the final source piece, which plays the role of </s> "
        "(attnkit's sources carry no end-of-sentence token)"
    )
    punctuation_mass: list[float] = Field(description="α on source pieces made only of punctuation")
    eos_position: int = Field(description="index of the final source piece")


class Steps(_Strict):
    """Bahdanau's three steps at every decoder step t: score, normalise, sum."""

    formula: str = Field(description="the score function, e.g. e_j = vᵀ tanh(W s + U h_j + b)")
    scores: Matrix = Field(description="raw scores e_tj before the softmax, T × S")
    weights: Matrix = Field(description="α_tj = softmax_j(e_tj), T × S")
    context_norm: list[float] = Field(description="‖c_t‖ with c_t = Σ_j α_tj h_j")
    contributions: Matrix | None = Field(description="‖α_tj h_j‖ = α_tj ‖h_j‖: source piece j's share of c_t")


class Heads(_Strict):
    """Every layer and head (on request, ``"heads": true``), and the encoder's attention rollout; or one
    layer's heads (``"layer": l``), for a sentence whose maps are over the answer limit."""

    enc_self: PerHead | None = Field(description="encoder self-attention, L × H × S × S")
    dec_self: PerHead | None = Field(description="decoder self-attention, L × H × T × T")
    cross: PerHead = Field(description="cross-attention, L × H × T × S")
    rollout: Matrix | None = Field(
        description="attention rollout of the encoder (Abnar & Zuidema 2020), S × S: "
        "R = Â_L ⋯ Â_1 with Â_l = rownorm(mean_heads(A_l) + I); null when one layer is asked for"
    )
    layer: int | None = Field(None, description="the one layer these maps are (0-based), or null for all layers")


class Attribution(_Strict):
    """The chosen attribution method's view of a translation (:mod:`attnkit.attribution`): what the
    matrix, the hover and the export show instead of the attention when a method is asked for."""

    method: str = Field(description="the method's registry name, e.g. alti_plus")
    title: str = Field(description="what the method computes, in words")
    reference: str = Field(description="the paper it comes from")
    needs_gradients: bool
    seconds: float = Field(description="wall-clock time the method took on the server")
    params: dict[str, Any] = Field(description="the options it ran with")
    scores: Matrix = Field(description="T × S source-piece attributions, every row sums to 1")
    words: Matrix = Field(description="word level (the same rule as word attention), Tw × Sw")
    links: list[list[int]] | None = Field(
        default=None, description="[source word, target word] links read from the word level both ways"
    )


class CaptionAttribution(_Strict):
    """The chosen attribution method's maps of a caption, over the attention grid."""

    method: str
    title: str
    reference: str
    needs_gradients: bool
    seconds: float
    params: dict[str, Any]
    maps: list[Matrix] = Field(description="per word, its attributions over the grid cells, T × h × w (sum 1)")


class MethodInfo(_Strict):
    name: str
    title: str
    reference: str
    needs_gradients: bool


class GoldLinks(_Strict):
    """A hand-aligned verse's gold links, as (source word, target word) index pairs."""

    ref: str
    source: list[str]
    target: list[str]
    sure: list[tuple[int, int]]
    possible: list[tuple[int, int]] = Field(description="possible links (every sure link is also possible)")


class StepScores(_Strict):
    """A decoder-only model's step scores (inseq's), per written token t."""

    probability: list[float] = Field(description="p(token t | the tokens before it)")
    entropy: list[float] = Field(description="H_t = −Σ_v p_v log p_v of the next-token distribution, in nats")
    contrast_probability: list[float] | None = Field(
        None, description="with a contrast: p(contrast token | the tokens before token t)"
    )


class Decoding(_Strict):
    """How a decoder-only model's written tokens were made."""

    mode: str = Field(description="greedy, sample (a sampled continuation) or forced (the text as given)")
    seed: int | None = Field(None, description="sample: the seed it was drawn with (the same seed redraws it)")


class _Written(_Strict):
    """What a model wrote after what it read, each written piece explained by the pieces it read: the part
    a translation (:class:`Translation`) and a continuation (:class:`Continuation`) share. ``attention`` and
    ``words`` have a row per written piece (T, Tw) and a column per piece read (S, Sw)."""

    model: str = Field(description="the model's name")
    kind: str = Field(description="the model's type (from its config), for display only")
    has_attention: bool
    attention: Matrix | None = Field(
        description="T × S: a translator's alignment (RNN attention's α_tj, or the last layer's cross-attention "
        "averaged over heads), a decoder-only model's last-layer head-mean attention of the position that "
        "predicted each written token; null without attention"
    )
    words: WordView
    attribution: Attribution | None = Field(
        None, description="the asked-for attribution method's view (request 'method')"
    )
    checkpoint: str | None = Field(
        None, description="a model still training (a training run's folder): the checkpoint it was made with"
    )
    step: int | None = Field(None, description="a model still training: the optimizer step of that checkpoint")


class Translation(_Written):
    """One model's translation of one source, with every attention it has."""

    src_lang: str = Field("es", description="the model's source language code")
    tgt_lang: str = Field("en", description="the model's target language code")
    source: str
    translation: str
    beam: int = Field(description="beam size (1 = greedy)")
    source_pieces: list[str] = Field(description="the encoder's input: subword pieces (S)")
    target_pieces: list[str] = Field(description="the output's subword pieces (T), end-of-sentence excluded")
    diagnostics: Diagnostics | None
    steps: Steps | None = Field(description="the three steps (models with RNN-style attention)")
    heads: Heads | None = Field(description="every layer and head (per-head models, on request)")
    forced: bool = Field(description="true when the target was given (teacher forcing), not searched")
    gold: GoldLinks | None = Field(description="hand-made links, when a forced pair is a gold verse")
    note: str | None = Field(None, description="what this engine cannot show (e.g. per-head maps on CTranslate2)")


class Continuation(_Written):
    """A decoder-only model's context and what it wrote after it (``/api/generate``): a greedy or sampled
    continuation of the text, or the text itself read with teacher forcing (``decoding.mode`` forced: every
    token after the first is a written one). Row t of ``attention`` (and of the method's ``attribution``)
    explains written token t by the context pieces before it."""

    context: str = Field(description="the text as given: the prompt (forced: the whole text)")
    written: str = Field(description="the written tokens' text (forced: the text after its first token)")
    context_pieces: list[str] = Field(description="the pieces the written ones are explained by (S), the columns")
    written_pieces: list[str] = Field(description="the written pieces (T), the rows")
    decoding: Decoding | None = Field(
        description="how the written tokens were made; null when not known (a notebook's view of an attribution "
        "of a continuation given to it)"
    )
    step_scores: StepScores | None = Field(description="each written token's probability and next-token entropy")


class TranslatedDocument(_Strict):
    """A document translated block by block, its inline tags moved across by the word alignment."""

    model: str = Field(description="the model's name")
    format: str = Field(description="html, xml, markdown or xliff")
    document: str = Field(description="the translated document; what is not text is kept as written")
    blocks: int = Field(description="how many blocks (paragraphs, headings, list items) were translated")
    notes: list[str] = Field(description="the repairs made to the markup (a tag left open closed, ...), one each")
    aligned_by: str = Field(description="the attention that moved the tags, as `attnkit align` describes it")


class SelfAttentionLayer(_Strict):
    """One layer's per-head self-attention maps."""

    layer: int = Field(ge=1, description="the layer's number (1-based: 1..num_layers)")
    heads: list[Matrix] = Field(description="H × N × N: row i is what piece i attends to; heads[h] is head h + 1")


class RepeatedHead(_Strict):
    """One head's induction scores on the repeated random tokens (Olsson et al. 2022)."""

    layer: int = Field(ge=1, description="1-based")
    head: int = Field(ge=1, description="1-based")
    prefix_matching: float = Field(description="mean attention from each second-half token to the induction stripe")
    previous_token: float = Field(description="mean attention from each token to the one before it")


class RepeatedBest(_Strict):
    """The best induction head: the highest prefix-matching score on this sequence."""

    layer: int = Field(ge=1, description="1-based")
    head: int = Field(ge=1, description="1-based")
    prefix_matching: float


class Repeated(_Strict):
    """What a map of random tokens repeated twice marks: ``length`` tokens, then the same again (``seed``)."""

    length: int = Field(ge=2, description="N: random tokens in each half")
    seed: int = Field(ge=0)
    best: RepeatedBest = Field(description="the best induction head by prefix-matching score")
    heads: list[RepeatedHead] = Field(description="every head's scores on this sequence")
    stripe: list[list[int]] = Field(
        description="[query, key] cells (1-based) of the induction stripe: key = query − N + 1"
    )
    previous_diagonal: list[list[int]] = Field(
        description="[query, key] cells (1-based) of the previous-token diagonal"
    )


class SelfAttention(_Strict):
    """An encoder-only or decoder-only model's self-attention over one text: what bertviz's head view
    and model view show. The head means and the rollout come with the text; the per-head maps one
    layer at a time (request ``"layer"``), or every layer in an exported page."""

    model: str
    kind: str = Field(description="the model's type (from its config), for display only")
    text: str
    causal: bool = Field(description="a decoder-only model: nothing right of the diagonal")
    pieces: list[str] = Field(description="the model's input pieces (N), special tokens included")
    words: list[str] = Field(description="the pieces grouped into words")
    num_layers: int
    num_heads: int
    kv_groups: list[int] | None = Field(
        None,
        description="grouped-query attention: the key/value group (1-based) of each head, heads[h] in group "
        "kv_groups[h]; null when every head has its own keys and values",
    )
    head_mean: list[Matrix] | None = Field(description="L × N × N: every layer's head mean; null for one layer")
    rollout: Matrix | None = Field(description="N × N attention rollout (Abnar & Zuidema 2020); null for one layer")
    rollout_rule: str = Field(description="the rollout's formula, in words")
    layers: list[SelfAttentionLayer] = Field(description="the per-head maps of the layers asked for")
    repeated: Repeated | None = Field(
        None, description="random tokens repeated twice (/api/repeated): the scores and the marked diagonals"
    )


class HeadStep(_Strict):
    """One head at one query, step by step (``/api/head-step``, :class:`attnkit.service.head_step.HeadStep`):
    ``e_j = q·k_j · scale`` (or an additive head's own ``scores``), ``α = softmax(e + M)``, ``o = Σ_j α_j v_j``.
    Numbers from 1 (layer, head, query); ``columns`` the head's ``[start, stop)`` in the concatenation."""

    model: str
    site: str = Field(description="self, encoder, decoder self or cross")
    layer: int = Field(ge=1)
    head: int = Field(ge=1)
    num_heads: int
    query: int = Field(ge=1, description="the query position (1-based)")
    query_pieces: list[str] = Field(description="the pieces the rows stand for")
    key_pieces: list[str] = Field(description="the pieces the keys stand for (n)")
    score: Literal["dot", "additive"]
    formula: str
    q: list[float] | None = Field(description="q_i (d_h); null for an additive head")
    keys: Matrix | None = Field(description="K, n × d_h; null for an additive head")
    scores: list[float] | None = Field(description="an additive head's e_j (n); null for a dot-product head")
    values: Matrix = Field(description="V, n × d_v")
    scale: float = Field(description="what q·k is multiplied by: 1/√d_h (1 for an additive head)")
    mask: list[bool] = Field(description="true where the query may attend to the key")
    weights: list[float] = Field(description="the model's own attention row (n)")
    output: list[float] = Field(description="the head's output Σ_j α_j v_j as the model formed it (d_v)")
    columns: list[int] = Field(description="[start, stop) of this head's slice of Concat(head_1..head_H)")
    width: int = Field(description="the concatenation's width (H · d_h) before W_O")
    positions: Literal["rope", "absolute", "recurrent", "none"]
    position_note: str = Field(description="what swapping two keys shows for this model, in words")
    kv_group: int | None = Field(None, description="grouped-query attention: the key/value group (1-based)")


class LensToken(_Strict):
    id: int
    piece: str
    logit: float


class LensRow(_Strict):
    """One block's residual at a position read through the final norm and the unembedding."""

    layer: int = Field(ge=0, description="0 = the embeddings, then each block's output (1-based)")
    top: list[LensToken] = Field(description="the top tokens, most likely first")
    rank: int = Field(ge=1, description="the rank of the model's own prediction (1 = top)")


class FlowEdge(_Strict):
    layer: int = Field(ge=1)
    head: int | None = Field(description="the head (1-based); null = the residual")
    source: int = Field(ge=1, description="the position read (1-based)")
    target: int = Field(ge=1, description="the position written (1-based)")
    weight: float = Field(description="the edge's importance at its target (Ferrando & Voita 2024)")


class FlowNode(_Strict):
    layer: int = Field(ge=1)
    position: int = Field(ge=1)
    weight: float


class FlowGraph(_Strict):
    """The information-flow routes of one prediction (Ferrando & Voita 2024)."""

    position: int
    token: int
    threshold: float
    layers: int
    heads: int
    edges: list[FlowEdge]
    mlp_nodes: list[FlowNode]


class AttentionRow(_Strict):
    layer: int = Field(ge=1)
    target: int = Field(ge=1)
    heads: list[list[float]] = Field(description="H × N: every head's attention row at the target")
    promotes: list[list[LensToken]] = Field(description="per head: the tokens its output at the target raises most")
    suppresses: list[list[LensToken]] = Field(description="per head: the tokens its output at the target lowers most")


class LMView(_Strict):
    """A view of one prediction of a decoder-only model (built by
    :func:`attnkit.explorer.lm_view_answer.lm_view_answer` from an ``attnkit.service.LMViewAnalysis``): the
    logit lens, the direct logit attribution, or the information-flow routes with each graph position's logit
    lens and each head edge's attention rows. Layers, heads and positions count from 1."""

    model: str
    kind: str
    view: str = Field(description="logit_lens, direct_logit or routes")
    text: str
    pieces: list[str]
    position: int = Field(ge=1, description="the position whose prediction is viewed")
    token: dict[str, int | str] = Field(description="the predicted token: its id and piece")
    layers: int
    heads: int
    seconds: float
    lens: list[LensRow] | None = None
    direct_logit: dict[str, Any] | None = Field(
        None, description="every head's and MLP's direct logit, the embedding's and the final norm's bias's"
    )
    graph: FlowGraph | None = None
    node_lens: dict[str, list[LensRow]] | None = Field(None, description="the logit lens at each graph position")
    attention_rows: list[AttentionRow] | None = None


class SceneRef(_Strict):
    index: int = Field(description="the held-out test scene's index")
    reference: str = Field(description="its ground-truth caption")


class Caption(_Strict):
    """One captioner's caption of one image, with the map behind every word."""

    model: str
    kind: str
    attention_type: str = Field(description="soft or hard (Xu et al. 2015)")
    caption: str
    words: list[str] = Field(description="the caption's words (T)")
    grid: tuple[int, int] = Field(description="the attention grid (h, w)")
    canvas: int = Field(description="the model's input size in pixels (the image is canvas × canvas)")
    attention: list[Matrix] = Field(description="per word, its attention map over the grid, T × h × w")
    image: str = Field(description="the image the model read, as a PNG data URL")
    boxes: list[list[float]] | None = Field(
        description="a test scene's ground-truth boxes [x0, y0, x1, y1] in canvas pixels; null for uploads"
    )
    word_items: list[int] | None = Field(description="per word, the index of the box it names, or -1")
    correctness: list[float | None] | None = Field(
        description="per word that names an item, the attention mass inside that item's box (attention correctness)"
    )
    scene: SceneRef | None
    attribution: CaptionAttribution | None = Field(None, description="the asked-for attribution method's maps")
    checkpoint: str | None = Field(
        None, description="a model still training (a training run's folder): the checkpoint it was made with"
    )
    step: int | None = Field(None, description="a model still training: the optimizer step of that checkpoint")


class ModelInfo(_Strict):
    name: str
    task: Literal["translation", "captioning", "self-attention"]
    kind: str
    scores: dict[str, Any] = Field(description="test scores from the model index (e.g. test_bleu)")
    has_attention: bool
    config: dict[str, Any]
    methods: list[MethodInfo] = Field([], description="the attribution methods this model has (request 'method')")
    engine: Literal["pytorch", "ctranslate2"] = Field("pytorch", description="what decodes it (attnkit serve --engine)")
    src_lang: str | None = Field(None, description="translation models: source language code")
    tgt_lang: str | None = Field(None, description="translation models: target language code")
    corpus: str | None = Field(None, description="translation models: the corpus it was trained on")
    num_layers: int | None = Field(None, description="self-attention models: layers")
    num_heads: int | None = Field(None, description="self-attention models: heads per layer")
    generates: bool | None = Field(
        None, description="self-attention models: a decoder-only model that writes continuations (/api/generate)"
    )
    lang: str | None = Field(None, description="attnkit's language models: the language of the text it was trained on")
    checkpoint: str | None = Field(
        None,
        description="a training run's model: the checkpoint served now (attnkit serve follows the run, --follow-every)",
    )
    step: int | None = Field(None, description="a training run's model: the optimizer step of that checkpoint")


class ModelList(_Strict):
    models: list[ModelInfo]


class Verse(_Strict):
    ref: str = Field(description="book chapter:verse (the Bible), or FILE:LINE of the corpus's input")
    source: str
    reference: str = Field(description="the reference translation (the World English Bible's, or the corpus's)")
    gold: bool = Field(description="true when the verse has hand-made gold links")


class VerseList(_Strict):
    verses: list[Verse]


class SceneThumb(_Strict):
    index: int
    caption: str = Field(description="the ground-truth caption")
    image: str = Field(description="PNG data URL")


class SceneList(_Strict):
    scenes: list[SceneThumb]


class ApiErrorBody(_Strict):
    """Every 4xx (and the 500 of a bug) has this body and nothing else."""

    error: str = Field(description="what was wrong, in words a person understands")


class ExplorerData(_Strict):
    """What an exported page embeds (``window.ATTNKIT_DATA``)."""

    models: list[ModelInfo] = []
    translations: list[Translation] = []
    continuations: list[Continuation] = Field([], description="a decoder-only model's contexts and continuations")
    captions: list[Caption] = []
    self_attention: list[SelfAttention] = []
    head_steps: list[HeadStep] = Field([], description="step-through data of chosen heads, for the knobs offline")
