"""``POST /api/translate``: one model's translation of one text, with every attention it has.

Every bound is checked before a tensor is built: characters of the source and of a forced target, then
their subword tokens (the model's own maximum, and ``--max-tokens``), the beam, and the method's name.
Light work (no method, a beam up to ``--heavy-beam``) runs in the server's fast lane, where plain
translations waiting together are searched as one batch (:mod:`attnkit.explorer.lane`); heavy work waits for
a worker process (:mod:`attnkit.explorer.jobs`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ...data.text import no_readable_word
from ...service import Model, ModelKind, TranslationAnalysis, TranslationRequest, analyse, check_method
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..payload import translation_answer
from ..state import client_of, explorer, run_light, run_translation, served, served_model

__all__ = ["JOB_NAME", "TranslateRequest", "router", "translation_reply"]

router = APIRouter()
JOB_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class TranslateRequest(BaseModel):
    text: schema.Text = Field(description="text in the model's source language (one sentence or verse)")
    model: schema.Text | None = Field(None, description="a loaded translation model's name (default: the first)")
    beam: int = Field(5, ge=1, description="beam size (1 = greedy), at most --max-beam")
    heads: bool = Field(False, description="also return every layer's and head's maps, and the rollout")
    layer: int | None = Field(
        None, ge=1, description="with heads: only this layer's maps (1-based), for a sentence over the answer limit"
    )
    target: schema.Text | None = Field(
        None,
        description="target-language text to force instead of translating (e.g. the reference); "
        "gold verses then come with their hand-made links",
    )
    method: schema.Text | None = Field(
        None, description="an attribution method (see /api/models) whose view fills 'attribution'"
    )
    job: str | None = Field(
        None,
        pattern=JOB_NAME,
        description="a name of the caller's choice (a random one) to follow the work at /api/progress/{job}",
    )


def translation_reply(analysis: TranslationAnalysis) -> schema.Translation:
    """The answer to ``/api/translate``: :func:`~attnkit.explorer.payload.translation_answer` of the analysis
    (with a training run's checkpoint, ``checkpoint`` and ``step``, of the model it was made with)."""
    return translation_answer(analysis)


def _light(translator, source: str, *, beam: int, model: Model, ask: TranslationRequest, **made) -> dict:
    """The fast lane's call: ``ask`` analysed (``made``: the batch's search and forced decoding of ``source``,
    when it joined one) and its answer built, in the lane's thread."""
    return translation_reply(analyse(model, ask, search=made.get("result"), forced=made.get("forced")))


def check_beam(beam: int, limit: int) -> None:
    if beam > limit:
        raise ApiError(413, f"beam {beam} is over the limit of {limit} (--max-beam)")


@router.post("/api/translate", response_model=schema.Translation, responses=ERRORS)
async def translate(req: TranslateRequest, request: Request):
    """Translate text with one loaded model; every attention it has, in the payload format."""
    ex = explorer(request)
    o = ex.options
    text = req.text.strip()
    if not text:
        raise ApiError(400, "the text is empty: type or paste a sentence")
    if len(text) > o.max_text_chars:
        raise ApiError(
            413,
            f"the text has {len(text)} characters; the limit is {o.max_text_chars} (--max-text-chars), "
            "and each model reads at most its own number of subword tokens",
        )
    target = None
    if req.target is not None:
        target = req.target.strip()
        if not target:
            raise ApiError(
                400, "the target is empty: give the target-language text to force, or leave it out to translate"
            )
        if len(target) > o.max_target_chars:
            raise ApiError(
                413, f"the target has {len(target)} characters; the limit is {o.max_target_chars} (--max-target-chars)"
            )
    check_beam(req.beam, o.max_beam)
    name, tr, spec = await served_model(request, ex.models.translators, req.model, "translation")
    src_ids = tr.encode_sources([text])[0]  # refuses more than the model's own maximum (400)
    n_src, tgt_ids = len(src_ids), None
    if n_src > o.max_tokens:
        raise ApiError(413, f"the text has {n_src} subword tokens; the limit is {o.max_tokens} (--max-tokens)")
    if target is not None:
        tgt_ids = tr.tokenizer.encode(target)
        n_tgt, model_max = len(tgt_ids), getattr(tr, "max_len", o.max_tokens)
        if not n_tgt:
            raise no_readable_word("the target")
        limit = min(o.max_tokens, model_max)
        if n_tgt > limit:
            raise ApiError(
                413,
                f"the target has {n_tgt} subword tokens; the limit is {limit} "
                f"({name} writes at most {model_max}; --max-tokens {o.max_tokens})",
            )
    method = check_method(tr, req.method, name) if req.method is not None else None
    ask = TranslationRequest(
        text,
        beam=req.beam,
        target=target,
        method=method,
        heads=req.heads,
        layer=req.layer,
        max_numbers=o.max_answer_numbers,
        source_ids=tuple(src_ids),  # tokenised once, here: the analysis reads these ids
        target_ids=None if tgt_ids is None else tuple(tgt_ids),
    )
    if method is not None or req.beam > o.heavy_beam:
        client = client_of(request)
        analysis = await ex.jobs.run(client, req.job, name, ask, request.is_disconnected, spec=spec)
        return await run_in_threadpool(translation_reply, analysis)  # the maps' lists are built off the event loop
    model = served(name, ModelKind.TRANSLATOR, tr, spec)
    if target is not None:  # forced: no search to batch
        return await run_light(request, _light, tr, text, beam=req.beam, model=model, ask=ask)
    return await run_translation(request, _light, tr, text, req.beam, model=model, ask=ask)
