"""What each head does: every head of a model scored on the roles the analyses of attention have named,
each role a number in ``[0, 1]``, averaged over real inputs.

A head's roles are read from its attention map ``w (Nq, Nk)`` over each input, query by query (``i``
a query, ``j`` a key; for a causal map query ``i`` sees keys ``0..i``), then pooled over every query of
every input (each query counts once; a query where a role is undefined does not count for it):

- **previous**, **self**, **next** (positional heads, Voita et al. 2019, "Analyzing Multi-Head
  Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned"): the share of queries
  whose most-attended key (``argmax_j w[i, j]``) is at relative offset −1, 0, +1. Voita et al. call a
  head positional when that share is over 90 % for −1 or +1. Self-attention only (a cross-attention's
  query and key positions are in two sentences); ``previous`` skips query 0 and ``next`` the last query,
  which have no such key; a causal map has no ``next``, and its query 0, which sees only itself, counts
  for no role that picks a key.
- **first** (attention sinks, Xiao et al. 2023, "Efficient Streaming Language Models with Attention
  Sinks"): the mean weight on the first key, ``w[i, 0]`` (in a language model the ``<s>`` it reads
  first; in a translator's decoder the ``<s>`` it starts from). A causal map skips query 0, which can
  only attend there.
- **end** (Voita et al.'s heads on the sentence end; Clark et al. 2019's ``[SEP]``): the mean weight on
  the last key, ``w[i, Nk − 1]``, the sentence's last piece (a translator's source has no ``</s>``:
  its last piece, usually the verse's full stop). Bidirectional maps only (encoder self-attention,
  cross-attention): in a causal map only the last query sees the last key.
- **rare** (Voita et al.'s rare-token heads): the share of queries whose most-attended key holds the
  rarest token among the keys the query sees (special tokens never count as the rarest; a query that
  sees fewer than two keys, or no ordinary token, does not count). Rarity is the tokenizer's own
  measure (:func:`piece_rarity`): for attnkit's sentencepiece tokenizers the piece's score, its
  log-probability in the unigram model fitted on the training corpus (lower is rarer; a byte piece, a
  character the vocabulary does not hold, is rarest); for any other tokenizer the token id (higher is
  rarer), as BPE vocabularies (GPT-2, Llama) list their pieces in merge order, the most frequent first.

And for a language model, on ``batch`` seeded rows of ``length`` random tokens repeated twice
(``[r; r]``, :func:`attnkit.models.induction.repeated_random_tokens`, the very rows ``attnkit evaluate
induction`` reads):

- **induction** (Olsson et al. 2022, "In-context Learning and Induction Heads"): the prefix-matching
  score, the mean weight from each token of the second copy to the token right after its first
  occurrence (:func:`attnkit.models.induction.prefix_matching_from_attention`);
- **duplicate**: the mean weight from each token of the second copy to that same token's first
  occurrence (:func:`duplicate_token_from_attention`; Wang et al. 2022's duplicate-token heads).

A translator's heads are scored in each of its three attention types (encoder self-attention, decoder
self-attention, cross-attention) on its held-out verses, teacher-forced with their references, and the
cross-attention head its guided-alignment loss supervised (:func:`attnkit.tasks.translation.guided.guided_head`)
is marked ``guided``. A head's **strongest role** is its highest-scoring role at or above a threshold
(:data:`STRONG`), else none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..models.induction import prefix_matching_from_attention
from .intervention_effects import translator_of

__all__ = [
    "HEAD_ROLES",
    "STRONG",
    "HeadRoleScores",
    "HeadRolesReport",
    "RoleTally",
    "duplicate_token_from_attention",
    "language_model_roles",
    "map_roles",
    "piece_rarity",
    "translator_roles",
]

#: every role, in the order tables show them
HEAD_ROLES = ("previous", "self", "next", "first", "end", "rare", "induction", "duplicate")
#: the default score a role must reach to be a head's strongest role
STRONG = 0.5
#: the attention types of the heads, in the order they are reported, and their names
SITE_NAMES = {
    "encoder": "encoder self-attention",
    "self": "decoder self-attention",
    "cross": "cross-attention",
    "lm": "self-attention",
}


def piece_rarity(tokenizer, vocab_size: int) -> Tensor:
    """``(vocab_size,)`` float64, higher is rarer (see the module docstring): minus each piece's score
    for a tokenizer with :meth:`~attnkit.data.tokenizer.Tokenizer.piece_scores` (attnkit's sentencepiece
    tokenizers), else the token id."""
    scores = getattr(tokenizer, "piece_scores", None)
    if callable(scores):
        got = torch.tensor(scores(), dtype=torch.float64)
        out = torch.full((vocab_size,), math.inf, dtype=torch.float64)
        n = min(vocab_size, len(got))
        out[:n] = -got[:n]
        return out
    return torch.arange(vocab_size, dtype=torch.float64)


def map_roles(
    attn: Tensor,
    *,
    causal: bool,
    positional: bool = True,
    key_rarity: Tensor | None = None,
    key_special: Tensor | None = None,
) -> dict[str, Tensor]:
    """Each role's value at each query of one input's maps ``attn (..., Nq, Nk)`` (any leading dimensions,
    e.g. ``(L, H)``): per role a float64 ``(..., Nq)``, NaN where the role is undefined at that query.
    ``positional=False`` (cross-attention) leaves out previous, self and next; ``causal`` marks query
    ``i`` as seeing keys ``0..i`` only (and leaves out next and end); ``key_rarity (Nk,)`` (higher is
    rarer) and ``key_special (Nk,)`` bool (never the rarest) give the rare-token role, left out without
    them."""
    if not isinstance(attn, Tensor) or attn.dim() < 2:
        raise ValueError("attn must be a (..., Nq, Nk) tensor of attention weights")
    nq, nk = attn.shape[-2:]
    if causal and nq != nk:
        raise ValueError(f"a causal map must be square, got {nq} queries and {nk} keys")
    w = attn.double()
    lead = w.shape[:-2]
    q = torch.arange(nq)
    k = torch.arange(nk)
    nan = torch.full((*lead, nq), math.nan, dtype=torch.float64)
    visible = k[None, :] <= q[:, None] if causal else torch.ones(nq, nk, dtype=torch.bool)  # (Nq, Nk)
    top = w.masked_fill(~visible, -1.0).argmax(-1)  # (..., Nq): the most-attended key
    out: dict[str, Tensor] = {}

    def where(valid: Tensor, value: Tensor) -> Tensor:
        return torch.where(valid.expand_as(value), value, nan)  # (..., Nq)

    seen = visible.sum(-1)  # (Nq,): how many keys each query sees
    if positional:
        for name, offset in (("previous", -1), ("self", 0), ("next", 1)):
            if causal and offset > 0:
                continue
            valid = (q + offset >= 0) & (q + offset < nk) & (seen >= 2)  # (Nq,)
            out[name] = where(valid, (top == q + offset).double())
    out["first"] = where(seen >= 2 if causal else torch.ones(nq, dtype=torch.bool), w[..., 0])
    if not causal:
        out["end"] = w[..., nk - 1].clone()
    if key_rarity is not None:
        rarity = key_rarity.double().reshape(nk)
        special = torch.zeros(nk, dtype=torch.bool) if key_special is None else key_special.bool().reshape(nk)
        cand = visible & ~special  # (Nq, Nk): the keys that may be the rarest
        r = rarity.expand(nq, nk).masked_fill(~cand, -math.inf)
        rarest = cand & (r == r.max(-1, keepdim=True).values)  # (Nq, Nk): every key holding the rarest token
        hit = rarest[q.expand_as(top), top]  # (..., Nq): the most-attended key holds the rarest token
        valid = (seen >= 2) & cand.any(-1)
        out["rare"] = where(valid, hit.double())
    return out


def duplicate_token_from_attention(attn: Tensor | list[Tensor], length: int) -> list[list[float]]:
    """Per layer and head (0-based lists), the duplicate-token score of attention weights ``attn``
    (``(L, B, H, 2·length, 2·length)``, or a list of per-layer ``(B, H, …)``) on rows ``[r; r]``: the mean
    over ``b, j`` of ``attn[l, b, h, length + j, j]``, the weight from each token of the second copy on that
    same token's first occurrence."""
    if len(attn) == 0 or any(not isinstance(w, Tensor) or w.dim() != 4 for w in attn):
        raise ValueError("attn must be per layer (B, H, T, T) attention weights")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1 or 2 * length != attn[0].shape[-1]:
        raise ValueError(f"length must be half the maps' {attn[0].shape[-1]} positions, got {length!r}")
    second = torch.arange(length, 2 * length)
    return [w.double()[:, :, second, second - length].mean(dim=(0, 2)).tolist() for w in attn]  # (H,) each


