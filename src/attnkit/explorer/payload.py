"""The explorer's one JSON format, built: everything a page needs to show where a model looks.

The server's ``/api/translate`` and ``/api/caption`` return these objects, and ``--html`` exports
embed the very same ones; :mod:`attnkit.explorer.schema` defines them field by field
(:class:`~attnkit.explorer.schema.Translation`, :class:`~attnkit.explorer.schema.Caption`). Every
matrix is a list of rows (row = target position), rounded to 5 decimals. A translation payload is
built from the translation wrapper's interface only (:meth:`attnkit.tasks.translation.Translator.attention`
→ :class:`attnkit.models.AttentionMaps`), so it never asks what kind of model it has: it shows the
maps that are there.
"""

from __future__ import annotations

import base64
import io

import torch
from torch import Tensor

from ..alignment import (
    attention_diagnostics,
    attention_links,
    attention_rollout,
    column_links,
    grow_diag_final_and,
    word_attention,
    words_from_pieces,
)
from ..errors import InputError

__all__ = [
    "WORD_RULE",
    "AnswerTooLarge",
    "caption_payload",
    "check_method",
    "head_numbers",
    "image_data_url",
    "method_info",
    "translation_payload",
]


class AnswerTooLarge(InputError):
    """The per-head maps asked for hold more numbers than the server sends in one answer (HTTP 413)."""

    status = 413


WORD_RULE = (
    "word attention = the mean over a target word's pieces of the sum over a source word's pieces "
    "(each row still sums to 1)"
)


LINKS_RULE = (
    "links read from this matrix both ways: each target word's argmax source word and each source word's "
    "argmax target word, combined by grow-diag-final-and (`attnkit align --symmetrize grow-diag-final-and`)"
)


#: How the page names :data:`LINKS_RULE` (a guided head's links are named by its reading's rule, :func:`guided_links`).
WORD_LINKS_RULE = "argmax both ways, grow-diag-final-and"


def word_links(word_matrix: Tensor) -> list[list[int]]:
    """``[source word, target word]`` links read from a word matrix ``(Tw, Sw)`` by :data:`LINKS_RULE`."""
    return sorted([i, j] for i, j in grow_diag_final_and(attention_links(word_matrix), column_links(word_matrix)))


def _rows(t: Tensor | None, digits: int = 5):
    if t is None:
        return None
    return torch.round(t.double(), decimals=digits).tolist()  # float64: 0.66881, not 0.6688100099563599


def gold_for(source: str, target: str) -> dict | None:
    """The hand-made gold links of this verse pair, if it is one of the gold verses (word indices); a pair
    read the other way (English → Spanish) gets the verse's links turned around."""
    from ..alignment.gold import load_gold

    key = (" ".join(source.split()), " ".join(target.split()))
    for v in _gold_verses(load_gold):
        pair = (" ".join(v.source), " ".join(v.target))
        if pair == key:
            return v.to_dict()
        if pair[::-1] == key:
            return v.turned_around().to_dict()
    return None


_GOLD_CACHE: list = []


def _gold_verses(loader):
    if not _GOLD_CACHE:
        _GOLD_CACHE.extend(loader())
    return _GOLD_CACHE


def method_info(name: str) -> dict:
    """A registered attribution method as :class:`~attnkit.explorer.schema.MethodInfo`."""
    from ..attribution import METHODS

    m = METHODS[name]
    return {"name": m.name, "title": m.title, "reference": m.reference, "needs_gradients": m.needs_gradients}


def check_method(model, method: str, who: str) -> str:
    """``method``'s registry name if ``model`` has it, else :class:`attnkit.attribution.UnknownMethodError`
    (an unknown name, or one ``who`` lacks), so a server can refuse it before queueing any work."""
    from ..attribution import UnknownMethodError, canonical_method, methods_for

    method = canonical_method(method)
    if method not in methods_for(model):
        raise UnknownMethodError(f"{who} has no {method}; it has: {', '.join(methods_for(model))}")
    return method


def _attribution_view(att) -> dict:
    """The fields every attribution view has (:class:`~attnkit.explorer.schema.Attribution`)."""
    info = method_info(att.method)
    return {
        **{k: v for k, v in info.items() if k != "name"},
        "method": att.method,
        "seconds": round(att.seconds, 3),
        "params": att.params,
    }


