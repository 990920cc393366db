"""Activation patching and path patching on Hugging Face decoder-only models (GPT-2, Llama, GPT-NeoX, Qwen2
tiny random configs, float64, eager attention), against hand loops that run the model with forward hooks of
their own: every head at every position patched from the clean run into the corrupted run equals the model
run with a hook replacing that head's columns of its output projection's input; the residual stream and the
MLPs the same with hooks on the blocks and the MLP modules; identity checks (patching the whole clean stream
gives the clean metric); path patching equals attnkit's own recomputed form on an attnkit language model
exported to Hugging Face, and a hand run that feeds the receiver's attention module the patched input."""

from __future__ import annotations

import pytest
import torch

from attnkit.attribution.interventions import HeadPatch, intervene, record_heads
from attnkit.attribution.patching import PatchMetric, patch_heads, patch_mlps, patch_residual
from attnkit.attribution.path_patching import path_patch_senders
from attnkit.attribution.stream_interventions import MLPPatch, ResidualPatch, record_stream
from hf_tiny import build_tiny

FAMILIES = ["gpt2", "llama", "gpt_neox", "qwen2"]
TARGET, FOIL = 7, 9


def _pair(b=2, n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(6, 200, (b, n), generator=g)
    corrupt = clean.clone()
    corrupt[:, : n // 2] = torch.randint(6, 200, (b, n // 2), generator=g)
    return clean, corrupt


def _blocks(model):
    """The blocks, their output projections (the heads side by side in the input), MLPs and final norm,
    named here by hand for each family."""
    t = model.config.model_type
    if t == "gpt2":
        base = model.transformer
        return base.h, [b.attn.c_proj for b in base.h], [b.mlp for b in base.h], base.ln_f
    if t == "gpt_neox":
        base = model.gpt_neox
        return (
            base.layers,
            [b.attention.dense for b in base.layers],
            [b.mlp for b in base.layers],
            base.final_layer_norm,
        )
    base = model.model
    return base.layers, [b.self_attn.o_proj for b in base.layers], [b.mlp for b in base.layers], base.norm


def _metric(model, ids, hooks=(), pre_hooks=()):
    """``logit(TARGET) − logit(FOIL)`` at the last position, averaged over the rows, with the hooks given."""
    handles = [m.register_forward_hook(h) for m, h in hooks] + [m.register_forward_pre_hook(h) for m, h in pre_hooks]
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, -1].double()
    finally:
        for h in handles:
            h.remove()
    return float((logits[:, TARGET] - logits[:, FOIL]).mean())


def _record_inputs(model, modules, ids):
    seen = {}

    def keep(i):
        def hook(module, args):
            seen[i] = args[0].detach().clone()

        return hook

    _metric(model, ids, pre_hooks=[(m, keep(i)) for i, m in enumerate(modules)])
    return [seen[i] for i in range(len(modules))]


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    m, _ = build_tiny(request.param, attn_implementation="eager")
    return m.double()


def test_every_head_and_position_equals_a_hand_hook(model):
    clean, corrupt = _pair()
    _, projections, _, _ = _blocks(model)
    n_heads = model.config.num_attention_heads
    dh = model.config.hidden_size // n_heads
    clean_in = _record_inputs(model, projections, clean)  # each (B, N, H·D_h)
    for p in range(clean.shape[1]):
        got = patch_heads(model, clean, corrupt, TARGET, FOIL, positions=(p,))
        for layer, proj in enumerate(projections):
            for h in range(n_heads):

                def swap(module, args, layer=layer, h=h, p=p):
                    x = args[0].clone()
                    x[:, p, h * dh : (h + 1) * dh] = clean_in[layer][:, p, h * dh : (h + 1) * dh]
                    return (x,)

                want = _metric(model, corrupt, pre_hooks=[(proj, swap)])
                assert abs(float(got.scores[layer, h]) - want) <= 1e-5
    assert got.clean == pytest.approx(_metric(model, clean), abs=1e-12)
    assert got.corrupt == pytest.approx(_metric(model, corrupt), abs=1e-12)


def test_residual_and_mlp_cells_equal_hand_hooks(model):
    clean, corrupt = _pair(seed=1)
    blocks, _, mlps, final = _blocks(model)
    stream_in = _record_inputs(model, [*blocks, final], clean)  # h_0..h_L, each (B, N, D)
    mlp_out = {}

    def keep(i):
        def hook(module, args, output):
            mlp_out[i] = output.detach().clone()

        return hook

    _metric(model, clean, hooks=[(m, keep(i)) for i, m in enumerate(mlps)])
    resid = patch_residual(model, clean, corrupt, TARGET, FOIL)
    mlp = patch_mlps(model, clean, corrupt, TARGET, FOIL)
    for p in range(clean.shape[1]):
        for layer, module in enumerate([*blocks, final]):

            def put(module, args, layer=layer, p=p):
                x = args[0].clone()
                x[:, p] = stream_in[layer][:, p]
                return (x, *args[1:])

            assert abs(float(resid.scores[layer, p]) - _metric(model, corrupt, pre_hooks=[(module, put)])) <= 1e-5
        for layer, module in enumerate(mlps):

            def out(module, args, output, layer=layer, p=p):
                y = output.clone()
                y[:, p] = mlp_out[layer][:, p]
                return y

            assert abs(float(mlp.scores[layer, p]) - _metric(model, corrupt, hooks=[(module, out)])) <= 1e-5


def test_patching_the_whole_clean_stream_gives_the_clean_metric(model):
    clean, corrupt = _pair(seed=2)
    n_layers = model.config.num_hidden_layers
    resid = patch_residual(model, clean, corrupt, TARGET, FOIL)
    # the last row at the read position is the whole clean state the logits are read from
    assert float(resid.scores[n_layers, -1]) == pytest.approx(resid.clean, abs=1e-10)
    noised = patch_residual(model, clean, corrupt, TARGET, FOIL, direction="noise")
    assert float(noised.scores[n_layers, -1]) == pytest.approx(noised.corrupt, abs=1e-10)
    # every head, every MLP and the embeddings at every position from the clean run: the clean run
    layers = range(n_layers)
    with record_heads(model) as heads, record_stream(model, residual=[0], mlp=list(layers)) as stream:
        _metric(model, clean)
    everything = [ResidualPatch(0, stream.residual(0))]
    everything += [MLPPatch(i, stream.mlp(i)) for i in layers]
    everything += [
        HeadPatch(i, h, heads.get("self", i, h)) for i in layers for h in range(model.config.num_attention_heads)
    ]
    with intervene(model, everything):
        assert _metric(model, corrupt) == pytest.approx(resid.clean, abs=1e-10)
    same = patch_heads(model, clean, clean, TARGET, FOIL)  # nothing to restore: every cell the clean metric
    torch.testing.assert_close(same.scores, torch.full_like(same.scores, same.clean), atol=1e-10, rtol=0)


def test_path_patching_equals_a_hand_run_of_the_receivers_attention(model):
    """Via q, k and v together, the receiver reads ``N₁(h + δ)`` whole: a hand pre-hook on the receiver's
    attention module gives it that input, another puts every other head of its layer back at its base
    output; the metric of that run is path patching's score."""
    clean, corrupt = _pair(seed=3)
    blocks, projections, _, _ = _blocks(model)
    n_heads = model.config.num_attention_heads
    dh = model.config.hidden_size // n_heads
    t = model.config.model_type
    attn_of = {"gpt2": "attn", "gpt_neox": "attention"}.get(t, "self_attn")
    norm_of = {"gpt2": "ln_1"}.get(t, "input_layernorm")
    got = path_patch_senders(model, clean, corrupt, TARGET, FOIL, receiver=(1, 2), via="qkv")
    z_clean = _record_inputs(model, projections, clean)
    z_base = _record_inputs(model, projections, corrupt)
    h_base = _record_inputs(model, [blocks[1]], corrupt)[0]  # (B, N, D)
    for s in range(n_heads):
        cols = slice(s * dh, (s + 1) * dh)
        w = projections[0].weight
        dz = z_clean[0][..., cols] - z_base[0][..., cols]
        delta = dz @ (w[cols, :] if t == "gpt2" else w[:, cols].T)  # (B, N, D)
        x = getattr(blocks[1], norm_of)(h_base + delta)

        def feed(module, args, kwargs, x=x):
            if args:
                return (x, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": x}

        def others(module, args):
            y = z_base[1].clone()
            y[..., 2 * dh : 3 * dh] = args[0][..., 2 * dh : 3 * dh]  # the receiver's own new output
            return (y,)

        handle = getattr(blocks[1], attn_of).register_forward_pre_hook(feed, with_kwargs=True)
        try:
            want = _metric(model, corrupt, pre_hooks=[(projections[1], others)])
        finally:
            handle.remove()
        assert abs(float(got.scores[0, s]) - want) <= 1e-5


def test_metric_reads_as_the_hand_one():
    m = PatchMetric(torch.tensor([TARGET]), torch.tensor([FOIL]), 2)
    logits = torch.randn(1, 3, 20, dtype=torch.float64)
    assert float(m(logits)) == pytest.approx(float(logits[0, 2, TARGET] - logits[0, 2, FOIL]))


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_path_and_activation_patching_equal_attnkits_own_form_on_its_export(shape, tmp_path):
    """attnkit's language model recomputes the receiver from its weights (:func:`head_output`); its export to
    Hugging Face (Llama with grouped-query heads, or GPT-2's fused ``c_attn``) runs it through the
    ``transformers`` modules: the two path-patching maps, via each input, and the head maps agree."""
    from transformers import AutoModelForCausalLM

    from attnkit.deploy.hf_export import export_huggingface
    from test_hf_lm_export import save_lm, tiny_lm

    extra = {"n_kv_heads": 2} if shape == "llama" else {}
    lm = tiny_lm(shape=shape, **extra)
    hf = AutoModelForCausalLM.from_pretrained(export_huggingface(save_lm(tmp_path / "ckpt", lm), tmp_path / "hf"))
    hf.config._attn_implementation = "eager"
    lm, hf = lm.double(), hf.double().eval()
    clean, corrupt = _pair(seed=4)
    for via in ("q", "k", "v", "kv"):
        a = path_patch_senders(lm, clean, corrupt, TARGET, FOIL, receiver=(1, 1), via=via)
        b = path_patch_senders(hf, clean, corrupt, TARGET, FOIL, receiver=(1, 1), via=via)
        torch.testing.assert_close(b.scores, a.scores, atol=1e-5, rtol=0)
    for direction in ("denoise", "noise"):
        a = patch_heads(lm, clean, corrupt, TARGET, FOIL, direction=direction)
        b = patch_heads(hf, clean, corrupt, TARGET, FOIL, direction=direction)
        torch.testing.assert_close(b.scores, a.scores, atol=1e-5, rtol=0)
        assert b.effect.abs().max() > 0


def test_the_fused_projections_columns_are_the_families_own_split():
    """GPT-NeoX lays ``query_key_value``'s output out per head as ``[q | k | v]`` (its attention views it as
    ``(B, N, H, 3·D_h)`` and chunks the last axis in three): the columns named for each are those."""
    from attnkit.hf.stream_sites import hf_head_inputs

    model, _ = build_tiny("gpt_neox", attn_implementation="eager")
    inputs = hf_head_inputs(model, 1)
    out = torch.arange(model.config.hidden_size * 3)  # stands for one row of the projection's output
    nh = model.config.num_attention_heads
    q, k, v = out.view(nh, -1).chunk(3, dim=-1)
    for c, want in zip("qkv", (q, k, v)):
        module, cols = inputs.projections[c]
        assert module is model.gpt_neox.layers[1].attention.query_key_value
        assert torch.equal(out[cols], want.reshape(-1))


def test_what_hugging_face_patching_refuses():
    from attnkit.attribution.attribution_patching import attribution_patch

    clean, corrupt = _pair()
    gemma2, _ = build_tiny("gemma2", attn_implementation="eager")
    with pytest.raises(ValueError, match="pre-norm"):
        path_patch_senders(gemma2, clean, corrupt, TARGET, receiver=(1, 0))
    marian, _ = build_tiny("marian")
    with pytest.raises(TypeError, match="decoder-only"):
        patch_heads(marian, clean, corrupt, TARGET)
    bert, _ = build_tiny("bert")
    with pytest.raises(TypeError, match="decoder-only"):
        patch_residual(bert, clean, corrupt, TARGET)
    gpt2, _ = build_tiny("gpt2")
    with pytest.raises(TypeError, match="embeddings"):
        attribution_patch(gpt2, clean, corrupt, TARGET)
    with pytest.raises(ValueError, match="target"):
        patch_heads(gpt2, clean, corrupt, 10**6)
