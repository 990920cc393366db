"""Show, Attend and Tell: decoder shapes and masks, the hard-attention gradient estimator, beam vs
greedy, attention correctness on hand-made maps, scene batches, image files and the CLI."""

import json

import numpy as np
import pytest
import torch

from attnkit.attention import attend_hard
from attnkit.cli import main as cli_main
from attnkit.data.datasets.scenes import ScenesDataset, collate_captions, make_scenes, scene_caption
from attnkit.data.vocab import CaptionVocab
from attnkit.decoding import beam_search, greedy_search
from attnkit.models.captioner import CaptionerConfig, ShowAttendTell, doubly_stochastic_penalty, reinforce_terms
from attnkit.tasks.captioning import (
    Captioner,
    attention_correctness,
    attention_mass_in_box,
    caption_loss_fn,
    caption_scores,
    load_image_file,
    scene_batches,
    scene_order,
    update_reward_baseline,
    words_to_items,
)
from attnkit.training.checkpoint import load_model, save_checkpoint

torch.set_num_threads(1)


def _vocab():
    words = {"a", "and", "at", "the", "top", "bottom", "left", "right"}
    words |= set(scene_caption(list(range(10)), [0] * 10)[0].split())
    return CaptionVocab(words)


def _tiny(attention="soft", **kw):
    torch.manual_seed(0)
    cfg = CaptionerConfig(
        vocab_size=len(_vocab()),
        canvas=16,
        channels=[4],
        feature_dim=8,
        pos_dim=4,
        grid=4,
        emb_dim=8,
        hidden_dim=16,
        attn_dim=8,
        attention=attention,
        dropout=0.0,
        max_len=12,
        **kw,
    )
    return ShowAttendTell(cfg)


def _scenes(n=6, canvas=64, seed=0):
    rng = np.random.default_rng(seed)
    photos = rng.integers(0, 256, size=(40, 28, 28), dtype=np.uint8)
    labels = np.arange(40) % 10
    return ScenesDataset(make_scenes(photos, labels, n, canvas=canvas, rng=seed), _vocab())


