"""Greedy and batched beam search, shared by every attnkit model that generates.

A model generates by implementing three methods (the :class:`IncrementalDecoder` protocol):

``state = model.start(**inputs)``
    Encode the source once. ``inputs`` is whatever the model needs (``src``, ``src_lengths``;
    or image ``features``); its first tensor value must be batch-first, which tells the search
    the batch size B. ``state`` is any object the model understands (tensors, tuples, dicts).

``log_probs, state, attn = model.step(prev_tokens, state)``
    One decoder step for every row: ``prev_tokens`` (R,) long is each row's previous token
    (``bos_id`` at the first step); returns ``log_probs`` (R, V), already log-softmaxed, the new
    state, and ``attn`` (R, Nk), this step's attention weights over the Nk source positions (or
    None). The step must treat rows independently. Beam search's first step has one row per
    sentence (every beam starts from bos); it then expands them into K beams each with ``reorder``.

``state = model.reorder(state, index)``
    Select rows: ``index`` (R',) long; row i of the result is row ``index[i]`` of ``state``
    (``index_select`` along the batch dimension of every tensor in the state). Beam search uses
    it to expand B sentences to B*K beams, to follow back-pointers, and to drop finished
    sentences. Models keep a typed state (a dataclass of tensors, caches, ints) and implement
    ``reorder`` with :func:`reorder_state`, which maps ``index_select`` over it.

    Optionally ``model.reorder(state, index, beams_only=True)``: beam search's promise that
    ``index`` only moves rows among the beams of one sentence and keeps every sentence in place.
    What depends on the source alone (the encoder output, its mask, cross-attention keys) is then
    the same before and after, and a model may keep it instead of copying it: at every step but the
    first and those where sentences finish, that copy is most of the reorder (``B*K x S x D``).
    :func:`reorder_state` does this for dataclass fields marked :data:`PER_SOURCE` and for objects
    whose ``per_source`` attribute is true. A model whose ``reorder`` has no ``beams_only`` keyword
    is always called without it.

Results are :class:`Hypothesis` objects: ``tokens`` without bos/eos, ``score`` the summed
log-probability (including eos when finished), ``attention`` (len(tokens), Nk) with row t the
attention of the step that produced ``tokens[t]`` (None unless ``return_attention``), and
``finished`` (False when ``max_len`` steps ended it before eos).

Both searches run under ``torch.no_grad``; put the model in eval mode first (dropout).
``max_len`` bounds the number of decoder steps, so a hypothesis has at most ``max_len`` tokens
(at most ``max_len - 1`` plus eos when finished). Beam search ranks hypotheses by
``score / lp(length)`` with the GNMT length penalty ``lp = ((5 + length) / 6) ** alpha``
(Wu et al. 2016), where ``length`` counts the eos; ``alpha = 0`` ranks by raw score.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from ..checks import POSITIVE_INT, check

__all__ = [
    "PER_SOURCE",
    "Hypothesis",
    "IncrementalDecoder",
    "beam_search",
    "gnmt_length_penalty",
    "greedy_search",
    "reorder_state",
    "row_argmax",
    "search",
]

#: Dataclass field metadata of a decoder state field that depends on the source alone (the same rows
#: for every beam of a sentence): ``memory: Tensor = field(metadata=PER_SOURCE)``. See :func:`reorder_state`.
PER_SOURCE = {"per_source": True}


@runtime_checkable
class IncrementalDecoder(Protocol):
    """What a model implements to be decoded by :func:`greedy_search` and :func:`beam_search`."""

    def start(self, **inputs: Any) -> Any:
        """Encode the inputs once; return the initial decoder state for B rows."""
        ...

    def step(self, prev_tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
        """(R,) previous tokens -> ((R, V) log-probs, new state, (R, Nk) attention or None)."""
        ...

    def reorder(self, state: Any, index: torch.Tensor) -> Any:
        """Rows ``index`` (R',) of ``state``."""
        ...


def reorder_state(state: Any, index: torch.Tensor, *, beams_only: bool = False) -> Any:
    """Rows ``index`` of every batch-first tensor in ``state``, in new containers.

    Walks dataclasses, named tuples, tuples, lists and dicts; anything with an ``index_select``
    method (tensors, :class:`attnkit.attention.KVCache`) is reordered along dimension 0; other
    values (ints, strings, ``None``) are kept. The old state is left untouched, so beam search
    may still read it.

    ``beams_only``: ``index`` moves rows only among the beams of each sentence (see the module
    docstring), so what depends on the source alone is kept, shared, not copied: dataclass fields
    with :data:`PER_SOURCE` metadata and objects with a true ``per_source`` attribute (a static
    :class:`~attnkit.attention.KVCache`). Those are never modified in place, so sharing is safe.
    """
    if beams_only and getattr(state, "per_source", False):
        return state
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index)
    if hasattr(state, "index_select"):
        return state.index_select(index)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(
            state,
            **{
                f.name: getattr(state, f.name)
                if beams_only and f.metadata.get("per_source")
                else reorder_state(getattr(state, f.name), index, beams_only=beams_only)
                for f in dataclasses.fields(state)
                if f.init
            },
        )
    if isinstance(state, tuple):
        items = [reorder_state(v, index, beams_only=beams_only) for v in state]
        return type(state)(*items) if hasattr(state, "_fields") else tuple(items)
    if isinstance(state, list):
        return [reorder_state(v, index, beams_only=beams_only) for v in state]
    if isinstance(state, dict):
        return {k: reorder_state(v, index, beams_only=beams_only) for k, v in state.items()}
    return state


