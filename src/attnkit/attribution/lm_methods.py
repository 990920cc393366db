"""The language-model methods of ``attnkit explain`` (the views of one prediction, the context-mixing
maps): their names, what the explorer says of them, and the context-mixing methods of :mod:`.lm_mixing`
laid out as the other methods' rows.

Two kinds, read off the one registry (:mod:`attnkit.method_registry`: :data:`LM_MIXING_METHODS`,
:data:`LM_VIEWS`; :func:`canonical_lm_method`):

- **context mixing** (attention-norm, Kobayashi et al. 2020; value zeroing, Mohebbi et al. 2023; ALTI,
  Ferrando et al. 2022; ALTI-Logit, Ferrando et al. 2023), an ``(n − 1)``-column row per attributed token
  as every method of :func:`attnkit.attribution.explain_generation` gives (:func:`mixing_rows`), or for the
  self-attention views every layer's token-to-token map (:func:`layer_maps`);
- **views of one prediction** (the logit lens, nostalgebraist 2020; direct logit attribution; the
  information-flow routes, Ferrando & Voita 2024): not rows, a table or a graph of one position
  (:class:`attnkit.service.LMViewRequest`).

Everything runs through the model's :class:`~attnkit.attention.block_trace.BlockTracer`
(:func:`attnkit.attribution.tracers.block_tracer`: attnkit's language model natively, a Hugging Face model
through its family's adapter), one forward pass traced layer by layer, so a family whose blocks attnkit
cannot trace is refused in one line before anything is computed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..attention.block_trace import LMLayerParts
from ..method_registry import REGISTRY, RESIDUAL_TRACE, names
from .lm_mixing import alti, alti_block, alti_logit, attention_norm, value_zeroing
from .tracers import block_tracer

__all__ = [
    "LAYER_METHODS",
    "LM_METHOD_INFO",
    "LM_MIXING_METHODS",
    "LM_VIEWS",
    "canonical_lm_method",
    "head_details",
    "layer_maps",
    "lens_at",
    "mixing_rows",
]

#: the context-mixing methods of a decoder-only model's tokens (rows like the other methods')
LM_MIXING_METHODS = names(where="text_rows", needs=RESIDUAL_TRACE)
#: the views of one prediction: tables and a graph, not rows
LM_VIEWS = names(where="text_view")
#: the mixing methods with one map per layer (the self-attention views of every layer; ``--layer`` picks one)
LAYER_METHODS = names(where="text_layers", needs=RESIDUAL_TRACE)

#: the most logits the logit lens at several positions holds at once (positions × vocabulary)
LENS_LOGITS = 1 << 24
#: ``name: (title, reference, needs gradients)`` of every language-model method, from the registry
LM_METHOD_INFO = {
    n: (REGISTRY[n].title, REGISTRY[n].reference, REGISTRY[n].needs_gradients) for n in (*LM_MIXING_METHODS, *LM_VIEWS)
}

_ALIASES = {
    "dla": "direct_logit",
    "direct_logit_attribution": "direct_logit",
    "lens": "logit_lens",
    "information_flow": "routes",
    "information_flow_routes": "routes",
    "flow": "routes",
}


def canonical_lm_method(name) -> str | None:
    """``name`` as this registry spells it (``alti-logit`` → ``alti_logit``; ``dla`` → ``direct_logit``), or None
    for a name it does not have. ``alti`` is a language model's ALTI; ``alti_plus`` (ALTI+) is a translator's,
    another method, not a spelling of this one."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key, key)
    own = key in REGISTRY and REGISTRY[key].rows is not None  # a language-model method with a module of its own
    return key if key in LM_MIXING_METHODS or key in LM_VIEWS or own else None


def _check_layer(model, layer) -> int:
    """The 0-based layer of ``layer`` (1-based; None: the last)."""
    count = block_tracer(model).n_layers
    if layer is None:
        return count - 1
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= count:
        raise ValueError(f"layer must be a layer number in 1..{count} (or none for the last), got {layer!r}")
    return layer - 1


