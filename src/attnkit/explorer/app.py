"""``attnkit serve``: the attention explorer, a local web app over every loaded model, and its JSON API.

The page (``static/``) uses only the API below; every script and style comes from the package, so
it works with no network, and so does the API page (``/docs``: Swagger UI from packaged files). The
JSON is one format (:mod:`attnkit.explorer.schema`, built by :mod:`attnkit.explorer.payload`), the same
that ``--html`` exports embed.

- ``GET  /api/models``     the loaded models: name, task, kind, config, test scores, has_attention (a training
                           run's model, followed as it trains, :mod:`.follow`: its checkpoint and step)
- ``GET  /api/limits``     the limits in force (every one an option of ``attnkit serve``)
- ``GET  /api/verses``     held-out test sentences of a model's corpus to pick from (with their references)
- ``GET  /api/scenes``     held-out test scenes to pick from (with thumbnails)
- ``POST /api/translate``  ``{"text", "model", "beam", "heads", "layer", "target", "method", "job"}`` → a
                           translation payload (``method``: an attribution method, :mod:`attnkit.attribution`)
- ``POST /api/translate-document``  ``{"document", "format", "model", "beam", "method"}`` → the document
                           translated, its inline tags moved by the word alignment (html, xml, markdown, xliff)
- ``GET  /api/progress/{job}``  how far the caller's own heavy job has got, or its place in the queue
- ``POST /api/caption``    ``{"image": base64, "model", "beam", "method", "job"}`` or ``{"scene": index, ...}``
                           → a caption payload
- ``POST /api/head-step``  ``{"model", "text" | "source", "target", "site", "layer", "head", "query"}`` → one
                           head at one query step by step: q, K, V, the mask, the scale, the weights, the
                           head's output and its columns in the concatenation (:mod:`.routes.head_step`)
- ``GET  /docs``           the API page (every answer's schema, every limit)

**Serving is a security boundary** (:mod:`.guard`, :mod:`.options`, :mod:`.jobs`): the Host, Origin, token,
content type and body size of every request are checked before a route sees it; every request's work is
bounded before a tensor is built; heavy jobs wait in a bounded queue for a bounded pool of worker
processes. **Bad input** gets a 4xx with ``{"error": "..."}`` a person can read, never a traceback, and
the server keeps serving.

**Light work in the fast lane.** A plain translation or caption runs in the server's fast lane
(:mod:`.lane`), threads (``--fast-lanes``) that never wait behind heavy jobs and search waiting translations
of one model and beam as one batch. The models are shared without a lock, which is safe because inference mutates
nothing shared (``torch.no_grad``, eval mode, every request's decoder state and caches its own; grad mode is
per thread). At most ``--limit-concurrency`` requests are in flight (:mod:`.inflight`), counted once the
guard has read their bodies; open connections have bounds of their own (:mod:`.connections`: a header
timeout, a per-client and a total cap).
"""

from __future__ import annotations

import contextlib

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .api_errors import ApiError, install_error_handlers
from .guard import Guard
from .inflight import InFlightLimit
from .jobs import JobQueue
from .loading import LoadedModels, load_models
from .options import ServeOptions, limits_table
from .routes import ROUTERS
from .routes.pages import STATIC, SWAGGER_STATIC
from .state import Explorer

__all__ = ["ApiError", "LoadedModels", "ServeOptions", "create_app", "load_models"]

DESCRIPTION = """Where each attention model looks, word by word. Every answer's format is below; every error
is `{"error": "..."}`. A server bound beyond localhost needs its token (`Authorization: token T`).

Limits in force (options of `attnkit serve`):

"""


def create_app(
    models: LoadedModels,
    *,
    home: str | None = None,
    scenes=None,
    verses=None,
    options: ServeOptions | None = None,
    token: str | None = None,
    start_workers: bool = False,
) -> FastAPI:
    """The FastAPI app over ``models`` (the page at ``/``, the API under ``/api``), guarded by ``options``
    (default: :class:`ServeOptions`' defaults) and ``token`` (None: no token asked). The held-out verses and
    scenes come from ``home`` (prepared on first use) unless given (``scenes``: a
    :class:`attnkit.data.scenes.ScenesDataset`; ``verses``: bible ``Pair`` objects). ``start_workers``:
    start the worker processes with the server rather than at the first heavy job."""
    options = options or ServeOptions()
    jobs = JobQueue(options, dict(models.specs))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if start_workers:
            jobs.start()
        yield
        app.state.explorer.lane.stop()
        jobs.stop()

    app = FastAPI(
        title="attnkit explorer",
        description=DESCRIPTION + limits_table(options),
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    given = None
    if verses is not None:
        given = [{"ref": p.ref, "source": p.src, "reference": p.tgt, "gold": False} for p in verses]
    app.state.explorer = Explorer(models, options, jobs, token=token, home=home, given_verses=given)
    if scenes is not None:
        app.state.explorer.cache["scenes"] = scenes
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    if SWAGGER_STATIC is not None:
        app.mount("/docs-static", StaticFiles(directory=SWAGGER_STATIC), name="docs-static")
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    # the guard outermost (added last): a request counts against --limit-concurrency only once it has passed
    # the guard, its body read (a connection that never completes a request takes no request's place)
    app.add_middleware(InFlightLimit, limit=options.limit_concurrency)
    app.add_middleware(Guard, options=options, token=token)
    return app
