"""Tests for attnkit.viz: PNGs are written and shaped sensibly; helpers compute the right thing."""

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.viz import (
    format_top_alignments,
    plot_alignment,
    plot_alignments,
    plot_caption_attention,
    plot_heads,
    plot_transformer_heads,
    upsample_attention,
)


def toks(n, p="w"):
    return [f"{p}{i}" for i in range(n)]


def png_size(path):
    assert path.exists() and path.stat().st_size > 0
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size  # (width, height)


def diag(t, s):
    lg = -((np.arange(s)[None] - np.arange(t)[:, None] * (s - 1) / max(t - 1, 1)) ** 2)
    return torch.softmax(torch.tensor(lg), -1)


# --- heatmap ---------------------------------------------------------------------------


def test_plot_alignment_writes_png_and_aspect_follows_tokens(tmp_path):
    p = plot_alignment(diag(6, 6), toks(6), toks(6, "t"), tmp_path / "a" / "b" / "sq.png", title="x")
    assert p == tmp_path / "a" / "b" / "sq.png"
    w0, h0 = png_size(p)
    wide = plot_alignment(diag(5, 20).numpy(), toks(20), toks(5, "t"), tmp_path / "wide.png")
    w1, h1 = png_size(wide)
    tall = plot_alignment(diag(20, 5), toks(5), toks(20, "t"), tmp_path / "tall.png")
    w2, h2 = png_size(tall)
    assert w1 / h1 > 1.5 and h2 / w2 > 1.5 and w1 > w0 and h2 > h0


def test_plot_alignment_accepts_batch_of_one(tmp_path):
    png_size(plot_alignment(diag(3, 4)[None], toks(4), toks(3), tmp_path / "b.png"))


def test_plot_alignment_shape_error_names_weights():
    with pytest.raises(ValueError, match=r"weights has shape \(3, 4\).*len\(tgt_tokens\)=3.*len\(src_tokens\)=5"):
        plot_alignment(diag(3, 4), toks(5), toks(3), "/nonexistent/never.png")
    with pytest.raises(TypeError, match="src_tokens"):
        plot_alignment(diag(3, 4), "a b c d", toks(3), "/nonexistent/never.png")


def test_plot_alignments_grid(tmp_path):
    items = [
        (diag(4, 5), toks(5), toks(4), "one"),
        (diag(6, 3), toks(3), toks(6), None),
        (diag(2, 2), toks(2), toks(2)),
    ]
    w, h = png_size(plot_alignments(items, tmp_path / "many.png", ncols=3))
    assert w > h
    with pytest.raises(ValueError, match=r"items\[1\] weights has shape"):
        plot_alignments([items[0], (diag(6, 3), toks(4), toks(6), None)], tmp_path / "x.png")


def test_format_top_alignments_picks_right_words():
    w = np.array([[0.1, 0.7, 0.2], [0.6, 0.1, 0.3], [0.2, 0.2, 0.6]])
    text = format_top_alignments(w, ["la", "casa", "blanca"], ["the", "white", "house"], k=2)
    lines = text.splitlines()
    assert lines[0].startswith("target") and "top 2" in lines[0]
    row = {ln.split("|")[0].strip(): ln.split("|")[1].split() for ln in lines[2:]}
    assert row["the"] == ["casa", "0.70", "blanca", "0.20"]
    assert row["white"] == ["la", "0.60", "blanca", "0.30"]
    assert row["house"][:2] == ["blanca", "0.60"] and row["house"][2] == "la"  # tie: first position
    assert len(format_top_alignments(w, ["a", "b", "c"], ["x", "y", "z"], k=10).splitlines()[2].split()) == 8


