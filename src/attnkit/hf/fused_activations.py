"""A model's tanh-approximated GELU run by torch's own kernel while attnkit computes attributions.

GPT-2 (and the families that copy its MLP) computes ``gelu_new``, ``0.5 x (1 + tanh(√(2/π) (x + 0.044715
x³))))`` (Hendrycks & Gimpel 2016, the tanh approximation), as seven elementwise tensor operations
(``transformers.activations.NewGELUActivation``; ``FastGELUActivation`` likewise): under autograd each
keeps its own ``(n, 4 d)`` intermediate for the backward pass and each runs as a pass over memory, which
on a CPU is a large share of a gradient attribution's memory and a tenth of its time. ``transformers``'
own ``GELUTanh`` computes the same function in one kernel (``torch.nn.functional.gelu(x,
approximate="tanh")``), equal to float rounding; :func:`fused_gelu` swaps it in for the duration of a
``with`` block and puts the model's own modules back after.
"""

from __future__ import annotations

from contextlib import contextmanager

from torch import nn

__all__ = ["fused_gelu"]


def _composite_classes() -> tuple[type, ...]:
    from transformers.activations import FastGELUActivation, NewGELUActivation

    return (NewGELUActivation, FastGELUActivation)


@contextmanager
def fused_gelu(model: nn.Module):
    """While active, every ``NewGELUActivation``/``FastGELUActivation`` module of ``model`` is
    ``transformers.activations.GELUTanh`` (the same function, one kernel); restored on exit, also on error."""
    from transformers.activations import GELUTanh

    composite = _composite_classes()
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) in composite:
                    swapped.append((parent, name, child))
                    setattr(parent, name, GELUTanh())
        yield model
    finally:
        for parent, name, child in reversed(swapped):
            setattr(parent, name, child)
