"""Head interventions (attnkit.attribution.interventions) and their effects, against independent references
in float64: a zero-ablated head against a copy of the model with that head's output-projection columns
zeroed, a mean-ablated head against a copy with the mean folded into the bias, the clean run patched into
itself, a head patched from a corrupted run against the block computed by hand, Michel et al.'s gradient
importance against a finite difference of the gate; and the shipped models under ablation."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.head_importance import ablation_losses, gate_gradients, head_importance, verse_losses
from attnkit.attribution.intervention_effects import forced_batch, forced_log_likelihood, lm_effect
from attnkit.attribution.interventions import (
    HeadAblation,
    HeadGate,
    HeadPatch,
    attention_sites,
    head_mean,
    intervene,
    record_heads,
)
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.tasks.translation import Translator
from tiny import nonzero_biases, tiny_transformer

SOURCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra."]
REFERENCES = ["And God said, Let there be light.", "In the beginning God created the heavens and the earth."]


def _lm(shape="llama", **kw):
    torch.manual_seed(0)
    extra = {"n_kv_heads": 2} if shape == "llama" else {}
    cfg = LanguageModelConfig(vocab_size=40, d_model=32, n_layers=3, n_heads=4, max_len=32, shape=shape, **extra, **kw)
    return nonzero_biases(LanguageModel(cfg)).double().eval()


def _ids(seed=1, n=12, b=2):
    return torch.randint(3, 40, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def translator(tokenizer):
    return Translator(nonzero_biases(tiny_transformer(seed=0)).double(), tokenizer)


def _zeroed_copy(model, site, layer, head):
    """A deep copy of ``model`` whose output projection at (site, layer) reads nothing from ``head``."""
    twin = copy.deepcopy(model)
    hs = attention_sites(twin)[site, layer]
    with torch.no_grad():
        hs.projection.weight[:, head * hs.head_dim : (head + 1) * hs.head_dim] = 0
    return twin


def _tf_logits(model, batch):
    return model(batch.src, batch.src_lengths, batch.tgt_in)[0]


# --- exactness: ablation -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_zero_ablation_equals_zeroed_output_projection_columns_lm(shape):
    model, ids = _lm(shape), _ids()
    for layer, head in [(0, 0), (1, 3), (2, 1)]:
        with intervene(model, [HeadAblation(layer, head)]):
            got = model(ids).logits
        want = _zeroed_copy(model, "self", layer, head)(ids).logits
        assert (got - want).abs().max() <= 1e-6
        assert (got - model(ids).logits).abs().max() > 1e-4  # the head did matter: the check can fail


@pytest.mark.parametrize("site", ["encoder", "self", "cross"])
def test_zero_ablation_equals_zeroed_output_projection_columns_translator(translator, site):
    model = translator.model
    batch = forced_batch(translator, SOURCES, REFERENCES)
    with intervene(model, [HeadAblation(1, 1, site=site)]):
        got = _tf_logits(model, batch)
        decoded = translator.translate(SOURCES, beam_size=2)
    twin = _zeroed_copy(model, site, 1, 1)
    assert (got - _tf_logits(twin, batch)).abs().max() <= 1e-6
    assert (got - _tf_logits(model, batch)).abs().max() > 1e-4
    # the decoder's cached steps (beam search) see the intervention too
    assert [d.tokens for d in decoded] == [
        d.tokens for d in Translator(twin, translator.tokenizer).translate(SOURCES, beam_size=2)
    ]


def test_mean_ablation_equals_mean_folded_into_the_bias():
    model, ids, ref_ids = _lm("gpt2"), _ids(), _ids(seed=7, b=5)  # gpt2: the output projection has a bias
    with record_heads(model) as rec:
        model(ref_ids)
    mean = head_mean(rec.get("self", 1, 2))  # (D_h,)
    plain = rec.get("self", 1)[:, :, 2].reshape(-1, mean.shape[0]).sum(0) / (5 * 12)
    assert torch.allclose(mean, plain, atol=1e-12)
    with intervene(model, [HeadAblation(1, 2, mode="mean", reference=mean)]):
        got = model(ids).logits
    twin = _zeroed_copy(model, "self", 1, 2)
    proj = attention_sites(twin)["self", 1].projection
    with torch.no_grad():
        proj.bias += attention_sites(model)["self", 1].projection.weight[:, 16:24] @ mean
    assert (got - twin(ids).logits).abs().max() <= 1e-6


def test_resample_ablation_takes_a_reference_row():
    model, ids, ref_ids = _lm(), _ids(b=1), _ids(seed=9, b=1)
    with record_heads(model) as rec:
        model(ref_ids)
    ref = rec.get("self", 0, 1)  # (1, N, D_h): one reference row, so every row takes it
    with intervene(model, [HeadAblation(0, 1, mode="resample", reference=ref)]):
        got = model(ids).logits
    with intervene(model, [HeadPatch(0, 1, source=ref)]):
        want = model(ids).logits
    assert torch.equal(got, want)
    assert (got - model(ids).logits).abs().max() > 1e-4


def test_head_mean_leaves_out_the_masked_positions():
    out = torch.arange(2 * 3 * 2, dtype=torch.float64).view(2, 3, 2)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert torch.equal(head_mean(out, mask), (out[0, 0] + out[0, 1] + out[1, 0]) / 3)
    assert torch.equal(head_mean(out), out.reshape(6, 2).mean(0))
    with pytest.raises(ValueError, match="mask selects no position"):
        head_mean(out, torch.zeros(2, 3, dtype=torch.bool))


def test_recording_a_greedy_search_gives_its_teacher_forced_heads(translator):
    """The decoder's cached steps, recorded and joined, are the heads of one teacher-forced pass over
    bos + the search's output: the hooks see every step, in order."""
    model = translator.model
    with record_heads(model) as steps:
        out = translator.translate(SOURCES[:1], beam_size=1)[0]
    batch = forced_batch(translator, SOURCES[:1], [out.translation])
    tgt_in = torch.tensor([[translator.tokenizer.bos_id, *out.tokens]])
    with torch.no_grad(), record_heads(model) as forced:
        model(batch.src, batch.src_lengths, tgt_in)
    for site in ("self", "cross"):
        got, want = steps.get(site, 1), forced.get(site, 1)  # (1, T', H, D_h), (1, T, H, D_h)
        n = min(got.shape[1], want.shape[1])
        assert n >= len(out.tokens) >= 1 and (got[:, :n] - want[:, :n]).abs().max() <= 1e-9
    assert steps.get("encoder", 0).shape[1] == batch.src.shape[1]


