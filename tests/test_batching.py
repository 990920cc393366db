import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.batching import (
    BucketBatchSampler,
    Example,
    collate,
    encode_pairs,
    example_lengths,
)
from attnkit.data.datasets.bible import Pair
from attnkit.training.data import Batches


def _source(lengths, **kw):
    """A resumable source of index batches planned by the sampler (as training uses it)."""
    s = BucketBatchSampler(lengths, **kw)
    return Batches(s.plan, lambda idx, epoch, i: list(idx), fingerprint={"num_examples": len(lengths), "seed": s.seed})


class CharTokenizer:
    """Stand-in tokenizer: one id per character (ids from 10 up), enough to test the plumbing."""

    def encode_batch(self, texts):
        return [[10 + (ord(c) % 50) for c in t] for t in texts]


def _examples(lengths):
    return [Example(torch.arange(4, 4 + n), torch.arange(4, 4 + max(n - 1, 0))) for n in lengths]


def test_encode_pairs_truncates_to_max_len():
    pairs = [Pair("abcdef", "xy", "Gen 1:1"), ("ab", "uvwxyz")]
    ex = encode_pairs(pairs, CharTokenizer(), max_len=4)
    assert [len(e.src) for e in ex] == [4, 2] and [len(e.tgt) for e in ex] == [2, 4]
    assert all(e.src.dtype == torch.long for e in ex)
    assert example_lengths(ex) == [4, 5]
    with pytest.raises(ValueError, match="max_len"):
        encode_pairs(pairs, CharTokenizer(), max_len=0)


def test_collate_pads_and_adds_specials():
    ex = [
        Example(torch.tensor([5, 6, 7]), torch.tensor([8, 9])),
        Example(torch.tensor([5]), torch.tensor([8, 9, 10, 11])),
    ]
    b = collate(ex)
    assert b["src"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert b["src_lengths"].tolist() == [3, 1]
    assert b["tgt_in"].tolist() == [[1, 8, 9, 0, 0], [1, 8, 9, 10, 11]]
    assert b["tgt_out"].tolist() == [[8, 9, 2, 0, 0], [8, 9, 10, 11, 2]]
    assert b["tgt_lengths"].tolist() == [3, 5]
    assert all(t.dtype == torch.long for t in b.values())
    with pytest.raises(ValueError, match="examples"):
        collate([])


def test_collate_empty_sides():
    b = collate([Example(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long))])
    assert b["src"].shape == (1, 1) and b["src_lengths"].tolist() == [0]
    assert b["tgt_in"].tolist() == [[1]] and b["tgt_out"].tolist() == [[2]]


lengths_st = st.lists(st.integers(0, 60), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(
    lengths_st, st.one_of(st.none(), st.integers(1, 40)), st.one_of(st.none(), st.integers(1, 400)), st.integers(0, 3)
)
def test_every_example_once_per_epoch(lengths, batch_size, max_tokens, seed):
    if batch_size is None and max_tokens is None:
        batch_size = 8
    s = _source(lengths, batch_size=batch_size, max_tokens=max_tokens, seed=seed, pool_size=3)
    for epoch in range(2):
        s.set_epoch(epoch)
        n_batches = len(s)
        batches = list(s)
        assert len(batches) == n_batches
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lengths)))
        for b in batches:
            if batch_size is not None:
                assert len(b) <= batch_size
            if max_tokens is not None and len(b) > 1:
                assert len(b) * max(max(lengths[i], 1) for i in b) <= max_tokens
    assert (s.epoch, s.position) == (1, n_batches)


@settings(max_examples=40, deadline=None)
@given(lengths_st, st.integers(1, 16), st.integers(0, 50), st.integers(0, 99))
def test_resume_gives_the_same_remaining_batches(lengths, batch_size, stop, seed):
    ref = _source(lengths, batch_size=batch_size, seed=seed)
    uninterrupted = list(ref)
    ref.set_epoch(1)
    uninterrupted += list(ref)  # two epochs

    run = _source(lengths, batch_size=batch_size, seed=seed)
    seen, it = [], iter(run)
    stop = min(stop, len(uninterrupted))
    while len(seen) < stop:
        try:
            seen.append(next(it))
        except StopIteration:  # the trainer's epoch loop: the next epoch from its first batch
            run.set_epoch(run.epoch + 1)
            it = iter(run)
    state = run.state_dict()

    resumed = _source(lengths, batch_size=batch_size, seed=seed)
    resumed.load_state_dict(state)
    rest = list(resumed)
    if resumed.epoch == 0:
        resumed.set_epoch(1)
        rest += list(resumed)
    assert seen + rest == uninterrupted


def test_deterministic_shuffle_and_buckets():
    lengths = [((i * 37) % 50) + 1 for i in range(500)]
    a = BucketBatchSampler(lengths, max_tokens=200, seed=7).plan(0)
    b = BucketBatchSampler(lengths, max_tokens=200, seed=7).plan(0)
    c = BucketBatchSampler(lengths, max_tokens=200, seed=8).plan(0)
    assert a == b and a != c
    # bucketing: padding waste is small compared with random batching
    pad = sum(len(x) * max(lengths[i] for i in x) - sum(lengths[i] for i in x) for x in a)
    assert pad < 0.15 * sum(lengths)


def test_sampler_argument_errors():
    with pytest.raises(ValueError, match="batch_size or max_tokens"):
        BucketBatchSampler([1, 2])
    with pytest.raises(ValueError, match="batch_size"):
        BucketBatchSampler([1, 2], batch_size=0)
    s = _source([1, 2, 3], batch_size=2)
    with pytest.raises(ValueError, match="num_examples=3"):
        _source([1, 2], batch_size=2).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="missing"):
        s.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        BucketBatchSampler([1, 2], batch_size=2).plan(-1)
