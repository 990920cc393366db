"""Shared by the DDP worker and the single-process reference in test_distributed.py."""

import torch

from attnkit.training import RunConfig


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


def run_config(out_dir, **options) -> RunConfig:
    """The run both workers train: 2 epochs, a checkpoint every 2 steps, no clipping, quiet."""
    base = dict(save_every_steps=2, epochs=2, seed=0, log_every=1, progress=False, clip_grad_norm=0.0, device=None)
    return RunConfig(out_dir=out_dir, **{**base, **options})


def loss_fn(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).sum(), y.numel(), {}
