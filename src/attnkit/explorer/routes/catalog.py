"""What is loaded and what to pick from: ``/api/models``, ``/api/verses``, ``/api/scenes``, ``/api/limits``."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from .. import schema
from ..payload import image_data_url
from ..state import explorer, pick

__all__ = ["held_out_verses", "router", "scenes_of"]

router = APIRouter()


def held_out_verses(home, corpus: str = "bible") -> list[dict]:
    """Test sentences of ``corpus`` to pick from, a spread of lengths; for the Bible the scored gold
    verses first (they have hand-made links). Empty when the corpus is not prepared on this machine."""
    from ...data.corpus import BIBLE, UnknownCorpusError, open_corpus

    try:
        test = open_corpus(corpus, home).pairs("test")
    except UnknownCorpusError:
        return []
    gold = []
    if corpus == BIBLE:
        from ...alignment.gold import DEV_VERSES, load_gold

        gold = [
            {"ref": v.ref, "source": " ".join(v.source), "reference": " ".join(v.target), "gold": True}
            for v in load_gold()[DEV_VERSES:]
        ]
    picks = sorted(test[:: max(1, len(test) // 120)], key=lambda p: len(p.src.split()))
    return gold + [{"ref": p.ref, "source": p.src, "reference": p.tgt, "gold": False} for p in picks]


def scenes_of(ex):
    """The held-out test scenes, prepared once (one thread prepares them; the others wait)."""
    with ex.lock:
        if "scenes" not in ex.cache:
            from ...data.datasets.scenes import load_scenes

            caps = ex.models.captioners
            canvas = next(iter(caps.values())).canvas if caps else 64
            ex.cache["scenes"] = load_scenes("test", ex.home, canvas=canvas)
    return ex.cache["scenes"]


@router.get("/api/models", response_model=schema.ModelList)
def list_models(request: Request):
    """The loaded models: name, task, kind, config, test scores, and whether they have attention."""
    return schema.ModelList(models=list(explorer(request).models.info.values()))


@router.get("/api/limits")
def limits(request: Request) -> dict:
    """The limits in force (every one an option of ``attnkit serve``), and whether a token is needed."""
    ex = explorer(request)
    shown = {f.name: getattr(ex.options, f.name) for f in dataclasses.fields(ex.options)}
    return {k: v for k, v in shown.items() if k not in ("token", "host", "port", "allow_host")} | {
        "token_required": ex.token is not None
    }


@router.get("/api/verses", response_model=schema.VerseList)
def verses(request: Request, limit: int = Query(200, ge=1, le=300), model: str | None = None):
    """Held-out test sentences (a spread of lengths) of ``model``'s corpus (default: the first
    translation model's) with their reference translations; empty when that corpus is not here."""
    ex = explorer(request)
    if ex.given_verses is not None:
        return schema.VerseList(verses=ex.given_verses[:limit])
    tr = pick(ex.models.translators, model, "translation")[1] if ex.models.translators else None
    corpus = tr.corpus if tr is not None else "bible"
    with ex.lock:
        key = f"verses:{corpus}"
        if key not in ex.cache:
            ex.cache[key] = held_out_verses(ex.home, corpus)
    found = ex.cache[key][:limit]
    if tr is not None and found and _turned_around(tr, corpus, ex.home):
        # a model of the corpus's other direction (transformer-en-es on the Bible): its sources are the
        # references (the gold verses' links are drawn turned around: payload.gold_for)
        found = [{**v, "source": v["reference"], "reference": v["source"]} for v in found]
    return schema.VerseList(verses=found)


def _turned_around(tr, corpus: str, home) -> bool:
    """Whether ``tr`` translates ``corpus``'s target language into its source language."""
    from ...data.corpus import UnknownCorpusError, open_corpus

    try:
        c = open_corpus(corpus, home)
    except UnknownCorpusError:
        return False
    return c.turned_around(tr.src_lang, tr.tgt_lang)


@router.get("/api/scenes", response_model=schema.SceneList)
async def scenes(request: Request, limit: int = Query(12, ge=1, le=48)):
    """Held-out test scenes to caption: index, reference caption and a thumbnail."""
    data = await run_in_threadpool(scenes_of, explorer(request))
    return schema.SceneList(
        scenes=[
            schema.SceneThumb(index=i, caption=data[i]["caption"], image=image_data_url(data[i]["image"]))
            for i in range(min(limit, len(data)))
        ]
    )
