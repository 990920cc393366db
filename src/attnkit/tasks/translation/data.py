"""Translation data: resumable batches of similar-length pairs, from
memory (:func:`translation_batches`) or from a memory-mapped token cache (:func:`cached_translation_batches`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ...data.batching import BucketBatchSampler, Example, collate, example_lengths
from ...training.data import Batches


def translation_batches(
    examples: Sequence[Example],
    *,
    batch_size: int | None,
    max_tokens: int | None,
    seed: int,
    shuffle: bool = True,
    links: Sequence | None = None,
) -> Batches:
    """Resumable batches of similar-length pairs (:class:`BucketBatchSampler` plans each epoch;
    ``shuffle=False``: one fixed order, for validation). ``links``: each example's piece links for
    guided alignment (:mod:`.guided`), added to each batch as ``"align"`` targets."""
    from .guided import add_alignment_targets

    examples = list(examples)
    sampler = BucketBatchSampler(
        example_lengths(examples), batch_size=batch_size, max_tokens=max_tokens, seed=seed, shuffle=shuffle
    )

    def make(idx, epoch, i):
        batch = collate([examples[j] for j in idx])
        return batch if links is None else add_alignment_targets(batch, [links[j] for j in idx])

    return Batches(
        sampler.plan,
        make,
        fingerprint={"num_examples": len(examples), "seed": seed, "batch_size": batch_size, "max_tokens": max_tokens},
    )  # resuming with other batches is refused


def cached_translation_batches(
    src,
    tgt,
    *,
    max_len: int,
    batch_size: int | None,
    max_tokens: int | None,
    seed: int,
    shuffle: bool = True,
    limit: int | None = None,
) -> Batches:
    """:func:`translation_batches` over a memory-mapped token cache (two
    :class:`attnkit.data.token_cache.TokenArray`, source and target): the same batches, in the same
    order, as :func:`translation_batches` of ``encode_pairs(pairs, tokenizer, max_len)`` over the
    same pairs, but only the lengths (one small int array) live in memory; a batch reads its own
    sentences from the map when it is made, so under ``torchrun`` each rank reads only its share.
    ``limit``: the first ``limit`` pairs only."""
    n = len(src) if limit is None else min(limit, len(src))
    src_len = np.minimum(src.lengths[:n], max_len)
    tgt_len = np.minimum(tgt.lengths[:n], max_len)
    lengths = np.maximum(src_len, tgt_len + 1)  # what example_lengths gives for truncated examples
    sampler = BucketBatchSampler(
        lengths.tolist(), batch_size=batch_size, max_tokens=max_tokens, seed=seed, shuffle=shuffle
    )

    def example(j: int) -> Example:
        return Example(
            torch.from_numpy(src[j][:max_len].astype(np.int64)), torch.from_numpy(tgt[j][:max_len].astype(np.int64))
        )

    return Batches(
        sampler.plan,
        lambda idx, epoch, i: collate([example(j) for j in idx]),
        fingerprint={"num_examples": n, "seed": seed, "batch_size": batch_size, "max_tokens": max_tokens},
    )


def read_lines(stream: Iterable[str]) -> list[str]:
    """Non-empty stripped lines of a file or stdin."""
    return [line.strip() for line in stream if line.strip()]
