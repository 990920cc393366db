"""Loading a Hugging Face model and its tokenizer by hub name or folder, with one-line errors.

``source`` is what :func:`attnkit.pretrained.hf_source` gives: a hub name (``Helsinki-NLP/opus-mt-es-en``,
from ``--model hf:NAME``) or a local folder. ``from_pretrained`` reads the hub's local cache first and
honours ``HF_HUB_OFFLINE=1`` (no network at all); a name that is neither cached nor reachable is one
:class:`HFModelError` line naming both ways to get it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AttnkitError

__all__ = ["HFModelError", "is_causal_lm", "load_pretrained", "require_transformers"]

INSTALL_HINT = "pip install 'attnkit[hf]'"


class HFModelError(AttnkitError, ValueError):
    """A Hugging Face model that cannot be used: transformers missing, not cached and not reachable,
    or a family attnkit does not adapt."""


def require_transformers():
    """The ``transformers`` module, or an :class:`HFModelError` saying which extra installs it."""
    try:
        import transformers
    except ImportError:
        raise HFModelError(
            f"Hugging Face models need the transformers library, which is not installed: {INSTALL_HINT}"
        ) from None
    return transformers


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _unreachable(name: str, exc: BaseException) -> HFModelError:
    from huggingface_hub import constants

    why = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else _first_line(exc)
    return HFModelError(
        f"cannot load hf:{name}: it is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and the hub "
        f"cannot be reached ({why}); either run once with network access (without HF_HUB_OFFLINE) to cache it, "
        f"or get it elsewhere (`huggingface-cli download {name} --local-dir DIR`) and give --model DIR"
    )


CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def is_causal_lm(config) -> bool:
    """Whether a config's ``architectures`` name a causal language model (a head that generates)."""
    return any(str(a).endswith(CAUSAL_LM_SUFFIXES) for a in getattr(config, "architectures", None) or [])


def load_pretrained(source: str, *, seq2seq: bool):
    """``(model, tokenizer)`` from ``source`` (hub name or folder), in float32 and eval mode, on the CPU:
    ``AutoModelForSeq2SeqLM`` when ``seq2seq``; else ``AutoModelForCausalLM`` when the config's
    ``architectures`` name a causal language model (``GPT2LMHeadModel``, ``LlamaForCausalLM``: it can
    generate), else ``AutoModel`` (the base model, for its attention: BERT and kin).
    The model keeps its default attention implementation (``sdpa``): :mod:`attnkit.hf.capture` reads
    the weights without eager mode."""
    transformers = require_transformers()
    import torch

    transformers.utils.logging.disable_progress_bar()  # attnkit's commands show their own progress
    is_folder = Path(source).is_dir()
    auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModel
    try:
        config = transformers.AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as exc:
        if is_folder:
            raise HFModelError(f"{source} is not a Hugging Face model folder: {_first_line(exc)}") from None
        raise _unreachable(source, exc) from None
    if not seq2seq and is_causal_lm(config):
        auto = transformers.AutoModelForCausalLM
    if seq2seq and not getattr(config, "is_encoder_decoder", False):
        raise HFModelError(
            f"{source} is a {config.model_type} model, not an encoder-decoder: it does not translate "
            "(encoder-only and decoder-only models show their self-attention instead)"
        )
    try:
        model = auto.from_pretrained(source, dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        if is_folder:
            raise HFModelError(f"cannot load the Hugging Face model in {source}: {_first_line(exc)}") from None
        raise _unreachable(source, exc) from None
    return model.eval(), tokenizer