def translation_payload(
    translator,
    source: str,
    *,
    beam: int = 5,
    heads: bool = False,
    model: str = "",
    result: dict | None = None,
    forced=None,
    target: str | None = None,
    method: str | None = None,
    progress=None,
    layer: int | None = None,
    max_numbers: int | None = None,
) -> dict:
    """Translate ``source`` with ``beam`` and describe every attention the model has (see the module
    docstring). ``result``: a translation already made (``Translator.translate`` output) to reuse, and
    ``forced`` its forced decoding (``Translator.attention_batch``), made with others in one pass.
    ``target``: target-language text to force instead of searching (teacher forcing; e.g. the reference), which
    also adds ``"gold"`` (the gold links, word indices) when the pair is one of the gold verses.
    ``method``: an attribution method (:mod:`attnkit.attribution`) whose view fills ``"attribution"``;
    ``progress(fraction)`` is passed to it (a gradient method calls it as it goes, and may raise to stop).
    ``layer``/``max_numbers``: see :func:`add_attention_fields`."""
    if method is not None:
        method = check_method(translator, method, model or "this model")
    if target is not None:
        result = {"tokens": translator.tokenizer.encode(target.strip()), "translation": target.strip()}
    elif result is None:
        result = translator.translate([source], beam_size=beam)[0]
    tokens = result["tokens"]
    src_tok = getattr(translator, "src_tokenizer", translator.tokenizer)
    src_pieces = [src_tok.id_to_piece(t) for t in translator.encode_sources([source])[0]]
    out = {
        "model": model,
        "kind": getattr(translator.model, "model_type", "?"),
        "src_lang": getattr(translator, "src_lang", "es"),
        "tgt_lang": getattr(translator, "tgt_lang", "en"),
        "source": source,
        "translation": result["translation"],
        "beam": beam,
        "source_pieces": src_pieces,
        "target_pieces": [translator.tokenizer.id_to_piece(t) for t in tokens],
        "has_attention": False,
        "attention": None,
        "words": {"source": words_from_pieces(src_pieces), "target": [], "attention": None, "rule": WORD_RULE},
        "diagnostics": None,
        "steps": None,
        "heads": None,
        "forced": target is not None,
        "gold": gold_for(source, target) if target is not None else None,
        "attribution": None,
    }
    if getattr(translator, "note", None):  # an engine without some of the views (CTranslate2: no per-head maps)
        out["note"] = translator.note
    if not tokens:  # an empty translation: nothing to align
        return out
    ta = forced if forced is not None else translator.attention(source, tokens)  # forced decoding of the output
    if method is not None:
        from ..attribution import explain, forced_translation

        att = explain(
            translator, source, method=method, pair=forced_translation(translator, source, tokens), progress=progress
        )
        out["attribution"] = attribution_fields(att)
    add_attention_fields(out, ta, heads=heads, layer=layer, max_numbers=max_numbers)
    if out["words"]["attention"] is not None:
        guided = guided_links(translator, ta)
        if guided is not None:
            links, matrix, name, rule = guided
            out["words"].update(links=links, links_matrix=_rows(matrix), links_from=name, links_rule=rule)
    return out


def guided_links(translator, ta) -> tuple[list, Tensor, str, str] | None:
    """For a model trained with guided alignment (Garg et al. 2019): the links of its guided head, the
    reading that learnt to align, read from that head's word matrix ``(Tw, Sw)`` as ``attnkit align``
    reads it (both ways, by intersection: :mod:`attnkit.tasks.translation.alignment`); the matrix; what
    it is; and how the links were read, in words. None for any other model.

    ``ta``: the pair's forced decoding; its ``guided`` rows (:meth:`Translator.attention_batch` fills them
    in the same pass as the maps) are used when it has them, else ``attnkit align``'s aligner reads the
    head in a pass of its own (an engine whose forced decoding does not fill them)."""
    from ..tasks.translation.alignment import AttentionReading, ModelAligner, has_guided_head

    if not hasattr(translator, "model") or not has_guided_head(translator):
        return None
    aligner = ModelAligner(translator, AttentionReading("guided"))
    r = aligner.reading
    if ta.guided is not None:
        wa = word_attention(ta.guided, ta.source_pieces, ta.target_pieces)  # (Tw, Sw)
    else:
        words = (words_from_pieces(ta.source_pieces), words_from_pieces(ta.target_pieces))
        wa = aligner.word_attention_batch([words])[0]  # (Tw, Sw), None: source too long
        if wa is None:
            return None
    links = sorted([i, j] for i, j in r.links(wa))
    return links, wa, f"the guided head (layer {r.layer}, head {r.head})", f"argmax both ways, {r.both_ways}"


