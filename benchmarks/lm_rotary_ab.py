"""A/B of rotary positions without cat/neg copies (a custom autograd Function writing the halves with out=) against
attnkit's q*cos + rotate_half(q)*sin, fwd+bwd at the default LM size, one thread; checks numerics against float64."""

import statistics
import time

import torch

from attnkit.attention.positional import RotaryEmbedding, rotate_half

torch.set_num_threads(1)


def _rotate(x, cos, sin, sign):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[..., :h], sin[..., :h]
    out = torch.empty_like(x)
    o1, o2 = out[..., :h], out[..., h:]
    torch.mul(x1, c, out=o1)
    o1.addcmul_(x2, s, value=-sign)
    torch.mul(x2, c, out=o2)
    o2.addcmul_(x1, s, value=sign)
    return out


class Rot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        return _rotate(g.contiguous(), cos, sin, -1.0), None, None


B, H, Hk, N, D = 16, 4, 2, 128, 64
q0 = torch.randn(B, N, H, D).transpose(1, 2)
k0 = torch.randn(B, N, Hk, D).transpose(1, 2)
cos, sin = RotaryEmbedding(D).cos_sin(N)  # (N, D): attnkit's own table


def old(q, k):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def new(q, k):
    return Rot.apply(q, cos, sin), Rot.apply(k, cos, sin)


# numerics
q = q0.double().requires_grad_()
k = k0.double().requires_grad_()
ref = old(q, k)
gq = torch.randn_like(ref[0])
gk = torch.randn_like(ref[1])
rq, rk = torch.autograd.grad(ref, (q, k), (gq, gk))
qf = q0.clone().requires_grad_()
kf = k0.clone().requires_grad_()
o = new(qf, kf)
nq, nk = torch.autograd.grad(o, (qf, kf), (gq.float(), gk.float()))
print("max err fwd", (o[0].double() - ref[0]).abs().max().item(), "bwd", (nq.double() - rq).abs().max().item())


def step(f):
    q = q0.clone().requires_grad_()
    k = k0.clone().requires_grad_()
    t = time.process_time()
    a, b = f(q, k)
    (a.sum() + b.sum()).backward()
    return time.process_time() - t


ro, rn = [], []
for _ in range(3):
    step(old)
    step(new)
for _ in range(40):
    ro.append(step(old))
    rn.append(step(new))
print(
    f"old {1000 * statistics.median(ro):.2f} ms new {1000 * statistics.median(rn):.2f} ms ratio {statistics.median([b / a for a, b in zip(ro, rn)]):.3f}"
)
