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


def _period(row: list[int]) -> int | None:
    """The shortest p with row[i] == row[i - p] for every i >= p (a plain loop), or None."""
    for p in range(1, len(row)):
        if all(row[i] == row[i - p] for i in range(p, len(row))):
            return p
    return None


def test_repeats_replace_a_share_of_blocks_by_random_tokens_repeated_at_a_varying_period():
    stream = np.full(40 * 33 + 1, 7)  # natural text: all 7s, so a replaced block is told apart
    batches = lm_batches(stream, context=32, batch_size=8, seed=3, repeats=0.5, repeat_period=(4, 9), vocab_size=60)
    rows = [r.tolist() for b in batches for r in torch.cat([b["ids"], b["targets"][:, -1:]], dim=1)]  # (40, 33)
    replaced = [r for r in rows if r != [7] * 33]
    assert 8 <= len(replaced) <= 32  # about half of 40 (binomial: outside this is < 1e-4)
    periods = set()
    for r in replaced:
        assert all(4 <= t < 60 for t in r)  # non-special ids of the vocabulary only
        p = _period(r)
        assert p is not None and 4 <= p <= 9
        periods.add(p)
    assert len(periods) >= 3  # the period varies from block to block
    again = [
        r.tolist()
        for b in lm_batches(stream, context=32, batch_size=8, seed=3, repeats=0.5, repeat_period=(4, 9), vocab_size=60)
        for r in torch.cat([b["ids"], b["targets"][:, -1:]], dim=1)
    ]
    assert again == rows  # a pure function of (seed, epoch, block): a resumed run sees the same blocks
    other = lm_batches(stream, context=32, batch_size=8, seed=3, repeats=0.5, repeat_period=(4, 9), vocab_size=60)
    other.set_epoch(1)
    assert [r.tolist() for b in other for r in b["ids"]] != [r[:-1] for r in rows]  # a new epoch, new draws
    with pytest.raises(ValueError, match="repeats"):  # a run resumed with another share is refused
        lm_batches(stream, context=32, batch_size=8, seed=3, vocab_size=60).load_state_dict(batches.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"context": 0, "batch_size": 2}, ValueError, "context"),
        ({"context": 4, "batch_size": 0}, ValueError, "batch_size"),
        ({"context": 4.0, "batch_size": 2}, TypeError, "context"),
        ({"context": 50, "batch_size": 2}, ValueError, "context=50"),
        ({"context": 4, "batch_size": 2, "repeats": 1.5, "vocab_size": 50}, ValueError, "repeats"),
        ({"context": 4, "batch_size": 2, "repeats": 0.5}, ValueError, "vocab_size"),
        (
            {"context": 4, "batch_size": 2, "repeats": 0.5, "vocab_size": 50, "repeat_period": (3, 9)},
            ValueError,
            "repeat_period",
        ),
        (
            {"context": 4, "batch_size": 2, "repeats": 0.5, "vocab_size": 5, "repeat_period": (2, 3)},
            ValueError,
            "vocab_size",
        ),
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
