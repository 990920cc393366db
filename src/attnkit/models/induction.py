"""Induction heads, measured (Olsson et al. 2022, "In-context Learning and Induction Heads").

An induction head completes ``[A][B] … [A] → [B]``: from the current token it attends to the token
that followed the current token's earlier occurrence (prefix matching), and copies it into the
prediction (copying). It is built on a previous-token head in an earlier layer. Measured here, per
layer and head, on a batch of repeated random token sequences ``[r; r]`` (``r`` of ``length`` tokens
drawn from the vocabulary with a seeded generator, special ids excluded; each row without repeats
when the vocabulary allows, so every token of the second half has exactly one earlier occurrence):

- **prefix-matching score**: the mean attention from each token of the second half (position
  ``i = L + j``) to the token right after its earlier occurrence (position ``j + 1``);
- **previous-token score**: the mean attention from each position ``i ≥ 1`` to ``i − 1``;
- **copying score**: the paper's simpler operational version, not its eigenvalue one: for each
  non-special token ``t``, the head's OV circuit applied to ``t`` alone (its embedding through the
  layer's input norm, the head's value and output projections), then the final norm and the
  unembedding, gives logits; the score is the mean over ``t`` of the fraction of the other
  non-special tokens whose logit is below ``t``'s. A head that copies what it attends to scores
  near 1; a random head near 0.5 (chance). Its cost is ``N × V × d_model`` per head for ``N`` tokens
  scored, which a large vocabulary makes slow; ``copying_tokens=n`` scores a seeded sample of ``n`` of
  the tokens instead (each still ranked against every non-special token), an unbiased estimate of
  the same mean.

And for the model, the **in-context-learning score** (Olsson et al.'s): the loss at a late token
minus the loss at an early token of real text, ``L(late) − L(early)``, mean over the batch; negative
when later tokens are predicted better thanks to the context. The paper's positions are 500 and 50;
when the text is shorter (``T ≤ 500``, e.g. Bible verses packed into blocks of ``max_len``) the late
position is ``T − 1`` and the early one a tenth of it (at least 1), the paper's ratio.

Layers and heads are 0-based in the lists; :meth:`InductionScores.to_dict` numbers them from 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from .language_model import LanguageModel

__all__ = [
    "InductionScores",
    "icl_positions",
    "in_context_learning_score",
    "induction_scores",
    "prefix_matching_from_attention",
    "previous_token_from_attention",
    "repeated_random_tokens",
]


@dataclass
class InductionScores:
    """Per layer and head (``[layer][head]``, 0-based here): the three head scores (``copying`` None where
    it was not measured: a Hugging Face model, whose OV circuit attnkit does not read); and the model's
    in-context-learning score (``None`` without text) with the positions it compared."""

    prefix_matching: list[list[float]]
    previous_token: list[list[float]]
    copying: list[list[float]] | None
    length: int
    batch: int
    in_context_learning: float | None = None
    icl_positions: tuple[int, int] | None = field(default=None)

    def best_induction_head(self) -> tuple[int, int, float]:
        """``(layer, head, prefix-matching score)`` of the highest-scoring head, numbered from 1."""
        best = max(
            ((li, hi, s) for li, row in enumerate(self.prefix_matching) for hi, s in enumerate(row)),
            key=lambda x: x[2],
        )
        return best[0] + 1, best[1] + 1, best[2]

    def to_dict(self) -> dict:
        heads = [
            {
                "layer": li + 1,
                "head": hi + 1,
                "prefix_matching": self.prefix_matching[li][hi],
                "previous_token": self.previous_token[li][hi],
                "copying": None if self.copying is None else self.copying[li][hi],
            }
            for li in range(len(self.prefix_matching))
            for hi in range(len(self.prefix_matching[li]))
        ]
        return {
            "heads": heads,
            "length": self.length,
            "batch": self.batch,
            "in_context_learning": self.in_context_learning,
            "icl_positions": None if self.icl_positions is None else list(self.icl_positions),
        }


def repeated_random_tokens(
    vocab_size: int,
    length: int,
    batch: int,
    *,
    generator: torch.Generator | None = None,
    special_ids: tuple[int, ...] = (0, 1, 2, 3),
) -> Tensor:
    """``(batch, 2·length)`` rows ``[r; r]`` of random non-special tokens (without repeats within
    ``r`` when ``vocab_size`` minus the specials is at least ``length``)."""
    for name, value in (("vocab_size", vocab_size), ("length", length), ("batch", batch)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    allowed = torch.tensor([t for t in range(vocab_size) if t not in set(special_ids)], dtype=torch.long)
    if allowed.numel() < 2:
        raise ValueError(f"vocab_size={vocab_size} leaves fewer than 2 non-special tokens")
    if allowed.numel() >= length:
        picks = torch.stack([torch.randperm(allowed.numel(), generator=generator)[:length] for _ in range(batch)])
    else:
        picks = torch.randint(0, allowed.numel(), (batch, length), generator=generator)
    r = allowed[picks]  # (B, L)
    return torch.cat([r, r], dim=1)  # (B, 2L)


def _check_maps(attn, name: str = "attn") -> None:
    if len(attn) == 0 or any(not isinstance(w, Tensor) or w.dim() != 4 or w.shape[-1] != w.shape[-2] for w in attn):
        raise ValueError(
            f"{name} must be per layer (B, H, T, T) attention weights (a list, or a (L, B, H, T, T) tensor)"
        )


def prefix_matching_from_attention(attn: Tensor | list[Tensor], length: int) -> list[list[float]]:
    """Per layer and head (0-based lists), the prefix-matching score of attention weights ``attn``
    (``(L, B, H, 2·length, 2·length)``, or a list of per-layer ``(B, H, 2·length, 2·length)``) computed
    on rows ``[r; r]``: ``mean over b, j of attn[l, b, h, length + j, j + 1]`` for ``j = 0..length − 1``,
    the attention from each second-half token to the token right after its earlier occurrence. Any
    model's maps (attnkit's own, those ``transformers`` computes) go through this one formula."""
    _check_maps(attn)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1 or 2 * length != attn[0].shape[-1]:
        raise ValueError(f"length must be half the maps' {attn[0].shape[-1]} positions, got {length!r}")
    out = []
    for w in attn:
        second = torch.arange(length, 2 * length, device=w.device)  # positions i = L + j
        out.append(
            w.to(torch.promote_types(w.dtype, torch.float32))[:, :, second, second - length + 1]
            .mean(dim=(0, 2))
            .tolist()
        )  # (H,)
    return out


def previous_token_from_attention(attn: Tensor | list[Tensor]) -> list[list[float]]:
    """Per layer and head (0-based lists), the previous-token score of attention weights ``attn``
    (``(L, B, H, T, T)`` or a list of per-layer ``(B, H, T, T)``): ``mean over b, i ≥ 1 of
    attn[l, b, h, i, i − 1]``."""
    _check_maps(attn)
    out = []
    for w in attn:
        pos = torch.arange(1, w.shape[-1], device=w.device)
        out.append(
            w.to(torch.promote_types(w.dtype, torch.float32))[:, :, pos, pos - 1].mean(dim=(0, 2)).tolist()
        )  # (H,)
    return out


def _head_ov_copying(model: LanguageModel, layer: int, tokens: Tensor, scored: Tensor | None = None) -> list[float]:
    """Copying score of every head of ``layer`` (see the module docstring): the mean over the tokens
    ``tokens[scored]`` (default: all of ``tokens``), each ranked against all of ``tokens``."""
    scored = torch.arange(len(tokens), device=tokens.device) if scored is None else scored
    block = model.layers[layer]
    attn = block.self_attn
    x = block.input_layernorm(model.embed_tokens(tokens[scored]))  # (n, D)
    v = attn.v_proj(x).view(len(scored), attn.n_kv_heads, attn.head_dim)  # (n, Hkv, Dh)
    w_o = attn.o_proj.weight.view(attn.d_model, attn.n_heads, attn.head_dim)  # (D, H, Dh)
    scores = []
    for h in range(attn.n_heads):
        out = v[:, h // attn.groups] @ w_o[:, h].T  # (n, D): the head's output for each token alone
        logits = model.lm_head(model.norm(out))[:, tokens]  # (n, N) over the non-special tokens
        own = logits.gather(1, scored.unsqueeze(1))  # (n, 1): each scored token's own logit
        below = (logits < own).float().sum(1) / (len(tokens) - 1)
        scores.append(float(below.mean()))
    return scores


def icl_positions(length: int, early: int = 50, late: int = 500) -> tuple[int, int]:
    """The positions the in-context-learning score compares in a text of ``length`` tokens: the
    paper's ``(50, 500)`` when they fit, else ``(max(1, (length − 1) // 10), length − 1)``."""
    if length < 3:
        raise ValueError(f"the text must hold at least 3 tokens per row for an in-context-learning score, got {length}")
    if late < length and 0 <= early < late:
        return early, late
    late = length - 1
    return max(1, late // 10), late


@torch.no_grad()
def in_context_learning_score(
    model: LanguageModel, text_ids: Tensor, *, early: int = 50, late: int = 500
) -> tuple[float, tuple[int, int]]:
    """``L(late) − L(early)`` on ``text_ids (B, T)``: the next-token cross-entropy at those positions
    (the loss of predicting token ``p + 1`` from tokens ``0..p``), mean over the rows."""
    if not isinstance(text_ids, Tensor) or text_ids.dim() != 2:
        raise ValueError("text_ids must be a (B, T) tensor of token ids")
    at_early, at_late = icl_positions(text_ids.shape[1] - 1, early, late)  # positions with a next token
    logits = model(text_ids).logits.float()  # (B, T, V)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), text_ids[:, 1:], reduction="none")  # (B, T-1)
    return float(loss[:, at_late].mean() - loss[:, at_early].mean()), (at_early, at_late)


@torch.no_grad()
def induction_scores(
    model: LanguageModel,
    *,
    length: int | None = None,
    batch: int = 8,
    seed: int = 0,
    special_ids: tuple[int, ...] = (0, 1, 2, 3),
    text_ids: Tensor | None = None,
    copying_tokens: int | None = None,
) -> InductionScores:
    """Prefix-matching, previous-token and copying scores of every head on repeated random tokens
    (``length`` each half; default ``min(max_len // 2, 64)``), and the in-context-learning score when
    ``text_ids (B, T)`` is given. ``copying_tokens``: score the copying of a sample of that many
    non-special tokens (drawn with ``seed``; default all of them). The model is put in eval mode for the
    measurement and restored."""
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model must be a LanguageModel, got {type(model).__name__}")
    cfg = model.config
    length = min(cfg.max_len // 2, 64) if length is None else length
    if not isinstance(length, int) or length < 2 or 2 * length > cfg.max_len:
        raise ValueError(f"length must be an int in 2..max_len/2={cfg.max_len // 2}, got {length!r}")
    if copying_tokens is not None and (
        isinstance(copying_tokens, bool) or not isinstance(copying_tokens, int) or copying_tokens < 1
    ):
        raise ValueError(f"copying_tokens must be an int >= 1 or None, got {copying_tokens!r}")
    was_training = model.training
    model.eval()
    try:
        gen = torch.Generator().manual_seed(seed)
        device = next(model.parameters()).device
        ids = repeated_random_tokens(cfg.vocab_size, length, batch, generator=gen, special_ids=special_ids).to(device)
        maps = model(ids, need_weights=True).attention  # per layer (B, H, 2L, 2L)
        prefix = prefix_matching_from_attention(maps, length)
        previous = previous_token_from_attention(maps)
        tokens = torch.tensor([t for t in range(cfg.vocab_size) if t not in set(special_ids)], device=device)
        scored = None
        if copying_tokens is not None and copying_tokens < len(tokens):  # drawn after the sequences: they stay
            scored = torch.randperm(len(tokens), generator=gen)[:copying_tokens].sort().values.to(device)
        copying = [_head_ov_copying(model, li, tokens, scored) for li in range(cfg.n_layers)]
        icl, where = None, None
        if text_ids is not None:
            icl, where = in_context_learning_score(model, text_ids.to(device))
    finally:
        model.train(was_training)
    return InductionScores(prefix, previous, copying, length, batch, icl, where)
