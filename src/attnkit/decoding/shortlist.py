"""Decoding over a shortlist of the output vocabulary (vocabulary selection).

Most of a translation step's time is the output layer: every live beam against all ``V`` rows of
the output matrix. Vocabulary selection (Jean et al. 2015; the lexical shortlists of Marian and
CTranslate2's ``use_vmap``) scores only a subset ``V' ⊂ V`` chosen per batch, for example the
frequent target words plus the likely translations of the batch's source words, and normalises
over it::

    log p'(y | ...) = z_y - log Σ_{y' ∈ V'} exp z_{y'}        (z = W h + b, rows of W in V' only)

:class:`ShortlistDecoder` wraps a model so that greedy and beam search run unchanged, in the
shortlist's own token space: token ``i`` of the search is vocabulary id ``ids[i]``. Searching with
``ids`` = the whole vocabulary gives exactly the model's own search; with a subset it is the same
search as masking every logit outside the subset to ``-inf`` before the softmax.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .search import _takes_beams_only

__all__ = ["ShortlistDecoder"]


class ShortlistDecoder:
    """``model`` restricted to the output ids ``ids (V',)``, as an :class:`~attnkit.decoding.IncrementalDecoder`.

    ``model`` provides ``step_features(prev_tokens, state) -> (features (R, E), state, attn)`` (the
    output layer's input for one step) and ``output_layer() -> (weight (V, E), bias (V,) or None)``,
    besides ``start`` and ``reorder``. The rows of the output layer in ``ids`` are copied once,
    here. Use :meth:`index_of` for the search's ``bos_id`` / ``eos_id`` and :meth:`vocabulary_ids`
    to turn its tokens back into vocabulary ids.
    """

    def __init__(self, model, ids: Tensor):
        for name in ("start", "step_features", "reorder", "output_layer"):
            if not callable(getattr(model, name, None)):
                raise TypeError(f"model must provide {name}() to decode over a shortlist; "
                                f"{type(model).__name__} does not")
        weight, bias = model.output_layer()
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.dtype not in (torch.int32, torch.int64) or not len(ids):
            raise ValueError(f"ids must be a non-empty 1-D integer tensor, got {getattr(ids, 'shape', type(ids))}")
        V = weight.shape[0]
        if int(ids.min()) < 0 or int(ids.max()) >= V:
            raise ValueError(f"ids must lie in [0, {V}) (the output vocabulary), got [{int(ids.min())}, {int(ids.max())}]")
        ids = ids.to(device=weight.device, dtype=torch.long)
        if len(torch.unique(ids)) != len(ids):
            raise ValueError("ids must not repeat a vocabulary id")
        self.model = model
        self.ids = ids
        self.weight = weight.detach().index_select(0, ids)  # (V', E)
        self.bias = None if bias is None else bias.detach().index_select(0, ids)  # (V',)
        self._position = {int(v): i for i, v in enumerate(ids.tolist())}
        self._beams_only = _takes_beams_only(model)

    def __len__(self) -> int:
        return len(self.ids)

    def index_of(self, token_id: int) -> int:
        """The shortlist index of vocabulary id ``token_id`` (``ValueError`` when it is not in the shortlist)."""
        if token_id not in self._position:
            raise ValueError(f"token id {token_id} is not in the shortlist (bos and eos must be)")
        return self._position[token_id]

    def vocabulary_ids(self, tokens: list[int]) -> list[int]:
        """Shortlist indices (a hypothesis's ``tokens``) -> vocabulary ids."""
        return self.ids[torch.as_tensor(tokens, dtype=torch.long, device=self.ids.device)].tolist() if tokens else []

    def start(self, **inputs):
        return self.model.start(**inputs)

    def step(self, prev_tokens: Tensor, state):
        """``prev_tokens (R,)`` shortlist indices -> ``(log p' (R, V'), state, attn)``."""
        features, state, attn = self.model.step_features(self.ids[prev_tokens], state)  # (R, E)
        return torch.log_softmax(F.linear(features, self.weight, self.bias), dim=-1), state, attn  # (R, V')

    def reorder(self, state, index: Tensor, *, beams_only: bool = False):
        if beams_only and self._beams_only:
            return self.model.reorder(state, index, beams_only=True)
        return self.model.reorder(state, index)
