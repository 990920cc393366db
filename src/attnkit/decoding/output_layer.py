"""Decoding with the output layer prepared ahead of the steps: packed for the GEMM (or quantized to int8),
and optionally restricted to a shortlist of the vocabulary.

Most of a translation step's time is the output layer: every live beam against all ``V`` rows of
the output matrix. :class:`OutputLayerDecoder` wraps a model that exposes that layer
(``step_features`` and ``output_layer``) and prepares it before the steps instead of at every step: once
per model for the whole vocabulary (kept for its next batches while its weights stay the same), once per
batch for a batch's shortlist:

* **Packed weights.** On the CPU in float32 the projection runs through oneDNN with the weight
  reordered once into its blocked layout (``torch.ops.mkldnn``, the path ``torch.compile``'s
  weight freezing takes for a constant linear layer; :func:`attnkit.int8.packed_linear`), faster than
  ``F.linear`` (MKL) on an AMD EPYC at the output layer's shapes (measured in benchmarks/RESULTS.md,
  section "RNNsearch against OpenNMT-py", item "The output layer packed for oneDNN"), with float32
  arithmetic; elsewhere, or when autograd is on, it is ``F.linear``.
* **Vocabulary selection** (Jean et al. 2015; the lexical shortlists of Marian and CTranslate2's
  ``use_vmap``). Given ``ids``, a subset ``V' ⊂ V`` chosen for the batch (the frequent target
  words plus likely translations of its source words), only those rows are scored, and the softmax
  normalises over them::

      log p'(y | ...) = z_y - log Σ_{y' ∈ V'} exp z_{y'}        (z = W h + b, rows of W in V' only)

  The search then runs unchanged in the shortlist's own token space: token ``i`` of the search is
  vocabulary id ``ids[i]``. That is the same search as masking every logit outside ``ids`` to
  ``-inf`` before the softmax.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import Tensor

from ..int8 import int8_linear, packed_linear
from .search import takes_beams_only

__all__ = ["OutputLayerDecoder"]


def _prepare(weight: Tensor, bias: Tensor | None, int8: bool) -> Callable[[Tensor], Tensor]:
    return (int8_linear if int8 else packed_linear)(weight.float() if int8 else weight, bias)


#: Each model's prepared whole-vocabulary output layer, with a copy of the weights it was made from. Packing
#: 8,000 × 256 for oneDNN takes ~4 ms and quantizing it to int8 ~85 ms (with an nn.Linear built and
#: initialised to hold it; one core of an AMD EPYC), which every batch paid again; an int8 greedy batch of 64
#: verses takes ~1 s.
#: An entry lives as long as its model; it is remade when the precision changes or the weight or bias differs
#: from the entry's copy. The contents are compared (``torch.equal``, ~1 ms at 8,000 × 256), not the version
#: counters: torch's fused Adam (``Adam(fused=True)``, what training here uses) and writes through ``.data``
#: change parameters in place without bumping them, and a validation between training steps must decode
#: with the weights of that step.
_PREPARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _same(saved: Tensor | None, now: Tensor | None) -> bool:
    if saved is None or now is None:
        return saved is None and now is None
    return saved.shape == now.shape and saved.dtype == now.dtype and bool(torch.equal(saved, now))


def _prepared_output_layer(model, weight: Tensor, bias: Tensor | None, int8: bool) -> Callable[[Tensor], Tensor]:
    try:
        hit = _PREPARED.get(model)
    except TypeError:  # a model that cannot be weakly referenced: prepared for this batch only
        return _prepare(weight, bias, int8)
    if hit is None or hit[0] != int8 or not (_same(hit[2], weight) and _same(hit[3], bias)):
        snapshot = (weight.clone(), None if bias is None else bias.clone())
        hit = (int8, _prepare(snapshot[0], snapshot[1], int8), *snapshot)
        _PREPARED[model] = hit  # two threads may both make it: the same layer, one kept
    return hit[1]


class OutputLayerDecoder:
    """``model`` with its output layer prepared for one batch, as an :class:`~attnkit.decoding.IncrementalDecoder`.

    ``model`` provides ``step_features(prev_tokens, state) -> (features (R, E), state, attn)`` (the
    output layer's input for one step) and ``output_layer() -> (weight (V, E), bias (V,) or None)``,
    besides ``start`` and ``reorder``. ``ids (V',)``: search over these vocabulary ids only (None:
    the whole vocabulary). Use :meth:`index_of` for the search's ``bos_id`` / ``eos_id`` and
    :meth:`vocabulary_ids` to turn its tokens back into vocabulary ids (both the identity without ``ids``).
    The whole vocabulary's prepared layer is the model's own, made once and kept while the weights hold
    the same values (compared with a copy); a shortlist's is made for this batch. A model
    marked ``precision == "int8"`` gets an int8 output layer (:func:`attnkit.int8.int8_linear`).
    """

    def __init__(self, model, ids: Tensor | None = None):
        for name in ("start", "step_features", "reorder", "output_layer"):
            if not callable(getattr(model, name, None)):
                raise TypeError(
                    f"model must provide {name}() to decode with a prepared output layer; "
                    f"{type(model).__name__} does not"
                )
        weight, bias = model.output_layer()
        weight, bias = weight.detach(), None if bias is None else bias.detach()
        V = weight.shape[0]
        self.model = model
        self.ids = None
        self._position: dict[int, int] | None = None
        if ids is not None:
            if (
                not isinstance(ids, Tensor)
                or ids.dim() != 1
                or ids.dtype not in (torch.int32, torch.int64)
                or not len(ids)
            ):
                raise ValueError(f"ids must be a non-empty 1-D integer tensor, got {getattr(ids, 'shape', type(ids))}")
            if int(ids.min()) < 0 or int(ids.max()) >= V:
                raise ValueError(
                    f"ids must lie in [0, {V}) (the output vocabulary), got [{int(ids.min())}, {int(ids.max())}]"
                )
            ids = ids.to(device=weight.device, dtype=torch.long)
            if len(torch.unique(ids)) != len(ids):
                raise ValueError("ids must not repeat a vocabulary id")
            self.ids = ids
            self._position = {int(v): i for i, v in enumerate(ids.tolist())}
            weight = weight.index_select(0, ids)  # (V', E)
            bias = None if bias is None else bias.index_select(0, ids)  # (V',)
        int8 = getattr(model, "precision", None) == "int8" and weight.device.type == "cpu"
        if ids is None:  # the whole vocabulary: prepared once per model, kept for its next batches
            self._project = _prepared_output_layer(model, weight, bias, int8)
        else:  # a shortlist: this batch's own rows
            self._project = _prepare(weight, bias, int8)
        self._beams_only = takes_beams_only(model)

    def index_of(self, token_id: int) -> int:
        """The search's index of vocabulary id ``token_id`` (``ValueError`` when it is not in the shortlist)."""
        if self._position is None:
            return token_id
        if token_id not in self._position:
            raise ValueError(f"token id {token_id} is not in the shortlist (bos and eos must be)")
        return self._position[token_id]

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        """The search's tokens (a hypothesis's ``tokens``) -> vocabulary ids."""
        if self.ids is None or not tokens:
            return list(tokens)
        return self.ids[torch.as_tensor(tokens, dtype=torch.long, device=self.ids.device)].tolist()

    def start(self, **inputs):
        return self.model.start(**inputs)

    def step(self, prev_tokens: Tensor, state):
        """``prev_tokens (R,)`` search tokens -> ``(log p (R, V'), state, attn)``."""
        prev = prev_tokens if self.ids is None else self.ids[prev_tokens]
        features, state, attn = self.model.step_features(prev, state)  # (R, E)
        return torch.log_softmax(self._project(features), dim=-1), state, attn  # (R, V')

    def reorder(self, state, index: Tensor, *, beams_only: bool = False):
        if beams_only and self._beams_only:
            return self.model.reorder(state, index, beams_only=True)
        return self.model.reorder(state, index)
