"""The encoder-decoder Transformer (Vaswani et al. 2017) for translation, from attnkit's own parts.

Built from :class:`attnkit.attention.TransformerEncoder` / :class:`TransformerDecoder` (which
use attnkit's :class:`MultiHeadAttention`) and attnkit's position encodings; no
``torch.nn.Transformer``.

- **Embeddings**: one joint source/target embedding ``E`` (the sentencepiece vocabulary is
  shared by Spanish and English), multiplied by ``√d_model``, plus sinusoidal or learned
  positions, then dropout. With ``tie_embeddings`` the output projection is ``Eᵀ`` (plus a bias).
- **Encoder**: self-attention over the source with a key padding mask from ``src_lengths``.
- **Decoder**: causal self-attention, cross-attention over the encoder output, feed-forward;
  pre-norm by default (``norm_first``), in which case encoder and decoder end with a LayerNorm.

The model follows the interface of the RNN translators in :mod:`attnkit.models.seq2seq`:
``forward(src, src_lengths, tgt_in, *, need_weights)`` for teacher forcing, and the
``start`` / ``step`` / ``reorder`` protocol of :mod:`attnkit.decoding` for greedy and beam
search. ``step`` decodes one token with a key/value cache: each decoder layer keeps the
self-attention keys/values of the tokens decoded so far (one new position is appended per
step), and the cross-attention keys/values are projected from the encoder output once, in
:meth:`TransformerTranslator.start`, and reused by every step.

Target sequences must be right-padded (pads after the real tokens, as
:func:`attnkit.data.batching.collate` makes them): the causal mask then already keeps real
positions from seeing pads, so no target padding mask is needed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import LearnedPositionalEncoding, SinusoidalPositionalEncoding, padding_mask
from ..attention.transformer import DecoderLayerCache, TransformerDecoder, TransformerEncoder
from ..checks import LAYERS, POSITIVE, PROBABILITY, WIDTH, Range, check_fields
from ..config import ConfigRecord, option
from ..decoding import PER_SOURCE
from ..errors import ConfigError
from .base import AttentionMaps, LanguagePair, TiedOutputLayer
from .head_pruning import check_pruned_heads, full_heads, head_mean, shape_pruned
from .registry import ConfiguredModel, register_model

__all__ = ["TransformerConfig", "TransformerState", "TransformerTranslator"]

_POSITIONAL = ("sinusoidal", "learned")


@dataclass
class TransformerConfig(LanguagePair, ConfigRecord):
    """Hyper-parameters of the Transformer translator; saved as ``config.json`` beside the weights.

    ``max_len`` is the size of the learned position table (and the initial size of the
    sinusoidal one, which grows on demand). ``max_src_len`` is the longest source the
    :class:`attnkit.tasks.translation.Translator` accepts; ``None`` means ``max_len``.
    Validated when built.
    """

    flag_label = "transformer"  # how --help names this config's defaults

    vocab_size: int = option(8000, "vocabulary size (set from the tokenizer)", cli=False, check=Range(4))
    d_model: int = option(256, "Transformer: model width (embeddings, every sub-layer)", check=WIDTH)
    nhead: int = option(4, "Transformer: attention heads per layer", check=LAYERS)
    num_encoder_layers: int = option(3, "Transformer: encoder layers", check=LAYERS)
    num_decoder_layers: int = option(3, "Transformer: decoder layers", check=LAYERS)
    dim_feedforward: int = option(1024, "Transformer: feed-forward inner size", check=WIDTH)
    dropout: float = option(0.1, "dropout on embeddings, attention weights and sub-layer outputs", check=PROBABILITY)
    norm_first: bool = option(True, "Transformer: pre-norm (LayerNorm before each sub-layer)")
    positional: str = option("sinusoidal", "Transformer: position encoding", choices=_POSITIONAL)
    max_len: int = option(256, "size of the position table", cli=False, check=POSITIVE)
    tie_embeddings: bool = option(True, "one joint embedding for source, target and the output projection")
    pad_id: int = option(0, "padding token id", cli=False)
    bos_id: int = option(1, "beginning-of-sentence token id", cli=False)
    eos_id: int = option(2, "end-of-sentence token id", cli=False)
    max_src_len: int | None = option(
        None, "the longest source (subword tokens) the model accepts", cli=False, check=POSITIVE
    )
    alignment_layer: int | None = option(
        None,
        "Transformer: the cross-attention layer (1-based) that --guided-alignment supervises and `attnkit align "
        "--method guided` reads (with --guided-alignment, default: the penultimate)",
        check=LAYERS,
    )
    alignment_head: int | None = option(
        None,
        "Transformer: that layer's supervised head (1-based) (with --guided-alignment, default: 1)",
        check=LAYERS,
    )
    pruned_heads: dict[str, list[list[int]]] | None = option(
        None,
        "heads removed for good (attnkit.models.head_pruning): per site (encoder, self, cross) one list per layer "
        "of removed heads, 0-based, numbered as in the unpruned model; None: every layer has nhead heads",
        cli=False,
    )

    def __post_init__(self) -> None:
        if self.max_src_len is None:
            self.max_src_len = self.max_len
        self.validate()

    def validate(self) -> None:
        """Raise :class:`attnkit.errors.ConfigError` naming the first field that is out of range."""
        check_fields(self)
        self.check_language_pair()
        if self.d_model % self.nhead != 0:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by nhead ({self.nhead})")
        if self.positional not in _POSITIONAL:
            raise ConfigError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ConfigError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.positional == "learned" and self.max_src_len > self.max_len:
            raise ConfigError(
                f"max_src_len ({self.max_src_len}) exceeds the learned position table (max_len={self.max_len})"
            )
        for name, top in (("alignment_layer", self.num_decoder_layers), ("alignment_head", self.nhead)):
            v = getattr(self, name)
            if v is not None and v > top:
                raise ConfigError(f"{name} must be an int in 1..{top} (1-based), got {v!r}")
        check_pruned_heads(self)
        for name in ("pad_id", "bos_id", "eos_id"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < self.vocab_size:
                raise ConfigError(f"{name} must be a token id in [0, {self.vocab_size}), got {v!r}")


@dataclass
class TransformerState:
    """The decoder state of :class:`TransformerTranslator` (what :meth:`~TransformerTranslator.start` returns).

    ``memory (A, S, D)``: the encoder output; ``memory_mask (A, S)``: True at real tokens;
    ``cache``: one :class:`DecoderLayerCache` per decoder layer (self-attention keys/values so
    far, ``R`` rows; cross-attention keys/values projected once, ``A`` rows); ``step``: tokens
    decoded so far, i.e. the position of the next one; ``beams``: decoder rows per source row,
    ``R = A · beams``: rows ``a·beams … a·beams + beams - 1`` decode source row ``a`` (beam search's
    beams of one sentence share its memory and cross-attention keys, see :meth:`TransformerTranslator.reorder`).
    """

    memory: Tensor = field(metadata=PER_SOURCE)
    memory_mask: Tensor = field(metadata=PER_SOURCE)
    cache: list[DecoderLayerCache]
    step: int = 0
    beams: int = 1

    @property
    def rows(self) -> int:
        """Decoder rows ``R``."""
        return self.memory.shape[0] * self.beams


@register_model("transformer")
class TransformerTranslator(ConfiguredModel, TiedOutputLayer, nn.Module):
    """Encoder-decoder Transformer translator (see the module docstring).

    ``forward(src (B, S) long, src_lengths (B,), tgt_in (B, T) long, *, need_weights=False)``
    returns ``(logits (B, T, V), weights)``: ``weights`` is the last decoder layer's
    cross-attention averaged over heads, ``(B, T, S)``, when ``need_weights`` (else ``None``).
    """

    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.d_model = c.d_model
        self.embed_scale = math.sqrt(c.d_model)
        self.embedding = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        nn.init.normal_(self.embedding.weight, std=c.d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[c.pad_id].zero_()
        # separate vocabularies: the source has its own table and ``embedding`` is the target's
        self.src_embedding = None
        if c.src_vocab_size is not None:
            self.src_embedding = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
            nn.init.normal_(self.src_embedding.weight, std=c.d_model**-0.5)
            with torch.no_grad():
                self.src_embedding.weight[c.pad_id].zero_()
        if c.tie_embeddings or c.src_vocab_size is not None:
            self.tgt_embedding = None
        if c.tie_embeddings:
            self.out_proj = None
            self.out_bias = nn.Parameter(torch.zeros(c.vocab_size))
        elif c.src_vocab_size is not None:
            self.out_proj = nn.Linear(c.d_model, c.vocab_size)
            self.out_bias = None
        else:
            self.tgt_embedding = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
            nn.init.normal_(self.tgt_embedding.weight, std=c.d_model**-0.5)
            with torch.no_grad():
                self.tgt_embedding.weight[c.pad_id].zero_()
            self.out_proj = nn.Linear(c.d_model, c.vocab_size)
            self.out_bias = None
        if c.positional == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(c.d_model, dropout=c.dropout, max_len=c.max_len)
        else:
            self.positions = LearnedPositionalEncoding(c.d_model, c.max_len, dropout=c.dropout)
        self.encoder = TransformerEncoder(
            c.d_model, c.nhead, c.num_encoder_layers, c.dim_feedforward, c.dropout, norm_first=c.norm_first
        )
        self.decoder = TransformerDecoder(
            c.d_model, c.nhead, c.num_decoder_layers, c.dim_feedforward, c.dropout, norm_first=c.norm_first
        )
        shape_pruned(self)  # a pruned model's config: its layers' fewer heads

    # -- checks ------------------------------------------------------------------------------------
    def _check_ids(self, name: str, ids: Tensor, shape_hint: str) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
            got = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"{name} must be a {shape_hint} long tensor of token ids, got {got}")
        v = self.config.source_vocab_size if name == "src" else self.config.vocab_size
        if ids.numel() and (int(ids.max()) >= v or int(ids.min()) < 0):
            raise ValueError(f"{name} token ids must lie in [0, {v}), got [{int(ids.min())}, {int(ids.max())}]")

    def _check_src(self, src: Tensor, src_lengths: Tensor) -> None:
        self._check_ids("src", src, "(B, S)")
        if src.shape[1] < 1:
            raise ValueError(f"src must have at least one position, got shape {tuple(src.shape)}")
        if not isinstance(src_lengths, Tensor) or src_lengths.shape != (src.shape[0],):
            got = tuple(src_lengths.shape) if isinstance(src_lengths, Tensor) else type(src_lengths).__name__
            raise ValueError(f"src_lengths must have shape (B,) = ({src.shape[0]},), got {got}")
        if src_lengths.is_floating_point() or src_lengths.dtype == torch.bool:
            raise ValueError(f"src_lengths must be an integer tensor, got dtype {src_lengths.dtype}")
        if int(src_lengths.min()) < 1:
            raise ValueError("every source sentence needs at least one token (src_lengths >= 1)")
        if int(src_lengths.max()) > src.shape[1]:
            raise ValueError(
                f"src_lengths max {int(src_lengths.max())} exceeds src length S={src.shape[1]} "
                f"(src shape {tuple(src.shape)})"
            )

    # -- pieces ------------------------------------------------------------------------------------
    def _embed_tgt(self, tokens: Tensor, offset: int = 0) -> Tensor:
        emb = self.embedding if self.tgt_embedding is None else self.tgt_embedding
        return self.positions(emb(tokens) * self.embed_scale, offset)

    def _logits(self, h: Tensor) -> Tensor:
        return F.linear(h, *self.output_layer())

    def encode(self, src: Tensor, src_lengths: Tensor, *, need_weights: bool = False):
        """``(B, S), (B,) -> (memory (B, S, D), mask (B, S) True at real tokens, per-layer weights)``."""
        mask = padding_mask(src_lengths.to(src.device), src.shape[1])
        emb = self.embedding if self.src_embedding is None else self.src_embedding
        x = self.positions(emb(src) * self.embed_scale)  # (B, S, D)
        out = self.encoder(x, key_padding_mask=mask, need_weights=need_weights)
        return out.output, mask, out.weights

    # -- teacher forcing -----------------------------------------------------------------------------
    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        *,
        need_weights: bool | int = False,
        features_only: bool = False,
    ):
        """Teacher forcing: logits ``(B, T, V)`` for ``tgt_in`` (bos + target, right-padded) and,
        when ``need_weights``, the last decoder layer's cross-attention averaged over heads ``(B, T, S)``;
        ``need_weights=l`` (an int, 1-based) gives layer ``l``'s weights per head ``(B, H, T, S)``
        instead (the head guided alignment supervises).
        With ``features_only``: the decoder's output ``(B, T, D)`` instead of the logits (see
        :meth:`output_layer`)."""
        self._check_src(src, src_lengths)
        self._check_ids("tgt_in", tgt_in, "(B, T)")
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in must be (B={src.shape[0]}, T) like src {tuple(src.shape)}, got {tuple(tgt_in.shape)}"
            )
        layer = need_weights if isinstance(need_weights, int) and not isinstance(need_weights, bool) else None
        if layer is not None and not 1 <= layer <= len(self.decoder.layers):
            raise ValueError(f"need_weights must be a bool or a layer 1..{len(self.decoder.layers)}, got {layer}")
        memory, mask, _ = self.encode(src, src_lengths)
        out = self.decoder(
            self._embed_tgt(tgt_in),
            memory,
            memory_key_padding_mask=mask,
            need_weights=(layer - 1) if layer is not None else ("last" if need_weights else False),
        )
        if layer is not None:
            weights = out.cross_weights[layer - 1]  # (B, H, T, S)
        else:
            weights = head_mean(out.cross_weights[-1]) if need_weights else None  # (B, T, S)
        return (out.output if features_only else self._logits(out.output)), weights

    # -- incremental decoding protocol (attnkit.decoding) ----------------------------------------
    def start(self, src: Tensor, src_lengths: Tensor) -> TransformerState:
        """Encode the source once, and project every layer's cross-attention keys/values once."""
        self._check_src(src, src_lengths)
        memory, mask, _ = self.encode(src, src_lengths)
        return TransformerState(memory, mask, self.decoder.new_cache(memory), 0)

    def step_features(self, prev_tokens: Tensor, state: TransformerState):
        """``prev_tokens (B,)`` → ``(decoder output (B, D), new state, attention (B, S))``; :meth:`step`
        projects the output onto the vocabulary.

        The new state has its own cache objects (the old state is left as it was): the layers
        append to the copies, and cached tensors are never modified in place.
        """
        memory = state.memory
        if not isinstance(prev_tokens, Tensor) or prev_tokens.shape != (state.rows,):
            got = tuple(prev_tokens.shape) if isinstance(prev_tokens, Tensor) else type(prev_tokens).__name__
            raise ValueError(f"prev_tokens must have shape (B,) = ({state.rows},), got {got}")
        cache = [c.copy() for c in state.cache]
        y = self._embed_tgt(prev_tokens.unsqueeze(1), offset=state.step)  # (B, 1, D)
        # one query at the newest position may see every cached key: no causal mask needed
        if self.decoder.training:  # dropout on: the layers' forward
            out = self.decoder(
                y, memory, memory_key_padding_mask=state.memory_mask, causal=False, cache=cache, need_weights="last"
            )
            h, weights = out.output, out.cross_weights[-1]
        else:  # the same numbers without the layers' argument checks (TransformerDecoder.step)
            h, weights = self.decoder.step(y, cache, state.memory_mask)  # (B, 1, D), (B, H, 1, S)
        attention = head_mean(weights[:, :, 0])  # (B, S): last layer, heads averaged
        return h[:, 0], dataclasses.replace(state, cache=cache, step=state.step + 1), attention

    def reorder(self, state: TransformerState, index: Tensor, *, beams_only: bool = False) -> TransformerState:
        """Rows ``index`` of the state, in new containers: row ``i`` of the result is row ``index[i]``.

        The self-attention caches are gathered row by row. What depends on the source alone (the
        memory, its mask, the cross-attention caches) stays one row per *source*: when the new rows
        come in equal blocks from one source each (beam search: ``K`` beams per sentence), those
        blocks share it (``beams`` = the block size) and only the sources are selected, never
        copied per beam; otherwise it is expanded to one row per decoder row. With ``beams_only``
        (rows move only among the beams of a sentence, :func:`attnkit.decoding.reorder_state`) it is
        shared as it is."""
        caches = [c.self_attn.index_select(index) for c in state.cache]
        if beams_only:
            cache = [DecoderLayerCache(s, c.cross_attn) for s, c in zip(caches, state.cache)]
            return dataclasses.replace(state, cache=cache)
        source = torch.div(index, state.beams, rounding_mode="floor")  # (R',) each new row's source row
        sources, counts = torch.unique_consecutive(source, return_counts=True)
        if len(counts) and bool(counts.min() == counts.max()):  # equal blocks: one per source
            beams = int(counts[0])
        else:
            sources, beams = source, 1
        A = state.memory.shape[0]
        if len(sources) == A and bool(torch.equal(sources, torch.arange(A, device=sources.device))):
            memory, mask, cross = state.memory, state.memory_mask, [c.cross_attn for c in state.cache]
        else:
            memory, mask = state.memory.index_select(0, sources), state.memory_mask.index_select(0, sources)
            cross = [c.cross_attn.index_select(sources) for c in state.cache]
        cache = [DecoderLayerCache(s, x) for s, x in zip(caches, cross)]
        return dataclasses.replace(state, memory=memory, memory_mask=mask, cache=cache, beams=beams)

    # -- inspection ----------------------------------------------------------------------------------
    @torch.no_grad()
    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps:
        """Every layer's and head's attention for one teacher-forced pass (eval mode).

        Row ``t`` of the decoder maps is the position whose input is ``tgt_in[:, t]`` (and whose
        output is the next token); in ``dec_self`` column ``j`` is the same kind of position.
        ``alignment`` is the last layer's cross-attention averaged over heads, as the searches
        report it. A model with heads pruned (:mod:`attnkit.models.head_pruning`) shows them at their places
        in the unpruned model, all zero; ``alignment`` averages the heads it has. Shapes: ``enc_self (B, L, H, S, S)``, ``dec_self (B, L, H, T, T)``,
        ``cross (B, L, H, T, S)``.
        """
        self._check_src(src, src_lengths)
        self._check_ids("tgt_in", tgt_in, "(B, T)")
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in must be (B={src.shape[0]}, T) like src {tuple(src.shape)}, got {tuple(tgt_in.shape)}"
            )
        was_training = self.training
        self.eval()
        try:
            memory, mask, enc_w = self.encode(src, src_lengths, need_weights=True)
            out = self.decoder(self._embed_tgt(tgt_in), memory, memory_key_padding_mask=mask, need_weights=True)
        finally:
            self.train(was_training)
        c = self.config  # a pruned layer's heads at their places in the unpruned model, removed ones all zero

        def stack(site: str, ws: list) -> Tensor:
            return torch.stack([full_heads(w, c, site, i) for i, w in enumerate(ws)], 1)  # (B, L, H, ., .)

        return AttentionMaps(
            alignment=head_mean(out.cross_weights[-1]),
            enc_self=stack("encoder", enc_w),
            dec_self=stack("self", out.self_weights),
            cross=stack("cross", out.cross_weights),
            score="e_j = qᵀ k_j / √d_h",
        )
