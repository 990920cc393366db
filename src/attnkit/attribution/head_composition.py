"""How heads of different layers compose, read from the weights alone (Elhage et al. 2021, "A Mathematical
Framework for Transformer Circuits", their composition scores).

Each head of attnkit's language model is two low-rank ``d_model × d_model`` matrices acting on the residual
stream (column vectors, ``x_i`` the stream at position ``i``): the QK circuit ``W_QK = W_Qᵀ W_K`` (its score
``s_ij ∝ x_iᵀ W_QK x_j``) and the OV circuit ``W_OV = W_O W_V`` (what it writes, ``W_OV x_j``, for each key it
reads). With grouped-query attention a query head's ``W_K`` and ``W_V`` are those of its key/value group. A head
``(a, h)`` writes ``W_OV^{a,h} x`` into the stream, which a head ``(b, h')`` of a later layer reads on one of
three sides::

    Q-composition = ‖W_QK^{b,h'}ᵀ W_OV^{a,h}‖_F / (‖W_QK^{b,h'}‖_F ‖W_OV^{a,h}‖_F)    (its queries)
    K-composition = ‖W_QK^{b,h'}  W_OV^{a,h}‖_F / (‖W_QK^{b,h'}‖_F ‖W_OV^{a,h}‖_F)    (its keys)
    V-composition = ‖W_OV^{b,h'}  W_OV^{a,h}‖_F / (‖W_OV^{b,h'}‖_F ‖W_OV^{a,h}‖_F)    (its values)

each in ``[0, 1]``, how much of what one head writes the other reads (an induction head K-composes with the
previous-token head before it, Olsson et al. 2022). As Elhage et al. do, the norms before the attention are left
out (their gains and the ``1/σ`` of each position), and so are the rotary positions (RoPE rotates ``W_QK`` by
the relative offset; the scores read its offset-0 matrix). Random matrices of these shapes already score above
zero, so Elhage et al. subtract the expected score of random matrices of the same shapes: here the mean over
``samples`` seeded draws of Gaussian ``W_Q, W_K, W_V (d_h × d_model)`` and ``W_O (d_model × d_h)``, one
baseline per kind (every head has the same shapes). Both the raw and the baseline-subtracted scores are kept.

The norms are computed from the ``d_h × d_h`` factors, never forming the ``d_model × d_model`` matrices:
``‖L C R‖_F² = Σ (LᵀL C) ⊙ (C R Rᵀ)`` with ``L`` (``d_model × d_h``), ``C`` (``d_h × d_h``) and ``R``
(``d_h × d_model``), in float64.

Layers and heads are 0-based in the tensors; :meth:`CompositionScores.top` and :meth:`CompositionScores.to_dict`
number them from 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.language_model import LanguageModel

__all__ = ["COMPOSITION_KINDS", "CompositionPair", "CompositionScores", "composition_scores", "head_factors"]

#: the three ways a later head reads an earlier head's output, in the order tables show them
COMPOSITION_KINDS = ("q", "k", "v")


@dataclass(frozen=True)
class CompositionPair:
    """One pair of heads, numbered from 1: ``source`` (layer, head) writes what ``reader`` (layer, head) reads
    on the ``kind`` side; ``score`` (raw) and ``adjusted`` (less the random baseline)."""

    kind: str
    source: tuple[int, int]
    reader: tuple[int, int]
    score: float
    adjusted: float

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "source": f"L{self.source[0]}H{self.source[1]}",
            "reader": f"L{self.reader[0]}H{self.reader[1]}",
            "score": self.score,
            "adjusted": self.adjusted,
        }


@dataclass
class CompositionScores:
    """Per kind (``q``, ``k``, ``v``) a float64 ``(La, Ha, Lb, Hb)`` tensor ``raw[kind][a, h, b, h']`` (0-based;
    NaN unless layer ``b`` is after layer ``a``), the random ``baseline[kind]`` and how it was drawn."""

    raw: dict[str, Tensor]
    baseline: dict[str, float]
    samples: int
    seed: int

    def scores(self, kind: str, *, adjusted: bool = True) -> Tensor:
        """``(La, Ha, Lb, Hb)``: the ``kind`` scores, less the baseline when ``adjusted``."""
        if kind not in COMPOSITION_KINDS:
            raise ValueError(f"kind must be one of {COMPOSITION_KINDS}, got {kind!r}")
        return self.raw[kind] - self.baseline[kind] if adjusted else self.raw[kind]

    def top(self, kind: str, k: int = 5) -> list[CompositionPair]:
        """The ``k`` pairs of heads that compose most on the ``kind`` side (by the adjusted score, the same
        order as the raw one), strongest first."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        raw = self.scores(kind, adjusted=False)
        flat = raw.nan_to_num(-math.inf).flatten()
        count = int((~raw.isnan()).sum())
        order = flat.argsort(descending=True)[: min(k, count)].tolist()
        out = []
        for t in order:
            a, h, b, g = (int(v) for v in torch.unravel_index(torch.tensor(t), raw.shape))
            s = float(raw[a, h, b, g])
            out.append(CompositionPair(kind, (a + 1, h + 1), (b + 1, g + 1), s, s - self.baseline[kind]))
        return out

    def to_dict(self, k: int = 5) -> dict:
        """JSON-ready: the baselines, the top ``k`` pairs of each kind and every pair's scores (from 1)."""
        pairs = []
        raw = self.raw["k"]
        la, ha, lb, hb = raw.shape
        for a in range(la):
            for b in range(a + 1, lb):
                for h in range(ha):
                    for g in range(hb):
                        row = {"source": f"L{a + 1}H{h + 1}", "reader": f"L{b + 1}H{g + 1}"}
                        for kind in COMPOSITION_KINDS:
                            s = float(self.raw[kind][a, h, b, g])
                            row[kind] = s
                            row[f"{kind}_adjusted"] = s - self.baseline[kind]
                        pairs.append(row)
        return {
            "baseline": dict(self.baseline),
            "samples": self.samples,
            "seed": self.seed,
            "top": {kind: [p.to_dict() for p in self.top(kind, k)] for kind in COMPOSITION_KINDS},
            "pairs": pairs,
        }


