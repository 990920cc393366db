"""The attention explorer: one JSON format (:mod:`.schema`, built by :mod:`.payload`), a local web
app over it (:mod:`.app`, ``attnkit serve``) and self-contained HTML exports (:mod:`.html`).

The names below are imported on first use (PEP 562), so that reading ``explorer.options`` (as the CLI's
parser does for ``serve --help``) does not import pydantic and the whole web stack: ``attnkit train`` runs
where only torch and the training libraries are installed.
"""

import importlib

_EXPORTS = {
    "WORD_RULE": ".payload",
    "Caption": ".schema",
    "ExplorerData": ".schema",
    "Translation": ".schema",
    "caption_payload": ".payload",
    "standalone_html": ".html",
    "translation_payload": ".payload",
    "write_explorer_html": ".html",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