# --- exactness: patching -------------------------------------------------------------------------------


def test_patching_the_clean_run_into_itself_changes_nothing_lm():
    model, ids = _lm(), _ids()
    with record_heads(model) as rec:
        clean = model(ids).logits
    patches = [HeadPatch(layer, h, source=rec.get("self", layer, h)) for layer in range(3) for h in range(4)]
    with intervene(model, patches):
        got = model(ids).logits
    assert (got - clean).abs().max() <= 1e-6


def test_patching_the_clean_run_into_itself_changes_nothing_translator(translator):
    model = translator.model
    batch = forced_batch(translator, SOURCES, REFERENCES)
    with record_heads(model) as rec:
        clean = _tf_logits(model, batch)
    patches = [HeadPatch(k[1], h, source=rec.get(*k, h), site=k[0]) for k in attention_sites(model) for h in range(2)]
    with intervene(model, patches):
        got = _tf_logits(model, batch)
    assert (got - clean).abs().max() <= 1e-6


def _attention_by_hand(attn, x):
    """A causal self-attention's heads ``(B, N, H, D_h)`` from its input, in plain float64 products and a
    per-row softmax (no attnkit attention function)."""
    b, n, _ = x.shape
    h, dh, g = attn.n_heads, attn.head_dim, attn.groups
    q = attn.q_proj(x).view(b, n, h, dh).transpose(1, 2)
    k = attn.k_proj(x).view(b, n, -1, dh).transpose(1, 2)
    v = attn.v_proj(x).view(b, n, -1, dh).transpose(1, 2)
    q, k = attn.rotary(q, k, offset=0)
    out = torch.zeros(b, n, h, dh, dtype=x.dtype)
    for i in range(n):
        for head in range(h):
            kv = head // g
            scores = (k[:, kv, : i + 1] @ q[:, head, i].unsqueeze(-1)).squeeze(-1) / math.sqrt(dh)  # (B, i+1)
            w = torch.softmax(scores, -1)
            out[:, i, head] = (w.unsqueeze(-1) * v[:, kv, : i + 1]).sum(1)
    return out


