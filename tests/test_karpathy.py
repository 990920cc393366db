"""Karpathy-split caption loader on a tiny dataset the test writes itself."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.data.karpathy import KarpathyCaptions


@pytest.fixture
def flickr(tmp_path):
    imgs = tmp_path / "images"
    (imgs / "val2014").mkdir(parents=True)
    Image.fromarray(np.full((40, 30, 3), 200, np.uint8)).save(imgs / "a.png")        # RGB, other size
    Image.fromarray(np.full((64, 64), 51, np.uint8)).save(imgs / "b.png")            # gray, right size
    Image.fromarray(np.zeros((20, 20, 4), np.uint8)).save(imgs / "val2014" / "c.png")  # RGBA in a sub-folder
    Image.fromarray(np.full((10, 10), 255, np.uint8)).save(imgs / "d.png")
    data = {"images": [
        {"filename": "a.png", "split": "train", "sentences": [
            {"tokens": ["A", "dog", "runs", "on", "the", "grass"], "raw": "A dog runs on the grass."},
            {"tokens": ["a", "brown", "dog"], "raw": "A brown dog."}]},
        {"filename": "b.png", "split": "restval", "sentences": [{"raw": "Two  Cats sleep"}]},
        {"filename": "c.png", "filepath": "val2014", "split": "val", "sentences": [{"tokens": ["a", "box"]}]},
        {"filename": "d.png", "split": "test", "sentences": [{"tokens": ["white"], "raw": "White."}]},
    ]}
    jp = tmp_path / "dataset_flickr8k.json"
    jp.write_text(json.dumps(data))
    return jp, imgs, data


def test_splits_and_captions(flickr):
    jp, imgs, _ = flickr
    train = KarpathyCaptions(jp, imgs, "train")
    assert len(train) == 2  # train + restval
    assert len(KarpathyCaptions(jp, imgs, "train", include_restval=False)) == 1
    img, caps = train[0]
    assert caps == ["a dog runs on the grass", "a brown dog"]
    assert train[1][1] == ["two cats sleep"]
    assert train.captions() == ["a dog runs on the grass", "a brown dog", "two cats sleep"]
    assert KarpathyCaptions(jp, imgs, "val")[0][1] == ["a box"]
    assert KarpathyCaptions(jp, imgs, "test")[0][1] == ["white"]
    assert KarpathyCaptions(jp, imgs, "train", max_len=3)[0][1] == ["a dog runs", "a brown dog"]


def test_images_converted(flickr):
    jp, imgs, _ = flickr
    gray = KarpathyCaptions(jp, imgs, "train", image_size=32, grayscale=True)
    a, b = gray[0][0], gray[1][0]
    assert a.shape == b.shape == (1, 32, 32) and a.dtype == torch.float32
    assert torch.allclose(a, torch.full_like(a, 200 / 255)) and torch.allclose(b, torch.full_like(b, 51 / 255))
    rgb = KarpathyCaptions(jp, imgs, "val", image_size=(16, 24), grayscale=False)
    c = rgb[0][0]
    assert c.shape == (3, 16, 24) and 0 <= c.min() and c.max() <= 1


def test_missing_and_unreadable_image(flickr):
    jp, imgs, _ = flickr
    ds = KarpathyCaptions(jp, imgs, "test")
    (imgs / "d.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"d\.png"):
        ds[0]
    (imgs / "d.png").write_bytes(b"not a png at all")
    with pytest.raises(ValueError, match=r"unreadable.*d\.png"):
        ds[0]


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.pop("images"), "'images'"),
    (lambda d: d["images"][1].pop("filename"), r"images\[1\] has no 'filename'"),
    (lambda d: d["images"][2].update(split="dev"), r"images\[2\].*split 'dev'"),
    (lambda d: d["images"][3].pop("sentences"), r"images\[3\].*'sentences'"),
    (lambda d: d["images"][0]["sentences"][1].clear(), r"sentences\[1\] has neither 'tokens' nor 'raw'"),
])
def test_malformed_json(flickr, edit, match):
    jp, imgs, data = flickr
    edit(data)
    jp.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"dataset_flickr8k\.json.*" + match):
        KarpathyCaptions(jp, imgs, "train")


def test_bad_arguments(flickr, tmp_path):
    jp, imgs, _ = flickr
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"broken\.json.*not valid JSON"):
        KarpathyCaptions(tmp_path / "broken.json", imgs, "train")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        KarpathyCaptions(tmp_path / "missing.json", imgs, "train")
    with pytest.raises(ValueError, match="split"):
        KarpathyCaptions(jp, imgs, "valid")
    with pytest.raises(ValueError, match="image_size"):
        KarpathyCaptions(jp, imgs, "train", image_size=0)
    with pytest.raises(ValueError, match="max_len"):
        KarpathyCaptions(jp, imgs, "train", max_len=0)
