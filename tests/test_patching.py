"""Residual-stream and MLP interventions, activation patching, path patching and attribution patching
(attnkit.attribution.stream_interventions, .patching, .path_patching, .attribution_patching), against
independent references in float64: the model's blocks called one by one with the site edited by hand, a
copy of the model with an MLP's output layer zeroed, the attention module's own forward and a per-row
softmax written out, a central finite difference along the patch; and on the shipped models, the induction
circuit found by path patching with no head given."""

import copy
import json
import math

import pytest
import torch

from attnkit.attribution.attribution_patching import attribution_patch, compare_with_activation_patching
from attnkit.attribution.intervention_effects import lm_effect
from attnkit.attribution.interventions import HeadPatch, intervene, record_heads
from attnkit.attribution.patching import (
    patch_heads,
    patch_metric,
    patch_mlps,
    patch_residual,
    repeated_tokens_pair,
)
from attnkit.attribution.path_patching import head_output, path_patch, path_patch_senders
from attnkit.attribution.stream_interventions import (
    MLPAblation,
    MLPPatch,
    ResidualAblation,
    ResidualPatch,
    record_stream,
)
from attnkit.models.induction import induction_scores, repeated_random_tokens
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from tiny import nonzero_biases


def _lm(shape="llama", n_layers=3, **kw):
    torch.manual_seed(0)
    extra = {"n_kv_heads": 2} if shape == "llama" else {}
    cfg = LanguageModelConfig(
        vocab_size=40, d_model=32, n_layers=n_layers, n_heads=4, max_len=32, shape=shape, **extra, **kw
    )
    return nonzero_biases(LanguageModel(cfg)).double().eval()


def _ids(seed=1, n=10, b=2):
    return torch.randint(4, 40, (b, n), generator=torch.Generator().manual_seed(seed))


def _blocks_by_hand(model, ids, edit):
    """The logits with the blocks called one by one; ``edit(kind, layer, tensor)`` may return a replacement of
    the residual stream entering block ``layer`` (kind ``"resid"``, layer ``L`` = after the last block) or
    of block ``layer``'s MLP output (kind ``"mlp"``)."""
    h = model.embed_tokens(ids)
    if model.embed_positions is not None:
        h = h + model.embed_positions(torch.arange(ids.shape[1]))
    for i, block in enumerate(model.layers):
        h = edit("resid", i, h)
        h = h + block.self_attn(block.input_layernorm(h)).context
        if block.mlp is not None:
            h = h + edit("mlp", i, block.mlp(block.post_attention_layernorm(h)))
    return model.lm_head(model.norm(edit("resid", len(model.layers), h)))


def _keep(kind, layer, t):
    return t


# --- residual-stream and MLP sites ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_zero_ablating_an_mlp_equals_a_copy_with_its_output_layer_zeroed(shape):
    model = _lm(shape)
    ids = _ids()
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.layers[1].mlp.down_proj.weight.zero_()
        if twin.layers[1].mlp.down_proj.bias is not None:
            twin.layers[1].mlp.down_proj.bias.zero_()
        want = twin(ids).logits
        with intervene(model, [MLPAblation(1)]):
            got = model(ids).logits
    assert (got - want).abs().max() <= 1e-6
    assert (got - model(ids).logits).abs().max() > 1e-4


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_residual_and_mlp_sites_equal_the_blocks_edited_by_hand(shape):
    model = _lm(shape)
    clean, corrupt = _ids(1), _ids(2)
    n_layers = len(model.layers)
    with torch.no_grad():
        assert (_blocks_by_hand(model, clean, _keep) - model(clean).logits).abs().max() <= 1e-9
        with record_stream(model, residual=range(n_layers + 1), mlp=[0, 2]) as rec:
            model(corrupt)
        for layer in range(n_layers + 1):
            for positions in [(3,), (0, 7), None]:
                pos = list(range(10)) if positions is None else list(positions)
                src = rec.residual(layer)

                def edit(kind, i, t, layer=layer, pos=pos, src=src):
                    if kind == "resid" and i == layer:
                        t = t.clone()
                        t[:, pos] = src[:, pos]
                    return t

                with intervene(model, [ResidualPatch(layer, src, positions=positions)]):
                    got = model(clean).logits
                assert (got - _blocks_by_hand(model, clean, edit)).abs().max() <= 1e-6

                def zero(kind, i, t, layer=layer, pos=pos):
                    if kind == "resid" and i == layer:
                        t = t.clone()
                        t[:, pos] = 0
                    return t

                with intervene(model, [ResidualAblation(layer, positions=positions)]):
                    got = model(clean).logits
                assert (got - _blocks_by_hand(model, clean, zero)).abs().max() <= 1e-6
        mean = rec.mlp(2).mean((0, 1))  # (D,)

        def mlp_edit(kind, i, t):
            if kind == "mlp" and i == 0:
                t = t.clone()
                t[:, 4] = rec.mlp(0)[:, 4]
            if kind == "mlp" and i == 2:
                t = mean.expand_as(t)
            return t

        ivs = [MLPPatch(0, rec.mlp(0), positions=(4,)), MLPAblation(2, mode="mean", reference=rec.mlp(2))]
        with intervene(model, ivs):
            got = model(clean).logits
        assert (got - _blocks_by_hand(model, clean, mlp_edit)).abs().max() <= 1e-6


