"""Run by tests/test_distributed.py under torchrun: train a tiny model with DDP, save each rank's weights."""

import os
import sys

import torch

from attnkit.training import ListBatches, Trainer, distributed

sys.path.insert(0, os.path.dirname(__file__))
from _ddp_common import loss_fn, make_batches, make_model, run_config


def main(out_dir: str) -> None:
    torch.set_num_threads(1)
    distributed.init_distributed()
    model = make_model()
    if distributed.rank() == 1:  # DDP must broadcast rank 0's initial weights
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    t = Trainer(
        model,
        opt,
        run_config(out_dir),
        loss_fn=loss_fn,
        train_batches=ListBatches(make_batches(), shuffle_seed=3),
    )
    summary = t.fit()
    torch.save(
        {"state_dict": t.raw_model.state_dict(), "summary": summary},
        os.path.join(out_dir, f"rank{distributed.rank()}.pt"),
    )
    distributed.cleanup()


if __name__ == "__main__":
    main(sys.argv[1])
