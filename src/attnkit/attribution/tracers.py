"""The one place a model becomes the :class:`~attnkit.attention.block_trace.BlockTracer` that the
language-model decompositions read: attnkit's own language model natively
(:class:`~attnkit.models.language_model_trace.LanguageModelTracer`), a ``transformers`` model through its
family's adapter (:class:`~attnkit.hf.lm_tracer.HFBlockTracer`)."""

from __future__ import annotations

from ..attention.block_trace import BlockTracer

__all__ = ["block_tracer"]


def block_tracer(model) -> BlockTracer:
    """The tracer of ``model``: a :class:`BlockTracer` itself, an attnkit
    :class:`~attnkit.models.language_model.LanguageModel`, or a ``transformers`` model."""
    if isinstance(model, BlockTracer):
        return model
    from ..models.language_model import LanguageModel

    if isinstance(model, LanguageModel):
        from ..models.language_model_trace import LanguageModelTracer

        return LanguageModelTracer(model)
    from ..hf.lm_tracer import HFBlockTracer

    return HFBlockTracer(model)
