"""The gradient methods batched over target pieces and interpolation points (attnkit.attribution.gradients)
against a slow reference that explains one target piece at a time with plain autograd and its own
Gauss-Legendre rule (no Captum, no column picking, no truncated prefixes), in float64 on tiny Transformer,
RNNsearch, RNNencdec and captioner models; the batch option's bound on rows per pass; its errors."""

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from attnkit.attribution import METHODS, explain, forced_caption, forced_translation, gradients
from attnkit.attribution.gradients import DEFAULT_BATCH
from attnkit.attribution.methods import caption_log_probs, cells, translation_log_probs
from attnkit.data.tokenizer import Tokenizer
from attnkit.data.vocab import CaptionVocab
from attnkit.errors import InputError
from attnkit.models.captioner import CaptionerConfig, ShowAttendTell
from attnkit.models.seq2seq import RNNEncDec, RNNSearch, Seq2SeqConfig
from attnkit.pretrained import resolve_model
from attnkit.tasks.captioning import Captioner
from attnkit.tasks.translation import Translator
from tiny import tiny_transformer

SOURCE = "Y dijo Dios: Sea la luz."
TARGET = "And God said, Let there be light."
GRADIENTS = ("saliency", "input_x_gradient", "integrated_gradients")


def _tiny(kind: str, dtype=torch.float64):
    torch.manual_seed(0)
    if kind == "transformer":
        model = tiny_transformer()
    elif kind == "captioner":
        vocab = CaptionVocab(["a", "bag", "at", "the", "top", "left", "and", "coat"])
        cfg = CaptionerConfig(
            vocab_size=len(vocab),
            canvas=16,
            channels=[4, 8],
            feature_dim=8,
            pos_dim=4,
            grid=4,
            emb_dim=8,
            hidden_dim=16,
        )
        cfg.attn_dim = 8
        model = ShowAttendTell(cfg)
    else:
        cfg = Seq2SeqConfig(vocab_size=8000, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0)
        model = {"rnnsearch": RNNSearch, "rnnencdec": RNNEncDec}[kind](cfg)
    with torch.no_grad():  # non-zero biases; the RNNs' weights larger, so their outputs depend on the source
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif kind in ("rnnsearch", "rnnencdec"):
                p.mul_(3.0)
    return model.to(dtype).eval()


# ---------------------------------------------------------------------------------------- the slow reference
def _reference(method: str, f, x: torch.Tensor, n_targets: int, steps: int | None = None):
    """One target piece at a time, plain autograd: ``(attributions (T, *shape), delta (T,) or None, steps used)``.
    Integrated gradients: ``(x − 0) ⊙ Σ_k w_k ∇f_t(α_k x)`` with NumPy's Gauss-Legendre nodes mapped to
    [0, 1], from ``steps`` points, or from 32 doubled up to 256 until ``|Σ a − Δ_t| ≤ 1 % · max(|Δ_t|, 0.1)``."""
    rows, deltas, used = [], [], []
    for t in range(n_targets):
        if method != "integrated_gradients":
            xr = x[None].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(f(xr)[0, t], xr)
            rows.append(g[0].abs() if method == "saliency" else g[0] * x)
            continue
        with torch.no_grad():
            gap = float(f(x[None])[0, t] - f(torch.zeros_like(x)[None])[0, t])
        n = steps or 32
        while True:
            nodes, weights = np.polynomial.legendre.leggauss(n)
            alphas = torch.tensor((nodes + 1) / 2, dtype=x.dtype)
            w = torch.tensor(weights / 2, dtype=x.dtype)
            path = (alphas.view(-1, *[1] * x.dim()) * x).requires_grad_(True)  # (n, *shape)
            (g,) = torch.autograd.grad(f(path)[:, t].sum(), path)
            a = x * (w.view(-1, *[1] * x.dim()) * g).sum(0)
            delta = float(a.sum()) - gap
            if steps or abs(delta) <= 0.01 * max(abs(gap), 0.1) or n >= 256:
                break
            n *= 2
        rows.append(a)
        deltas.append(delta)
        used.append(n)
    return torch.stack(rows), (torch.tensor(deltas, dtype=x.dtype) if deltas else None), (used or None)


