"""Attributions of a decoder-only model (GPT-2, Llama and kin) over its own continuation of a prompt, or
over a text the user gives: which earlier tokens each next token drew on.

Two ways to get the token ids ``ids`` (``n`` of them) and the first attributed position ``P``:

- a **continuation** (``forced=False``): the model continues the prompt (greedy,
  :meth:`attnkit.hf.self_attention.SelfAttentionModel.generate`, or sampled with a seed,
  :func:`attnkit.decoding.continuation.sample_continuation`, handed in as ``continuation``); ``P`` is the prompt's
  length, and the written tokens are explained;
- a **forced text** (``forced=True``, teacher forcing): ``ids`` is the text's own tokens and ``P = 1``, so
  every next token of the text is explained: row ``t`` explains ``log p(x_{t+1} | x_≤t)``. The text is
  bounded by the model's context and by :data:`MAX_FORCED_TOKENS`.

Token ``t`` (at position ``P + t``) is attributed to every token before it: the columns are the model's
inputs ``ids[:-1]`` (``n − 1`` of them), and row ``t`` is zero right of position ``P + t − 1`` (a causal
model cannot read ahead). The function explained is ``f_t(x) = log p(ids[P + t] | x_{≤ P+t−1})``, as a
function of the input embeddings ``x (n − 1, E)`` (the embedding layer's output; positions are added
inside the model and kept):

- ``attention``: layer ``layer``'s (1-based, default the last) self-attention row of the position that
  predicts the token, one head or the head mean (only that layer's maps are kept);
- ``rollout``: that row of the attention rollout through every layer (Abnar & Zuidema 2020), composed
  layer by layer as the model runs (one ``(n − 1, n − 1)`` product held, never every layer's maps);
- ``attention_norm``, ``value_zeroing`` (a layer's map, default the last), ``alti`` (rolled out) and
  ``alti_logit`` (each input token's share of the token's logit): the context-mixing methods of
  :mod:`.lm_methods` (a traced forward pass; a family whose blocks are not traced is refused in one line);
- ``saliency``, ``input_x_gradient``, ``integrated_gradients``: the math of
  :mod:`attnkit.attribution.gradients` on its shared-forward engine (:mod:`.lm_split`: one forward pass
  serves every token's backward, a causal model's position reading only the tokens up to it), with the
  zero embedding as integrated gradients' baseline.

**Contrastive attribution** (``contrast``, gradient methods only; Yin & Neubig 2022, "Interpreting Language
Models with Contrastive Explanations", as inseq's ``contrast_prob_diff``): the function explained is
``f_t(x) = log p(ids[P + t] | x) − log p(c | x)`` for a foil token ``c`` of the vocabulary: which inputs
made the model predict its token *rather than* ``c``.

**Step scores** (inseq's ``probability`` and ``entropy``), for every attributed token, in
``extra["step_scores"]``: ``probability`` ``p(ids[P + t] | x_{≤ P+t−1})``, ``entropy``
``H_t = −Σ_v p_v log p_v`` of the next-token distribution at that position (nats), and with a contrast
``contrast_probability`` ``p(c | x_{≤ P+t−1})``.

The result is the one :class:`~attnkit.attribution.Attribution` type: ``source`` the input pieces,
``target`` the attributed pieces, so the table, the heatmap, the JSON and the notebook view of
``attnkit explain`` show it as they show a translation's.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

import torch
from torch import Tensor

from ..alignment.rollout import rollout_step
from ..errors import InputError
from ..method_registry import REGISTRY, names
from . import gradients
from .lm_methods import LM_MIXING_METHODS, LM_VIEWS, canonical_lm_method, mixing_rows
from .lm_split import lm_split
from .methods import UnknownMethodError, _have_captum, canonical_method
from .result import Attribution, MethodRows, normalise_rows

__all__ = [
    "GENERATION_METHODS",
    "MAX_FORCED_TOKENS",
    "canonical_generation_method",
    "contrast_token",
    "explain_generation",
    "forced_ids",
    "generation_methods",
    "row_batch",
    "row_methods",
    "step_scores",
]

#: the methods a decoder-only model's tokens have as rows, in registry order (then the views of one
#: prediction, :data:`~attnkit.attribution.lm_methods.LM_VIEWS`: see :func:`generation_methods`)
GENERATION_METHODS = names(where="text_rows")
#: the most tokens of a forced text explained at once: a gradient method runs one backward pass per token,
#: each over the text up to that token, so the work grows with the square of the length
MAX_FORCED_TOKENS = 1024
#: positions whose next-token distribution is normalised at once for the step scores: ``(rows, V)`` floats
STEP_ROWS = 256
#: the activations the gradient methods' rows may hold at once, in bytes: the default ``batch`` is what fits
ROW_MEMORY = 1 << 30


def row_batch(dimensions: tuple[int, int, int], length: int) -> int:
    """The default number of rows (one token at one interpolation point each) that one forward and backward
    pass of the gradient methods serves, for a model of ``dimensions`` ``(layers, width, heads)`` over
    ``length`` input tokens: :data:`ROW_MEMORY` over an estimate of one row's activations, ``4 · L · n · (16 ·
    d + 2 · H · n)`` bytes (each layer's residual-stream intermediates and its attention map, float32), at most
    :data:`~attnkit.attribution.gradients.DEFAULT_BATCH`. A fixed batch of rows would hold ``batch`` copies
    of every activation: hundreds of rows over a long text run out of memory."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    layers, width, heads = (max(1, int(v)) for v in dimensions)
    per_row = 4 * layers * length * (16 * width + 2 * heads * length)  # bytes
    return max(1, min(gradients.DEFAULT_BATCH, ROW_MEMORY // per_row))


def row_methods(model=None) -> list[str]:
    """The methods of :func:`explain_generation` (rows); the gradient ones only where Captum is installed, and
    for a ``model`` (a text model, attnkit's or a :class:`~attnkit.hf.self_attention.SelfAttentionModel`, or the
    network it holds) whose blocks attnkit does not trace (:meth:`~attnkit.attention.block_trace.BlockTracer.refusal`),
    none of the context-mixing ones (:func:`generation_methods` lists them all, so a command refuses them in one line)."""
    from .tracers import block_tracer

    names = [m for m in GENERATION_METHODS if m not in gradients.GRADIENT_METHODS or _have_captum()]
    network = getattr(model, "model", model)
    if network is not None and block_tracer(network).refusal() is not None:
        names = [m for m in names if m not in LM_MIXING_METHODS]
    return names


def generation_methods(model=None) -> list[str]:
    """Every method ``attnkit explain`` has for a decoder-only model: the rows of :func:`explain_generation`
    (:func:`row_methods`), then the views of one prediction (the logit lens, direct logit attribution, the
    information-flow routes: :class:`attnkit.service.LMViewRequest`)."""
    return [*row_methods(), *LM_VIEWS]


def canonical_generation_method(name) -> str:
    """``name`` as the decoder-only registry spells it: a language-model method
    (:func:`~attnkit.attribution.lm_methods.canonical_lm_method`: ``alti`` is a language model's ALTI), else
    the attribution registry's (:func:`~attnkit.attribution.canonical_method`); an unknown name is an
    :class:`~attnkit.attribution.UnknownMethodError` listing the decoder-only methods."""
    lm = canonical_lm_method(name)
    if lm is not None:
        return lm
    try:
        key = canonical_method(name)
    except UnknownMethodError:
        raise UnknownMethodError(
            f"unknown attribution method {name!r}; a language model's methods: {', '.join(generation_methods())}"
        ) from None
    if key not in GENERATION_METHODS:
        extra = " (a language model's ALTI is alti)" if key == "alti_plus" else ""
        raise UnknownMethodError(
            f"{key} is a translator's method, not a language model's{extra}; a language model's methods: "
            f"{', '.join(generation_methods())}"
        )
    return key


def forced_ids(sa, text: str, *, at_least: int = 2) -> tuple[list[int], int]:
    """``(ids, 1)``: ``text``'s tokens (with the tokenizer's special tokens) to explain every next token of,
    as a continuation whose prompt is the first token; at least two tokens (``at_least=1`` for a view of
    the prediction after the text, which one token has), at most the model's context and
    :data:`MAX_FORCED_TOKENS`."""
    ids, _ = sa.encode(text)
    if len(ids) < at_least:
        if at_least == 1:
            raise InputError("the text has no token: give a text whose next token to predict")
        raise InputError("the text is one token: a forced text needs at least two (each explains the next)")
    limit = sa.max_length()
    if limit is not None and len(ids) > limit:
        raise InputError(f"the text has {len(ids)} tokens; {sa.source} reads at most {limit} positions")
    if len(ids) > MAX_FORCED_TOKENS:
        raise InputError(
            f"the text has {len(ids)} tokens; a forced text is explained for at most {MAX_FORCED_TOKENS} tokens "
            "(MAX_FORCED_TOKENS): shorten it, or explain it in parts"
        )
    return ids, 1


def contrast_token(sa, token: str | int) -> int:
    """The vocabulary id of the contrastive foil ``token``: a text that the tokenizer makes one token of
    (without special tokens) and that reads back as itself, a piece of the vocabulary spelt as the vocabulary
    spells it (``Ġworld``), or an id; anything else is an :class:`~attnkit.errors.InputError` saying how it
    tokenises."""
    size = sa.vocab_size
    if isinstance(token, int) and not isinstance(token, bool):
        if not 0 <= token < size:
            raise InputError(f"contrast must be a token id in 0..{size - 1}, got {token}")
        return token
    if not isinstance(token, str) or not token:
        raise InputError(f"contrast must be one token of the model's vocabulary, got {token!r}")
    ids = sa.encode_plain(token)
    if len(ids) == 1:
        # the token must read back as itself: a tokenizer that normalises (NFKC: "Ｇｏｄ" → "God") or maps an
        # unknown character to <unk> makes one token of a text that is not it
        back = sa.decode_plain(ids)
        if back.strip() == token.strip() or sa.piece_id(token) == ids[0]:
            return ids[0]
        raise InputError(
            f"contrast {token!r} is not a token of {sa.source}'s vocabulary: its tokenizer reads it as {back!r} "
            f"(id {ids[0]}); give the token as the model writes it"
        )
    found = sa.piece_id(token)
    if found is not None and 0 <= found < size:
        return found
    pieces = " ".join(repr(p) for p in sa.pieces_of(ids)) or "nothing"
    raise InputError(
        f"contrast {token!r} is not one token of {sa.source}'s vocabulary: it tokenises into {len(ids)} "
        f"({pieces}); give one token (a word after a space is often its own token: try a leading space)"
    )


def _positions(prompt_len: int, n_generated: int, device) -> Tensor:
    """``(G,)``: the input position whose output predicts each generated token (``P − 1 + t``)."""
    return torch.arange(n_generated, device=device) + prompt_len - 1


def _check_layer_head(sa, layer, head) -> None:
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= sa.num_layers):
        raise InputError(f"layer must be a layer number in 1..{sa.num_layers} (or none for the last), got {layer!r}")
    if head is not None and (isinstance(head, bool) or not isinstance(head, int) or not 1 <= head <= sa.num_heads):
        raise InputError(f"head must be a head number in 1..{sa.num_heads} (or none for the mean), got {head!r}")


def _attention_rows(sa, ids: list[int], prompt_len: int, method: str, layer, head) -> MethodRows:
    """``scores (G, n − 1)``: the predicting positions' rows of one layer's attention (or of the rollout),
    the model run once; one layer's maps held at a time. ``logits (G, V)``: that pass's logits at the
    predicting positions (the step scores')."""
    n_gen = len(ids) - prompt_len
    held: dict[str, Tensor] = {}
    logits = {"on_logits": lambda z: held.__setitem__("logits", z), "last": n_gen}
    if method == "rollout":
        if layer is not None or head is not None:
            raise InputError("rollout composes every layer and head: --layer and --head do not apply")

        def compose(_layer: int, w: Tensor) -> None:  # w (H, n-1, n-1), layers in order: R_l = Â_l R_{l-1}
            held["r"] = rollout_step(held.get("r"), w.float().mean(0))  # (n-1, n-1)

        sa.stream(ids[:-1], compose, **logits)
    else:
        _check_layer_head(sa, layer, head)
        heads = None if head is None else [head]

        def keep(_layer: int, w: Tensor) -> None:  # w (H or 1, n-1, n-1)
            held["r"] = w.float().mean(0)

        sa.stream(ids[:-1], keep, layers=[layer or sa.num_layers], heads=heads, **logits)  # 1-based numbers
    mat = held["r"]  # (n-1, n-1)
    return MethodRows(mat[_positions(prompt_len, n_gen, mat.device)].cpu(), logits=held["logits"])


@torch.no_grad()
def step_scores(
    sa, ids: list[int], prompt_len: int, contrast_id: int | None = None, logits: Tensor | None = None
) -> dict[str, list[float]]:
    """inseq's step scores of every attributed token ``ids[P + t]`` (module docstring): ``probability``,
    ``entropy`` (nats) of the next-token distribution at its predicting position, and with ``contrast_id``
    ``contrast_probability``; normalised :data:`STEP_ROWS` positions at a time. ``logits (G, V)``: the
    predicting positions' logits where a pass the method ran already has them; else one forward pass
    (:meth:`~attnkit.hf.self_attention.SelfAttentionModel.next_token_logits`)."""
    device = sa.device
    n_gen = len(ids) - prompt_len
    wanted = torch.tensor(ids[prompt_len:], device=device)  # (G,)
    if logits is None:
        logits = sa.next_token_logits(ids[:-1], n_gen)  # (G, V)
    positions = torch.arange(n_gen, device=device)  # rows of logits
    out: dict[str, list[float]] = {"probability": [], "entropy": []}
    if contrast_id is not None:
        out["contrast_probability"] = []
    for i in range(0, len(positions), STEP_ROWS):
        rows = positions[i : i + STEP_ROWS]
        lp = torch.log_softmax(logits[rows].double(), dim=-1)  # (r, V)
        p = lp.exp()
        out["probability"] += p[torch.arange(len(rows), device=device), wanted[i : i + STEP_ROWS]].tolist()
        out["entropy"] += (-(p * lp).nansum(-1)).tolist()  # 0 · log 0 = 0
        if contrast_id is not None:
            out["contrast_probability"] += p[:, contrast_id].tolist()
    return {k: [round(float(v), 6) for v in vals] for k, vals in out.items()}


def _gradient_rows(sa, ids: list[int], prompt_len: int, method: str, steps, batch, progress, contrast_id) -> MethodRows:
    """Gradient attributions ``(G, n − 1, E)`` of every attributed token reduced to pieces: the L2 norm over
    each input embedding for ``scores``, the signed sum for ``raw``. With ``contrast_id`` the function is
    the log-probability difference to that token (module docstring). The shared-forward engine
    (:func:`.lm_split.lm_split`): one forward pass serves every token's backward; ``logits`` the
    real input's logits at the predicting positions ``(G, V)`` when that pass ran (the step scores')."""
    device = sa.device
    seq = torch.tensor(ids, device=device)
    inputs = seq[:-1]
    n_gen = len(ids) - prompt_len
    model = sa.model
    sa._check_generates()
    if batch is None:
        batch = row_batch(sa.dimensions(), len(inputs))
    was_training = model.training
    model.eval()
    seen: dict[str, Tensor] = {}
    try:
        with torch.no_grad():
            x = sa.embed(inputs).detach()
        x = x.to(torch.promote_types(x.dtype, torch.float32))  # (n-1, E)
        split = lm_split(sa, ids, prompt_len, contrast_id, x, seen)
        attr, delta, used = gradients.attribute(
            method, None, x, n_gen, steps=steps, batch=batch, progress=progress, split=split
        )  # (G, n-1, E)
    finally:
        model.train(was_training)
    out = MethodRows(attr.norm(dim=-1), attr.sum(-1), logits=seen.get("logits"))
    if delta is not None:
        out.extra = {"convergence_delta": [round(float(d), 6) for d in delta], "steps": used}
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
    forced: bool = False,
    contrast: str | int | None = None,
) -> Attribution:
    """Attribute, with decoder-only model ``sa`` (:class:`attnkit.hf.self_attention.SelfAttentionModel`), every
    token of its greedy continuation of ``text`` (at most ``max_new_tokens``), or with ``forced`` every next
    token of ``text`` itself, to the tokens before it by ``method`` (see the module docstring).
    ``layer``/``head`` (1-based): attention's layer and head; ``steps``, ``batch``, ``progress``: as in
    :func:`attnkit.attribution.explain`. ``continuation``: ``(ids, prompt length)`` of
    :meth:`~attnkit.hf.self_attention.SelfAttentionModel.generate` (or of a sampled continuation,
    :func:`attnkit.decoding.continuation.sample_continuation`) to explain instead of generating. ``contrast``: a foil
    token (:func:`contrast_token`) for the gradient methods' contrastive attribution."""
    name = canonical_generation_method(method)
    if name in LM_VIEWS:
        raise InputError(
            f"{name} is a view of one prediction, not a row per token: ask for it with attnkit.service.LMViewRequest"
        )
    if name not in GENERATION_METHODS:
        raise UnknownMethodError(
            f"{name} is not defined for a decoder-only model's continuation; it has: {', '.join(row_methods())}"
        )
    if name in gradients.GRADIENT_METHODS and (layer is not None or head is not None):
        raise InputError(f"{name} takes no layer or head (they are for attention)")
    if name not in gradients.GRADIENT_METHODS and (steps is not None or batch is not None):
        raise InputError(f"{name} takes no steps or batch (they are for the gradient methods)")
    if contrast is not None and name not in gradients.GRADIENT_METHODS:
        raise InputError(
            f"{name} has no contrastive form: contrast is for the gradient methods "
            f"({', '.join(gradients.GRADIENT_METHODS)})"
        )
    if not isinstance(forced, bool):
        raise InputError(f"forced must be true or false, got {forced!r}")
    if forced and continuation is not None:
        raise InputError("a forced text is the text's own tokens: give forced or continuation, not both")
    contrast_id = None if contrast is None else contrast_token(sa, contrast)
    if forced:
        ids, prompt_len = forced_ids(sa, text)
    elif continuation is not None:
        ids, prompt_len = continuation
    else:
        ids, prompt_len = sa.generate(text, max_new_tokens=max_new_tokens)
    ids = [int(i) for i in ids]
    if not 1 <= prompt_len < len(ids):
        raise InputError("the continuation has no generated token to explain")
    t0 = time.perf_counter()
    registered = REGISTRY[name].rows
    if registered is not None:  # a method with a module of its own (the registry names its function)
        module, _, function = registered.partition(":")
        out = getattr(importlib.import_module(module), function)(sa, ids, prompt_len, layer=layer, head=head)
    elif name in gradients.GRADIENT_METHODS:
        with sa.fast_activations():  # one kernel per activation: less memory and time under autograd
            out = _gradient_rows(sa, ids, prompt_len, name, steps, batch, progress, contrast_id)
    elif name in LM_MIXING_METHODS:
        if head is not None:
            raise InputError(f"{name} sums every head: head does not apply")
        if layer is not None and name in ("alti", "alti_logit"):
            raise InputError(f"{name} composes every layer: layer does not apply")
        if layer is not None:
            _check_layer_head(sa, layer, None)
        scores, raw = mixing_rows(sa.model, ids, prompt_len, name, layer)
        out = MethodRows(scores, raw)
    else:
        with sa.fast_activations():
            out = _attention_rows(sa, ids, prompt_len, name, layer, head)
    seconds = time.perf_counter() - t0
    params = {k: v for k, v in {"layer": layer, "head": head, "steps": steps}.items() if v is not None}
    if not forced:
        params["max_new_tokens"] = max_new_tokens
    if contrast_id is not None:
        params["contrast"] = sa.pieces_of([contrast_id])[0]
    if name == "integrated_gradients":
        params.setdefault("steps", f"{gradients.DEFAULT_STEPS}, refined to 1 % (up to {gradients.MAX_STEPS})")
    extra = dict(out.extra)
    generated = ids[prompt_len:]
    extra.update(
        source=text,
        prompt_length=prompt_len,
        translation=sa.tokenizer.decode(generated),  # what the page and the table call the output
        forced=forced,
        kind="forced text" if forced else "continuation",
        model=sa.source,
        step_scores=step_scores(sa, ids, prompt_len, contrast_id, out.logits),
    )
    if contrast_id is not None:
        extra["contrast"] = {"token": params["contrast"], "id": contrast_id}
    scores = out.scores.detach().float().cpu()
    return Attribution(
        method=name,
        source=sa.pieces_of(ids[:-1]),
        target=sa.pieces_of(generated),
        scores=normalise_rows(scores.clamp_min(0.0)),
        raw=None if out.raw is None else out.raw.detach().float().cpu(),
        params=params,
        seconds=seconds,
        needs_gradients=name in gradients.GRADIENT_METHODS,
        extra=extra,
    )
