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
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for part in ("payload", "schema", "html"):
        module = importlib.import_module(f".{part}", __name__)
        if name in vars(module):
            globals()[name] = value = vars(module)[name]
            return value
    raise AttributeError(f"module {__name__!r}: {name!r} is in __all__ but in none of its modules")  # pragma: no cover


def __dir__():
    return sorted(set(globals()) | set(__all__))
