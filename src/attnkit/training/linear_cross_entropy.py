"""Fused linear + label-smoothed cross-entropy that never materialises the (N, V) logits.

A decoder's last step is ``logits = hidden @ weight.T + bias`` followed by a cross-entropy.
The logits alone are N·V·4 bytes in float32 (N target tokens of a batch, V the vocabulary), and the
unfused path walks over an (N, V) tensor many times: the matmul writes it, log-softmax
reads and writes it, the loss gathers from it, and backward zero-fills a gradient, scatters
into it, runs the softmax backward and finally the two matmuls.

:func:`linear_cross_entropy` instead walks the rows in chunks of ``chunk_rows`` (the idea of
Liger-Kernel's fused linear cross-entropy and of Cut Cross-Entropy, here with plain torch ops
so it runs on CPU or any device). For each chunk it computes the chunk's logits with one
matmul, their logsumexp and the loss, and at once turns the same buffer, in place, into the
gradient of the logits, ``g = softmax(z) - (1 - ε) onehot(y) - ε / V``, which it pushes
through the linear layer straight away (``grad_hidden[chunk] = g @ weight``,
``grad_weight += g.T @ hidden[chunk]``, ``grad_bias += g.sum(0)``). A chunk's logits stay
in cache; only a (chunk_rows, V) buffer is ever allocated. Backward then just scales the
three saved gradients by the incoming scalar gradient.

Under mixed precision (``matmul_dtype=torch.bfloat16`` or ``float16``, what bf16/fp16 autocast training
passes) the three matrix products run in that dtype, as autocast would run them, while the softmax, the
loss and the bias gradient stay float32: each chunk's logits are computed in the low precision and
widened into the float32 buffer; each chunk's logit gradient is narrowed back for the two gradient
products, and the chunks' shares of the weight gradient are summed in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["linear_cross_entropy"]


def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    *,
    smoothing: float = 0.0,
    chunk_rows: int = 256,
    matmul_dtype: torch.dtype | None = None,
) -> Tensor:
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T + bias``, computed in chunks.

    ``hidden`` (N, E) float, ``weight`` (V, E), ``bias`` (V,) or None, ``target`` (N,) long
    with every id in [0, V) (there is no ignore_index: drop padding rows before calling).
    Returns the scalar sum over rows, the value of
    ``F.cross_entropy(F.linear(hidden, weight, bias), target, label_smoothing=smoothing,
    reduction="sum")``::

        loss_n = -(1 - ε) log p(y_n) - ε/V Σ_v log p(v)
               = lse_n - (1 - ε) z_{n,y_n} - ε/V Σ_v z_{n,v},   lse_n = logsumexp_v z_{n,v}

    and its gradient with respect to the logits, used in the fused backward, is
    ``softmax(z_n) - (1 - ε) onehot(y_n) - ε/V``.

    The (N, V) logits are never materialised: rows are processed ``chunk_rows`` at a time,
    and when gradients are needed they are computed in the same pass as the loss and saved
    for backward (so forward costs about as much as forward + backward of the unfused path,
    and backward is nearly free). Under ``torch.no_grad`` or when no input requires grad only
    the loss is computed. Everything is computed in float32 at least (float64 inputs stay
    float64), with autocast disabled; the loss is returned in that dtype and each gradient in
    its input's own dtype. N = 0 gives a zero loss and zero gradients. ``matmul_dtype`` (``torch.bfloat16``
    or ``torch.float16``; None: the float32 compute dtype) is the dtype of the three matrix products only
    (the module docstring says how); the loss and every gradient are still returned as above.

    Limitation: only first derivatives. The autograd Function is marked
    ``once_differentiable``: its backward returns the saved gradients scaled by the incoming
    gradient, with no graph behind them. Under ``create_graph=True`` (gradient penalties,
    Hessian-vector products) the gradients therefore come back as constants: differentiating
    them again raises when the incoming gradient itself requires grad ("trying to
    differentiate twice ..."), and otherwise they simply do not require grad, so a
    second-order term built from them alone raises, but one added to other differentiable
    terms contributes nothing. Use the unfused ``F.cross_entropy(F.linear(...))`` for that.
    """
    _check_args(hidden, weight, bias, target, smoothing, chunk_rows)
    if matmul_dtype not in (None, torch.bfloat16, torch.float16):
        raise TypeError(
            f"linear_cross_entropy: matmul_dtype must be None, torch.bfloat16 or torch.float16, got {matmul_dtype}"
        )
    inputs = (hidden, weight) if bias is None else (hidden, weight, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _LinearCrossEntropy.apply(hidden, weight, bias, target, float(smoothing), chunk_rows, matmul_dtype)
    loss, _, _, _ = _chunked(
        hidden, weight, bias, target, float(smoothing), chunk_rows, (False, False, False), matmul_dtype
    )
    return loss


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, smoothing, chunk_rows, matmul_dtype):
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
        loss, grad_hidden, grad_weight, grad_bias = _chunked(
            hidden, weight, bias, target, smoothing, chunk_rows, need, matmul_dtype
        )
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        grads = [None if g is None else (g * grad_loss).to(dtype) for g, dtype in zip(ctx.saved_tensors, ctx.dtypes)]
        return grads[0], grads[1], grads[2], None, None, None, None


