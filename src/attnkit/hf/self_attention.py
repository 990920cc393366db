"""Encoder-only (BERT and kin) and decoder-only (GPT-2, Llama and kin) Hugging Face models: every
layer's and head's self-attention over a text, its head mean and its rollout — what bertviz shows —
read from the running model (:mod:`attnkit.hf.capture`, no eager reload).

:class:`SelfAttentionModel` is the self-attention-model protocol: ``self_attention(text)`` gives one
:class:`SelfAttentionMaps` (every layer at once, for short texts and the views), ``stream(text,
on_layer)`` hands each layer's maps to a callback as the layer runs and keeps none of them (long
inputs: memory bounded by one layer's asked heads). The pieces include the special tokens the
tokenizer adds (``[CLS]``/``[SEP]``, ``<s>``): in a self-attention view they are positions like any
other, and often the ones attention parks on.

A decoder-only model loaded with its language-model head (``GPT2LMHeadModel``, ``LlamaForCausalLM``:
what ``architectures`` in its config names) also writes: :meth:`SelfAttentionModel.generate` is a
greedy continuation, and :meth:`SelfAttentionModel.log_probs` the log-probability of every next
token as a function of the input embeddings, which the gradient attributions of
:mod:`attnkit.attribution.generation` differentiate.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..decoding.continuation import MAX_NEW_TOKENS, greedy_continuation, sample_continuation
from ..models.text_model import SelfAttentionMaps, TextModelBase
from .capture import AttentionSite, attention_sites, capture_attention, untraceable
from .loading import HFModelError, load_pretrained
from .tokenizer import HFTokenizer
from .transformers_internals import attention_implementation, reorder_decoder_cache

__all__ = [
    "MAX_NEW_TOKENS",
    "HFDecoder",
    "SelfAttentionMaps",
    "SelfAttentionModel",
    "TextModelBase",
    "load_self_attention",
]


class SelfAttentionModel(TextModelBase):
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
            raise untraceable(
                model, "its layers have no attention module (a module whose class name ends with Attention)"
            )
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
        kv = getattr(cfg, "num_key_value_heads", None)
        self.num_kv_heads = int(kv) if kv else self.num_heads
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise untraceable(
                model, f"its {self.num_heads} query heads do not split into {self.num_kv_heads} key/value groups"
            )

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """``(ids, pieces)`` of ``text`` with the tokenizer's special tokens, pieces in the ``▁`` convention."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty str")
        ids = [int(i) for i in self.hf_tokenizer(text)["input_ids"]]
        return ids, [self.tokenizer.id_to_piece(i) for i in ids]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def can_generate(self) -> bool:
        """Whether the model writes text: a causal model with a language-model head."""
        return self.causal and self.model.get_output_embeddings() is not None

    def max_length(self) -> int | None:
        """The most positions the model reads (its config's ``max_position_embeddings``/``n_positions``), or None."""
        cfg = self.model.config
        found = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        return int(found) if found else None

    def _chosen(self, layers: Sequence[int] | None) -> list[AttentionSite]:
        """The attention sites of the asked layers (1-based numbers; None: every layer)."""
        if layers is None:
            return list(self.sites)
        wanted = set(self._numbers(layers, "layers", self.num_layers, "layer"))
        return [s for s in self.sites if s.layer in wanted]

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
        """Run the model on ``text`` (or on token ``ids``, given instead) once and call ``on_layer(layer,
        weights (len(heads), N, N))`` as each asked layer runs; nothing is kept. Returns the pieces.
        ``layers``/``heads`` and the ``layer`` handed to ``on_layer`` are 1-based numbers (default:
        every layer, every head). ``on_logits(logits (last, V))``, where given: the same pass's logits of
        the ``last`` positions (a model with a language-model head; the step scores of the attention rows
        need no pass of their own)."""
        ids, pieces = self._ids(text)
        sites = self._chosen(layers)
        head_index = None if heads is None else self._numbers(heads, "heads", self.num_heads, "head")
        # the capture counts sites and heads from 0 (tensor indices); the caller sees numbers from 1
        kwargs: dict = {}
        if on_logits is not None:
            self._check_generates()
            last = len(ids) if last is None else last
            if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= len(ids):
                raise ValueError(f"last must lie in 1..{len(ids)} (the number of tokens), got {last!r}")
            kwargs = self.last_logits_kwargs(last)
        with capture_attention(self.model, lambda s, w: on_layer(s.layer + 1, w[0]), sites=sites, heads=head_index):
            out = self.model(input_ids=torch.tensor([ids], device=self.device), **kwargs)
        if on_logits is not None:
            on_logits(out.logits[0, -last:])  # (last, V)
        return pieces

    # ------------------------------------------------------------------ writing (decoder-only)
    def _check_generates(self) -> None:
        if not self.can_generate:
            raise HFModelError(
                f"{self.source} does not write text (an encoder-only model, or one loaded without its "
                "language-model head): it has self-attention views only"
            )

    def generate(self, text: str, *, max_new_tokens: int = 20) -> tuple[list[int], int]:
        """Greedy continuation of ``text``: ``(ids, prompt length)``, ``ids`` the prompt's tokens (with the
        tokenizer's special tokens) and then at most ``max_new_tokens`` written ones (argmax at every
        step, over the model's own key/value cache, through the one search: :func:`attnkit.decoding.continuation.continuation`),
        stopping after the end-of-text token."""
        return greedy_continuation(self, text, max_new_tokens=max_new_tokens)

    @property
    def eos_id(self) -> int | None:
        """The end-of-text token's id, where the tokenizer has one."""
        eos = getattr(self.hf_tokenizer, "eos_token_id", None)
        return None if eos is None else int(eos)

    def decoder(self) -> HFDecoder:
        """The model as the search decodes it (:class:`HFDecoder`)."""
        self._check_generates()
        return HFDecoder(self.model)

    def last_logits_kwargs(self, last: int) -> dict:
        """The forward's keyword arguments that compute the logits of the last ``last`` positions only (the
        output layer is a large share of a pass over a long text with a large vocabulary) and build no
        key/value cache, as far as the model's ``forward`` takes them."""
        if isinstance(last, bool) or not isinstance(last, int) or last < 1:
            raise ValueError(f"last must be a positive number of positions, got {last!r}")
        try:
            params = inspect.signature(self.model.forward).parameters
        except (TypeError, ValueError):
            return {}
        kwargs = {"logits_to_keep": last} if "logits_to_keep" in params else {}
        if "use_cache" in params:
            kwargs["use_cache"] = False
        return kwargs

    @torch.no_grad()
    def next_token_logits(self, ids: Sequence[int], last: int) -> Tensor:
        """``(last, V)``: the logits after each of the last ``last`` of token ``ids`` (one forward pass)."""
        self._check_generates()
        ids = [int(i) for i in ids]
        if not 1 <= last <= len(ids):
            raise ValueError(f"last must lie in 1..{len(ids)} (the number of ids), got {last!r}")
        out = self.model(input_ids=torch.tensor([ids], device=self.device), **self.last_logits_kwargs(last))
        return out.logits[0, -last:]

    # ------------------------------------------------------------------ the text-model protocol's readings
    @property
    def family(self) -> str:
        """The family's name (``gpt2``, ``llama``…), as the answers report it."""
        return str(getattr(self.model.config, "model_type", "?"))

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer (the ids a prediction ranges over)."""
        head = self.model.get_output_embeddings()
        return int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)

    def dimensions(self) -> tuple[int, int, int]:
        """``(layers, width, heads)``: what a pass's memory grows with."""
        cfg = self.model.config
        width = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or 1
        return self.num_layers, int(width), self.num_heads

    def encode_plain(self, text: str) -> list[int]:
        """The ids of ``text`` without the tokenizer's special tokens."""
        return [int(i) for i in self.hf_tokenizer(text, add_special_tokens=False)["input_ids"]]

    def decode_plain(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` as the tokenizer writes it back (no clean-up of spaces)."""
        return self.hf_tokenizer.decode([int(i) for i in ids], clean_up_tokenization_spaces=False)

    def piece_id(self, piece: str) -> int | None:
        """The id of a vocabulary entry spelt as the vocabulary spells it (``Ġworld``), or None."""
        found = self.hf_tokenizer.get_vocab().get(piece)
        return None if found is None else int(found)

    @property
    def neutral_id(self) -> int | None:
        """The token that stands in for a removed one: ``<unk>``, else padding, else end-of-text (None: none)."""
        for name in ("unk_token_id", "pad_token_id", "eos_token_id"):
            found = getattr(self.hf_tokenizer, name, None)
            if found is not None:
                return int(found)
        return None

    def batch_logits(self, rows: Tensor) -> Tensor:
        """``(B, n, V)``: every position's logits of token ids ``rows (B, n)``, no key/value cache."""
        return self.model(input_ids=rows, use_cache=False).logits

    @property
    def special_ids(self) -> set[int]:
        """The ids of the tokenizer's special tokens."""
        return {int(i) for i in getattr(self.hf_tokenizer, "all_special_ids", []) or []}

    def fast_activations(self):
        """A context in which the model's composite GELU runs as one kernel (:func:`attnkit.hf.fused_activations.fused_gelu`)."""
        from .fused_activations import fused_gelu

        return fused_gelu(self.model)

    def logits_from_embeddings(self, embeddings: Tensor, last: int) -> Tensor:
        """``(B, last, V)``: the logits of the last ``last`` positions, the model run on ``embeddings (B, n, E)``."""
        return self.model(inputs_embeds=embeddings, **self.last_logits_kwargs(last)).logits[:, -last:]

    def sample(
        self, text: str, *, max_new_tokens: int = 20, temperature: float = 1.0, top_k: int | None = None, seed: int = 0
    ) -> tuple[list[int], int]:
        """A sampled continuation (:func:`attnkit.decoding.continuation.sample_continuation`): ``(ids, prompt length)``."""
        return sample_continuation(
            self, text, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, seed=seed
        )

    def attention_with_grad(self, ids: Sequence[int]) -> tuple[Tensor, list[Tensor]]:
        """``(logits (n, V), [weights (1, H, n, n) per layer])`` of token ``ids``, the weights those the model
        multiplied its values by, in the autograd graph (what a gradient with respect to attention needs; a
        gradient is taken with respect to these tensors themselves, so they keep their batch axis): run
        under eager attention (``set_attn_implementation``, the model's own put back after), grad enabled."""
        self._check_generates()
        before = attention_implementation(self.model)
        if before != "eager":
            self.model.set_attn_implementation("eager")
        try:
            with torch.enable_grad():
                out = self.model(
                    input_ids=torch.tensor([list(ids)], device=self.device), output_attentions=True, use_cache=False
                )
        finally:
            if before != "eager":
                self.model.set_attn_implementation(before)
        if not out.attentions or any(a is None for a in out.attentions):
            raise HFModelError(f"{self.source} returns no attention weights under eager attention")
        return out.logits[0], list(out.attentions)

    def embed(self, ids: Tensor) -> Tensor:
        """The input embeddings of token ids ``(..., n) -> (..., n, E)`` (the embedding layer only: positions
        are added inside the model, so a zero embedding keeps them)."""
        return self.model.get_input_embeddings()(ids)

    def log_probs(self, embeddings: Tensor) -> Tensor:
        """``embeddings (B, n, E) -> (B, n, V)``: log p of every next token after each position, the
        model run on these input embeddings (``inputs_embeds``), in float32 at least."""
        self._check_generates()
        logits = self.model(inputs_embeds=embeddings, use_cache=False).logits
        return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)


@dataclass
class HFDecoderState:
    """A ``transformers`` decoder's state for the search: its key/value cache (``past``; None before the first
    pass) and the prompt's last token, read at the first step (None after it)."""

    past: object
    pending: Tensor | None

    def index_select(self, index: Tensor) -> HFDecoderState:
        """Rows ``index`` (what :func:`attnkit.decoding.reorder_state` calls): the cache reordered in place
        (:func:`~attnkit.hf.transformers_internals.reorder_decoder_cache`), the pending tokens selected."""
        if self.past is not None:
            reorder_decoder_cache(self.past, index)
        return HFDecoderState(self.past, None if self.pending is None else self.pending.index_select(0, index))


class HFDecoder:
    """A ``transformers`` causal language model as an :class:`attnkit.decoding.IncrementalDecoder`: ``start``
    reads the prompt (all but its last token) into the model's own key/value cache; each ``step`` feeds one
    token a row (the prompt's last at the first step) and returns the next token's log-probabilities."""

    def __init__(self, model):
        self.model = model

    @torch.no_grad()
    def start(self, prompt: Tensor) -> HFDecoderState:
        past = None
        if prompt.shape[1] > 1:
            past = self.model(input_ids=prompt[:, :-1], use_cache=True).past_key_values
        return HFDecoderState(past, prompt[:, -1])

    @torch.no_grad()
    def step(self, prev_tokens: Tensor, state: HFDecoderState) -> tuple[Tensor, HFDecoderState, None]:
        tok = state.pending if state.pending is not None else prev_tokens  # (R,)
        res = self.model(input_ids=tok[:, None], past_key_values=state.past, use_cache=True)
        logits = res.logits[:, -1].float()  # (R, V)
        return torch.log_softmax(logits, dim=-1), HFDecoderState(res.past_key_values, None), None

    def reorder(self, state: HFDecoderState, index: Tensor) -> HFDecoderState:
        return state.index_select(index)


def load_self_attention(source: str, *, device: str = "cpu") -> SelfAttentionModel:
    """A :class:`SelfAttentionModel` from ``hf:NAME``, a hub name or a folder (see :mod:`attnkit.hf.loading`)."""
    from ..device import resolve_device
    from ..pretrained import HF_PREFIX

    source = str(source)
    source = source[len(HF_PREFIX) :] if source.startswith(HF_PREFIX) else source
    model, tok = load_pretrained(source, seq2seq=False)
    return SelfAttentionModel(model.to(resolve_device(device)), tok, source=source)
