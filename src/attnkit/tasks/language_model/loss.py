"""The language model's training loss: mean next-token cross-entropy over a batch of blocks.

``L = -1/(B·T) Σ_b Σ_t log softmax(logits[b, t])[targets[b, t]]``; its exponential is the
perplexity that validation reports. Every position of a block is a target (blocks are cut from a
packed stream, :mod:`.data`, so there is no padding to skip).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["next_token_loss", "next_token_loss_sum", "perplexity"]


def next_token_loss(model, batch: dict) -> torch.Tensor:
    """Mean cross-entropy of ``model`` predicting ``batch["targets"]`` from ``batch["ids"]`` (both (B, T))."""
    ids, targets = batch["ids"], batch["targets"]
    if ids.shape != targets.shape:
        raise ValueError(f"batch ids {tuple(ids.shape)} and targets {tuple(targets.shape)} must have one shape")
    logits = model(ids).logits  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())  # (B·T, V) -> ()


def next_token_loss_sum(model, batch: dict) -> tuple[torch.Tensor, int, dict]:
    """The same loss in the form :class:`~attnkit.training.Trainer` takes: ``(Σ cross-entropy, B·T, {})``;
    the trainer divides the sum by the batch's count (over every rank under torchrun)."""
    ids, targets = batch["ids"], batch["targets"]
    if ids.shape != targets.shape:
        raise ValueError(f"batch ids {tuple(ids.shape)} and targets {tuple(targets.shape)} must have one shape")
    logits = model(ids).logits  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")  # (B·T, V) -> ()
    return loss, targets.numel(), {}


def perplexity(mean_loss: float) -> float:
    """``exp(loss)``, ``inf`` past what a float holds."""
    try:
        return math.exp(mean_loss)
    except OverflowError:
        return math.inf
