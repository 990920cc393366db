"""Linear layers prepared once for many calls, on the CPU: packed for oneDNN's GEMM in float32
(:func:`packed_linear`) or quantized to int8 (:func:`int8_linear`).

Both compute ``y = x Wᵀ + b`` for a fixed ``W (out, in)`` and ``b (out,)``. They sit at the bottom of the
layer order because two layers above use them: the decoder's output layer
(:mod:`attnkit.decoding.output_layer`) and the int8 query/key/value projections of multi-head attention
(:meth:`attnkit.attention.multihead.MultiheadAttention.quantize_projections_int8`).

* **Packed weights.** On the CPU in float32 the projection runs through oneDNN with the weight
  reordered once into its blocked layout (``torch.ops.mkldnn``, the path ``torch.compile``'s
  weight freezing takes for a constant linear layer), which is faster than ``F.linear`` (MKL) on the
  output layer's shapes on an AMD EPYC (measured in benchmarks/RESULTS.md, section "RNNsearch against
  OpenNMT-py", item "The output layer packed for oneDNN"), with float32 arithmetic; elsewhere, or when
  autograd is on, it is ``F.linear``.
* **int8.** The weight is quantized once (one scale per output row) and the input per call
  (PyTorch's dynamic quantized linear, fbgemm on x86).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["int8_linear", "packed_linear"]


def _has_onednn_linear() -> bool:
    try:
        return (
            torch.backends.mkldnn.is_available()
            and callable(torch.ops.mkldnn._linear_pointwise)
            and callable(torch.ops.mkldnn._reorder_linear_weight)
        )
    except (AttributeError, RuntimeError):
        return False


_ONEDNN_LINEAR = _has_onednn_linear()


def packed_linear(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """``x -> x @ weight.T + bias`` for many calls with the same weight: ``weight`` reordered once
    for oneDNN on the CPU in float32 (without autograd), ``F.linear`` otherwise."""
    if (
        _ONEDNN_LINEAR
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
    ):
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        except RuntimeError:  # an oneDNN build that cannot pack this weight: the plain layer
            packed = None
        if packed is not None:

            def linear(x: Tensor) -> Tensor:
                if torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu":
                    return F.linear(x, weight, bias)
                return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")

            return linear
    return lambda x: F.linear(x, weight, bias)


def int8_linear(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """``x -> x @ weight.T + bias`` with ``weight`` quantized to int8 once (one scale per row) and
    ``x`` quantized per call (PyTorch's dynamic quantized linear, fbgemm on x86): the output layer
    of a model placed with ``precision="int8"`` (:func:`attnkit.device.quantize_int8`)."""
    with warnings.catch_warnings():  # torch.ao.quantization warns that torchao succeeds it
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    with warnings.catch_warnings():  # torch 2.10+ marks its quantized tensors deprecated
        warnings.simplefilter("ignore")
        return quantize_dynamic(
            torch.nn.Sequential(layer).eval(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )[0]
