"""Run by tests/test_multinode.py on each of two torchrun "nodes": train the tiny DDP model of
_ddp_common, checkpointing every 2 steps, resuming from the newest checkpoint when restarted.

With ``kill`` the first attempt of rank 1 kills itself (SIGKILL, as a machine that dies) in the
middle of step 5, after the step-4 checkpoint: torchrun (``--max-restarts 1``) must restart both
nodes' workers, which resume from step 4 and finish as if nothing had happened.
"""

import os
import signal
import sys

import torch

from attnkit.training import ListBatches, Trainer, distributed

sys.path.insert(0, os.path.dirname(__file__))
from _ddp_common import loss_fn, make_batches, make_model, run_config


def main(out_dir: str, kill: bool) -> None:
    torch.set_num_threads(1)
    distributed.init_distributed()
    rank = distributed.rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    calls = 0

    def dying_loss_fn(model, batch):
        nonlocal calls
        calls += 1
        if kill and attempt == 0 and rank == 1 and calls == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return loss_fn(model, batch)

    model = make_model()
    t = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        run_config(out_dir, keep_last=10),
        loss_fn=dying_loss_fn,
        train_batches=ListBatches(make_batches() * 2, shuffle_seed=3),  # 12 batches: 6 steps an epoch on 2 ranks
    )
    summary = t.fit(resume=True)
    summary["attempt"] = attempt
    torch.save({"state_dict": t.raw_model.state_dict(), "summary": summary}, os.path.join(out_dir, f"rank{rank}.pt"))
    distributed.cleanup()


if __name__ == "__main__":
    main(sys.argv[1], kill=sys.argv[2:] == ["kill"])
