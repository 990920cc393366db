"""The language model's training loss: mean next-token cross-entropy over a batch of blocks.

``L = -1/(B·T) Σ_b Σ_t log softmax(logits[b, t])[targets[b, t]]``; its exponential is the
perplexity that validation reports. Every position of a block is a target (blocks are cut from a
packed stream, :mod:`.data`, so there is no padding to skip).

The model returns the output layer's inputs (``features_only``) and
:func:`~attnkit.training.linear_cross_entropy.linear_cross_entropy` projects them onto the vocabulary in
chunks of rows, computing each chunk's loss and logit gradient at once: the same loss (to float32
rounding) without writing, log-softmaxing, zero-filling and re-reading the ``(B·T, V)`` logits, which
is most of what a small model's training step costs beyond its matrix products. Under autocast
(bf16/fp16) the products run in autocast's dtype, the softmax and the loss in float32. A model without
``output_layer`` (not attnkit's) takes the plain ``F.cross_entropy`` over its logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...training.checkpoint import unwrap_model
from ...training.linear_cross_entropy import linear_cross_entropy

__all__ = ["next_token_loss", "next_token_loss_sum", "perplexity"]


def _check(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    ids, targets = batch["ids"], batch["targets"]
    if ids.shape != targets.shape:
        raise ValueError(f"batch ids {tuple(ids.shape)} and targets {tuple(targets.shape)} must have one shape")
    return ids, targets


def _summed_loss(model, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``Σ`` next-token cross-entropy over the batch, through the fused output layer where the model has one."""
    core = unwrap_model(model)  # the model inside DistributedDataParallel
    if not hasattr(core, "output_layer"):
        logits = model(ids).logits  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")  # (B·T, V) -> ()
    features = model(ids, features_only=True).features  # (B, T, D)
    weight, bias = core.output_layer()
    device = features.device.type
    low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    return linear_cross_entropy(
        features.flatten(0, 1), weight, bias, targets.flatten(), matmul_dtype=low
    )  # (B·T, D) -> ()


def next_token_loss(model, batch: dict) -> torch.Tensor:
    """Mean cross-entropy of ``model`` predicting ``batch["targets"]`` from ``batch["ids"]`` (both (B, T))."""
    ids, targets = _check(batch)
    return _summed_loss(model, ids, targets) / max(targets.numel(), 1)


def next_token_loss_sum(model, batch: dict) -> tuple[torch.Tensor, int, dict]:
    """The same loss in the form :class:`~attnkit.training.Trainer` takes: ``(Σ cross-entropy, B·T, {})``;
    the trainer divides the sum by the batch's count (over every rank under torchrun)."""
    ids, targets = _check(batch)
    return _summed_loss(model, ids, targets), targets.numel(), {}


def perplexity(mean_loss: float) -> float:
    """``exp(loss)``, ``inf`` past what a float holds."""
    try:
        return math.exp(mean_loss)
    except OverflowError:
        return math.inf
