"""The word-level caption vocabulary (:class:`CaptionVocab`) and the file it is saved in, shared by the
Fashion-MNIST scenes, the Karpathy-split photo captions and every captioner checkpoint."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..paths import atomic_write_bytes

__all__ = ["VOCAB_FILENAME", "CaptionVocab"]

#: The caption vocabulary's file: in a prepared scenes folder and in every captioner checkpoint.
VOCAB_FILENAME = "vocab.json"


class CaptionVocab:
    """Word-level caption vocabulary: pad=0, bos=1, eos=2, unk=3, then sorted words.

    Built from training captions only, so a test word never leaks into the vocabulary.
    """

    PAD, BOS, EOS, UNK = 0, 1, 2, 3
    SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")

    def __init__(self, words: Iterable[str]) -> None:
        words = sorted(set(words) - set(self.SPECIALS))
        for w in words:
            if not isinstance(w, str) or not w or " " in w:
                raise ValueError(f"words: expected non-empty strings without spaces, got {w!r}")
        self.itos: list[str] = [*self.SPECIALS, *words]
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def from_captions(cls, captions: Iterable[str]) -> CaptionVocab:
        """Vocabulary of every whitespace-separated word in ``captions``."""
        return cls(w for c in captions for w in str(c).split())

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaptionVocab) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"CaptionVocab({len(self)} tokens)"

    def encode(self, caption: str, *, add_special: bool = True) -> list[int]:
        """Word ids of ``caption`` (unknown words -> unk), wrapped in bos/eos by default."""
        if not isinstance(caption, str):
            raise TypeError(f"caption: expected str, got {type(caption).__name__}")
        ids = [self.stoi.get(w, self.UNK) for w in caption.split()]
        return [self.BOS, *ids, self.EOS] if add_special else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Caption text of ``ids``: stops at the first eos, drops pad and bos."""
        words = []
        for i in ids:
            i = int(i)
            if i == self.EOS:
                break
            if i in (self.PAD, self.BOS):
                continue
            if not 0 <= i < len(self.itos):
                raise ValueError(f"ids: id {i} outside the vocabulary 0..{len(self.itos) - 1}")
            words.append(self.itos[i])
        return " ".join(words)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the vocabulary as JSON (atomically)."""
        return atomic_write_bytes(path, self.to_bytes())

    def to_bytes(self) -> bytes:
        """The JSON that :meth:`save` writes and :meth:`load` reads (a checkpoint's ``vocab.json``)."""
        return json.dumps({"type": "CaptionVocab", "itos": self.itos}, indent=1).encode()

    @classmethod
    def load(cls, path: str | os.PathLike) -> CaptionVocab:
        """Read a vocabulary written by ``save``; checks the special tokens are in place."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            itos = data["itos"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"path: {path} is not a CaptionVocab JSON file ({e})") from e
        if list(itos[: len(cls.SPECIALS)]) != list(cls.SPECIALS):
            raise ValueError(f"path: {path} does not start with the special tokens {cls.SPECIALS}")
        vocab = cls(itos[len(cls.SPECIALS) :])
        if vocab.itos != itos:
            raise ValueError(f"path: {path} words are not sorted and unique")
        return vocab
