"""The shipped captioners (``captioner-soft``, ``captioner-hard``, saved with ``model_type`` "captioner" and an
old ``extra`` field in config.json) load, and do what they did before the captioning code was restructured.

The reference, ``golden/shipped_captioners.json``, was recorded by the code as it stood before the split
(``CaptionModel`` wrapping the module then called ``Captioner``; the loss updating the REINFORCE baseline
itself) on test scenes 0-7 of a small scene set: greedy and beam-3 captions with tokens and scores, one
greedy attention map in full and every map's argmax cell, teacher-forced outputs, and one sampled training
step (loss, metrics, gradient norm, and the baseline after the step's update).
"""

import json
from pathlib import Path

import pytest
import torch

from attnkit.data.datasets.scenes import collate_captions, load_scenes
from attnkit.tasks.captioning import Captioner, caption_loss_fn, update_reward_baseline

GOLDEN = json.loads((Path(__file__).parent / "golden" / "shipped_captioners.json").read_text())
FMNIST = Path("/usr/share/datasets/fashion-mnist")
pytestmark = pytest.mark.skipif(not FMNIST.is_dir(), reason="dataset-fashion-mnist not installed")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    scenes = load_scenes("test", tmp_path_factory.mktemp("scenes"), n_train=40, n_valid=10, n_test=24)
    return collate_captions([scenes[i] for i in range(8)])


@pytest.mark.parametrize("name", ["captioner-soft", "captioner-hard"])
def test_shipped_captioner_captions_as_before(batch, name):
    want = GOLDEN[name]
    assert batch["texts"] == want["truth"]
    cm = Captioner.load(name)
    assert type(cm.model).__name__ == "ShowAttendTell" and cm.config.attention == name.split("-")[1]
    for beam in (1, 3):
        got = cm.caption(batch["images"], beam_size=beam)
        for g, w in zip(got, want[f"beam{beam}"], strict=True):
            assert g["caption"] == w["caption"] and list(g["tokens"]) == w["tokens"]
            assert g["score"] == pytest.approx(w["score"], abs=1e-4)
            assert g["attention"].argmax(-1).tolist() == w["argmax_cells"]
            if w.get("attention") is not None:
                torch.testing.assert_close(
                    g["attention"].double(), torch.tensor(w["attention"], dtype=torch.float64), atol=1e-4, rtol=0
                )


@pytest.mark.parametrize("name", ["captioner-soft", "captioner-hard"])
def test_shipped_captioner_teacher_forcing_and_a_training_step_as_before(batch, name):
    want = GOLDEN[name]
    model = Captioner.load(name).model
    model.eval()
    with torch.no_grad():
        out = model(batch["images"], batch["captions"][:, :-1])
    assert float(out.logits.double().sum()) == pytest.approx(want["teacher_forced"]["logits_sum"], abs=0.05)
    assert out.alphas.argmax(-1).tolist() == want["teacher_forced"]["alpha_argmax"]
    assert float(out.betas.double().sum()) == pytest.approx(want["teacher_forced"]["beta_sum"], abs=1e-3)

    # one training step: hard attention samples its cells from this generator, and the step (not the loss)
    # moves the reward baseline
    model.train()
    torch.manual_seed(0)
    loss, n, metrics = caption_loss_fn(model.config, generator=torch.Generator().manual_seed(123))(model, batch)
    update_reward_baseline(model, metrics)
    loss.backward()
    grad_norm = sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None) ** 0.5
    step = want["train_step"]
    assert n == step["n"]
    assert float(loss.detach()) == pytest.approx(step["loss"], rel=1e-4)
    assert grad_norm == pytest.approx(step["grad_norm"], rel=1e-3)
    assert float(model.reward_baseline) == pytest.approx(step["baseline_after"], abs=1e-4)
    for k in ("nll", "ds", "reward", "entropy", "beta"):
        assert (k in metrics) == (k in step)
        if k in step:
            assert metrics[k] == pytest.approx(step[k], abs=1e-4)
