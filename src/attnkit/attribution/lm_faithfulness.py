"""How faithful a decoder-only model's token attributions are: deletion and insertion curves of each
predicted token's log-probability, against random orders, and a randomised-model sanity check.

For every text, each next token is explained by teacher forcing (:func:`~attnkit.attribution.generation.explain_generation`
with ``forced=True``): row ``t`` attributes ``log p(x_{t+1} | x_≤t)`` to the tokens ``x_0 … x_t``. Its
candidates are those tokens less the tokenizer's special tokens (removing ``<s>`` would measure the
attention sink, not the method). A token is **removed** by putting a neutral token in its place (the
tokenizer's ``<unk>``, else its padding or end-of-text token), so positions stay where they were, as in
the deletion scores of the encoder-decoders (:mod:`attnkit.attribution.explanation_quality`).

- **deletion** (Samek et al. 2017; Petsiuk et al. 2018): remove the candidates in the method's order, most
  important first, and record the drop ``d_k = log p_0 − log p_k`` at ``k = round(j·n/10)`` tokens removed,
  ``j = 0 … 10``; the area is the trapezoid rule over the fraction removed ``k/n``. Larger is more faithful.
- **insertion**: start from every candidate removed and put them back in the method's order; the gain
  ``g_k = log p_k − log p_(all removed)``, area as above. Larger is more faithful.
- **random floor**: both areas for ``random_orders`` seeded random orders (their mean): a method is worth
  its cost only above it.
- **sanity** (Adebayo et al. 2018): every parameter of the model re-drawn from a normal with its own mean
  and standard deviation (the last stage of the cascading randomisation), the attributions computed again
  and compared with the trained model's by Spearman rank correlation over each row's candidates (rows with
  at least three), averaged. A method above :data:`SANITY_THRESHOLD` there explains the input, not the
  model; the trained weights are restored afterwards.

The scores are means over every row of every text. Everything is deterministic given ``seed``; the
variant inputs of all orders of a text run once each, batched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..errors import InputError
from .explanation_quality import RANDOM_ORDERS, SANITY_THRESHOLD, spearman
from .generation import explain_generation, forced_ids, row_methods
from .gradients import GRADIENT_METHODS

__all__ = ["DELETION_POINTS", "evaluate_lm_explanations", "format_lm_report"]

#: the curves are read at k = round(j·n / DELETION_POINTS) tokens removed (or inserted), j = 0 … DELETION_POINTS
DELETION_POINTS = 10
#: variant sequences per forward pass
_BATCH = 64


def _neutral_id(sa) -> int:
    """The token put in a removed token's place (the text model's ``neutral_id``: ``<unk>``, else padding,
    else end-of-text)."""
    found = sa.neutral_id
    if found is None:
        raise InputError(f"{sa.source}'s tokenizer has no <unk>, padding or end-of-text token to remove a token with")
    return found


def _candidates(sa, ids: list[int], t: int) -> list[int]:
    """The positions ``0 … t`` of row ``t`` that may be removed: every token but the special ones."""
    special = sa.special_ids
    return [p for p in range(t + 1) if ids[p] not in special]


def _order(scores: np.ndarray, cands: list[int]) -> list[int]:
    """``cands`` most important first by ``scores`` (ties: the earlier position first, a stable sort)."""
    values = scores[cands]
    return [cands[i] for i in np.argsort(-values, kind="stable")]


def _points(n: int) -> list[int]:
    return sorted({round(j * n / DELETION_POINTS) for j in range(DELETION_POINTS + 1)})


@torch.no_grad()
def _log_probs(sa, variants: list[tuple[int, ...]], ids: list[int], asks: list[tuple[int, int]]) -> list[float]:
    """``log p(ids[t + 1] | variant_v[:t + 1])`` for each ``(v, t)`` of ``asks``; a variant is the set of
    positions replaced by the neutral token. Each variant runs once, batched, as far as its last asked row."""
    neutral = _neutral_id(sa)
    device = sa.device
    base = torch.tensor(ids[:-1], device=device)  # (n - 1,)
    rows_of: dict[int, list[int]] = {}
    for v, t in asks:
        rows_of.setdefault(v, []).append(t)
    last = {v: max(ts) for v, ts in rows_of.items()}
    out: dict[tuple[int, int], float] = {}
    order = sorted(last)
    for i in range(0, len(order), _BATCH):
        chunk = order[i : i + _BATCH]
        length = max(last[v] for v in chunk) + 1  # causal: later positions change nothing
        rows = base[:length].repeat(len(chunk), 1)  # (b, length)
        for r, v in enumerate(chunk):
            for p in variants[v]:
                if p < length:
                    rows[r, p] = neutral
        logits = sa.batch_logits(rows)  # (b, length, V)
        lp = torch.log_softmax(logits.double(), dim=-1)
        for r, v in enumerate(chunk):
            for t in rows_of[v]:
                out[v, t] = float(lp[r, t, ids[t + 1]])
    return [out[a] for a in asks]


def _areas(sa, ids: list[int], orders_by_row: dict[int, list[list[int]]]) -> dict[int, list[tuple[float, float]]]:
    """For each row ``t`` and each of its orders, ``(deletion area, insertion area)``."""
    variants: dict[frozenset, int] = {}
    asks: set[tuple[int, int]] = set()
    plan: dict[tuple[int, int], list[tuple[int, int, int]]] = {}  # (row, order) -> [(k, deleted v, inserted v)]
    for t, orders in orders_by_row.items():
        for o, order in enumerate(orders):
            n = len(order)
            everything = frozenset(order)
            for k in _points(n):
                dv = variants.setdefault(frozenset(order[:k]), len(variants))
                iv = variants.setdefault(everything - frozenset(order[:k]), len(variants))
                asks.update({(dv, t), (iv, t)})
                plan.setdefault((t, o), []).append((k, dv, iv))
    listed = sorted(asks)
    by_variant = [tuple(sorted(s)) for s, _ in sorted(variants.items(), key=lambda kv: kv[1])]
    lp = dict(zip(listed, _log_probs(sa, by_variant, ids, listed)))
    out: dict[int, list[tuple[float, float]]] = {}
    for t, orders in orders_by_row.items():
        full = lp[variants[frozenset()], t]
        for o, order in enumerate(orders):
            n = len(order)
            empty = lp[variants[frozenset(order)], t]
            xs, dels, ins = [], [], []
            for k, dv, iv in plan[t, o]:
                xs.append(k / n)
                dels.append(full - lp[dv, t])
                ins.append(lp[iv, t] - empty)
            out.setdefault(t, []).append((float(np.trapezoid(dels, xs)), float(np.trapezoid(ins, xs))))
    return out


def _row_scores(sa, text: str, method: str, **options) -> np.ndarray:
    """``(n − 1, n − 1)``: row ``t`` the method's scores of the tokens ``0 … t`` for token ``t + 1``
    (``options``, the gradient methods' ``steps``/``batch``, go to those methods only)."""
    if method not in GRADIENT_METHODS:
        options = {}
    att = explain_generation(sa, text, method=method, forced=True, **options)
    return att.scores.double().numpy()


def _randomised(sa, seed: int):
    """A context manager: every parameter of ``sa.model`` re-drawn (its own mean and std), restored on exit."""
    from contextlib import contextmanager

    @contextmanager
    def scope():
        params = list(sa.model.parameters())
        saved = [p.detach().clone() for p in params]
        gen = torch.Generator().manual_seed(seed)
        try:
            with torch.no_grad():
                for p in params:
                    std = float(p.float().std()) if p.numel() > 1 else 0.0
                    noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
                    p.copy_((noise * (std if std > 0 else 1.0) + float(p.float().mean())).to(p.dtype))
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)

    return scope()


