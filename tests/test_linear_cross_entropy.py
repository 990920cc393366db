"""linear_cross_entropy against F.cross_entropy(F.linear(...)): loss, gradients, dtypes, errors."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from attnkit.training.linear_cross_entropy import linear_cross_entropy


def make(N, E, V, *, bias=True, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, E, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    w = (torch.randn(V, E, generator=g, dtype=torch.float64) / E**0.5).to(dtype).requires_grad_()
    b = torch.randn(V, generator=g, dtype=torch.float64).to(dtype).requires_grad_() if bias else None
    y = torch.randint(0, V, (N,), generator=g)
    return h, w, b, y


def reference(h, w, b, y, smoothing):
    """Loss and gradients of the unfused float64 path."""
    leaves = [t.detach().double().requires_grad_() for t in (h, w) + ((b,) if b is not None else ())]
    hd, wd, bd = leaves[0], leaves[1], leaves[2] if b is not None else None
    loss = F.cross_entropy(F.linear(hd, wd, bd), y, label_smoothing=smoothing, reduction="sum")
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), list(grads) + [None] * (3 - len(grads))


def fused(h, w, b, y, smoothing, chunk_rows=256):
    leaves = [t for t in (h, w, b) if t is not None]
    loss = linear_cross_entropy(h, w, b, y, smoothing=smoothing, chunk_rows=chunk_rows)
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), list(grads) + [None] * (3 - len(grads))


def assert_matches(got, want, **tol):
    (loss, grads), (ref_loss, ref_grads) = got, want
    torch.testing.assert_close(loss, ref_loss.to(loss.dtype), **tol)
    for g, r in zip(grads, ref_grads):
        if r is None:
            assert g is None
        else:
            torch.testing.assert_close(g, r.to(g.dtype), **tol)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [5, 37, 100])  # N = 37: smaller (37 = 7*5 + 2), equal, larger
def test_matches_reference_float64(bias, smoothing, chunk_rows):
    h, w, b, y = make(37, 12, 23, bias=bias)
    assert_matches(fused(h, w, b, y, smoothing, chunk_rows), reference(h, w, b, y, smoothing))


@settings(max_examples=30, deadline=None, database=None)
@given(
    N=st.integers(1, 40),
    E=st.integers(1, 16),
    V=st.integers(1, 32),
    chunk_rows=st.integers(1, 50),
    smoothing=st.one_of(st.just(0.0), st.floats(0.0, 0.9)),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_reference_property(N, E, V, chunk_rows, smoothing, bias, seed):
    h, w, b, y = make(N, E, V, bias=bias, seed=seed)
    assert_matches(fused(h, w, b, y, smoothing, chunk_rows), reference(h, w, b, y, smoothing))


@pytest.mark.parametrize("bias", [False, True])
def test_gradcheck(bias):
    h, w, b, y = make(5, 3, 4, bias=bias)
    fn = lambda h, w, *b: linear_cross_entropy(h, w, b[0] if b else None, y, smoothing=0.1, chunk_rows=2)
    assert torch.autograd.gradcheck(fn, (h, w) + ((b,) if bias else ()))


def test_float32_close_to_float64_reference():
    h, w, b, y = make(40, 32, 64, dtype=torch.float32)
    got = fused(h, w, b, y, 0.1, chunk_rows=16)
    assert got[0].dtype == torch.float32 and all(g.dtype == torch.float32 for g in got[1])
    assert_matches(got, reference(h, w, b, y, 0.1), rtol=1e-5, atol=1e-5)


def test_bf16_inputs_give_bf16_grads_and_float32_loss():
    h, w, b, y = make(40, 32, 64, dtype=torch.bfloat16)
    loss, grads = fused(h, w, b, y, 0.1, chunk_rows=16)
    assert loss.dtype == torch.float32
    assert [g.dtype for g in grads] == [torch.bfloat16] * 3
    assert [g.shape for g in grads] == [h.shape, w.shape, b.shape]
    # the reference sees the same bf16 values upcast, so only rounding of the results differs
    assert_matches((loss, grads), reference(h, w, b, y, 0.1), rtol=2e-2, atol=2e-2)


def test_autocast_is_disabled_inside():
    h, w, b, y = make(20, 16, 32, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fused(h, w, b, y, 0.1, chunk_rows=8)
    assert got[0].dtype == torch.float32
    assert_matches(got, reference(h, w, b, y, 0.1), rtol=1e-5, atol=1e-5)


def test_no_grad_loss():
    h, w, b, y = make(30, 8, 16)
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, b, y, smoothing=0.1, chunk_rows=7)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, reference(h, w, b, y, 0.1)[0])
    # nothing requires grad: also only the loss
    loss = linear_cross_entropy(h.detach(), w.detach(), b.detach(), y, smoothing=0.1, chunk_rows=7)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, reference(h, w, b, y, 0.1)[0])


def test_only_some_inputs_require_grad():
    h, w, b, y = make(30, 8, 16)
    h = h.detach()  # e.g. a frozen encoder feeding the projection
    loss = linear_cross_entropy(h, w, b, y, smoothing=0.1, chunk_rows=7)
    gw, gb = torch.autograd.grad(loss, (w, b))
    _, (_, rw, rb) = reference(h, w, b, y, 0.1)
    torch.testing.assert_close(gw, rw)
    torch.testing.assert_close(gb, rb)


def test_used_twice_and_scaled_accumulates():
    h, w, b, y = make(30, 8, 16, seed=1)
    y2 = torch.randint(0, 16, (30,), generator=torch.Generator().manual_seed(2))
    loss = 0.5 * linear_cross_entropy(h, w, b, y, chunk_rows=7) + linear_cross_entropy(h, w, b, y2, smoothing=0.1)
    loss.backward()
    _, g1 = reference(h, w, b, y, 0.0)
    _, g2 = reference(h, w, b, y2, 0.1)
    for t, r1, r2 in zip((h, w, b), g1, g2):
        torch.testing.assert_close(t.grad, 0.5 * r1 + r2)
    # a second backward through a retained graph adds the same gradients again
    for t in (h, w, b):
        t.grad = None
    loss = linear_cross_entropy(h, w, b, y, chunk_rows=7)
    loss.backward(retain_graph=True)
    loss.backward()
    for t, r1 in zip((h, w, b), g1):
        torch.testing.assert_close(t.grad, 2 * r1)


def test_once_differentiable():
    h, w, b, y = make(6, 4, 5)
    (gh,) = torch.autograd.grad(linear_cross_entropy(h, w, b, y), h, create_graph=True)
    assert not gh.requires_grad  # a constant: no second-order graph
    scale = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (gh,) = torch.autograd.grad(scale * linear_cross_entropy(h, w, b, y), h, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gh.sum().backward()


def test_empty_batch():
    h, w, b, y = make(0, 8, 16)
    loss, (gh, gw, gb) = fused(h, w, b, y, 0.1)
    assert loss.item() == 0.0
    assert gh.shape == (0, 8) and gw.abs().sum() == 0 and gb.abs().sum() == 0


def _args():
    h, w, b, y = make(6, 4, 5)
    return dict(hidden=h, weight=w, bias=b, target=y)


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(hidden=torch.zeros(6)), ValueError, r"hidden must be an \(N, E\) tensor, got shape \(6,\)"),
        (
            dict(weight=torch.zeros(5, 3)),
            ValueError,
            r"weight must be \(V, E\) with E = hidden.shape\[1\] = 4, got \(5, 3\)",
        ),
        (dict(weight=torch.zeros(5)), ValueError, r"weight must be \(V, E\).*got \(5,\)"),
        (
            dict(bias=torch.zeros(4)),
            ValueError,
            r"bias must be None or \(V,\) with V = weight.shape\[0\] = 5, got \(4,\)",
        ),
        (
            dict(target=torch.zeros(5, dtype=torch.long)),
            ValueError,
            r"target must be \(N,\) with N = hidden.shape\[0\] = 6, got \(5,\)",
        ),
        (dict(target=torch.zeros(6, dtype=torch.int32)), TypeError, r"target must be torch.long, got torch.int32"),
        (dict(hidden=torch.zeros(6, 4, dtype=torch.long)), TypeError, r"hidden must be a floating-point tensor"),
        (
            dict(target=torch.tensor([0, 1, 2, 3, 4, 5])),
            ValueError,
            r"target ids must be in \[0, V\) with V = weight.shape\[0\] = 5, got min 0, max 5",
        ),
        (dict(target=torch.tensor([0, 1, -1, 3, 4, 0])), ValueError, r"target ids must be in \[0, V\).*min -1"),
        (dict(smoothing=1.0), ValueError, r"smoothing must be a float in \[0, 1\), got 1.0"),
        (dict(smoothing=-0.1), ValueError, r"smoothing must be a float in \[0, 1\), got -0.1"),
        (dict(chunk_rows=0), ValueError, r"chunk_rows must be an int >= 1, got 0"),
    ],
)
def test_errors(change, error, match):
    args = {**_args(), **change}
    with pytest.raises(error, match="linear_cross_entropy: " + match):
        linear_cross_entropy(**args)


def test_non_contiguous_inputs():
    h, w, b, y = make(20, 8, 12)
    h = h.detach().t().contiguous().t().requires_grad_()  # column-major (N, E)
    w = w.detach().t().contiguous().t().requires_grad_()  # column-major (V, E)
    assert not h.is_contiguous() and not w.is_contiguous()
    assert_matches(fused(h, w, b, y, 0.1, chunk_rows=6), reference(h, w, b, y, 0.1))


class _MatmulDtypes(TorchDispatchMode):
    """Records the dtypes of every aten matrix product run inside it."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            self.seen.append(tuple(a.dtype for a in args if isinstance(a, torch.Tensor)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("matmul_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_low_precision_products_match_float64_on_the_rounded_operands(matmul_dtype, bias):
    """With ``matmul_dtype`` the three products take bf16/fp16 operands (as autocast gives them), the loss
    and the gradients come back float32, within the low dtype's rounding of the float64 math done on the
    same rounded operands."""
    h, w, b, y = make(45, 24, 70, bias=bias, dtype=torch.float32)
    leaves = [t for t in (h, w, b) if t is not None]
    with _MatmulDtypes() as rec:
        loss = linear_cross_entropy(h, w, b, y, smoothing=0.1, chunk_rows=16, matmul_dtype=matmul_dtype)
        grads = torch.autograd.grad(loss, leaves)
    assert rec.seen and all(set(d) == {matmul_dtype} for d in rec.seen)
    assert loss.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    rounded = [t.detach().to(matmul_dtype) for t in (h, w)] + ([b] if bias else [None])
    ref_loss, ref_grads = reference(*rounded, y, 0.1)
    eps = torch.finfo(matmul_dtype).eps
    torch.testing.assert_close(loss.double(), ref_loss, rtol=eps / 8, atol=0)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g.double(), r, rtol=0, atol=eps * float(r.abs().max()))


def test_low_precision_is_not_the_float32_path():
    """The bf16 products round: the loss differs from float32's by more than float32's rounding, so the
    test above would notice the option being ignored."""
    h, w, b, y = make(45, 24, 70, dtype=torch.float32)
    exact = linear_cross_entropy(h.detach(), w.detach(), b.detach(), y, smoothing=0.1)
    low = linear_cross_entropy(h.detach(), w.detach(), b.detach(), y, smoothing=0.1, matmul_dtype=torch.bfloat16)
    assert abs(float(low) - float(exact)) > 1e-5 * abs(float(exact))


def test_matmul_dtype_must_be_a_low_float():
    h, w, b, y = make(3, 4, 5, dtype=torch.float32)
    with pytest.raises(TypeError, match="matmul_dtype"):
        linear_cross_entropy(h, w, b, y, matmul_dtype=torch.int8)