def head_factors(model: LanguageModel) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Every head's factors in float64: ``W_Q, W_K, W_V (L, H, d_h, D)`` (a query head's ``W_K`` and ``W_V``
    those of its key/value group) and ``W_O (L, H, D, d_h)`` (its columns of the output projection)."""
    wq, wk, wv, wo = [], [], [], []
    for block in model.layers:
        attn = block.self_attn
        nh, dh, g = attn.n_heads, attn.head_dim, attn.groups
        wq.append(attn.q_proj.weight.detach().double().view(nh, dh, -1))
        wk.append(attn.k_proj.weight.detach().double().view(-1, dh, attn.d_model).repeat_interleave(g, 0))
        wv.append(attn.v_proj.weight.detach().double().view(-1, dh, attn.d_model).repeat_interleave(g, 0))
        wo.append(attn.o_proj.weight.detach().double().view(attn.d_model, nh, dh).permute(1, 0, 2))
    return torch.stack(wq), torch.stack(wk), torch.stack(wv), torch.stack(wo)


def _gram(w: Tensor) -> Tensor:
    """``W Wᵀ`` over the last two dimensions: ``(..., m, n) -> (..., m, m)``."""
    return w @ w.transpose(-1, -2)


def _product_norms(left: Tensor, middle: Tensor, right: Tensor) -> Tensor:
    """``‖L C R‖_F`` from ``left = LᵀL (Hb, d, d)``, ``middle = C (Ha, Hb, d, d)`` and ``right = R Rᵀ (Ha, d, d)``:
    ``(Ha, Hb)``."""
    lc = torch.einsum("bxy,abyz->abxz", left, middle)  # (Ha, Hb, d, d)
    cr = torch.einsum("abxy,ayz->abxz", middle, right)
    return (lc * cr).sum((-1, -2)).clamp_min(0).sqrt()


def _kind_scores(wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, a: int, b: int) -> dict[str, Tensor]:
    """Each kind's ``(Ha, Hb)`` scores of layer ``a``'s heads into layer ``b``'s, from the stacked factors."""
    gv_a = _gram(wv[a])  # (Ha, d, d): W_V W_Vᵀ of the source heads
    ov_a = (_gram(wo[a].transpose(-1, -2)) * gv_a).sum((-1, -2)).sqrt()  # (Ha,): ‖W_O W_V‖_F
    gq, gk = _gram(wq[b]), _gram(wk[b])  # (Hb, d, d)
    qk_b = (gq * gk).sum((-1, -2)).sqrt()  # (Hb,): ‖W_Qᵀ W_K‖_F
    go_b = _gram(wo[b].transpose(-1, -2))  # (Hb, d, d): W_Oᵀ W_O
    ov_b = (go_b * _gram(wv[b])).sum((-1, -2)).sqrt()
    mid = {  # C = the inner d_h × d_h factor of each product, (Ha, Hb, d, d)
        "q": torch.einsum("bxd,adz->abxz", wq[b], wo[a]),  # W_QKᵀ W_OV = W_Kᵀ (W_Q W_O) W_V
        "k": torch.einsum("bxd,adz->abxz", wk[b], wo[a]),  # W_QK W_OV = W_Qᵀ (W_K W_O) W_V
        "v": torch.einsum("bxd,adz->abxz", wv[b], wo[a]),  # W_OV^b W_OV^a = W_O (W_V W_O) W_V
    }
    left = {"q": gk, "k": gq, "v": go_b}
    reader = {"q": qk_b, "k": qk_b, "v": ov_b}
    return {
        kind: _product_norms(left[kind], mid[kind], gv_a) / (ov_a[:, None] * reader[kind][None, :])
        for kind in COMPOSITION_KINDS
    }