class RoleTally:
    """Sums and counts of each role per ``(site, layer, head)`` as inputs come, for the mean over every
    query where the role is defined."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, str], Tensor] = {}
        self.counts: dict[tuple[str, str], Tensor] = {}

    def add(self, site: str, roles: dict[str, Tensor]) -> None:
        """``roles``: :func:`map_roles` of one input, each ``(L, H, Nq)``."""
        for role, v in roles.items():
            ok = ~v.isnan()
            s, c = v.nan_to_num(0.0).sum(-1), ok.sum(-1).double()  # (L, H)
            key = (site, role)
            self.sums[key] = self.sums.get(key, 0) + s
            self.counts[key] = self.counts.get(key, 0) + c

    def means(self, site: str, role: str) -> Tensor | None:
        """``(L, H)`` means (NaN where no query counted), or None for a role never measured at ``site``."""
        if (site, role) not in self.sums:
            return None
        return self.sums[site, role] / self.counts[site, role]


@dataclass
class HeadRoleScores:
    """One head's roles: ``site`` (``encoder``, ``self`` or ``cross`` of a translator, ``lm`` of a language
    model), ``layer`` and ``head`` numbered from 1, each role's score (None where not measured)."""

    site: str
    layer: int
    head: int
    scores: dict[str, float | None]
    guided: bool = False

    def strongest(self, threshold: float = STRONG) -> str | None:
        """The highest-scoring role at or above ``threshold`` (ties: the first in :data:`HEAD_ROLES`), or None."""
        got = [(v, -HEAD_ROLES.index(r), r) for r, v in self.scores.items() if v is not None and v >= threshold]
        return max(got)[2] if got else None

    def to_dict(self, threshold: float = STRONG) -> dict:
        return {
            "site": self.site,
            "layer": self.layer,
            "head": self.head,
            **{r: self.scores.get(r) for r in HEAD_ROLES},
            "strongest": self.strongest(threshold),
            "guided": self.guided,
        }


