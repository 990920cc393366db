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

**Repeated sequences** (``repeats``, for studying induction heads): a share of the training blocks is
replaced by a random sequence of ``P`` non-special tokens repeated to fill the block, ``P`` drawn per
block from ``repeat_period``. After its first period such a block is predictable only by copying what
followed the earlier occurrence of the current token: the job of an induction head (Olsson et al.
2022), which these blocks make worth learning in minutes instead of billions of tokens. The period
varies so that no fixed relative position (a positional shortcut one layer could learn) predicts it.
Which blocks are replaced, and by what, is a pure function of ``(seed, epoch, block)``: a resumed run
sees the same blocks. Validation blocks are never replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ...data.tokenizer import BOS_ID, EOS_ID, UNK_ID
from ...errors import ConfigError
from ...training.data import Batches, shuffled

__all__ = ["SIDES", "block_count", "lm_batches", "repeated_sequence", "resolve_side", "side_texts", "token_stream"]

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


def repeated_sequence(rng: np.random.Generator, vocab_size: int, length: int, period: int) -> np.ndarray:
    """``length`` ids: ``period`` random non-special ids (``>= 4``, above the special pieces) repeated
    (int64)."""
    first = UNK_ID + 1
    if vocab_size <= first + 1:
        raise ValueError(f"vocab_size must leave at least 2 non-special ids above {UNK_ID}, got {vocab_size}")
    r = rng.integers(first, vocab_size, period)  # (P,)
    return np.tile(r, length // period + 1)[:length].astype(np.int64)  # (length,)


def _check_repeats(repeats: float, repeat_period: tuple[int, int], vocab_size: int | None, context: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or not 0.0 <= repeats <= 1.0:
        raise ValueError(f"repeats must be a share in [0, 1], got {repeats!r}")
    if repeats == 0:
        return
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= UNK_ID + 2:
        raise ValueError(
            f"vocab_size must be an int leaving at least 2 non-special ids above {UNK_ID} when repeats > 0 (the "
            f"repeated sequences' ids), got {vocab_size!r}"
        )
    lo, hi = repeat_period
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi <= context):
        raise ValueError(f"repeat_period must be two ints 1 <= min <= max <= context={context}, got {repeat_period!r}")


def lm_batches(
    stream: np.ndarray | Sequence[int],
    *,
    context: int,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    repeats: float = 0.0,
    repeat_period: tuple[int, int] = (8, 64),
    vocab_size: int | None = None,
) -> Batches:
    """Resumable batches of blocks of ``stream``: each batch is ``{"ids": (B, T), "targets": (B, T)}``
    (int64), ``targets`` the ids one step on. ``shuffle``: each epoch visits the blocks in a
    permutation that is a pure function of ``(seed, epoch)`` (so a resumed run sees the same order);
    ``shuffle=False``: in stream order, for validation. ``drop_last``: skip a last smaller batch.
    ``repeats``: the share of blocks replaced by a repeated random sequence (see the module docstring)
    of a period in ``repeat_period`` (inclusive), with ids below ``vocab_size``."""
    for name, value in (("context", context), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    _check_repeats(repeats, tuple(repeat_period), vocab_size, context)
    stream = np.asarray(stream)
    n = block_count(len(stream), context)
    if n == 0:
        raise ValueError(f"the text holds {len(stream)} tokens: too few for one block of context={context} (+1)")

    def plan(epoch: int) -> list[list[int]]:
        order = shuffled(n, seed, epoch) if shuffle else list(range(n))
        stop = n - n % batch_size if drop_last and n >= batch_size else n
        return [order[i : i + batch_size] for i in range(0, stop, batch_size)]

    def block(j: int, epoch: int) -> np.ndarray:
        if repeats > 0:
            rng = np.random.default_rng([int(seed), int(epoch), int(j)])
            if rng.random() < repeats:
                period = int(rng.integers(repeat_period[0], repeat_period[1] + 1))
                return repeated_sequence(rng, vocab_size, context + 1, period)
        return stream[j * context : j * context + context + 1]

    def make(idx, epoch, i) -> dict:
        blocks = np.stack([block(j, epoch) for j in idx])  # (B, T + 1)
        blocks = torch.from_numpy(blocks.astype(np.int64))
        return {"ids": blocks[:, :-1], "targets": blocks[:, 1:]}  # (B, T) each

    fingerprint = {"context": context, "batch_size": batch_size, "seed": seed, "num_blocks": n}
    fingerprint["repeats"] = float(repeats)  # a resumed run with another share is refused
    if repeats > 0:
        fingerprint["repeat_period"] = list(repeat_period)
    return Batches(plan, make, fingerprint=fingerprint)