def _chunked(hidden, weight, bias, target, smoothing, chunk_rows, need, matmul_dtype=None):
    """The chunk loop: loss and, where ``need`` = (hidden, weight, bias) says so, its gradients."""
    need_hidden, need_weight, need_bias = need
    need_any = need_hidden or need_weight or need_bias
    dtype = torch.promote_types(hidden.dtype, weight.dtype)
    if bias is not None:
        dtype = torch.promote_types(dtype, bias.dtype)
    dtype = torch.promote_types(dtype, torch.float32)
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        h = hidden.to(dtype)  # (N, E)
        w = weight.to(dtype)  # (V, E)
        b = None if bias is None else bias.to(dtype)  # (V,)
        N, V = h.shape[0], w.shape[0]
        keep = 1.0 - smoothing
        spread = smoothing / V
        row_loss = h.new_empty(N)  # (N,)
        grad_hidden = h.new_empty(h.shape) if need_hidden else None  # (N, E)
        grad_weight = w.new_zeros(w.shape) if need_weight else None  # (V, E)
        grad_bias = w.new_zeros(V) if need_bias else None  # (V,)
        buf = h.new_empty(min(chunk_rows, N), V)  # (chunk_rows, V), reused by every chunk
        low = matmul_dtype is not None and matmul_dtype != dtype
        if low:  # the products in matmul_dtype, into reused buffers (fresh pages cost more than the copies)
            h_mm, w_mm = h.to(matmul_dtype), w.to(matmul_dtype)  # (N, E), (V, E)
            buf_mm = h_mm.new_empty(buf.shape)  # (chunk_rows, V): logits before widening, gradients after narrowing
            part_mm = w_mm.new_empty(w_mm.shape) if need_weight else None  # (V, E): a chunk's share of grad_weight
        for start in range(0, N, chunk_rows):
            stop = min(start + chunk_rows, N)
            hc, yc = h[start:stop], target[start:stop]  # (C, E), (C,)
            z = buf[: stop - start]  # (C, V)
            if low:
                z.copy_(torch.mm(h_mm[start:stop], w_mm.t(), out=buf_mm[: stop - start]))  # (C, V), widened
                if b is not None:
                    z.add_(b)
            elif b is None:
                torch.mm(hc, w.t(), out=z)
            else:
                torch.addmm(b, hc, w.t(), out=z)
            z_target = z.gather(1, yc.unsqueeze(1)).squeeze(1)  # (C,)
            z_sum = z.sum(1) if smoothing else None  # (C,)
            if need_any:
                # softmax in place: z <- exp(z - max) / Σ exp(z - max), lse = max + log Σ
                z_max = z.amax(1, keepdim=True)  # (C, 1)
                z.sub_(z_max).exp_()
                total = z.sum(1, keepdim=True)  # (C, 1)
                z.div_(total)
                lse = (z_max + total.log_()).squeeze(1)  # (C,)
            else:
                lse = torch.logsumexp(z, 1)  # (C,)
            loss_c = row_loss[start:stop]  # (C,)
            torch.sub(lse, z_target, alpha=keep, out=loss_c)
            if smoothing:
                loss_c.sub_(z_sum, alpha=spread)
            if not need_any:
                continue
            # z becomes g = softmax(z) - (1 - ε) onehot(y) - ε/V, the gradient of the chunk's logits
            if smoothing:
                z.sub_(spread)
            z.scatter_add_(1, yc.unsqueeze(1), z.new_full((stop - start, 1), -keep))
            if need_bias:
                grad_bias.add_(z.sum(0))  # (V,)
            if low:
                g = buf_mm[: stop - start].copy_(z)  # (C, V), narrowed
                if need_hidden:
                    grad_hidden[start:stop] = torch.mm(g, w_mm)  # (C, E), widened
                if need_weight:
                    # (V, C) @ (C, E), summed in float32
                    grad_weight.add_(torch.mm(g.t(), h_mm[start:stop], out=part_mm))
                continue
            if need_hidden:
                torch.mm(z, w, out=grad_hidden[start:stop])  # (C, E)
            if need_weight:
                grad_weight.addmm_(z.t(), hc)  # (V, C) @ (C, E)
        return row_loss.sum(), grad_hidden, grad_weight, grad_bias


def _check_args(hidden, weight, bias, target, smoothing, chunk_rows):
    name = "linear_cross_entropy"
    if not isinstance(hidden, Tensor) or hidden.dim() != 2:
        raise ValueError(f"{name}: hidden must be an (N, E) tensor, got shape {_shape(hidden)}")
    N, E = hidden.shape
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.shape[1] != E:
        raise ValueError(f"{name}: weight must be (V, E) with E = hidden.shape[1] = {E}, got {_shape(weight)}")
    V = weight.shape[0]
    if bias is not None and (not isinstance(bias, Tensor) or tuple(bias.shape) != (V,)):
        raise ValueError(f"{name}: bias must be None or (V,) with V = weight.shape[0] = {V}, got {_shape(bias)}")
    for arg, t in (("hidden", hidden), ("weight", weight), ("bias", bias)):
        if t is not None and not t.is_floating_point():
            raise TypeError(f"{name}: {arg} must be a floating-point tensor, got {t.dtype}")
    if not isinstance(target, Tensor) or tuple(target.shape) != (N,):
        raise ValueError(f"{name}: target must be (N,) with N = hidden.shape[0] = {N}, got {_shape(target)}")
    if target.dtype != torch.long:
        raise TypeError(f"{name}: target must be torch.long, got {target.dtype}")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing < 1.0:
        raise ValueError(f"{name}: smoothing must be a float in [0, 1), got {smoothing!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"{name}: chunk_rows must be an int >= 1, got {chunk_rows!r}")
    if N and bool(((target < 0) | (target >= V)).any()):
        lo, hi = int(target.min()), int(target.max())
        raise ValueError(f"{name}: target ids must be in [0, V) with V = weight.shape[0] = {V}, got min {lo}, max {hi}")


def _shape(x) -> object:
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