def _run_by_hand(model, ids, patch=None):
    """The language model's logits with its blocks written out; ``patch = (layer, head, positions, source)``
    replaces that head's output at those positions. Returns (logits, every layer's heads)."""
    h, heads = model.embed_tokens(ids), []
    for i, block in enumerate(model.layers):
        a = _attention_by_hand(block.self_attn, block.input_layernorm(h))  # (B, N, H, D_h)
        if patch is not None and patch[0] == i:
            a = a.clone()
            a[:, list(patch[2]), patch[1]] = patch[3][:, list(patch[2])]
        heads.append(a)
        h = h + block.self_attn.o_proj(a.flatten(-2))
        h = h + block.mlp(block.post_attention_layernorm(h))
    return model.lm_head(model.norm(h)), heads


def test_activation_patching_from_a_corrupted_run_equals_the_run_by_hand():
    model = _lm()
    clean, corrupt = _ids(seed=1), _ids(seed=2)
    with torch.no_grad():
        by_hand_clean, _ = _run_by_hand(model, clean)
        assert (by_hand_clean - model(clean).logits).abs().max() <= 1e-9  # the hand-written run is the model
        _, corrupt_heads = _run_by_hand(model, corrupt)
        with record_heads(model) as rec:
            model(corrupt)
        source = rec.get("self", 1, 3)
        assert (source - corrupt_heads[1][:, :, 3]).abs().max() <= 1e-9
        for positions in [None, (4, 9)]:
            with intervene(model, [HeadPatch(1, 3, source=source, positions=positions)]):
                got = model(clean).logits
            pos = range(12) if positions is None else positions
            want, _ = _run_by_hand(model, clean, patch=(1, 3, pos, corrupt_heads[1][:, :, 3]))
            assert (got - want).abs().max() <= 1e-6
            assert (got - model(clean).logits).abs().max() > 1e-4
        # a causal model: positions before the first patched one are untouched
        with intervene(model, [HeadPatch(1, 3, source=source, positions=(4, 9))]):
            got = model(clean).logits
        assert (got[:, :4] - model(clean).logits[:, :4]).abs().max() <= 1e-12


# --- gates and importance --------------------------------------------------------------------------------


def test_gate_gradient_equals_a_finite_difference_of_the_gate(translator):
    model = translator.model
    batch = forced_batch(translator, SOURCES, REFERENCES)
    grads = gate_gradients(model, batch)
    assert set(grads) == set(attention_sites(model))
    eps = 1e-5
    for (site, layer), g in grads.items():
        assert g.shape == (2, 2)
        for h in range(2):
            losses = []
            for sign in (1, -1):
                gates = torch.ones(2, dtype=torch.float64)
                gates[h] += sign * eps
                with torch.no_grad(), intervene(model, [HeadGate(layer, gates, site=site)]):
                    losses.append(verse_losses(model, batch))
            fd = (losses[0] - losses[1]) / (2 * eps)  # (B,) each verse's own derivative
            assert torch.allclose(g[:, h], fd, atol=1e-7, rtol=1e-5), (site, layer, h)


def test_gates_of_ones_change_nothing_and_a_zero_gate_is_zero_ablation(translator):
    model = translator.model
    batch = forced_batch(translator, SOURCES, REFERENCES)
    clean = _tf_logits(model, batch)
    with intervene(model, [HeadGate(0, torch.ones(2, dtype=torch.float64), site="cross")]):
        assert torch.equal(_tf_logits(model, batch), clean)
    with intervene(model, [HeadGate(0, torch.tensor([1.0, 0.0], dtype=torch.float64), site="cross")]):
        gated = _tf_logits(model, batch)
    with intervene(model, [HeadAblation(0, 1, site="cross")]):
        assert (gated - _tf_logits(model, batch)).abs().max() <= 1e-12


