"""The explorer's one JSON format, built: everything a page needs to show where a model looks.

The server's ``/api/translate`` and ``/api/caption`` return these objects, and ``--html`` exports
embed the very same ones; :mod:`attnkit.explorer.schema` defines them field by field
(:class:`~attnkit.explorer.schema.Translation`, :class:`~attnkit.explorer.schema.Caption`). Every
matrix is a list of rows (row = target position), rounded to 5 decimals.

Each answer is built in one place, as the schema's own object, a pure function of what
:func:`attnkit.service.analyse` computed: :func:`translation_answer` of a
:class:`~attnkit.service.TranslationAnalysis` and :func:`caption_answer` of a
:class:`~attnkit.service.CaptionAnalysis` (the server's fast lane, its workers' analyses, the exports and the
notebook views all go through them). A translation's maps are :class:`attnkit.models.AttentionMaps`, so the
builder never asks what kind of model it has: it shows the maps that are there. :func:`translation_payload`
and :func:`caption_payload` analyse a bare model and give the answer as JSON (a dict), for scripts and exports.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import torch
from torch import Tensor

from ..alignment import (
    attention_diagnostics,
    attention_links,
    attention_rollout,
    column_links,
    grow_diag_final_and,
    word_attention,
    words_from_pieces,
)
from ..errors import InputError
from ..service import (
    CaptionAnalysis,
    CaptionRequest,
    Model,
    ModelKind,
    ModelSpec,
    TranslationAnalysis,
    TranslationRequest,
    analyse,
)
from ..service.analyse import gold_for
from . import schema

__all__ = [
    "WORD_RULE",
    "AnswerTooLarge",
    "caption_answer",
    "caption_payload",
    "checkpoint_fields",
    "gold_for",
    "head_numbers",
    "image_data_url",
    "method_info",
    "translation_answer",
    "translation_payload",
]


class AnswerTooLarge(InputError):
    """The per-head maps asked for hold more numbers than the server sends in one answer (HTTP 413)."""

    status = 413


WORD_RULE = (
    "word attention = the mean over a target word's pieces of the sum over a source word's pieces "
    "(each row still sums to 1)"
)


LINKS_RULE = (
    "links read from this matrix both ways: each target word's argmax source word and each source word's "
    "argmax target word, combined by grow-diag-final-and (`attnkit align --symmetrize grow-diag-final-and`)"
)


#: How the page names :data:`LINKS_RULE` (a guided head's links are named by its reading's rule, :func:`guided_links`).
WORD_LINKS_RULE = "argmax both ways, grow-diag-final-and"


def word_links(word_matrix: Tensor) -> list[list[int]]:
    """``[source word, target word]`` links read from a word matrix ``(Tw, Sw)`` by :data:`LINKS_RULE`."""
    return sorted([i, j] for i, j in grow_diag_final_and(attention_links(word_matrix), column_links(word_matrix)))


def checkpoint_fields(spec: ModelSpec | None) -> dict:
    """``{"checkpoint": folder name, "step": its step}`` of a training run's model (what a server shows beside
    its name, so a learner knows which moment of the training they see); ``{}`` for other models."""
    if spec is None or spec.checkpoint is None:
        return {}
    from ..training.checkpoint import checkpoint_step

    return {"checkpoint": Path(spec.checkpoint).name, "step": checkpoint_step(spec.checkpoint)}


def _rows(t: Tensor | None, digits: int = 5):
    if t is None:
        return None
    return torch.round(t.double(), decimals=digits).tolist()  # float64: 0.66881, not 0.6688100099563599


def method_info(name: str) -> dict:
    """A registered attribution method as :class:`~attnkit.explorer.schema.MethodInfo`
    (:data:`attnkit.method_registry.REGISTRY`)."""
    from ..method_registry import REGISTRY

    return REGISTRY[name].info()


def _attribution_view(att) -> dict:
    """The fields every attribution view has (:class:`~attnkit.explorer.schema.Attribution` and
    :class:`~attnkit.explorer.schema.CaptionAttribution`)."""
    info = method_info(att.method)
    return {
        **{k: v for k, v in info.items() if k != "name"},
        "method": att.method,
        "seconds": round(att.seconds, 3),
        "params": att.params,
    }


def head_numbers(maps, layer: int | None = None) -> int:
    """How many numbers the per-head maps of ``maps`` (one ``layer``, 1-based, or all) hold: Σ L·H·rows·columns."""
    total = 0
    for t in (maps.enc_self, maps.dec_self, maps.cross):
        if t is not None:
            total += t[layer - 1 : layer].numel() if layer is not None else t.numel()
    if maps.enc_self is not None and layer is None:
        total += maps.enc_self.shape[-1] ** 2  # the rollout, S × S
    return total


def translation_answer(
    analysis: TranslationAnalysis,
    *,
    heads: bool | None = None,
    layer: int | None = None,
    max_numbers: int | None = None,
) -> schema.Translation:
    """A :class:`~attnkit.service.TranslationAnalysis` as the answer of a translation
    (:class:`~attnkit.explorer.schema.Translation`): the one place that answer is built, with a training run's
    checkpoint (``checkpoint``, ``step``) of the model it was made with.

    ``heads``, ``layer`` and ``max_numbers`` default to the analysis's request: also every layer's and head's
    maps, or only layer ``layer`` (1-based; the others are then empty lists and the rollout null), so a long
    sentence's maps can be fetched in pieces. With ``max_numbers``, maps holding more numbers than that raise
    :class:`AnswerTooLarge` before any is converted."""
    a, req = analysis, analysis.request
    if heads is None:
        heads = bool(getattr(req, "heads", False))
        layer = getattr(req, "layer", None) if layer is None else layer
        max_numbers = getattr(req, "max_numbers", None) if max_numbers is None else max_numbers
    ta = a.attention
    m = ta.maps if ta is not None and ta.maps.alignment is not None else None
    word_rows = diagnostics = steps = None
    links: dict = {}
    if m is not None:
        wa = word_attention(m.alignment, ta.source_pieces, ta.target_pieces)  # (Tw, Sw)
        word_rows, g = _rows(wa), a.guided
        # links_matrix None: read from this matrix; a model trained with guided alignment: its guided head's
        links = (
            dict(links=word_links(wa), links_matrix=None, links_from=None, links_rule=WORD_LINKS_RULE)
            if g is None
            else dict(links=g.links, links_matrix=_rows(g.matrix), links_from=g.name, links_rule=g.rule)
        )
        diagnostics = schema.Diagnostics(
            **{
                k: (_rows(torch.tensor(v)) if isinstance(v, list) else v)
                for k, v in attention_diagnostics(m.alignment, ta.source_pieces).items()
            }
        )
        if m.scores is not None and m.context is not None:
            norms = m.annotations.norm(dim=-1) if m.annotations is not None else None  # (S,)
            steps = schema.Steps(
                formula=m.score,
                scores=_rows(m.scores.masked_fill(torch.isinf(m.scores), -1e9)),
                weights=_rows(m.alignment),
                context_norm=_rows(m.context.norm(dim=-1)),
                # ‖α_tj h_j‖ = α_tj ‖h_j‖: how much source piece j contributes to c_t
                contributions=_rows(m.alignment * norms) if norms is not None else None,
            )
    words = schema.WordView(
        source=words_from_pieces(a.source_pieces),
        target=words_from_pieces(ta.target_pieces if ta is not None else a.target_pieces),
        attention=word_rows,
        rule=WORD_RULE,
        **links,
    )
    langs = {k: v for k, v in (("src_lang", a.src_lang), ("tgt_lang", a.tgt_lang)) if v is not None}
    return schema.Translation(
        model=a.model,
        kind=a.kind,
        **langs,
        source=a.source,
        translation=a.translation,
        beam=a.beam,
        source_pieces=list(a.source_pieces),
        target_pieces=list(a.target_pieces),
        has_attention=m is not None,
        attention=_rows(m.alignment) if m is not None else None,
        words=words,
        diagnostics=diagnostics,
        steps=steps,
        heads=_heads(m, layer, max_numbers) if heads and m is not None and m.cross is not None else None,
        forced=a.forced,
        gold=a.gold,
        attribution=attribution_fields(a.attribution) if a.attribution is not None else None,
        note=a.note or None,
        **checkpoint_fields(a.spec),
    )


def _heads(m, layer: int | None, max_numbers: int | None) -> schema.Heads:
    """The ``heads`` object of :func:`translation_answer` (``layer`` 1-based, checked against the maps)."""
    layers = m.cross.shape[0]
    if layer is not None and not 1 <= layer <= layers:
        raise InputError(f"layer must be in 1..{layers} (this model has {layers} layers), got {layer}")
    n = head_numbers(m, layer)
    if max_numbers is not None and n > max_numbers:
        raise AnswerTooLarge(
            f"the per-head maps of this sentence hold {n} numbers; the limit of one answer is {max_numbers} "
            f'(--max-answer-numbers): ask for one layer at a time with "layer": 1..{layers}'
        )
    pick = (lambda t: t) if layer is None else (lambda t: t[layer - 1 : layer])  # (L or 1, H, rows, columns)
    return schema.Heads(
        enc_self=_rows(pick(m.enc_self), 4) if m.enc_self is not None else None,
        dec_self=_rows(pick(m.dec_self), 4) if m.dec_self is not None else None,
        cross=_rows(pick(m.cross), 4),
        rollout=_rows(attention_rollout(m.enc_self)) if m.enc_self is not None and layer is None else None,
        layer=layer,
    )


def attribution_fields(att) -> schema.Attribution:
    """An :class:`attnkit.attribution.Attribution` of rows over source pieces (a translation's, a
    continuation's) as the answer's ``attribution``."""
    words = att.word_scores()[2]  # (Tw, Sw)
    return schema.Attribution(
        **_attribution_view(att), scores=_rows(att.scores), words=_rows(words), links=word_links(words)
    )


def caption_attribution_fields(att) -> schema.CaptionAttribution:
    """A captioner's :class:`attnkit.attribution.Attribution` as the caption answer's ``attribution``."""
    return schema.CaptionAttribution(**_attribution_view(att), maps=_rows(att.grid_scores()))


def image_data_url(image: Tensor) -> str:
    """A ``(1, H, W)`` image in [0, 1] as a PNG data URL (what the page draws the maps over)."""
    from PIL import Image

    arr = (image[0].clamp(0, 1) * 255).round().byte().cpu().numpy()
    buf = io.BytesIO()
    Image.fromarray(arr, mode="L").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def caption_answer(analysis: CaptionAnalysis) -> schema.Caption:
    """A :class:`~attnkit.service.CaptionAnalysis` as the answer of a caption
    (:class:`~attnkit.explorer.schema.Caption`): each word's attention map over the grid; with a test scene
    its boxes and the attention correctness of each word that names an item; a training run's checkpoint."""
    a = analysis
    h, w = a.grid
    return schema.Caption(
        model=a.model,
        kind=a.kind,
        attention_type=a.attention_type,
        caption=a.caption,
        words=list(a.words),
        grid=(h, w),
        canvas=a.canvas,
        attention=_rows(a.attention.reshape(len(a.words), h, w)) if a.words else [],  # (T, h, w)
        image=image_data_url(a.image),
        boxes=a.boxes,
        word_items=a.word_items,
        correctness=a.correctness,
        scene=a.scene,
        attribution=caption_attribution_fields(a.attribution) if a.attribution is not None else None,
        **checkpoint_fields(a.spec),
    )


# ---------------------------------------------------------------------- analyse, then build
def translation_payload(
    translator,
    source: str,
    *,
    beam: int = 5,
    heads: bool = False,
    model: str = "",
    target: str | None = None,
    method: str | None = None,
    layer: int | None = None,
    max_numbers: int | None = None,
    progress=None,
    result: dict | None = None,
    forced=None,
) -> dict:
    """``translation_answer(analyse(...))`` as JSON (a dict) for a bare translator (named ``model``): the
    :class:`~attnkit.service.TranslationRequest` of these arguments (``layer`` 1-based), analysed and built.
    ``result``/``forced``: a search's output and its forced decoding already made (see
    :func:`attnkit.service.analyse`)."""
    request = TranslationRequest(
        source, beam=beam, target=target, method=method, heads=heads, layer=layer, max_numbers=max_numbers
    )
    analysis = analyse(_model(model, ModelKind.TRANSLATOR, translator), request, progress, search=result, forced=forced)
    return translation_answer(analysis).model_dump(mode="json")


def caption_payload(
    captioner,
    image: Tensor,
    *,
    model: str = "",
    beam: int = 1,
    scene: dict | None = None,
    method: str | None = None,
    progress=None,
) -> dict:
    """``caption_answer(analyse(...))`` as JSON (a dict) for a bare captioner (named ``model``) and an image
    ``(1, C, C)``."""
    request = CaptionRequest(image, beam=beam, scene=scene, method=method)
    return caption_answer(analyse(_model(model, ModelKind.CAPTIONER, captioner), request, progress)).model_dump(
        mode="json"
    )


def _model(label: str, kind: ModelKind, impl) -> Model:
    return impl if isinstance(impl, Model) else Model(label, kind, impl, ModelSpec(label))
