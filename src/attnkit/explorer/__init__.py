"""The attention explorer: one JSON format (:mod:`.schema`, built by :mod:`.payload`), a local web
app over it (:mod:`.app`, ``attnkit serve``) and self-contained HTML exports (:mod:`.html`).

The names below load on first use (PEP 562), so that reading :mod:`.options` (the CLI builds every
command's parser from it) does not import pydantic and the web stack for ``attnkit train``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and the API reference (griffe) read; at run time, __getattr__ below
    from .html import standalone_html, write_explorer_html
    from .payload import WORD_RULE, caption_payload, translation_payload
    from .schema import Caption, ExplorerData, Translation

_WHERE = {
    "WORD_RULE": "payload",
    "caption_payload": "payload",
    "translation_payload": "payload",
    "Caption": "schema",
    "ExplorerData": "schema",
    "Translation": "schema",
    "standalone_html": "html",
    "write_explorer_html": "html",
}

__all__ = [
    "WORD_RULE",
    "Caption",
    "ExplorerData",
    "Translation",
    "caption_payload",
    "standalone_html",
    "translation_payload",
    "write_explorer_html",
]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
