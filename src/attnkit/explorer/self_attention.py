"""The explorer's payloads for encoder-only and decoder-only models (BERT, GPT-2, Llama and kin): what
bertviz's head view and model view show, and a decoder-only model's continuation with its attributions.

- :func:`self_attention_payload` (``/api/self-attention``): a text's pieces, every layer's head mean
  ``(L, N, N)`` and the attention rollout ``(N, N)``; the per-head maps of one layer at a time
  (``layer``, 1-based like every layer and head number in the payload), so a long text's ``L · H · N²`` numbers are never sent, nor held, at once (the model runs
  once per asked layer and keeps only that layer's maps, :meth:`attnkit.hf.self_attention.SelfAttentionModel.stream`).
  ``all_layers`` (the notebook view and the exported page, no server) puts every layer in one payload.
- :func:`repeated_payload` (``/api/repeated``, ``attnkit explain --repeated N --plot page.html`` and the
  notebook's view of a :class:`~attnkit.service.RepeatedAnalysis`): the same payload for random tokens
  repeated twice, every layer and head at once, with ``repeated``: each head's prefix-matching and
  previous-token scores, the best induction head and the cells of the induction stripe and of the
  previous-token diagonal, which the page outlines on every map.
- :func:`generation_payload` (``/api/generate``): a greedy or sampled continuation of the prompt, or the
  text itself read with teacher forcing (``mode``), as a translation payload
  (:class:`~attnkit.explorer.schema.Translation`: source = the model's inputs, target = the attributed
  pieces) whose matrix is the last layer's head-mean attention of the positions that predicted each
  token, whose ``attribution`` is the asked method's (:func:`attnkit.attribution.explain_generation`,
  contrastive with ``contrast``), with each token's ``step_scores`` (probability, entropy).
"""

from __future__ import annotations

import torch

from ..alignment import attention_rollout, words_from_pieces
from ..service import GenerationAnalysis, TranslationAnalysis
from .payload import AnswerTooLarge, _rows, attribution_fields, translation_answer, word_links

__all__ = [
    "generation_answer",
    "generation_payload",
    "repeated_payload",
    "repeated_tokens_payload",
    "self_attention_numbers",
    "self_attention_payload",
]

ROLLOUT_RULE = "R = Â_L ⋯ Â_1 with Â_l = rownorm(A_l + I) (A_l = layer l's head mean, I for the residual)"


def self_attention_numbers(num_layers: int, num_heads: int, n: int, layer: int | None, all_layers: bool) -> int:
    """How many numbers an answer holds: the head means and the rollout ``(L + 1) · n²`` without
    ``layer``; one layer's heads ``H · n²`` with it; every layer's heads too with ``all_layers``."""
    if layer is not None:
        return num_heads * n * n
    return (num_layers + 1) * n * n + (num_layers * num_heads * n * n if all_layers else 0)


