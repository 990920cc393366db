"""The :class:`~attnkit.attention.block_trace.BlockTracer` of the Hugging Face encoder-only and
decoder-only families: :class:`HFBlockTracer`, over :func:`~attnkit.hf.lm_decomposition.trace_lm`,
:func:`~attnkit.hf.lm_decomposition.record_lm`, :func:`~attnkit.hf.lm_decomposition.replay_layer` and
:class:`~attnkit.hf.lm_rows.HFLayerRows` (attention weights captured from the running model, each family's
block layout from :mod:`attnkit.hf.lm_blocks`)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ..attention.block_trace import BlockTracer, LMLayerParts, LMRecording, LMTrace
from .lm_blocks import ENCODER_ONLY, layer_stack
from .lm_decomposition import final_norm, lm_refusal, record_lm, replay_layer, trace_lm
from .lm_rows import HFLayerRows
from .loading import HFModelError

__all__ = ["HFBlockTracer"]


class HFBlockTracer(BlockTracer):
    """The blocks of a ``transformers`` decoder-only or encoder-only model (eval mode, sdpa or eager
    attention); a family attnkit does not trace is refused when a pass is asked for."""

    error = HFModelError

    def __init__(self, model: nn.Module):
        self.model = model
        self.model_type = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
        self.decoder = self.model_type not in ENCODER_ONLY
        self.softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)

    @property
    def n_layers(self) -> int:
        return len(layer_stack(self.model))

    def refusal(self) -> str | None:
        return lm_refusal(self.model_type)

    def trace(self, input_ids: Tensor, on_layer: Callable[[LMLayerParts], None]) -> LMTrace:
        return trace_lm(self.model, input_ids, on_layer)

    def record(self, input_ids: Tensor, *, logits_at: int | None = None) -> LMRecording:
        return record_lm(self.model, input_ids, logits_at=logits_at)

    def replay(self, rec: LMRecording, i: int) -> LMLayerParts:
        return replay_layer(rec, i)

    def layer_rows(self, rec: LMRecording, i: int, keys: int) -> HFLayerRows:
        return HFLayerRows(rec, i, keys)

    def final_norm(self) -> nn.Module:
        return final_norm(self.model)

    def unembedding(self) -> nn.Module | None:
        get = getattr(self.model, "get_output_embeddings", None)
        return None if get is None else get()
