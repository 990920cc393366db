"""Subword tokenizer: a thin, deterministic wrapper around sentencepiece.

One joint Spanish+English vocabulary is the default plan: a single tokenizer for both sides, so
a model may share (tie) its source and target embeddings, and names spelled alike in both
languages get the same pieces. Train it on the TRAINING split only, so nothing of valid/test
leaks into the vocabulary.

Special ids are fixed, whatever the corpus: ``pad=0``, ``bos=1``, ``eos=2``, ``unk=3``. The model
is trained in-process from an iterator of strings (no temporary text file) and is saved as
``tokenizer.model`` inside a checkpoint folder; its serialized bytes can also be embedded
elsewhere and read back with :meth:`Tokenizer.from_bytes`.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from ..checks import POSITIVE_INT, Range, check
from ..errors import InputError
from ..paths import atomic_write_bytes
from .spelling import check_spelling, normalize_source
from .text import check_unicode, no_readable_word

__all__ = ["BOS_ID", "EOS_ID", "MODEL_FILENAME", "PAD_ID", "UNK_ID", "Tokenizer", "encode_sources"]

PAD_ID = 0  # the special pieces' ids, fixed when sentencepiece is trained (one name each, for the API reference)
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
MODEL_FILENAME = "tokenizer.model"
MODEL_TYPES = ("unigram", "bpe")


class Tokenizer:
    """A sentencepiece model with attnkit's fixed special ids.

    Build one with :meth:`train`, :meth:`load` or :meth:`from_bytes`.
    """

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(self, model_proto: bytes):
        if not isinstance(model_proto, (bytes, bytearray)):
            raise TypeError(f"model_proto must be bytes, got {type(model_proto).__name__}")
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError on bad bytes
            raise ValueError(f"model_proto is not a sentencepiece model: {exc}") from None
        got = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
        if got != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                f"model_proto has special ids pad/bos/eos/unk={got}, expected "
                f"{(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}; train it with Tokenizer.train"
            )

    # ---------------------------------------------------------------- training and persistence
    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        model_dir: str | os.PathLike | None = None,
        vocab_size: int = 8000,
        model_type: str = "unigram",
        *,
        character_coverage: float = 1.0,
        byte_fallback: bool = True,
        input_sentence_size: int = 0,
        seed: int = 0,
        num_threads: int = 2,
        hard_vocab_limit: bool = True,
        normalization_rule_name: str = "nmt_nfkc",
    ) -> Tokenizer:
        """Train a tokenizer in-process from ``texts`` and, if ``model_dir`` is given, save it there.

        ``vocab_size`` counts the 4 special pieces (and the 256 byte pieces when
        ``byte_fallback``, which lets any character round-trip instead of becoming ``unk``).
        ``input_sentence_size`` > 0 samples that many sentences (seeded) to bound training time;
        0 uses them all (the Bible training split, ~58k sentences, trains in seconds).
        Deterministic: same texts and arguments give byte-identical models (sentencepiece's
        random generator is seeded with ``seed``). ``num_threads`` is capped at 2.
        """
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be an iterable of str, not a single str")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
        check("vocab_size", vocab_size, Range(8, integer=True))
        check("num_threads", num_threads, POSITIVE_INT)

        def sentences():
            for i, text in enumerate(texts):
                if not isinstance(text, str):
                    raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
                if text.strip():
                    yield text

        spm.set_random_generator_seed(int(seed))
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            byte_fallback=byte_fallback,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=input_sentence_size > 0,
            num_threads=min(num_threads, 2),
            hard_vocab_limit=hard_vocab_limit,
            normalization_rule_name=normalization_rule_name,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            pad_piece="<pad>",
            bos_piece="<s>",
            eos_piece="</s>",
            unk_piece="<unk>",
            minloglevel=2,
        )
        tok = cls(writer.getvalue())
        if model_dir is not None:
            tok.save(model_dir)
        return tok

    def to_bytes(self) -> bytes:
        """The serialized sentencepiece model proto (what ``tokenizer.model`` contains)."""
        return self._proto

    @classmethod
    def from_bytes(cls, data: bytes) -> Tokenizer:
        """Rebuild a tokenizer from :meth:`to_bytes` output (e.g. embedded in a checkpoint)."""
        return cls(data)

    def save(self, model_dir: str | os.PathLike) -> Path:
        """Write ``model_dir/tokenizer.model`` atomically; return its path."""
        if not isinstance(model_dir, (str, os.PathLike)):
            raise TypeError(f"model_dir must be a str or os.PathLike, got {type(model_dir).__name__}")
        return atomic_write_bytes(Path(model_dir) / MODEL_FILENAME, self._proto)

    @classmethod
    def load(cls, model_dir: str | os.PathLike) -> Tokenizer:
        """Read ``model_dir/tokenizer.model`` (a file path to a ``.model`` is accepted too)."""
        if not isinstance(model_dir, (str, os.PathLike)):
            raise TypeError(f"model_dir must be a str or os.PathLike, got {type(model_dir).__name__}")
        path = Path(model_dir)
        if path.is_dir() or (not path.exists() and path.suffix != ".model"):  # a missing folder: name the file
            path = path / MODEL_FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer model at {path} (model_dir={model_dir!s})")
        return cls(path.read_bytes())

    # ---------------------------------------------------------------- encoding and decoding
    @property
    def vocab_size(self) -> int:
        """Number of ids, special ids included (embedding tables need this many rows)."""
        return self._sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, without special ids unless asked."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._sp.encode(check_unicode(text), out_type=int, add_bos=add_bos, add_eos=add_eos)

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[list[int]]:
        """:meth:`encode` for a list of texts (one call into sentencepiece)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of str")
        for i, t in enumerate(texts):
            check_unicode(t, f"text {i + 1}")
        return self._sp.encode(list(texts), out_type=int, add_bos=add_bos, add_eos=add_eos)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: stops at the first ``eos``, skips ``pad`` and ``bos``.

        Accepts a list of ints or a 1-D tensor/array (anything iterable of ints), so a row of
        a model's output can be decoded as it is.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"ids must be an iterable of int, got {type(ids).__name__}")
        out = []
        n = self.vocab_size
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            if not 0 <= i < n:
                raise ValueError(f"ids contains {i}, outside the vocabulary [0, {n})")
            out.append(i)
        return self._sp.decode(out)

    def id_to_piece(self, i: int) -> str:
        """The subword piece of id ``i`` (e.g. ``"▁Dios"``)."""
        if not 0 <= int(i) < self.vocab_size:
            raise ValueError(f"i must be in [0, {self.vocab_size}), got {i}")
        return self._sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        """Id of a subword piece (``unk_id`` when it is not in the vocabulary)."""
        return self._sp.piece_to_id(piece)

    def piece_scores(self) -> list[float]:
        """Each id's score in the sentencepiece model, lower for a rarer piece: a unigram model's
        log-probability of the piece (fitted on the training corpus), a BPE model's negative merge rank.
        A byte piece (a character the vocabulary does not hold, spelled in bytes) scores ``-inf``, the
        rarest; the special pieces score 0."""
        sp = self._sp
        return [-math.inf if sp.is_byte(i) else float(sp.get_score(i)) for i in range(self.vocab_size)]

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of ``text``, for looking at how a sentence is cut."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._sp.encode(check_unicode(text), out_type=str)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


