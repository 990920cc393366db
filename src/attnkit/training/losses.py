"""Token-level losses that return a *sum* and a token count.

The trainer divides the summed loss by the number of real (non-pad) tokens of the whole
(global, under DDP) batch, so every token weighs the same however sentences are batched.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["label_smoothed_nll"]


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, pad_id: int | None, smoothing: float = 0.0
) -> tuple[torch.Tensor, int]:
    """Summed label-smoothed negative log-likelihood over non-pad positions, and their count.

    ``logits`` (B, T, V) unnormalised; ``target`` (B, T) long. Equals
    ``F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad_id,
    label_smoothing=smoothing, reduction="sum")``: the target gets ``1 - smoothing`` and the
    smoothing mass is spread uniformly over all V classes (Szegedy et al. 2016). Computed in
    float32 at least, so fp16/bf16 logits do not lose the sum.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(f"label_smoothed_nll: logits must be a (B, T, V) tensor, got shape {getattr(logits, 'shape', None)}")
    if not isinstance(target, torch.Tensor) or tuple(target.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"label_smoothed_nll: target must have shape (B, T) = {tuple(logits.shape[:2])}, got {getattr(target, 'shape', None)}"
        )
    if target.dtype != torch.long:
        raise TypeError(f"label_smoothed_nll: target must be torch.long, got {target.dtype}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label_smoothed_nll: smoothing must be in [0, 1), got {smoothing}")
    lp = F.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, dim=-1)
    mask = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target.ne(pad_id)
    safe_target = target.masked_fill(~mask, 0)
    nll = -lp.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    loss = (1.0 - smoothing) * nll
    if smoothing > 0:
        loss = loss + smoothing * (-lp.mean(dim=-1))
    loss = loss.masked_fill(~mask, 0.0)
    return loss.sum(), int(mask.sum())
