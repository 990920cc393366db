"""Attributions of a decoder-only model's own continuation (GPT-2, Llama and kin): which earlier tokens
each generated token drew on.

The model writes a greedy continuation of the prompt (:meth:`attnkit.hf.self_attention.SelfAttentionModel.generate`);
then generated token ``t`` (the token at position ``P + t``, ``P`` the prompt's length) is attributed
to every token before it, the prompt's and the earlier generated ones: the columns are the model's
inputs ``ids[:-1]`` (``n − 1`` of them), and row ``t`` is zero right of position ``P + t − 1`` (a causal
model cannot read ahead). The function explained is ``f_t(x) = log p(ids[P + t] | x_{≤ P+t−1})``, as a
function of the input embeddings ``x (n − 1, E)`` (the embedding layer's output; positions are added
inside the model and kept):

- ``attention``: layer ``layer``'s (1-based, default the last) self-attention row of the position that
  predicts the token, one head or the head mean;
- ``rollout``: that row of the attention rollout through every layer (Abnar & Zuidema 2020);
- ``saliency``, ``input_x_gradient``, ``integrated_gradients``: the math of
  :mod:`attnkit.attribution.gradients` (batched over tokens and interpolation points, Captum), with the
  zero embedding as integrated gradients' baseline.

The result is the one :class:`~attnkit.attribution.Attribution` type: ``source`` the input pieces,
``target`` the generated pieces, so the table, the heatmap, the JSON and the notebook view of
``attnkit explain`` show it as they show a translation's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import InputError
from . import gradients
from .methods import UnknownMethodError, _have_captum, canonical_method
from .result import Attribution, normalise_rows

__all__ = ["GENERATION_METHODS", "explain_generation", "generation_methods"]

#: the methods a decoder-only model's continuation has, in registry order
GENERATION_METHODS = ("attention", "rollout", "saliency", "input_x_gradient", "integrated_gradients")


def generation_methods(model=None) -> list[str]:
    """The methods of :func:`explain_generation`; the gradient ones only where Captum is installed."""
    return [m for m in GENERATION_METHODS if m not in gradients.GRADIENT_METHODS or _have_captum()]


def _positions(prompt_len: int, n_generated: int, device) -> Tensor:
    """``(G,)``: the input position whose output predicts each generated token (``P − 1 + t``)."""
    return torch.arange(n_generated, device=device) + prompt_len - 1


def _attention_rows(sa, ids: list[int], prompt_len: int, method: str, layer, head) -> Tensor:
    """``(G, n − 1)``: the predicting positions' rows of one layer's attention (or of the rollout)."""
    n_gen = len(ids) - prompt_len
    if method == "rollout":
        if layer is not None or head is not None:
            raise InputError("rollout composes every layer and head: --layer and --head do not apply")
        maps = sa.self_attention(ids[:-1])
        mat = maps.rollout()  # (n-1, n-1)
    else:
        if layer is not None and (
            isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= sa.num_layers
        ):
            raise InputError(
                f"layer must be a layer number in 1..{sa.num_layers} (or none for the last), got {layer!r}"
            )
        if head is not None and (isinstance(head, bool) or not isinstance(head, int) or not 1 <= head <= sa.num_heads):
            raise InputError(f"head must be a head number in 1..{sa.num_heads} (or none for the mean), got {head!r}")
        maps = sa.self_attention(ids[:-1], layers=[layer or sa.num_layers])  # 1-based, as the caller's
        a = maps.attention[0]  # (H, n-1, n-1)
        mat = a.mean(0) if head is None else a[head - 1]
    return mat[_positions(prompt_len, n_gen, mat.device)].float()


def _gradient_rows(sa, ids: list[int], prompt_len: int, method: str, steps, batch, progress) -> dict:
    """Gradient attributions ``(G, n − 1, E)`` of every generated token reduced to pieces: the L2 norm over
    each input embedding for ``scores``, the signed sum for ``raw``."""
    device = sa.device
    seq = torch.tensor(ids, device=device)
    inputs = seq[:-1]
    n_gen = len(ids) - prompt_len
    positions = _positions(prompt_len, n_gen, device)  # (G,)
    wanted = seq[prompt_len:]  # (G,): the generated tokens
    model = sa.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            x = sa.embed(inputs).detach()
        x = x.to(torch.promote_types(x.dtype, torch.float32))  # (n-1, E)
        dtype = next(model.parameters()).dtype

        def forward(rows: Tensor) -> Tensor:  # (N, n-1, E) -> (N, G)
            lp = sa.log_probs(rows.to(dtype))  # (N, n-1, V)
            return lp[:, positions, wanted]

        def forward_at(rows: Tensor, cols: Tensor) -> Tensor:  # row i's token cols[i] only: (N,)
            length = int(positions[cols].max()) + 1  # a causal model: later positions change nothing
            lp = sa.log_probs(rows[:, :length].to(dtype))  # (N, length, V)
            index = torch.arange(rows.shape[0], device=rows.device)
            return lp[index, positions[cols], wanted[cols]]

        attr, delta, used = gradients.attribute(
            method, forward, x, n_gen, steps=steps, batch=batch, progress=progress, forward_at=forward_at
        )  # (G, n-1, E)
    finally:
        model.train(was_training)
    out = {"scores": attr.norm(dim=-1), "raw": attr.sum(-1)}
    if delta is not None:
        out["extra"] = {"convergence_delta": [round(float(d), 6) for d in delta], "steps": used}
    return out


def explain_generation(
    sa,
    text: str,
    *,
    method: str = "input_x_gradient",
    max_new_tokens: int = 20,
    layer: int | None = None,
    head: int | None = None,
    steps: int | None = None,
    batch: int | None = None,
    progress: Callable[[float], None] | None = None,
    continuation: tuple[list[int], int] | None = None,
) -> Attribution:
    """Generate a greedy continuation of ``text`` (at most ``max_new_tokens``) with decoder-only model ``sa``
    (:class:`attnkit.hf.self_attention.SelfAttentionModel`) and attribute every generated token to the
    tokens before it by ``method`` (see the module docstring). ``layer``/``head`` (1-based): attention's
    layer and head; ``steps``, ``batch``, ``progress``: as in :func:`attnkit.attribution.explain`.
    ``continuation``: ``(ids, prompt length)`` of :meth:`~attnkit.hf.self_attention.SelfAttentionModel.generate`
    to reuse instead of generating."""
    name = canonical_method(method)
    if name not in GENERATION_METHODS:
        raise UnknownMethodError(
            f"{name} is not defined for a decoder-only model's continuation; it has: {', '.join(generation_methods())}"
        )
    if name in gradients.GRADIENT_METHODS and (layer is not None or head is not None):
        raise InputError(f"{name} takes no layer or head (they are for attention)")
    if name not in gradients.GRADIENT_METHODS and (steps is not None or batch is not None):
        raise InputError(f"{name} takes no steps or batch (they are for the gradient methods)")
    ids, prompt_len = continuation if continuation is not None else sa.generate(text, max_new_tokens=max_new_tokens)
    ids = [int(i) for i in ids]
    if not 1 <= prompt_len < len(ids):
        raise InputError("the continuation has no generated token to explain")
    t0 = time.perf_counter()
    if name in gradients.GRADIENT_METHODS:
        out = _gradient_rows(sa, ids, prompt_len, name, steps, batch, progress)
    else:
        out = {"scores": _attention_rows(sa, ids, prompt_len, name, layer, head)}
    seconds = time.perf_counter() - t0
    params = {k: v for k, v in {"layer": layer, "head": head, "steps": steps}.items() if v is not None}
    params["max_new_tokens"] = max_new_tokens
    if name == "integrated_gradients":
        params.setdefault("steps", f"{gradients.DEFAULT_STEPS}, refined to 1 % (up to {gradients.MAX_STEPS})")
    extra = dict(out.get("extra", {}))
    generated = ids[prompt_len:]
    extra.update(
        source=text,
        prompt_length=prompt_len,
        translation=sa.tokenizer.decode(generated),  # what the page and the table call the output
        forced=False,
        kind="continuation",
        model=sa.source,
    )
    scores = out["scores"].detach().float().cpu()
    return Attribution(
        method=name,
        source=sa.pieces_of(ids[:-1]),
        target=sa.pieces_of(generated),
        scores=normalise_rows(scores.clamp_min(0.0)),
        raw=None if out.get("raw") is None else out["raw"].detach().float().cpu(),
        params=params,
        seconds=seconds,
        needs_gradients=name in gradients.GRADIENT_METHODS,
        extra=extra,
    )
