"""The page (``/``), the offline API docs (``/docs``, Swagger UI from the packaged files of
``fastapi-offline``), and the page template the export button fills."""

from __future__ import annotations

import secrets
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse

from ..guard import token_cookie
from ..state import explorer, session_cookie

__all__ = ["SWAGGER_STATIC", "router"]

STATIC = Path(__file__).resolve().parents[1] / "static"
router = APIRouter()


def _swagger_static() -> Path | None:
    try:
        import fastapi_offline
    except ImportError:  # pragma: no cover - a dependency of attnkit
        return None
    return Path(fastapi_offline.__file__).resolve().parent / "static"


SWAGGER_STATIC = _swagger_static()


@router.get("/", include_in_schema=False)
def index(request: Request):
    """The page. Opened with ``?token=T`` (checked by the guard), it keeps the token in a cookie that only
    this origin's requests carry (HttpOnly, SameSite=Strict); every visit gets a random session cookie, to
    which its jobs belong."""
    ex = explorer(request)
    response = FileResponse(STATIC / "index.html")
    cookie = dict(httponly=True, samesite="strict", path="/")
    if ex.token is not None and request.query_params.get("token"):
        response.set_cookie(token_cookie(ex.options.port), ex.token, **cookie)
    if not request.cookies.get(session_cookie(ex.options.port)):
        response.set_cookie(session_cookie(ex.options.port), secrets.token_urlsafe(16), **cookie)
    return response


@router.get("/favicon.ico", include_in_schema=False)
def favicon():
    """The page's icon (an SVG; browsers that ask for ``/favicon.ico`` on their own take it too)."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


@router.get("/docs", include_in_schema=False)
def docs(request: Request):
    """Swagger UI over ``/openapi.json``, every script and style from this server (it works offline)."""
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="attnkit explorer API",
        swagger_js_url=f"{root}/docs-static/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs-static/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs-static/favicon.png",
    )


@router.get("/api/page-template", include_in_schema=False)
def template():
    """The self-contained page with empty slots (:func:`attnkit.explorer.html.page_template`), which
    the page's export button fills with a view's data."""
    from ..html import page_template

    return {"template": page_template()}
