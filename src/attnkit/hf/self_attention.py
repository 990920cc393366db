"""Encoder-only (BERT and kin) and decoder-only (GPT-2, Llama and kin) Hugging Face models: every
layer's and head's self-attention over a text, its head mean and its rollout — what bertviz shows —
read from the running model (:mod:`attnkit.hf.capture`, no eager reload).

:class:`SelfAttentionModel` is the self-attention-model protocol: ``self_attention(text)`` gives one
:class:`SelfAttentionMaps` (every layer at once, for short texts and the views), ``stream(text,
on_layer)`` hands each layer's maps to a callback as the layer runs and keeps none of them (long
inputs: memory bounded by one layer's asked heads). The pieces include the special tokens the
tokenizer adds (``[CLS]``/``[SEP]``, ``<s>``): in a self-attention view they are positions like any
other, and often the ones attention parks on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..alignment.rollout import attention_rollout
from .capture import AttentionSite, attention_sites, capture_attention
from .loading import HFModelError, load_pretrained
from .tokenizer import HFTokenizer

__all__ = ["SelfAttentionMaps", "SelfAttentionModel", "load_self_attention"]


@dataclass
class SelfAttentionMaps:
    """One text's self-attention: ``attention (L, H, N, N)`` over ``pieces`` (row ``i`` is what piece
    ``i`` attends to; a decoder-only model's rows are zero right of the diagonal). ``layers``: the
    model's layer number (0-based) of each of the ``L`` maps; ``heads`` likewise."""

    pieces: list[str]
    attention: Tensor
    layers: list[int]
    heads: list[int]
    causal: bool

    @property
    def head_mean(self) -> Tensor:
        """``(L, N, N)``: each layer's attention averaged over its heads."""
        return self.attention.mean(dim=1)

    def rollout(self) -> Tensor:
        """``(N, N)``: attention rollout (Abnar & Zuidema 2020) through the layers held, which must be
        consecutive from the first (:func:`attnkit.alignment.attention_rollout`)."""
        if self.layers != list(range(len(self.layers))):
            raise ValueError(f"rollout composes layers 0..L-1 in order; these maps hold layers {self.layers}")
        return attention_rollout(self.attention)


class SelfAttentionModel:
    """A ``transformers`` encoder-only or decoder-only model with its tokenizer (see the module docstring)."""

    def __init__(self, model, tokenizer, *, source: str = "?"):
        cfg = model.config
        if getattr(cfg, "is_encoder_decoder", False):
            raise HFModelError(f"{source} is an encoder-decoder: load it as a translator (attnkit translate)")
        self.model = model.eval()
        self.hf_tokenizer = tokenizer
        self.source = source
        self.sites: list[AttentionSite] = sorted(attention_sites(model), key=lambda s: s.layer)
        if not self.sites:
            raise HFModelError(f"{source}: no attention modules found in {type(model).__name__}")
        self.causal = bool(getattr(self.sites[0].module, "is_causal", False))
        pad = getattr(tokenizer, "pad_token_id", None)
        eos = getattr(tokenizer, "eos_token_id", None)
        bos = getattr(tokenizer, "bos_token_id", None)
        base = pad if pad is not None else (eos if eos is not None else 0)
        self.tokenizer = HFTokenizer(
            tokenizer,
            side="source",
            bos_id=bos if bos is not None else base,
            eos_id=eos if eos is not None else base,
            pad_id=base,
        )
        self.num_layers = len(self.sites)
        self.num_heads = int(getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None))

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """``(ids, pieces)`` of ``text`` with the tokenizer's special tokens, pieces in the ``▁`` convention."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty str")
        ids = [int(i) for i in self.hf_tokenizer(text)["input_ids"]]
        return ids, [self.tokenizer.id_to_piece(i) for i in ids]

    def _chosen(self, layers: Sequence[int] | None) -> list[AttentionSite]:
        if layers is None:
            return list(self.sites)
        bad = [layer for layer in layers if not 0 <= int(layer) < self.num_layers]
        if bad:
            raise ValueError(f"layers must lie in 0..{self.num_layers - 1} (0-based), got {bad[0]}")
        wanted = {int(layer) for layer in layers}
        return [s for s in self.sites if s.layer in wanted]

    @torch.no_grad()
    def stream(
        self,
        text: str,
        on_layer: Callable[[int, Tensor], None],
        *,
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
    ) -> list[str]:
        """Run the model on ``text`` once and call ``on_layer(layer, weights (len(heads), N, N))`` as each
        asked layer runs; nothing is kept. Returns the pieces."""
        ids, pieces = self.encode(text)
        device = next(self.model.parameters()).device
        with capture_attention(
            self.model, lambda s, w: on_layer(s.layer, w[0]), sites=self._chosen(layers), heads=heads
        ):
            self.model(input_ids=torch.tensor([ids], device=device))
        return pieces

    def self_attention(
        self, text: str, *, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
    ) -> SelfAttentionMaps:
        """Every asked layer's and head's self-attention over ``text`` (default: all), at once."""
        got: dict[int, Tensor] = {}
        pieces = self.stream(text, lambda layer, w: got.__setitem__(layer, w.cpu()), layers=layers, heads=heads)
        order = sorted(got)
        return SelfAttentionMaps(
            pieces=pieces,
            attention=torch.stack([got[i] for i in order]),  # (L, H, N, N)
            layers=order,
            heads=list(range(self.num_heads)) if heads is None else [int(h) for h in heads],
            causal=self.causal,
        )


def load_self_attention(source: str, *, device: str = "cpu") -> SelfAttentionModel:
    """A :class:`SelfAttentionModel` from ``hf:NAME``, a hub name or a folder (see :mod:`attnkit.hf.loading`)."""
    from ..device import resolve_device
    from ..pretrained import HF_PREFIX

    source = str(source)
    source = source[len(HF_PREFIX) :] if source.startswith(HF_PREFIX) else source
    model, tok = load_pretrained(source, seq2seq=False)
    return SelfAttentionModel(model.to(resolve_device(device)), tok, source=source)
