"""``attnkit serve``: the attention explorer, a local web app over every loaded model, and its JSON API.

The page (``static/``) uses only the API below; every script and style comes from the package, so
it works with no network. The JSON is one format (:mod:`attnkit.explorer.schema`, built by
:mod:`attnkit.explorer.payload`), the same that ``--html`` exports embed.

- ``GET  /api/models``     the loaded models: name, task, kind, config, test scores, has_attention
- ``GET  /api/verses``     held-out test sentences of a model's corpus to pick from (with their references)
- ``GET  /api/scenes``     held-out test scenes to pick from (with thumbnails)
- ``POST /api/translate``  ``{"text", "model", "beam", "heads", "target", "method", "job"}`` → a translation payload
                           (``method``: an attribution method, :mod:`attnkit.attribution`)
- ``GET  /api/progress/{job}``  how far a running attribution (``"job"`` in the request) has got
- ``POST /api/caption``    a multipart upload (field ``image``; form fields ``model``, ``beam``)
                           or ``{"scene": index, "model", "beam"}`` → a caption payload
- ``GET  /docs``           the OpenAPI docs (every answer's schema: :mod:`attnkit.explorer.schema`)

**Bad input** gets a 4xx with ``{"error": "..."}`` a person can read, never a traceback, and the
server keeps serving: empty text, text over the length limit, an unknown model, a scene index out
of range, a non-image upload, an upload over :data:`MAX_UPLOAD_BYTES`, malformed JSON.

**Concurrency.** Handlers are plain functions, so FastAPI runs requests concurrently in its thread
pool; the models are shared without a lock. That is safe because inference mutates nothing shared:
it runs under ``torch.no_grad`` in eval mode, and every request's decoder state and key/value caches
are objects of its own (torch's grad mode is per thread). A lock would only serialise requests
that can safely overlap. The caption endpoint reads its body asynchronously and then runs the
model in the same thread pool, so a caption never blocks the event loop.

**Uploads** are read into memory under :data:`MAX_UPLOAD_BYTES` (declared length checked first,
then counted as the body streams in, before any decoding) and never written to disk
(:mod:`attnkit.explorer.uploads`).

Every answer is validated against :mod:`attnkit.explorer.schema`, which ``/docs`` shows.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import AttnkitError
from . import schema
from .payload import caption_payload, image_data_url, translation_payload
from .uploads import UploadError, read_body

__all__ = ["MAX_TEXT_CHARS", "MAX_UPLOAD_BYTES", "MAX_UPLOAD_PIXELS", "LoadedModels", "create_app", "load_models"]

STATIC = Path(__file__).resolve().parent / "static"
MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # a phone photo fits; the captioner reads a 64×64 canvas anyway
MAX_UPLOAD_PIXELS = 40_000_000  # checked from the header, before decoding: a small file can hold a huge image
MAX_TEXT_CHARS = 2000  # far above the models' subword limit, which is checked (and reported) too
MAX_BEAM = 16


class ApiError(Exception):
    """An error the API reports as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class TranslateRequest(BaseModel):
    text: str = Field(description="text in the model's source language (one sentence or verse)")
    model: str | None = Field(None, description="a loaded translation model's name (default: the first)")
    beam: int = Field(5, ge=1, le=MAX_BEAM, description="beam size (1 = greedy)")
    heads: bool = Field(False, description="also return every layer's and head's maps, and the rollout")
    target: str | None = Field(
        None,
        description="target-language text to force instead of translating (e.g. the reference); "
        "gold verses then come with their hand-made links",
    )
    method: str | None = Field(
        None, description="an attribution method (see /api/models) whose view fills 'attribution'"
    )
    job: str | None = Field(
        None, max_length=64, description="a name of the caller's choice to follow the work at /api/progress/{job}"
    )


class CaptionOptions(BaseModel):
    model: str | None = Field(None, description="a loaded captioner's name (default: the first)")
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="beam size (1 = greedy)")
    method: str | None = Field(None, description="an attribution method whose maps fill 'attribution'")
    job: str | None = Field(None, max_length=64, description="follow the work at /api/progress/{job}")


