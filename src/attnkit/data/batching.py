"""Turning verse pairs into padded tensor batches, in length buckets, resumably.

Three steps: :func:`encode_pairs` tokenizes pairs once into id tensors (truncated to ``max_len``
tokens a side); :class:`BucketBatchSampler` groups examples of similar length into batches
(bounded by a batch size and/or a padded-token budget) so little compute goes to padding, in an
order shuffled from a seed; :func:`collate` pads a batch into the tensors a seq2seq model eats.

Resuming: the batches of an epoch depend only on ``(seed, epoch)``, so the sampler's position is
just ``{"seed", "epoch", "index"}`` (batches of this epoch already handed out). Saving
:meth:`BucketBatchSampler.state_dict` with a checkpoint and loading it into a fresh sampler gives
exactly the batches the uninterrupted run would have seen next.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..checks import NON_NEGATIVE_INT, POSITIVE_INT, check
from .tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = ["BucketBatchSampler", "Example", "collate", "encode_pairs", "example_lengths"]


class Example(NamedTuple):
    """One encoded pair: source and target token ids (1-D long tensors, no special ids)."""

    src: torch.Tensor
    tgt: torch.Tensor


def encode_pairs(pairs: Sequence, tokenizer, max_len: int, *, tgt_tokenizer=None) -> list[Example]:
    """Tokenize ``pairs`` (objects with ``.src`` and ``.tgt`` text, or ``(src, tgt, ...)`` tuples).

    Each side is truncated to its first ``max_len`` tokens (a verse longer than that loses its
    end; with the Bible and an 8k vocabulary, ``max_len=100`` truncates well under 1% of verses).
    No special ids are added here: :func:`collate` adds ``bos``/``eos`` to the target, so a
    target has at most ``max_len + 1`` positions in ``tgt_in``/``tgt_out``. ``tgt_tokenizer``: the
    target side's, for separate vocabularies (default: ``tokenizer``, one joint vocabulary).
    """
    check("max_len", max_len, POSITIVE_INT)
    srcs, tgts = [], []
    for i, p in enumerate(pairs):
        src, tgt = (p.src, p.tgt) if hasattr(p, "src") else (p[0], p[1])
        if not isinstance(src, str) or not isinstance(tgt, str):
            raise TypeError(f"pairs[{i}] must hold two str (src, tgt), got {type(src).__name__}, {type(tgt).__name__}")
        srcs.append(src)
        tgts.append(tgt)
    src_ids = tokenizer.encode_batch(srcs) if srcs else []
    tgt_ids = (tgt_tokenizer or tokenizer).encode_batch(tgts) if tgts else []
    return [
        Example(torch.tensor(s[:max_len], dtype=torch.long), torch.tensor(t[:max_len], dtype=torch.long))
        for s, t in zip(src_ids, tgt_ids)
    ]


def example_lengths(examples: Sequence[Example]) -> list[int]:
    """Padded size an example costs in a batch: ``max(len(src), len(tgt) + 1)`` (target + bos/eos)."""
    return [max(len(e.src), len(e.tgt) + 1) for e in examples]


class BucketBatchSampler:
    """Batches of indices of similar length, planned per epoch from a seed: :meth:`plan` is a pure
    function of ``(seed, epoch)``, so :class:`attnkit.training.data.Batches` (which keeps the position
    and resumes) can replay any epoch exactly.

    Each epoch: indices are shuffled with ``random.Random(f"{seed}:{epoch}")``, cut into pools of
    ``pool_size`` batches' worth, each pool sorted by length and cut into batches, and the batch
    order shuffled. A batch holds at most ``batch_size`` examples and at most ``max_tokens``
    padded tokens (``len(batch) * longest length``); give either or both. An example longer than
    ``max_tokens`` alone still forms a batch of one. Every index appears exactly once per epoch.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        pool_size: int = 100,
        drop_last: bool = False,
    ):
        if batch_size is None and max_tokens is None:
            raise ValueError("give batch_size or max_tokens (or both)")
        check("batch_size", batch_size, POSITIVE_INT, allow_none=True)
        check("max_tokens", max_tokens, POSITIVE_INT, allow_none=True)
        check("pool_size", pool_size, POSITIVE_INT)
        lengths = [int(n) for n in lengths]
        if any(n < 0 for n in lengths):
            raise ValueError("lengths must be non-negative")
        self.lengths = lengths
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.pool_size = pool_size
        self.drop_last = bool(drop_last)

    def _cut(self, order: list[int]) -> list[list[int]]:
        batches, cur, longest = [], [], 0
        for i in order:
            n = max(self.lengths[i], 1)
            too_many = self.batch_size is not None and len(cur) >= self.batch_size
            too_big = self.max_tokens is not None and (len(cur) + 1) * max(longest, n) > self.max_tokens
            if cur and (too_many or too_big):
                batches.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, n)
        if cur:
            batches.append(cur)
        return batches

    def plan(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch``, in visiting order: a pure function of the seed and ``epoch``."""
        check("epoch", epoch, NON_NEGATIVE_INT)
        rng = random.Random(f"{self.seed}:{epoch}")
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        if self.batch_size is not None:
            pool = self.pool_size * self.batch_size
        else:
            mean = max(1, sum(self.lengths) // max(1, len(self.lengths)))
            pool = self.pool_size * max(1, self.max_tokens // mean)
        out: list[list[int]] = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lambda i: self.lengths[i])  # stable
            out.extend(self._cut(chunk))
        if self.drop_last and self.batch_size is not None:
            out = [b for b in out if len(b) == self.batch_size]
        if self.shuffle:
            rng.shuffle(out)
        return out


def collate(
    examples: Sequence[Example], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> dict[str, torch.Tensor]:
    """Pad a list of :class:`Example` into a batch for teacher forcing.

    Returns ``src (B, S)``, ``src_lengths (B,)``, ``tgt_in (B, T)`` = bos + target,
    ``tgt_out (B, T)`` = target + eos, and ``tgt_lengths (B,)`` = target tokens + 1; all long,
    padded with ``pad_id``. ``S`` is at least 1 so an empty source still has a shape.
    """
    if len(examples) == 0:
        raise ValueError("examples must not be empty")
    b = len(examples)
    src_len = torch.tensor([len(e.src) for e in examples], dtype=torch.long)
    tgt_len = torch.tensor([len(e.tgt) + 1 for e in examples], dtype=torch.long)
    src = torch.full((b, max(1, int(src_len.max()))), pad_id, dtype=torch.long)
    t = int(tgt_len.max())
    tgt_in = torch.full((b, t), pad_id, dtype=torch.long)
    tgt_out = torch.full((b, t), pad_id, dtype=torch.long)
    for row, e in enumerate(examples):
        n, m = len(e.src), len(e.tgt)
        src[row, :n] = e.src
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : m + 1] = e.tgt
        tgt_out[row, :m] = e.tgt
        tgt_out[row, m] = eos_id
    return {"src": src, "src_lengths": src_len, "tgt_in": tgt_in, "tgt_out": tgt_out, "tgt_lengths": tgt_len}
