"""The answer of a view of one prediction of a decoder-only model (:class:`attnkit.service.LMViewAnalysis`):
:class:`~attnkit.explorer.schema.LMView`, built from the typed analysis once, for ``POST /api/flow`` (and its
streamed form), ``attnkit explain --method logit_lens|direct_logit|routes`` (its ``--json``, its table, its
``--plot``) and the notebook's view. Layers, heads and positions count from 1 here, 0 in the analysis.
"""

from __future__ import annotations

from . import schema

__all__ = ["lm_view_answer", "lm_view_json"]


def _tokens(vocab: dict, ids, logits) -> list[schema.LensToken]:
    return [
        schema.LensToken(id=int(i), piece=vocab.get(int(i), "?"), logit=round(float(v), 5)) for i, v in zip(ids, logits)
    ]


def _lens_rows(vocab: dict, rows) -> list[schema.LensRow]:
    return [schema.LensRow(layer=r.layer, top=_tokens(vocab, r.top, r.logits), rank=r.rank) for r in rows]


def lm_view_answer(analysis) -> schema.LMView:
    """``analysis`` (an :class:`~attnkit.service.LMViewAnalysis`) as the view's answer: the view asked for
    (``routes``, ``logit_lens`` or ``direct_logit``) and what it is of."""
    vocab = analysis.vocab or {}
    fields: dict = {}
    if analysis.lens is not None:
        fields["lens"] = _lens_rows(vocab, analysis.lens)
    if analysis.dla is not None:
        fields["direct_logit"] = analysis.dla.to_dict()
    if analysis.graph is not None:
        graph = analysis.graph.to_dict()
        graph.pop("lens", None)
        graph.pop("pieces", None)
        fields["graph"] = schema.FlowGraph.model_validate(graph)
        fields["node_lens"] = {str(p + 1): _lens_rows(vocab, rows) for p, rows in (analysis.node_lens or {}).items()}
        fields["attention_rows"] = [
            schema.AttentionRow(
                layer=layer + 1,
                target=t + 1,
                heads=[[round(float(v), 5) for v in row] for row in d["rows"]],
                promotes=[_tokens(vocab, i, v) for i, v in zip(d["promotes"].tolist(), d["promote_logits"].tolist())],
                suppresses=[
                    _tokens(vocab, i, v) for i, v in zip(d["suppresses"].tolist(), d["suppress_logits"].tolist())
                ],
            )
            for (layer, t), d in sorted((analysis.attention_rows or {}).items())
        ]
    return schema.LMView(
        model=analysis.model,
        kind=analysis.kind,
        view=getattr(analysis.request, "view", "routes"),
        text=analysis.text,
        pieces=analysis.pieces,
        position=analysis.position + 1,
        token={"id": analysis.token, "piece": analysis.token_piece},
        layers=analysis.layers,
        heads=analysis.heads,
        seconds=round(analysis.seconds, 3),
        **fields,
    )


def lm_view_json(analysis) -> dict:
    """The answer as JSON, without the parts a view does not have (what the command line prints with ``--json``)."""
    return lm_view_answer(analysis).model_dump(mode="json", exclude_unset=True)