# --- overlay ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_upsample_one_hot_cell_lands_in_its_region_and_keeps_mean(mode):
    h, w, H, W = 3, 4, 48, 64
    a = torch.zeros(2, h * w)
    a[0, 1 * w + 2] = 1.0  # cell (1, 2)
    a[1] = 1.0 / (h * w)  # uniform
    up = upsample_attention(a, (h, w), (H, W), mode)
    assert up.shape == (2, H, W) and up.dtype == np.float32
    region = up[0, 16:32, 32:48]  # cell (1, 2) covers rows 16..31, cols 32..47
    assert region.sum() / up[0].sum() > (0.99 if mode == "nearest" else 0.5)
    assert np.unravel_index(up[0].argmax(), up[0].shape)[0] in range(16, 32)
    assert np.unravel_index(up[0].argmax(), up[0].shape)[1] in range(32, 48)
    np.testing.assert_allclose(up.mean(axis=(1, 2)), a.numpy().mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(up[1], 1.0 / (h * w), rtol=1e-5)


def test_upsample_corner_cell_mean_preserved_bilinear():
    a = np.zeros((1, 2, 2))
    a[0, 0, 0] = 1.0
    up = upsample_attention(a, None, (10, 10), "bilinear")
    assert abs(up.mean() - 0.25) < 1e-6
    assert up[0, :5, :5].sum() > up[0, 5:, 5:].sum()


def test_upsample_errors():
    with pytest.raises(ValueError, match=r"alphas has shape \(2, 12\).*grid_shape=\(3, 5\)"):
        upsample_attention(torch.rand(2, 12), (3, 5), (10, 10))
    with pytest.raises(ValueError, match="grid_shape"):
        upsample_attention(torch.rand(2, 12), None, (10, 10))
    with pytest.raises(ValueError, match="mode"):
        upsample_attention(torch.rand(2, 3, 4), None, (10, 10), "bicubic")


def test_plot_caption_attention_layouts(tmp_path):
    words = ["a", "shirt", "and", "a", "bag", "<eos>"]
    alphas = torch.softmax(torch.randn(6, 12), -1)
    img_chw = torch.rand(3, 40, 80)
    boxes = [None, (5, 5, 30, 30), None, None, (40, 10, 70, 35), None]
    p = plot_caption_attention(
        img_chw, words, alphas, tmp_path / "o" / "cap.png", grid_shape=(3, 4), boxes=boxes, ncols=7
    )
    w, h = png_size(p)
    assert w > 4 * h  # one row of 7 wide panels
    p2 = plot_caption_attention(
        (np.random.rand(28, 28) * 255).astype(np.uint8),
        words,
        alphas.reshape(6, 3, 4).numpy(),
        tmp_path / "cap2.png",
        ncols=2,
        upsample="nearest",
    )
    w2, h2 = png_size(p2)
    assert h2 > w2  # 4 rows of 2 square panels
    png_size(
        plot_caption_attention(np.random.rand(20, 30, 3), words[:2], alphas[:2], tmp_path / "c3.png", grid_shape=(3, 4))
    )


def test_plot_caption_attention_errors(tmp_path):
    with pytest.raises(ValueError, match=r"alphas has shape \(3, 12\).*T=3.*len\(words\)=2"):
        plot_caption_attention(
            torch.rand(3, 8, 8), ["a", "b"], torch.rand(3, 12), tmp_path / "x.png", grid_shape=(3, 4)
        )
    with pytest.raises(ValueError, match=r"L == h \* w"):
        plot_caption_attention(
            torch.rand(3, 8, 8), ["a", "b"], torch.rand(2, 12), tmp_path / "x.png", grid_shape=(3, 5)
        )
    with pytest.raises(ValueError, match="boxes"):
        plot_caption_attention(torch.rand(3, 8, 8), ["a", "b"], torch.rand(2, 2, 2), tmp_path / "x.png", boxes=[None])
    with pytest.raises(ValueError, match="image has shape"):
        plot_caption_attention(torch.rand(5, 8, 7), ["a"], torch.rand(1, 2, 2), tmp_path / "x.png")


# --- heads -----------------------------------------------------------------------------


def test_plot_heads_forms_and_shape(tmp_path):
    L, H, T = 2, 4, 6
    a = torch.softmax(torch.randn(L, H, T, T), -1)
    w, h = png_size(plot_heads(a, tmp_path / "h.png", query_tokens=toks(T), key_tokens=toks(T), title="t"))
    assert w > h  # 4 heads across, 2 layers down
    png_size(plot_heads(list(a.numpy()), tmp_path / "h2.png"))
    png_size(plot_heads({"enc": a, "extra": a[0]}, tmp_path / "h3.png"))
    big = torch.softmax(torch.randn(1, 2, 50, 50), -1)  # > 40 tokens: no labels, still drawn
    png_size(plot_heads(big, tmp_path / "h4.png", query_tokens=toks(50), key_tokens=toks(50)))


def test_plot_heads_errors(tmp_path):
    a = torch.rand(2, 4, 5, 6)
    with pytest.raises(ValueError, match=r"key_tokens\)=5"):
        plot_heads(a, tmp_path / "x.png", query_tokens=toks(5), key_tokens=toks(5))
    with pytest.raises(ValueError, match=r"attn has shape \(5, 6\)"):
        plot_heads(torch.rand(5, 6), tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"attn: every layer"):
        plot_heads([torch.rand(4, 5, 6), torch.rand(4, 5, 7)], tmp_path / "x.png")


def test_plot_transformer_heads(tmp_path):
    S, T, L, H = 7, 5, 2, 2
    enc = torch.softmax(torch.randn(L, H, S, S), -1)
    dec = torch.softmax(torch.randn(L, H, T, T), -1)
    cross = torch.softmax(torch.randn(L, H, T, S), -1)
    w, h = png_size(plot_transformer_heads(enc, dec, cross, toks(S), toks(T, "t"), tmp_path / "tf.png"))
    assert h > w  # blocks stacked vertically
    png_size(plot_transformer_heads(None, None, cross, toks(S), toks(T), tmp_path / "tf2.png", alignment_layer=None))
    with pytest.raises(ValueError, match=r"cross has per-layer shape \(2, 7, 5\)"):
        plot_transformer_heads(enc, dec, cross.transpose(-1, -2), toks(S), toks(T), tmp_path / "x.png")


def _labels(monkeypatch):
    """Patch the heads grid's PNG writer to keep the figure's words (axes titles, row labels, figure texts)
    instead of drawing it: the labels are the subject here, the drawing is checked by the tests above."""
    import attnkit.viz.heads as heads_mod

    seen: dict[str, list[str]] = {}

    def keep(fig, path, dpi):
        seen["titles"] = [ax.get_title() for ax in fig.axes if ax.get_title()]
        seen["rows"] = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
        seen["texts"] = [t.get_text() for t in fig.texts]
        return path

    monkeypatch.setattr(heads_mod, "save_png", keep)
    return seen


def test_head_grids_number_layers_and_heads_from_one(tmp_path, monkeypatch):
    seen = _labels(monkeypatch)
    L, H, T = 3, 2, 4
    a = torch.softmax(torch.randn(L, H, T, T), -1)
    for form in (a, list(a.numpy())):
        plot_heads(form, tmp_path / "h.png")
        assert seen["titles"] == ["head 1", "head 2"]
        assert seen["rows"] == ["layer 1", "layer 2", "layer 3"]
    plot_heads({"enc": a, "layer 7": a[0]}, tmp_path / "h.png")  # a dict's stack: name 1..L; one layer: its key
    assert seen["rows"] == ["enc 1", "enc 2", "enc 3", "layer 7"]
    S = 5
    cross = torch.softmax(torch.randn(L, H, T, S), -1)
    for asked, label in ((2, "layer 2"), (1, "layer 1"), (3, "layer 3"), (-1, "layer 3"), (-3, "layer 1")):
        plot_transformer_heads(None, None, cross, toks(S), toks(T), tmp_path / "tf.png", alignment_layer=asked)
        assert f"cross-attention, {label}, mean over {H} heads" in seen["texts"], asked
        assert seen["titles"] == ["head 1", "head 2"] and seen["rows"] == ["layer 1", "layer 2", "layer 3"]
    for bad in (0, 4, -4, True, 1.0):
        with pytest.raises(ValueError, match=r"alignment_layer must be a layer number in 1\.\.3"):
            plot_transformer_heads(None, None, cross, toks(S), toks(T), tmp_path / "x.png", alignment_layer=bad)


def test_bleu_by_length_legend_quotes_each_models_bleu_as_the_tables_do(tmp_path, monkeypatch):
    """The legend gives each model's overall BLEU to two decimals (33.37, not 33.4), the figure the
    README's tables and ``evaluate translation`` print, and each curve skips empty buckets."""
    import attnkit.viz.curves as curves_mod

    seen: dict[str, list] = {}

    def keep(fig, path, dpi):
        ax = fig.axes[0]
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        seen["xs"] = [list(line.get_xdata()) for line in ax.get_lines()]
        return path

    monkeypatch.setattr(curves_mod, "save_png", keep)
    rows = [{"bucket": b, "n": n, "bleu": 10.0 * i} for i, (b, n) in enumerate((("0-10", 3), ("10-20", 0), ("20+", 1)))]
    reports = [
        {"model_type": "rnnsearch", "bleu": 33.374, "by_length": rows},
        {"model": "m", "bleu": 8.0, "by_length": rows},
    ]
    curves_mod.plot_bleu_by_length(reports, tmp_path / "b.png")
    assert seen["legend"] == ["rnnsearch (BLEU 33.37)", "m (BLEU 8.00)"]
    assert seen["xs"] == [[0, 2], [0, 2]]
    with pytest.raises(ValueError, match="reports"):
        curves_mod.plot_bleu_by_length([], tmp_path / "b.png")
