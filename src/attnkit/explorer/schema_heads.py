"""The answers of the head-intervention routes (``/api/ablate``, ``/api/patching``, ``/api/head-why``), as
pydantic models beside :mod:`attnkit.explorer.schema`'s. Layers and heads count from 1."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .schema import _Strict

__all__ = ["AblatedHead", "Ablation", "HeadWhy", "Patching", "QKParts", "TopToken"]


class AblatedHead(_Strict):
    site: Literal["self", "encoder", "decoder self", "cross"]
    layer: int = Field(ge=1)
    head: int = Field(ge=1)


class TopToken(_Strict):
    id: int
    piece: str
    log_prob: float


class Ablation(_Strict):
    """What the model says with the heads ablated beside what it says clean: a translator's translation (and
    the forced log-likelihood of ``reference``, by default the clean translation), or a language model's greedy
    continuation, its next token's top-k and the forced log-likelihood of the clean continuation."""

    model: str
    kind: Literal["translator", "language model"]
    mode: Literal["zero", "mean"] = Field(description="zero: the output set to 0; mean: to its mean over this input")
    heads: list[AblatedHead]
    clean: str = Field(description="the clean translation or continuation")
    ablated: str = Field(description="the same with the heads ablated")
    clean_log_likelihood: float = Field(description="log p(forced tokens) clean, summed over them")
    log_likelihood: float = Field(description="the same with the heads ablated")
    log_likelihood_change: float = Field(description="ablated − clean (negative: the heads helped)")
    source: str | None = None
    reference: str | None = Field(None, description="a translator: the target whose log-likelihood is read")
    reference_given: bool | None = Field(None, description="false when the reference is the clean translation")
    beam: int | None = None
    text: str | None = None
    new_tokens: int | None = None
    clean_top: list[TopToken] | None = Field(None, description="a language model: the next token's top-k, clean")
    top: list[TopToken] | None = Field(None, description="the same with the heads ablated")
    next_token: dict[str, Any] | None = Field(None, description="the clean run's next token (its id and piece)")
    clean_log_prob: float | None = Field(None, description="log p(next token) clean (lm_effect)")
    log_prob: float | None = None
    log_prob_change: float | None = None


class Patching(_Strict):
    """``attnkit heads --patching``'s numbers: every head's activation-patching effect (``heads``, an (L, H)
    map as cells) and path patching from every earlier head into the best induction head via q, k and v
    (``paths``; null when that head is in layer 1)."""

    model: str
    length: int
    seed: int
    direction: Literal["noise", "denoise"]
    target: int = Field(description="the token the clean run should predict by induction")
    induction_head: dict[str, Any]
    heads: dict[str, Any] = Field(description="attnkit.attribution.patching.PatchingMap.to_dict()")
    paths: dict[str, dict[str, Any]] | None = Field(description="per via (q, k, v): PathPatchingMap.to_dict()")


class QKParts(_Strict):
    query: int = Field(ge=1, description="the query position (1-based, over the pieces with <s>)")
    query_piece: str
    key: int = Field(ge=1, description="the key the head attends to most from there")
    key_piece: str
    weight: float
    score: float = Field(description="the pre-softmax score the model used at that key")
    parts: list[dict[str, Any]] = Field(description="each residual-stream part's share of the score (key side)")


class HeadWhy(_Strict):
    """One head's role scores (over the page's role texts, cached per model) and, for attnkit's language models,
    the QK decomposition of its most-attended key at the query (Elhage et al. 2021)."""

    model: str
    layer: int = Field(ge=1)
    head: int = Field(ge=1)
    roles: dict[str, float | None]
    strongest: str | None
    threshold: float
    role_texts: int = Field(description="how many texts the roles were read over")
    qk: QKParts | None
    note: str | None
