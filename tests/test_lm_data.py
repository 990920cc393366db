"""Language-model data (attnkit.tasks.language_model.data): the bos/eos stream, its blocks, the splits."""

import numpy as np
import pytest
import torch

from attnkit.data.tokenizer import BOS_ID, EOS_ID
from attnkit.tasks.language_model.data import block_count, lm_batches, side_texts, token_stream

TEXTS = ["In the beginning God created the heavens and the earth.", "The earth was formless and empty.", "Light."]


def test_token_stream_is_bos_text_eos_per_text(tokenizer):
    stream = token_stream(TEXTS, tokenizer)
    expected = []
    for text in TEXTS:  # plain loop: the convention written out
        expected += [BOS_ID, *tokenizer.encode(text), EOS_ID]
    assert stream.dtype == np.int64
    assert stream.tolist() == expected
    assert token_stream([], tokenizer).tolist() == []


def test_blocks_in_order_tile_the_stream_and_targets_are_the_next_ids():
    stream = np.arange(100, 100 + 23)
    batches = lm_batches(stream, context=5, batch_size=2, shuffle=False)
    got = list(batches)
    assert block_count(23, 5) == 4 and len(got) == 2
    ids = torch.cat([b["ids"] for b in got])  # (4, 5)
    targets = torch.cat([b["targets"] for b in got])
    assert ids.flatten().tolist() == list(range(100, 120))  # whole blocks, in order, the 3-id tail dropped
    assert targets.flatten().tolist() == list(range(101, 121))
    assert ids.dtype == targets.dtype == torch.int64


def test_shuffled_epoch_is_a_permutation_and_resumes_where_it_stopped():
    stream = np.arange(61)
    a = lm_batches(stream, context=4, batch_size=3, seed=7)
    a.set_epoch(2)
    everything = list(a)
    firsts = sorted(int(b["ids"][k, 0]) for b in everything for k in range(len(b["ids"])))
    assert firsts == list(range(0, 60, 4))  # every block once
    b = lm_batches(stream, context=4, batch_size=3, seed=7)
    b.set_epoch(2)
    it = iter(b)
    next(it), next(it)
    state = b.state_dict()
    c = lm_batches(stream, context=4, batch_size=3, seed=7)
    c.load_state_dict(state)
    rest = list(c)
    assert len(rest) == len(everything) - 2
    for x, y in zip(rest, everything[2:]):
        assert torch.equal(x["ids"], y["ids"]) and torch.equal(x["targets"], y["targets"])
    with pytest.raises(ValueError, match="context=4"):
        lm_batches(stream, context=8, batch_size=3, seed=7).load_state_dict(state)


def test_drop_last_keeps_only_full_batches():
    batches = lm_batches(np.arange(41), context=4, batch_size=3, shuffle=False, drop_last=True)
    assert [len(b["ids"]) for b in batches] == [3, 3, 3]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"context": 0, "batch_size": 2}, ValueError, "context"),
        ({"context": 4, "batch_size": 0}, ValueError, "batch_size"),
        ({"context": 4.0, "batch_size": 2}, TypeError, "context"),
        ({"context": 50, "batch_size": 2}, ValueError, "context=50"),
    ],
)
def test_bad_options_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        lm_batches(np.arange(41), **kwargs)


def test_bible_sides_are_the_split_own_verses(bible_home):
    from attnkit.data.corpus import open_corpus

    corpus = open_corpus("bible", home=bible_home)
    train = corpus.pairs("train", limit=300)
    assert side_texts(corpus, "train", "en", limit=300) == [p.tgt for p in train]
    assert side_texts(corpus, "train", "es", limit=300) == [p.src for p in train]
    assert side_texts(corpus, "train", "tgt", limit=300) == [p.tgt for p in train]
    test_refs = {p.ref for p in corpus.pairs("test")}
    assert test_refs and not test_refs & {p.ref for p in corpus.pairs("train")}  # no test verse in train
    with pytest.raises(ValueError, match="side must be"):
        side_texts(corpus, "train", "fr")
