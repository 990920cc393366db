"""RNN encoder-decoders for translation: RNNencdec (one context vector) and RNNsearch (attention).

**RNNencdec** (Cho et al. 2014; the plain encoder-decoder of Sutskever et al. 2014): a GRU reads the source and its final
state is the single context vector ``c``; every decoder step sees the same ``c``:
``s_t = GRU([E y_{t-1}; c], s_{t-1})``, ``p(y_t) = softmax(W_out tanh(W_o [s_t; c; E y_{t-1}]))``.

**RNNsearch** (Bahdanau et al. 2015): a bidirectional GRU gives annotations
``h_j = [h→_j; h←_j]``; at step ``t`` the previous decoder state scores every annotation,
``e_tj = vᵀ tanh(W s_{t-1} + U h_j)``, ``α_t = softmax(e_t)``, ``c_t = Σ_j α_tj h_j``, then
``s_t = GRU([E y_{t-1}; c_t], s_{t-1})`` and the output comes from ``[s_t; c_t; E y_{t-1}]``.
``U h_j`` depends on the source only, so it is computed once per sentence
(:meth:`attnkit.attention.Attention.prepare`), not once per step. The score is a constructor
option (``additive``, ``dot``, ``general``, ``scaled_dot``): Luong-style variants for free.

``rnn_attention="luong"`` moves the attention after the GRU step (Luong et al. 2015's global
attention without input feeding; OpenNMT-py's ``-input_feed 0``): ``s_t = GRU(E y_{t-1}, s_{t-1})``,
``e_tj = vᵀ tanh(W s_t + U h_j)``, and ``c_t`` enters only the output. The GRU then no longer waits
for the context, so teacher forcing runs it over the whole target in one call and scores every step's
attention at once (the fused additive score), instead of a Python loop of single steps.

``encoder_dim`` sets the encoder GRU's width apart from the decoder's (by default both are
``hidden_dim``, so the annotations have ``2 hidden_dim`` units). OpenNMT-py's ``brnn`` of size ``H``
is ``hidden_dim=H, encoder_dim=H/2``: annotations of ``H`` units, a quarter of the encoder's
multiply-adds per direction.

Both models follow the incremental decoding protocol of :mod:`attnkit.decoding`
(``start`` / ``step`` / ``reorder``) and return every step's attention weights on request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import Attention, PreparedMemory, padding_mask
from ..attention.scores import SCORE_ALIASES, canonical_score_name
from ..checks import POSITIVE, PROBABILITY, WIDTH, Range, check_fields
from ..config import ConfigRecord, option
from ..decoding import PER_SOURCE, reorder_state
from ..errors import ConfigError
from .base import AttentionMaps, LanguagePair, TiedOutputLayer
from .registry import ConfiguredModel, register_model

#: Where RNNsearch's attention sits in the decoder step (see the module docstring).
RNN_ATTENTION = ("bahdanau", "luong")

__all__ = ["RNNEncDec", "RNNSearch", "RNNState", "Seq2SeqConfig"]


@dataclass
class Seq2SeqConfig(LanguagePair, ConfigRecord):
    """Hyper-parameters of the RNN translators (RNNencdec and RNNsearch); saved as ``config.json``.

    Which of the two a config builds is the checkpoint's ``model_type`` (the model registry), not
    a field here. The attention options (``attn_dim``, ``score``) apply to RNNsearch only.
    """

    flag_label = "rnn"  # how --help names this config's defaults

    vocab_size: int = option(8000, "vocabulary size (set from the tokenizer)", cli=False, check=Range(4))
    emb_dim: int = option(256, "RNN: word embedding size", check=WIDTH)
    hidden_dim: int = option(
        256, "RNN: GRU size (the decoder state; per encoder direction unless --encoder-dim)", check=WIDTH
    )
    encoder_dim: int | None = option(
        None,
        "RNN: encoder GRU size (per direction for RNNsearch; default hidden_dim). "
        "OpenNMT-py's brnn of size H has H/2 per direction",
        check=WIDTH,
    )
    attn_dim: int = option(256, "RNNsearch: size of the additive score's tanh layer", check=WIDTH)
    score: str = option("additive", "RNNsearch: the score function", choices=tuple(SCORE_ALIASES))
    rnn_attention: str = option(
        "bahdanau",
        "RNNsearch: 'bahdanau' scores s_{t-1} and feeds c_t into the GRU; "
        "'luong' scores the new s_t after the GRU (no input feeding), so training "
        "runs the GRU and the attention over all steps at once",
        choices=RNN_ATTENTION,
    )
    dropout: float = option(0.2, "dropout on embeddings, decoder states and the deep output", check=PROBABILITY)
    tie_embeddings: bool = option(True, "the output projection shares the (joint) embedding matrix")
    param_init: float = option(
        0.1,
        "RNN: draw every weight uniformly from [-x, x] (as OpenNMT-py's -param_init); "
        "0 keeps each layer's PyTorch default",
        check=PROBABILITY,
    )
    pad_id: int = option(0, "padding token id", cli=False)
    bos_id: int = option(1, "beginning-of-sentence token id", cli=False)
    eos_id: int = option(2, "end-of-sentence token id", cli=False)
    max_src_len: int = option(200, "the longest source (subword tokens) the model accepts", cli=False, check=POSITIVE)

    def __post_init__(self) -> None:
        check_fields(self)
        self.check_language_pair()
        if self.rnn_attention not in RNN_ATTENTION:
            raise ConfigError(f"rnn_attention must be one of {RNN_ATTENTION}, got {self.rnn_attention!r}")
        try:
            canonical_score_name(self.score)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def enc_dim(self) -> int:
        """The encoder GRU's size (per direction): ``encoder_dim``, or ``hidden_dim`` when not set."""
        return self.encoder_dim or self.hidden_dim


