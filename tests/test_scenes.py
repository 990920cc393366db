"""Fashion-MNIST scenes: geometry, pixels, captions, ground truth, splits, determinism, vocab."""

import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnkit.data.datasets.scenes import (
    VALID_HOLDOUT,
    CaptionVocab,
    ScenesDataset,
    collate_captions,
    load_scenes,
    make_scenes,
    parse_caption,
    prepare_scenes,
    save_scene_png,
    scene_caption,
)
from attnkit.data.idx import FASHION_WORDS, load_fashion_mnist
from attnkit.paths import attnkit_home

FMNIST = Path("/usr/share/datasets/fashion-mnist")
pytestmark = pytest.mark.skipif(not FMNIST.is_dir(), reason="dataset-fashion-mnist not installed")
SMALL = dict(n_train=60, n_valid=20, n_test=20)


@functools.cache
def fmnist(split):
    return load_fashion_mnist(split)


# An independent reading of the caption grammar (not the module's parser).
PHRASE = re.compile(r"^a ([a-z]+) at the (top|bottom) (left|right)$")


def parse_back(caption):
    assert caption == caption.strip().lower() and "  " not in caption
    items = []
    for phrase in caption.split(" and "):
        m = PHRASE.match(phrase)
        assert m, f"phrase {phrase!r} breaks the grammar"
        items.append((m.group(1), (m.group(2) == "bottom") * 2 + (m.group(3) == "right")))
    return items


def check_scenes(s, photos, labels, canvas):
    """Every invariant a scene set must satisfy, checked scene by scene."""
    half = canvas // 2
    n = len(s["images"])
    assert s["images"].shape == (n, canvas, canvas) and s["images"].dtype == np.uint8
    for i in range(n):
        img, m = s["images"][i], int(s["n_items"][i])
        assert 1 <= m <= 4
        pl = s["places"][i, :m]
        assert list(pl) == sorted(set(pl.tolist())), "places distinct and in reading order"
        assert (s["places"][i, m:] == -1).all() and (s["source"][i, m:] == -1).all()
        assert len(set(s["source"][i, :m].tolist())) == m, "photos distinct within a scene"
        covered = np.zeros_like(img, dtype=bool)
        for k in range(m):
            p, src = int(pl[k]), int(s["source"][i, k])
            photo = photos[src]
            assert s["classes"][i, k] == labels[src]
            qx, qy = (p % 2) * half, (p // 2) * half
            ox, oy = s["offsets"][i, k]
            # The whole photo lies inside its quadrant, and the canvas holds it unchanged.
            assert qx <= ox and ox + 28 <= qx + half and qy <= oy and oy + 28 <= qy + half
            np.testing.assert_array_equal(img[oy : oy + 28, ox : ox + 28], photo)
            covered[oy : oy + 28, ox : ox + 28] = True
            # Box: inside canvas and quadrant, tight around the photo's non-zero pixels.
            x0, y0, x1, y1 = (int(v) for v in s["boxes"][i, k])
            assert 0 <= x0 < x1 <= canvas and 0 <= y0 < y1 <= canvas
            assert qx <= x0 and x1 <= qx + half and qy <= y0 and y1 <= qy + half
            np.testing.assert_array_equal(img[y0:y1, x0:x1], photo[y0 - oy : y1 - oy, x0 - ox : x1 - ox])
            ys, xs = np.nonzero(photo)
            assert (x0, y0, x1, y1) == (ox + xs.min(), oy + ys.min(), ox + xs.max() + 1, oy + ys.max() + 1)
        assert not img[~covered].any(), "nothing drawn outside the items"
        # Caption names the right classes at the right places, in reading order.
        cap = str(s["captions"][i])
        named = parse_back(cap)
        assert named == [(FASHION_WORDS[int(c)], int(p)) for c, p in zip(s["classes"][i, :m], pl)]
        assert parse_caption(cap) == [(int(c), int(p)) for c, p in zip(s["classes"][i, :m], pl)]
        # word_item: the k-th class word points at item k; every other word is -1.
        words = cap.split()
        wi = s["word_item"][i, : int(s["n_words"][i])].tolist()
        assert len(wi) == len(words) and (s["word_item"][i, len(words) :] == -1).all()
        k = 0
        for j, w in enumerate(words):
            names_item = j > 0 and words[j - 1] == "a"
            assert wi[j] == (k if names_item else -1), (cap, j, w)
            if names_item:
                assert w == FASHION_WORDS[int(s["classes"][i, k])]
                k += 1
        assert k == m


def test_caption_grammar_examples():
    assert scene_caption([4], [2]) == ("a coat at the bottom left", [-1, 0, -1, -1, -1, -1])
    cap, wi = scene_caption([7, 8], [0, 3])
    assert cap == "a sneaker at the top left and a bag at the bottom right"
    assert wi == [-1, 0, -1, -1, -1, -1, -1, -1, 1, -1, -1, -1, -1]
    with pytest.raises(ValueError, match="text"):
        parse_caption("a coat in the middle")


def test_scenes_from_real_photos():
    photos, labels = fmnist("test")
    s = make_scenes(photos, labels, 40, canvas=64, max_items=4, rng=1)
    check_scenes(s, photos, labels, 64)
    assert set(s["n_items"].tolist()) == {1, 2, 3, 4}


def test_bigger_canvas_and_fewer_items():
    photos, labels = fmnist("test")
    s = make_scenes(photos, labels, 30, canvas=84, max_items=2, rng=2)
    check_scenes(s, photos, labels, 84)
    assert s["n_items"].max() <= 2
    assert len({tuple(o) for o in s["offsets"][:, 0].tolist()}) > 5, "jitter varies"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    max_items=st.integers(1, 4),
    canvas=st.sampled_from([56, 64, 84]),
    n=st.integers(1, 6),
)
def test_property_random_seeds(seed, max_items, canvas, n):
    photos, labels = fmnist("test")
    pool = np.arange(100, 160)
    s = make_scenes(photos, labels, n, pool=pool, canvas=canvas, max_items=max_items, rng=seed)
    check_scenes(s, photos, labels, canvas)
    assert s["n_items"].max() <= max_items
    assert np.isin(s["source"][s["source"] >= 0], pool).all()


