"""Language-model data: one language's text as contiguous blocks of tokens.

Convention (the one the trainer, sampling and the Hugging Face export share): **bos before each
text and eos after it**, so the stream of a split is ``<s> t1 </s> <s> t2 </s> ...`` over its
texts in corpus order (verses in canonical order for the Bible). Training examples are the blocks
``stream[i*T : i*T + T + 1]`` (``T`` = the context): the model reads the first ``T`` ids and
predicts the last ``T`` (targets are the inputs shifted by one), as in GPT-2's and nanoGPT's
packing. Blocks do not overlap except by that one shared id, and a tail shorter than a block is
dropped.

Which texts: one side of a corpus's split (:func:`side_texts`), so the train stream holds only
train-split texts and no valid or test text is trained on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ...data.tokenizer import BOS_ID, EOS_ID
from ...errors import ConfigError
from ...training.data import Batches, shuffled

__all__ = ["SIDES", "block_count", "lm_batches", "resolve_side", "side_texts", "token_stream"]

#: Which side of a parallel corpus is the language model's text: ``src``/``tgt``, or a language
#: code the corpus names (the Bible: ``es`` is its source side, ``en`` its target side).
SIDES = ("src", "tgt")


def resolve_side(corpus, side: str) -> str:
    """``"src"`` or ``"tgt"``: the side ``side`` (one of those, or one of the corpus's two language codes)
    names; anything else is a :class:`~attnkit.errors.ConfigError` (a ``ValueError``) naming ``side``."""
    if side in (corpus.src_lang, corpus.tgt_lang) and corpus.src_lang != corpus.tgt_lang:
        side = "src" if side == corpus.src_lang else "tgt"
    if side not in SIDES:
        raise ConfigError(
            f"side must be src, tgt, {corpus.src_lang} or {corpus.tgt_lang} for corpus {corpus.name!r}, got {side!r}"
        )
    return side


def side_texts(corpus, split: str, side: str, limit: int | None = None) -> list[str]:
    """The texts of one side (``"src"``, ``"tgt"``, or one of the corpus's two language codes) of
    ``corpus``'s ``split``, in corpus order; the first ``limit`` pairs only when given."""
    side = resolve_side(corpus, side)
    return [getattr(pair, side) for pair in corpus.iter_pairs(split, limit)]


def token_stream(texts: Iterable[str], tokenizer) -> np.ndarray:
    """The ids of ``texts`` back to back, each text as ``bos ids eos`` (int64, one flat array)."""
    texts = list(texts)
    encoded = tokenizer.encode_batch(texts) if texts else []
    lengths = [len(e) + 2 for e in encoded]
    out = np.empty(sum(lengths), dtype=np.int64)
    at = 0
    for ids, n in zip(encoded, lengths):
        out[at] = BOS_ID
        out[at + 1 : at + n - 1] = ids
        out[at + n - 1] = EOS_ID
        at += n
    return out


def block_count(stream_len: int, context: int) -> int:
    """How many whole blocks of ``context + 1`` ids (sharing one id with the next) a stream holds."""
    return max(0, (int(stream_len) - 1) // int(context))


def lm_batches(
    stream: np.ndarray | Sequence[int],
    *,
    context: int,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Batches:
    """Resumable batches of blocks of ``stream``: each batch is ``{"ids": (B, T), "targets": (B, T)}``
    (int64), ``targets`` the ids one step on. ``shuffle``: each epoch visits the blocks in a
    permutation that is a pure function of ``(seed, epoch)`` (so a resumed run sees the same order);
    ``shuffle=False``: in stream order, for validation. ``drop_last``: skip a last smaller batch."""
    for name, value in (("context", context), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    stream = np.asarray(stream)
    n = block_count(len(stream), context)
    if n == 0:
        raise ValueError(f"the text holds {len(stream)} tokens: too few for one block of context={context} (+1)")

    def plan(epoch: int) -> list[list[int]]:
        order = shuffled(n, seed, epoch) if shuffle else list(range(n))
        stop = n - n % batch_size if drop_last and n >= batch_size else n
        return [order[i : i + batch_size] for i in range(0, stop, batch_size)]

    def make(idx, epoch, i) -> dict:
        blocks = np.stack([stream[j * context : j * context + context + 1] for j in idx])  # (B, T + 1)
        blocks = torch.from_numpy(blocks.astype(np.int64))
        return {"ids": blocks[:, :-1], "targets": blocks[:, 1:]}  # (B, T) each

    return Batches(
        plan,
        make,
        fingerprint={"context": context, "batch_size": batch_size, "seed": seed, "num_blocks": n},
    )
