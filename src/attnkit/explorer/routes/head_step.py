"""``POST /api/head-step``: one attention head at one query, step by step (the page's step-through view,
:func:`attnkit.service.head_step.head_step`): ``q_i``, ``K``, ``V``, the mask row, the scale, the model's own row,
the head's output and its columns in the concatenation before ``W_O``. The page recomputes the softmax
from these with its knobs (temperature, the √d scale, a masked key, two keys swapped), with no further
request.

A text model (``text``, ``site`` ``"self"``): an attnkit language model or a Hugging Face encoder-only or
decoder-only model. A translator (``source``, optional ``target``, else its greedy translation is forced):
an attnkit Transformer (``site`` ``"encoder"``, ``"decoder self"``, ``"cross"``) or RNNsearch (``"cross"``,
its additive attention). Every bound is checked before a tensor is built: the characters, the subword
tokens (``--max-tokens`` and the model's own maximum), the layer, the head, the query position and the
answer's numbers (``--max-answer-numbers``); then one forward pass in the fast lane.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ...data.text import no_readable_word
from ...errors import InputError
from ...service.head_step import head_step, head_step_numbers
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..state import explorer, pick, run_light
from .self_attention import _checked_ids

__all__ = ["HeadStepRequest", "router"]

router = APIRouter()


class HeadStepRequest(BaseModel):
    model: schema.Text | None = Field(
        None,
        description="a loaded text model's or translator's name (default: the first text model, or the "
        "first translator when 'source' is given)",
    )
    text: schema.Text | None = Field(None, description="a text model's text")
    source: schema.Text | None = Field(None, description="a translator's source text")
    target: schema.Text | None = Field(
        None, description="a translator's target to force (default: its greedy translation)"
    )
    site: Literal["self", "encoder", "decoder self", "cross"] = Field(
        "self", description="self (a text model); encoder, decoder self or cross (a translator)"
    )
    layer: int = Field(1, ge=1, description="the layer (1-based)")
    head: int = Field(1, ge=1, description="the head (1-based)")
    query: int = Field(1, ge=1, description="the query position (1-based): a piece of the text, source or target")


def _bounded(what: str, text: str, limit: int) -> str:
    text = text.strip()
    if not text:
        raise ApiError(400, f"the {what} is empty: type or paste a sentence")
    if len(text) > limit:
        raise ApiError(413, f"the {what} has {len(text)} characters; the limit is {limit}")
    return text


def _translator_numbers(ex, name: str, tr, req: HeadStepRequest) -> tuple[str, str | None, int]:
    """The source and target, bounded; the most keys the answer can have."""
    o = ex.options
    source = _bounded("source", req.source, o.max_text_chars)
    n_src = len(tr.encode_sources([source])[0])  # refuses more than the model's own maximum (400)
    if n_src > o.max_tokens:
        raise ApiError(413, f"the source has {n_src} subword tokens; the limit is {o.max_tokens} (--max-tokens)")
    target, n_tgt = None, getattr(tr, "max_len", o.max_tokens)
    if req.target is not None:
        target = _bounded("target", req.target, o.max_target_chars)
        n_tgt, model_max = len(tr.tokenizer.encode(target)), getattr(tr, "max_len", o.max_tokens)
        if not n_tgt:
            raise no_readable_word("the target")
        if n_tgt > min(o.max_tokens, model_max):
            raise ApiError(
                413,
                f"the target has {n_tgt} subword tokens; the limit is {min(o.max_tokens, model_max)} "
                f"({name} writes at most {model_max}; --max-tokens {o.max_tokens})",
            )
        rows = n_src if req.site == "encoder" else n_tgt
        if req.query > rows:
            raise ApiError(422, f"query must be in 1..{rows} (the {req.site} rows), got {req.query}")
    return source, target, max(n_src, n_tgt)


@router.post("/api/head-step", response_model=schema.HeadStep, responses=ERRORS)
async def head_step_route(req: HeadStepRequest, request: Request):
    """One head at one query, step by step: q, K, V, the mask, the scale, the model's own row, the head's
    output and its columns in the concatenation (the page's step-through view)."""
    ex = explorer(request)
    o = ex.options
    translators, texts = ex.models.translators, ex.models.self_attention
    is_translator = req.model in translators if req.model is not None else req.source is not None
    if is_translator:
        name, tr = pick(translators, req.model, "translation")
        if req.source is None:
            raise ApiError(422, f"{name} is a translator: give 'source' (and optionally 'target'), not 'text'")
        source, target, keys = _translator_numbers(ex, name, tr, req)
        config = getattr(getattr(tr, "model", None), "config", None)  # a CTranslate2 engine's has none
        width = getattr(config, "d_model", None) or 2 * getattr(config, "enc_dim", 512)
        fields = dict(source=source, target=target)
    else:
        name, sa = pick(texts, req.model, "self-attention")
        if req.text is None:
            raise ApiError(422, f"{name} is a text model: give 'text'")
        if req.site != "self":
            raise ApiError(422, f"{name} is a text model: its attention site is 'self', not {req.site!r}")
        for what, value, top in (("layer", req.layer, sa.num_layers), ("head", req.head, sa.num_heads)):
            if value > top:
                raise ApiError(422, f"{what} must be in 1..{top} ({name} has {top}), got {value}")
        ids = _checked_ids(ex, name, sa, req.text)
        if req.query > len(ids):
            raise ApiError(422, f"query must be in 1..{len(ids)} (the text has {len(ids)} tokens), got {req.query}")
        keys, width, tr = len(ids), sa.dimensions()[1], sa
        fields = dict(text=req.text.strip())
    count = head_step_numbers(keys, width)  # d_h ≤ the model's width: a bound before any tensor
    if count > o.max_answer_numbers:
        raise ApiError(
            413,
            f"this step holds up to {count} numbers; the limit of one answer is {o.max_answer_numbers} "
            "(--max-answer-numbers): shorten the text",
        )

    def work() -> dict:
        try:
            step = head_step(tr, site=req.site, layer=req.layer, head=req.head, query=req.query, label=name, **fields)
        except InputError as exc:
            raise ApiError(422, str(exc)) from None
        return step.to_dict()

    return await run_light(request, work)
