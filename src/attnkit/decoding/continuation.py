"""A text model's continuation of a text, greedy or sampled (reproducible with a seed), for attnkit's
language model and a Hugging Face one alike: both decode through the one search every attnkit model uses
(:func:`attnkit.decoding.greedy_search` over the text model's decoder, ``sa.decoder()``: its ``start`` reads the
prompt into the model's key/value cache, each ``step`` one more token).

:func:`greedy_continuation` takes the argmax at every step; :func:`sample_continuation` draws each next token
from the model's distribution reshaped as ``transformers``' ``generate`` reshapes it
(:class:`attnkit.decoding.Sampling`):

- temperature ``T``: ``p_i ∝ exp(z_i / T)``, ``T < 1`` sharper, ``T > 1`` flatter;
- top-k (Fan et al. 2018, "Hierarchical Neural Story Generation"): only the ``k`` most likely tokens keep
  their mass.

The draw uses a :class:`torch.Generator` seeded with ``seed`` (the global random state is neither read nor
changed), so a seed gives the same continuation on every run of the same model on the same device.
"""

from __future__ import annotations

import math

import torch

from ..errors import InputError

__all__ = [
    "MAX_NEW_TOKENS",
    "TEMPERATURES",
    "check_sampling",
    "continuation",
    "greedy_continuation",
    "sample_continuation",
]

#: the most tokens a continuation (greedy or sampled) writes in one call
MAX_NEW_TOKENS = 512
#: the temperatures a sample takes: below, ``z / T`` is as good as greedy and can overflow to ``inf``
#: (a distribution of NaNs); above, every token is about as likely as any other
TEMPERATURES = (1e-3, 100.0)


def check_sampling(temperature, top_k, seed) -> None:
    """An :class:`~attnkit.errors.InputError` naming the argument unless ``temperature`` lies in
    :data:`TEMPERATURES`, ``top_k`` None or a whole number ≥ 1, and ``seed`` a whole number in ``0..2**63 − 1``."""
    low, high = TEMPERATURES
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise InputError(f"temperature must be a number in {low:g}..{high:g}, got {temperature!r}")
    if not math.isfinite(temperature) or not low <= temperature <= high:
        raise InputError(f"temperature must be a number in {low:g}..{high:g}, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InputError(f"top_k must be a whole number ≥ 1 (or none for every token), got {top_k!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be a whole number in 0..2**63-1, got {seed!r}")


def continuation(sa, text: str, *, max_new_tokens: int = 20, pick=None) -> tuple[list[int], int]:
    """``(ids, prompt length)``: ``text``'s tokens (with the tokenizer's special tokens), then at most
    ``max_new_tokens`` tokens written by text model ``sa`` through :func:`attnkit.decoding.greedy_search`
    (``pick``: the argmax, or a :class:`~attnkit.decoding.Sampling`), stopping after the end-of-text token."""
    from ..decoding import greedy_search

    sa._check_generates()
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise InputError(f"max_new_tokens must be a whole number, got {max_new_tokens!r}")
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise InputError(f"max_new_tokens must lie in 1..{MAX_NEW_TOKENS}, got {max_new_tokens}")
    ids, _ = sa.encode(text)
    limit = sa.max_length()
    if limit is not None and len(ids) + max_new_tokens > limit:
        raise InputError(
            f"the text has {len(ids)} tokens and max_new_tokens is {max_new_tokens}: more than the "
            f"{limit} positions {sa.source} reads"
        )
    eos = sa.eos_id
    prompt = torch.tensor([ids], device=sa.device)  # (1, n)
    with torch.no_grad():
        hyp = greedy_search(
            sa.decoder(),
            {"prompt": prompt},
            bos_id=0,
            eos_id=-1 if eos is None else eos,
            max_len=max_new_tokens,
            pick=pick,
        )[0]
    return list(ids) + hyp.tokens + ([eos] if hyp.finished else []), len(ids)


def greedy_continuation(sa, text: str, *, max_new_tokens: int = 20) -> tuple[list[int], int]:
    """``sa``'s greedy continuation of ``text`` (argmax at every step): :func:`continuation`."""
    return continuation(sa, text, max_new_tokens=max_new_tokens)


def sample_continuation(
    sa, text: str, *, max_new_tokens: int = 20, temperature: float = 1.0, top_k: int | None = None, seed: int = 0
) -> tuple[list[int], int]:
    """A sampled continuation of ``text`` by text model ``sa``: ``(ids, prompt length)`` as
    :func:`greedy_continuation` returns them, each new token drawn from ``softmax(top_k(z / temperature))``
    (module docstring) with a generator seeded with ``seed``."""
    from ..decoding import Sampling

    check_sampling(temperature, top_k, seed)
    generator = torch.Generator(device=sa.device).manual_seed(seed)
    return continuation(
        sa, text, max_new_tokens=max_new_tokens, pick=Sampling(float(temperature), top_k, None, generator)
    )
