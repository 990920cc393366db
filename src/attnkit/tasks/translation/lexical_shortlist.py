"""A lexical shortlist: which target pieces a batch of source sentences may translate into.

Vocabulary selection for decoding (Jean et al. 2015; Marian's ``--shortlist``, CTranslate2's
vocabulary map): the search scores only the ``frequent`` most common target pieces plus, for
every source piece in the batch, its ``per_source`` most associated target pieces, instead of
the whole vocabulary (:class:`attnkit.decoding.OutputLayerDecoder`). The association is the Dice
coefficient over the training pairs, counted per sentence::

    dice(s, t) = 2 c(s, t) / (c(s) + c(t))

where ``c(s, t)`` is the number of pairs whose source has piece ``s`` and whose target has ``t``,
and ``c(s)``, ``c(t)`` count the pairs with each piece. Dice ranks a piece's translations above
pieces that are merely frequent everywhere (those come in through ``frequent``).

Stored as one safetensors file: ``frequent (N,)`` and ``table (V, M)`` int32 (``-1`` pads a row
with fewer than M associated pieces), with the format's name and the tokenizer's sha256 as
metadata, so that a shortlist is never used with another tokenizer. ``FILENAME`` is its name in a
model's folder (what ``attnkit shortlist`` writes by default).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from ...checks import NON_NEGATIVE_INT, POSITIVE_INT, check
from ...errors import AttnkitError, no_such_file
from ...paths import atomic_write_bytes

__all__ = ["LexicalShortlist", "ShortlistError", "tokenizer_digest"]

FORMAT = "attnkit-lexical-shortlist"
FILENAME = "shortlist.safetensors"
#: The default sizes, chosen on the validation split (beam 5: 37.79 BLEU against 37.97 over the whole
#: vocabulary, with about 3,300 of 8,000 pieces per batch of 64 verses).
DEFAULT_FREQUENT, DEFAULT_PER_SOURCE = 1000, 20


class ShortlistError(AttnkitError, ValueError):
    """A shortlist file is missing or corrupt, or does not belong to the model's tokenizer."""


def tokenizer_digest(tokenizer) -> str:
    """sha256 of the tokenizer's serialized model: which tokenizer a shortlist was built with."""
    return hashlib.sha256(tokenizer.to_bytes()).hexdigest()


