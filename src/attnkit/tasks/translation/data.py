"""The Bible corpus for translation: the joint tokenizer, and resumable batches of similar-length pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ...data.batching import BucketBatchSampler, Example, collate, example_lengths
from ...data.bible import load_pairs
from ...data.tokenizer import MODEL_FILENAME, Tokenizer
from ...paths import attnkit_home
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


def get_tokenizer(vocab_size: int = 8000, home: str | Path | None = None) -> Tokenizer:
    """The joint Spanish+English sentencepiece model, trained on the training split once and cached."""
    folder = attnkit_home(home) / "bible" / f"spm-joint-{vocab_size}"
    if (folder / MODEL_FILENAME).is_file():
        return Tokenizer.load(folder)
    train = load_pairs("train", home=home)
    texts = [p.src for p in train] + [p.tgt for p in train]
    return Tokenizer.train(texts, folder, vocab_size=vocab_size)


def read_lines(stream: Iterable[str]) -> list[str]:
    """Non-empty stripped lines of a file or stdin."""
    return [line.strip() for line in stream if line.strip()]
