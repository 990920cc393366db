"""The explorer's routes, one module per concern: the page and its docs (:mod:`.pages`), what is loaded and
what to pick from (:mod:`.catalog`), translation (:mod:`.translate`), documents with markup (:mod:`.document`),
captioning (:mod:`.caption`),
Hugging Face encoder-only and decoder-only models (:mod:`.self_attention`), a decoder-only model's views of one
prediction (:mod:`.flow`), one head step by step (:mod:`.head_step`), head interventions (:mod:`.heads`: ablation,
patching, a head's roles and QK decomposition) and a job's progress (:mod:`.progress`)."""

from . import caption, catalog, document, flow, head_step, heads, pages, progress, self_attention, translate

ROUTERS = [
    pages.router,
    catalog.router,
    translate.router,
    document.router,
    caption.router,
    self_attention.router,
    flow.router,
    head_step.router,
    heads.router,
    progress.router,
]

__all__ = ["ROUTERS"]
