"""``analyse(model, request) -> Analysis``: the one function every front end calls to look inside a
translator, a captioner or a decoder-only model's continuation (the CLI, the server's fast lane and its
worker processes, the notebook).

The request's method name is canonicalised and checked here, once (:func:`check_method`); what is computed
is a typed record (:mod:`.analysis`) of tensors and plain values, which the server's JSON
(:mod:`attnkit.explorer.payload`) and the CLI's output are built from.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import InputError
from .analysis import CaptionAnalysis, GenerationAnalysis, GuidedLinks, LMViewAnalysis, TranslationAnalysis
from .model import Model
from .requests import CaptionRequest, GenerationRequest, LMViewRequest, RepeatedRequest, TranslationRequest

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["analyse", "check_method", "gold_for", "guided_links"]

Progress = Callable[[float], None]


def check_method(model, method: str, who: str) -> str:
    """``method``'s registry name if ``model`` (a :class:`Model` or the wrapper it holds) has it, else
    :class:`attnkit.attribution.UnknownMethodError` (an unknown name, or one ``who`` lacks), so a server can
    refuse it before queueing any work."""
    from ..attribution import UnknownMethodError, canonical_method, methods_for

    impl = model.impl if isinstance(model, Model) else model
    method = canonical_method(method)
    have = methods_for(impl)
    if method not in have:
        reason = _refusal(impl, method)
        why = f" ({method} {reason})" if reason else ""
        raise UnknownMethodError(f"{who} has no {method}{why}; it has: {', '.join(have)}")
    return method


def _refusal(impl, method: str) -> str | None:
    """Why a translator lacks ``method``, as the method registry says it: the model family's own line on a
    decomposition (``is not defined for t5 models ...``), or what the method needs; None otherwise."""
    from ..attribution import METHODS
    from ..attribution.trace import decomposition_refusal
    from ..models.captioner import ShowAttendTell

    m = getattr(impl, "model", impl)
    meth = METHODS[method]
    if isinstance(m, ShowAttendTell) or meth.translation is None or meth.applies(m):
        return None
    reason = decomposition_refusal(m)
    if reason:
        return f"is {reason}"
    return f"needs {meth.requirement}" if meth.requirement else None


def analyse(
    model: Model,
    request: TranslationRequest | CaptionRequest | GenerationRequest | LMViewRequest | RepeatedRequest,
    progress: Progress | None = None,
    *,
    search: dict | None = None,
    forced=None,
    on_layer=None,
) -> TranslationAnalysis | CaptionAnalysis | GenerationAnalysis | LMViewAnalysis:
    """Run ``request`` on ``model`` (a :class:`Model` holding a translator, a captioner, or a decoder-only
    model for a :class:`GenerationRequest`) and return what was computed. ``progress(fraction)`` is passed to a gradient method (it calls it as it goes, and may raise to
    stop). Translations only: ``search`` is a search's output for the source already made
    (``Translator.translate``'s item, e.g. in a batch with others) and ``forced`` its forced decoding
    (``Translator.attention_batch``'s item). The routes view of an :class:`LMViewRequest` only: ``on_layer(part)``
    gets each layer's part of the graph as JSON as soon as it is built (:func:`.lm_view.analyse_lm_view`)."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be an attnkit.service.Model (open_model's), got {type(model).__name__}")
    if isinstance(request, TranslationRequest):
        return _translation(model, request, progress, search, forced)
    if isinstance(request, CaptionRequest):
        return _caption(model, request, progress)
    if isinstance(request, GenerationRequest):
        return _generation(model, request, progress)
    if isinstance(request, LMViewRequest):
        from .lm_view import analyse_lm_view

        return analyse_lm_view(model, request, progress, on_layer)
    if isinstance(request, RepeatedRequest):
        from .repeated import analyse_repeated

        return analyse_repeated(model, request)
    raise TypeError(
        "request must be a TranslationRequest, CaptionRequest, GenerationRequest, LMViewRequest or RepeatedRequest, "
        f"got {type(request).__name__}"
    )


def _generation(model: Model, req: GenerationRequest, progress) -> GenerationAnalysis:
    """The tokens ``req`` asks for (a greedy or sampled continuation of ``req.text``, or the text itself,
    forced), the last layer's head-mean attention over them, and the method's attribution of the same
    tokens (one generation for both)."""
    import secrets

    from ..attribution import UnknownMethodError, explain_generation
    from ..attribution.generation import LM_VIEWS, canonical_generation_method, row_methods

    sa = model.impl
    if not getattr(sa, "can_generate", False):
        raise InputError(f"{model.label} does not write text (an encoder-only model): ask for its self-attention")
    method = None if req.method is None else canonical_generation_method(req.method)
    if method in LM_VIEWS:
        raise InputError(f"{method} is a view of one prediction: ask for it with an LMViewRequest")
    if method is not None and method not in row_methods():
        raise UnknownMethodError(f"{model.label} has no {method}; it has: {', '.join(row_methods())}")
    if req.contrast is not None:  # a foil that is not one token is refused before any work
        from ..attribution.generation import contrast_token

        contrast_token(sa, req.contrast)
    t0 = time.perf_counter()
    seed = None
    if req.mode == "forced":
        common: dict = dict(forced=True)
    else:
        if req.mode == "sample":
            seed = req.seed if req.seed is not None else secrets.randbelow(2**31)  # reported, so it can be redone
            continuation = sa.sample(
                req.text, max_new_tokens=req.max_new_tokens, temperature=req.temperature, top_k=req.top_k, seed=seed
            )
        else:
            continuation = sa.generate(req.text, max_new_tokens=req.max_new_tokens)  # (ids, prompt length)
        common = dict(max_new_tokens=req.max_new_tokens, continuation=continuation)
    decoding = {"mode": req.mode}
    if req.mode == "sample":
        decoding.update(temperature=req.temperature, top_k=req.top_k, seed=seed)
    from ..attribution import gradients
    from ..hf.capture import UntraceableModelError

    try:
        att = explain_generation(sa, req.text, method="attention", **common)
    except UntraceableModelError:
        if method not in gradients.GRADIENT_METHODS:
            raise
        att = None  # attention it cannot read; the gradient methods need none
    chosen = None
    if method == "attention" and req.layer is None and req.head is None:
        chosen = att
    elif method in ("attention", "rollout"):
        chosen = explain_generation(
            sa, req.text, method=method, layer=req.layer, head=req.head, batch=req.batch, **common
        )
    elif method is not None:
        steps = req.steps if method == "integrated_gradients" else None
        chosen = explain_generation(
            sa,
            req.text,
            method=method,
            progress=progress,
            steps=steps,
            batch=req.batch,
            contrast=req.contrast,
            layer=req.layer,
            head=req.head,
            **common,
        )
    for a in {id(att): att, id(chosen): chosen}.values():
        if a is not None:
            a.extra["decoding"] = decoding
    scores = (chosen or att).extra["step_scores"]
    return GenerationAnalysis(
        model=model.label,
        kind=sa.family,
        request=req,
        text=req.text,
        continuation=(att or chosen).extra["translation"],
        attention=att,
        attribution=chosen,
        spec=model.spec,
        seconds=time.perf_counter() - t0,
        mode=req.mode,
        seed=seed,
        step_scores=scores,
    )


def _translation(model: Model, req: TranslationRequest, progress, search, forced) -> TranslationAnalysis:
    """The request's record, built once (:class:`~attnkit.attribution.forced.ForcedTranslation`): the source
    tokenised once (or its ids taken from the request), the target searched from those ids (or given), one
    forced pass for the maps (or the lane's, ``forced``), and every view and the method read that record."""
    from ..attribution.forced import forced_attention, forced_translation

    t0 = time.perf_counter()
    tr = model.impl
    if req.method is not None:
        req = dataclasses.replace(req, method=check_method(tr, req.method, model.label or "this model"))
    src_ids = None  # the lane's forced decoding without a method needs no ids: its pieces are read from it
    if forced is None or req.method is not None:
        src_ids = list(req.source_ids) if req.source_ids is not None else tr.encode_sources([req.source])[0]
    if req.target is not None:
        target = req.target.strip()
        tokens = list(req.target_ids) if req.target_ids is not None else tr.tokenizer.encode(target)
        search = {"tokens": tokens, "translation": target}
    elif search is None:
        by_ids = getattr(tr, "translate_ids", None)  # the ids read once; an engine without it reads the text
        search = (
            by_ids([src_ids], beam_size=req.beam)[0] if by_ids else tr.translate([req.source], beam_size=req.beam)[0]
        )
    tokens = search["tokens"]
    src_tok = getattr(tr, "src_tokenizer", tr.tokenizer)
    ta = forced if forced is not None or not tokens else forced_attention(tr, req.source, src_ids, tokens)
    out = TranslationAnalysis(
        model=model.label,
        kind=getattr(tr.model, "model_type", "?"),
        request=req,
        source=req.source,
        translation=search["translation"],
        source_pieces=[src_tok.id_to_piece(t) for t in src_ids] if src_ids is not None else list(ta.source_pieces),
        target_pieces=[tr.tokenizer.id_to_piece(t) for t in tokens],
        beam=req.beam,
        forced=req.target is not None,
        src_lang=getattr(tr, "src_lang", "es"),
        tgt_lang=getattr(tr, "tgt_lang", "en"),
        gold=gold_for(req.source, req.target) if req.target is not None else None,
        note=getattr(tr, "note", None) or None,  # an engine without some views (CTranslate2: no per-head maps)
        spec=model.spec,
    )
    if tokens:  # an empty translation has nothing to align
        cross = ta.maps.cross
        if req.heads and req.layer is not None and cross is not None and req.layer > cross.shape[0]:
            layers = cross.shape[0]
            raise InputError(f"layer must be in 1..{layers} (this model has {layers} layers), got {req.layer}")
        out.attention = ta
        if req.method is not None:
            from ..attribution import explain

            pair = forced_translation(tr, req.source, tokens, src_ids=src_ids)
            pair.attention = ta  # the method reads this pass's maps instead of running the model again
            out.attribution = explain(
                tr, req.source, method=req.method, pair=pair, progress=progress, **req.options.given()
            )
            out.attribution.extra["forced"] = req.target is not None
        if ta.maps.alignment is not None:
            out.guided = guided_links(tr, ta)
    out.seconds = time.perf_counter() - t0
    return out


def _caption(model: Model, req: CaptionRequest, progress) -> CaptionAnalysis:
    from ..tasks.captioning import attention_mass_in_box, words_to_items

    t0 = time.perf_counter()
    cm = model.impl
    from ..attribution import explain_caption, forced_caption

    if req.method is not None:
        req = dataclasses.replace(req, method=check_method(cm, req.method, "a captioner"))
    pair = None
    if req.target is not None:  # forced: α_t of each word of the given caption, read under teacher forcing
        pair = forced_caption(cm, req.image, req.target.strip())
        alpha = explain_caption(cm, req.image, method="attention", pair=pair).scores  # (T, h·w)
        r = {"caption": " ".join(pair.words), "words": pair.words, "tokens": pair.tokens.tolist(), "attention": alpha}
    else:
        r = cm.caption(req.image.unsqueeze(0), beam_size=req.beam)[0]
    h, w = cm.model.grid_shape
    out = CaptionAnalysis(
        model=model.label,
        kind=getattr(cm.model, "model_type", "?"),
        request=req,
        caption=r["caption"],
        words=list(r["words"]),
        tokens=r["tokens"],
        attention=r["attention"].float(),  # (T, h·w)
        grid=(h, w),
        canvas=cm.canvas,
        image=req.image,
        attention_type=cm.config.attention,
        spec=model.spec,
    )
    measured: Tensor = out.attention
    if req.method is not None and out.words:
        pair = pair or forced_caption(cm, req.image, r["tokens"])
        out.attribution = explain_caption(
            cm, req.image, method=req.method, pair=pair, progress=progress, **req.options.given()
        )
        measured = out.attribution.scores  # (T, h·w)
    scene = req.scene
    if scene is not None:
        items = words_to_items(out.words, scene["classes"].tolist(), scene["places"].tolist())
        boxes = scene["boxes"].numpy()
        correct: list[float | None] = [None] * len(items)
        named = [t for t, k in enumerate(items) if k >= 0]
        if named:
            mass = attention_mass_in_box(measured[named].numpy(), (h, w), cm.canvas, boxes[[items[t] for t in named]])
            for t, v in zip(named, mass):
                correct[t] = round(float(v), 4)
        out.boxes, out.word_items, out.correctness = boxes.tolist(), items, correct
        out.scene = {"index": scene["index"], "reference": scene["caption"]}
    out.seconds = time.perf_counter() - t0
    return out


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


def guided_links(translator, ta) -> GuidedLinks | None:
    """For a model trained with guided alignment (Garg et al. 2019): the links of its guided head, the
    reading that learnt to align, read from that head's word matrix ``(Tw, Sw)`` as ``attnkit align`` reads
    it (both ways, by intersection: :mod:`attnkit.tasks.translation.alignment`). None for any other model.

    ``ta``: the pair's forced decoding; its ``guided`` rows (:meth:`Translator.attention_batch` fills them in
    the same pass as the maps) are used when it has them, else ``attnkit align``'s aligner reads the head in a
    pass of its own (an engine whose forced decoding does not fill them)."""
    from ..alignment import word_attention, words_from_pieces
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
    return GuidedLinks(
        links, wa, f"the guided head (layer {r.layer}, head {r.head})", f"argmax both ways, {r.both_ways}"
    )