def test_ablation_importance_against_zeroed_copies(translator):
    model = translator.model
    batch = forced_batch(translator, SOURCES, REFERENCES)
    losses = ablation_losses(model, batch, sites=("encoder", "cross"))
    assert {k[0] for k in losses} == {"encoder", "cross"}
    clean = verse_losses(model, batch)
    want = verse_losses(_zeroed_copy(model, "encoder", 0, 1), batch) - clean
    assert torch.allclose(losses["encoder", 0][:, 1], want, atol=1e-9)
    # the loss is the forced NLL per piece: the log-probabilities gathered by hand
    lp = F.log_softmax(_tf_logits(model, batch), -1).detach()
    rows = [
        -sum(float(lp[b, t, batch.tgt_out[b, t]]) for t in range(int(batch.mask[b].sum()))) / int(batch.mask[b].sum())
        for b in range(2)
    ]
    assert torch.allclose(clean, torch.tensor(rows, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(forced_log_likelihood(model, batch), -clean * batch.mask.sum(-1), atol=1e-9)


def test_head_importance_report(translator):
    report = head_importance(translator, SOURCES, REFERENCES, batch_size=1)
    assert [(h.site, h.layer, h.head) for h in report.heads] == [
        (s, layer, h) for s in ("encoder", "self", "cross") for layer in range(2) for h in range(2)
    ]
    batch = forced_batch(translator, SOURCES, REFERENCES)
    abl = ablation_losses(translator.model, batch)
    grad = gate_gradients(translator.model, batch)
    for h in report.heads:  # batches of one verse, combined: the same as one batch of both
        assert math.isclose(h.ablation, float(abl[h.site, h.layer][:, h.head].mean()), abs_tol=1e-9)
        assert math.isclose(h.gradient, float(grad[h.site, h.layer][:, h.head].abs().mean()), abs_tol=1e-9)
    assert report.ranked("gradient")[0].gradient == max(h.gradient for h in report.heads)
    d = report.to_dict()
    assert d["verses"] == 2 and d["heads"][0]["layer"] == 1 and d["heads"][0]["head"] == 1


# --- requests, scoping and errors ------------------------------------------------------------------------


def _hooks(model):
    return sum(len(hs.projection._forward_pre_hooks) for hs in attention_sites(model).values())


def test_hooks_are_removed_after_the_block_even_on_error():
    model, ids = _lm(), _ids()
    clean = model(ids).logits
    short = HeadPatch(0, 0, source=torch.zeros(2, 5, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="source"), intervene(model, [short]):
        assert _hooks(model) == 1
        model(ids)  # 12 positions, the source 5
    assert _hooks(model) == 0
    assert torch.equal(model(ids).logits, clean)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: HeadAblation(0, 0, site="cross"), "site 'cross' is not in this model"),
        (lambda: HeadAblation(3, 0), "layer must be in 0..2"),
        (lambda: HeadAblation(0, 4), "head must be in 0..3"),
        (lambda: HeadAblation(0, 0, mode="mean", reference=torch.zeros(5)), "head width 8"),
        (lambda: HeadGate(0, torch.ones(3)), "one per head"),
    ],
)
def test_requests_the_model_cannot_take(make, match):
    with pytest.raises(ValueError, match=match), intervene(_lm(), [make()]):
        pass


def test_malformed_requests():
    with pytest.raises(ValueError, match="mode must be one of"):
        HeadAblation(0, 0, mode="drop")
    with pytest.raises(ValueError, match="needs reference"):
        HeadAblation(0, 0, mode="resample")
    with pytest.raises(ValueError, match="site must be one of"):
        HeadAblation(0, 0, site="decoder")
    with pytest.raises(ValueError, match="layer must be an int >= 0"):
        HeadPatch(-1, 0, source=torch.zeros(3, 8))
    with pytest.raises(TypeError, match="HeadAblation, HeadPatch or HeadGate"), intervene(_lm(), ["L1.H1"]):
        pass
    with pytest.raises(TypeError, match="language model or Transformer translator"):
        attention_sites(torch.nn.Linear(2, 2))


def test_lm_effect_log_prob_and_logit_difference():
    model, ids = _lm(), _ids(b=1)[0]
    e = lm_effect(model, ids, [HeadAblation(2, 0)], target=5, foil=7)
    with torch.no_grad():
        logits = model(ids[None]).logits[0, -1]
    assert math.isclose(e.clean_log_prob, float(F.log_softmax(logits, -1)[5]), abs_tol=1e-12)
    assert math.isclose(e.clean_logit_diff, float(logits[5] - logits[7]), abs_tol=1e-12)
    with torch.no_grad(), intervene(model, [HeadAblation(2, 0)]):
        ablated = model(ids[None]).logits[0, -1]
    assert math.isclose(
        e.log_prob_change, float(F.log_softmax(ablated, -1)[5] - F.log_softmax(logits, -1)[5]), abs_tol=1e-12
    )
    assert math.isclose(e.logit_diff_change, float((ablated[5] - ablated[7]) - (logits[5] - logits[7])), abs_tol=1e-12)
    assert lm_effect(model, ids, [], target=5).log_prob_change == 0.0
    with pytest.raises(ValueError, match="target must be a token id"):
        lm_effect(model, ids, [], target=40)


