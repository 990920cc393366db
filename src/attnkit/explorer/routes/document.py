"""``POST /api/translate-document``: one HTML, XML, Markdown or XLIFF document translated with one model, its inline
tags moved across by the model's word alignment (:mod:`attnkit.tasks.translation.markup`).

Bounded as ``/api/translate`` is before a tensor is built: the document's characters (``--max-text-chars``,
all blocks together, so the work is that of one long text), every HTML, XML or Markdown block's subword
tokens (``--max-tokens``)
and the beam (at most ``--heavy-beam``: a document runs in the server's fast lane). Markup the parser
cannot take (malformed XML) is a 400 naming its line.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ...tasks.translation import Translator
from ...tasks.translation.markup import FORMATS, default_aligner, split_document, translate_document
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..state import explorer, run_light, served_model

__all__ = ["TranslateDocumentRequest", "router"]

router = APIRouter()


class TranslateDocumentRequest(BaseModel):
    document: schema.Text = Field(description="the document, in the model's source language")
    format: str = Field(description="html, xml, markdown or xliff")
    model: schema.Text | None = Field(None, description="a loaded translation model's name (default: the first)")
    beam: int = Field(5, ge=1, description="beam size (1 = greedy), at most --heavy-beam")
    method: str | None = Field(
        None,
        description="how the tags are moved: attention, shift or guided, as `attnkit align --method` reads the "
        "model (default: its guided head when it has one, else attention)",
    )


def _translate(tr: Translator, req: TranslateDocumentRequest, max_tokens: int) -> dict:
    aligner = default_aligner(tr, req.method)
    pieces = [] if req.format == "xliff" else split_document(req.document, req.format)[0]
    for p in pieces:  # the bounds first: every block's tokens (an XLIFF source longer is cut at sentence ends)
        raw = getattr(p, "raw", None)
        if raw and raw.strip():
            n = len(tr.encode_sources([raw], truncate=True)[0])
            if n > max_tokens:
                raise ApiError(413, f"a block has {n} subword tokens; the limit is {max_tokens} (--max-tokens)")
    out = translate_document(tr, req.document, req.format, aligner=aligner, beam_size=req.beam)
    return {"document": out.text, "blocks": out.blocks, "notes": out.notes, "aligned_by": aligner.describe()}


@router.post("/api/translate-document", response_model=schema.TranslatedDocument, responses=ERRORS)
async def translate_document_route(req: TranslateDocumentRequest, request: Request):
    """Translate a document with one loaded model, its inline tags moved across by the word alignment."""
    ex = explorer(request)
    o = ex.options
    if req.format not in FORMATS:
        raise ApiError(400, f"format must be one of {', '.join(FORMATS)}, got {req.format!r}")
    if req.method is not None and req.method not in ("attention", "shift", "guided"):
        raise ApiError(400, f"method must be attention, shift or guided, got {req.method!r}")
    if not req.document.strip():
        raise ApiError(400, "the document is empty: paste a page to translate")
    if len(req.document) > o.max_text_chars:
        raise ApiError(
            413, f"the document has {len(req.document)} characters; the limit is {o.max_text_chars} (--max-text-chars)"
        )
    if req.beam > o.heavy_beam:
        raise ApiError(413, f"beam {req.beam} is over the limit of {o.heavy_beam} for a document (--heavy-beam)")
    name, tr, _ = await served_model(request, ex.models.translators, req.model, "translation")
    if not isinstance(tr, Translator):
        raise ApiError(400, f"{name} is not an attnkit PyTorch translator: documents need its attention to move tags")
    answer = await run_light(request, _translate, tr, req, o.max_tokens)
    return {"model": name, "format": req.format, **answer}
