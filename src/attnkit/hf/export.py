"""The ``transformers`` side of ``attnkit export --format huggingface`` (:mod:`attnkit.deploy.hf_export`).

The export decides what to write (the architecture, the config's values, the weights under their HF
names, the tokenizer's pipeline) without ``transformers``; this module builds and saves the
``transformers`` objects from those plain values: the Marian or Pegasus config and model, the generation
config, the fast tokenizer, and the saved folder. Only :mod:`attnkit.hf` imports ``transformers``
(docs/architecture.md), so the export calls these functions instead of importing it itself.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from .loading import require_transformers

__all__ = [
    "ARCHITECTURES",
    "CAUSAL_ARCHITECTURES",
    "fast_tokenizer",
    "generation_config",
    "new_causal_lm",
    "new_seq2seq_model",
    "save",
    "transformers_version",
]

#: The stock architectures the export writes: ``"marian"`` (post-norm) and ``"pegasus"`` (pre-norm), with
#: the class each one's model is.
ARCHITECTURES = {"marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration"}
#: The stock decoder-only architectures a language model exports to, each with its config class and model class.
CAUSAL_ARCHITECTURES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "gpt2": ("GPT2Config", "GPT2LMHeadModel")}


def transformers_version() -> str:
    """The installed ``transformers``' version (what the export's manifest records)."""
    return require_transformers().__version__


def new_seq2seq_model(arch: str, config: dict[str, Any], marian: dict[str, Any] | None = None):
    """A freshly initialised ``MarianMTModel`` or ``PegasusForConditionalGeneration`` (eval mode) with the
    config ``config`` (the keyword arguments both configs take) plus, for Marian, ``marian`` (its own:
    ``decoder_vocab_size``, ``share_encoder_decoder_embeddings``)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
    transformers = require_transformers()
    if arch == "pegasus":
        cfg = transformers.PegasusConfig(**config)
    else:
        cfg = transformers.MarianConfig(**config, **(marian or {}))
    return getattr(transformers, ARCHITECTURES[arch])(cfg).eval()


def new_causal_lm(arch: str, config: dict[str, Any]):
    """A freshly initialised ``LlamaForCausalLM`` or ``GPT2LMHeadModel`` (eval mode, float32) with the config
    ``config`` (that architecture's config keyword arguments)."""
    if arch not in CAUSAL_ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(CAUSAL_ARCHITECTURES)}, got {arch!r}")
    transformers = require_transformers()
    config_class, model_class = CAUSAL_ARCHITECTURES[arch]
    return getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).float().eval()


def generation_config(**settings):
    """A ``transformers.GenerationConfig`` with ``settings`` (token ids, lengths, greedy or beam)."""
    return require_transformers().GenerationConfig(**settings)


def fast_tokenizer(tokenizer_object, **settings):
    """A ``transformers.PreTrainedTokenizerFast`` over a ``tokenizers.Tokenizer`` pipeline, with ``settings``
    (its special tokens, ``model_max_length``, ``padding_side``...)."""
    return require_transformers().PreTrainedTokenizerFast(tokenizer_object=tokenizer_object, **settings)


@contextlib.contextmanager
def _no_progress_bars(transformers):
    """transformers' own progress bars off (a few seconds' write needs none), as they were afterwards."""
    logging = transformers.utils.logging
    was = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging.enable_progress_bar()


def save(model, tokenizer, folder: str | Path) -> None:
    """``model.save_pretrained(folder)`` (without ``transformers``' progress bars) and
    ``tokenizer.save_pretrained(folder)``."""
    with _no_progress_bars(require_transformers()):
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