def _one_layer_map(parts: LMLayerParts, method: str) -> Tensor:
    """``(N, N)``: one traced layer's map by ``method`` (attention_norm or value_zeroing)."""
    return attention_norm(parts) if method == "attention_norm" else value_zeroing(parts)


@torch.no_grad()
def mixing_rows(model, ids: list[int], prompt_len: int, method: str, layer: int | None = None):
    """``(scores (G, n − 1), raw (G, n − 1) or None)``: context mixing of the tokens ``ids[P:]`` (``P =
    prompt_len``) over the inputs ``ids[:-1]``, row ``t`` the position ``P − 1 + t`` that predicts token
    ``ids[P + t]``, as :func:`attnkit.attribution.explain_generation` lays out every method:

    - ``attention_norm``, ``value_zeroing``: that row of layer ``layer``'s map (1-based, default the last),
      the magnitudes (``‖Σ_h α^h_ij f^h(u_j)‖``, ``1 − cos``) in both: ``raw`` keeps them, the attribution's
      ``scores`` are those rows normalised;
    - ``alti``: that row of ALTI rolled out through every layer;
    - ``alti_logit``: each input token's share of the logit of ``ids[P + t]`` at its position (signed, in
      ``raw``; ``scores`` keeps the positive shares), the prefix up to the position traced once per token.
    """
    device = next(model.parameters()).device
    x = torch.tensor(ids[:-1], device=device)  # (n-1,)
    positions = list(range(prompt_len - 1, len(ids) - 1))
    if method == "alti_logit":
        if layer is not None:
            raise ValueError("alti_logit composes every layer: layer does not apply")
        raw = torch.zeros(len(positions), x.shape[0], dtype=torch.float64)  # (G, n-1)
        for t, p in enumerate(positions):
            share = alti_logit(model, x[: p + 1], position=p, token=int(ids[p + 1]))  # a causal model: no later token
            raw[t, : p + 1] = share.tokens.double().cpu()
        return raw.clamp_min(0.0), raw
    if method == "alti":
        if layer is not None:
            raise ValueError("alti rolls out every layer: layer does not apply")
        mat = alti(model, x)  # (n-1, n-1)
    elif method in ("attention_norm", "value_zeroing"):
        target = _check_layer(model, layer)
        held: dict[str, Tensor] = {}

        def on_layer(parts: LMLayerParts) -> None:
            if parts.layer == target:
                held["m"] = _one_layer_map(parts, method)

        block_tracer(model).trace(x, on_layer)
        rows = held["m"][positions].double().cpu()  # (G, n-1): the magnitudes, kept as raw
        return rows, rows.clone()
    else:
        raise ValueError(f"method must be one of {', '.join(LM_MIXING_METHODS)}, got {method!r}")
    return mat[positions].double().cpu(), None  # (G, n-1)


@torch.no_grad()
def layer_maps(model, ids: list[int], method: str) -> Tensor:
    """``(L, N, N)``: every layer's token-to-token map of ``ids`` by ``method`` (:data:`LAYER_METHODS`);
    for ``alti`` layer ``l``'s map is the rollout through layers ``1..l``, ``R_l = C_l ⋯ C_1``."""
    if method not in LAYER_METHODS:
        raise ValueError(f"method must be one of {', '.join(LAYER_METHODS)}, got {method!r}")
    device = next(model.parameters()).device
    maps: list[Tensor] = []

    def on_layer(parts: LMLayerParts) -> None:
        if method == "alti":
            c = alti_block(parts)  # (N, N)
            maps.append(c if not maps else c @ maps[-1].to(c.dtype))
        else:
            maps.append(_one_layer_map(parts, method))

    block_tracer(model).trace(torch.tensor(ids, device=device), on_layer)
    return torch.stack([m.double().cpu() for m in maps])  # (L, N, N)