def test_patching_the_clean_run_into_itself_changes_nothing():
    model = _lm()
    ids = _ids()
    n_layers = len(model.layers)
    with torch.no_grad():
        want = model(ids).logits
        with (
            record_stream(model, residual=range(n_layers + 1), mlp=range(n_layers)) as rec,
            record_heads(model) as heads,
        ):
            model(ids)
        ivs = [ResidualPatch(i, rec.residual(i)) for i in range(n_layers + 1)]
        ivs += [MLPPatch(i, rec.mlp(i)) for i in range(n_layers)]
        ivs += [HeadPatch(i, h, heads.get("self", i, h)) for i in range(n_layers) for h in range(4)]
        with intervene(model, ivs):
            got = model(ids).logits
    assert (got - want).abs().max() <= 1e-6
    # every patching function, clean into clean: the metric unmoved, every effect zero
    m = float(patch_metric(model, ids, ids, 7)[3](want))
    for fn in (patch_heads, patch_residual, patch_mlps):
        for direction in ("denoise", "noise"):
            out = fn(model, ids, ids, 7, direction=direction)
            assert out.normalised is None and abs(out.clean - m) <= 1e-9
            assert (out.scores - m).abs().max() <= 1e-6 and out.effect.abs().max() <= 1e-6
    pp = path_patch_senders(model, ids, ids, 7, 9, receiver=(2, 1), via="qk")
    assert (pp.scores - pp.clean).abs().max() <= 1e-6
    attr = attribution_patch(model, ids, ids, 7, 9)
    assert (attr.heads - attr.clean).abs().max() <= 1e-9 and (attr.residual - attr.clean).abs().max() <= 1e-9


def test_lm_effect_takes_the_new_sites():
    model = _lm()
    ids = _ids(b=1)[0]
    eff = lm_effect(model, ids, [MLPAblation(0), ResidualAblation(1, positions=(2,))], target=5, foil=6)
    assert eff.log_prob_change != 0 and eff.logit_diff_change != 0


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ResidualPatch(4, torch.zeros(10, 32)), "layer must be in 0..3"),
        (lambda: MLPAblation(3), "layer must be in 0..2"),
        (lambda: MLPPatch(0, torch.zeros(10, 31)), "d_model"),
    ],
)
def test_stream_requests_the_model_cannot_take(make, match):
    model = _lm()
    with pytest.raises(ValueError, match=match), intervene(model, [make()]):
        pass


def test_malformed_stream_requests_and_patching_arguments():
    with pytest.raises(ValueError, match="mode"):
        MLPAblation(0, mode="resample")
    with pytest.raises(ValueError, match="reference"):
        ResidualAblation(0, mode="mean")
    with pytest.raises(ValueError, match="source"):
        ResidualPatch(0, torch.zeros(3))
    model = _lm()
    with pytest.raises(ValueError, match="has no MLP"), intervene(_lm(attention_only=True), [MLPAblation(0)]):
        pass
    with pytest.raises(ValueError, match="same shape"):
        patch_heads(model, _ids(n=10), _ids(n=9), 5)
    with pytest.raises(ValueError, match="target"):
        patch_heads(model, _ids(), _ids(2), 40)
    with pytest.raises(ValueError, match="direction"):
        patch_heads(model, _ids(), _ids(2), 5, direction="sideways")
    with pytest.raises(ValueError, match="via"):
        path_patch(model, _ids(), _ids(2), 5, sender=(0, 0), receiver=(1, 0), via="x")
    with pytest.raises(ValueError, match="senders must be in layers before"):
        path_patch(model, _ids(), _ids(2), 5, sender=(1, 0), receiver=(1, 2))


# --- path patching ----------------------------------------------------------------------------------------


