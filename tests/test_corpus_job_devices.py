"""One GPU a rank (issue 58): each rank of a corpus job under torchrun opens its model on
``cuda:LOCAL_RANK % device_count`` (``--device cuda`` or ``auto``), chosen before any model is loaded, with
the nccl backend; on CPUs, or every rank on one named GPU, gloo. No GPU here: ``torch.cuda`` is
monkeypatched, and each command stops at its model load, which records the device it was given."""

from __future__ import annotations

import pytest
import torch

from attnkit.cli import main as cli_main
from attnkit.cli.common import CLIError
from attnkit.cli.corpus_job import group_backend, rank_device
from attnkit.training import distributed


def test_rank_device_gives_each_local_rank_its_own_gpu_in_turn():
    # a plain reference: local ranks dealt round robin to the GPUs
    for cuda_count in (1, 2, 3, 8):
        for local in range(2 * cuda_count + 1):
            want = f"cuda:{local - cuda_count * (local // cuda_count)}"
            assert rank_device("cuda", local, cuda_count) == want
            assert rank_device("auto", local, cuda_count) == want
            assert rank_device(None, local, cuda_count) == want
    # 8 ranks on 4 GPUs: two on each
    used = [rank_device("cuda", r, 4) for r in range(8)]
    assert sorted(used) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1", "cuda:2", "cuda:2", "cuda:3", "cuda:3"]


def test_rank_device_keeps_what_is_not_one_gpu_a_rank():
    assert rank_device("cpu", 3, 2) == "cpu"
    assert rank_device("cuda:1", 0, 2) == "cuda:1"  # a GPU the user named: every rank shares it
    assert rank_device("mps", 1, 0) == "mps"
    assert rank_device("auto", 1, 0) == "auto"  # no GPU: auto's own choice (mps or cpu)
    assert rank_device(None, 1, 0) == "auto"
    assert rank_device("cuda", 1, 0) == "cuda"  # no GPU: opening the model refuses it in one line
    assert [group_backend(d, 2) for d in ("cuda", "auto", None, "cpu", "cuda:1")] == [
        "nccl",
        "nccl",
        "nccl",
        "gloo",
        "gloo",
    ]
    assert group_backend("cuda", 0) == "gloo" and group_backend("auto", 0) == "gloo"
    for bad in ({"local_rank": -1}, {"local_rank": 1.0}, {"cuda_count": -2}, {"cuda_count": True}):
        kw = {"requested": "cuda", "local_rank": 0, "cuda_count": 2, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            rank_device(**kw)


class _Loaded(CLIError):
    """Raised by the stand-in loaders once they have recorded the device."""


def _stop_at_load(events: list):
    def load(*args, device=None, **kw):
        events.append(("load", str(device)))
        raise _Loaded("stopped at the model load")

    return load


@pytest.fixture
def rank3_of_a_two_gpu_node(monkeypatch):
    """Rank 3 (local rank 3) of a torchrun launch on a node with 2 GPUs; what the group and CUDA are told."""
    events: list = []
    for k, v in {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: events.append(("set_device", str(d))))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: events.append(("group", kw["backend"])))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 4)
    return events


@pytest.mark.parametrize(
    ("argv", "loader"),
    [
        (["translate", "--file", "{f}", "--device", "cuda"], "attnkit.service.open_model"),
        (["align", "--src", "{f}", "--tgt", "{f}", "--device", "auto"], "attnkit.service.open_model"),
        (["explain", "--file", "{f}", "--device", "cuda"], "attnkit.service.open_model"),
        (["evaluate", "translation", "--device", "cuda"], "attnkit.tasks.translation.evaluate_translation"),
        (
            ["evaluate", "alignment", "--device", "auto"],
            "attnkit.tasks.translation.alignment_evaluate.evaluate_alignment",
        ),
        (
            ["evaluate", "explanations", "--device", "cuda"],
            "attnkit.attribution.explanation_quality.open_translator_run",
        ),
    ],
    ids=["translate", "align", "explain", "evaluate-translation", "evaluate-alignment", "evaluate-explanations"],
)
def test_each_corpus_command_loads_its_model_on_the_rank_s_gpu(
    argv, loader, rank3_of_a_two_gpu_node, monkeypatch, tmp_path, capsys
):
    events = rank3_of_a_two_gpu_node
    f = tmp_path / "in.es"
    f.write_text("hola mundo\n", encoding="utf-8")
    monkeypatch.setattr(loader, _stop_at_load(events))
    assert cli_main([a.replace("{f}", str(f)) for a in argv]) == 2
    assert "stopped at the model load" in capsys.readouterr().err
    # local rank 3 on 2 GPUs: cuda:1, made current and joined over nccl before the one load, which gets it
    assert events == [("set_device", "cuda:1"), ("group", "nccl"), ("load", "cuda:1")]


def test_a_cpu_rank_joins_over_gloo_and_keeps_its_device(rank3_of_a_two_gpu_node, monkeypatch, tmp_path, capsys):
    events = rank3_of_a_two_gpu_node
    f = tmp_path / "in.es"
    f.write_text("hola mundo\n", encoding="utf-8")
    monkeypatch.setattr("attnkit.service.open_model", _stop_at_load(events))
    assert cli_main(["translate", "--file", str(f), "--device", "cpu"]) == 2
    capsys.readouterr()
    assert events == [("group", "gloo"), ("load", "cpu")]
