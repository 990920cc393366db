"""Ablating the attention of translators other than attnkit's Transformer: RNNsearch and Hugging Face
encoder-decoders (what the page's ``/api/ablate`` runs for them).

**RNNsearch** (Bahdanau et al. 2015) has one additive attention and no heads: at decoder step ``t`` the
context is ``c_t = Σ_j α_tj h_j`` with ``α_t = softmax_j(vᵀ tanh(W s_{t−1} + U h_j))`` over the annotations
``h_j`` of the real source tokens. Two ablations, each replacing the attention module's output at every step
(teacher forcing and every decoding step alike) by a forward hook on it:

- ``"zero"`` — ``c_t = 0``: the decoder reads nothing of the source past its initial state
  ``s_0 = tanh(W_s h←_1)`` (the encoder's summary, which the attention does not carry);
- ``"mean"`` — uniform weights ``α_tj = 1 / S``: ``c_t = (1/S) Σ_j h_j``, the mean annotation, the same at
  every step: the source is still read, but not *where* to look (the attention's own contribution).

**Hugging Face encoder-decoders** (Marian, Bart, M2M-100, T5) have heads: they take the Transformer's head
ablations (:class:`~attnkit.attribution.interventions.HeadAblation` through :mod:`attnkit.hf.head_sites`).
A CTranslate2 engine runs the model in C++ and has no hooks: nothing here reaches it.

:func:`forced_log_likelihood_of` reads ``log p(reference, eos | source)`` teacher-forced through the model's
own ``forward(src, src_lengths, tgt_in)``, the same for the three kinds of model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from ..hooks import thread_hooks

__all__ = ["RNN_ABLATION_MODES", "ablate_rnn_attention", "forced_log_likelihood_of", "translator_model_kind"]

#: what replaces RNNsearch's context: ``zero`` (c_t = 0) or ``mean`` (uniform α: the mean annotation)
RNN_ABLATION_MODES = ("zero", "mean")


def translator_model_kind(tr) -> str:
    """``"transformer"``, ``"rnnsearch"`` or ``"hf"``: which model ``tr`` (a translator) runs; ``TypeError``
    naming why for any other (a CTranslate2 engine: no hooks; RNNencdec: no attention)."""
    from ..hf.seq2seq import HFSeq2Seq
    from ..models.seq2seq import RNNSearch
    from ..models.transformer import TransformerTranslator

    model = getattr(tr, "model", None)
    if isinstance(model, TransformerTranslator):
        return "transformer"
    if isinstance(model, RNNSearch):
        return "rnnsearch"
    if isinstance(model, HFSeq2Seq):
        return "hf"
    if "CT2" in type(tr).__name__ or "ctranslate2" in type(tr).__module__:
        raise TypeError("a CTranslate2 engine runs the model in C++ with no hooks: its attention cannot be ablated")
    raise TypeError(
        f"{type(model).__name__ if model is not None else type(tr).__name__} has no attention to ablate here "
        "(attnkit's Transformer and RNNsearch and the Hugging Face encoder-decoders do)"
    )


@contextmanager
def ablate_rnn_attention(model, mode: str = "zero") -> Iterator[None]:
    """RNNsearch ``model``'s attention ablated for the ``with`` block (see the module docstring): ``"zero"``
    sets the context ``c_t`` to 0, ``"mean"`` sets the weights uniform over the real source tokens (``c_t``
    the mean annotation). The weights it returns, when asked, are the ones used (zero, or uniform)."""
    from ..models.seq2seq import RNNSearch

    if not isinstance(model, RNNSearch):
        raise TypeError(f"model must be an RNNsearch, got {type(model).__name__}")
    if mode not in RNN_ABLATION_MODES:
        raise ValueError(f"mode must be one of {RNN_ABLATION_MODES}, got {mode!r}")

    def hook(module, args, kwargs, output):
        context, weights = output[0], output[1]
        if mode == "zero":
            new_c = torch.zeros_like(context)
            new_w = None if weights is None else torch.zeros_like(weights)
        else:
            prepared, keep = kwargs["prepared"], kwargs.get("key_padding_mask")  # keep (B, S): True at real tokens
            values = prepared.values  # (B, S, C)
            w = torch.ones(values.shape[:2], dtype=values.dtype, device=values.device)
            if keep is not None:
                w = w * keep.to(values.dtype)
            w = w / w.sum(-1, keepdim=True)  # (B, S): uniform over the real tokens
            mean = torch.einsum("bs,bsc->bc", w, values)  # (B, C)
            new_c = mean if context.dim() == 2 else mean[:, None].expand_as(context)  # (B, C) or (B, T, C)
            new_w = None if weights is None else (w if weights.dim() == 2 else w[:, None].expand_as(weights))
        return type(output)(new_c, new_w, *output[2:]) if hasattr(output, "_fields") else (new_c, new_w)

    with thread_hooks([(model.attention, hook)], with_kwargs=True):
        yield


def forced_log_likelihood_of(tr, source: str, reference: str) -> float:
    """``log p(reference, eos | source)`` of translator ``tr`` teacher-forced (summed over the pieces), with
    whatever interventions are in place: ``[bos, r…]`` in, ``[r…, eos]`` read, through ``tr.model``'s own
    ``forward(src, src_lengths, tgt_in)``."""
    model = tr.model
    cfg = model.config
    src = torch.tensor(tr.encode_sources([source], truncate=True), device=tr.device)  # (1, S)
    top = getattr(cfg, "max_len", None)
    ids = tr.tokenizer.encode(reference.strip())
    ids = ids[: top - 1] if top else ids
    if not ids:
        raise ValueError("the reference has no word the model can read")
    tgt_in = torch.tensor([[cfg.bos_id, *ids]], device=tr.device)  # (1, T)
    tgt_out = torch.tensor([[*ids, cfg.eos_id]], device=tr.device)  # (1, T)
    lengths = torch.tensor([src.shape[1]], device=tr.device)
    with torch.no_grad():
        logits, _ = model(src, lengths, tgt_in)  # (1, T, V)
    lp = F.log_softmax(logits.double(), -1)
    return float(_gather(lp, tgt_out).sum())


def _gather(lp: Tensor, ids: Tensor) -> Tensor:
    return lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
