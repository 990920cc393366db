"""Photos with Karpathy-split captions (Flickr8k / COCO format): the reader on a tiny set the test writes
itself, the batches against PIL's own conversion, and `attnkit train captioning --captions --images` for
two steps followed by `attnkit caption` with the model it wrote."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.cli import main as cli_main
from attnkit.data.karpathy import karpathy_split, read_karpathy
from attnkit.data.vocab import CaptionVocab
from attnkit.errors import InputError
from attnkit.tasks.captioning import collate_photo_captions, photo_caption_batches

torch.set_num_threads(1)


@pytest.fixture
def flickr(tmp_path):
    imgs = tmp_path / "images"
    (imgs / "val2014").mkdir(parents=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(imgs / "a.png")  # RGB, not square
    Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(imgs / "b.png")  # gray, canvas size
    Image.fromarray(rng.integers(0, 256, (20, 20, 4), dtype=np.uint8)).save(imgs / "val2014" / "c.png")  # RGBA
    Image.fromarray(rng.integers(0, 256, (10, 10), dtype=np.uint8)).save(imgs / "d.png")
    data = {
        "images": [
            {
                "filename": "a.png",
                "split": "train",
                "sentences": [
                    {"tokens": ["A", "dog", "runs", "on", "the", "grass"], "raw": "A dog runs on the grass."},
                    {"tokens": ["a", "brown", "dog"], "raw": "A brown dog."},
                ],
            },
            {"filename": "b.png", "split": "restval", "sentences": [{"raw": "Two  Cats sleep"}]},
            {
                "filename": "c.png",
                "filepath": "val2014",
                "split": "val",
                "sentences": [{"tokens": ["a", "dog"]}, {"tokens": ["a", "box"]}],
            },
            {"filename": "d.png", "split": "test", "sentences": [{"tokens": ["white"], "raw": "White."}]},
        ]
    }
    jp = tmp_path / "dataset_flickr8k.json"
    jp.write_text(json.dumps(data))
    return jp, imgs


def test_splits_paths_and_captions(flickr):
    jp, imgs = flickr
    images = read_karpathy(jp, imgs)
    assert [im.split for im in images] == ["train", "restval", "val", "test"]
    assert images[0].captions == ("a dog runs on the grass", "a brown dog")
    assert images[1].captions == ("two cats sleep",)
    assert images[2].path == imgs / "val2014" / "c.png" and images[3].path == imgs / "d.png"
    assert [im.path.name for im in karpathy_split(images, "train")] == ["a.png", "b.png"]
    assert [im.path.name for im in karpathy_split(images, "train", include_restval=False)] == ["a.png"]
    assert [im.path.name for im in karpathy_split(images, "test")] == ["d.png"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("not json", "is not valid JSON"),
        ({"pictures": []}, "no top-level 'images' list"),
        ({"images": [{"split": "train", "sentences": [{"raw": "x"}]}]}, r"images\[0\] has no 'filename'"),
        ({"images": [{"filename": "a.png", "split": "dev", "sentences": [{"raw": "x"}]}]}, "has split 'dev'"),
        ({"images": [{"filename": "a.png", "split": "train", "sentences": []}]}, "has no 'sentences' list"),
        (
            {"images": [{"filename": "a.png", "split": "train", "sentences": [{"tokens": [1]}]}]},
            r"sentences\[0\].tokens is not a list of strings",
        ),
    ],
)
def test_malformed_files_name_the_file_and_the_entry(tmp_path, bad, message):
    jp = tmp_path / "caps.json"
    jp.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    with pytest.raises(InputError, match=message) as info:
        read_karpathy(jp, tmp_path)
    assert str(jp) in str(info.value)
    with pytest.raises(FileNotFoundError, match=r"missing\.json: no such file$"):
        read_karpathy(tmp_path / "missing.json", tmp_path)


def test_batches_hold_every_pair_as_pil_reads_it(flickr):
    jp, imgs = flickr
    train = karpathy_split(read_karpathy(jp, imgs), "train")
    vocab = CaptionVocab.from_captions(c for im in train for c in im.captions)
    batches = photo_caption_batches(train, vocab, canvas=16, batch_size=2, seed=0)
    seen = []
    for b in batches:
        assert b["images"].shape == (len(b["texts"]), 1, 16, 16)
        for img, cap, text in zip(b["images"], b["captions"], b["texts"]):
            assert vocab.decode(cap.tolist()) == text
            path = next(im.path for im in train if text in im.captions)
            with Image.open(path) as pil:  # reference: PIL's own grayscale conversion and resize
                ref = np.asarray(pil.convert("L").resize((16, 16), Image.BILINEAR), dtype=np.float32) / 255
            np.testing.assert_allclose(img[0].numpy(), ref, atol=1e-6)
            seen.append(text)
    assert sorted(seen) == sorted(["a dog runs on the grass", "a brown dog", "two cats sleep"])
    # a batch of pairs with an unknown word encodes it as unk
    b = collate_photo_captions([(train[0], "a purple dog")], vocab, 16)
    assert b["captions"][0].tolist() == [vocab.BOS, vocab.stoi["a"], vocab.UNK, vocab.stoi["dog"], vocab.EOS]


def test_train_two_steps_then_caption(flickr, tmp_path, capsys):
    jp, imgs = flickr
    out = tmp_path / "run"
    rc = cli_main(
        [
            "train",
            "captioning",
            "--captions",
            str(jp),
            "--images",
            str(imgs),
            "--out-dir",
            str(out),
            "--max-steps",
            "2",
            "--batch-size",
            "2",
            "--canvas",
            "16",
            "--feature-dim",
            "8",
            "--pos-dim",
            "4",
            "--emb-dim",
            "8",
            "--hidden-dim",
            "16",
            "--attn-dim",
            "8",
            "--save-every-steps",
            "2",
            "--device",
            "cpu",
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    summary = json.loads(captured.out[captured.out.index("{") :])
    assert summary["steps"] == 2 and summary["stop_reason"] == "max_steps"
    ckpt = summary["last_checkpoint"]
    vocab = CaptionVocab.load(f"{ckpt}/vocab.json")
    assert {"dog", "grass", "cats"} <= set(vocab.itos) and "box" not in vocab.itos  # train captions only
    assert cli_main(["caption", "--model", ckpt, str(imgs / "d.png"), "--beam", "1"]) == 0
    assert "greedy:" in capsys.readouterr().out


def test_train_needs_a_val_split(flickr, tmp_path, capsys):
    jp, imgs = flickr
    data = json.loads(jp.read_text())
    data["images"] = [im for im in data["images"] if im["split"] != "val"]
    jp.write_text(json.dumps(data))
    assert (
        cli_main(
            ["train", "captioning", "--captions", str(jp), "--images", str(imgs), "--out-dir", str(tmp_path / "r")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "needs 'train' (or 'restval') and 'val' images" in err and "Traceback" not in err
