"""attnkit's decoder-only language model, in the two shapes people use (:class:`LanguageModel`).

``p(x_t | x_<t) = softmax(W_U · norm(h_L[t]))`` with ``h_0 = embed(x) (+ positions)`` and, per
layer (pre-norm, Radford et al. 2019 / Touvron et al. 2023):
``h' = h + Attn(norm₁(h))`` (causal self-attention), ``h'' = h' + MLP(norm₂(h'))``.

- ``shape="gpt2"``: learned positions, LayerNorm, GELU MLP (``4·d_model``), biases everywhere.
- ``shape="llama"``: rotary positions (RoPE), RMSNorm, SwiGLU (``8/3·d_model`` rounded up to 32), no
  biases, grouped-query attention (``n_kv_heads``).
- ``attention_only=True``: no MLP blocks (the attention-only models of Olsson et al. 2022, "In-context
  Learning and Induction Heads").

Built from :mod:`attnkit.attention` (:class:`~attnkit.attention.CausalSelfAttention`, rotary
positions, :class:`~attnkit.attention.SwiGLU`, the key/value cache). Parameter names follow Hugging
Face's Llama (``embed_tokens``, ``layers.i.self_attn.q_proj``, ``layers.i.mlp.gate_proj``,
``layers.i.input_layernorm``, ``norm``, ``lm_head``), so the export to ``LlamaForCausalLM`` is a
renaming, and to ``GPT2LMHeadModel`` a renaming with GPT-2's Conv1D transposes and its packed
``c_attn`` (see :mod:`attnkit.deploy.hf_lm_export`). The unembedding is tied to the embedding by
default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention import CausalSelfAttention, GeluMLP, KVCache, RotaryEmbedding, SwiGLU, swiglu_width
from ..config import ConfigRecord
from ..decoding.sampling import Sampling
from ..decoding.search import greedy_search, reorder_state
from .registry import ConfiguredModel

__all__ = ["SHAPES", "LanguageModel", "LanguageModelConfig", "LanguageModelOutput", "LanguageModelState"]

SHAPES = ("gpt2", "llama")


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass
class LanguageModelConfig(ConfigRecord):
    """The configuration of a :class:`LanguageModel`; validated on creation (``ValueError`` naming the field)."""

    vocab_size: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None  # grouped-query attention (llama shape); None = n_heads
    d_ff: int | None = None  # None: 4*d_model (gpt2), SwiGLU's 8/3*d_model rounded up to a multiple of 32 (llama)
    max_len: int = 512  # the longest sequence (learned positions' table; rotary has no table but the same limit)
    shape: str = "llama"  # "gpt2" | "llama"
    attention_only: bool = False  # no MLP blocks (Olsson et al.'s attention-only models)
    dropout: float = 0.0
    tie_embeddings: bool = True
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            _positive_int(name, getattr(self, name))
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
        if self.n_kv_heads is not None:
            _positive_int("n_kv_heads", self.n_kv_heads)
            if self.n_heads % self.n_kv_heads != 0:
                raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
            if self.shape == "gpt2" and self.n_kv_heads != self.n_heads:
                raise ValueError(
                    "n_kv_heads must equal n_heads (or be None) for shape='gpt2': GPT-2 has no grouped-query attention"
                )
        if self.d_ff is not None:
            _positive_int("d_ff", self.d_ff)
        if self.shape == "llama" and (self.d_model // self.n_heads) % 2 != 0:
            raise ValueError(
                f"d_model / n_heads must be even for rotary positions (shape='llama'), got {self.d_model // self.n_heads}"
            )
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.rope_theta, (int, float)) or self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta!r}")
        if not isinstance(self.norm_eps, (int, float)) or self.norm_eps <= 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps!r}")

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``n_kv_heads``, or ``n_heads`` when unset)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ff_width(self) -> int:
        """The MLP's hidden width (``d_ff``, or the shape's default)."""
        if self.d_ff is not None:
            return self.d_ff
        return 4 * self.d_model if self.shape == "gpt2" else swiglu_width(self.d_model)


@dataclass
class LanguageModelState:
    """The decoder state of a :class:`LanguageModel` (:meth:`LanguageModel.start`): one key/value cache per
    layer, and the prompt's last token, read at the first step (None after it)."""

    caches: list[KVCache]
    pending: Tensor | None


@dataclass
class LanguageModelOutput:
    """``logits (B, T, V)``; ``attention``: per layer ``(B, H, T, T)`` maps when ``need_weights``;
    with ``features_only`` no logits but ``features (B, T, D)``, the output layer's inputs."""

    logits: Tensor | None
    attention: list[Tensor] | None = None
    features: Tensor | None = None


