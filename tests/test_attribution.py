"""Attribution methods (attnkit.attribution) on tiny models: integrated gradients' completeness, value zeroing
and ALTI+ against slow plain-loop references, the Transformer replay against the model's own forward, every
method's shape and normalisation, and the errors."""

import math

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnkit.attribution import (
    METHODS,
    decomposition,
    explain,
    explain_caption,
    forced_caption,
    forced_translation,
    methods_for,
    normalise_rows,
)
from attnkit.attribution.methods import (
    UnknownMethodError,
    canonical_method,
    caption_log_probs,
    cells,
    translation_log_probs,
)
from attnkit.attribution.trace import trace_transformer
from attnkit.data.vocab import CaptionVocab
from attnkit.errors import InputError
from attnkit.models.captioner import CaptionerConfig, ShowAttendTell
from attnkit.models.seq2seq import RNNEncDec, RNNSearch, Seq2SeqConfig
from attnkit.tasks.captioning import Captioner
from attnkit.tasks.translation import Translator
from tiny import nonzero_biases, tiny_transformer

SOURCE = "Y dijo Dios: Sea la luz."
TARGET = "And God said, Let there be light."


def _transformer(norm_first=True, seed=0):
    return nonzero_biases(tiny_transformer(seed=seed, norm_first=norm_first))


def _rnn(kind=RNNSearch, seed=0):
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(vocab_size=8000, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0)
    return kind(cfg).eval()


@pytest.fixture(scope="module", params=["pre-norm", "post-norm"])
def transformer(request, tokenizer):
    return Translator(_transformer(norm_first=request.param == "pre-norm"), tokenizer)


@pytest.fixture(scope="module")
def rnnsearch(tokenizer):
    return Translator(_rnn(), tokenizer)


@pytest.fixture(scope="module")
def captioner():
    torch.manual_seed(0)
    vocab = CaptionVocab(["a", "bag", "at", "the", "top", "left", "and", "coat"])
    cfg = CaptionerConfig(
        vocab_size=len(vocab), canvas=16, channels=[4, 8], feature_dim=8, pos_dim=4, grid=4, emb_dim=8, hidden_dim=16
    )
    cfg.attn_dim = 8
    return Captioner(ShowAttendTell(cfg).eval(), vocab)


