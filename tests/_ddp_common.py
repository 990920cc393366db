"""Shared by the DDP workers and the tests that start them (test_distributed.py, test_multinode.py)."""

import socket

import torch

from attnkit.training import ListBatches, RunConfig


def free_port() -> int:
    """A TCP port free on localhost now, for a torchrun rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def reference_state_dict(batches: list) -> dict:
    """What two ranks train, in one process: each step on the concatenation of a pair of batches (rank r
    takes batch r of each pair), 2 epochs of SGD (lr 0.1) from :func:`make_model`, the batches shuffled as
    the workers shuffle them (``shuffle_seed=3``); the weights at the end."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    src = ListBatches(batches, shuffle_seed=3)
    for epoch in range(2):
        src.set_epoch(epoch)
        batches = list(src)
        for i in range(0, len(batches) - 1, 2):
            x = torch.cat([batches[i][0], batches[i + 1][0]])
            y = torch.cat([batches[i][1], batches[i + 1][1]])
            opt.zero_grad()
            loss_sum, n, _ = loss_fn(model, (x, y))
            (loss_sum / n).backward()
            opt.step()
    return model.state_dict()


def run_config(out_dir, **options) -> RunConfig:
    """The run both workers train: 2 epochs, a checkpoint every 2 steps, no clipping, quiet."""
    base = dict(save_every_steps=2, epochs=2, seed=0, log_every=1, progress=False, clip_grad_norm=0.0, device=None)
    return RunConfig(out_dir=out_dir, **{**base, **options})


def loss_fn(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).sum(), y.numel(), {}
