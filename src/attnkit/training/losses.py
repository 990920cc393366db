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

    ``logits`` (B, T, V) unnormalised; ``target`` (B, T) long. It is
    ``F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad_id,
    label_smoothing=smoothing, reduction="sum")``: the target gets ``1 - smoothing`` and the
    smoothing mass is spread uniformly over all V classes (Szegedy et al. 2016),
    ``loss_t = -(1 - ε) log p(y_t) - ε/V Σ_v log p(v)``. Computed in float32 at least, so fp16/bf16
    logits do not lose the sum.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(
            f"label_smoothed_nll: logits must be a (B, T, V) tensor, got shape {getattr(logits, 'shape', None)}"
        )
    if not isinstance(target, torch.Tensor) or tuple(target.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"label_smoothed_nll: target must have shape (B, T) = {tuple(logits.shape[:2])}, got {getattr(target, 'shape', None)}"
        )
    if target.dtype != torch.long:
        raise TypeError(f"label_smoothed_nll: target must be torch.long, got {target.dtype}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label_smoothed_nll: smoothing must be in [0, 1), got {smoothing}")
    flat = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()
    mask = None if pad_id is None else target.ne(pad_id)
    # torch's fused kernel: one log-softmax, no (B, T, V) gather/mean temporaries of our own
    loss = F.cross_entropy(
        flat,
        target.reshape(-1),
        ignore_index=-100 if pad_id is None else pad_id,
        label_smoothing=smoothing,
        reduction="sum",
    )
    return loss, target.numel() if mask is None else int(mask.sum())