class SceneRequest(CaptionOptions):
    scene: int = Field(description="index of a held-out test scene (see /api/scenes)")


@dataclass
class LoadedModels:
    """The models a server (or an export) uses, by name, loaded once."""

    translators: dict[str, Any] = field(default_factory=dict)
    captioners: dict[str, Any] = field(default_factory=dict)
    info: dict[str, dict] = field(default_factory=dict)


def load_models(
    names: list[str] | None = None,
    *,
    device: str = "cpu",
    dtype: str | None = None,
    engine: str = "pytorch",
    keep_spelling: bool = False,
) -> LoadedModels:
    """Load models by name or folder (default: every shipped model). The task is the model's own.
    ``engine="ctranslate2"``: each name is a CTranslate2 export (``attnkit export --format ctranslate2``).
    ``keep_spelling``: translators read the input as typed, not rewritten in their training spelling."""
    if engine == "ctranslate2":
        return _load_ct2_models(names, device=device, keep_spelling=keep_spelling)
    from ..pretrained import known_models, model_task, resolve_model, shipped_models
    from ..tasks.captioning import Captioner
    from ..tasks.translation import Translator
    from ..training.checkpoint import CONFIG_NAME

    infos = {m.name: m for m in known_models()}
    chosen = names or [m.name for m in shipped_models()]
    loaded = LoadedModels()
    for name in chosen:
        path = resolve_model(name)
        label = path.name if name not in infos else name
        info = infos.get(name)
        is_translation = model_task(path) == "translation"
        if is_translation:
            tr = Translator.load(path, device=device, dtype=dtype)
            tr.normalize_spelling = not keep_spelling
            loaded.translators[label] = tr
            probe = tr.attention("Hola.", "Hello.").maps.alignment is not None
            config = getattr(tr.model.config, "to_dict", dict)()
        else:
            cm = Captioner.load(path, device=device, dtype=dtype)
            loaded.captioners[label] = cm
            probe = True
            config = cm.config.to_dict()
        from ..attribution import methods_for
        from .payload import method_info

        model_for_methods = loaded.translators[label] if is_translation else loaded.captioners[label]
        loaded.info[label] = {
            "methods": [method_info(m) for m in methods_for(model_for_methods)],
            "name": label,
            "task": "translation" if is_translation else "captioning",
            "kind": json.loads((path / CONFIG_NAME).read_text()).get("model_type", "?"),
            "scores": dict(info.scores) if info else {},
            "has_attention": probe,
            "config": config,
        }
        if is_translation:
            loaded.info[label].update(src_lang=tr.src_lang, tgt_lang=tr.tgt_lang, corpus=tr.corpus)
    return loaded


def _load_ct2_models(names: list[str] | None, *, device: str, keep_spelling: bool = False) -> LoadedModels:
    from ..deploy.ct2_engine import CT2Translator
    from ..deploy.ct2_explorer import CT2ExplorerTranslator
    from ..deploy.manifest import DeployError

    if not names:
        raise DeployError(
            "serve --engine ctranslate2 needs --model FOLDER, written by `attnkit export MODEL OUT --format ctranslate2`"
        )
    loaded = LoadedModels()
    for name in names:
        ct2 = CT2Translator.load(name, device=device)
        ct2.normalize_spelling = not keep_spelling
        tr = CT2ExplorerTranslator(ct2)
        label = Path(name).name
        loaded.translators[label] = tr
        loaded.info[label] = {
            "name": label,
            "task": "translation",
            "kind": f"{tr.model.model_type} (CTranslate2 {tr.ct2.quantization})",
            "scores": {},
            "has_attention": True,
            "config": tr.model.config.to_dict(),
            "engine": "ctranslate2",
        }
    return loaded