@torch.no_grad()
def lens_at(model, ids: list[int], positions: list[int], *, k: int = 5) -> dict[int, list]:
    """The logit lens (:func:`attnkit.attribution.lm_mixing.logit_lens`) at several ``positions`` (0-based)
    from one traced pass: ``{position: [LensRow for the embeddings, then each block]}``, the rank that of the
    model's own prediction at that position. Only the asked positions' residuals are kept, ``(L + 1, P, D)``,
    and read through the unembedding one layer and at most :data:`LENS_LOGITS` logits at a time."""
    from .lm_mixing import LensRow

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive number of tokens, got {k!r}")
    device = next(model.parameters()).device
    x = torch.tensor(ids, device=device)
    pos = sorted(set(positions))
    if not pos or pos[0] < 0 or pos[-1] >= len(ids):
        raise ValueError(f"positions must be positions in 0..{len(ids) - 1}, got {positions!r}")
    index = torch.tensor(pos, device=device)
    rows: list[Tensor] = []
    tracer = block_tracer(model)
    trace = tracer.trace(x, lambda parts: rows.append(parts.out[index]))
    head, norm = tracer.unembedding(), tracer.final_norm()
    predicted = trace.logits[index].argmax(-1)  # (P,)
    out: dict[int, list] = {p: [] for p in pos}
    chunk = max(1, LENS_LOGITS // max(1, int(head.weight.shape[0])))  # positions whose (c, V) logits fit at once
    for layer, res in enumerate([trace.embedding[index], *rows]):  # res (P, D)
        for lo in range(0, len(pos), chunk):
            logits = head(norm(res[lo : lo + chunk]))  # (c, V)
            top = logits.topk(min(k, logits.shape[-1]), dim=-1)
            own = logits.gather(-1, predicted[lo : lo + chunk, None])  # (c, 1)
            ranks = 1 + (logits > own).sum(-1)  # (c,)
            for i, p in enumerate(pos[lo : lo + chunk]):
                out[p].append(LensRow(layer, top.indices[i].tolist(), top.values[i].tolist(), int(ranks[i])))
    return out


@torch.no_grad()
def head_details(model, ids: list[int], targets: dict[int, set[int]], *, k: int = 5) -> dict[tuple[int, int], dict]:
    """What each head does at some positions, from one traced pass: for every ``(layer, target)`` (0-based)
    in ``targets`` (``{layer: {target, …}}``), ``rows`` every head's attention row there ``(H, N)`` and what
    each head's output at the target promotes and suppresses when read as logits (as direct logit
    attribution reads it: through the final norm linearised at the target's real final residual, then the
    unembedding): ``promotes``/``suppresses`` ``(H, k)`` token ids and their logits ``(H, k)``. Only the
    asked positions' ``(H, N)`` rows and ``(H, D)`` outputs are kept."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive number of tokens, got {k!r}")
    device = next(model.parameters()).device
    held: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}

    def on_layer(parts: LMLayerParts) -> None:
        for t in sorted(targets.get(parts.layer, ())):
            held[(parts.layer, t)] = (parts.weights[:, t].clone(), parts.head_terms(t))  # (H, N), (H, D)

    tracer = block_tracer(model)
    trace = tracer.trace(torch.tensor(ids, device=device), on_layer)
    w_u = tracer.unembedding().weight  # (V, D)
    out: dict[tuple[int, int], dict] = {}
    for (layer, t), (rows, terms) in held.items():
        logits = tracer.final_norm_linear(trace.final[t])(terms) @ w_u.T  # (H, V)
        up, down = (
            logits.topk(min(k, logits.shape[-1]), dim=-1),
            logits.topk(min(k, logits.shape[-1]), dim=-1, largest=False),
        )
        out[(layer, t)] = {
            "rows": rows.float().cpu(),
            "promotes": up.indices.cpu(),
            "promote_logits": up.values.float().cpu(),
            "suppresses": down.indices.cpu(),
            "suppress_logits": down.values.float().cpu(),
        }
    return out