def _translation_case(kind, tokenizer):
    model = _tiny(kind)
    pair = forced_translation(Translator(model, tokenizer), SOURCE, TARGET)
    x = model.embedding(pair.src).detach()  # (S, E) float64
    return model, pair, translation_log_probs(model, pair), x, len(pair.tgt)


def _check_against_reference(method, out, ref, reduce, steps_given):
    attr, delta, used = ref
    scores, raw = reduce(attr)
    # 1e-5 for integrated gradients: Captum casts the quadrature weights to float32 (relative error ~1e-7)
    tol = dict(atol=1e-5, rtol=1e-5) if method == "integrated_gradients" else dict(atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(out.raw, raw, **tol)
    torch.testing.assert_close(out.scores, scores, **tol)
    if method == "integrated_gradients":
        assert out.extra["steps"] == used
        torch.testing.assert_close(
            torch.tensor(out.extra["convergence_delta"], dtype=delta.dtype), delta, atol=2e-6, rtol=0
        )
        if steps_given is None:  # completeness, the axiom: every piece's attributions sum to f(x) − f(baseline)
            gap = raw.sum(1) - delta  # the reference's own Δ_t, from two forward passes
            assert (delta.abs() <= 0.01 * gap.abs().clamp_min(0.1)).all()


@pytest.mark.parametrize("method", GRADIENTS)
@pytest.mark.parametrize("kind", ["transformer", "rnnsearch", "rnnencdec"])
def test_batched_translation_gradients_equal_one_target_at_a_time(kind, method, tokenizer, monkeypatch):
    """float64; the batch splits the target pieces into runs and the interpolation points into passes; the
    tiny Transformer's integrated gradients refine some pieces (to 64 and 128 points), its pieces decoded in
    groups of 3 or more by position (the shared-forward engine's prefix groups)."""
    monkeypatch.setattr(gradients, "SPLIT_MIN_GROUP", 3)
    model, pair, f, x, t = _translation_case(kind, tokenizer)
    steps = 8 if method == "integrated_gradients" and kind != "transformer" else None  # the Transformer: refined
    ref = _reference(method, f, x, t, steps)
    batch = 40 if method == "integrated_gradients" else 4  # runs of target pieces; 4 points of 9 pieces a pass
    out = METHODS[method].translation(model, pair, steps=steps, batch=batch)
    _check_against_reference(method, out, ref, lambda a: (a.norm(dim=-1), a.sum(-1)), steps)


@pytest.mark.parametrize("method", GRADIENTS)
def test_batched_caption_gradients_equal_one_word_at_a_time(method):
    """float64 captioner; the pixels summed into grid cells as the method does."""
    model = _tiny("captioner")
    cm = Captioner(model, CaptionVocab(["a", "bag", "at", "the", "top", "left", "and", "coat"]))
    image = torch.zeros(1, 16, 16, dtype=torch.float64)
    image[0, 2:8, 3:9] = 0.8
    pair = forced_caption(cm, image, "a bag at the top left")
    x = pair.image
    ref = _reference(method, caption_log_probs(model, pair), x, len(pair.tokens))
    out = METHODS[method].caption(model, pair, batch=4 if method != "integrated_gradients" else 24)
    _check_against_reference(method, out, ref, lambda a: cells(a, model.grid_shape), None)
    torch.testing.assert_close(out.pixels, ref[0][:, 0], atol=1e-5, rtol=1e-5)


def test_float32_batched_equals_the_reference_within_float32_rounding(tokenizer):
    """The models as shipped run in float32: batched and one-at-a-time agree to 1e-5 (absolute, on raw
    attributions of order 0.1–1) at fixed points."""
    model = _tiny("transformer", torch.float32)
    pair = forced_translation(Translator(model, tokenizer), SOURCE, TARGET)
    x = model.embedding(pair.src).detach()
    f = translation_log_probs(model, pair)
    for method in GRADIENTS:
        steps = 16 if method == "integrated_gradients" else None
        attr, _, _ = _reference(method, f, x, len(pair.tgt), steps)
        out = METHODS[method].translation(model, pair, steps=steps, batch=37)
        torch.testing.assert_close(out.raw, attr.sum(-1), atol=1e-5, rtol=1e-4)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 40), st.sampled_from(GRADIENTS))
