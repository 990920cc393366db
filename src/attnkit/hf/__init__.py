"""Pretrained Hugging Face models behind attnkit's own interfaces: the only package that imports
``transformers`` (an optional extra: ``pip install 'attnkit[hf]'``).

- :mod:`.loading`: ``hf:NAME`` and Hugging Face model folders, loaded with ``from_pretrained``
  (honouring ``HF_HUB_OFFLINE`` and the local cache), with one-line errors;
- :mod:`.capture`: every attention's weights from the running model, whatever its attention
  implementation (``sdpa`` by default), layer by layer, only for the layers and heads asked;
- :mod:`.seq2seq`: encoder-decoder models (Marian, BART/mBART, M2M100/NLLB, T5) as attnkit
  translation models (:class:`attnkit.models.base.TranslationModel`);
- :mod:`.decomposition`: their residual blocks traced for attention-norm, value zeroing and ALTI+
  (Bart-like LayerNorm families; T5 refused), and their full attention for rollout;
- :mod:`.self_attention`: encoder-only and decoder-only models (BERT, GPT-2, Llama): every layer's and
  head's self-attention, head mean and rollout, all at once or streamed layer by layer;
- :mod:`.tokenizer`: a Hugging Face tokenizer with the interface of :class:`attnkit.data.Tokenizer`.
- :mod:`.export`: the ``transformers`` objects of ``attnkit export --format huggingface`` (config, model,
  generation config, fast tokenizer, the saved folder), built from the plain values :mod:`attnkit.deploy.hf_export` decides;
- :mod:`.transformers_internals`: the one place attnkit reads ``transformers``' private internals (the attention
  registry, a config's attention implementation, the encoder-decoder cache's layout), version-checked at import.

Nothing outside this package learns that a model came from the hub. Importing this package does
not import ``transformers``; the functions that need it do, and say which extra to install when it
is missing.
"""

from __future__ import annotations

from .loading import HFModelError, require_transformers

__all__ = ["HFModelError", "load_self_attention", "load_seq2seq", "require_transformers"]


def load_seq2seq(source: str, **kwargs):
    """:func:`attnkit.hf.seq2seq.load_seq2seq` (imported on first use)."""
    from .seq2seq import load_seq2seq as load

    return load(source, **kwargs)


def load_self_attention(source: str, **kwargs):
    """:func:`attnkit.hf.self_attention.load_self_attention` (imported on first use)."""
    from .self_attention import load_self_attention as load

    return load(source, **kwargs)