@dataclass
class RNNState:
    """The decoder state of the RNN translators (what :meth:`_RNNTranslator.start` returns).

    ``h (B, H)``: the decoder state ``s_{t-1}``. RNNsearch: ``memory`` (``U h_j + b`` and the
    annotations ``h_j``, prepared once per sentence) and ``mask (B, S)`` (True at real tokens).
    RNNencdec: ``context (B, H)``, the one fixed vector ``c``.
    """

    h: Tensor
    memory: PreparedMemory | None = field(default=None, metadata=PER_SOURCE)
    mask: Tensor | None = field(default=None, metadata=PER_SOURCE)
    context: Tensor | None = field(default=None, metadata=PER_SOURCE)


class _RNNTranslator(ConfiguredModel, TiedOutputLayer, nn.Module):
    """Shared parts: embeddings, decoder GRU cell, deep output, the training loop over steps."""

    model_type = "?"  # set by @register_model

    def __init__(self, config: Seq2SeqConfig, context_dim: int):
        super().__init__()
        c = self.config = config
        self.embedding = nn.Embedding(c.vocab_size, c.emb_dim, padding_idx=c.pad_id)
        nn.init.normal_(self.embedding.weight, std=c.emb_dim**-0.5)
        with torch.no_grad():
            self.embedding.weight[c.pad_id].zero_()
        # separate vocabularies: the source has its own table; ``embedding`` is the target's (and the tied output)
        self.src_embedding = None
        if c.src_vocab_size is not None:
            self.src_embedding = nn.Embedding(c.src_vocab_size, c.emb_dim, padding_idx=c.pad_id)
            nn.init.normal_(self.src_embedding.weight, std=c.emb_dim**-0.5)
            with torch.no_grad():
                self.src_embedding.weight[c.pad_id].zero_()
        self.context_dim = context_dim
        self.input_feed = c.rnn_attention == "bahdanau"  # c_t is an input of the GRU
        if self.input_feed:
            self.decoder_cell = nn.GRUCell(c.emb_dim + context_dim, c.hidden_dim)
        else:  # one module for the whole target (training) and for one step (decoding)
            self.decoder_rnn = nn.GRU(c.emb_dim, c.hidden_dim, batch_first=True)
        self.deep_output = nn.Linear(c.hidden_dim + context_dim + c.emb_dim, c.emb_dim)
        self.out_proj = None if c.tie_embeddings else nn.Linear(c.emb_dim, c.vocab_size)
        self.out_bias = nn.Parameter(torch.zeros(c.vocab_size)) if c.tie_embeddings else None
        self.drop = nn.Dropout(c.dropout)

    def _init_parameters(self) -> None:
        """Uniform ``U(-x, x)`` for every weight when ``param_init = x > 0`` (Sutskever et al. 2014 and
        OpenNMT-py use 0.1; every layer's scale is then the same); the padding row stays zero."""
        x = float(self.config.param_init)
        if x > 0:
            with torch.no_grad():
                for p in self.parameters():
                    p.uniform_(-x, x)
                self.embedding.weight[self.config.pad_id].zero_()
                if self.src_embedding is not None:
                    self.src_embedding.weight[self.config.pad_id].zero_()

    # -- pieces every model provides ---------------------------------------------------------------
    def encode(self, src: Tensor, src_lengths: Tensor) -> RNNState:  # pragma: no cover - abstract
        raise NotImplementedError

    def _context(self, s_prev: Tensor, state: RNNState, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError  # pragma: no cover - abstract

    def _raw_scores(self, query: Tensor, state: RNNState) -> Tensor | None:
        """The scores ``e_tj`` before the softmax for ``query (B, H)``: ``(B, S)``; None without attention."""
        return None

    # -- shared --------------------------------------------------------------------------------------
    config_class = Seq2SeqConfig

    def _check_src(self, src: Tensor, src_lengths: Tensor) -> None:
        if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype != torch.long:
            raise ValueError(f"src must be a (B, S) long tensor of token ids, got {getattr(src, 'shape', type(src))}")
        if src_lengths.shape != (src.shape[0],):
            raise ValueError(f"src_lengths must have shape (B,) = ({src.shape[0]},), got {tuple(src_lengths.shape)}")
        if int(src_lengths.min()) < 1:
            raise ValueError("every source sentence needs at least one token (src_lengths >= 1)")
        v = self.config.source_vocab_size
        if int(src.max()) >= v or int(src.min()) < 0:
            raise ValueError(f"src token ids must lie in [0, {v}), got [{int(src.min())}, {int(src.max())}]")

    def embed_source(self, src: Tensor) -> Tensor:
        """Source embeddings ``(B, S) -> (B, S, E)``: the source table with separate vocabularies, else the joint one."""
        return (self.embedding if self.src_embedding is None else self.src_embedding)(src)

    def _features(self, s: Tensor, c: Tensor, y_emb: Tensor) -> Tensor:
        """The deep output ``tanh(W_o [s_t; c_t; E y_{t-1}])``: ``(..., H), (..., C), (..., E) -> (..., E)``."""
        return self.drop(torch.tanh(self.deep_output(torch.cat([s, c, y_emb], dim=-1))))

    def _logits(self, s: Tensor, c: Tensor, y_emb: Tensor) -> Tensor:
        """``W_out tanh(W_o [s_t; c_t; E y_{t-1}])``. ``(..., H), (..., C), (..., E) -> (..., V)``."""
        return F.linear(self._features(s, c, y_emb), *self.output_layer())

    def _decoder_step(self, y_emb: Tensor, state: RNNState, need_weights: bool):
        """One decoder step from ``s_{t-1}``: context, new state. Returns (s_t, c_t, α_t)."""
        if not self.input_feed:  # Luong: the step first, then attention from s_t
            s = self.decoder_rnn(y_emb.unsqueeze(1), state.h.unsqueeze(0))[1][0]  # (B, H)
            c, alpha = self._context(s, state, need_weights)
            return s, c, alpha
        c, alpha = self._context(state.h, state, need_weights)
        s = self.decoder_cell(torch.cat([y_emb, c], dim=-1), state.h)  # (B, H)
        return s, c, alpha

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        *,
        need_weights: bool = False,
        features_only: bool = False,
    ):
        """Teacher forcing: logits ``(B, T, V)`` for ``tgt_in`` (bos + target), and the weights
        ``(B, T, S)`` of every step when ``need_weights`` (``None`` for RNNencdec). With
        ``features_only``: the output layer's inputs ``(B, T, E)`` instead of the logits (the loss
        then projects only the real target positions, :meth:`output_layer`)."""
        out = self._features if features_only else self._logits
        self._check_src(src, src_lengths)
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must be (B={src.shape[0]}, T), got {tuple(tgt_in.shape)}")
        state = self.encode(src, src_lengths)
        y_emb = self.drop(self.embedding(tgt_in))  # (B, T, E)
        if not self.input_feed:  # every step at once: one GRU call, one attention call
            s_all, _ = self.decoder_rnn(y_emb, state.h.unsqueeze(0))  # (B, T, H)
            c_all, weights = self._context(s_all, state, need_weights)  # (B, T, C), (B, T, S)
            return out(self.drop(s_all), c_all, y_emb), weights
        states, contexts, alphas = [], [], []
        for y_t in y_emb.unbind(1):  # unbind: one gradient buffer for all steps, not one per slice
            s, c, a = self._decoder_step(y_t, state, need_weights)
            state.h = s
            states.append(s)
            contexts.append(c)
            alphas.append(a)
        s_all = self.drop(torch.stack(states, 1))  # (B, T, H)
        c_all = torch.stack(contexts, 1)  # (B, T, C)
        logits = out(s_all, c_all, y_emb)  # (B, T, V) (or E): one big GEMM after the loop
        weights = torch.stack(alphas, 1) if need_weights and alphas[0] is not None else None
        return logits, weights

    # -- incremental decoding protocol (attnkit.decoding) ---------------------------------------
    def start(self, src: Tensor, src_lengths: Tensor) -> RNNState:
        """Encode the source once; the state for :meth:`step`."""
        self._check_src(src, src_lengths)
        return self.encode(src, src_lengths)

    def step_features(self, prev_tokens: Tensor, state: RNNState):
        """``prev_tokens (B,)`` → ``(output-layer input (B, E), state, attention (B, S) or None)``;
        :meth:`step` projects it onto the vocabulary."""
        y_emb = self.embedding(prev_tokens)  # (B, E)
        s, c, alpha = self._decoder_step(y_emb, state, need_weights=True)
        return self._features(s, c, y_emb), dataclasses.replace(state, h=s), alpha

    def reorder(self, state: RNNState, index: Tensor, *, beams_only: bool = False) -> RNNState:
        """Select/reorder batch rows of the state (beam search; see :func:`attnkit.decoding.reorder_state`)."""
        return reorder_state(state, index, beams_only=beams_only)

    # -- inspection ------------------------------------------------------------------------------
    @torch.no_grad()
    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps:
        """Teacher-forced pass in eval mode keeping, at every step, the three steps of attention:
        the raw scores ``e_tj``, the weights ``α_tj`` and the context ``c_t`` (see
        :class:`attnkit.models.AttentionMaps`). RNNencdec has no attention: only its fixed context."""
        self._check_src(src, src_lengths)
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must be (B={src.shape[0]}, T), got {tuple(tgt_in.shape)}")
        was_training = self.training
        self.eval()
        try:
            state = self.encode(src, src_lengths)
            scores, alphas, contexts = [], [], []
            for y_t in self.embedding(tgt_in).unbind(1):
                s_prev = state.h
                s, c, a = self._decoder_step(y_t, state, need_weights=True)
                scores.append(self._raw_scores(s_prev if self.input_feed else s, state))  # the scored query
                state.h = s
                alphas.append(a)
                contexts.append(c)
        finally:
            self.train(was_training)
        has_attention = alphas[0] is not None
        return AttentionMaps(
            alignment=torch.stack(alphas, 1) if has_attention else None,  # (B, T, S)
            scores=torch.stack(scores, 1) if has_attention else None,  # (B, T, S)
            context=torch.stack(contexts, 1),  # (B, T, C)
            annotations=state.memory.values if state.memory is not None else None,  # (B, S, C)
            score=self.attention.score.formula if has_attention else None,
        )


