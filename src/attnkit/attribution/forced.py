"""Forced pairs: the input and the output an attribution explains, fixed before any method runs.

Every attribution method scores one output piece at a time under *forced decoding*: the decoder is fed
the given (or the model's own) output, so each method explains the same target. A
:class:`ForcedTranslation` holds a source and its target as token ids and pieces; a
:class:`ForcedCaption` holds an image and its caption.

A translation's pair is also the record of one request, built once and handed to every view and method:
the source tokenised once (:func:`forced_translation` takes ids already made), the forced pass's maps
(:func:`forced_attention`, read back by :func:`forced_maps`) and, for a method that decomposes the
blocks, the trace (:func:`forced_trace`, made on first use and kept), so one request runs one forced pass
however many views and methods read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from .trace import trace_model

__all__ = [
    "ForcedCaption",
    "ForcedTranslation",
    "forced_attention",
    "forced_caption",
    "forced_maps",
    "forced_trace",
    "forced_translation",
]


@dataclass
class ForcedTranslation:
    """One source and the target the model is forced to write: ids ``src (S,)``, ``tgt (T,)`` (the
    output pieces, no bos/eos) and ``tgt_in (T,)`` (bos + tgt[:-1]), with their pieces.

    ``attention``: the pair's forced decoding (:class:`attnkit.tasks.translation.TranslationAttention`,
    every map of one teacher-forced pass) once made (:func:`forced_attention`), which the methods reading
    maps read instead of running the model again; ``traced``: the model, its weights' in-place version and its
    :func:`~attnkit.attribution.trace.trace_model` of the pair, once a method asked for it."""

    src: Tensor
    tgt: Tensor
    tgt_in: Tensor
    source_pieces: list[str]
    target_pieces: list[str]
    attention: Any = None
    traced: tuple | None = field(default=None, repr=False, compare=False)


def forced_translation(
    translator,
    source: str,
    target: str | list[int] | None = None,
    *,
    beam: int = 5,
    src_ids: Sequence[int] | None = None,
) -> ForcedTranslation:
    """``source`` and ``target`` (English text, tokenised here, or the token ids of a translation) as a
    forced pair; without ``target`` the model's own translation (beam search, ``beam``) is the target.
    ``src_ids``: the source's ids as ``translator.encode_sources`` gives them, when the caller holds them
    (the source is then not tokenised again); the search reads the same ids."""
    tok = translator.tokenizer
    src_tok = getattr(translator, "src_tokenizer", None) or tok
    src_ids = [int(t) for t in src_ids] if src_ids is not None else translator.encode_sources([source])[0]
    if target is None:
        by_ids = getattr(translator, "translate_ids", None)  # an engine without it tokenises the source itself
        found = (
            by_ids([src_ids], beam_size=beam) if by_ids is not None else translator.translate([source], beam_size=beam)
        )
        tgt_ids = list(found[0]["tokens"])
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


def forced_attention(translator, source: str, src_ids: Sequence[int], tgt_ids: Sequence[int]):
    """The forced decoding of ``tgt_ids`` after ``src_ids`` (``source``'s ids): one teacher-forced pass
    (:meth:`attnkit.tasks.translation.Translator.attention_ids`); an engine that takes only text (the
    CTranslate2 explorer's) tokenises ``source`` in its own ``attention``."""
    by_ids = getattr(translator, "attention_ids", None)
    if by_ids is None:
        return translator.attention(source, list(tgt_ids))
    return by_ids([list(src_ids)], [list(tgt_ids)])[0]


def forced_maps(model, pair: ForcedTranslation):
    """The :class:`attnkit.models.AttentionMaps` of ``pair`` (batch dimension removed, ``alignment (T, S)``,
    ``cross (L, H, T, S)`` ...): its forced pass's (``pair.attention``) when made, else one pass of ``model``
    here."""
    if pair.attention is not None:
        return pair.attention.maps
    maps = model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    return maps.map_tensors(lambda t: t[0])


def _weights_version(model) -> tuple[int, ...]:
    """The in-place version of each of ``model``'s parameters: a parameter written in place (a sanity check
    re-drawing a layer of the same model) has another, so a trace of the old weights is not read again."""
    return tuple(p._version for p in model.parameters())


def forced_trace(model, pair: ForcedTranslation) -> tuple:
    """``(trace, rows, cols)`` of ``model`` on ``pair`` (:func:`~attnkit.attribution.trace.trace_model`),
    made on the first call and kept on the pair, so every method decomposing the blocks reads one trace;
    made again for another model, or the same model once its weights were written in place."""
    version = _weights_version(model)
    if pair.traced is None or pair.traced[0] is not model or pair.traced[1] != version:
        pair.traced = (model, version, trace_model(model, pair.src, pair.tgt_in))
    return pair.traced[2]


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