def encode_sources(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_len: int,
    *,
    truncate: bool = False,
    spelling: str = "modern",
) -> list[list[int]]:
    """Subword ids of each source sentence, for a translator that reads at most ``max_len`` pieces: the
    PyTorch translator and the CTranslate2 engine both check their input here, so both refuse the same
    input with the same words. An empty sentence is an ``InputError``; one over ``max_len`` pieces too,
    unless ``truncate`` (then its first ``max_len`` pieces).

    ``spelling``: the spelling the model was trained on; ``rv1909`` rewrites today's Spanish in the
    1909 Reina-Valera's first (:func:`attnkit.data.spelling.to_1909`: fue → fué, a → á, creó → crió),
    so a model trained on the 1909 Bible reads what people type. Word for word, so the pieces still
    group into the sentence's words.

    Odd text is a :class:`attnkit.data.text.TextError` (a kind of ``InputError``): a lone surrogate (not valid
    Unicode), or a sentence the tokenizer reads as no piece at all (only zero-width, direction-mark, byte-order
    mark or control characters), which no model can read."""
    check_spelling(spelling)
    out = []
    for i, s in enumerate(sentences):
        what = "the text" if len(sentences) == 1 else f"sentence {i + 1}"
        if not isinstance(s, str) or not s.strip():
            raise InputError(f"{what} is empty: give some text to translate")
        check_unicode(s, what)
        ids = tokenizer.encode(normalize_source(s.strip(), spelling))
        if not ids:
            raise no_readable_word(what)
        if len(ids) > max_len:
            if not truncate:
                raise InputError(
                    f"sentence {i + 1} has {len(ids)} subword tokens, more than this model's maximum of "
                    f"{max_len}; split it into shorter sentences"
                )
            ids = ids[:max_len]
        out.append(ids)
    return out