# --- the shipped models ----------------------------------------------------------------------------------


def test_ablating_the_induction_head_of_the_shipped_attention_only_model():
    """``attention-only-2l-en``'s induction head (layer 2, head 2, as ``attnkit models`` reports it) is what
    predicts the second half of a repeated random sequence: ablating it costs far more than ablating a head
    of layer 1 other than the previous-token head."""
    from attnkit.service import open_model

    lm = open_model("attention-only-2l-en").impl
    model = lm.model
    r = torch.randint(10, model.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([r, r], 1)

    def second_half_log_prob(ivs):
        with torch.no_grad(), intervene(model, ivs):
            lp = F.log_softmax(model(ids).logits.float(), -1)
        return float(lp[0, 20:-1].gather(-1, ids[0, 21:, None]).mean())

    clean = second_half_log_prob([])
    drops = {(1, h): clean - second_half_log_prob([HeadAblation(1, h)]) for h in range(4)}
    assert clean > -1.0  # the model copies: the repeated half is nearly certain
    assert max(drops, key=drops.get) == (1, 1)
    assert drops[1, 1] > 2.0


def test_ablating_every_cross_attention_head_cuts_the_translation_from_its_source():
    """With every cross-attention head of ``transformer-es-en`` zero-ablated the decoder cannot read the
    source: two different verses translate alike, and each verse's forced reference loses likelihood."""
    from attnkit.attribution.intervention_effects import translation_effect
    from attnkit.service import open_model

    m = open_model("transformer-es-en")
    cuts = [HeadAblation(layer, h, site="cross") for layer in range(3) for h in range(4)]
    effects = [translation_effect(m, s, r, cuts) for s, r in zip(SOURCES, REFERENCES)]
    assert effects[0].clean_translation != effects[1].clean_translation
    # the same words, one cut short: the search's length limit grows with the source's length
    short, long = sorted((e.translation for e in effects), key=len)
    assert long.startswith(short) and len(short.split()) >= 5
    assert all(e.log_likelihood_change < -10 for e in effects)
    assert effects[0].clean_translation == m.impl.translate([SOURCES[0]])[0].translation


# --- the command line ------------------------------------------------------------------------------------


def test_cli_heads_scores_every_head_of_the_shipped_translator(bible_home, capsys):
    """``attnkit heads --json`` on two test verses: 3 attention types x 3 layers x 4 heads, the same numbers
    as the library's :func:`head_importance` on those verses; the table names every type."""
    import json

    from attnkit.cli import main
    from attnkit.data.corpus import open_corpus
    from attnkit.service import open_model

    assert main(["--home", str(bible_home), "heads", "--model", "transformer-es-en", "--limit", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["verses"] == 2 and len(got["heads"]) == 36
    pairs = open_corpus("bible", bible_home).pairs("test", limit=2)
    want = head_importance(open_model("transformer-es-en"), [p.src for p in pairs], [p.tgt for p in pairs])
    for g, w in zip(got["heads"], want.heads):
        assert (g["site"], g["layer"], g["head"]) == (w.site, w.layer + 1, w.head + 1)
        assert math.isclose(g["ablation"], w.ablation, abs_tol=1e-6)
        assert math.isclose(g["gradient"], w.gradient, abs_tol=1e-6)
    assert main(["--home", str(bible_home), "heads", "--model", "transformer-es-en", "--limit", "1"]) == 0
    table = capsys.readouterr().out
    for name in ("encoder self-attention", "decoder self-attention", "cross-attention", "most important by gradient"):
        assert name in table


def test_cli_heads_refuses_what_is_not_a_transformer_translator(capsys):
    from attnkit.cli import main

    assert main(["heads", "--model", "rnnsearch-es-en", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "neither an attnkit Transformer translator nor a language model" in err and "Traceback" not in err