def _split_attention_by_hand(attn, xq, xk, xv, head):
    """One head with its queries, keys and values read from three inputs: plain float64 products and a per-row
    softmax over the keys ``0..i`` (no attnkit attention function)."""
    b, n, _ = xq.shape
    dh, kv = attn.head_dim, head // attn.groups
    q = attn.q_proj(xq).view(b, n, -1, dh).transpose(1, 2)
    k = attn.k_proj(xk).view(b, n, -1, dh).transpose(1, 2)
    v = attn.v_proj(xv).view(b, n, -1, dh).transpose(1, 2)
    if attn.rotary is not None:
        q, k = attn.rotary(q, k)
    out = torch.zeros(b, n, dh, dtype=xq.dtype)
    for i in range(n):
        scores = (k[:, kv, : i + 1] @ q[:, head, i].unsqueeze(-1)).squeeze(-1) / math.sqrt(dh)  # (B, i+1)
        out[:, i] = (torch.softmax(scores, -1).unsqueeze(-1) * v[:, kv, : i + 1]).sum(1)
    return out


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_head_output_equals_the_module_and_a_split_by_hand(shape):
    model = _lm(shape)
    ids, other = _ids(1), _ids(2)
    with torch.no_grad(), record_heads(model) as rec, record_stream(model, residual=[1]) as st:
        model(ids)
    block = model.layers[1]
    x = block.input_layernorm(st.residual(1))
    with torch.no_grad():
        y = block.input_layernorm(model.embed_tokens(other))
        for head in range(4):
            assert (head_output(block.self_attn, x, x, x, head) - rec.get("self", 1, head)).abs().max() <= 1e-9
            got = head_output(block.self_attn, x, y, x, head)
            assert (got - _split_attention_by_hand(block.self_attn, x, y, x, head)).abs().max() <= 1e-9


@pytest.mark.parametrize("via", ["k", "qkv"])
def test_path_patching_equals_the_blocks_with_the_receiver_fed_by_hand(via):
    model = _lm("gpt2")
    clean, corrupt = _ids(1), _ids(2)
    sender, receiver = (0, 2), (2, 1)
    with torch.no_grad():
        with record_heads(model) as rc:
            model(clean)
        with record_heads(model) as rx:
            model(corrupt)
        # the sender's clean-minus-corrupted output through its columns of the output projection
        o = model.layers[0].self_attn.o_proj.weight[:, 16:24]  # head 2 of width 8: (D, Dh)
        delta = (rc.get("self", 0, 2) - rx.get("self", 0, 2)) @ o.T  # (B, N, D)

        def edit(kind, i, t):
            if kind == "resid" and i == 2:
                edit.stream = t
            return t

        _blocks_by_hand(model, corrupt, edit)
        block = model.layers[2]
        x = block.input_layernorm(edit.stream)
        xp = block.input_layernorm(edit.stream + delta)
        z = _split_attention_by_hand(block.self_attn, *(xp if c in via else x for c in "qkv"), 1)
        with intervene(model, [HeadPatch(2, 1, z)]):
            logits = model(corrupt).logits[:, -1]
        want = float((logits[:, 7] - logits[:, 9]).mean())
    got = path_patch_senders(model, clean, corrupt, 7, 9, receiver=receiver, via=via, senders=[sender])
    assert abs(float(got.scores[sender]) - want) <= 1e-9
    assert torch.isnan(got.scores).sum() == got.scores.numel() - 1
    assert (
        abs(
            path_patch(model, clean, corrupt, 7, 9, sender=sender, receiver=receiver, via=via)
            - float(got.effect[sender])
        )
        <= 1e-12
    )


# --- attribution patching ---------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_attribution_patching_equals_a_finite_difference_along_the_patch(direction):
    model = _lm("gpt2")
    clean, corrupt = _ids(1), _ids(2)
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    attr = attribution_patch(model, clean, corrupt, 7, 9, direction=direction)
    metric = patch_metric(model, clean, corrupt, 7, 9)[3]
    n_layers = len(model.layers)
    eps = 1e-4
    with torch.no_grad():
        with record_heads(model) as hs, record_stream(model, residual=range(n_layers + 1)) as rs:
            model(source)
        with record_heads(model) as hb, record_stream(model, residual=range(n_layers + 1)) as rb:
            m_base = float(metric(model(base).logits))

        def slope(make):
            up, down = [], []
            for sign, out in ((1, up), (-1, down)):
                with intervene(model, [make(sign * eps)]):
                    out.append(float(metric(model(base).logits)))
            return (up[0] - down[0]) / (2 * eps)

        for layer, head in [(0, 1), (1, 3), (2, 0)]:
            a, b = hs.get("self", layer, head), hb.get("self", layer, head)
            want = m_base + slope(lambda t, layer=layer, head=head, a=a, b=b: HeadPatch(layer, head, b + t * (a - b)))
            assert abs(float(attr.heads[layer, head]) - want) <= 1e-6
        for layer, pos in [(0, 3), (2, 9), (3, 5)]:
            a, b = rs.residual(layer), rb.residual(layer)
            want = m_base + slope(
                lambda t, layer=layer, pos=pos, a=a, b=b: ResidualPatch(layer, b + t * (a - b), positions=(pos,))
            )
            assert abs(float(attr.residual[layer, pos]) - want) <= 1e-6
    assert all(p.grad is None for p in model.parameters())


