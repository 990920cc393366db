"""Path patching from the embeddings and the MLPs as well as heads (:func:`path_patch_sources`), on tiny float64
attnkit language models, against a hand computation: the senders' outputs read off the blocks called one by
one, the receiver's input ``norm(h + δ)`` and its head written out with a per-row softmax (every other path
frozen at the base run by construction); the embeddings into a layer-0 receiver through q, k and v restore
exactly what patching that head does; head senders equal :func:`path_patch_senders`; an attnkit model and its
Hugging Face export give the same scores."""

from __future__ import annotations

import pytest
import torch

from attnkit.attribution.interventions import HeadPatch, intervene
from attnkit.attribution.patching import patch_heads
from attnkit.attribution.path_patching import path_patch_senders, path_patch_sources
from test_patching import _blocks_by_hand, _ids, _lm, _split_attention_by_hand

TARGET, FOIL = 7, 9


def _hand(model, clean, corrupt, sender, receiver, via):
    """The metric with ``sender``'s clean-minus-corrupted output added only to the stream ``receiver`` reads
    through ``via``: everything by hand but the last run, which takes the receiver's output as a patch."""
    outs = {}

    def grab(tag):
        def edit(kind, i, t):
            outs[tag, kind, i] = t
            return t

        return edit

    with torch.no_grad():
        _blocks_by_hand(model, clean, grab("c"))
        _blocks_by_hand(model, corrupt, grab("x"))
        if sender[0] == "embed":
            delta = model.embed_tokens(clean) - model.embed_tokens(corrupt)  # the positions cancel
        else:
            delta = outs["c", "mlp", sender[1]] - outs["x", "mlp", sender[1]]
        lr, hr = receiver
        block = model.layers[lr]
        h = outs["x", "resid", lr]
        x, xp = block.input_layernorm(h), block.input_layernorm(h + delta)
        z = _split_attention_by_hand(block.self_attn, *(xp if c in via else x for c in "qkv"), hr)
        with intervene(model, [HeadPatch(lr, hr, z)]):
            logits = model(corrupt).logits[:, -1]
    return float((logits[:, TARGET] - logits[:, FOIL]).mean())


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
@pytest.mark.parametrize("via", ["k", "qkv"])
def test_mlp_and_embedding_senders_equal_a_hand_computation(shape, via):
    model = _lm(shape)
    clean, corrupt = _ids(1), _ids(2)
    senders = [("embed",), ("mlp", 0), ("mlp", 1)]
    got = path_patch_sources(model, clean, corrupt, TARGET, FOIL, receiver=(2, 1), via=via, senders=senders)
    for i, s in enumerate(senders):
        want = _hand(model, clean, corrupt, s, (2, 1), via)
        assert abs(float(got.scores[i]) - want) <= 1e-9
    assert got.runs == 2 + len(senders) and got.scores.std() > 0


def test_the_embeddings_into_a_layer_0_head_through_qkv_is_patching_that_head():
    """A head of layer 0 reads only the embeddings: their clean change along all three inputs restores that
    head's clean output whole, which is what activation patching of the head does."""
    model = _lm("llama")
    clean, corrupt = _ids(1), _ids(2)
    for direction in ("denoise", "noise"):
        heads = patch_heads(model, clean, corrupt, TARGET, FOIL, direction=direction)
        for h in range(4):
            got = path_patch_sources(
                model, clean, corrupt, TARGET, FOIL, receiver=(0, h), via="qkv", direction=direction
            )
            assert got.senders == [("embed",)]
            assert abs(float(got.scores[0]) - float(heads.scores[0, h])) <= 1e-9


def test_head_senders_equal_path_patch_senders_and_the_default_senders():
    model = _lm("gpt2")
    clean, corrupt = _ids(3), _ids(4)
    got = path_patch_sources(model, clean, corrupt, TARGET, FOIL, receiver=(2, 3), via="v")
    want = path_patch_senders(model, clean, corrupt, TARGET, FOIL, receiver=(2, 3), via="v")
    assert got.senders[0] == ("embed",) and len(got.senders) == 1 + 2 * (4 + 1)
    for i, s in enumerate(got.senders):
        if s[0] == "head":
            assert float(got.scores[i]) == pytest.approx(float(want.scores[s[1], s[2]]), abs=1e-12)
    d = got.to_dict()
    assert {x["sender"] for x in d["senders"]} >= {"embed", "MLP1", "MLP2", "L1H1", "L2H4"}
    assert d["senders"][0]["effect"] == max(x["effect"] for x in d["senders"])


def test_an_attnkit_model_and_its_hugging_face_export_agree(tmp_path):
    from transformers import AutoModelForCausalLM

    from attnkit.deploy.hf_export import export_huggingface
    from test_hf_lm_export import save_lm, tiny_lm

    lm = tiny_lm(shape="llama", n_kv_heads=2)
    hf = AutoModelForCausalLM.from_pretrained(export_huggingface(save_lm(tmp_path / "ckpt", lm), tmp_path / "hf"))
    hf.config._attn_implementation = "eager"
    lm, hf = lm.double(), hf.double().eval()
    clean, corrupt = _ids(5, n=8), _ids(6, n=8)
    a = path_patch_sources(lm, clean, corrupt, TARGET, FOIL, receiver=(1, 2), via="kv")
    b = path_patch_sources(hf, clean, corrupt, TARGET, FOIL, receiver=(1, 2), via="kv")
    assert a.senders == b.senders and ("mlp", 0) in a.senders
    torch.testing.assert_close(b.scores, a.scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "senders, match",
    [
        ([("mlp", 2)], "before the receiver"),
        ([("head", 0, 4)], "head in 0..3"),
        ([("attn", 0)], "'embed'"),
        ([], "at least one"),
    ],
)
def test_bad_senders(senders, match):
    model = _lm("llama")
    with pytest.raises(ValueError, match=match):
        path_patch_sources(model, _ids(1), _ids(2), TARGET, receiver=(2, 0), senders=senders)
    if senders == [("mlp", 2)]:
        bare = _lm("llama", attention_only=True)
        with pytest.raises(ValueError, match="attention-only"):
            path_patch_sources(bare, _ids(1), _ids(2), TARGET, receiver=(2, 0), senders=[("mlp", 0)])