def _batch(b=3, t=7, v=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    v = v or len(_vocab())
    images = torch.rand(b, 1, 16, 16, generator=g)
    caps = torch.randint(4, v, (b, t), generator=g)
    caps[:, 0] = 1
    lengths = torch.tensor([t, t - 2, t - 4][:b])
    for i, n in enumerate(lengths.tolist()):
        caps[i, n - 1] = 2
        caps[i, n:] = 0
    return images, caps


# ------------------------------------------------------------------------------ decoder shapes and masks


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_forward_shapes(attention):
    m = _tiny(attention, hard_soft_mix=0.0)
    images, caps = _batch()
    m.train()
    out = m(images, caps[:, :-1])
    B, T, L, V = 3, 6, 16, len(_vocab())
    assert out.logits.shape == (B, T, V) and out.alphas.shape == (B, T, L) and out.betas.shape == (B, T)
    assert torch.allclose(out.alphas.sum(-1), torch.ones(B, T), atol=1e-5)
    assert ((out.betas > 0) & (out.betas < 1)).all()
    if attention == "hard":
        assert out.log_probs.shape == (B, T) and out.entropies.shape == (B, T) and out.locations.shape == (B, T)
        picked = out.alphas.gather(-1, out.locations.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(out.log_probs, picked.log(), atol=1e-5)
        m.eval()
        ev = m(images, caps[:, :-1])  # argmax at test time: deterministic
        assert torch.equal(ev.locations, ev.alphas.argmax(-1)) and ev.log_probs is None
        assert torch.equal(m(images, caps[:, :-1]).logits, ev.logits)
    else:
        assert out.log_probs is None and out.locations is None


@pytest.mark.parametrize("attention,context_to_lstm", [("soft", False), ("hard", False), ("soft", True)])
def test_step_protocol_matches_teacher_forcing(attention, context_to_lstm):
    m = _tiny(attention, context_to_lstm=context_to_lstm).eval()
    images, caps = _batch()
    with torch.no_grad():
        out = m(images, caps[:, :-1])
        state = m.start(images)
        for t in range(caps.shape[1] - 1):
            logp, state, alpha = m.step(caps[:, t], state)
            assert torch.allclose(logp, torch.log_softmax(out.logits[:, t], -1), atol=1e-5)
            assert torch.allclose(alpha, out.alphas[:, t], atol=1e-6)


def test_padding_is_masked_in_the_loss_and_the_penalty():
    m = _tiny().eval()
    images, caps = _batch()
    batch = {"images": images, "captions": caps}
    loss, n, _ = caption_loss_fn(m.config)(m, batch)
    assert n == int((caps[:, 1:] != 0).sum())
    # padding after a sentence's eos changes nothing for that sentence (the decoder is causal)
    longer = torch.cat([caps, torch.zeros(3, 4, dtype=torch.long)], 1)
    loss2, n2, _ = caption_loss_fn(m.config)(m, {"images": images, "captions": longer})
    assert n2 == n and torch.allclose(loss, loss2, atol=1e-4)
    # the doubly stochastic term ignores padded steps
    a = torch.softmax(torch.randn(2, 5, 4), -1)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    b = a.clone()
    b[0, 3:] = torch.tensor([1.0, 0, 0, 0])
    assert torch.allclose(doubly_stochastic_penalty(a, mask)[0], doubly_stochastic_penalty(b, mask)[0])
    cov = a[0, :3].sum(0)
    assert torch.allclose(doubly_stochastic_penalty(a, mask)[0], ((1 - cov) ** 2).sum())


def test_hard_soft_mix_reads_the_expected_context_for_some_sentences():
    m = _tiny("hard", hard_soft_mix=0.5).train()
    images, caps = _batch()
    g = torch.Generator().manual_seed(0)
    out = m(images, caps[:, :-1], generator=g)
    soft_rows = torch.rand(3, generator=torch.Generator().manual_seed(0)) < 0.5
    assert torch.equal(out.log_probs[soft_rows], torch.zeros_like(out.log_probs[soft_rows]))
    assert (out.log_probs[~soft_rows] < 0).all()


def test_bad_inputs_raise_clear_errors():
    m = _tiny()
    with pytest.raises(ValueError, match="images must have shape"):
        m(torch.rand(2, 1, 8, 8), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="attention must be"):
        CaptionerConfig(attention="medium")


def test_hard_baseline_is_a_checkpointed_buffer(tmp_path):
    m = _tiny("hard").train()
    images, caps = _batch()
    loss_fn = caption_loss_fn(m.config)
    _, _, metrics = loss_fn(m, {"images": images, "captions": caps})
    assert not bool(m.baseline_initialised)  # the loss only reads the baseline
    update_reward_baseline(m, metrics)  # the training step moves it
    b1 = float(m.reward_baseline)
    assert bool(m.baseline_initialised) and b1 < 0 and b1 == pytest.approx(metrics["reward"])
    update_reward_baseline(m, loss_fn(m, {"images": images, "captions": caps})[2])
    assert float(m.reward_baseline) != b1  # moving average moved
    save_checkpoint(tmp_path / "ck", model=m, config=m.to_config())
    m2, _, _ = load_model(tmp_path / "ck")
    assert float(m2.reward_baseline) == pytest.approx(float(m.reward_baseline))


# ------------------------------------------------------------------------------ REINFORCE gradient


def test_reinforce_estimate_matches_exact_gradient_of_expected_loss():
    """Locations l ~ α = softmax(K q) (the core's attend_hard); loss(l) fixed. The mean of many
    REINFORCE estimates of ∇_q E[loss] equals the exact gradient of Σ_l α_l loss(l)."""
    torch.manual_seed(0)
    L, D, N = 5, 3, 200_000
    keys = torch.randn(L, D)
    loss_of = torch.tensor([1.0, 3.0, -2.0, 0.5, 2.0])
    q = torch.randn(D, requires_grad=True)

    exact_q = q.detach().clone().requires_grad_(True)
    alpha = torch.softmax(keys @ exact_q, -1)
    (alpha * loss_of).sum().backward()
    exact = exact_q.grad

    g = torch.Generator().manual_seed(1)
    out = attend_hard(
        q.expand(N, 1, D), keys.expand(N, L, D), torch.eye(L).expand(N, L, L), score="dot", mode="sample", generator=g
    )
    nll = loss_of[out.index.squeeze(1)]  # the "NLL" of the sampled path; reward = −NLL
    baseline = -float(nll.mean())
    surrogate = reinforce_terms(nll, out.log_prob, torch.ones(N, 1, dtype=torch.bool), baseline)
    # ∇ of −(R − b) log p(s) = (NLL − b') ∇ log p(s): an unbiased estimate of ∇ E[NLL]
    surrogate.mean().backward()
    assert torch.allclose(q.grad, exact, atol=0.02), (q.grad, exact)
    # and the sampled locations follow α
    freq = torch.bincount(out.index.squeeze(1), minlength=L).float() / N
    assert torch.allclose(freq, alpha.detach(), atol=0.005)


# ------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_beam_one_equals_greedy(attention):
    m = _tiny(attention).eval()
    images, _ = _batch(b=3, seed=3)
    inputs = {"images": images}
    g = greedy_search(m, inputs, bos_id=1, eos_id=2, max_len=10, return_attention=True)
    b = beam_search(m, inputs, beam_size=1, bos_id=1, eos_id=2, max_len=10, length_penalty=0.0, return_attention=True)
    for gh, bh in zip(g, b):
        assert gh.tokens == bh[0].tokens
        assert gh.score == pytest.approx(bh[0].score, abs=1e-4)
        assert torch.allclose(gh.attention, bh[0].attention, atol=1e-6)
    cm = Captioner(m, _vocab())
    res = cm.caption(images, beam_size=1, max_len=10)
    assert [r["tokens"] for r in res] == [h.tokens for h in g]
    assert all(r["attention"].shape == (len(r["words"]), 16) for r in res)


# ------------------------------------------------------------------------------ attention correctness


def test_attention_mass_in_box_on_hand_made_maps():
    grid, canvas = (2, 2), 8  # 4 cells of 4×4 pixels
    one_hot_tl = np.array([[1.0, 0, 0, 0]])
    assert attention_mass_in_box(one_hot_tl, grid, canvas, [[0, 0, 4, 4]])[0] == pytest.approx(1.0)
    assert attention_mass_in_box(one_hot_tl, grid, canvas, [[0, 0, 2, 2]])[0] == pytest.approx(0.25)
    assert attention_mass_in_box(one_hot_tl, grid, canvas, [[4, 4, 8, 8]])[0] == pytest.approx(0.0)
    half = np.array([[0.5, 0.5, 0, 0]])  # top row, box covers the top-left cell and half of top-right
    assert attention_mass_in_box(half, grid, canvas, [[0, 0, 6, 4]])[0] == pytest.approx(0.5 + 0.25)
    uniform = np.full((1, 4), 0.25)
    assert attention_mass_in_box(uniform, grid, canvas, [[1, 2, 6, 7]])[0] == pytest.approx(25 / 64)
    # unnormalised maps are normalised
    assert attention_mass_in_box(2 * one_hot_tl, grid, canvas, [[0, 0, 4, 4]])[0] == pytest.approx(1.0)

    maps = [np.array([[0.1, 0.1, 0.7, 0.1], [0.25] * 4, [0, 0, 0, 1.0]])]
    items = [[0, -1, 1]]  # word 0 names item 0, word 2 names item 1
    boxes = [np.array([[0, 4, 4, 8], [4, 4, 8, 8]])]
    res = attention_correctness(maps, items, boxes, grid, canvas)
    assert res["model"]["n"] == 2 and res["model"]["mean"] == pytest.approx((0.7 + 1.0) / 2)
    assert res["uniform"]["mean"] == pytest.approx(0.25)
    assert sum(res["model"]["histogram"]["counts"]) == 2


def test_words_to_items_uses_class_and_place():
    # items: 0 = coat (class 4) at top left, 1 = coat at bottom right, 2 = bag (class 8) at top right
    classes, places = [4, 8, 4], [0, 1, 3]
    words = [
        "a",
        "coat",
        "at",
        "the",
        "bottom",
        "right",
        "and",
        "a",
        "bag",
        "at",
        "the",
        "top",
        "right",
        "and",
        "a",
        "dress",
        "at",
        "the",
        "top",
        "left",
    ]
    items = words_to_items(words, classes, places)
    assert items[1] == 2 and items[8] == 1 and items[15] == -1  # dress: no such item
    assert [i for i in items if i >= 0] == [2, 1]
    assert words_to_items(["a", "bag"], classes, places) == [-1, 1]  # only bag, no place given


def test_caption_scores():
    sc = caption_scores(
        ["a coat at the top left", "a bag at the top right"], ["a coat at the top left", "a bag at the bottom right"]
    )
    assert sc["exact_match"] == 0.5 and 0 < sc["bleu4"] < 100 and sc["bleu1"] >= sc["bleu4"]


# ------------------------------------------------------------------------------ data


def test_scene_batches_resume_and_collate():
    ds = _scenes(10)
    src = scene_batches(ds, batch_size=3, seed=5, scenes_per_epoch=7)
    assert len(src) == 3
    full = [b["texts"] for b in src]
    assert sum(len(t) for t in full) == 7
    src.set_epoch(0)
    it = iter(src)
    next(it)
    state = src.state_dict()
    rest = [b["texts"] for b in it]
    src2 = scene_batches(ds, batch_size=3, seed=5, scenes_per_epoch=7)
    src2.load_state_dict(state)
    assert [b["texts"] for b in src2] == rest == full[1:]
    # epochs are consecutive stretches of the permutation stream: 10 scenes in 7 + the first 3 of epoch 1
    assert len(set(scene_order(10, 7, 5, 0) + scene_order(10, 7, 5, 1)[:3])) == 10


def test_load_image_file_converts_and_rejects(tmp_path):
    from PIL import Image

    rgba = Image.new("RGBA", (100, 50), (255, 255, 255, 255))
    rgba.save(tmp_path / "x.png")
    t = load_image_file(tmp_path / "x.png", 16)
    assert t.shape == (1, 16, 16) and t.dtype == torch.float32 and float(t.min()) > 0.99
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"cannot read image .*bad\.png"):
        load_image_file(tmp_path / "bad.png", 16)
    with pytest.raises(FileNotFoundError, match=r"missing\.png: no such file$"):
        load_image_file(tmp_path / "missing.png", 16)


# ------------------------------------------------------------------------------ CLI


@pytest.fixture
def tiny_model_dir(tmp_path):
    m = _tiny().eval()
    vocab = _vocab()
    out = tmp_path / "cap"
    save_checkpoint(
        out,
        model=m,
        config=m.to_config(),
        dtype=torch.float16,
        extra_files={"vocab.json": json.dumps({"type": "CaptionVocab", "itos": vocab.itos}).encode()},
    )
    return out


def test_cli_caption_png_and_plot(tiny_model_dir, tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8), "RGB").save(tmp_path / "scene.png")
    plot = tmp_path / "ov.png"
    rc = cli_main(
        ["caption", "--model", str(tiny_model_dir), str(tmp_path / "scene.png"), "--beam", "2", "--plot", str(plot)]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "greedy:" in out and "beam 2" in out
    assert plot.is_file() and plot.stat().st_size > 1000


def test_task_wrappers_load_and_name_what_is_missing(tiny_model_dir, tmp_path):
    from attnkit.tasks.translation import Translator
    from attnkit.training.checkpoint import CheckpointError

    cm = Captioner.load(tiny_model_dir)
    assert cm.vocab == _vocab() and cm.device == torch.device("cpu") and type(cm.model) is ShowAttendTell
    m = _tiny()
    save_checkpoint(tmp_path / "bare", model=m, config=m.to_config())  # weights, but no vocabulary beside them
    with pytest.raises(CheckpointError, match=r"has no vocab.json; is .*bare a captioner\?"):
        Captioner.load(tmp_path / "bare")
    with pytest.raises(CheckpointError, match=r"has no tokenizer.model; is .*bare a translation model\?"):
        Translator.load(tmp_path / "bare")
    with pytest.raises(CheckpointError, match="model_type='rnnsearch', expected 'captioner'"):
        Captioner.load("rnnsearch-es-en")


def test_cli_caption_errors(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG garbage")
    assert cli_main(["caption", "--model", str(tiny_model_dir), str(tmp_path / "broken.png")]) == 2
    err = capsys.readouterr().err
    assert "cannot read image" in err and "broken.png" in err and "Traceback" not in err
    assert cli_main(["caption", "--model", str(tiny_model_dir), str(tmp_path / "nope.png")]) == 2
    assert f"{tmp_path / 'nope.png'}: no such file" in capsys.readouterr().err
    assert cli_main(["caption", "--model", str(tmp_path / "no-model"), str(tmp_path / "broken.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_collated_word_boxes_align_with_targets():
    """alphas[:, t] predicts captions[:, t + 1]: the loss and the metric use word_boxes[:, 1:]."""
    ds = _scenes(4)
    batch = collate_captions([ds[i] for i in range(4)])
    for b in range(4):
        words = batch["texts"][b].split()
        tgt_items = batch["word_item"][b, 1 : 1 + len(words)].tolist()
        assert tgt_items == ds[b]["word_item"].tolist()
        assert all(
            (w in {"tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"})
            == (k >= 0)
            for w, k in zip(words, tgt_items)
        )


def test_classifier_encoder_initialises_the_captioner(tmp_path):
    from attnkit.models.classifier import ClassifierConfig, FashionClassifier
    from attnkit.tasks.captioning.train import _load_encoder_trunk
    from attnkit.tasks.classification import photo_batches

    torch.manual_seed(0)
    clf = FashionClassifier(ClassifierConfig(channels=[4], feature_dim=8, canvas=32))
    photos = np.random.default_rng(0).integers(0, 255, (5, 28, 28), dtype=np.uint8)
    src = photo_batches(photos, np.arange(5), batch_size=2, canvas=32, seed=1)
    batches = list(src)
    assert len(batches) == 3 and batches[0]["images"].shape == (2, 1, 32, 32)
    assert clf(batches[0]["images"]).shape == (2, 10)
    save_checkpoint(tmp_path / "clf", model=clf, config=clf.to_config())
    cap = _tiny()
    _load_encoder_trunk(cap, tmp_path / "clf")
    assert torch.equal(cap.encoder.trunk[0].weight, clf.encoder.trunk[0].weight)
    assert torch.equal(cap.encoder.head[0].weight, clf.encoder.head[0].weight)


@pytest.mark.skipif(
    not __import__("pathlib").Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="dataset-fashion-mnist not installed",
)
def test_cli_train_classifier_then_start_a_captioner_from_it(tmp_path, capsys):
    from attnkit.models.classifier import ClassifierConfig

    out = tmp_path / "clf"
    assert (
        cli_main(
            [
                "train",
                "classifier",
                "--out-dir",
                str(out),
                "--max-steps",
                "2",
                "--batch-size",
                "8",
                "--channels",
                "4,8",
                "--feature-dim",
                "8",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2 and summary["stop_reason"] == "max_steps"
    clf, config, _ = load_model(summary["last_checkpoint"])
    assert config["model_type"] == "fashion_classifier" and clf.config == ClassifierConfig(
        channels=[4, 8], feature_dim=8
    )
    from attnkit.tasks.captioning.train import _load_encoder_trunk

    cap = ShowAttendTell(CaptionerConfig(vocab_size=8, canvas=16, channels=[4, 8], feature_dim=8, grid=4))
    _load_encoder_trunk(cap, summary["last_checkpoint"])
    assert torch.equal(cap.encoder.trunk[4].weight, clf.encoder.trunk[4].weight)
    # bad options: one line, exit status 2
    assert cli_main(["train", "classifier", "--out-dir", str(out), "--canvas", "20"]) == 2
    assert "canvas must be >= 28" in capsys.readouterr().err
    assert cli_main(["train", "classifier", "--out-dir", str(out), "--channels", "4,0"]) == 2
    assert "channels must be a non-empty list of positive ints" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "captioning", "--batch-size", "0"], "batch_size must be an int in [1, 1_000_000_000], got 0"),
        (["train", "captioning", "--patience", "0"], "patience must be an int in [1, 1_000_000_000], got 0"),
        (["train", "captioning", "--captions", "x.json"], "captions and images go together"),
        (["train", "classifier", "--lr", "-1"], "lr must be in (0, 10], got -1.0"),
    ],
)
def test_train_options_are_checked_when_the_config_is_built(tmp_path, capsys, argv, message):
    assert cli_main([*argv, "--out-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_warm_start_from_a_context_to_lstm_model(tmp_path):
    from attnkit.tasks.captioning import warm_start

    src = _tiny(context_to_lstm=True)
    save_checkpoint(tmp_path / "src", model=src, config=src.to_config())
    dst = _tiny(context_to_lstm=False)
    dst.cell.weight_ih.data.zero_()
    copied = warm_start(dst, tmp_path / "src")
    assert "cell.weight_ih" in copied and "encoder.trunk.0.weight" in copied
    assert torch.equal(dst.cell.weight_ih, src.cell.weight_ih[:, :8])  # the emb_dim=8 word columns
    assert torch.equal(dst.attention.score.v, src.attention.score.v)