# ---------------------------------------------------------------------------------------- the replay
def test_the_transformer_replay_is_the_models_own_forward(transformer):
    """The trace computes every attention output as Σ_j T_ij + b_O; its logits equal the model's, so the
    per-key terms add up exactly to what the model computes (pre-norm and post-norm)."""
    pair = forced_translation(transformer, SOURCE, TARGET)
    tr = trace_transformer(transformer.model, pair.src, pair.tgt_in)
    logits, _ = transformer.model(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    torch.testing.assert_close(tr.logits, logits[0], atol=1e-5, rtol=1e-5)
    maps = transformer.model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    for layer, lt in enumerate(tr.decoder):
        torch.testing.assert_close(lt.cross_block.weights, maps.cross[0, layer], atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------- value zeroing
def _value_zeroing_reference(model, pair, layer):
    """For each source piece j: run the model's own decoder with layer ``layer``'s cross-attention value
    vector of piece j set to zero (every head), read that layer's output, 1 − cosine with the original."""
    mha = model.decoder.layers[layer].multihead_attn
    outputs = {}
    hook = model.decoder.layers[layer].register_forward_hook(lambda m, i, o: outputs.__setitem__("y", o[0][0]))
    original = mha.project_kv

    def run():
        with torch.no_grad():
            model(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
        return outputs["y"].double()  # (T, D)

    try:
        y = run()
        cols = []
        for j in range(len(pair.src)):

            def zeroed(key, value, j=j):
                k, v = original(key, value)
                v = v.clone()
                v[:, :, j] = 0.0  # (B, H, S, Dh): piece j's value, every head
                return k, v

            mha.project_kv = zeroed
            y_j = run()
            del mha.project_kv
            cols.append([1.0 - float(F.cosine_similarity(y[t], y_j[t], dim=0)) for t in range(len(y))])
    finally:
        hook.remove()
        if "project_kv" in mha.__dict__:
            del mha.project_kv
    return torch.tensor(cols, dtype=torch.float64).T  # (T, S)


@pytest.mark.parametrize("layer", [1, 2])
def test_value_zeroing_equals_rerunning_the_model_with_a_zeroed_value(transformer, layer):
    pair = forced_translation(transformer, SOURCE, TARGET)
    fast = decomposition.value_zeroing(trace_transformer(transformer.model, pair.src, pair.tgt_in), layer=layer)
    slow = _value_zeroing_reference(transformer.model, pair, layer - 1)
    torch.testing.assert_close(fast.double(), slow.clamp_min(0), atol=2e-5, rtol=1e-3)
    assert slow.abs().max() > 1e-4  # the check is not vacuous


# ---------------------------------------------------------------------------------------- ALTI+
def _capture_layer_inputs(model, pair):
    """The input of every encoder and decoder layer and the memory, from the model's own forward (hooks)."""
    enc_in, dec_in, mem = [], [], {}
    hooks = [
        lyr.register_forward_pre_hook(lambda m, a: enc_in.append(a[0][0].double())) for lyr in model.encoder.layers
    ]
    hooks += [
        lyr.register_forward_pre_hook(lambda m, a: dec_in.append(a[0][0].double())) for lyr in model.decoder.layers
    ]
    hooks.append(model.decoder.register_forward_pre_hook(lambda m, a: mem.__setitem__("m", a[1][0].double())))
    try:
        with torch.no_grad():
            model(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    finally:
        for h in hooks:
            h.remove()
    return enc_in, dec_in, mem["m"]


def _ln(ln, x):
    return F.layer_norm(x, x.shape[-1:], ln.weight.double(), ln.bias.double(), ln.eps)


def _block_terms_loop(mha, q_in, kv_in, causal):
    """T_i(x_j) = Σ_h α^h_ij (W_V^h u_j + b_V^h) W_O^h by plain loops, float64, from the raw weights."""
    d = mha.embed_dim
    nh, dh = mha.num_heads, mha.head_dim
    w = mha.in_proj_weight.double()
    b = mha.in_proj_bias.double()
    wo = mha.out_proj.weight.double()
    nq, nk = len(q_in), len(kv_in)
    terms = [[torch.zeros(d, dtype=torch.float64) for _ in range(nk)] for _ in range(nq)]
    for h in range(nh):
        rows = slice(h * dh, (h + 1) * dh)
        for i in range(nq):
            q = w[:d][rows] @ q_in[i] + b[:d][rows]
            logits = []
            for j in range(nk):
                k = w[d : 2 * d][rows] @ kv_in[j] + b[d : 2 * d][rows]
                logits.append(float(q @ k) / math.sqrt(dh) if (not causal or j <= i) else -math.inf)
            top = max(logits)
            ex = [math.exp(x - top) if x != -math.inf else 0.0 for x in logits]
            for j in range(nk):
                v = w[2 * d :][rows] @ kv_in[j] + b[2 * d :][rows]
                terms[i][j] = terms[i][j] + (ex[j] / sum(ex)) * (wo[:, rows] @ v)
    return terms


def _contrib_loop(terms, residual, post_norm, out_bias, residual_column):
    """ALTI's c_ij from lists of term vectors, by loops: max(0, ‖x̃‖₁ − ‖x̃ − T_j‖₁) normalised."""
    rows = []
    for i, row in enumerate(terms):
        vecs = (
            [residual[i], *row] if residual_column else [t + (residual[i] if j == i else 0) for j, t in enumerate(row)]
        )
        if post_norm is not None:
            full = residual[i] + sum(row) + out_bias.double()
            sigma = math.sqrt(float(((full - full.mean()) ** 2).mean()) + post_norm.eps)
            vecs = [post_norm.weight.double() * (v - v.mean()) / sigma for v in vecs]
        total = sum(vecs)
        c = [max(0.0, float(total.abs().sum() - (total - v).abs().sum())) for v in vecs]
        rows.append([x / sum(c) for x in c])
    return torch.tensor(rows, dtype=torch.float64)


@torch.no_grad()
def _alti_plus_reference(model, pair):
    enc_in, dec_in, memory = _capture_layer_inputs(model, pair)
    s, t = len(pair.src), len(pair.tgt)
    r_enc = torch.eye(s, dtype=torch.float64)
    for layer, x in zip(model.encoder.layers, enc_in):
        u = _ln(layer.norm1, x) if layer.norm_first else x
        terms = _block_terms_loop(layer.self_attn, u, u, causal=False)
        c = _contrib_loop(terms, x, None if layer.norm_first else layer.norm1, layer.self_attn.out_proj.bias, False)
        r_enc = c @ r_enc
    r = torch.cat([torch.zeros(t, s, dtype=torch.float64), torch.eye(t, dtype=torch.float64)], 1)
    for layer, z in zip(model.decoder.layers, dec_in):
        u = _ln(layer.norm1, z) if layer.norm_first else z
        sterms = _block_terms_loop(layer.self_attn, u, u, causal=True)
        post1 = None if layer.norm_first else layer.norm1
        c_self = _contrib_loop(sterms, z, post1, layer.self_attn.out_proj.bias, False)
        a = torch.stack([z[i] + sum(sterms[i]) + layer.self_attn.out_proj.bias.double() for i in range(t)])
        if post1 is not None:
            a = _ln(post1, a)
        q = _ln(layer.norm2, a) if layer.norm_first else a
        cterms = _block_terms_loop(layer.multihead_attn, q, memory, causal=False)
        post2 = None if layer.norm_first else layer.norm2
        c_cross = _contrib_loop(cterms, a, post2, layer.multihead_attn.out_proj.bias, True)
        new = torch.zeros_like(r)
        for i in range(t):
            for k in range(t):
                new[i] += c_cross[i, 0] * c_self[i, k] * r[k]
            for j in range(s):
                new[i, :s] += c_cross[i, 1 + j] * r_enc[j]
        r = new
    return r[:, :s]


def test_alti_plus_equals_a_plain_loop_reference(transformer):
    pair = forced_translation(transformer, SOURCE, TARGET)
    fast, share = decomposition.alti_plus(trace_transformer(transformer.model, pair.src, pair.tgt_in))
    slow = _alti_plus_reference(transformer.model, pair)
    torch.testing.assert_close(fast.double(), slow, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(share.double(), slow.sum(1), atol=2e-5, rtol=1e-4)
    assert ((share > 0) & (share < 1)).all()  # both the source and the target prefix contribute


def test_alti_rows_over_source_and_prefix_sum_to_one_and_respect_causality(transformer):
    pair = forced_translation(transformer, SOURCE, TARGET)
    r, r_enc = decomposition.alti_contributions(trace_transformer(transformer.model, pair.src, pair.tgt_in))
    s = len(pair.src)
    torch.testing.assert_close(r.sum(1), torch.ones(len(pair.tgt)), atol=1e-5, rtol=0)
    torch.testing.assert_close(r_enc.sum(1), torch.ones(s), atol=1e-5, rtol=0)
    assert (r[:, s:].triu(1) == 0).all()  # target t draws on no later target input


# ---------------------------------------------------------------------------------------- integrated gradients
def _assert_complete(att, gap: torch.Tensor) -> None:
    """Completeness within 1 %: every target piece's attributions sum to its gap Δ_t = f_t(x) − f_t(x')
    within 1 % of max(|Δ_t|, 0.1 nats) (the floor: a gap near zero has no meaningful relative error),
    and over the sentence within 1 % of Σ_t |Δ_t|."""
    err = (att.raw.sum(1) - gap).abs()
    assert (err <= 0.01 * gap.abs().clamp_min(0.1)).all(), (err, gap)
    assert err.sum() <= 0.01 * gap.abs().sum(), (err, gap)
    assert (gap.abs() >= 0.1).sum() >= len(gap) // 2  # the baseline really changes the output
    torch.testing.assert_close(torch.tensor(att.extra["convergence_delta"]), (att.raw.sum(1) - gap), atol=1e-4, rtol=0)


def _gap(f, x, baseline):
    with torch.no_grad():
        return f(x[None])[0] - f(baseline[None])[0]


@pytest.mark.parametrize("name", ["tiny-transformer", "rnnsearch-es-en", "rnnencdec-es-en"])
def test_integrated_gradients_are_complete_within_one_percent(name, tokenizer):
    """At the default settings (shipped RNNs: a tiny random RNN barely reads its source)."""
    tr = Translator(_transformer(), tokenizer) if name == "tiny-transformer" else Translator.load(name)
    pair = forced_translation(tr, SOURCE, TARGET)
    emb = tr.model.embedding(pair.src).detach()
    gap = _gap(translation_log_probs(tr.model, pair), emb, torch.zeros_like(emb))
    att = explain(tr, SOURCE, pair=pair, method="integrated_gradients")
    _assert_complete(att, gap)
    assert min(att.extra["steps"]) == 32


def test_integrated_gradients_on_a_captioner_are_complete_and_sum_into_cells():
    """The shipped soft captioner on a drawn scene: the CNN's ReLU kinks need refined pieces."""
    cm = Captioner.load("captioner-soft")
    image = torch.zeros(1, 64, 64)
    image[0, 6:26, 6:26] = 0.8
    caption = "a bag at the top left"
    gap = _gap(caption_log_probs(cm.model, forced_caption(cm, image, caption)), image, torch.zeros(1, 64, 64))
    att = explain_caption(cm, image, caption=caption, method="integrated_gradients")
    _assert_complete(att, gap)
    pixels = att.extra["pixels"]  # (T, C, C)
    torch.testing.assert_close(att.raw.sum(1), pixels.flatten(1).sum(1), atol=1e-4, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(0, 11),
    st.integers(0, 11),
    st.integers(0, 2**31 - 1),
)
def test_cells_sum_every_pixel_into_exactly_one_cell(t, h, w, y, x, seed):
    canvas = 12
    g = torch.Generator().manual_seed(seed)
    pix = torch.randn(t, 1, canvas, canvas, generator=g, dtype=torch.float64)
    norm, signed = cells(pix, (h, w))
    torch.testing.assert_close(signed.sum(1), pix.flatten(1).sum(1))
    torch.testing.assert_close((norm**2).sum(1), (pix**2).flatten(1).sum(1))
    only = torch.zeros(1, 1, canvas, canvas, dtype=torch.float64)
    only[0, 0, y, x] = 1.0
    assert int(cells(only, (h, w))[1][0].argmax()) == (y * h // canvas) * w + x * w // canvas


# ---------------------------------------------------------------------------------------- every method
def _check(att, t, s):
    assert att.scores.shape == (t, s)
    assert (att.scores >= 0).all()
    torch.testing.assert_close(att.scores.sum(1), torch.ones(t), atol=1e-5, rtol=0)


def test_every_transformer_method_has_its_shape_and_normalisation(transformer):
    assert methods_for(transformer) == list(METHODS)
    pair = forced_translation(transformer, SOURCE, TARGET)
    t, s = len(pair.tgt), len(pair.src)
    for m in METHODS:
        att = explain(transformer, SOURCE, pair=pair, method=m)
        _check(att, t, s)
        assert att.method == m and att.needs_gradients == METHODS[m].needs_gradients
        src, tgt, words = att.word_scores()
        assert words.shape == (len(tgt), len(src))
        torch.testing.assert_close(words.sum(1), torch.ones(len(tgt)), atol=1e-5, rtol=0)
        d = att.to_dict()
        assert len(d["scores"]) == t and d["method"] == m


def test_attention_methods_read_the_models_own_maps(transformer):
    model = transformer.model
    pair = forced_translation(transformer, SOURCE, TARGET)
    maps = model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    torch.testing.assert_close(explain(transformer, SOURCE, pair=pair).scores, maps.alignment[0])
    torch.testing.assert_close(explain(transformer, SOURCE, pair=pair, layer=1, head=2).scores, maps.cross[0, 0, 1])
    from attnkit.alignment import attention_rollout

    roll = maps.cross[0, -1].mean(0) @ attention_rollout(maps.enc_self[0])
    torch.testing.assert_close(explain(transformer, SOURCE, pair=pair, method="rollout").scores, normalise_rows(roll))
    # attention × ‖value‖ in a loop over heads: ‖Σ_h α^h_tj f^h(m_j)‖
    tr = trace_transformer(model, pair.src, pair.tgt_in)
    blk = tr.decoder[-1].cross_block
    norms = torch.stack(
        [
            torch.stack(
                [sum(blk.weights[h, i, j] * blk.values[h, j] for h in range(2)).norm() for j in range(len(pair.src))]
            )
            for i in range(len(pair.tgt))
        ]
    )
    torch.testing.assert_close(
        explain(transformer, SOURCE, pair=pair, method="attention_norm").scores, normalise_rows(norms)
    )


def test_rnnsearch_methods_and_its_attention_norm(rnnsearch):
    assert methods_for(rnnsearch) == [
        "attention",
        "attention_norm",
        "saliency",
        "input_x_gradient",
        "integrated_gradients",
    ]
    pair = forced_translation(rnnsearch, SOURCE, TARGET)
    maps = rnnsearch.model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    for m in methods_for(rnnsearch):
        _check(explain(rnnsearch, SOURCE, pair=pair, method=m), len(pair.tgt), len(pair.src))
    expected = normalise_rows(maps.alignment[0] * maps.annotations[0].norm(dim=-1))
    torch.testing.assert_close(explain(rnnsearch, SOURCE, pair=pair, method="attention_norm").scores, expected)


def test_rnnencdec_has_only_gradient_methods(tokenizer):
    tr = Translator(_rnn(RNNEncDec), tokenizer)
    assert methods_for(tr) == ["saliency", "input_x_gradient", "integrated_gradients"]
    with pytest.raises(UnknownMethodError, match="needs a model with attention"):
        explain(tr, SOURCE, target=TARGET, method="attention")


@pytest.mark.parametrize("kind", ["transformer", "rnnsearch", "rnnencdec"])
def test_one_position_per_row_equals_the_whole_table(kind, tokenizer):
    """``f(x, positions)`` (one output position per row, rows grouped into truncated prefixes) against the
    whole ``(N, T)`` table of the same rows, and its gradients against the table's: what the gradient
    methods and the deletion curves rely on."""
    model = {"transformer": _transformer, "rnnsearch": _rnn, "rnnencdec": lambda: _rnn(RNNEncDec)}[kind]()
    pair = forced_translation(Translator(model, tokenizer), SOURCE, TARGET)
    f = translation_log_probs(model, pair)
    g = torch.Generator().manual_seed(1)
    x = model.embedding(pair.src).detach()[None].repeat(7, 1, 1)
    x = (x + 0.1 * torch.randn(x.shape, generator=g)).requires_grad_(True)  # (7, S, E): seven different rows
    positions = torch.randint(0, len(pair.tgt), (7,), generator=g)
    positions[0], positions[1] = 0, len(pair.tgt) - 1  # the shortest and the longest prefix
    table = f(x)  # (7, T)
    expected = table[torch.arange(7), positions]
    got = f(x, positions)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    (grad_expected,) = torch.autograd.grad(expected.sum(), x)
    (grad_got,) = torch.autograd.grad(got.sum(), x)
    torch.testing.assert_close(grad_got, grad_expected, atol=1e-5, rtol=1e-4)


def test_input_x_gradient_is_the_embedding_times_its_gradient(rnnsearch):
    """Against autograd by hand: one backward per target piece, no Captum."""
    pair = forced_translation(rnnsearch, SOURCE, TARGET)
    f = translation_log_probs(rnnsearch.model, pair)
    emb = rnnsearch.model.embedding(pair.src).detach()[None].requires_grad_(True)
    out = f(emb)[0]
    rows = [torch.autograd.grad(out[t], emb, retain_graph=True)[0][0] * emb[0].detach() for t in range(len(out))]
    expected = torch.stack(rows)  # (T, S, E)
    att = explain(rnnsearch, SOURCE, pair=pair, method="input_x_gradient")
    torch.testing.assert_close(att.raw, expected.sum(-1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(att.scores, normalise_rows(expected.norm(dim=-1)), atol=1e-5, rtol=1e-4)


def test_every_captioner_method_has_its_shape_and_normalisation(captioner):
    assert methods_for(captioner) == ["attention", "saliency", "input_x_gradient", "integrated_gradients"]
    image = torch.rand(1, 16, 16)
    for m in methods_for(captioner):
        att = explain_caption(captioner, image, caption="a coat at the top", method=m)
        _check(att, 5, 16)
        assert att.grid == (4, 4) and att.grid_scores().shape == (5, 4, 4)
    out = captioner.model(
        image[None], torch.tensor([[1, *[captioner.vocab.stoi[w] for w in ["a", "coat", "at", "the"]]]])
    )
    torch.testing.assert_close(explain_caption(captioner, image, caption="a coat at the top").scores, out.alphas[0])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_normalise_rows_sums_to_one_or_stays_zero(t, s, seed):
    x = torch.rand(t, s, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x[0] = 0.0
    y = normalise_rows(x)
    assert (y[0] == 0).all()
    if t > 1:
        torch.testing.assert_close(y[1:].sum(1), torch.ones(t - 1, dtype=torch.float64))
        torch.testing.assert_close(y[1:] * x[1:].sum(1, keepdim=True), x[1:])


def test_names_options_and_errors(transformer, rnnsearch):
    assert canonical_method("Input-X-Gradient") == "input_x_gradient"
    assert canonical_method("alti+") == "alti_plus" and canonical_method("IG") == "integrated_gradients"
    with pytest.raises(UnknownMethodError, match="unknown attribution method 'lime'; known: attention"):
        canonical_method("lime")
    with pytest.raises(InputError, match="alti_plus does not take layer"):
        explain(transformer, SOURCE, target=TARGET, method="alti_plus", layer=1)
    with pytest.raises(ValueError, match=r"layer must be a layer number in 1..2"):
        explain(transformer, SOURCE, target=TARGET, method="value_zeroing", layer=3)
    with pytest.raises(InputError, match=r"head must be a head number in 1..2"):
        explain(transformer, SOURCE, target=TARGET, head=5)
    with pytest.raises(InputError, match="has one attention"):
        explain(rnnsearch, SOURCE, target=TARGET, layer=1)
    with pytest.raises(UnknownMethodError, match="alti_plus needs a Transformer; RNNSearch has: attention"):
        explain(rnnsearch, SOURCE, target=TARGET, method="alti_plus")
    with pytest.raises(InputError, match="target is empty"):
        explain(rnnsearch, SOURCE, target="  ")
    with pytest.raises(ValueError, match="steps must be an int >= 2"):
        explain(rnnsearch, SOURCE, target=TARGET, method="ig", steps=1)


def test_a_generated_target_is_the_models_own_translation(rnnsearch):
    att = explain(rnnsearch, SOURCE, method="attention", beam=1)
    tokens = rnnsearch.translate([SOURCE], beam_size=1)[0]["tokens"]
    assert att.target == [rnnsearch.tokenizer.id_to_piece(t) for t in tokens]
    assert att.extra["forced"] is False


# ---------------------------------------------------------------------------------------- the command line
def test_explain_command_table_json_plot_and_errors(tmp_path, capsys):
    import json

    from PIL import Image

    from attnkit.cli import main

    assert (
        main(["explain", "--model", "rnnsearch-es-en", "--method", "input-x-gradient", SOURCE, "--target", TARGET]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("input_x_gradient: input × gradient") and "s with gradients" in out
    assert "God " in out and "Dios:" in out
    plot = tmp_path / "vz.png"
    args = ["explain", "--model", "transformer-es-en", "--method", "value_zeroing", "--layer", "2", SOURCE]
    assert main([*args, "--json", "--plot", str(plot)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["method"] == "value_zeroing" and d["params"] == {"layer": 2} and d["model"] == "transformer-es-en"
    assert len(d["scores"]) == len(d["target"]) and abs(sum(d["words"]["scores"][0]) - 1) < 1e-4
    assert plot.stat().st_size > 1000
    scene = tmp_path / "scene.png"
    img = Image.new("L", (64, 64))
    img.paste(200, (6, 6, 26, 26))
    img.save(scene)
    assert main(["explain", "--model", "captioner-hard", "--method", "saliency", str(scene), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "saliency" in out and "cell (" in out
    for bad, message in (
        (["--method", "lime", SOURCE], "unknown attribution method 'lime'"),
        (["--model", "rnnsearch-es-en", "--method", "alti_plus", SOURCE], "alti_plus needs a Transformer"),
        (["--model", "transformer-es-en", "--layer", "9", SOURCE], "layer must be a layer number in 1..3"),
        (["--beam", "0", SOURCE], "argument --beam: beam must be an int in [1, 256]"),
        (["--model", "captioner-soft", str(tmp_path / "none.png")], "a captioner explains an image file"),
        (["--model", "captioner-soft", "--layer", "1", str(scene)], "--layer and --head are for Transformer"),
    ):
        assert main(["explain", *bad]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_forced_pair_names_the_source_pieces_with_the_source_tokenizer():
    """A translator with a vocabulary of its own on each side: the source pieces are the source tokenizer's
    (the target tokenizer would spell other pieces for the same ids)."""
    from attnkit.attribution.forced import forced_translation
    from attnkit.data.tokenizer import Tokenizer
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator
    from attnkit.pretrained import PRETRAINED_DIR
    from attnkit.tasks.translation import Translator
    from tiny import es_en_tokenizer

    tgt_tok, src_tok = es_en_tokenizer(), Tokenizer.load(PRETRAINED_DIR / "lm-4l-en")
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=len(tgt_tok),
        src_vocab_size=len(src_tok),
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    tr = Translator(TransformerTranslator(cfg).eval(), tgt_tok, src_tokenizer=src_tok)
    pair = forced_translation(tr, "In the beginning God created", target="Jesus wept.")
    src_ids = tr.encode_sources(["In the beginning God created"])[0]
    assert pair.source_pieces == [src_tok.id_to_piece(i) for i in src_ids]
    assert pair.source_pieces != [tgt_tok.id_to_piece(i) for i in src_ids]
    assert pair.target_pieces == [tgt_tok.id_to_piece(i) for i in tgt_tok.encode("Jesus wept.")]
