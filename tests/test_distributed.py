"""DDP under torchrun (2 CPU processes, gloo): ranks agree and equal single-process global batches."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from _ddp_common import free_port, make_batches, reference_state_dict
from attnkit.training import distributed, list_checkpoints

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def test_helpers_single_process():
    assert distributed.init_distributed() == (0, 1)
    assert distributed.is_main_process() and distributed.world_size() == 1 and not distributed.is_distributed()
    x = torch.ones(2)
    assert torch.equal(distributed.all_reduce_sum(x), torch.ones(2))


def test_a_corpus_job_group_waits_longer_than_torch_s_30_minutes(monkeypatch):
    """Rank 0 indexes (and sorts) a whole input while the others wait in a collective: a 3-million-line
    `translate --file` took 38 minutes there and was cut by PyTorch's default 30-minute timeout."""
    import datetime

    from attnkit.cli import corpus_job

    seen = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: seen.update(kw))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    corpus_job.start_group()
    assert seen["backend"] == "gloo" and seen["timeout"] == datetime.timedelta(seconds=corpus_job.GROUP_TIMEOUT_S)
    assert seen["timeout"] > datetime.timedelta(hours=24)


def test_torchrun_two_ranks(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{SRC}{os.pathsep}{HERE}", MASTER_ADDR="127.0.0.1")
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        "--master_addr=127.0.0.1",
        str(HERE / "_ddp_worker.py"),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    for k, v in r0["state_dict"].items():
        assert torch.equal(v, r1["state_dict"][k]), k
    # 6 batches / 2 ranks = 3 steps per epoch, 2 epochs
    assert r0["summary"]["steps"] == r1["summary"]["steps"] == 6
    # saved at steps 2, 3 (epoch end), 4, 6 (step and epoch end); keep_last=3; rank 0 wrote them
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000003", "step-00000004", "step-00000006"]
    assert (tmp_path / "train_log.jsonl").is_file()

    # reference: one process, each step on the concatenation of both ranks' batches
    for k, v in reference_state_dict(make_batches()).items():
        torch.testing.assert_close(r0["state_dict"][k], v, rtol=1e-5, atol=1e-6)