def self_attention_payload(
    sa,
    text: str,
    *,
    model: str = "",
    layer: int | None = None,
    all_layers: bool = False,
    max_numbers: int | None = None,
    ids: list[int] | None = None,
) -> dict:
    """The :class:`~attnkit.explorer.schema.SelfAttention` payload of ``text`` (see the module docstring).
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
    out = {
        "model": model,
        "kind": sa.family,
        "text": text,
        "causal": sa.causal,
        "pieces": pieces,
        "words": words_from_pieces(pieces),
        "num_layers": L,
        "num_heads": H,
        "kv_groups": sa.kv_groups(),
        "head_mean": None,
        "rollout": None,
        "rollout_rule": ROLLOUT_RULE,
        "layers": [],
    }
    if layer is not None:
        got = {}
        sa.stream(ids, lambda i, w: got.__setitem__(i, w.cpu()), layers=[layer])
        out["layers"] = [{"layer": layer, "heads": _rows(got[layer], 4)}]
        return out
    means: dict[int, torch.Tensor] = {}
    heads: dict[int, torch.Tensor] = {}

    def keep(i: int, w: torch.Tensor) -> None:  # i: 1-based; w: (H, n, n); only its mean is kept unless all_layers
        means[i] = w.mean(0).cpu()
        if all_layers:
            heads[i] = w.cpu()

    sa.stream(ids, keep)
    mean = torch.stack([means[i] for i in range(1, L + 1)])  # (L, n, n)
    out["head_mean"] = _rows(mean, 4)
    out["rollout"] = _rows(attention_rollout(mean))
    if all_layers:
        out["layers"] = [{"layer": i, "heads": _rows(heads[i], 4)} for i in range(1, L + 1)]
    return out


def generation_answer(analysis: GenerationAnalysis) -> dict:
    """A decoder-only model's continuation (:class:`~attnkit.service.GenerationAnalysis`) as a
    :class:`~attnkit.explorer.schema.Translation` (see the module docstring): the context as the source, the
    continuation as the target, the last layer's head-mean attention as the matrix, the method's view in
    ``attribution``."""
    att = analysis.attention or analysis.attribution  # no attention: a model attnkit cannot read it from
    out = translation_answer(
        TranslationAnalysis(
            model=analysis.model,
            kind=analysis.kind,
            request=None,
            source=analysis.text,
            translation=analysis.continuation,
            source_pieces=att.source,
            target_pieces=att.target,
            beam=1,
            forced=analysis.mode == "forced",
        )
    )
    has = analysis.attention is not None
    out.update(src_lang="context", tgt_lang="continuation", has_attention=has, attention=_rows(att.scores))
    out["decoding"] = {"mode": analysis.mode, "seed": analysis.seed}
    out["step_scores"] = analysis.step_scores
    words = att.word_scores()[2]  # (Tw, Sw)
    out["words"]["attention"] = _rows(words)
    out["words"]["links"] = word_links(words)
    if analysis.attribution is not None:
        out["attribution"] = attribution_fields(analysis.attribution)
    return out


def generation_payload(
    sa,
    text: str,
    *,
    model: str = "",
    max_new_tokens: int = 20,
    method: str | None = None,
    progress=None,
    steps: int | None = None,
    **fields,
) -> dict:
    """:func:`attnkit.service.analyse` of a :class:`~attnkit.service.GenerationRequest` on the decoder-only
    model ``sa``, as :func:`generation_answer` builds it (what the light lane and ``--html`` exports call);
    ``fields``: the request's other fields (``mode``, ``temperature``, ``top_k``, ``seed``, ``contrast``)."""
    from ..service import GenerationRequest, Model, analyse, text_model

    m = sa if isinstance(sa, Model) else text_model(model, sa)
    request = GenerationRequest(text, max_new_tokens=max_new_tokens, method=method, steps=steps, **fields)
    return generation_answer(analyse(m, request, progress))


def repeated_payload(analysis, *, kv_groups: list[int] | None = None) -> dict:
    """The :class:`~attnkit.explorer.schema.SelfAttention` payload of a
    :class:`~attnkit.service.RepeatedAnalysis` (random tokens repeated twice): every layer's per-head maps,
    the head means and the rollout, and ``repeated`` (the scores, the best head and the marked cells, all
    numbered from 1), which the page draws as the heads grid with the stripe outlined."""
    att = analysis.attention  # (L, H, 2N, 2N)
    mean = att.mean(1)  # (L, 2N, 2N)
    L, H = att.shape[:2]
    layer, head, score = analysis.best
    return {
        "model": analysis.model,
        "kind": analysis.kind,
        "text": "".join(analysis.pieces).replace("\u2581", " ").strip(),
        "causal": True,
        "pieces": list(analysis.pieces),
        "words": words_from_pieces(analysis.pieces),
        "num_layers": L,
        "num_heads": H,
        "kv_groups": kv_groups,
        "head_mean": _rows(mean, 4),
        "rollout": _rows(attention_rollout(mean)),
        "rollout_rule": ROLLOUT_RULE,
        "layers": [{"layer": li + 1, "heads": _rows(att[li], 4)} for li in range(L)],
        "repeated": {
            "length": analysis.length,
            "seed": analysis.seed,
            "best": {"layer": layer, "head": head, "prefix_matching": round(score, 5)},
            "heads": [
                {
                    **h,
                    "prefix_matching": round(h["prefix_matching"], 5),
                    "previous_token": round(h["previous_token"], 5),
                }
                for h in analysis.heads()
            ],
            "stripe": analysis.stripe(),
            "previous_diagonal": analysis.previous(),
        },
    }


def repeated_tokens_payload(sa, *, model: str = "", length: int = 20, seed: int = 0) -> dict:
    """:func:`attnkit.service.analyse` of a :class:`~attnkit.service.RepeatedRequest` on the decoder-only
    model ``sa`` (what ``/api/repeated`` runs in the light lane), as :func:`repeated_payload` builds it."""
    from ..service import Model, RepeatedRequest, analyse, text_model

    m = sa if isinstance(sa, Model) else text_model(model, sa)
    kv = m.impl.kv_groups() if hasattr(m.impl, "kv_groups") else None
    return repeated_payload(analyse(m, RepeatedRequest(length, seed=seed)), kv_groups=kv)