class DecoderBlock(nn.Module):
    """One pre-norm decoder layer: ``h + Attn(norm₁(h))``, then ``+ MLP(norm₂(·))`` unless attention-only."""

    def __init__(self, config: LanguageModelConfig, rotary: RotaryEmbedding | None):
        super().__init__()
        gpt2 = config.shape == "gpt2"
        norm = nn.LayerNorm if gpt2 else nn.RMSNorm
        self.input_layernorm = norm(config.d_model, eps=config.norm_eps)
        self.self_attn = CausalSelfAttention(
            config.d_model, config.n_heads, config.kv_heads, bias=gpt2, dropout=config.dropout, rotary=rotary
        )
        self.dropout = nn.Dropout(config.dropout)
        if config.attention_only:
            self.post_attention_layernorm = self.mlp = None
        else:
            self.post_attention_layernorm = norm(config.d_model, eps=config.norm_eps)
            mlp = GeluMLP if gpt2 else SwiGLU
            self.mlp = mlp(config.d_model, config.ff_width, bias=gpt2)

    def forward(self, h: Tensor, cache: KVCache | None, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        attn, weights = self.self_attn(self.input_layernorm(h), cache=cache, need_weights=need_weights)
        h = h + self.dropout(attn)  # (B, T, D)
        if self.mlp is not None:
            h = h + self.dropout(self.mlp(self.post_attention_layernorm(h)))
        return h, weights


class LanguageModel(ConfiguredModel, nn.Module):
    """A decoder-only Transformer language model (see the module docstring); ``model_type``
    ``"language_model"`` in a checkpoint's ``config.json`` (:mod:`attnkit.models.registry`).

    ``forward(ids (B, T) int64, *, need_weights=False) -> LanguageModelOutput``, causal: the logits at
    ``t`` predict token ``t + 1`` from tokens ``0..t``; ``forward(None, embeds=(B, T, D))`` reads token
    embeddings given instead of ids (positions are still added: what the gradient attributions differentiate). With ``features_only=True`` it stops before the
    output layer and returns the final norm's output as ``features`` (the training loss projects them
    itself, in chunks, without making the ``(B, T, V)`` logits; :meth:`output_layer` gives the weights).
    :meth:`generate` continues a batch of prompts with a key/value cache (greedy at ``temperature=0``).
    """

    config_class = LanguageModelConfig
    model_type = "language_model"

    def __init__(self, config: LanguageModelConfig):
        super().__init__()
        if not isinstance(config, LanguageModelConfig):
            raise TypeError(f"config must be a LanguageModelConfig, got {type(config).__name__}")
        self.config = config
        gpt2 = config.shape == "gpt2"
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_positions = nn.Embedding(config.max_len, config.d_model) if gpt2 else None
        rotary = None if gpt2 else RotaryEmbedding(config.d_model // config.n_heads, theta=config.rope_theta)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(DecoderBlock(config, rotary) for _ in range(config.n_layers))
        self.norm = (nn.LayerNorm if gpt2 else nn.RMSNorm)(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.reset_parameters()
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: weights ``N(0, 0.02)``, biases 0, norms' gains 1."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                module.reset_parameters()

    def _check_ids(self, ids: Tensor, past: int = 0) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
            desc = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"ids must be an int64 tensor of shape (B, T), got {desc}")
        if past + ids.shape[1] > self.config.max_len:
            raise ValueError(f"ids: {past + ids.shape[1]} positions exceed max_len={self.config.max_len}")

    def _run(
        self,
        ids: Tensor | None,
        caches: list[KVCache] | None,
        need_weights: bool,
        features_only: bool = False,
        embeds: Tensor | None = None,
    ) -> LanguageModelOutput:
        past = 0 if caches is None else len(caches[0])
        h = self.embed_tokens(ids) if embeds is None else embeds  # (B, T, D)
        if self.embed_positions is not None:
            h = h + self.embed_positions(torch.arange(past, past + h.shape[1], device=h.device))
        h = self.dropout(h)
        maps = [] if need_weights else None
        for i, layer in enumerate(self.layers):
            h, w = layer(h, None if caches is None else caches[i], need_weights)
            if need_weights:
                maps.append(w)  # (B, H, T, past + T)
        h = self.norm(h)
        if features_only:
            return LanguageModelOutput(None, maps, h)  # features (B, T, D)
        return LanguageModelOutput(self.lm_head(h), maps)  # logits (B, T, V)

    def forward(
        self,
        ids: Tensor | None,
        *,
        need_weights: bool = False,
        features_only: bool = False,
        embeds: Tensor | None = None,
    ) -> LanguageModelOutput:
        if embeds is None:
            self._check_ids(ids)
        elif ids is not None or not isinstance(embeds, Tensor) or embeds.dim() != 3:
            raise ValueError(
                "embeds: give the token embeddings (B, T, D) instead of ids, not both; got "
                f"{tuple(embeds.shape) if isinstance(embeds, Tensor) else type(embeds).__name__}"
            )
        elif embeds.shape[-1] != self.config.d_model or embeds.shape[1] > self.config.max_len:
            raise ValueError(
                f"embeds must have shape (B, T <= {self.config.max_len}, {self.config.d_model}), got {tuple(embeds.shape)}"
            )
        return self._run(ids, None, need_weights, features_only, embeds)

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """``(weight (V, D), bias or None)`` of the output layer (the embedding's when tied)."""
        return self.lm_head.weight, self.lm_head.bias

    def new_caches(self) -> list[KVCache]:
        """One empty key/value cache per layer."""
        return [layer.self_attn.new_cache() for layer in self.layers]

    # -------------------------------------------------------- the IncrementalDecoder protocol (attnkit.decoding)
    def start(self, prompt: Tensor) -> LanguageModelState:
        """The decoder state after ``prompt (B, T)`` (at least one token a row, ``<s>`` at least): its first
        ``T − 1`` tokens in the key/value caches, its last token kept to be read at the first step (where the
        search offers bos): the same search decodes a translator from its source and this model from a prompt."""
        self._check_ids(prompt)
        if prompt.shape[1] == 0:
            raise ValueError("prompt must hold at least one token per row (a <s> at least)")
        caches = self.new_caches()
        if prompt.shape[1] > 1:
            self._run(prompt[:, :-1].long(), caches, False)
        return LanguageModelState(caches, prompt[:, -1].long())

    def step(self, prev_tokens: Tensor, state: LanguageModelState) -> tuple[Tensor, LanguageModelState, None]:
        """``(log_probs (R, V), state, None)``: one more token a row, ``prev_tokens (R,)`` (the prompt's last
        token instead, at the first step), read over the cached keys and values."""
        tok = state.pending if state.pending is not None else prev_tokens  # (R,)
        past = len(state.caches[0])
        if past + 1 > self.config.max_len:
            raise ValueError(f"max_len: decoding past the model's {self.config.max_len} positions")
        logits = self._run(tok[:, None], state.caches, False).logits[:, -1]  # (R, V)
        return torch.log_softmax(logits.float(), dim=-1), LanguageModelState(state.caches, None), None

    def reorder(self, state: LanguageModelState, index: Tensor) -> LanguageModelState:
        """Rows ``index`` of the state (every cache, the pending tokens)."""
        return reorder_state(state, index)

    @torch.no_grad()
    def generate(
        self,
        ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        eos_id: int | None = None,
    ) -> Tensor:
        """Continue ``ids (B, T)`` by up to ``max_new_tokens`` tokens: ``(B, T + n)``, through the one search
        every attnkit model decodes with (:func:`attnkit.decoding.greedy_search`, over :meth:`start`,
        :meth:`step` and :meth:`reorder`: each step feeds only the new token, reading the earlier keys and
        values from the per-layer cache). ``temperature=0``: greedy (argmax); otherwise a draw
        (:class:`attnkit.decoding.sampling.Sampling`: ``softmax(logits / temperature)`` over the ``top_k``
        most likely tokens and the ``top_p`` nucleus, with ``generator``). With ``eos_id`` a row ends at it
        and, as the batch stays rectangular, is filled with it while the others go on."""
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        if top_k is not None:
            _positive_int("top_k", top_k)
        self._check_ids(ids)
        if ids.shape[1] == 0:
            raise ValueError("ids must hold at least one token per row (a <s> at least)")
        if ids.shape[1] + max_new_tokens > self.config.max_len:
            raise ValueError(
                f"max_new_tokens: {ids.shape[1]} + {max_new_tokens} positions exceed max_len={self.config.max_len}"
            )
        out = ids.long()
        if max_new_tokens == 0:
            return out
        pick = None if temperature == 0 else Sampling(float(temperature), top_k, top_p, generator)
        end = -1 if eos_id is None else eos_id  # no eos: every row runs max_new_tokens steps
        hyps = greedy_search(self, {"prompt": out}, bos_id=0, eos_id=end, max_len=max_new_tokens, pick=pick)
        width = max(len(h.tokens) + int(h.finished) for h in hyps)
        rows = [h.tokens + [eos_id] * (width - len(h.tokens)) if eos_id is not None else h.tokens for h in hyps]
        return torch.cat([out, torch.tensor(rows, dtype=torch.long, device=out.device)], dim=1)  # (B, T + n)
