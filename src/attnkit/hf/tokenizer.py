"""A Hugging Face tokenizer with the interface of :class:`attnkit.data.Tokenizer`, one side at a time.

attnkit's code reads a tokenizer through ``encode``/``encode_batch`` (ids without special tokens),
``decode``, ``id_to_piece``, ``bos_id``/``eos_id``/``pad_id``/``unk_id`` and ``vocab_size``.
:class:`HFTokenizer` gives those for the source side (``tokenizer(text)``) or the target side
(``tokenizer(text_target=text)``, Marian's target sentencepiece model), without the special tokens:
the encoder-decoder adapter (:mod:`attnkit.hf.seq2seq`) adds the ones the model expects itself, so
that every piece attnkit shows is a piece of the text.

Pieces come back in sentencepiece's convention, which :mod:`attnkit.alignment.words` groups into
words: a piece that starts a word starts with ``▁``. Byte-level BPE (GPT-2, BART, RoBERTa) marks a
word start with ``Ġ`` and WordPiece (BERT) marks a continuation with ``##``; both are rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from ..alignment.words import WORD_START
from ..data.text import check_unicode

__all__ = ["HFTokenizer"]

_BYTE_SPACE = "\u0120"  # Ġ: byte-level BPE's space


def _style(tok) -> str:
    """``"sentencepiece"``, ``"bytelevel"`` or ``"wordpiece"``: how the tokenizer marks words."""
    backend = getattr(tok, "backend_tokenizer", None)
    model = type(getattr(backend, "model", None)).__name__
    if model == "WordPiece":
        return "wordpiece"
    probe = tok.convert_ids_to_tokens(tok("a b", add_special_tokens=False)["input_ids"])
    if any(p.startswith(WORD_START) for p in probe):
        return "sentencepiece"
    if any(p.startswith(_BYTE_SPACE) for p in probe):
        return "bytelevel"
    return "sentencepiece"


class HFTokenizer:
    """One side (``"source"`` or ``"target"``) of Hugging Face tokenizer ``tok`` (see the module
    docstring). ``bos_id``: the id the decoder starts from (the model's ``decoder_start_token_id``);
    ``eos_id``, ``pad_id``: the model's."""

    def __init__(self, tok, *, side: str = "source", bos_id: int, eos_id: int, pad_id: int):
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', got {side!r}")
        self.hf = tok
        self.side = side
        self.bos_id, self.eos_id, self.pad_id = int(bos_id), int(eos_id), int(pad_id)
        unk = getattr(tok, "unk_token_id", None)
        self.unk_id = int(unk) if unk is not None else self.pad_id
        self.special_ids = set(getattr(tok, "all_special_ids", []) or []) | {self.bos_id, self.eos_id, self.pad_id}
        self.style = _style(tok)
        self._byte_decoder = None
        if self.style == "bytelevel":
            self._byte_decoder = _bytes_to_unicode_inverse()

    # ------------------------------------------------------------------ sizes
    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def __len__(self) -> int:
        return self.vocab_size

    # ------------------------------------------------------------------ encoding
    def _ids(self, texts: list[str]) -> list[list[int]]:
        if self.side == "target":
            out = self.hf(text_target=texts, add_special_tokens=False)
        else:
            out = self.hf(texts, add_special_tokens=False)
        return [list(map(int, ids)) for ids in out["input_ids"]]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text`` without the tokenizer's special tokens (``add_bos``/``add_eos`` add
        this side's ``bos_id``/``eos_id``)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.encode_batch([text], add_bos=add_bos, add_eos=add_eos)[0]

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[list[int]]:
        """:meth:`encode` for a list of texts."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of str")
        for i, t in enumerate(texts):  # a lone surrogate: a clear TextError, not the tokenizers library's own
            check_unicode(t, "the text" if len(texts) == 1 else f"text {i + 1}")
        if not texts:
            return []
        return [[self.bos_id] * add_bos + ids + [self.eos_id] * add_eos for ids in self._ids(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: stops at the first ``eos``, skips the special tokens."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"ids must be an iterable of int, got {type(ids).__name__}")
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"ids contains {i}, outside the vocabulary [0, {self.vocab_size})")
            if i not in self.special_ids:
                out.append(i)
        return self.hf.decode(out, skip_special_tokens=True).strip()

    # ------------------------------------------------------------------ pieces
    def id_to_piece(self, i: int) -> str:
        """The piece of id ``i`` in sentencepiece's convention (``▁`` starts a word; a special token
        is a word of its own)."""
        i = int(i)
        if not 0 <= i < self.vocab_size:
            raise ValueError(f"i must be in [0, {self.vocab_size}), got {i}")
        piece = self.hf.convert_ids_to_tokens(i)
        if i in self.special_ids:
            return WORD_START + piece
        if self.style == "wordpiece":
            return piece[2:] if piece.startswith("##") else WORD_START + piece
        if self.style == "bytelevel":
            raw = bytes(self._byte_decoder.get(c, 0x3F) for c in piece)
            text = raw.decode("utf-8", errors="replace")
            return WORD_START + text[1:] if text.startswith(" ") else text
        return piece

    def piece_to_id(self, piece: str) -> int:
        """Id of a piece as the tokenizer spells it (``unk_id`` when unknown)."""
        found = self.hf.convert_tokens_to_ids(piece)
        return self.unk_id if found is None else int(found)

    def pieces(self, text: str) -> list[str]:
        """The pieces of ``text`` (:meth:`id_to_piece` of :meth:`encode`)."""
        return [self.id_to_piece(i) for i in self.encode(text)]

    def to_bytes(self) -> bytes:
        """The tokenizer's serialised form (its ``tokenizer.json``, or its vocabulary): what identifies it."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is not None:
            return backend.to_str().encode("utf-8")
        return json.dumps(self.hf.get_vocab(), sort_keys=True).encode("utf-8")

    def __repr__(self) -> str:
        digest = hashlib.sha256(self.to_bytes()).hexdigest()[:8]
        return f"HFTokenizer({type(self.hf).__name__}, side={self.side}, vocab_size={self.vocab_size}, {digest})"


def _bytes_to_unicode_inverse() -> dict[str, int]:
    """GPT-2's byte ↔ printable-character table, inverted: character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