@dataclass
class HeadRolesReport:
    """Every head's roles over ``inputs`` texts (and, for a language model, ``repeated`` rows of ``length``
    random tokens repeated twice); ``roles``: those measured."""

    heads: list[HeadRoleScores]
    inputs: int
    roles: tuple[str, ...]
    repeated: int | None = None
    length: int | None = None
    threshold: float = STRONG
    notes: dict[str, str] = field(default_factory=dict)

    def get(self, site: str, layer: int, head: int) -> HeadRoleScores:
        """The head at ``site``, ``layer``, ``head`` (from 1)."""
        for h in self.heads:
            if (h.site, h.layer, h.head) == (site, layer, head):
                return h
        raise KeyError((site, layer, head))

    def top(self, role: str, site: str | None = None) -> HeadRoleScores:
        """The head that scores highest on ``role`` (at ``site`` when given)."""
        if role not in HEAD_ROLES:
            raise ValueError(f"role must be one of {HEAD_ROLES}, got {role!r}")
        got = [h for h in self.heads if h.scores.get(role) is not None and (site is None or h.site == site)]
        if not got:
            raise ValueError(f"no head has a {role!r} score" + ("" if site is None else f" at site {site!r}"))
        return max(got, key=lambda h: h.scores[role])

    def to_dict(self) -> dict:
        return {
            "inputs": self.inputs,
            "repeated": self.repeated,
            "length": self.length,
            "roles": list(self.roles),
            "threshold": self.threshold,
            "notes": dict(self.notes),
            "heads": [h.to_dict(self.threshold) for h in self.heads],
        }


def _check_threshold(threshold) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    return float(threshold)


def _heads(
    tally: RoleTally, site: str, roles: Sequence[str], extra: dict[str, list[list[float]]], guided=None
) -> list[HeadRoleScores]:
    means = {r: tally.means(site, r) for r in roles}
    shape = next(m.shape for m in means.values() if m is not None)
    out = []
    for li in range(shape[0]):
        for hi in range(shape[1]):
            scores: dict[str, float | None] = {}
            for r in roles:
                if r in extra:
                    scores[r] = float(extra[r][li][hi])
                elif means[r] is None or math.isnan(float(means[r][li, hi])):
                    scores[r] = None
                else:
                    scores[r] = float(means[r][li, hi])
            out.append(HeadRoleScores(site, li + 1, hi + 1, scores, guided == (li + 1, hi + 1)))
    return out