# --- the shipped models -----------------------------------------------------------------------------------


def _induction_pair(vocab, length=20, seed=0):
    """``[r; r]`` without its last token, the same with ``r``'s first copy redrawn, and the token that repeats."""
    g = torch.Generator().manual_seed(seed)
    clean = repeated_random_tokens(vocab, length, 1, generator=g)[0]
    corrupt = clean.clone()
    corrupt[:length] = repeated_random_tokens(vocab, length, 1, generator=g)[0, :length]
    got = repeated_tokens_pair(vocab, length, seed=seed)
    assert torch.equal(got[0], clean[:-1]) and torch.equal(got[1], corrupt[:-1]) and got[2] == int(clean[-1])
    return got


def test_path_patching_finds_the_induction_circuit_with_no_head_given():
    from attnkit.service import open_model

    lm = open_model("attention-only-2l-en").impl.model
    scores = induction_scores(lm)
    layer, head, _ = scores.best_induction_head()  # 1-based
    receiver = (layer - 1, head - 1)
    prev = max(range(4), key=lambda h: scores.previous_token[0][h])  # layer 1's previous-token head
    for seed in range(3):
        clean, corrupt, target = _induction_pair(lm.config.vocab_size, seed=seed)
        result = path_patch_senders(lm, clean, corrupt, target, receiver=receiver, via="k", direction="noise")
        (top_layer, top_head, top), (_, _, second) = result.ranked()[:2]
        assert (top_layer, top_head) == (0, prev) and top > 0.15 and second < 0.05
        # through its query the previous-token head does nothing
        q = path_patch_senders(lm, clean, corrupt, target, receiver=receiver, via="q", direction="noise")
        assert q.effect.abs().max() < 0.05


def test_attribution_and_activation_patching_both_run_on_lm_4l():
    """Their agreement on this task is not stable enough to assert (benchmarks/patching_attribution.py measures
    Pearson correlations from -0.18 to 0.85 across seeds on lm-4l-en); asserted: both run, their costs, and
    the exact agreement where the estimate is exact (the finite-difference and clean-into-clean tests above)."""
    from attnkit.service import open_model

    lm = open_model("lm-4l-en").impl.model
    clean, corrupt, target = _induction_pair(lm.config.vocab_size)
    comp = compare_with_activation_patching(lm, clean, corrupt, target, residual=False)
    assert math.isfinite(comp.head_correlation) and -1 <= comp.head_correlation <= 1
    assert comp.attribution.passes == 3 and comp.heads.runs == 2 + 16
    assert (
        abs(comp.attribution.clean - comp.heads.clean) <= 1e-9
        and abs(comp.attribution.corrupt - comp.heads.corrupt) <= 1e-9
    )
    assert comp.to_dict()["head_correlation"] == comp.head_correlation


def test_cli_patching_json_equals_the_library(capsys):
    """``attnkit heads --patching --json`` prints what the library computes; the table names the circuit."""
    from attnkit.cli import main
    from attnkit.service import open_model

    name = "attention-only-2l-en"
    argv = ["heads", "--model", name, "--patching", "--repeated", "12", "--seed", "3", "--device", "cpu"]
    assert main([*argv, "--json"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    lm = open_model(name).impl.model
    clean, corrupt, target = repeated_tokens_pair(lm.config.vocab_size, 12, seed=3)
    want = patch_heads(lm, clean, corrupt, target, direction="noise").to_dict()
    assert got["target"] == target and got["induction_head"]["layer"] == 2 and got["direction"] == "noise"
    for a, b in zip(got["heads"]["cells"], want["cells"]):
        assert (a["layer"], a["head"]) == (b["layer"], b["head"]) and abs(a["effect"] - b["effect"]) <= 1e-9
    k = path_patch_senders(lm, clean, corrupt, target, receiver=(1, 1), via="k", direction="noise").to_dict()
    assert [(s["layer"], s["head"]) for s in got["paths"]["k"]["senders"]] == [
        (s["layer"], s["head"]) for s in k["senders"]
    ]
    assert main(argv) in (0, None)
    assert "largest via k: L1H1" in capsys.readouterr().out
    assert main(["heads", "--model", name, "--repeated", "5", "--device", "cpu"]) == 2
    assert "--repeated and --direction are for --patching" in capsys.readouterr().err
