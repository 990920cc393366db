"""Shared by the DDP worker and the single-process reference in test_distributed.py."""

import torch


def make_batches():
    """Six batches of different sizes, so the per-token normalisation across ranks matters."""
    g = torch.Generator().manual_seed(0)
    out = []
    for size in (3, 5, 2, 6, 4, 1):
        x = torch.randn(size, 4, generator=g)
        out.append((x, x.sum(-1, keepdim=True) * 0.5))
    return out


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def loss_fn(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).sum(), y.numel(), {}
