"""RunConfig: one set of run options nested in every task config, with each task's defaults, that the
Trainer is built from; old flat train_config.json files still load."""

import argparse
import dataclasses
import inspect
import json

import pytest
import torch

from attnkit.cli import build_parser
from attnkit.cli.options import add_config_arguments, task_config_from_args, translation_config_from_args
from attnkit.config import config_from_json
from attnkit.errors import ConfigError
from attnkit.tasks.captioning import CaptioningConfig
from attnkit.tasks.classification import ClassifierTaskConfig
from attnkit.tasks.translation import TranslationConfig
from attnkit.training import ListBatches, RunConfig, Trainer

TASKS = (TranslationConfig, CaptioningConfig, ClassifierTaskConfig)
RUN_FLAGS = [f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("cli", True)]


@pytest.mark.parametrize("task", ["translation", "captioning", "classifier"])
def test_every_task_takes_every_run_option(task):
    args = build_parser().parse_args(["train", task, "--keep-last", "5", "--patience", "2", "--seed", "7"])
    if task == "translation":
        cfg = translation_config_from_args(args)
    else:
        cfg = task_config_from_args({"captioning": CaptioningConfig, "classifier": ClassifierTaskConfig}[task], args)
    assert (cfg.run.keep_last, cfg.run.patience, cfg.run.seed) == (5, 2, 7)
    assert all(hasattr(cfg.run, name) for name in RUN_FLAGS)


def test_each_task_keeps_its_own_defaults_in_the_config_and_the_help():
    assert [c().run.epochs for c in TASKS] == [10, 30, 2]
    assert [c().run.clip_grad_norm for c in TASKS] == [1.0, 5.0, 1.0]
    assert [c().run.patience for c in TASKS] == [3, None, None]
    assert (
        TranslationConfig().run.out_dir == "runs/rnnsearch" and ClassifierTaskConfig().run.out_dir == "runs/classifier"
    )
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, CaptioningConfig)
    epochs_help = parser.format_help().split("\n  --epochs EPOCHS", 1)[1].split("\n  --", 1)[0]
    assert "(default: 30)" in " ".join(epochs_help.split())
    args = build_parser().parse_args(["train", "captioning", "--max-steps", "3"])
    cfg = task_config_from_args(CaptioningConfig, args)
    assert (cfg.run.epochs, cfg.run.max_steps, cfg.run.save_every_steps) == (30, 3, 200)


def test_a_flat_train_config_from_before_run_config_still_loads():
    new = TranslationConfig.from_options("transformer", epochs=4, keep_last=2, seed=3, d_model=64, nhead=2)
    saved = json.loads(json.dumps(dataclasses.asdict(new)))
    assert saved["run"]["epochs"] == 4
    assert config_from_json(TranslationConfig, saved) == new
    flat = {k: v for k, v in saved.items() if k != "run"} | saved["run"]  # the layout files had before
    assert config_from_json(TranslationConfig, flat) == new
    old_caption = {"batch_size": 8, "epochs": 5, "out_dir": "runs/x", "model_config": {"attention": "hard"}}
    cap = config_from_json(CaptioningConfig, old_caption)
    assert (cap.batch_size, cap.run.epochs, cap.run.out_dir, cap.run.clip_grad_norm) == (8, 5, "runs/x", 5.0)


def test_run_options_are_checked():
    with pytest.raises(ConfigError, match=r"keep_last must be an int in \[1, 1000\], got 0"):
        RunConfig(keep_last=0)
    with pytest.raises(ConfigError, match=r"epochs must be an int, got 1\.5"):
        RunConfig(epochs=1.5)


def test_the_trainer_is_built_from_its_run_config(tmp_path):
    model = torch.nn.Linear(2, 1)
    run = RunConfig(
        out_dir=str(tmp_path / "r"), epochs=4, max_steps=9, max_time_s=60.0, patience=2, save_every_steps=3,
        keep_last=1, clip_grad_norm=0.5, seed=11, log_every=5, progress=False, device="cpu",
    )  # fmt: skip
    batches = ListBatches([{"x": torch.zeros(1, 2)}])
    t = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        run,
        task_config=CaptioningConfig(),
        loss_fn=lambda m, b: (m(b["x"]).sum(), 1, {}),
        train_batches=batches,
        valid_fn=lambda m: {"valid_loss": 0.0},
    )
    assert t.run is run and t.device.type == "cpu"
    # one source of truth: no run option is also a keyword of the trainer or a copy on it
    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert not run_fields & set(inspect.signature(Trainer).parameters)
    resolved = {"device", "out_dir"}  # t.device is the resolved torch.device, t.out_dir the Path
    assert not (run_fields - resolved) & set(vars(t))
    saved = json.loads((tmp_path / "r" / "train_config.json").read_text())
    assert config_from_json(CaptioningConfig, saved) == CaptioningConfig()
