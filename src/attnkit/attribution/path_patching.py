"""Path patching: how much of a head's effect flows through one later head's query, key or value.

Wang et al. (2022), "Interpretability in the Wild" (the IOI circuit), and Goldowsky-Dill et al. (2023),
"Localizing Model Behavior with Path Patching". With a clean and a corrupted input (as
:mod:`attnkit.attribution.patching`), the **sender** head ``s`` (layer ``l_s``) is patched to its clean output
along one path only: into the **receiver** head ``r``'s input (layer ``l_r > l_s``), through the residual
stream directly, with every other head and MLP frozen at the corrupted run. In attnkit's pre-norm blocks the
receiver reads ``x = norm(h_{l_r})``; the sender's change enters the stream as its columns of the output
projection, so the receiver's patched input is, exactly::

    x' = norm( h_{l_r}^corrupt + (z_s^clean − z_s^corrupt) W_O^{s} )      # (B, N, D)

(``z_s`` the sender's output ``(B, N, D_h)``, ``W_O^{s}`` its ``D_h`` columns of the output projection; the
projection's bias is the same on both runs and cancels). ``via`` picks which of the receiver's inputs read
``x'`` — ``"q"`` its queries, ``"k"`` its keys, ``"v"`` its values, or several (``"kv"``) — the others read the
corrupted ``x``. The receiver's output is recomputed from these (its own projections, rotary positions,
causal softmax; :func:`head_output`) and patched into the corrupted run
(:class:`~attnkit.attribution.interventions.HeadPatch`), whose later layers read it as they would; the metric
is then read as in activation patching and normalised the same way (1 = clean, 0 = corrupted).

That is the ``"denoise"`` direction (the default): the sender's clean output, everything else frozen at the
corrupted run. Wang et al. ran the other, ``direction="noise"``: the sender's *corrupted* output along the
path, everything else frozen at the clean run (swap "clean" and "corrupted" above), and read what the
answer loses. :attr:`PathPatchingMap.effect` reads both as "larger = the path matters more" (the fraction
restored, or lost; :mod:`attnkit.attribution.patching`).

Senders need not be heads (:func:`path_patch_sources`, Wang et al. 2022 send from MLPs too): an MLP of an
earlier layer sends what it adds to the stream, ``δ = mlp_l^clean − mlp_l^corrupt``, and the embeddings send
``δ = h_0^clean − h_0^corrupt`` (the token embeddings; the positions cancel), each through the same
``x' = norm(h_{l_r}^corrupt + δ)``. A head of layer 0 reads only the embeddings: their path through q, k and v
together is that head's activation patch. On a Hugging Face model the receiver runs through the model's own
modules (:mod:`attnkit.attribution.hf_path_patching`).

For an induction head, the previous-token head of an earlier layer is the sender whose path through the
**key** restores the answer (K-composition, Olsson et al. 2022). Layers and heads are 0-based here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention.causal_self_attention import repeat_kv
from .interventions import HeadPatch, attention_sites, intervene, record_heads
from .patching import MetricScores, base_and_source, eval_mode, head_grid, logits_of, patch_metric
from .stream_interventions import _stream as stream_sites
from .stream_interventions import record_stream

__all__ = [
    "PathPatchingMap",
    "SourcePathPatching",
    "head_output",
    "induction_circuit",
    "induction_subject",
    "path_patch",
    "path_patch_senders",
    "path_patch_sources",
]


def head_output(attn, xq: Tensor, xk: Tensor, xv: Tensor, head: int) -> Tensor:
    """Head ``head`` of the causal self-attention ``attn`` with its queries read from ``xq``, its keys from
    ``xk`` and its values from ``xv`` (each ``(B, N, D)``, the normed residual stream): ``(B, N, D_h)``,
    ``softmax(q kᵀ / √d_h + causal) v`` with the module's projections, biases, rotary positions and
    grouped-query sharing. With ``xq = xk = xv`` it is the head's slice of the module's own output projection input."""
    dh = attn.head_dim
    w_q, w_k, w_v = attn.q_proj, attn.k_proj, attn.v_proj
    b, n, _ = xq.shape
    q = F.linear(xq, w_q.weight, w_q.bias).view(b, n, attn.n_heads, dh).transpose(1, 2)  # (B, H, N, Dh)
    k = F.linear(xk, w_k.weight, w_k.bias).view(b, n, attn.n_kv_heads, dh).transpose(1, 2)  # (B, Hkv, N, Dh)
    v = F.linear(xv, w_v.weight, w_v.bias).view(b, n, attn.n_kv_heads, dh).transpose(1, 2)
    if attn.rotary is not None:
        q, k = attn.rotary(q, k)
    k, v = repeat_kv(k, attn.groups)[:, head], repeat_kv(v, attn.groups)[:, head]  # (B, N, Dh)
    scores = q[:, head] @ k.transpose(-1, -2) / math.sqrt(dh)  # (B, N, N)
    causal = torch.ones(n, n, dtype=torch.bool, device=xq.device).tril()
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return weights @ v  # (B, N, Dh)


def _check_via(via) -> str:
    if not isinstance(via, str) or not via or any(c not in "qkv" for c in via) or len(set(via)) != len(via):
        raise ValueError(f"via must be 'q', 'k', 'v' or several of them (e.g. 'kv'), got {via!r}")
    return via


def _check_head(name: str, value, n_layers: int, n_heads: int) -> tuple[int, int]:
    ok = isinstance(value, (tuple, list)) and len(value) == 2
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ok or not (0 <= value[0] < n_layers and 0 <= value[1] < n_heads):
        raise ValueError(
            f"{name} must be (layer, head), 0-based, with layer in 0..{n_layers - 1} and head in 0..{n_heads - 1}, "
            f"got {value!r}"
        )
    return int(value[0]), int(value[1])


@dataclass
class PathPatchingMap(MetricScores):
    """Path patching into ``receiver`` (0-based ``(layer, head)``) via ``via``: ``scores (L_r, H)`` the raw
    metric with each sender of layers ``0..L_r − 1`` patched along that path alone (NaN for senders not
    run); ``clean`` and ``corrupt`` the metric on the two runs; ``runs`` forward passes in ``seconds``."""

    receiver: tuple[int, int]
    via: str
    metric: str
    scores: Tensor
    clean: float
    corrupt: float
    position: int
    runs: int
    seconds: float
    direction: str = "denoise"

    def ranked(self) -> list[tuple[int, int, float]]:
        """Senders by :attr:`effect`, largest first: ``(layer, head, effect)``, 0-based."""
        values = self.effect
        cells = [
            (li, hi, float(values[li, hi]))
            for li in range(values.shape[0])
            for hi in range(values.shape[1])
            if not math.isnan(float(values[li, hi]))
        ]
        return sorted(cells, key=lambda c: -c[2])

    def to_dict(self) -> dict:
        norm, eff = self.normalised, self.effect
        senders = [
            {
                "layer": li + 1,
                "head": hi + 1,
                "score": float(self.scores[li, hi]),
                "normalised": None if norm is None else float(norm[li, hi]),
                "effect": float(eff[li, hi]),
            }
            for li, hi, _ in self.ranked()
        ]
        return {
            "receiver": {"layer": self.receiver[0] + 1, "head": self.receiver[1] + 1},
            "via": self.via,
            **self.run_fields(),
            "senders": senders,
        }


def path_scores(core, clean: Tensor, corrupt: Tensor, metric, direction: str, receiver, via: str, senders):
    """``(scores, clean metric, corrupted metric)``: the metric with each sender's change (source minus base run)
    reaching only ``receiver``'s ``via`` inputs, everything else frozen at the base run (the module docstring).
    A sender is ``("head", layer, head)`` (``(z^source − z^base) W_O^{head}``), ``("mlp", layer)`` (what MLP
    ``layer`` adds to the stream, source minus base) or ``("embed",)`` (the residual stream ``h_0``: the token
    embeddings; the positions are the same on both runs and cancel). ``core`` attnkit's language model (the
    receiver recomputed, :func:`head_output`) or a Hugging Face pre-norm decoder-only one (run through its own
    modules, :mod:`attnkit.attribution.hf_path_patching`)."""
    from ..models.language_model import LanguageModel
    from .hf_path_patching import check_pre_norm, head_write, hf_receiver_run

    lr, hr = receiver
    base, source = base_and_source(direction, clean, corrupt)
    own = isinstance(core, LanguageModel)
    inputs = None if own else check_pre_norm(core, lr)
    mlps = sorted({s[1] for s in senders if s[0] == "mlp"})
    resid = sorted({lr, *([0] if ("embed",) in senders else [])})
    with torch.no_grad(), eval_mode(core):
        with record_heads(core) as heads_src, record_stream(core, residual=resid, mlp=mlps) as st_src:
            m_source = float(metric(logits_of(core, source)))
        with record_heads(core) as heads_base, record_stream(core, residual=resid, mlp=mlps) as st_base:
            m_base = float(metric(logits_of(core, base)))
        h = st_base.residual(lr)  # (B, N, D): the base run's stream entering the receiver's block
        sites = attention_sites(core)
        if own:
            block = core.layers[lr]
            attn, norm = block.self_attn, block.input_layernorm
            x_base = norm(h)
        values = []
        for sender in senders:
            if sender[0] == "head":
                ls, hs = sender[1], sender[2]
                dz = heads_src.get("self", ls, hs) - heads_base.get("self", ls, hs)  # (B, N, Dh)
                delta = head_write(sites["self", ls], hs, dz)  # (B, N, D)
            elif sender[0] == "mlp":
                delta = st_src.mlp(sender[1]) - st_base.mlp(sender[1])  # (B, N, D)
            else:
                delta = st_src.residual(0) - st_base.residual(0)  # (B, N, D)
            if own:
                x_patched = norm(h + delta)  # (B, N, D)
                z = head_output(attn, *(x_patched if c in via else x_base for c in "qkv"), hr)  # (B, N, Dh)
                with intervene(core, [HeadPatch(lr, hr, z)]):
                    values.append(float(metric(logits_of(core, base))))
            else:
                values.append(
                    float(metric(hf_receiver_run(core, inputs, base, h, delta, receiver, via, heads_base, logits_of)))
                )
    m_clean, m_corrupt = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return values, m_clean, m_corrupt


@torch.no_grad()
def path_patch_senders(
    model,
    clean_ids,
    corrupt_ids,
    target,
    foil=None,
    *,
    receiver,
    via: str = "k",
    senders=None,
    position: int = -1,
    direction: str = "denoise",
) -> PathPatchingMap:
    """Path patching from each head of the layers before ``receiver`` (or each of ``senders``, 0-based
    ``(layer, head)`` pairs) into ``receiver``'s ``via`` input(s), one sender at a time (see the module
    docstring): a :class:`PathPatchingMap`. ``2 + S`` forward passes for ``S`` senders."""
    core, clean, corrupt, metric = patch_metric(model, clean_ids, corrupt_ids, target, foil, position)
    n_layers, n_heads = head_grid(core)
    lr, hr = _check_head("receiver", receiver, n_layers, n_heads)
    via = _check_via(via)
    if lr == 0:
        raise ValueError("receiver must be in a layer after the first: no head writes before layer 0")
    if senders is None:
        senders = [(li, hi) for li in range(lr) for hi in range(n_heads)]
    senders = [_check_head("senders", s, n_layers, n_heads) for s in senders]
    if any(li >= lr for li, _ in senders):
        raise ValueError(f"senders must be in layers before the receiver's ({lr}), got {senders}")
    start = time.perf_counter()
    values, m_clean, m_corrupt = path_scores(
        core, clean, corrupt, metric, direction, (lr, hr), via, [("head", ls, hs) for ls, hs in senders]
    )
    scores = torch.full((lr, n_heads), float("nan"), dtype=torch.float64)
    for (ls, hs), v in zip(senders, values):
        scores[ls, hs] = v
    seconds = time.perf_counter() - start
    return PathPatchingMap(
        (lr, hr), via, metric.name, scores, m_clean, m_corrupt, metric.position, 2 + len(senders), seconds, direction
    )


def path_patch(
    model,
    clean_ids,
    corrupt_ids,
    target,
    foil=None,
    *,
    sender,
    receiver,
    via: str = "k",
    position: int = -1,
    direction: str = "denoise",
) -> float:
    """The :attr:`~PathPatchingMap.effect` of ``sender``'s clean output reaching only ``receiver``'s ``via``
    input(s) (0-based ``(layer, head)`` each): the fraction of the answer restored (or, noising, of the
    corrupted output: lost); the raw change of the metric when the runs agree."""
    result = path_patch_senders(
        model,
        clean_ids,
        corrupt_ids,
        target,
        foil,
        receiver=receiver,
        via=via,
        senders=[sender],
        position=position,
        direction=direction,
    )
    return float(result.effect[sender[0], sender[1]])


@dataclass
class SourcePathPatching(MetricScores):
    """Path patching into ``receiver`` (0-based ``(layer, head)``) via ``via`` from any kind of sender:
    ``senders`` (``("embed",)``, ``("mlp", layer)``, ``("head", layer, head)``, 0-based) and ``scores (S,)`` the
    metric with each one's change along that path alone; ``clean``, ``corrupt``, ``direction`` as in
    :class:`PathPatchingMap`."""

    receiver: tuple[int, int]
    via: str
    metric: str
    senders: list[tuple]
    scores: Tensor
    clean: float
    corrupt: float
    position: int
    runs: int
    seconds: float
    direction: str = "denoise"

    @staticmethod
    def name(sender: tuple) -> str:
        """``"embed"``, ``"MLP2"``, ``"L1H3"`` (numbered from 1)."""
        if sender[0] == "embed":
            return "embed"
        return f"MLP{sender[1] + 1}" if sender[0] == "mlp" else f"L{sender[1] + 1}H{sender[2] + 1}"

    def ranked(self) -> list[tuple[tuple, float]]:
        """``(sender, effect)`` by :attr:`effect`, largest first."""
        eff = self.effect
        return sorted(((s, float(eff[i])) for i, s in enumerate(self.senders)), key=lambda c: -c[1])

    def to_dict(self) -> dict:
        norm, eff = self.normalised, self.effect
        order = sorted(range(len(self.senders)), key=lambda i: -float(eff[i]))
        return {
            "receiver": {"layer": self.receiver[0] + 1, "head": self.receiver[1] + 1},
            "via": self.via,
            **self.run_fields(),
            "senders": [
                {
                    "sender": self.name(self.senders[i]),
                    "score": float(self.scores[i]),
                    "normalised": None if norm is None else float(norm[i]),
                    "effect": float(eff[i]),
                }
                for i in order
            ],
        }


def _check_sender(sender, lr: int, n_heads: int, has_mlp: bool) -> tuple:
    ok = (
        isinstance(sender, tuple) and sender and all(isinstance(v, int) and not isinstance(v, bool) for v in sender[1:])
    )
    kind = sender[0] if ok else None
    if kind == "embed" and len(sender) == 1:
        return ("embed",)
    if kind == "mlp" and len(sender) == 2 and 0 <= sender[1] < lr:
        if not has_mlp:
            raise ValueError("senders: the model is attention-only, it has no MLPs")
        return sender
    if kind == "head" and len(sender) == 3 and 0 <= sender[1] < lr and 0 <= sender[2] < n_heads:
        return sender
    raise ValueError(
        f"senders must be ('embed',), ('mlp', layer) or ('head', layer, head), 0-based, with layer before the "
        f"receiver's ({lr}) and head in 0..{n_heads - 1}, got {sender!r}"
    )


def path_patch_sources(
    model,
    clean_ids,
    corrupt_ids,
    target,
    foil=None,
    *,
    receiver,
    via: str = "k",
    senders=None,
    position: int = -1,
    direction: str = "denoise",
) -> SourcePathPatching:
    """Path patching into ``receiver``'s ``via`` input(s) from the embeddings, each MLP and each head of the
    layers before it (or from ``senders``: ``("embed",)``, ``("mlp", layer)``, ``("head", layer, head)``,
    0-based), one at a time: the sender's change, source minus base run, added to the stream the receiver
    reads, every other path frozen at the base run (see the module docstring; Wang et al. 2022 send from heads
    and MLPs alike). A receiver in layer 0 reads only the embeddings. ``2 + S`` forward passes."""
    core, clean, corrupt, metric = patch_metric(model, clean_ids, corrupt_ids, target, foil, position)
    n_layers, n_heads = head_grid(core)
    lr, hr = _check_head("receiver", receiver, n_layers, n_heads)
    via = _check_via(via)
    has_mlp = stream_sites(core)[2] is not None
    if senders is None:
        senders = [("embed",)]
        for li in range(lr):
            senders += [("head", li, hi) for hi in range(n_heads)] + ([("mlp", li)] if has_mlp else [])
    senders = [_check_sender(tuple(s) if isinstance(s, list) else s, lr, n_heads, has_mlp) for s in senders]
    if not senders:
        raise ValueError("senders must name at least one sender")
    start = time.perf_counter()
    values, m_clean, m_corrupt = path_scores(core, clean, corrupt, metric, direction, (lr, hr), via, senders)
    seconds = time.perf_counter() - start
    return SourcePathPatching(
        (lr, hr),
        via,
        metric.name,
        senders,
        torch.tensor(values, dtype=torch.float64),
        m_clean,
        m_corrupt,
        metric.position,
        2 + len(senders),
        seconds,
        direction,
    )


def induction_subject(text_model) -> tuple[object, tuple[int, int, float], int | None, tuple[int, ...]]:
    """``(model, best induction head, context, special ids)`` of a text model to patch: attnkit's language model
    (:func:`attnkit.models.induction.induction_scores`, its ``max_len``, no special ids left out, as before) or a
    Hugging Face decoder-only one (its text model's :func:`attnkit.hf.induction.hf_induction_scores`, its context,
    its tokenizer's special ids, which the random tokens leave out). The head ``(layer, head, prefix
    matching)`` is numbered from 1; ``TypeError`` for a model patching does not read."""
    from ..hf.induction import hf_induction_scores
    from ..models.induction import induction_scores
    from ..models.language_model import LanguageModel
    from .patching import patched_model

    core = patched_model(text_model)
    if isinstance(core, LanguageModel):
        return core, induction_scores(core).best_induction_head(), core.config.max_len, ()
    sa = text_model
    for _ in range(3):  # the text model that reads the attention transformers computes
        if hasattr(sa, "self_attention") and hasattr(sa, "special_ids"):
            break
        sa = getattr(sa, "impl", None)
    if sa is None:
        raise TypeError(f"{type(text_model).__name__} is not a text model attnkit opened: give its text model")
    best = hf_induction_scores(sa).best_induction_head()
    return core, best, sa.max_length(), tuple(sorted(int(i) for i in sa.special_ids))


def induction_circuit(
    lm, length: int, seed: int, direction: str, induction_head: tuple[int, int, float], special_ids=()
) -> dict:
    """The induction task's patching, as ``attnkit heads --patching`` prints it and the explorer draws it:
    on ``length`` random tokens repeated twice (:func:`~attnkit.attribution.patching.repeated_tokens_pair`,
    seeded, ``special_ids`` left out), every head's activation-patching effect and, into ``induction_head``
    (``(layer, head, prefix-matching score)``, numbered from 1: the head the model's induction scores name, not
    one given), path patching from every earlier head through its query, key and value (``None`` for a head of
    layer 1, which no head sends to). ``lm``: attnkit's language model or a Hugging Face decoder-only one
    (:func:`induction_subject`). JSON-ready; the caller adds the model's name."""
    from .patching import patch_heads, repeated_tokens_pair

    layer, head, prefix = induction_head
    clean, corrupt, target = repeated_tokens_pair(lm.config.vocab_size, length, seed=seed, special_ids=special_ids)
    paths = None
    if layer > 1:
        paths = {
            via: path_patch_senders(
                lm, clean, corrupt, target, receiver=(layer - 1, head - 1), via=via, direction=direction
            ).to_dict()
            for via in "qkv"
        }
    return {
        "length": length,
        "seed": seed,
        "direction": direction,
        "target": target,
        "induction_head": {"layer": layer, "head": head, "prefix_matching": prefix},
        "heads": patch_heads(lm, clean, corrupt, target, direction=direction).to_dict(),
        "paths": paths,
    }
