"""The text-model protocol (what the analyses of a decoder-only model read: its pieces, its attention
over a text, its continuation, its next-token logits, its embeddings) implemented natively for attnkit's
own language model: :class:`LanguageModelText`, which :class:`~.inference.LanguageModelGenerator` is.

The same protocol as :class:`attnkit.hf.self_attention.SelfAttentionModel` implements for a
``transformers`` model, so :func:`attnkit.service.analyse`, ``attnkit explain`` and the decompositions
(:func:`attnkit.attribution.tracers.block_tracer` reads :attr:`model` natively) take either, and attnkit's
model is analysed as it runs, not through a converted twin. A text is read as the model was trained:
``<s>`` then its pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext

import torch
from torch import Tensor

from ...data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ...decoding.continuation import greedy_continuation, sample_continuation
from ...hooks import thread_hooks
from ...models.text_model import TextModelBase

__all__ = ["LanguageModelText"]


class LanguageModelText(TextModelBase):
    """The text-model protocol over ``self.model`` (a :class:`~attnkit.models.language_model.LanguageModel`)
    and ``self.tokenizer`` (attnkit's sentencepiece :class:`~attnkit.data.tokenizer.Tokenizer`); ``source``
    names the model in answers."""

    source: str = "attnkit language model"
    causal = True
    can_generate = True
    family = "attnkit language model"

    # ------------------------------------------------------------------ shape of the model
    @property
    def num_layers(self) -> int:
        return self.model.config.n_layers

    @property
    def num_heads(self) -> int:
        return self.model.config.n_heads

    @property
    def num_kv_heads(self) -> int:
        return self.model.config.kv_heads

    @property
    def vocab_size(self) -> int:
        return int(self.model.lm_head.weight.shape[0])

    @property
    def special_ids(self) -> set[int]:
        return {PAD_ID, BOS_ID, EOS_ID, UNK_ID}

    @property
    def neutral_id(self) -> int:
        """The token that stands in for a removed one: ``<unk>``."""
        return UNK_ID

    def batch_logits(self, rows: Tensor) -> Tensor:
        """``(B, n, V)``: every position's logits of token ids ``rows (B, n)``."""
        return self.model(rows).logits

    def dimensions(self) -> tuple[int, int, int]:
        """``(layers, width, heads)``: what a pass's memory grows with."""
        return self.num_layers, self.model.config.d_model, self.num_heads

    def max_length(self) -> int:
        """The most positions the model reads."""
        return self.model.config.max_len

    # ------------------------------------------------------------------ pieces
    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """``(ids, pieces)`` of ``text``: ``<s>`` then its pieces, as the model was trained."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty str")
        ids = [BOS_ID, *self.tokenizer.encode(text)]
        return ids, self.pieces_of(ids)

    def encode_plain(self, text: str) -> list[int]:
        """The ids of ``text`` without ``<s>``."""
        return list(self.tokenizer.encode(text))

    def decode_plain(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` as the tokenizer writes it back."""
        return self.tokenizer.decode([int(i) for i in ids])

    def piece_id(self, piece: str) -> int | None:
        """The id of vocabulary entry ``piece`` (``▁world``), or None when the vocabulary has no such piece."""
        i = int(self.tokenizer.piece_to_id(piece))
        return None if i == UNK_ID and piece != self.tokenizer.id_to_piece(UNK_ID) else i

    # ------------------------------------------------------------------ reading a text
    @torch.no_grad()
    def stream(
        self,
        text: str | Sequence[int],
        on_layer: Callable[[int, Tensor], None],
        *,
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
        on_logits: Callable[[Tensor], None] | None = None,
        last: int | None = None,
    ) -> list[str]:
        """Run the model on ``text`` (or token ids) once; ``on_layer(layer, weights (len(heads), N, N))`` for
        each asked layer (1-based numbers, default every layer and head), the weights taken from each block's
        output by a hook for this call (the model keeps none); ``on_logits(logits (last, V))``: that pass's
        logits of the last ``last`` positions. Returns the pieces."""
        ids, pieces = self._ids(text)
        wanted = set(
            range(self.num_layers) if layers is None else self._numbers(layers, "layers", self.num_layers, "layer")
        )
        index = None if heads is None else torch.tensor(self._numbers(heads, "heads", self.num_heads, "head"))
        last = len(ids) if last is None else last
        if on_logits is not None and (isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= len(ids)):
            raise ValueError(f"last must lie in 1..{len(ids)} (the number of tokens), got {last!r}")

        def watch(i: int):
            def hook(module, args, output):
                h, w = output
                if i in wanted:
                    w = w[0]  # (H, N, N)
                    on_layer(i + 1, w if index is None else w[index.to(w.device)])
                return h, None

            return hook

        with thread_hooks((layer, watch(i)) for i, layer in enumerate(self.model.layers)):
            out = self.model(torch.tensor([ids], device=self.device), need_weights=True)
        if on_logits is not None:
            on_logits(out.logits[0, -last:])  # (last, V)
        return pieces

    @torch.no_grad()
    def next_token_logits(self, ids: Sequence[int], last: int) -> Tensor:
        """``(last, V)``: the logits after each of the last ``last`` of token ``ids`` (one forward pass)."""
        ids = [int(i) for i in ids]
        if not 1 <= last <= len(ids):
            raise ValueError(f"last must lie in 1..{len(ids)} (the number of ids), got {last!r}")
        return self.model(torch.tensor([ids], device=self.device)).logits[0, -last:]

    def attention_with_grad(self, ids: Sequence[int]) -> tuple[Tensor, list[Tensor]]:
        """``(logits (n, V), [weights (1, H, n, n) per layer])`` of token ``ids``, each block's weights (taken by a
        hook for this call) the tensor its values were multiplied by, in the autograd graph, grad enabled (a
        gradient is taken with respect to these tensors themselves, so they keep their batch axis)."""
        ids, _ = self._ids(list(ids))
        maps: list[Tensor] = []

        def hook(module, args, output):
            maps.append(output[1])  # (1, H, n, n)
            return output[0], None

        with thread_hooks((layer, hook) for layer in self.model.layers), torch.enable_grad():
            logits = self.model(torch.tensor([ids], device=self.device), need_weights=True).logits[0]
        return logits, maps

    def embed(self, ids: Tensor) -> Tensor:
        """The token embeddings of ``ids (..., n) -> (..., n, D)`` (positions are added inside the model)."""
        return self.model.embed_tokens(ids)

    def logits_from_embeddings(self, embeddings: Tensor, last: int) -> Tensor:
        """``(B, last, V)``: the logits of the last ``last`` positions, the model run on ``embeddings (B, n, D)``."""
        features = self.model(None, embeds=embeddings, features_only=True).features  # (B, n, D)
        return self.model.lm_head(features[:, -last:])

    def log_probs(self, embeddings: Tensor) -> Tensor:
        """``embeddings (B, n, D) -> (B, n, V)``: log p of every next token, in float32 at least."""
        logits = self.logits_from_embeddings(embeddings, embeddings.shape[1])
        return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)

    def fast_activations(self):
        """attnkit's MLPs already run one kernel per activation: nothing to swap."""
        return nullcontext(self.model)

    # ------------------------------------------------------------------ writing
    def _check_generates(self) -> None:
        """Every attnkit language model writes text."""

    @property
    def eos_id(self) -> int:
        """The end-of-text token's id (``</s>``)."""
        return EOS_ID

    def decoder(self):
        """The model as the search decodes it: :class:`~attnkit.models.language_model.LanguageModel` implements
        ``start``/``step``/``reorder`` itself."""
        return self.model

    def generate(self, text: str, *, max_new_tokens: int = 20) -> tuple[list[int], int]:
        """Greedy continuation of ``text``: ``(ids, prompt length)``, ``<s>`` and the prompt's pieces, then at most
        ``max_new_tokens`` written ones (:func:`attnkit.decoding.continuation.continuation`), stopping after ``</s>``."""
        return greedy_continuation(self, text, max_new_tokens=max_new_tokens)

    def sample(
        self, text: str, *, max_new_tokens: int = 20, temperature: float = 1.0, top_k: int | None = None, seed: int = 0
    ) -> tuple[list[int], int]:
        """A sampled continuation of ``text`` (:func:`attnkit.decoding.continuation.sample_continuation`): ``(ids, prompt
        length)``, the same seed giving the same text."""
        return sample_continuation(
            self, text, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, seed=seed
        )