def _pick(models: dict, name: str | None, task: str):
    if not models:
        raise ApiError(404, f"no {task} model is loaded")
    if name is None:
        return next(iter(models.items()))
    if name not in models:
        raise ApiError(404, f"unknown {task} model {name!r}; loaded: {', '.join(models)}")
    return name, models[name]


def _decode_image(data: bytes, canvas: int) -> torch.Tensor:
    """Upload bytes → the captioner's ``(1, canvas, canvas)`` input, converted as ``attnkit caption`` does."""
    from PIL import Image, UnidentifiedImageError

    from ..tasks.captioning.data import image_to_canvas

    try:
        with Image.open(io.BytesIO(data)) as im:  # reads the header only; pixels are decoded below
            if im.format not in ("PNG", "JPEG"):
                raise ApiError(415, f"the upload is a {im.format} image; send a PNG or JPEG")
            if im.width * im.height > MAX_UPLOAD_PIXELS:
                raise ApiError(
                    413,
                    f"the image is {im.width}×{im.height} pixels; the limit is {MAX_UPLOAD_PIXELS} "
                    "pixels (the captioner reads a small canvas anyway)",
                )
            return image_to_canvas(im, canvas)
    except Image.DecompressionBombError:
        raise ApiError(413, f"the image has far more than {MAX_UPLOAD_PIXELS} pixels, the limit") from None
    except (UnidentifiedImageError, OSError, SyntaxError):
        raise ApiError(415, "the upload is not an image: send a PNG or JPEG file") from None