def test_determinism():
    photos, labels = fmnist("test")
    a = make_scenes(photos, labels, 20, rng=5)
    b = make_scenes(photos, labels, 20, rng=5)
    c = make_scenes(photos, labels, 20, rng=6)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["images"], c["images"])
    assert a["captions"].tolist() != c["captions"].tolist()


def test_bad_arguments():
    photos, labels = fmnist("test")
    with pytest.raises(ValueError, match="canvas"):
        make_scenes(photos, labels, 2, canvas=50)
    with pytest.raises(ValueError, match="canvas"):
        make_scenes(photos, labels, 2, canvas=65)
    with pytest.raises(ValueError, match="max_items"):
        make_scenes(photos, labels, 2, max_items=5)
    with pytest.raises(TypeError, match="n"):
        make_scenes(photos, labels, 2.0)
    with pytest.raises(ValueError, match="labels"):
        make_scenes(photos, labels[:5], 2)
    with pytest.raises(ValueError, match="max_items"):
        prepare_scenes("/nonexistent", max_items=0)


def test_attnkit_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNKIT_HOME", str(tmp_path))
    assert attnkit_home() == tmp_path
    monkeypatch.delenv("ATTNKIT_HOME")
    assert attnkit_home() == Path.home() / ".cache" / "attnkit"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    return home, prepare_scenes(home, **SMALL, seed=3)


def test_prepare_writes_and_caches(prepared):
    home, folder = prepared
    assert folder.parent == home / "scenes"
    assert {p.name for p in folder.iterdir()} == {"train.npz", "valid.npz", "test.npz", "vocab.json", "config.json"}
    assert json.loads((folder / "config.json").read_text())["n_train"] == 60
    mtime = (folder / "train.npz").stat().st_mtime_ns
    assert prepare_scenes(home, **SMALL, seed=3) == folder
    assert (folder / "train.npz").stat().st_mtime_ns == mtime, "cached, not rewritten"
    other = prepare_scenes(home, **SMALL, seed=4)
    assert other != folder
    a, b = (np.load(f / "test.npz")["captions"] for f in (folder, other))
    assert a.tolist() != b.tolist()


def test_prepare_force_rewrites_identically(tmp_path):
    f1 = prepare_scenes(tmp_path, n_train=10, n_valid=0, n_test=5, seed=1)
    before = {n: np.load(f1 / f"{n}.npz")["images"] for n in ("train", "test")}
    f2 = prepare_scenes(tmp_path, n_train=10, n_valid=0, n_test=5, seed=1, force=True)
    assert f1 == f2
    for n, img in before.items():
        np.testing.assert_array_equal(np.load(f2 / f"{n}.npz")["images"], img)
    assert len(np.load(f2 / "valid.npz")["images"]) == 0


