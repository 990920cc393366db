"""The attention explorer: one JSON format (:mod:`.schema`, built by :mod:`.payload`), a local web
app over it (:mod:`.app`, ``attnkit serve``) and self-contained HTML exports (:mod:`.html`)."""
from .html import standalone_html, write_explorer_html
from .payload import WORD_RULE, caption_payload, translation_payload
from .schema import Caption, ExplorerData, Translation

__all__ = ["WORD_RULE", "caption_payload", "translation_payload", "standalone_html", "write_explorer_html",
           "Caption", "ExplorerData", "Translation"]
