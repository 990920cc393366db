"""A decoder-only model cut for the shared-forward gradient engine
(:class:`attnkit.attribution.gradients.SplitForward`): every attributed token's log-probability read off
one forward pass over the text.

In a causal model position ``t`` reads only the inputs ``x_≤t``, so one forward pass over the inputs
``x (n − 1, E)`` gives ``f_t(x) = log p(ids[P + t] | x_≤P+t−1)`` for every attributed token ``t`` at once,
and the gradient of token ``t``'s log-probability is the backward of that same graph from its own
position (the cotangent zero elsewhere). The engine runs one forward pass per interpolation point (per
group of tokens, each group to its own last position) and one backward per token over the retained graph:
``1 + G`` passes for ``G`` tokens instead of a forward and a backward per token (``2 G``), with the numbers
of the per-token path to float rounding. Integrated gradients' interpolation points are batched into the
forward pass up to the memory bound of :func:`attnkit.attribution.generation.row_batch`.

The features cut here are the model's own logits at the attributed positions (``logits_to_keep`` where the
model takes it), so whatever a family does after its last block (a final norm, logit soft-capping, a logit
scale) is the model's own code.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .gradients import SplitForward

__all__ = ["lm_split"]


def lm_split(sa, ids: list[int], prompt_len: int, contrast_id: int | None, x: Tensor, seen: dict) -> SplitForward:
    """The shared-forward cut of decoder-only model ``sa`` (a
    :class:`~attnkit.hf.self_attention.SelfAttentionModel`) for the tokens ``ids[P:]`` (``P = prompt_len``):
    column ``t`` is token ``ids[P + t]``, predicted at input position ``P − 1 + t``; ``x (n − 1, E)`` the
    input embeddings. ``features(rows (N, n − 1, E), length) -> (N, length, V)``: the logits of columns
    ``0..length − 1``, the model run on the first ``P − 1 + length`` inputs only; ``log_probs(h) -> (N,
    L)``: each column's ``log p`` of its token (minus that of ``contrast_id``, contrastive attribution).
    ``seen["logits"]`` receives the real input's logits ``(G, V)`` (detached) when a pass runs on it, so the
    step scores need no pass of their own."""
    device = x.device
    dtype = next(sa.model.parameters()).dtype
    start = prompt_len - 1  # the input position of column 0
    n_gen = len(ids) - prompt_len
    wanted = torch.tensor(ids[prompt_len:], device=device)  # (G,)

    def features(rows: Tensor, length: int) -> Tensor:  # (N, n-1, E) -> (N, length, V)
        logits = sa.logits_from_embeddings(rows[:, : start + length].to(dtype), length)  # (N, length, V)
        if rows.shape[0] == 1 and length == n_gen and torch.equal(rows[0], x):
            seen["logits"] = logits[0].detach()
        return logits.to(torch.promote_types(logits.dtype, torch.float32))

    def log_probs(h: Tensor) -> Tensor:  # (N, L, V) -> (N, L)
        lp = torch.log_softmax(h, dim=-1)
        value = lp.gather(-1, wanted[None, : h.shape[1], None].expand(h.shape[0], -1, -1))[..., 0]
        return value if contrast_id is None else value - lp[..., contrast_id]

    return SplitForward(features, log_probs, vmap=False)
