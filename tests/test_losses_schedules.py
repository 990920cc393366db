"""label_smoothed_nll against torch's cross_entropy; LR schedules and their checkpointing."""

import io

import pytest
import torch
import torch.nn.functional as F

from attnkit.training import constant, inverse_sqrt_with_warmup, label_smoothed_nll


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_nll_matches_cross_entropy(smoothing):
    g = torch.Generator().manual_seed(0)
    B, T, V, pad = 3, 5, 7, 1
    logits = torch.randn(B, T, V, generator=g, requires_grad=True)
    target = torch.randint(0, V, (B, T), generator=g)
    target[0, 3:] = pad
    target[2, 1:] = pad
    loss, n = label_smoothed_nll(logits, target, pad, smoothing)
    ref = F.cross_entropy(
        logits.reshape(-1, V), target.reshape(-1), ignore_index=pad, label_smoothing=smoothing, reduction="sum"
    )
    assert n == int((target != pad).sum())
    torch.testing.assert_close(loss, ref)
    (g1,) = torch.autograd.grad(loss, logits)
    (g2,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g1, g2)
    assert g1[2, 1:].abs().sum() == 0  # pad positions get no gradient


def test_label_smoothed_nll_equals_a_float64_loop():
    """Independent of torch's kernel: -(1-ε) log p(y) - ε/V Σ_v log p(v) summed over real tokens."""
    import math

    g = torch.Generator().manual_seed(1)
    B, T, V, pad, eps = 2, 4, 6, 0, 0.2
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    target = torch.randint(1, V, (B, T), generator=g)
    target[1, 2:] = pad
    loss, n = label_smoothed_nll(logits, target, pad, eps)
    ref, count = 0.0, 0
    for b in range(B):
        for t in range(T):
            y = int(target[b, t])
            if y == pad:
                continue
            row = [float(x) for x in logits[b, t]]
            lse = math.log(sum(math.exp(x) for x in row))
            logp = [x - lse for x in row]
            ref += -(1 - eps) * logp[y] - eps / V * sum(logp)
            count += 1
    assert n == count
    assert float(loss) == pytest.approx(ref, rel=1e-12)


def test_label_smoothed_nll_errors():
    with pytest.raises(ValueError, match="target"):
        label_smoothed_nll(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long), 0, 0.1)
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothed_nll(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), 0, 1.0)


def test_inverse_sqrt_with_warmup_matches_formula_and_checkpoints():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=1.0)
    d, w, f = 512, 4, 2.0
    s = inverse_sqrt_with_warmup(opt, d, w, f)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        s.step()
    expected = [f * d**-0.5 * min(k**-0.5, k * w**-1.5) for k in range(1, 11)]
    assert lrs == pytest.approx(expected)
    assert max(range(10), key=lambda i: lrs[i]) == w - 1  # peak at the w-th step
    buf = io.BytesIO()
    torch.save(s.state_dict(), buf)
    buf.seek(0)
    opt2 = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    s2 = inverse_sqrt_with_warmup(opt2, d, w, f)
    s2.load_state_dict(torch.load(buf, weights_only=True))
    assert s2.get_last_lr() == s.get_last_lr()
    with pytest.raises(ValueError, match="warmup_steps"):
        inverse_sqrt_with_warmup(opt, d, 0)


def test_constant():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
    s = constant(opt)
    for _ in range(3):
        opt.step()
        s.step()
    assert s.get_last_lr() == [0.3]
