"""A sampled continuation of a decoder-only model (GPT-2, Llama and kin), reproducible with a seed.

:meth:`attnkit.hf.self_attention.SelfAttentionModel.generate` writes the greedy continuation (argmax at
every step); :func:`sample_continuation` draws each next token instead from the model's distribution
reshaped by ``transformers``' own logits warpers, in the order ``transformers``' ``generate`` applies
them:

- temperature ``T`` (:class:`transformers.TemperatureLogitsWarper`): ``p_i ∝ exp(z_i / T)``, ``T < 1``
  sharper, ``T > 1`` flatter;
- top-k (:class:`transformers.TopKLogitsWarper`; Fan et al. 2018, "Hierarchical Neural Story
  Generation"): only the ``k`` most likely tokens keep their mass.

The draw uses a :class:`torch.Generator` seeded with ``seed`` (the global random state is neither read nor
changed), so a seed gives the same continuation on every run of the same model on the same device.
"""

from __future__ import annotations

import math

import torch

from ..errors import InputError

__all__ = ["MAX_NEW_TOKENS", "TEMPERATURES", "check_sampling", "sample_continuation"]

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


@torch.no_grad()
def sample_continuation(
    sa, text: str, *, max_new_tokens: int = 20, temperature: float = 1.0, top_k: int | None = None, seed: int = 0
) -> tuple[list[int], int]:
    """A sampled continuation of ``text`` by ``sa`` (a :class:`~attnkit.hf.self_attention.SelfAttentionModel`
    that writes): ``(ids, prompt length)`` as :meth:`~attnkit.hf.self_attention.SelfAttentionModel.generate`
    returns them, each new token drawn from ``softmax(top_k(z / temperature))`` (module docstring) over the
    model's own key/value cache, stopping after the end-of-text token or ``max_new_tokens``."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

    sa._check_generates()
    check_sampling(temperature, top_k, seed)
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
    warpers = LogitsProcessorList([TemperatureLogitsWarper(float(temperature))])
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    device = sa.device
    generator = torch.Generator(device=device).manual_seed(seed)
    eos = getattr(sa.hf_tokenizer, "eos_token_id", None)
    out = list(ids)
    step = torch.tensor([ids], device=device)  # (1, n): the prompt, then one token at a time
    past = None
    for _ in range(max_new_tokens):
        res = sa.model(input_ids=step, past_key_values=past, use_cache=True)
        past = res.past_key_values
        scores = warpers(torch.tensor([out], device=device), res.logits[:, -1].float())  # (1, V)
        nxt = int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))
        out.append(nxt)
        if eos is not None and nxt == eos:
            break
        step = torch.tensor([[nxt]], device=device)
    return out, len(ids)
