"""Forced pairs: the input and the output an attribution explains, fixed before any method runs.

Every attribution method scores one output piece at a time under *forced decoding*: the decoder is fed
the given (or the model's own) output, so each method explains the same target. A
:class:`ForcedTranslation` holds a source and its target as token ids and pieces; a
:class:`ForcedCaption` holds an image and its caption.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError

__all__ = ["ForcedCaption", "ForcedTranslation", "forced_caption", "forced_translation"]


@dataclass
class ForcedTranslation:
    """One source and the target the model is forced to write: ids ``src (S,)``, ``tgt (T,)`` (the
    output pieces, no bos/eos) and ``tgt_in (T,)`` (bos + tgt[:-1]), with their pieces."""

    src: Tensor
    tgt: Tensor
    tgt_in: Tensor
    source_pieces: list[str]
    target_pieces: list[str]


def forced_translation(
    translator, source: str, target: str | list[int] | None = None, *, beam: int = 5
) -> ForcedTranslation:
    """``source`` and ``target`` (English text, tokenised here, or the token ids of a translation) as a
    forced pair; without ``target`` the model's own translation (beam search, ``beam``) is the target."""
    tok = translator.tokenizer
    src_tok = getattr(translator, "src_tokenizer", None) or tok
    src_ids = translator.encode_sources([source])[0]
    if target is None:
        tgt_ids = list(translator.translate([source], beam_size=beam)[0]["tokens"])
    elif isinstance(target, str):
        if not target.strip():
            raise InputError("target is empty: give the English text to explain, or leave it out to translate")
        tgt_ids = tok.encode(target.strip())
    else:
        tgt_ids = [int(t) for t in target]
    if not tgt_ids:
        raise InputError("the target has no tokens: there is no output piece to explain")
    device = translator.device
    tgt = torch.tensor(tgt_ids, dtype=torch.long, device=device)
    return ForcedTranslation(
        src=torch.tensor(src_ids, dtype=torch.long, device=device),
        tgt=tgt,
        tgt_in=torch.cat([tgt.new_tensor([tok.bos_id]), tgt[:-1]]),
        source_pieces=[src_tok.id_to_piece(t) for t in src_ids],  # the source's own vocabulary, where it has one
        target_pieces=[tok.id_to_piece(t) for t in tgt_ids],
    )


@dataclass
class ForcedCaption:
    """One image ``(1, C, C)`` and the caption the captioner is forced to write: ``tokens (T,)`` (no
    bos/eos), ``tokens_in (T,)`` (bos + tokens[:-1]) and the words."""

    image: Tensor
    tokens: Tensor
    tokens_in: Tensor
    words: list[str]


def forced_caption(captioner, image: Tensor, caption: str | list[int] | None = None, *, beam: int = 1) -> ForcedCaption:
    """``image (1, C, C)`` in [0, 1] and ``caption`` (words of the captioner's vocabulary, or their ids)
    as a forced pair; without ``caption`` the model's own caption (``beam``) is used."""
    c = captioner.canvas
    if not isinstance(image, Tensor) or tuple(image.shape) != (1, c, c):
        raise InputError(f"image must be a (1, {c}, {c}) tensor, got {tuple(getattr(image, 'shape', ()))}")
    if caption is None:
        ids = list(captioner.caption(image.unsqueeze(0), beam_size=beam)[0]["tokens"])
    elif not isinstance(caption, str):
        ids = [int(i) for i in caption]
    else:
        words = caption.split()
        unknown = [w for w in words if w not in captioner.vocab.stoi]
        if unknown:
            raise InputError(f"caption words not in the captioner's vocabulary: {', '.join(unknown)}")
        ids = [captioner.vocab.stoi[w] for w in words]
    if not ids:
        raise InputError("the caption has no words: there is nothing to explain")
    first = next(captioner.model.parameters())
    tokens = torch.tensor(ids, dtype=torch.long, device=first.device)
    return ForcedCaption(
        image=image.to(device=first.device, dtype=first.dtype),
        tokens=tokens,
        tokens_in=torch.cat([tokens.new_tensor([captioner.config.bos_id]), tokens[:-1]]),
        words=[captioner.vocab.itos[i] for i in ids],
    )