def test_the_batch_size_changes_no_value_and_bounds_the_rows_per_pass(batch, method):
    """Any ``batch``, the per-row engine (RNNsearch): the same attributions as one pass over everything, and
    no forward+backward pass sees more than ``batch`` rows (the memory bound)."""
    tok = Tokenizer.load(resolve_model("transformer-es-en"))
    model = _tiny("rnnsearch")
    pair = forced_translation(Translator(model, tok), SOURCE, TARGET)
    steps = 4 if method == "integrated_gradients" else None
    whole = METHODS[method].translation(model, pair, steps=steps, batch=10_000)
    seen = []
    handle = model.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape[0]))  # src (N, S)
    try:
        out = METHODS[method].translation(model, pair, steps=steps, batch=batch)
    finally:
        handle.remove()
    torch.testing.assert_close(out.raw, whole.raw, atol=1e-10, rtol=1e-9)
    assert max(seen) <= batch
    rows = len(pair.tgt) * (steps or 1)
    assert len(seen) >= -(-rows // batch)  # every row was computed, in passes of at most `batch`


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 40), st.sampled_from(GRADIENTS))
def test_the_shared_forward_engine_bounds_every_pass_by_batch(batch, method):
    """Any ``batch``, the shared-forward engine (Transformer): the same attributions as one pass over
    everything; every forward pass sees at most ``batch`` inputs, every batched backward at most ``batch``
    (piece, point) rows, and the backward passes cover every row once."""
    tok = Tokenizer.load(resolve_model("transformer-es-en"))
    model = _tiny("transformer")
    pair = forced_translation(Translator(model, tok), SOURCE, TARGET)
    steps = 4 if method == "integrated_gradients" else None
    whole = METHODS[method].translation(model, pair, steps=steps, batch=10_000)
    seen, backward_rows = [], []
    grad = torch.autograd.grad

    def counting_grad(outputs, inputs, grad_outputs=None, **kwargs):
        if kwargs.get("is_grads_batched"):
            backward_rows.append(grad_outputs.shape[0] * grad_outputs.shape[1])  # (pieces, points, ...)
        return grad(outputs, inputs, grad_outputs, **kwargs)

    handle = model.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape[0]))  # src (N, S)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.autograd, "grad", counting_grad)
            mp.setattr(gradients, "SPLIT_MIN_GROUP", 2)  # up to 4 prefix groups
            out = METHODS[method].translation(model, pair, steps=steps, batch=batch)
    finally:
        handle.remove()
    torch.testing.assert_close(out.raw, whole.raw, atol=1e-10, rtol=1e-9)
    assert max(seen) <= batch and max(backward_rows) <= batch
    assert sum(backward_rows) == len(pair.tgt) * (steps or 1)


def test_batch_errors_name_the_argument(tokenizer, capsys):
    model = _tiny("transformer", torch.float32)
    tr = Translator(model, tokenizer)
    for bad in (0, -3, True, 2.0, "8"):
        with pytest.raises(InputError, match="batch must be an int >= 1"):
            explain(tr, SOURCE, target=TARGET, method="input_x_gradient", batch=bad)
    with pytest.raises(InputError, match="attention does not take batch"):
        explain(tr, SOURCE, target=TARGET, method="attention", batch=8)
    from attnkit.cli import main

    assert main(["explain", "--method", "ig", "--batch", "0", SOURCE]) == 2
    err = capsys.readouterr().err
    assert "argument --batch: batch must be an int in [1, 65536]" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    assert f"(default: {DEFAULT_BATCH})" in " ".join(capsys.readouterr().out.split())
