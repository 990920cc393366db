"""The explorer's answers for encoder-only and decoder-only models (BERT, GPT-2, Llama and kin): what
bertviz's head view and model view show, and a decoder-only model's continuation with its attributions,
each built as the schema's own object (:mod:`attnkit.explorer.schema`).

- :func:`self_attention_answer` (``/api/self-attention``): a text's pieces, every layer's head mean
  ``(L, N, N)`` and the attention rollout ``(N, N)``; the per-head maps of one layer at a time
  (``layer``, 1-based like every layer and head number in the payload), so a long text's ``L · H · N²`` numbers are never sent, nor held, at once (the model runs
  once per asked layer and keeps only that layer's maps, :meth:`attnkit.hf.self_attention.SelfAttentionModel.stream`).
  ``all_layers`` (the notebook view and the exported page, no server) puts every layer in one payload.
- :func:`repeated_answer` (``/api/repeated``, ``attnkit explain --repeated N --plot page.html`` and the
  notebook's view of a :class:`~attnkit.service.RepeatedAnalysis`): the same answer for random tokens
  repeated twice, every layer and head at once, with ``repeated``: each head's prefix-matching and
  previous-token scores, the best induction head and the cells of the induction stripe and of the
  previous-token diagonal, which the page outlines on every map.
- :func:`continuation_answer` (``/api/generate``): a greedy or sampled continuation of the prompt, or the
  text itself read with teacher forcing (``mode``), as a :class:`~attnkit.explorer.schema.Continuation`:
  the context's pieces, the written pieces, the last layer's head-mean attention of the positions that
  predicted each written token, the asked method's ``attribution``
  (:func:`attnkit.attribution.explain_generation`, contrastive with ``contrast``), how the tokens were made
  (``decoding``) and each token's ``step_scores`` (probability, entropy).
"""

from __future__ import annotations

import torch

from ..alignment import attention_rollout, words_from_pieces
from ..service import GenerationAnalysis
from . import schema
from .payload import (
    WORD_LINKS_RULE,
    WORD_RULE,
    AnswerTooLarge,
    _rows,
    attribution_fields,
    checkpoint_fields,
    word_links,
)

__all__ = [
    "continuation_answer",
    "generate_answer",
    "repeated_answer",
    "repeated_tokens_answer",
    "self_attention_answer",
    "self_attention_numbers",
]

ROLLOUT_RULE = "R = Â_L ⋯ Â_1 with Â_l = rownorm(A_l + I) (A_l = layer l's head mean, I for the residual)"


def self_attention_numbers(num_layers: int, num_heads: int, n: int, layer: int | None, all_layers: bool) -> int:
    """How many numbers an answer holds: the head means and the rollout ``(L + 1) · n²`` without
    ``layer``; one layer's heads ``H · n²`` with it; every layer's heads too with ``all_layers``."""
    if layer is not None:
        return num_heads * n * n
    return (num_layers + 1) * n * n + (num_layers * num_heads * n * n if all_layers else 0)


def self_attention_answer(
    sa,
    text: str,
    *,
    model: str = "",
    layer: int | None = None,
    all_layers: bool = False,
    max_numbers: int | None = None,
    ids: list[int] | None = None,
) -> schema.SelfAttention:
    """The :class:`~attnkit.explorer.schema.SelfAttention` answer of ``text`` (see the module docstring).
    ``layer`` (1-based, ``1..L``): only that layer's per-head maps (``head_mean`` and ``rollout`` null);
    ``max_numbers``: refuse (:class:`~attnkit.explorer.payload.AnswerTooLarge`) before any map is built
    when the answer would hold more numbers; ``ids``: the token ids to read instead of ``text``'s."""
    if ids is None:
        ids, pieces = sa.encode(text)
    else:
        pieces = sa.pieces_of(ids)
    n, L, H = len(ids), sa.num_layers, sa.num_heads
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= L):
        raise ValueError(f"layer must be in 1..{L} (this model has {L} layers), got {layer!r}")
    count = self_attention_numbers(L, H, n, layer, all_layers)
    if max_numbers is not None and count > max_numbers:
        raise AnswerTooLarge(
            f"this text's maps hold {count} numbers ({n} tokens); the limit of one answer is {max_numbers} "
            "(--max-answer-numbers): shorten the text"
            + (f' or ask for one layer ("layer": 1..{L})' if layer is None else "")
        )
    fields = dict(
        model=model,
        kind=sa.family,
        text=text,
        causal=sa.causal,
        pieces=pieces,
        words=words_from_pieces(pieces),
        num_layers=L,
        num_heads=H,
        kv_groups=sa.kv_groups(),
        rollout_rule=ROLLOUT_RULE,
    )
    if layer is not None:
        got = {}
        sa.stream(ids, lambda i, w: got.__setitem__(i, w.cpu()), layers=[layer])
        layers = [schema.SelfAttentionLayer(layer=layer, heads=_rows(got[layer], 4))]
        return schema.SelfAttention(**fields, head_mean=None, rollout=None, layers=layers)
    means: dict[int, torch.Tensor] = {}
    heads: dict[int, torch.Tensor] = {}

    def keep(i: int, w: torch.Tensor) -> None:  # i: 1-based; w: (H, n, n); only its mean is kept unless all_layers
        means[i] = w.mean(0).cpu()
        if all_layers:
            heads[i] = w.cpu()

    sa.stream(ids, keep)
    mean = torch.stack([means[i] for i in range(1, L + 1)])  # (L, n, n)
    return schema.SelfAttention(
        **fields,
        head_mean=_rows(mean, 4),
        rollout=_rows(attention_rollout(mean)),
        layers=[schema.SelfAttentionLayer(layer=i, heads=_rows(heads[i], 4)) for i in sorted(heads)],
    )