@dataclass(frozen=True)
class LexicalShortlist:
    """``frequent (N,)``: the most common target ids; ``table (V, M)``: row ``s`` holds the target
    ids most associated with source id ``s``, best first, ``-1`` padded; ``tokenizer_sha256``:
    the tokenizer both sides were tokenised with."""

    frequent: Tensor
    table: Tensor
    tokenizer_sha256: str

    @property
    def vocab_size(self) -> int:
        return self.table.shape[0]

    @classmethod
    def build(
        cls,
        src_ids: Sequence[Sequence[int]],
        tgt_ids: Sequence[Sequence[int]],
        *,
        vocab_size: int,
        tokenizer_sha256: str,
        frequent: int = DEFAULT_FREQUENT,
        per_source: int = DEFAULT_PER_SOURCE,
    ) -> LexicalShortlist:
        """Count a parallel corpus of token ids (``src_ids[i]`` translates to ``tgt_ids[i]``)."""
        check("vocab_size", vocab_size, POSITIVE_INT)
        check("frequent", frequent, NON_NEGATIVE_INT)
        check("per_source", per_source, POSITIVE_INT)
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"src_ids has {len(src_ids)} sentences but tgt_ids has {len(tgt_ids)}")
        if not len(src_ids):
            raise ValueError("src_ids is empty: a shortlist needs a parallel corpus to count")
        V = vocab_size
        pair_keys, src_sets, tgt_sets, tgt_tokens = [], [], [], []
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
            us = torch.as_tensor(sorted(set(s)), dtype=torch.long)
            ut = torch.as_tensor(sorted(set(t)), dtype=torch.long)
            for name, u in (("src_ids", us), ("tgt_ids", ut)):
                if len(u) and (int(u[0]) < 0 or int(u[-1]) >= V):
                    raise ValueError(f"{name}[{i}] has ids outside [0, {V}): [{int(u[0])}, {int(u[-1])}]")
            pair_keys.append((us[:, None] * V + ut[None, :]).reshape(-1))  # every (s, t) of the pair, once
            src_sets.append(us)
            tgt_sets.append(ut)
            tgt_tokens.append(torch.as_tensor(list(t), dtype=torch.long))
        keys, c_st = torch.unique(torch.cat(pair_keys), return_counts=True)  # sorted by (s, t)
        s, t = keys // V, keys % V
        c_s = torch.bincount(torch.cat(src_sets), minlength=V).double()
        c_t = torch.bincount(torch.cat(tgt_sets), minlength=V).double()
        dice = 2.0 * c_st.double() / (c_s[s] + c_t[t])
        # best first within each source id, ties by target id: stable sorts, the last key first
        order = torch.argsort(-dice, stable=True)
        order = order[torch.argsort(s[order], stable=True)]
        s, t = s[order], t[order]
        rank = torch.arange(len(s)) - torch.searchsorted(s, s)  # position within the source id's run
        keep = rank < per_source
        table = torch.full((V, per_source), -1, dtype=torch.int32)
        table[s[keep], rank[keep]] = t[keep].to(torch.int32)
        counts = torch.bincount(torch.cat(tgt_tokens), minlength=V)
        top = torch.argsort(-counts, stable=True)[:frequent]
        top = top[counts[top] > 0].to(torch.int32)
        return cls(top, table, tokenizer_sha256)

    def ids_for(self, src_ids: Iterable[Iterable[int]] | Tensor, always: Sequence[int] = ()) -> Tensor:
        """The sorted vocabulary ids a batch of sources may translate into: ``frequent``, the
        table rows of every source id in ``src_ids`` (lists of ids, or a tensor of them: padding
        ids only add their own rows), and ``always`` (e.g. bos, eos, unk). ``(V',)`` long."""
        if isinstance(src_ids, Tensor):
            src = src_ids.reshape(-1).long().cpu()
        else:
            src = torch.as_tensor([i for ids in src_ids for i in ids], dtype=torch.long)
        src = torch.unique(src)
        if len(src) and (int(src[0]) < 0 or int(src[-1]) >= self.vocab_size):
            raise ValueError(
                f"src_ids must lie in [0, {self.vocab_size}) (the shortlist's vocabulary), "
                f"got [{int(src[0])}, {int(src[-1])}]"
            )
        rows = self.table.index_select(0, src).reshape(-1)
        parts = [self.frequent.long(), rows[rows >= 0].long(), torch.as_tensor(list(always), dtype=torch.long)]
        return torch.unique(torch.cat(parts))

    # ------------------------------------------------------------------ the file
    def save(self, path: str | os.PathLike) -> Path:
        """Write the shortlist to ``path`` (a ``.safetensors`` file)."""
        path = Path(path)
        data = safetensors_bytes(
            {"frequent": self.frequent.contiguous(), "table": self.table.contiguous()},
            metadata={"format": FORMAT, "tokenizer_sha256": self.tokenizer_sha256},
        )
        return atomic_write_bytes(path, data)  # never a half-written shortlist under the real name

    @classmethod
    def load(cls, path: str | os.PathLike) -> LexicalShortlist:
        """Read a file written by :meth:`save`; :class:`ShortlistError` when it is missing or corrupt."""
        path = Path(path)
        if not path.is_file():
            raise ShortlistError(f"{no_such_file(path)}; build a shortlist with `attnkit shortlist --model MODEL`")
        try:
            with safe_open(str(path), framework="pt") as fh:
                meta = fh.metadata() or {}
            tensors = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ShortlistError(f"{path}: corrupt shortlist file ({exc})") from None
        if meta.get("format") != FORMAT or set(tensors) != {"frequent", "table"}:
            raise ShortlistError(
                f"{path}: not an attnkit shortlist (format {meta.get('format')!r}, tensors {sorted(tensors)})"
            )
        frequent, table = tensors["frequent"], tensors["table"]
        V = table.shape[0] if table.dim() == 2 else 0
        ok = (
            frequent.dim() == 1
            and table.dim() == 2
            and frequent.dtype == table.dtype == torch.int32
            and (not len(frequent) or (int(frequent.min()) >= 0 and int(frequent.max()) < V))
            and (not table.numel() or (int(table.min()) >= -1 and int(table.max()) < V))
        )
        if not ok:
            raise ShortlistError(
                f"{path}: corrupt shortlist file (frequent {tuple(frequent.shape)}, "
                f"table {tuple(table.shape)}, ids out of range or not int32)"
            )
        return cls(frequent, table, meta.get("tokenizer_sha256", ""))
