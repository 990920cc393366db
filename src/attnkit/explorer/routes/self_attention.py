"""``POST /api/self-attention`` and ``POST /api/generate``: Hugging Face encoder-only and decoder-only
models (BERT, GPT-2, Llama and kin), JSON in and out like every route.

``/api/self-attention`` answers a text's pieces, every layer's head mean and the rollout; the page then
asks for each layer's per-head maps (``"layer": l``, 1-based: ``1..L``), one answer per layer, so the answer size stays under
``--max-answer-numbers`` and the server holds one layer's maps at a time.
``/api/generate`` writes a greedy or sampled continuation (at most ``--max-new-tokens``; ``"mode":
"sample"`` with ``temperature``, ``top_k``, ``seed``), or reads the text as given (``"mode": "forced"``,
teacher forcing), and attributes each token to the tokens before it
(:mod:`attnkit.attribution.generation`; ``"contrast"``: contrastive, for the gradient methods).
``/api/repeated`` reads ``length`` seeded random tokens repeated twice and answers every layer's and head's
maps with each head's induction scores and the induction stripe's cells (:func:`attnkit.explorer.self_attention.repeated_answer`).
Each answer is the schema's own object (:class:`~attnkit.explorer.schema.SelfAttention`,
:class:`~attnkit.explorer.schema.Continuation`), built by :mod:`attnkit.explorer.self_attention`.

Every bound is checked before a tensor is built: the text's characters (``--max-text-chars``), then its
tokens (``--max-tokens`` and the model's own maximum), the layer, the number of new tokens and the method.
The work is then bounded: one forward pass per layer asked; a continuation's gradient method is one
forward and backward pass per written token (integrated gradients: ``DEFAULT_STEPS`` points each, not
refined). The maps and an attention-attributed continuation run in the server's fast lane; a gradient
method is a heavy job (:mod:`attnkit.explorer.jobs`: a worker process, the queue, ``--job-timeout``).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ...attribution.gradients import DEFAULT_STEPS
from ...data.text import no_readable_word
from ...decoding.continuation import TEMPERATURES
from ...errors import InputError
from ...method_registry import names
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..self_attention import (
    continuation_answer,
    generate_answer,
    repeated_tokens_answer,
    self_attention_answer,
    self_attention_numbers,
)
from ..state import client_of, explorer, pick, run_light
from .translate import JOB_NAME

__all__ = ["GenerateRequest", "RepeatedTokensRequest", "SelfAttentionRequest", "router"]

router = APIRouter()
#: the methods of /api/generate run as heavy jobs: a backward pass per token, value zeroing's replay of a layer
#: per key, ALTI-Logit's traced pass per token
HEAVY_METHODS = names(where="text_rows", heavy=True)


class SelfAttentionRequest(BaseModel):
    text: schema.Text = Field(description="the text to read")
    model: schema.Text | None = Field(None, description="a loaded self-attention model's name (default: the first)")
    layer: int | None = Field(
        None, description="only this layer's per-head maps (1-based: 1..L); without it: the head means and rollout"
    )


class GenerateRequest(BaseModel):
    text: schema.Text = Field(description="the prompt to continue")
    model: schema.Text | None = Field(None, description="a loaded decoder-only model's name (default: the first)")
    max_new_tokens: int | None = Field(
        None, ge=1, description="tokens to write, at most --max-new-tokens (default: 10, or that limit if lower)"
    )
    method: schema.Text | None = Field(
        None, description="an attribution method (see /api/models) whose view fills 'attribution'"
    )
    mode: Literal["greedy", "sample", "forced"] = Field(
        "greedy",
        description="greedy or sample: attribute a continuation of the text; forced: every next token of the text",
    )
    temperature: float | None = Field(
        None, ge=TEMPERATURES[0], le=TEMPERATURES[1], description="sample: divide the logits by this (default 1)"
    )
    top_k: int | None = Field(None, ge=1, description="sample: draw from the k most likely tokens only")
    seed: int | None = Field(
        None, ge=0, lt=2**31, description="sample: the seed (the same seed redraws the same tokens; default: new)"
    )
    contrast: schema.Text | None = Field(
        None, description="a gradient method: explain log p(token) − log p(contrast), one token of the vocabulary"
    )
    job: str | None = Field(None, pattern=JOB_NAME, description="follow the work at /api/progress/{job}")


class RepeatedTokensRequest(BaseModel):
    model: schema.Text | None = Field(None, description="a loaded decoder-only model's name (default: the first)")
    length: int = Field(20, ge=2, description="N: random tokens, then the same N again (2·N positions)")
    seed: int = Field(0, ge=0, lt=2**31, description="the random tokens' seed (the same seed, the same tokens)")


def _checked_ids(ex, name: str, sa, text: str, extra: int = 0) -> list[int]:
    """The text's token ids, within ``--max-text-chars``, ``--max-tokens`` and the model's own maximum."""
    o = ex.options
    text = text.strip()
    if not text:
        raise ApiError(400, "the text is empty: type or paste a sentence")
    if len(text) > o.max_text_chars:
        raise ApiError(413, f"the text has {len(text)} characters; the limit is {o.max_text_chars} (--max-text-chars)")
    ids, _ = sa.encode(text)
    specials = sa.special_ids  # the text model's own: <s>, </s>, <pad>, <unk> of either tokenizer
    if not any(i not in specials for i in ids):  # only the tokenizer's own tokens: nothing of the text to show
        raise no_readable_word()
    limit, model_max = o.max_tokens, sa.max_length()
    if model_max is not None:
        limit = min(limit, model_max - extra)
    if len(ids) > limit:
        raise ApiError(
            413,
            f"the text has {len(ids)} subword tokens; the limit is {limit} "
            f"(--max-tokens {o.max_tokens}" + (f"; {name} reads at most {model_max} positions)" if model_max else ")"),
        )
    return ids


@router.post("/api/self-attention", response_model=schema.SelfAttention, responses=ERRORS)
async def self_attention(req: SelfAttentionRequest, request: Request):
    """An encoder-only or decoder-only model's self-attention over a text: the head means and the rollout,
    or (``"layer"``) one layer's per-head maps."""
    ex = explorer(request)
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    ids = _checked_ids(ex, name, sa, req.text)
    if req.layer is not None and not 1 <= req.layer <= sa.num_layers:
        raise ApiError(422, f"layer must be in 1..{sa.num_layers} ({name} has {sa.num_layers} layers), got {req.layer}")
    count = self_attention_numbers(sa.num_layers, sa.num_heads, len(ids), req.layer, False)
    if count > ex.options.max_answer_numbers:
        raise ApiError(
            413,
            f"this text's maps hold {count} numbers; the limit of one answer is {ex.options.max_answer_numbers} "
            "(--max-answer-numbers): shorten the text",
        )
    return await run_light(request, self_attention_answer, sa, req.text.strip(), model=name, layer=req.layer, ids=ids)