def continuation_answer(analysis: GenerationAnalysis) -> schema.Continuation:
    """A decoder-only model's continuation (:class:`~attnkit.service.GenerationAnalysis`) as a
    :class:`~attnkit.explorer.schema.Continuation` (see the module docstring): the context's pieces as the
    columns, the written pieces as the rows, the last layer's head-mean attention as the matrix (its words
    the same rule's as a translation's), the method's view in ``attribution``, with a training run's
    checkpoint of the model it was made with."""
    seen = analysis.attention  # None: a model whose attention attnkit cannot read (a gradient method was asked)
    att = seen if seen is not None else analysis.attribution  # the pieces: the same rows and columns either way
    words = seen.word_scores()[2] if seen is not None else None  # (Tw, Sw)
    return schema.Continuation(
        model=analysis.model,
        kind=analysis.kind,
        context=analysis.text,
        written=analysis.continuation,
        context_pieces=list(att.source),
        written_pieces=list(att.target),
        has_attention=seen is not None,
        attention=_rows(seen.scores) if seen is not None else None,
        words=schema.WordView(
            source=words_from_pieces(att.source),
            target=words_from_pieces(att.target),
            attention=_rows(words) if words is not None else None,
            rule=WORD_RULE,
            links=word_links(words) if words is not None else None,
            links_rule=WORD_LINKS_RULE,
        ),
        attribution=attribution_fields(analysis.attribution) if analysis.attribution is not None else None,
        decoding=schema.Decoding(mode=analysis.mode, seed=analysis.seed),
        step_scores=analysis.step_scores,
        **checkpoint_fields(analysis.spec),
    )


def generate_answer(
    sa,
    text: str,
    *,
    model: str = "",
    max_new_tokens: int = 20,
    method: str | None = None,
    progress=None,
    steps: int | None = None,
    **fields,
) -> schema.Continuation:
    """:func:`attnkit.service.analyse` of a :class:`~attnkit.service.GenerationRequest` on the decoder-only
    model ``sa``, as :func:`continuation_answer` builds it (what the light lane calls); ``fields``: the
    request's other fields (``mode``, ``temperature``, ``top_k``, ``seed``, ``contrast``)."""
    from ..service import GenerationRequest, Model, analyse, text_model

    m = sa if isinstance(sa, Model) else text_model(model, sa)
    request = GenerationRequest(text, max_new_tokens=max_new_tokens, method=method, steps=steps, **fields)
    return continuation_answer(analyse(m, request, progress))


def repeated_answer(analysis, *, kv_groups: list[int] | None = None) -> schema.SelfAttention:
    """The :class:`~attnkit.explorer.schema.SelfAttention` answer of a
    :class:`~attnkit.service.RepeatedAnalysis` (random tokens repeated twice): every layer's per-head maps,
    the head means and the rollout, and ``repeated`` (the scores, the best head and the marked cells, all
    numbered from 1), which the page draws as the heads grid with the stripe outlined."""
    att = analysis.attention  # (L, H, 2N, 2N)
    mean = att.mean(1)  # (L, 2N, 2N)
    L, H = att.shape[:2]
    layer, head, score = analysis.best
    return schema.SelfAttention(
        model=analysis.model,
        kind=analysis.kind,
        text="".join(analysis.pieces).replace("\u2581", " ").strip(),
        causal=True,
        pieces=list(analysis.pieces),
        words=words_from_pieces(analysis.pieces),
        num_layers=L,
        num_heads=H,
        kv_groups=kv_groups,
        head_mean=_rows(mean, 4),
        rollout=_rows(attention_rollout(mean)),
        rollout_rule=ROLLOUT_RULE,
        layers=[schema.SelfAttentionLayer(layer=li + 1, heads=_rows(att[li], 4)) for li in range(L)],
        repeated=schema.Repeated(
            length=analysis.length,
            seed=analysis.seed,
            best=schema.RepeatedBest(layer=layer, head=head, prefix_matching=round(score, 5)),
            heads=[
                schema.RepeatedHead(
                    layer=h["layer"],
                    head=h["head"],
                    prefix_matching=round(h["prefix_matching"], 5),
                    previous_token=round(h["previous_token"], 5),
                )
                for h in analysis.heads()
            ],
            stripe=analysis.stripe(),
            previous_diagonal=analysis.previous(),
        ),
    )


def repeated_tokens_answer(sa, *, model: str = "", length: int = 20, seed: int = 0) -> schema.SelfAttention:
    """:func:`attnkit.service.analyse` of a :class:`~attnkit.service.RepeatedRequest` on the decoder-only
    model ``sa`` (what ``/api/repeated`` runs in the light lane), as :func:`repeated_answer` builds it."""
    from ..service import Model, RepeatedRequest, analyse, text_model

    m = sa if isinstance(sa, Model) else text_model(model, sa)
    kv = m.impl.kv_groups() if hasattr(m.impl, "kv_groups") else None
    return repeated_answer(analyse(m, RepeatedRequest(length, seed=seed)), kv_groups=kv)