def random_baseline(d_model: int, head_dim: int, samples: int, seed: int) -> dict[str, float]:
    """Each kind's mean score of random heads with Gaussian factors of these shapes: ``samples`` source heads
    and ``samples`` reader heads drawn with ``seed``, the mean over their ``samples²`` pairs."""
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    wq, wk, wv = (draw(2, samples, head_dim, d_model) for _ in range(3))  # layer 0 the sources, 1 the readers
    wo = draw(2, samples, d_model, head_dim)
    got = _kind_scores(wq, wk, wv, wo, 0, 1)  # (S, S): every source with every reader, each pair a fair draw
    return {kind: float(got[kind].mean()) for kind in COMPOSITION_KINDS}


@torch.no_grad()
def composition_scores(model: LanguageModel, *, samples: int = 16, seed: int = 0) -> CompositionScores:
    """Q-, K- and V-composition (module docstring) of every head of every layer into every head of every later
    layer of ``model``, raw and less the mean of ``samples`` random draws (``seed``)."""
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model must be an attnkit LanguageModel, got {type(model).__name__}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an int >= 1, got {samples!r}")
    wq, wk, wv, wo = head_factors(model)  # (L, H, d_h, D) ×3, (L, H, D, d_h)
    n_layers, n_heads, dh, d = wq.shape
    raw = {kind: torch.full((n_layers, n_heads, n_layers, n_heads), math.nan, dtype=torch.float64) for kind in "qkv"}
    for a in range(n_layers):
        for b in range(a + 1, n_layers):
            for kind, got in _kind_scores(wq, wk, wv, wo, a, b).items():
                raw[kind][a, :, b, :] = got  # (Ha, Hb)
    return CompositionScores(raw, random_baseline(d, dh, samples, seed), samples, seed)