@register_model("rnnencdec")
class RNNEncDec(_RNNTranslator):
    """The encoder-decoder without attention: one context vector ``c`` = the encoder's last state."""

    def __init__(self, config: Seq2SeqConfig):
        if config.rnn_attention != "bahdanau":
            raise ConfigError(f"rnn_attention={config.rnn_attention!r} is for RNNsearch; RNNencdec has no attention")
        super().__init__(config, context_dim=config.enc_dim)
        c = config
        self.encoder = nn.GRU(c.emb_dim, c.enc_dim, batch_first=True)
        self.init_state = nn.Linear(c.enc_dim, c.hidden_dim)
        self._init_parameters()

    def encode(self, src: Tensor, src_lengths: Tensor) -> RNNState:
        x = self.drop(self.embed_source(src))  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.encoder(packed)  # (1, B, H): the state after each sentence's last real token
        context = h_n[-1]  # (B, H)
        return RNNState(h=torch.tanh(self.init_state(context)), context=context)

    def _context(self, s_prev, state, need_weights):
        return state.context, None


@register_model("rnnsearch")
class RNNSearch(_RNNTranslator):
    """Bahdanau et al.'s RNNsearch: bidirectional GRU annotations and attention at every step."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__(config, context_dim=2 * config.enc_dim)
        c = config
        self.encoder = nn.GRU(c.emb_dim, c.enc_dim, batch_first=True, bidirectional=True)
        self.init_state = nn.Linear(c.enc_dim, c.hidden_dim)  # s_0 = tanh(W_s h←_1)
        score = canonical_score_name(c.score)
        key_proj = None
        if score in ("dot", "scaled_dot"):
            key_proj = c.hidden_dim  # dot products need keys of the decoder state's size (Luong)
        self.attention = Attention(
            c.hidden_dim, 2 * c.enc_dim, score=score, hidden_dim=c.attn_dim, key_proj_dim=key_proj
        )
        self._init_parameters()

    def encode(self, src: Tensor, src_lengths: Tensor) -> dict:
        x = self.drop(self.embed_source(src))  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.encoder(packed)
        annotations, _ = nn.utils.rnn.pad_packed_sequence(
            out, batch_first=True, total_length=src.shape[1]
        )  # (B, S, 2 enc_dim)
        memory = self.attention.prepare(annotations)  # U h_j + b once per sentence
        mask = padding_mask(src_lengths.to(src.device), src.shape[1])  # (B, S)
        return RNNState(h=torch.tanh(self.init_state(h_n[1])), memory=memory, mask=mask)

    def _context(self, s_prev, state, need_weights):
        return self.attention(s_prev, prepared=state.memory, key_padding_mask=state.mask, need_weights=need_weights)

    def _raw_scores(self, query, state):
        return self.attention.raw_scores(query, state.memory, key_padding_mask=state.mask)
