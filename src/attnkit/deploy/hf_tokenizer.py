"""attnkit's sentencepiece tokenizer as a Hugging Face ``tokenizer.json`` (the ``tokenizers`` library).

A ``tokenizer.json`` is a pipeline — normaliser, pre-tokeniser, model, decoder — that the Rust
``tokenizers`` library runs and that ``AutoTokenizer.from_pretrained`` loads without any custom code.
:func:`build_tokenizer` writes the pipeline that cuts text as sentencepiece (Kudo & Richardson 2018)
does with attnkit's settings:

- **normaliser**: sentencepiece's own compiled character map (``nmt_nfkc``: NFKC plus the NMT
  clean-ups), copied byte for byte into ``tokenizers``' ``Precompiled`` normaliser; then what
  ``remove_extra_whitespaces`` does: strip both ends, collapse runs of spaces to one;
- **pre-tokeniser**: ``Metaspace``: every space becomes ``▁`` and a ``▁`` is prepended
  (``add_dummy_prefix``); the text is split before each ``▁`` (sentencepiece's pieces never hold a
  ``▁`` inside, so Viterbi over the pieces between two ``▁`` equals Viterbi over the sentence);
- **model**: the unigram language model with the same pieces, ids and log-probabilities (or BPE
  with merges ranked by the pieces' scores), ``<unk>`` at id 3 and the 256 ``<0xNN>`` byte pieces
  as the fallback for characters outside the vocabulary;
- **decoder**: ``▁`` back to spaces, byte pieces back to UTF-8, the dummy prefix's space dropped.

No special id is added around a sentence: attnkit's source is the pieces alone, and the decoder
starts from ``<s>`` on its own (``decoder_start_token_id``).

The sentencepiece model file is a protocol-buffer message; the few fields this needs (pieces,
model type, byte fallback, the normaliser's character map and flags) are read by
:func:`read_spm_model`, a reader of the protobuf wire format, so neither ``protobuf`` nor a
generated ``_pb2`` module is needed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from .manifest import DeployError

__all__ = ["SpmModel", "build_tokenizer", "read_spm_model", "tokenizer_mismatches"]

#: sentencepiece's ``SentencePiece.Type`` values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
#: ``TrainerSpec.ModelType`` values
UNIGRAM, BPE = 1, 2


@dataclass
class SpmModel:
    """What a sentencepiece ``ModelProto`` says about cutting text (field numbers from
    sentencepiece's ``sentencepiece_model.proto``)."""

    pieces: list[tuple[str, float, int]] = field(default_factory=list)  # (piece, score, type) in id order
    model_type: int = UNIGRAM
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    split_by_whitespace: bool = True
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes):
    """``(field number, wire type, value)`` of each field of one protobuf message: varints as int,
    length-delimited fields as bytes, 32-bit ones as their 4 bytes (64-bit ones as 8)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        else:
            raise DeployError(f"the tokenizer model is not a sentencepiece model (protobuf wire type {wire})")
        yield number, wire, value


def read_spm_model(proto: bytes) -> SpmModel:
    """The fields of a serialized sentencepiece ``ModelProto`` that :func:`build_tokenizer` needs."""
    m = SpmModel()
    for number, _, value in _fields(proto):
        if number == 1:  # repeated SentencePiece pieces
            piece, score, kind = "", 0.0, NORMAL
            for n, _, v in _fields(value):
                if n == 1:
                    piece = v.decode("utf-8")
                elif n == 2:
                    score = struct.unpack("<f", v)[0]
                elif n == 3:
                    kind = v
            m.pieces.append((piece, score, kind))
        elif number == 2:  # TrainerSpec
            for n, _, v in _fields(value):
                if n == 3:
                    m.model_type = v
                elif n == 35:
                    m.byte_fallback = bool(v)
                elif n == 24:
                    m.treat_whitespace_as_suffix = bool(v)
                elif n == 21:
                    m.split_by_whitespace = bool(v)
        elif number == 3:  # NormalizerSpec
            for n, _, v in _fields(value):
                if n == 2:
                    m.precompiled_charsmap = bytes(v)
                elif n == 3:
                    m.add_dummy_prefix = bool(v)
                elif n == 4:
                    m.remove_extra_whitespaces = bool(v)
                elif n == 5:
                    m.escape_whitespaces = bool(v)
    return m


def _check(m: SpmModel, tokenizer: Tokenizer) -> None:
    if len(m.pieces) != len(tokenizer):
        raise DeployError(f"the tokenizer model lists {len(m.pieces)} pieces but sentencepiece reads {len(tokenizer)}")
    if m.model_type not in (UNIGRAM, BPE):
        raise DeployError(f"sentencepiece model type {m.model_type} (word/char): only unigram and BPE export")
    options = {
        "add_dummy_prefix": (m.add_dummy_prefix, True),
        "remove_extra_whitespaces": (m.remove_extra_whitespaces, True),
        "escape_whitespaces": (m.escape_whitespaces, True),
        "treat_whitespace_as_suffix": (m.treat_whitespace_as_suffix, False),
        "split_by_whitespace": (m.split_by_whitespace, True),
    }
    for name, (got, want) in options.items():
        if got != want:
            raise DeployError(f"the tokenizer was trained with {name}={got}; the export maps only {name}={want}")
    kinds = {k for _, _, k in m.pieces}
    if USER_DEFINED in kinds:
        raise DeployError("the tokenizer has user-defined pieces; the export does not map them")


def build_tokenizer(tokenizer: Tokenizer):
    """A ``tokenizers.Tokenizer`` that cuts text into the same pieces and ids as ``tokenizer``
    (see the module docstring)."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    m = read_spm_model(tokenizer.to_bytes())
    _check(m, tokenizer)
    if m.model_type == UNIGRAM:
        model = models.Unigram([(p, s) for p, s, _ in m.pieces], unk_id=UNK_ID, byte_fallback=m.byte_fallback)
    else:
        vocab = {p: i for i, (p, _, _) in enumerate(m.pieces)}
        model = models.BPE(
            vocab,
            _bpe_merges(m),
            unk_token=m.pieces[UNK_ID][0],
            fuse_unk=True,
            byte_fallback=m.byte_fallback,
        )
    tok = HFTokenizer(model)
    norm = [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if m.precompiled_charsmap:
        norm.insert(0, normalizers.Precompiled(m.precompiled_charsmap))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    steps = [decoders.Replace("▁", " ")]
    if m.byte_fallback:
        steps.append(decoders.ByteFallback())
    tok.decoder = decoders.Sequence([*steps, decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)])
    specials = [m.pieces[i][0] for i in (PAD_ID, BOS_ID, EOS_ID, UNK_ID)]
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False) for p in specials])
    return tok


def _bpe_merges(m: SpmModel) -> list[tuple[str, str]]:
    """sentencepiece BPE's merges as ``tokenizers`` wants them: every split of a piece into two
    pieces, ranked by the merged piece's score (higher first: sentencepiece merges by score)."""
    vocab = {p: i for i, (p, _, k) in enumerate(m.pieces) if k in (NORMAL, UNUSED)}
    merges = []
    for piece, score, kind in m.pieces:
        if kind != NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((score, vocab[left], vocab[right], left, right))
    merges.sort(key=lambda x: (-x[0], x[1], x[2]))
    return [(left, right) for _, _, _, left, right in merges]


def tokenizer_mismatches(hf_tokenizer, tokenizer: Tokenizer, sentences) -> list[str]:
    """The sentences that ``hf_tokenizer`` (a ``tokenizers.Tokenizer``) cuts into other ids than
    ``tokenizer``, or decodes to other text; empty when they agree on every one."""
    bad = []
    for s in sentences:
        ids = tokenizer.encode(s)
        got = hf_tokenizer.encode(s, add_special_tokens=False).ids
        if got != ids or hf_tokenizer.decode(got, skip_special_tokens=True) != tokenizer.decode(ids):
            bad.append(s)
    return bad