def test_splits_never_share_photos(prepared):
    _, folder = prepared
    train_photos, train_labels = fmnist("train")
    test_photos, test_labels = fmnist("test")
    cut = len(train_photos) - VALID_HOLDOUT
    z = {s: dict(np.load(folder / f"{s}.npz")) for s in ("train", "valid", "test")}
    assert str(z["train"]["source_split"]) == str(z["valid"]["source_split"]) == "train"
    assert str(z["test"]["source_split"]) == "test"
    tr, va = z["train"]["source"], z["valid"]["source"]
    assert tr[tr >= 0].max() < cut and va[va >= 0].min() >= cut
    check_scenes(z["train"], train_photos, train_labels, 64)
    check_scenes(z["valid"], train_photos, train_labels, 64)
    check_scenes(z["test"], test_photos, test_labels, 64)
    # Pixel level: no test photo appears in a train or valid scene.
    test_hashes = {p.tobytes() for p in test_photos}
    for s in ("train", "valid"):
        for i in range(len(z[s]["images"])):
            for k in range(int(z[s]["n_items"][i])):
                ox, oy = z[s]["offsets"][i, k]
                assert z[s]["images"][i, oy : oy + 28, ox : ox + 28].tobytes() not in test_hashes


def test_dataset_and_collate(prepared):
    home, _ = prepared
    ds = load_scenes("valid", home, **SMALL, seed=3)
    assert isinstance(ds, ScenesDataset) and len(ds) == 20
    it = ds[0]
    assert it["image"].shape == (1, 64, 64) and it["image"].dtype == torch.float32
    assert it["image"].min() >= 0 and it["image"].max() <= 1 and it["image"].max() > 0
    assert ds.vocab.decode(it["caption_ids"]) == it["caption"]
    batch = collate_captions([ds[i] for i in range(5)])
    B, T = batch["captions"].shape
    assert batch["images"].shape == (5, 1, 64, 64) and B == 5
    assert batch["lengths"].tolist() == [len(ds[i]["caption"].split()) + 2 for i in range(5)]
    assert max(batch["lengths"].tolist()) == T
    for b in range(5):
        ids, L = batch["captions"][b], int(batch["lengths"][b])
        assert ids[0] == CaptionVocab.BOS and ids[L - 1] == CaptionVocab.EOS and (ids[L:] == 0).all()
        for t in range(T):
            k = int(batch["word_item"][b, t])
            assert bool(batch["word_has_box"][b, t]) == (k >= 0)
            if k >= 0:  # the token names item k, and carries item k's box
                assert ds.vocab.itos[int(ids[t])] == FASHION_WORDS[int(ds[b]["classes"][k])]
                assert batch["word_boxes"][b, t].tolist() == ds[b]["boxes"][k].tolist()
            else:
                assert (batch["word_boxes"][b, t] == -1).all()
    # Without caption ids in the items, a vocab must be given.
    plain = ScenesDataset(ds.arrays)
    with pytest.raises(ValueError, match="vocab"):
        collate_captions([plain[0]])
    assert torch.equal(collate_captions([plain[0]], ds.vocab)["captions"], collate_captions([ds[0]])["captions"])
    with pytest.raises(ValueError, match="split"):
        load_scenes("val", home, **SMALL, seed=3)


def test_vocab_round_trip(prepared, tmp_path):
    _, folder = prepared
    vocab = CaptionVocab.load(folder / "vocab.json")
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert vocab.itos[4:] == sorted(vocab.itos[4:])
    assert len(vocab) == 4 + 8 + len(set(np.load(folder / "train.npz")["classes"].ravel()) - {-1})
    cap = "a bag at the top left and a boot at the bottom right"
    ids = vocab.encode(cap)
    assert ids[0] == 1 and ids[-1] == 2 and vocab.decode([*ids, 0, 0]) == cap
    assert vocab.encode("a zebra", add_special=False) == [vocab.stoi["a"], CaptionVocab.UNK]
    vocab.save(tmp_path / "v.json")
    assert CaptionVocab.load(tmp_path / "v.json") == vocab
    (tmp_path / "bad.json").write_text('{"itos": ["a"]}')
    with pytest.raises(ValueError, match=r"bad\.json"):
        CaptionVocab.load(tmp_path / "bad.json")


def test_save_scene_png(prepared, tmp_path):
    from PIL import Image

    home, _ = prepared
    it = load_scenes("test", home, **SMALL, seed=3)[0]
    p = save_scene_png(it["image"], tmp_path / "s.png", scale=3, boxes=it["boxes"])
    with Image.open(p) as im:
        assert im.size == (192, 192) and im.mode == "RGB"
    p = save_scene_png((it["image"][0] * 255).to(torch.uint8).numpy(), tmp_path / "g.png")
    with Image.open(p) as im:
        assert im.size == (64, 64) and im.mode == "L"
        np.testing.assert_array_equal(np.asarray(im), (it["image"][0] * 255).round().to(torch.uint8).numpy())
