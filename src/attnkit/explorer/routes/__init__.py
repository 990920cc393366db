"""The explorer's routes, one module per concern: the page and its docs (:mod:`.pages`), what is loaded and
what to pick from (:mod:`.catalog`), translation (:mod:`.translate`), captioning (:mod:`.caption`) and a
job's progress (:mod:`.progress`)."""

from . import caption, catalog, pages, progress, translate

ROUTERS = [pages.router, catalog.router, translate.router, caption.router, progress.router]

__all__ = ["ROUTERS"]