def _describe(errors) -> str:
    """pydantic's validation errors as one line a person can read."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return "the request body is not valid JSON"
    parts = []
    for e in errors:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
    return "bad request: " + "; ".join(parts)


def _held_out_verses(home, corpus: str = "bible") -> list[dict]:
    """Test sentences of ``corpus`` to pick from, a spread of lengths; for the Bible the scored gold
    verses first (they have hand-made links). Empty when the corpus is not prepared on this machine."""
    from ..data.corpus import BIBLE, UnknownCorpusError, open_corpus

    try:
        test = open_corpus(corpus, home).pairs("test")
    except UnknownCorpusError:
        return []
    gold = []
    if corpus == BIBLE:
        from ..alignment.gold import DEV_VERSES, load_gold

        gold = [
            {"ref": v.ref, "source": " ".join(v.source), "reference": " ".join(v.target), "gold": True}
            for v in load_gold()[DEV_VERSES:]
        ]
    picks = sorted(test[:: max(1, len(test) // 120)], key=lambda p: len(p.src.split()))
    return gold + [{"ref": p.ref, "source": p.src, "reference": p.tgt, "gold": False} for p in picks]


class Cancelled(Exception):
    """Raised inside a computation whose client has gone away (the page's Cancel button aborts the fetch)."""


class Jobs:
    """Progress of the running attribution computations, by the client's job name, and their cancellation.

    A gradient method calls ``progress(fraction)`` after every forward pass; the callback records the
    fraction (``GET /api/progress/{job}``) and raises :class:`Cancelled` once the request's client has
    disconnected, so an abandoned computation stops at its next pass instead of running to the end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: dict[str, float] = {}

    def get(self, job: str) -> float | None:
        with self._lock:
            return self._progress.get(job)

    def callback(self, job: str | None, cancelled: threading.Event):
        def progress(fraction: float) -> None:
            if cancelled.is_set():
                raise Cancelled()
            if job is not None:
                with self._lock:
                    self._progress[job] = round(float(fraction), 3)

        return progress

    def done(self, job: str | None) -> None:
        if job is not None:
            with self._lock:
                self._progress.pop(job, None)


async def _run_cancellable(request: Request, jobs: Jobs, job: str | None, fn, /, *args, **kwargs):
    """Run ``fn(*args, progress=..., **kwargs)`` in the thread pool; while it runs, check every 0.2 s
    whether the client has gone, and if so make its next progress call raise :class:`Cancelled`."""
    import asyncio

    cancelled = threading.Event()
    task = asyncio.ensure_future(run_in_threadpool(fn, *args, progress=jobs.callback(job, cancelled), **kwargs))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.2)
            if done:
                return task.result()
            if await request.is_disconnected():
                cancelled.set()
                with contextlib.suppress(Cancelled):
                    await task
                raise ApiError(499, "the client cancelled the request")
    except Cancelled:
        raise ApiError(499, "the client cancelled the request") from None
    finally:
        jobs.done(job)


ERRORS = {
    code: {"model": schema.ApiErrorBody, "description": what}
    for code, what in (
        (400, "empty or too long input, a malformed upload"),
        (404, "an unknown model or scene"),
        (413, "text or upload over the limit"),
        (415, "an upload that is not a PNG or JPEG"),
        (422, "malformed JSON or a field of the wrong type"),
    )
}

CAPTION_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {
                            "type": "string",
                            "format": "binary",
                            "description": f"a PNG or JPEG, at most {MAX_UPLOAD_BYTES} bytes",
                        },
                        "model": {"type": "string", "description": "a loaded captioner's name (default: the first)"},
                        "beam": {"type": "integer", "default": 1, "minimum": 1, "maximum": MAX_BEAM},
                    },
                }
            },
            "application/json": {"schema": SceneRequest.model_json_schema()},
        },
    }
}


def create_app(models: LoadedModels, *, home: str | None = None, scenes=None, verses=None) -> FastAPI:
    """The FastAPI app over ``models`` (the page at ``/``, the API under ``/api``). The held-out
    verses and scenes come from ``home`` (prepared on first use) unless given (``scenes``: a
    :class:`attnkit.data.scenes.ScenesDataset`; ``verses``: bible ``Pair`` objects)."""
    app = FastAPI(title="attnkit explorer", description="Where each attention model looks, word by word.")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    jobs = Jobs()
    state: dict[str, Any] = {}
    state_lock = threading.Lock()
    if scenes is not None:
        state["scenes"] = scenes
    given = None
    if verses is not None:
        given = [{"ref": p.ref, "source": p.src, "reference": p.tgt, "gold": False} for p in verses]

    @app.exception_handler(ApiError)
    def _api_error(request, exc: ApiError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(AttnkitError)
    def _input_error(request, exc: AttnkitError):
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    def _invalid(request, exc: RequestValidationError):
        return JSONResponse({"error": _describe(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def _http(request, exc: StarletteHTTPException):
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    def _bug(request, exc: Exception):  # a bug: say so, without a traceback, and keep serving
        return JSONResponse(
            {"error": f"internal error ({type(exc).__name__}); the server keeps running"}, status_code=500
        )

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html")

    @app.get("/api/models", response_model=schema.ModelList)
    def list_models():
        """The loaded models: name, task, kind, config, test scores, and whether they have attention."""
        return {"models": list(models.info.values())}

    @app.get("/api/verses", response_model=schema.VerseList)
    def verses(limit: int = 200, model: str | None = None):
        """Held-out test sentences (a spread of lengths) of ``model``'s corpus (default: the first
        translation model's) with their reference translations; empty when that corpus is not here."""
        if given is not None:
            return {"verses": given[: max(1, min(limit, 300))]}
        corpus = _pick(models.translators, model, "translation")[1].corpus if models.translators else "bible"
        with state_lock:
            key = f"verses:{corpus}"
            if key not in state:
                state[key] = _held_out_verses(home, corpus)
        return {"verses": state[key][: max(1, min(limit, 300))]}

    def _scenes():
        with state_lock:  # one thread prepares them; the others wait instead of doing it again
            if "scenes" not in state:
                from ..data.scenes import load_scenes

                canvas = next(iter(models.captioners.values())).canvas if models.captioners else 64
                state["scenes"] = load_scenes("test", home, canvas=canvas)
        return state["scenes"]

    @app.get("/api/scenes", response_model=schema.SceneList)
    def scenes(limit: int = 12):
        """Held-out test scenes to caption: index, reference caption and a thumbnail."""
        data = _scenes()
        return {
            "scenes": [
                {"index": i, "caption": data[i]["caption"], "image": image_data_url(data[i]["image"])}
                for i in range(min(max(1, limit), 48, len(data)))
            ]
        }

    @app.get("/api/progress/{job}")
    def progress(job: str):
        """How far the attribution computation started with ``"job": job`` has got (0..1), or null
        when there is none (not started, or finished)."""
        return {"job": job, "progress": jobs.get(job)}

    @app.get("/api/page-template", include_in_schema=False)
    def template():
        """The self-contained page with empty slots (:func:`attnkit.explorer.html.page_template`), which
        the page's export button fills with a view's data."""
        from .html import page_template

        return {"template": page_template()}

    @app.post("/api/translate", response_model=schema.Translation, responses=ERRORS)
    async def translate(req: TranslateRequest, request: Request):
        """Translate text with one loaded model; every attention it has, in the payload format."""
        text = req.text.strip()
        if not text:
            raise ApiError(400, "the text is empty: type or paste a sentence")
        if len(text) > MAX_TEXT_CHARS:
            raise ApiError(
                413,
                f"the text has {len(text)} characters; the limit is {MAX_TEXT_CHARS} "
                "(and each model reads at most its own number of subword tokens)",
            )
        name, tr = _pick(models.translators, req.model, "translation")
        if req.target is not None and not req.target.strip():
            raise ApiError(
                400, "the target is empty: give the target-language text to force, or leave it out to translate"
            )
        return await _run_cancellable(
            request,
            jobs,
            req.job,
            translation_payload,
            tr,
            text,
            beam=req.beam,
            heads=req.heads,
            model=name,
            target=req.target,
            method=req.method,
        )

    @app.post("/api/caption", response_model=schema.Caption, responses=ERRORS, openapi_extra=CAPTION_BODY)
    async def caption(request: Request):
        """Caption an uploaded PNG/JPEG (multipart, field ``image``; form fields ``model``, ``beam``) or
        a held-out test scene (JSON ``{"scene": index, "model", "beam"}``, which adds its boxes and the
        attention correctness of each item word)."""
        try:
            upload = await read_body(request, MAX_UPLOAD_BYTES)
        except UploadError as exc:
            raise ApiError(exc.status, str(exc)) from None
        if upload.multipart:
            if "image" not in upload.files:
                raise ApiError(400, "the upload has no 'image' file field")
            try:
                req = CaptionOptions.model_validate(
                    {
                        "model": upload.fields.get("model") or None,
                        "beam": upload.fields.get("beam", "1"),
                        "method": upload.fields.get("method") or None,
                        "job": upload.fields.get("job") or None,
                    }
                )
            except ValidationError as exc:
                raise ApiError(422, _describe(exc.errors())) from None
            name, cm = _pick(models.captioners, req.model, "captioning")
            image = await run_in_threadpool(_decode_image, upload.files["image"], cm.canvas)
            return await _run_cancellable(
                request, jobs, req.job, caption_payload, cm, image, model=name, beam=req.beam, method=req.method
            )
        try:
            req = SceneRequest.model_validate_json(upload.body)
        except ValidationError as exc:
            raise ApiError(
                422,
                "expected multipart/form-data with an 'image' file, or JSON {\"scene\": index}: "
                + _describe(exc.errors()),
            ) from None
        name, cm = _pick(models.captioners, req.model, "captioning")
        data = await run_in_threadpool(_scenes)
        if not 0 <= req.scene < len(data):
            raise ApiError(
                404, f"scene {req.scene} does not exist; there are {len(data)} test scenes (0..{len(data) - 1})"
            )
        item = data[req.scene]
        return await _run_cancellable(
            request,
            jobs,
            req.job,
            caption_payload,
            cm,
            item["image"],
            model=name,
            beam=req.beam,
            scene=item,
            method=req.method,
        )

    return app
