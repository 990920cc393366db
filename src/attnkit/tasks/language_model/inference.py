"""Continuing text with a trained language model: :class:`LanguageModelGenerator` (model + tokenizer).

A prompt is read as the training data was written (:mod:`.data`): ``<s>`` then its pieces, no ``</s>``;
:meth:`LanguageModel.generate <attnkit.models.language_model.LanguageModel.generate>` continues it with
the key/value cache, greedily (``temperature=0``, the default) or by drawing from
``softmax(logits / temperature)`` over the ``top_k`` most likely pieces, until ``</s>`` or
``max_new_tokens``. Each prompt is continued on its own (the model takes no padding), in order, from one
``torch.Generator`` seeded with ``seed``: the same call gives the same texts.

Each new piece's **score** is its log-probability under the model, ``log softmax(logits)[token]``
(natural log, before temperature and top-k), from one forward pass over the whole text: how likely the
model finds what it wrote, whichever way it was chosen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...data.tokenizer import BOS_ID, EOS_ID, MODEL_FILENAME, Tokenizer
from ...errors import InputError
from ...models.language_model import LanguageModel
from ..wrapper import InferenceWrapper
from .text_model import LanguageModelText

__all__ = ["Continuation", "LanguageModelGenerator"]


@dataclass
class Continuation:
    """One prompt's continuation: ``text`` is the prompt and its continuation decoded together,
    ``continuation`` the new pieces alone; ``ids`` the new ids (``</s>`` included when the model ended
    the text), ``scores`` their log-probabilities; ``ended``: whether the model wrote ``</s>``."""

    prompt: str
    text: str
    continuation: str
    prompt_ids: list[int]
    ids: list[int]
    scores: list[float]
    ended: bool

    def to_dict(self) -> dict:
        return asdict(self)


class LanguageModelGenerator(InferenceWrapper, LanguageModelText):
    """A trained :class:`~attnkit.models.language_model.LanguageModel` and its tokenizer; :meth:`load` reads
    a checkpoint folder (``config.json``, ``model.safetensors``, ``tokenizer.model``). It is also a text model
    (:class:`~.text_model.LanguageModelText`): what ``attnkit explain`` and the analyses read, natively."""

    companion_file = MODEL_FILENAME
    kind = "a language model (attnkit train language-model)"
    model_type = "language_model"

    def __init__(self, model: LanguageModel, tokenizer: Tokenizer):
        if not isinstance(model, LanguageModel):
            raise TypeError(f"model must be a LanguageModel, got {type(model).__name__}")
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
        self.model = model.eval()
        self.tokenizer = tokenizer

    @classmethod
    def read_companion(cls, path: Path) -> Tokenizer:
        return Tokenizer.load(path)

    @property
    def context(self) -> int:
        """The longest text (prompt and continuation, ``<s>`` included) the model reads."""
        return self.model.config.max_len

    def encode_prompt(self, prompt: str) -> list[int]:
        """``<s>`` and the prompt's pieces (an empty prompt: ``<s>`` alone, a text from its start)."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompts must be str, got {type(prompt).__name__}")
        return [BOS_ID, *self.tokenizer.encode(prompt)]

    @torch.no_grad()
    def continue_text(
        self,
        prompts: str | list[str],
        max_new_tokens: int = 50,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int = 0,
    ) -> list[Continuation]:
        """Continue each prompt by up to ``max_new_tokens`` pieces (see the module docstring)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts must be a str or a list of str, got {type(prompts).__name__}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise InputError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be an int >= 1, got {top_k!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InputError(f"seed must be an int >= 0, got {seed!r}")
        encoded = [self.encode_prompt(p) for p in prompts]
        for p, ids in zip(prompts, encoded):
            if len(ids) + max_new_tokens > self.context:
                raise InputError(
                    f"max_new_tokens: the prompt {p[:40]!r} holds {len(ids)} pieces (with <s>); with {max_new_tokens} "
                    f"new ones that is past the model's context of {self.context}"
                )
        generator = torch.Generator(device=self.device).manual_seed(seed)
        out = []
        for prompt, ids in zip(prompts, encoded):
            start = torch.tensor([ids], device=self.device)  # (1, T)
            full = self.model.generate(
                start, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator, eos_id=EOS_ID
            )  # (1, T + n)
            new = full[0, len(ids) :].tolist()
            ended = EOS_ID in new
            if ended:
                new = new[: new.index(EOS_ID) + 1]
            logp = self.model(full[:, : len(ids) + len(new)]).logits.float().log_softmax(-1)  # (1, T + n, V)
            scores = [float(logp[0, len(ids) - 1 + i, t]) for i, t in enumerate(new)]
            words = [t for t in new if t != EOS_ID]
            out.append(
                Continuation(
                    prompt=prompt,
                    text=self.tokenizer.decode(ids[1:] + words),
                    continuation=self.tokenizer.decode(words),
                    prompt_ids=ids,
                    ids=new,
                    scores=scores,
                    ended=ended,
                )
            )
        return out
