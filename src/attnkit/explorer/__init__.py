"""The attention explorer: one JSON format (:mod:`.schema`, built by :mod:`.payload`), a local web
app over it (:mod:`.app`, ``attnkit serve``) and self-contained HTML exports (:mod:`.html`)."""

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
