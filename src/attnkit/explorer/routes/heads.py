"""``POST /api/ablate``, ``/api/patching`` and ``/api/head-why``: head interventions on the page
(:mod:`attnkit.explorer.head_work` does the work).

- ``/api/ablate``: the heads given (``site``, ``layer``, ``head``, 1-based) zero- or mean-ablated (an
  RNNsearch's one attention as cross 1.1: its context zeroed, or its weights uniform; a CTranslate2 engine
  is refused, it has no hooks); a translator's clean and ablated translation and forced log-likelihood change (Michel et al. 2019; Voita et
  al. 2019), or a language model's clean and ablated greedy continuation and next-token top-k.
- ``/api/patching``: activation patching of every head of a language model (attnkit's own, or a Hugging Face
  decoder-only one) and path patching into its best induction head on ``length`` random tokens repeated twice (Wang et al. 2022), as ``attnkit heads
  --patching`` prints them.
- ``/api/head-why``: one head's role scores and its QK decomposition at a query (Elhage et al. 2021).

Every bound is checked before a tensor is built: the characters and subword tokens (``--max-text-chars``,
``--max-tokens``, the model's own maximum), the number of heads (at most :data:`MAX_HEADS`), each head against the
model, the beam (at most ``--heavy-beam``: the work is three searches, kept in the fast lane), the new tokens
(``--max-new-tokens``) and the repeated length (as ``/api/repeated`` allows). The work then runs in the fast lane:
an ablation is three searches and two forced passes; patching ``2 + L·H`` forward passes and ``3 (2 + l·H)`` for
the paths into a head of layer ``l + 1`` (about a second for the 2-layer model at length
20, the best induction head found once per model and kept).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ...errors import InputError
from .. import schema, schema_heads
from ..api_errors import ERRORS, ApiError
from ..head_work import ablation_answer, head_why_answer, patching_answer, patching_subject
from ..state import explorer, pick, run_light
from .head_step import _bounded
from .self_attention import _checked_ids

__all__ = ["MAX_HEADS", "AblateRequest", "HeadWhyRequest", "PatchingRequest", "router"]

router = APIRouter()
#: the most heads one /api/ablate request may ablate together
MAX_HEADS = 32
#: the most next-token candidates an ablation lists
MAX_TOP = 20
Site = Literal["self", "encoder", "decoder self", "cross"]


class HeadRef(BaseModel):
    site: Site = Field("self", description="self (a text model); encoder, decoder self or cross (a translator)")
    layer: int = Field(ge=1, le=10_000, description="the layer (1-based)")
    head: int = Field(ge=1, le=10_000, description="the head (1-based)")


class AblateRequest(BaseModel):
    model: schema.Text | None = Field(
        None,
        description="a loaded translator's or text model's name (default: the first translator when "
        "'source' is given, else the first text model)",
    )
    source: schema.Text | None = Field(None, description="a translator's source text")
    reference: schema.Text | None = Field(
        None, description="a translator: the target whose log-likelihood is read (default: the clean translation)"
    )
    text: schema.Text | None = Field(None, description="a language model's prompt")
    heads: list[HeadRef] = Field(min_length=1, max_length=MAX_HEADS, description="the heads to ablate together")
    mode: Literal["zero", "mean"] = Field("zero", description="zero, or mean: each head's mean over this input")
    beam: int = Field(1, ge=1, description="a translator's beam (at most --heavy-beam)")
    max_new_tokens: int | None = Field(
        None, ge=1, description="a language model: tokens to write, at most --max-new-tokens (default 10 or that)"
    )
    top_k: int = Field(5, ge=1, le=MAX_TOP, description="a language model: next-token candidates to list")


class PatchingRequest(BaseModel):
    model: schema.Text | None = Field(None, description="a loaded attnkit language model's name (default: the first)")
    length: int = Field(20, ge=2, description="N: random tokens, then the same N again (as /api/repeated allows)")
    seed: int = Field(0, ge=0, lt=2**31, description="the random tokens' seed")
    direction: Literal["noise", "denoise"] = Field(
        "noise", description="noise: corrupted heads into the clean run (the default of attnkit heads --patching)"
    )


class HeadWhyRequest(BaseModel):
    model: schema.Text | None = Field(None, description="a loaded text model's name (default: the first)")
    text: schema.Text = Field(description="the text whose query is decomposed")
    layer: int = Field(ge=1, le=10_000, description="the layer (1-based)")
    head: int = Field(ge=1, le=10_000, description="the head (1-based)")
    query: int | None = Field(None, ge=1, description="the query position (1-based, <s> included; default the last)")


def _unique(heads: list[HeadRef]) -> list[tuple[str, int, int]]:
    return list(dict.fromkeys((h.site, h.layer, h.head) for h in heads))


def _check_heads(name: str, heads, sites: dict, text_model: bool) -> None:
    """Each head's site, layer and head against the model's attention sites (``attention_sites``)."""
    from ..head_work import SITES

    for site, layer, head in heads:
        if text_model and site != "self":
            raise ApiError(422, f"{name} is a text model: its heads' site is 'self', not {site!r}")
        if not text_model and site == "self":
            raise ApiError(422, f"{name} is a translator: a head's site is encoder, decoder self or cross")
        layers = sorted(lay for s, lay in sites if s == SITES[site])
        if not 1 <= layer <= len(layers):
            raise ApiError(422, f"layer must be in 1..{len(layers)} for {site} ({name}), got {layer}")
        top = sites[SITES[site], layer - 1].n_heads
        if not 1 <= head <= top:
            raise ApiError(422, f"head must be in 1..{top} for {site} layer {layer} ({name}), got {head}")


def _sites(name: str, model) -> dict:
    from ...attribution.interventions import attention_sites

    try:
        return attention_sites(model)
    except TypeError:
        raise ApiError(
            422,
            f"{name}'s heads cannot be ablated here: an attnkit Transformer (PyTorch engine), attnkit's "
            "language models and the Hugging Face models attnkit reads can",
        ) from None


async def _run(request: Request, fn, *args, **kwargs):
    def work():
        try:
            return fn(*args, **kwargs)
        except (InputError, ValueError) as exc:
            raise ApiError(422, str(exc)) from None

    return await run_light(request, work)


@router.post("/api/ablate", response_model=schema_heads.Ablation, responses=ERRORS)
async def ablate(req: AblateRequest, request: Request):
    """Ablate heads together and answer what the model says clean and ablated: a translator's translation and
    forced log-likelihood, or a language model's continuation, next-token top-k and forced log-likelihood."""
    ex = explorer(request)
    o = ex.options
    translators = ex.models.translators
    is_translator = req.model in translators if req.model is not None else req.source is not None
    heads = _unique(req.heads)
    if is_translator:
        from ...attribution.translator_ablation import translator_model_kind

        name, tr = pick(translators, req.model, "translation")
        if req.source is None:
            raise ApiError(422, f"{name} is a translator: give 'source' (and optionally 'reference'), not 'text'")
        try:
            kind = translator_model_kind(tr)
        except TypeError as exc:
            raise ApiError(422, f"{name}'s attention cannot be ablated here: {exc}") from None
        if req.beam > o.heavy_beam:
            raise ApiError(413, f"beam {req.beam} is over the limit of {o.heavy_beam} for an ablation (--heavy-beam)")
        source = _bounded("source", req.source, o.max_text_chars)
        n_src = len(tr.encode_sources([source])[0])  # refuses more than the model's own maximum (400)
        if n_src > o.max_tokens:
            raise ApiError(413, f"the source has {n_src} subword tokens; the limit is {o.max_tokens} (--max-tokens)")
        reference = None
        if req.reference is not None:
            reference = _bounded("reference", req.reference, o.max_target_chars)
            max_len = getattr(tr.model.config, "max_len", None)
            top = o.max_tokens if max_len is None else min(o.max_tokens, max_len - 1)
            n_ref = len(tr.tokenizer.encode(reference))
            if not n_ref:
                raise ApiError(422, "the reference has no word the model can read")
            if n_ref > top:
                raise ApiError(413, f"the reference has {n_ref} subword tokens; the limit is {top}")
        if kind == "rnnsearch":  # one additive attention, no heads: ablated whole
            if heads != [("cross", 1, 1)]:
                raise ApiError(
                    422,
                    f"{name} is an RNNsearch: its one attention is ablated whole, give the one head "
                    "{'site': 'cross', 'layer': 1, 'head': 1}",
                )
        else:
            _check_heads(name, heads, _sites(name, tr.model), False)
        kw = dict(source=source, reference=reference, beam=req.beam)
        return await _run(request, ablation_answer, name, "translator", tr, heads, req.mode, **kw)
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    if req.text is None:
        raise ApiError(422, f"{name} is a text model: give 'text'")
    if not sa.can_generate:
        raise ApiError(422, f"{name} does not write text (an encoder-only model): nothing to compare")
    new = min(10, o.max_new_tokens) if req.max_new_tokens is None else req.max_new_tokens
    if new > o.max_new_tokens:
        raise ApiError(413, f"max_new_tokens {new} is over the limit of {o.max_new_tokens} (--max-new-tokens)")
    _checked_ids(ex, name, sa, req.text, extra=new)
    _check_heads(name, heads, _sites(name, sa), True)
    kw = dict(text=req.text.strip(), new_tokens=new, top_k=min(req.top_k, sa.vocab_size))
    return await _run(request, ablation_answer, name, "language model", sa, heads, req.mode, **kw)