def head_numbers(maps, layer: int | None = None) -> int:
    """How many numbers the per-head maps of ``maps`` (one ``layer``, or all) hold: Σ L·H·rows·columns."""
    total = 0
    for t in (maps.enc_self, maps.dec_self, maps.cross):
        if t is not None:
            total += t[layer : layer + 1].numel() if layer is not None else t.numel()
    if maps.enc_self is not None and layer is None:
        total += maps.enc_self.shape[-1] ** 2  # the rollout, S × S
    return total


def add_attention_fields(
    out: dict, ta, *, heads: bool = False, layer: int | None = None, max_numbers: int | None = None
) -> dict:
    """Fill a translation payload's attention fields (``attention``, ``words.attention``, ``diagnostics``,
    ``steps``, ``heads``) from a :class:`attnkit.tasks.translation.TranslationAttention`; returns ``out``.

    ``heads``: also every layer's and head's maps, or only layer ``layer`` (0-based; the others are then
    empty lists and the rollout null), so a long sentence's maps can be fetched in pieces. With
    ``max_numbers``, maps holding more numbers than that raise :class:`AnswerTooLarge` before any is
    converted."""
    m = ta.maps
    out["words"]["target"] = words_from_pieces(ta.target_pieces)
    if m.alignment is None:
        return out
    out["has_attention"] = True
    out["attention"] = _rows(m.alignment)
    wa = word_attention(m.alignment, ta.source_pieces, ta.target_pieces)  # (Tw, Sw)
    out["words"]["attention"] = _rows(wa)
    # None: read from this matrix
    out["words"].update(links=word_links(wa), links_matrix=None, links_from=None, links_rule=WORD_LINKS_RULE)
    out["diagnostics"] = attention_diagnostics(m.alignment, ta.source_pieces)
    out["diagnostics"] = {
        k: (_rows(torch.tensor(v)) if isinstance(v, list) else v) for k, v in out["diagnostics"].items()
    }
    if m.scores is not None and m.context is not None:
        norms = m.annotations.norm(dim=-1) if m.annotations is not None else None  # (S,)
        out["steps"] = {
            "formula": m.score,
            "scores": _rows(m.scores.masked_fill(torch.isinf(m.scores), -1e9)),
            "weights": _rows(m.alignment),
            "context_norm": _rows(m.context.norm(dim=-1)),
            # ‖α_tj h_j‖ = α_tj ‖h_j‖: how much source piece j contributes to c_t
            "contributions": _rows(m.alignment * norms) if norms is not None else None,
        }
    if heads and m.cross is not None:
        layers = m.cross.shape[0]
        if layer is not None and not 0 <= layer < layers:
            raise InputError(f"layer must be in 0..{layers - 1} (this model has {layers} layers), got {layer}")
        n = head_numbers(m, layer)
        if max_numbers is not None and n > max_numbers:
            raise AnswerTooLarge(
                f"the per-head maps of this sentence hold {n} numbers; the limit of one answer is {max_numbers} "
                f'(--max-answer-numbers): ask for one layer at a time with "layer": 0..{layers - 1}'
            )
        pick = (lambda t: t) if layer is None else (lambda t: t[layer : layer + 1])
        out["heads"] = {
            "enc_self": _rows(pick(m.enc_self), 4) if m.enc_self is not None else None,
            "dec_self": _rows(pick(m.dec_self), 4) if m.dec_self is not None else None,
            "cross": _rows(pick(m.cross), 4),
            "rollout": _rows(attention_rollout(m.enc_self)) if m.enc_self is not None and layer is None else None,
            "layer": layer,
        }
    return out