def evaluate_lm_explanations(
    sa,
    texts: Sequence[str],
    methods: Sequence[str] | None = None,
    *,
    seed: int = 0,
    random_orders: int = RANDOM_ORDERS,
    sanity: bool = True,
    sanity_texts: int | None = None,
    progress: Callable[[str, str], None] | None = None,
    **options,
) -> dict:
    """Score ``methods`` (default: every row method the model has,
    :func:`~attnkit.attribution.generation.row_methods`) of decoder-only model ``sa``
    (:class:`attnkit.hf.self_attention.SelfAttentionModel`) on ``texts`` (see the module docstring).
    ``options`` go to :func:`explain_generation` (``steps``, ``batch``). Returns a JSON-ready report: per
    method ``deletion_area``, ``insertion_area``, ``sanity_spearman`` (None without ``sanity``),
    ``sanity_flagged`` and ``seconds`` (the attributions' own time), the sanity check on the first
    ``sanity_texts`` texts (default: all); and ``random_deletion_area`` /
    ``random_insertion_area``, the floors."""
    if not getattr(sa, "can_generate", False):
        raise InputError(
            f"{sa.source} is not a decoder-only language model: its explanations are scored per next token"
        )
    if isinstance(texts, str):
        raise InputError("texts must be a list of texts, not one str")
    texts = list(texts)
    if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise InputError("texts must be one or more non-empty texts")
    names = list(row_methods(sa) if methods is None else methods)
    if not names:
        raise InputError("methods must name at least one method")
    if not isinstance(random_orders, int) or random_orders < 1:
        raise InputError(f"random_orders must be an int >= 1, got {random_orders!r}")
    rng = np.random.default_rng(seed)
    per_method: dict[str, dict[str, list[float]]] = {m: {"del": [], "ins": [], "rho": []} for m in names}
    seconds = dict.fromkeys(names, 0.0)
    random_del: list[float] = []
    random_ins: list[float] = []
    if sanity_texts is not None and (not isinstance(sanity_texts, int) or sanity_texts < 1):
        raise InputError(f"sanity_texts must be an int >= 1, got {sanity_texts!r}")
    for number, text in enumerate(texts):
        ids, _ = forced_ids(sa, text)
        rows = {t: _candidates(sa, ids, t) for t in range(len(ids) - 1)}
        rows = {t: c for t, c in rows.items() if c}  # a row of only special tokens has nothing to remove
        if not rows:
            continue
        trained: dict[str, np.ndarray] = {}
        orders: dict[int, list[list[int]]] = {t: [] for t in rows}
        for m in names:
            if progress:
                progress(m, f"attributions of {len(ids) - 1} tokens")
            t0 = time.perf_counter()
            trained[m] = _row_scores(sa, text, m, **options)
            seconds[m] += time.perf_counter() - t0
            for t, cands in rows.items():
                orders[t].append(_order(trained[m][t], cands))
        for t, cands in rows.items():
            for _ in range(random_orders):
                orders[t].append([cands[i] for i in rng.permutation(len(cands))])
        areas = _areas(sa, ids, orders)
        for t in rows:
            for i, m in enumerate(names):
                per_method[m]["del"].append(areas[t][i][0])
                per_method[m]["ins"].append(areas[t][i][1])
            rand = areas[t][len(names) :]
            random_del.append(float(np.mean([a for a, _ in rand])))
            random_ins.append(float(np.mean([b for _, b in rand])))
        if sanity and (sanity_texts is None or number < sanity_texts):
            with _randomised(sa, seed):
                for m in names:
                    if progress:
                        progress(m, "the randomised model's attributions")
                    rand_scores = _row_scores(sa, text, m, **options)
                    for t, cands in rows.items():
                        if len(cands) >= 3:
                            rho = spearman(trained[m][t][cands], rand_scores[t][cands])
                            if not np.isnan(rho):
                                per_method[m]["rho"].append(rho)
    if not random_del:
        raise InputError("the texts hold no token to remove (only special tokens)")
    report = {
        "model": sa.source,
        "texts": len(texts),
        "rows": len(random_del),
        "seed": seed,
        "random_orders": random_orders,
        "random_deletion_area": round(float(np.mean(random_del)), 6),
        "random_insertion_area": round(float(np.mean(random_ins)), 6),
        "methods": {},
    }
    for m in names:
        got = per_method[m]
        rho = round(float(np.mean(got["rho"])), 6) if got["rho"] else None
        report["methods"][m] = {
            "deletion_area": round(float(np.mean(got["del"])), 6),
            "insertion_area": round(float(np.mean(got["ins"])), 6),
            "sanity_spearman": rho,
            "sanity_flagged": None if rho is None else bool(rho > SANITY_THRESHOLD),
            "seconds": round(seconds[m], 4),
        }
    return report


def format_lm_report(report: dict) -> str:
    """The report as a table: one row per method, the random floor last."""
    lines = [
        f"{report['model']}: {report['rows']} predicted tokens of {report['texts']} texts",
        f"{'method':<22} {'deletion':>9} {'insertion':>10} {'sanity ρ':>9} {'seconds':>8}",
    ]
    for m, r in report["methods"].items():
        rho = (
            "-"
            if r["sanity_spearman"] is None
            else f"{r['sanity_spearman']:.3f}" + ("!" if r["sanity_flagged"] else "")
        )
        lines.append(f"{m:<22} {r['deletion_area']:>9.4f} {r['insertion_area']:>10.4f} {rho:>9} {r['seconds']:>8.2f}")
    lines.append(
        f"{'random order':<22} {report['random_deletion_area']:>9.4f} {report['random_insertion_area']:>10.4f}"
    )
    return "\n".join(lines)