@router.post("/api/repeated", response_model=schema.SelfAttention, responses=ERRORS)
async def repeated(req: RepeatedTokensRequest, request: Request):
    """A decoder-only model's every layer and head on ``length`` random tokens repeated twice (drawn as the
    induction scores draw them, :class:`attnkit.service.RepeatedRequest`), each head's prefix-matching score,
    the best induction head and the induction stripe's cells (Olsson et al. 2022)."""
    ex = explorer(request)
    o = ex.options
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    if not sa.can_generate:
        raise ApiError(422, f"{name} is an encoder-only model: the induction stripe is a causal language model's")
    n, model_max = 2 * req.length, sa.max_length()
    limit = o.max_tokens if model_max is None else min(o.max_tokens, model_max)
    if n > limit:
        raise ApiError(
            413,
            f"length {req.length} makes {n} tokens; the limit is {limit} (--max-tokens {o.max_tokens}"
            + (f"; {name} reads at most {model_max} positions)" if model_max else ")")
            + f": give a length of at most {limit // 2}",
        )
    count = self_attention_numbers(sa.num_layers, sa.num_heads, n, None, True)
    if count > o.max_answer_numbers:
        raise ApiError(
            413,
            f"these maps hold {count} numbers; the limit of one answer is {o.max_answer_numbers} "
            "(--max-answer-numbers): give a smaller length",
        )
    return await run_light(request, repeated_tokens_answer, sa, model=name, length=req.length, seed=req.seed)


@router.post("/api/generate", response_model=schema.Continuation, responses=ERRORS)
async def generate(req: GenerateRequest, request: Request):
    """A decoder-only model's greedy or sampled continuation of a prompt, or the text itself read with
    teacher forcing (``"mode"``), each token attributed to the tokens before it (the last layer's head-mean
    attention, or ``"method"``, contrastive with ``"contrast"``), with its step scores."""
    from ...attribution import UnknownMethodError
    from ...attribution.generation import MAX_FORCED_TOKENS, canonical_generation_method, contrast_token, row_methods
    from ...service import GenerationRequest

    ex = explorer(request)
    o = ex.options
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    if not sa.can_generate:
        raise ApiError(422, f"{name} does not write text (an encoder-only model): ask /api/self-attention")
    forced = req.mode == "forced"
    new = min(10, o.max_new_tokens) if req.max_new_tokens is None else req.max_new_tokens
    if new > o.max_new_tokens and not forced:
        raise ApiError(413, f"max_new_tokens {new} is over the limit of {o.max_new_tokens} (--max-new-tokens)")
    ids = _checked_ids(ex, name, sa, req.text, extra=0 if forced else new)
    if forced and len(ids) > MAX_FORCED_TOKENS:
        raise ApiError(
            413, f"the text has {len(ids)} tokens; a forced text is explained for at most {MAX_FORCED_TOKENS}"
        )
    method = None
    if req.method is not None:
        method = canonical_generation_method(req.method)
        if method not in row_methods():  # the views of one prediction are /api/flow's
            raise UnknownMethodError(f"{name} has no {method} here; it has: {', '.join(row_methods())} (and /api/flow)")
    sampling = {
        k: v for k, v in (("temperature", req.temperature), ("top_k", req.top_k), ("seed", req.seed)) if v is not None
    }
    # integrated gradients at a fixed number of points: the work is bounded up front
    kwargs = dict(
        text=req.text.strip(),
        max_new_tokens=new if not forced else 20,
        method=method,
        steps=DEFAULT_STEPS,
        mode=req.mode,
        contrast=req.contrast,
        **sampling,
    )
    try:
        job = GenerationRequest(**kwargs)  # every field checked before any work: 422 naming the field
        if req.contrast is not None:
            contrast_token(sa, req.contrast)
    except InputError as exc:
        raise ApiError(422, str(exc)) from None
    if method in HEAVY_METHODS:  # a backward pass (or a traced pass) per token: a heavy job, in a worker process
        analysis = await ex.jobs.run(client_of(request), req.job, name, job, request.is_disconnected)
        return await run_in_threadpool(continuation_answer, analysis)  # the lists are built off the event loop
    return await run_light(request, generate_answer, sa, model=name, **kwargs)
