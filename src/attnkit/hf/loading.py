"""Loading a Hugging Face model and its tokenizer by hub name or folder, with one-line errors.

``source`` is what :func:`attnkit.pretrained.hf_source` gives: a hub name (``Helsinki-NLP/opus-mt-es-en``,
from ``--model hf:NAME``) or a local folder. A hub name is read **offline first**: from the hub's local
cache with ``local_files_only`` (``HF_HUB_OFFLINE``'s semantics: no request at all); only a name that is not
cached goes to the hub, and only after one short probe says the hub answers. So a name that is neither
cached nor reachable is one :class:`HFModelError` line naming both ways to get it, within the probe's few
seconds, instead of ``huggingface_hub``'s minute of retries and their log lines. ``HF_HUB_OFFLINE=1``
skips the probe.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AttnkitError

__all__ = ["HFModelError", "hub_unreachable", "is_causal_lm", "load_pretrained", "require_transformers"]

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


#: How long the one probe of the hub waits for an answer, in seconds.
HUB_PROBE_TIMEOUT = 3.0


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT) -> str | None:
    """Why the Hugging Face hub (``HF_ENDPOINT``, default huggingface.co) cannot be reached, or None when it
    answers: one HEAD request through ``huggingface_hub``'s own HTTP session (its proxies and certificates),
    no retry. Any answer at all, an error status included, means the hub is there."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as exc:  # no answer, whatever the cause: DNS, refused, timeout, TLS
        return f"{constants.ENDPOINT}: {_first_line(exc)}"
    return None


def _unreachable(name: str, why: str) -> HFModelError:
    from huggingface_hub import constants

    why = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else why
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
    transformers.utils.logging.disable_progress_bar()  # attnkit's commands show their own progress
    if Path(source).is_dir():
        return _load(transformers, source, seq2seq, folder=True)
    from huggingface_hub import constants

    try:  # offline first: the local cache, no request
        return _load(transformers, source, seq2seq, local_files_only=True)
    except HFModelError:
        raise
    except (OSError, ValueError) as exc:  # not (wholly) cached
        why = _first_line(exc)
    if constants.HF_HUB_OFFLINE:
        raise _unreachable(source, why) from None
    unreachable = hub_unreachable()
    if unreachable is not None:
        raise _unreachable(source, unreachable) from None
    return _load(transformers, source, seq2seq)


def _load(transformers, source: str, seq2seq: bool, *, folder: bool = False, local_files_only: bool = False):
    """:func:`load_pretrained`'s ``from_pretrained`` calls, from a folder, the cache alone or the hub."""
    import torch

    where = {"local_files_only": True} if local_files_only else {}
    auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModel
    try:
        config = transformers.AutoConfig.from_pretrained(source, **where)
    except (OSError, ValueError) as exc:
        if folder:
            raise HFModelError(f"{source} is not a Hugging Face model folder: {_first_line(exc)}") from None
        if local_files_only:
            raise
        raise _unreachable(source, _first_line(exc)) from None
    if not seq2seq and is_causal_lm(config):
        auto = transformers.AutoModelForCausalLM
    if seq2seq and not getattr(config, "is_encoder_decoder", False):
        raise HFModelError(
            f"{source} is a {config.model_type} model, not an encoder-decoder: it does not translate "
            "(encoder-only and decoder-only models show their self-attention instead)"
        )
    try:
        model = auto.from_pretrained(source, dtype=torch.float32, **where)
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **where)
    except (OSError, ValueError) as exc:
        if folder:
            raise HFModelError(f"cannot load the Hugging Face model in {source}: {_first_line(exc)}") from None
        if local_files_only:
            raise
        raise _unreachable(source, _first_line(exc)) from None
    return model.eval(), tokenizer