@torch.no_grad()
def language_model_roles(
    text_model,
    texts: Sequence[str],
    *,
    length: int | None = None,
    batch: int = 8,
    seed: int = 0,
    threshold: float = STRONG,
) -> HeadRolesReport:
    """Every head's roles of ``text_model`` (the text-model protocol: attnkit's language model or a Hugging
    Face one, read through ``.self_attention``) over ``texts``, and, for a causal model, induction and
    duplicate-token scores on ``batch`` rows of ``length`` random tokens repeated twice (drawn with ``seed``;
    default ``length``: ``min(context // 2, 64)``)."""
    threshold = _check_threshold(threshold)
    if isinstance(texts, str) or not texts:
        raise ValueError("texts must be a non-empty list of str")
    causal = bool(getattr(text_model, "causal", True))
    specials = sorted(int(i) for i in text_model.special_ids)
    vocab = int(text_model.vocab_size)
    rarity = piece_rarity(text_model.tokenizer, vocab)
    is_special = torch.zeros(vocab, dtype=torch.bool)
    is_special[[i for i in specials if i < vocab]] = True
    tally = RoleTally()
    for text in texts:
        ids, _ = text_model.encode(text)
        attn = text_model.self_attention(ids).attention  # (L, H, N, N)
        key = torch.tensor(ids)
        tally.add("lm", map_roles(attn, causal=causal, key_rarity=rarity[key], key_special=is_special[key]))
    roles = [r for r in HEAD_ROLES if (r in ("induction", "duplicate") and causal) or ("lm", r) in tally.sums]
    extra: dict[str, list[list[float]]] = {}
    notes = {"rare": _rarity_note(text_model.tokenizer)}
    if causal:
        from ..hf.induction import repeated_maps

        attn, length = repeated_maps(text_model, length=length, batch=batch, seed=seed, special_ids=tuple(specials))
        extra["induction"] = prefix_matching_from_attention(attn, length)
        extra["duplicate"] = duplicate_token_from_attention(attn, length)
    else:
        length, batch = None, None
        notes["induction"] = "not measured: an encoder-only model"
    return HeadRolesReport(_heads(tally, "lm", roles, extra), len(texts), tuple(roles), batch, length, threshold, notes)


def _rarity_note(tokenizer) -> str:
    if callable(getattr(tokenizer, "piece_scores", None)):
        return "rarity: the piece's score in the tokenizer's sentencepiece model (unigram log-probability)"
    return "rarity: the token id (BPE vocabularies list frequent pieces first)"


@torch.no_grad()
def translator_roles(
    translator, sources: Sequence[str], references: Sequence[str], *, threshold: float = STRONG, batch_size: int = 16
) -> HeadRolesReport:
    """Every head's roles of ``translator`` (attnkit's Transformer :class:`~attnkit.tasks.translation.Translator`,
    or a :class:`~attnkit.service.Model` of one)
    in its encoder self-attention, decoder self-attention and cross-attention over the pairs ``sources`` →
    ``references`` (teacher-forced, batches of ``batch_size``); the guided-alignment head marked."""
    from ..tasks.translation.guided import guided_head

    translator = translator_of(translator)
    threshold = _check_threshold(threshold)
    if len(sources) != len(references) or not sources:
        raise ValueError("sources and references must be non-empty lists of equal length")
    src_tok, tgt_tok = translator.src_tokenizer, translator.tokenizer
    src_rarity = piece_rarity(src_tok, src_tok.vocab_size)
    tgt_rarity = piece_rarity(tgt_tok, tgt_tok.vocab_size)
    bos = tgt_tok.bos_id
    tally = RoleTally()
    for start in range(0, len(sources), batch_size):
        got = translator.attention_batch(sources[start : start + batch_size], references[start : start + batch_size])
        for ta in got:
            src_ids = torch.tensor([src_tok.piece_to_id(p) for p in ta.source_pieces])
            tgt_ids = [tgt_tok.piece_to_id(p) for p in ta.target_pieces]
            dec_in = torch.tensor([bos, *tgt_ids[:-1]])  # the decoder's inputs: <s>, then the reference
            s_rare, s_special = src_rarity[src_ids], torch.zeros(len(src_ids), dtype=torch.bool)
            d_special = torch.zeros(len(dec_in), dtype=torch.bool)
            d_special[0] = True
            m = ta.maps
            tally.add("encoder", map_roles(m.enc_self, causal=False, key_rarity=s_rare, key_special=s_special))
            tally.add("self", map_roles(m.dec_self, causal=True, key_rarity=tgt_rarity[dec_in], key_special=d_special))
            tally.add(
                "cross",
                map_roles(m.cross, causal=False, positional=False, key_rarity=s_rare, key_special=s_special),
            )
    guided = guided_head(getattr(translator.model, "config", None))
    roles = tuple(r for r in HEAD_ROLES if any((s, r) in tally.sums for s in ("encoder", "self", "cross")))
    heads = []
    for site in ("encoder", "self", "cross"):
        heads += _heads(tally, site, roles, {}, guided[:2] if guided and site == "cross" else None)
    notes = {"rare": _rarity_note(src_tok)}
    if guided:
        notes["guided"] = f"cross-attention layer {guided[0]}, head {guided[1]}: supervised by guided alignment"
    return HeadRolesReport(heads, len(sources), roles, None, None, threshold, notes)