@router.post("/api/patching", response_model=schema_heads.Patching, responses=ERRORS)
async def patching(req: PatchingRequest, request: Request):
    """Activation patching of every head and path patching into the best induction head, on random tokens
    repeated twice with the first copy redrawn in the corrupted run (``attnkit heads --patching``): attnkit's
    language models and the Hugging Face decoder-only ones (GPT-2, GPT-NeoX, the Llama-like families)."""
    ex = explorer(request)
    o = ex.options
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")

    def subject():
        try:
            return patching_subject(ex.cache, name, sa)
        except TypeError:
            raise ApiError(
                422,
                f"{name} is not a language model patching reads: attnkit's own, or a Hugging Face decoder-only one",
            ) from None

    _, _, context, _ = await run_light(request, subject)  # the best induction head: found once, kept
    limit = o.max_tokens if context is None else min(o.max_tokens, context)
    if 2 * req.length > limit:
        raise ApiError(
            413,
            f"length {req.length} makes {2 * req.length} tokens; the limit is {limit} (--max-tokens "
            f"{o.max_tokens}; {name} reads at most {context} positions): give a length of at most {limit // 2}",
        )
    return await _run(request, patching_answer, ex.cache, name, sa, req.length, req.seed, req.direction)


@router.post("/api/head-why", response_model=schema_heads.HeadWhy, responses=ERRORS)
async def head_why(req: HeadWhyRequest, request: Request):
    """One head's role scores and, for attnkit's language models, the QK decomposition of its score on the key
    it attends to most from the query (each residual-stream part's share)."""
    ex = explorer(request)
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    for what, value, top in (("layer", req.layer, sa.num_layers), ("head", req.head, sa.num_heads)):
        if value > top:
            raise ApiError(422, f"{what} must be in 1..{top} ({name} has {top}), got {value}")
    ids = _checked_ids(ex, name, sa, req.text)
    if req.query is not None and req.query > len(ids):
        raise ApiError(422, f"query must be in 1..{len(ids)} (the text has {len(ids)} tokens), got {req.query}")
    args = (ex.cache, name, sa, req.text.strip(), req.layer, req.head, req.query)
    return await _run(request, head_why_answer, *args)