def empty_translation(
    *,
    model: str,
    kind: str,
    source: str,
    translation: str,
    source_pieces,
    target_pieces,
    beam: int = 0,
    forced: bool = True,
) -> dict:
    """A translation payload with no attention yet (fill it with :func:`add_attention_fields` or an attribution)."""
    return {
        "model": model,
        "kind": kind,
        "source": source,
        "translation": translation,
        "beam": beam,
        "source_pieces": list(source_pieces),
        "target_pieces": list(target_pieces),
        "has_attention": False,
        "attention": None,
        "words": {
            "source": words_from_pieces(source_pieces),
            "target": words_from_pieces(target_pieces),
            "attention": None,
            "rule": WORD_RULE,
        },
        "diagnostics": None,
        "steps": None,
        "heads": None,
        "forced": forced,
        "gold": None,
        "attribution": None,
    }


def attribution_fields(att) -> dict:
    """An :class:`attnkit.attribution.Attribution` as the payload's ``attribution`` (translation) object."""
    words = att.word_scores()[2]  # (Tw, Sw)
    return {**_attribution_view(att), "scores": _rows(att.scores), "words": _rows(words), "links": word_links(words)}


def caption_attribution_fields(att) -> dict:
    """A captioner's :class:`attnkit.attribution.Attribution` as the caption payload's ``attribution``."""
    return {**_attribution_view(att), "maps": _rows(att.grid_scores())}


def image_data_url(image: Tensor) -> str:
    """A ``(1, H, W)`` image in [0, 1] as a PNG data URL (what the page draws the maps over)."""
    from PIL import Image

    arr = (image[0].clamp(0, 1) * 255).round().byte().cpu().numpy()
    buf = io.BytesIO()
    Image.fromarray(arr, mode="L").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def caption_payload(
    captioner,
    image: Tensor,
    *,
    model: str = "",
    beam: int = 1,
    scene: dict | None = None,
    method: str | None = None,
    progress=None,
) -> dict:
    """Caption ``image (1, C, C)`` and give each word's attention map over the grid; with a test
    ``scene`` (a :class:`attnkit.data.scenes.ScenesDataset` item) also its boxes and the
    attention correctness of each word that names an item (mass inside that item's box).
    ``method``: an attribution method whose maps fill ``"attribution"`` (correctness then measures them)."""
    from ..tasks.captioning import attention_mass_in_box, words_to_items

    if method is not None:
        method = check_method(captioner, method, "a captioner")

    r = captioner.caption(image.unsqueeze(0), beam_size=beam)[0]
    h, w = captioner.model.grid_shape
    att = r["attention"].float()  # (T, L)
    out = {
        "model": model,
        "kind": getattr(captioner.model, "model_type", "?"),
        "attention_type": captioner.config.attention,
        "caption": r["caption"],
        "words": r["words"],
        "grid": [h, w],
        "canvas": captioner.canvas,
        "attention": _rows(att.reshape(len(r["words"]), h, w)) if r["words"] else [],
        "image": image_data_url(image),
        "boxes": None,
        "word_items": None,
        "correctness": None,
        "scene": None,
        "attribution": None,
    }
    if method is not None and r["words"]:
        from ..attribution import explain_caption, forced_caption

        pair = forced_caption(captioner, image, r["tokens"])
        att = explain_caption(captioner, image, method=method, pair=pair, progress=progress)
        out["attribution"] = caption_attribution_fields(att)
        att_for_correctness = att.scores
    else:
        att_for_correctness = att
    if scene is not None:
        items = words_to_items(r["words"], scene["classes"].tolist(), scene["places"].tolist())
        boxes = scene["boxes"].numpy()
        correct: list[float | None] = [None] * len(items)
        named = [t for t, k in enumerate(items) if k >= 0]
        if named:
            mass = attention_mass_in_box(
                att_for_correctness[named].numpy(), (h, w), captioner.canvas, boxes[[items[t] for t in named]]
            )
            for t, v in zip(named, mass):
                correct[t] = round(float(v), 4)
        out.update(
            {
                "boxes": boxes.tolist(),
                "word_items": items,
                "correctness": correct,
                "scene": {"index": scene["index"], "reference": scene["caption"]},
            }
        )
    return out