def takes_beams_only(model: Any) -> bool:
    """Whether ``model.reorder`` accepts the optional ``beams_only`` keyword."""
    try:
        params = inspect.signature(model.reorder).parameters
    except (TypeError, ValueError):
        return False
    return "beams_only" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


@dataclass
class Hypothesis:
    """One decoded sequence (see the module docstring for the meaning of each field)."""

    tokens: list[int]
    score: float
    attention: torch.Tensor | None = None
    finished: bool = True

    def penalized_score(self, alpha: float) -> float:
        """``score / gnmt_length_penalty(length, alpha)``, length counting eos when finished."""
        return self.score / gnmt_length_penalty(len(self.tokens) + int(self.finished), alpha)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (1.0 when alpha is 0)."""
    return ((5.0 + length) / 6.0) ** alpha if alpha else 1.0


def _check_model(model: Any) -> None:
    for name in ("start", "step", "reorder"):
        if not callable(getattr(model, name, None)):
            raise TypeError(
                f"model must implement the IncrementalDecoder protocol; {type(model).__name__} has no {name}()"
            )


def _batch_size(inputs: Mapping[str, Any]) -> tuple[int, torch.device]:
    if not isinstance(inputs, Mapping):
        raise TypeError(f"inputs must be a dict of keyword arguments for model.start, got {type(inputs).__name__}")
    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            return v.size(0), v.device
    raise ValueError("inputs must contain at least one batch-first tensor (it gives the batch size)")


def _check_step(log_probs: Any, attn: Any, rows: int) -> None:
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 2 or log_probs.size(0) != rows:
        raise ValueError(
            f"model.step must return log_probs of shape ({rows}, V), got {getattr(log_probs, 'shape', type(log_probs))}"
        )
    if attn is not None and (not isinstance(attn, torch.Tensor) or attn.dim() != 2 or attn.size(0) != rows):
        raise ValueError(
            f"model.step must return attn of shape ({rows}, Nk) or None, got {getattr(attn, 'shape', None)}"
        )


@torch.no_grad()
def greedy_search(
    model: IncrementalDecoder,
    inputs: Mapping[str, Any],
    *,
    bos_id: int,
    eos_id: int,
    max_len: int,
    return_attention: bool = False,
    pick: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[Hypothesis]:
    """Pick the most probable next token at every step, for the whole batch at once.

    Returns one :class:`Hypothesis` per batch element. A sentence that produces eos leaves the
    batch (``model.reorder`` keeps the other rows), so the later steps decode only the sentences
    still going; the search stops when none is left or after ``max_len`` steps. ``pick``: how a row's
    next token is chosen from the step's ``(R, V)`` log-probabilities, the argmax by default, or a
    :class:`attnkit.decoding.sampling.Sampling` (a token's score is its log-probability either way).
    """
    pick = row_argmax if pick is None else pick
    _check_model(model)
    check("max_len", max_len, POSITIVE_INT)
    B, device = _batch_size(inputs)
    state = model.start(**inputs)
    prev = torch.full((B,), bos_id, dtype=torch.long, device=device)
    scores = torch.zeros(B, dtype=torch.float32, device=device)
    finished = [False] * B
    live = list(range(B))  # the batch element of each row the model still decodes
    rows = torch.arange(B, device=device)
    tokens: list[list[int]] = [[] for _ in range(B)]
    attns: list[list[torch.Tensor]] = [[] for _ in range(B)]
    n_keys = None
    for _ in range(max_len):
        log_probs, state, attn = model.step(prev, state)
        _check_step(log_probs, attn, len(live))
        log_probs = log_probs.float()
        tok = pick(log_probs)
        gained = log_probs.gather(1, tok.unsqueeze(1)).squeeze(1)
        scores.index_add_(0, rows, gained)  # (R,) into (B,): each live element's score + its token's log-prob
        if attn is not None:
            n_keys = attn.size(-1)
            if return_attention:
                attn = attn.detach().float().cpu()
        for r, (b, t) in enumerate(zip(live, tok.tolist())):
            if t == eos_id:
                finished[b] = True
                continue
            tokens[b].append(t)
            if return_attention and attn is not None:
                attns[b].append(attn[r])
        ended = tok.eq(eos_id)
        if bool(ended.all()):
            break
        if bool(ended.any()):  # finished sentences leave the batch: the next steps decode only the others
            keep = (~ended).nonzero().squeeze(1)
            state = model.reorder(state, keep)
            rows, tok = rows.index_select(0, keep), tok.index_select(0, keep)
            live = [live[i] for i in keep.tolist()]
        prev = tok
    out = []
    for b in range(B):
        att = None
        if return_attention and n_keys is not None:
            att = torch.stack(attns[b]) if attns[b] else torch.zeros(0, n_keys)
        out.append(Hypothesis(tokens[b], float(scores[b]), att, finished[b]))
    return out


@torch.no_grad()
def beam_search(
    model: IncrementalDecoder,
    inputs: Mapping[str, Any],
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    max_len: int,
    length_penalty: float = 0.0,
    n_best: int = 1,
    return_attention: bool = False,
) -> list[list[Hypothesis]]:
    """Batched beam search: all sentences x beams go through one ``model.step`` call per step.

    Each step expands every live beam, finalises the eos candidates that rank among the top
    ``beam_size`` of their sentence, and continues with the best ``beam_size`` non-eos
    candidates. A sentence is finished when it has ``beam_size`` finished hypotheses, or when it
    has ``n_best`` and no live beam can still beat the ``n_best``-th under the length penalty
    (log-probs only decrease a raw score, so ``score / lp(L)`` at the best reachable length
    bounds what a live beam can reach); finished sentences leave the batch. Returns, per
    sentence, up to ``n_best`` hypotheses, best first by penalised score; live beams stand in
    (``finished=False``) only when fewer than ``n_best`` finished within ``max_len`` steps.
    Attention histories follow the back-pointers.
    """
    _check_model(model)
    check("beam_size", beam_size, POSITIVE_INT)
    check("max_len", max_len, POSITIVE_INT)
    check("n_best", n_best, POSITIVE_INT)
    if n_best > beam_size:
        raise ValueError(f"n_best ({n_best}) must be <= beam_size ({beam_size})")
    if not isinstance(length_penalty, (int, float)) or not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
    alpha = float(length_penalty)
    K = beam_size
    B, device = _batch_size(inputs)
    state = model.start(**inputs)  # B rows: the first step expands one row per sentence into K beams
    beams_only_ok = takes_beams_only(model)
    beams = _Beams(B, K, bos_id, device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    # penalised scores of each sentence's finished hypotheses, kept sorted (best first)
    fin_pen: list[list[float]] = [[] for _ in range(B)]

    for t in range(max_len):
        A = len(beams.active)
        log_probs, state, attn = model.step(beams.prev, state)
        _check_step(log_probs, attn, len(beams.prev))
        if not return_attention:
            attn = None
        elif attn is not None:
            attn = attn.detach().float()
        top_s, row, tok = _top_candidates(beams.scores, log_probs, 2 * K)
        is_eos = tok.eq(eos_id)
        _finalise_eos(beams, top_s, row, is_eos, attn, t + 1, alpha, finished, fin_pen)
        # continue with the best K non-eos candidates
        sel_s, sel_j = top_s.masked_fill(is_eos, float("-inf")).topk(K, dim=1)
        keep = _sentences_to_continue(
            beams.active, sel_s[:, 0].tolist(), finished, fin_pen, K, n_best, alpha, t, max_len
        )
        if not keep:
            break
        idx = beams.advance(keep, row.gather(1, sel_j), tok.gather(1, sel_j), sel_s, attn)
        if t + 1 == max_len:  # out of steps: live beams stand in where too few hypotheses finished
            _stand_in_live_beams(beams, finished, n_best)
            break
        if beams_only_ok and len(keep) == A and t > 0:  # every sentence goes on: rows move within its beams only
            state = model.reorder(state, idx, beams_only=True)
        else:
            state = model.reorder(state, idx)

    results = []
    for b in range(B):
        hyps = sorted(finished[b], key=lambda h: (h.finished, h.penalized_score(alpha)), reverse=True)
        results.append(hyps[:n_best])
    return results


def search(
    model: IncrementalDecoder,
    inputs: Mapping[str, Any],
    *,
    beam_size: int = 1,
    bos_id: int,
    eos_id: int,
    max_len: int,
    length_penalty: float = 0.0,
    return_attention: bool = False,
) -> list[Hypothesis]:
    """The best hypothesis for each input: :func:`greedy_search` when ``beam_size`` is 1 (a beam of
    one, without the beam bookkeeping), else the first of :func:`beam_search`'s n-best lists. Every
    caller that lets a user pick the beam goes through here, so the choice is made in one place."""
    check("beam_size", beam_size, POSITIVE_INT)
    if beam_size == 1:
        return greedy_search(
            model, inputs, bos_id=bos_id, eos_id=eos_id, max_len=max_len, return_attention=return_attention
        )
    found = beam_search(
        model,
        inputs,
        beam_size=beam_size,
        bos_id=bos_id,
        eos_id=eos_id,
        max_len=max_len,
        length_penalty=length_penalty,
        return_attention=return_attention,
    )
    return [n_best[0] for n_best in found]


class _Beams:
    """The live beams of beam search: R rows per still-active sentence, R = 1 before the first
    step (every beam would start from bos) and K after it.

    ``active``: the sentence id of each block of R rows; ``scores (A, R)``: raw log-probability of
    each beam (``-inf`` for empty slots); ``tokens (A*R, t)``: each row's tokens so far;
    ``hist (A*R, t, Nk)``: each row's attention history (None without attention); ``prev (A*R,)``:
    each row's last token.
    """

    def __init__(self, batch: int, k: int, bos_id: int, device):
        self.k = k
        self.active = list(range(batch))
        self.scores = torch.zeros(batch, 1, device=device)
        self.tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.hist: torch.Tensor | None = None
        self.prev = torch.full((batch,), bos_id, dtype=torch.long, device=device)

    def history(self, row: int, nk: int) -> torch.Tensor:
        """Row ``row``'s attention so far ``(t, Nk)``, on the CPU."""
        return self.hist[row].cpu() if self.hist is not None else torch.zeros(0, nk)

    def advance(self, keep: list[int], sel_row, sel_tok, sel_s, attn) -> torch.Tensor:
        """Keep sentences ``keep`` and their selected beams; returns the row index for ``reorder``."""
        keep_t = torch.tensor(keep, dtype=torch.long, device=sel_row.device)
        idx = sel_row.index_select(0, keep_t).reshape(-1)
        new_tok = sel_tok.index_select(0, keep_t).reshape(-1)
        self.tokens = torch.cat([self.tokens.index_select(0, idx), new_tok.unsqueeze(1)], dim=1)
        if attn is not None:
            step_att = attn.index_select(0, idx).unsqueeze(1)
            self.hist = step_att if self.hist is None else torch.cat([self.hist.index_select(0, idx), step_att], dim=1)
        self.scores = sel_s.index_select(0, keep_t)
        self.active = [self.active[a] for a in keep]
        self.prev = new_tok
        return idx


#: Beam search's candidate selection looks at the vocabulary in chunks of this many tokens (see
#: :func:`_top_candidates`).
CHUNK = 64


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=1)`` of a ``(R, V)`` float tensor, the same indices (the first maximum of each row;
    a NaN counts as the maximum, as in ``torch.argmax``), found in two stages as :func:`_top_candidates`
    finds its candidates: each :data:`CHUNK` of tokens' maximum, then the first chunk holding the row's
    maximum, then the first maximum inside it. ``torch.argmax`` over a row of the vocabulary does not
    vectorise on the CPU (``amax`` is much faster; measured in benchmarks/RESULTS.md, section "Decoding
    without the start-up"), and greedy search takes one per step."""
    R, V = x.shape
    if V < 2 * CHUNK or V % CHUNK:  # small vocabularies, or a ragged last chunk: one argmax
        return x.argmax(dim=1)
    chunks = x.view(R, V // CHUNK, CHUNK)  # (R, V/CHUNK, CHUNK)
    best = chunks.amax(-1).argmax(-1)  # (R,) the first chunk holding the maximum (or a NaN)
    inner = chunks.gather(1, best.view(R, 1, 1).expand(R, 1, CHUNK)).squeeze(1).argmax(-1)  # (R,)
    return best * CHUNK + inner


def _top_candidates(scores: torch.Tensor, log_probs: torch.Tensor, n: int):
    """Expand every live beam by every token; the best ``n`` (2K, so that K non-eos ones always
    remain) of each sentence: their raw scores ``(A, n)``, best first, the row each extends and its
    token. Fewer than ``n`` real candidates are completed with ``-inf`` ones on real rows.

    Exact, in two stages instead of one ``topk`` over all ``R*V`` candidates of a sentence (faster:
    measured in benchmarks/RESULTS.md, section "RNNsearch against OpenNMT-py"): the best ``n`` candidates
    lie in the ``n`` chunks of :data:`CHUNK` tokens with the highest maxima (any chunk outside them
    has ``n`` chunk maxima, ``n`` candidates, at least as good as its own best), so only those
    ``n * CHUNK`` are ranked. (A vocabulary that is not a multiple of :data:`CHUNK` is padded with
    ``-inf``, a copy per step.)
    """
    A, R = scores.shape
    V = log_probs.size(1)
    lp = log_probs.float()  # (A*R, V)
    nc = -(-V // CHUNK)  # chunks per row
    if V < CHUNK or R * nc < n:  # small vocabularies: one topk over every candidate
        cand = lp.add(scores.reshape(-1, 1)).reshape(A, R * V)  # (A, R*V)
        if n > R * V:
            cand = F.pad(cand, (0, n - R * V), value=float("-inf"))
        top_s, top_i = cand.topk(n, dim=1)
        top_i.clamp_(max=R * V - 1)  # padding: a -inf candidate on a real row
        beam, tok = torch.div(top_i, V, rounding_mode="floor"), top_i % V
    else:
        if nc * CHUNK != V:
            lp = F.pad(lp, (0, nc * CHUNK - V), value=float("-inf"))
        chunks = lp.view(A, R * nc, CHUNK)  # (A, R*nc, CHUNK): every row's chunks, row by row
        best = chunks.amax(-1).view(A, R, nc).add_(scores.unsqueeze(-1)).view(A, R * nc)  # (A, R*nc)
        ch = best.topk(n, dim=1).indices  # (A, n): the chunks holding the best n candidates
        vals = chunks.gather(1, ch.unsqueeze(-1).expand(A, n, CHUNK))  # (A, n, CHUNK)
        vals += scores.gather(1, torch.div(ch, nc, rounding_mode="floor")).unsqueeze(-1)
        top_s, j = vals.view(A, n * CHUNK).topk(n, dim=1)
        chunk = ch.gather(1, torch.div(j, CHUNK, rounding_mode="floor"))  # (A, n) in [0, R*nc)
        beam = torch.div(chunk, nc, rounding_mode="floor")
        tok = ((chunk % nc) * CHUNK + j % CHUNK).clamp_(max=V - 1)  # padding: a -inf candidate
    row = beam + torch.arange(A, device=scores.device).unsqueeze(1) * R
    return top_s, row, tok


def _finalise_eos(
    beams: _Beams,
    top_s,
    row,
    is_eos,
    attn,
    length: int,
    alpha: float,
    finished: list[list[Hypothesis]],
    fin_pen: list[list[float]],
) -> None:
    """Finish the eos candidates that rank among their sentence's top K."""
    fin = is_eos & torch.isfinite(top_s)
    fin[:, beams.k :] = False
    if not bool(fin.any()):
        return
    lp = gnmt_length_penalty(length, alpha)
    for a, j in fin.nonzero().tolist():
        b = beams.active[a]
        r, s = int(row[a, j]), float(top_s[a, j])
        att = beams.history(r, attn.size(-1)) if attn is not None else None
        finished[b].append(Hypothesis(beams.tokens[r].tolist(), s, att, True))
        fin_pen[b].append(s / lp)
        fin_pen[b].sort(reverse=True)


def _sentences_to_continue(
    active: list[int],
    best_live: list[float],
    finished,
    fin_pen,
    k: int,
    n_best: int,
    alpha: float,
    t: int,
    max_len: int,
) -> list[int]:
    """Positions (in ``active``) of the sentences that go on: not yet K finished hypotheses, and a
    live beam could still beat the ``n_best``-th finished one (a live beam finishes at length
    >= t + 2 and its raw score can only fall, so ``score / lp`` at the best reachable length
    bounds it)."""
    keep = []
    for a, b in enumerate(active):
        nf = len(finished[b])
        if best_live[a] == float("-inf") or nf >= k:
            continue
        if nf >= n_best and t + 1 < max_len:
            bound = max(
                best_live[a] / gnmt_length_penalty(t + 2, alpha), best_live[a] / gnmt_length_penalty(max_len, alpha)
            )
            if fin_pen[b][n_best - 1] >= bound:
                continue
        keep.append(a)
    return keep


def _stand_in_live_beams(beams: _Beams, finished: list[list[Hypothesis]], n_best: int) -> None:
    """At ``max_len``: live beams stand in (``finished=False``) where fewer than ``n_best`` finished."""
    for a, b in enumerate(beams.active):
        if len(finished[b]) >= n_best:
            continue
        for k in range(beams.k):
            s = float(beams.scores[a, k])
            if s != float("-inf"):
                r = a * beams.k + k
                att = beams.hist[r].cpu() if beams.hist is not None else None
                finished[b].append(Hypothesis(beams.tokens[r].tolist(), s, att, False))
