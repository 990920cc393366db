"""Show, Attend and Tell (Xu et al. 2015): an LSTM captioner attending over a CNN feature grid.

**Encoder.** A small CNN turns a grayscale ``C×C`` canvas into an ``h×w`` grid (``L = h·w``
cells) of content features; a learned position vector per cell is *concatenated* to each cell's
features, so ``a_i = [CNN(x)_i; p_i]`` (``D = feature_dim + pos_dim``). Content alone cannot
tell "top left" from "bottom right" (every quadrant is processed by the same filters); the
position half is what lets the decoder say where an item is, and lets attention step through
the items in reading order.

**Decoder**, at step ``t`` with previous word ``y_{t-1}`` and LSTM state ``(h_{t-1}, m_{t-1})``::

    e_ti  = f_att(a_i, h_{t-1})              (core Attention, additive by default)
    α_t   = softmax(e_t)
    z_t   = Σ_i α_ti a_i                     (soft)  |  a_{s_t}, s_t ~ Cat(α_t) (hard; argmax at test)
    β_t   = σ(f_β(h_{t-1}));  ẑ_t = β_t z_t  (gating scalar)
    h_t, m_t = LSTM(E y_{t-1}, (h_{t-1}, m_{t-1}))      ([E y_{t-1}; ẑ_t] with context_to_lstm, as in Xu et al.)
    p(y_t) = softmax(W_o tanh(W_d [h_t; ẑ_t; E y_{t-1}]))

Why the context stays out of the LSTM by default: with Xu et al.'s ``[E y_{t-1}; ẑ_t]`` input, our
first model learned to look at each item while emitting the article "a" before it, stored what it
saw in its state, and named the item with a diffuse map; its overlays showed attention moving, but
one word early, and the class word's attention correctness was at the uniform level (0.12 vs
0.12). Keeping ``ẑ_t`` out of the recurrence means a word can only use what *its own* step looks
at, so the map of "coat" has to be on the coat (``context_to_lstm=True`` restores the paper's form).

with ``h_0, m_0 = tanh(W_{h,m} · mean_i a_i)``. ``α_t`` is the attention used to *predict*
``y_t``, so it is aligned with the target word.

Losses (computed in :mod:`attnkit.tasks.captioning` from :meth:`ShowAttendTell.forward`'s outputs):

- soft: ``NLL + λ Σ_i (1 − Σ_t α_ti)²`` (doubly stochastic regularisation);
- hard: ``NLL`` of the sampled-context path, plus REINFORCE ``−(R − b) Σ_t log α_{t,s_t}`` with
  reward ``R = −NLL`` of the sentence and a moving-average baseline ``b`` (a model buffer, so it
  is checkpointed), minus an entropy bonus ``η Σ_t H(α_t)`` (:func:`reinforce_terms`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import Attention, PreparedMemory
from ..attention.scores import SCORE_ALIASES, canonical_score_name
from ..checks import CANVAS, FRACTION, LOSS_WEIGHT, PROBABILITY, WIDTH, Range, between, check_fields
from ..config import ConfigRecord, option
from ..decoding import PER_SOURCE, reorder_state
from ..errors import ConfigError
from .registry import ConfiguredModel, register_model

__all__ = [
    "ENCODER_CHANNELS",
    "CNNEncoder",
    "CaptionerConfig",
    "CaptionerOutput",
    "CaptionerState",
    "ShowAttendTell",
    "doubly_stochastic_penalty",
    "encoder_channels",
    "reinforce_terms",
]

ATTENTION_MODES = ("soft", "hard")
#: The conv blocks' widths of the encoder (the captioner's and the Fashion-MNIST classifier's, so one can
#: start the other's trunk).
ENCODER_CHANNELS = (32, 64, 96)


def encoder_channels(channels) -> list[int]:
    """``channels`` as a list of conv block widths; raises ``ConfigError`` unless they are positive ints."""
    try:
        out = [int(c) for c in channels]
    except (TypeError, ValueError):
        out = []
    if not out or min(out) < 1:
        raise ConfigError(f"channels must be a non-empty list of positive ints, got {channels!r}")
    return out


@dataclass
class CaptionerConfig(ConfigRecord):
    """Hyper-parameters of Show, Attend and Tell; saved as ``config.json`` beside the weights.

    ``context_to_lstm``: Xu et al. feed ẑ_t into the LSTM too. Then the decoder can look at an item
    one step early (while emitting "a"), keep it in its state and name it with a diffuse map; off,
    each word's own map must find what that word says (see the module docstring).
    ``hard_soft_mix``: hard attention, training: the share of sentences that use the expected
    (soft) context instead of a sampled cell (Xu et al. 2015, §4.2: "with probability 0.5 … set the
    sampled attention location to its expected value"). Without it our hard model settled on the
    empty background: a constant context carries no information but no sampling noise either.
    """

    vocab_size: int = option(32, "vocabulary size (set from the scenes' vocabulary)", cli=False, check=Range(4))
    canvas: int = option(64, "canvas size in pixels (the scenes' and the input images')", check=CANVAS)
    channels: list = option(
        default_factory=lambda: list(ENCODER_CHANNELS), help="conv block widths (each halves the image)", cli=False
    )
    feature_dim: int = option(128, "content features per grid cell", check=WIDTH)
    pos_dim: int = option(32, "learned position vector per cell (0: none)", check=between(0, WIDTH.high, integer=True))
    grid: int = option(8, "the grid is grid × grid cells (set from the canvas)", cli=False)
    emb_dim: int = option(64, "word embedding size", check=WIDTH)
    hidden_dim: int = option(256, "LSTM size", check=WIDTH)
    attn_dim: int = option(128, "the additive score's tanh layer size", check=WIDTH)
    score: str = option("additive", "the score function", choices=tuple(SCORE_ALIASES))
    attention: str = option(
        "soft", "soft (deterministic) or hard (stochastic, REINFORCE) attention", choices=ATTENTION_MODES
    )
    dropout: float = option(0.1, "dropout on embeddings and the deep output", check=PROBABILITY)
    lambda_ds: float = option(0.2, "weight of the doubly stochastic regularisation (soft)", check=LOSS_WEIGHT)
    entropy_coef: float = option(0.01, "entropy bonus (hard)", check=LOSS_WEIGHT)
    baseline_decay: float = option(0.9, "decay of the moving-average reward baseline (hard)", check=FRACTION)
    reinforce_weight: float = option(1.0, "weight λ_r of the REINFORCE term (hard)", check=LOSS_WEIGHT)
    context_to_lstm: bool = option(
        False, "feed the context into the LSTM too (Xu et al.); by default only the output sees it"
    )
    hard_soft_mix: float = option(
        0.5, "hard, training: share of sentences that read the expected context", check=FRACTION
    )
    max_len: int = option(32, "longest caption generated", cli=False)
    pad_id: int = option(0, "padding token id", cli=False)
    bos_id: int = option(1, "beginning-of-caption token id", cli=False)
    eos_id: int = option(2, "end-of-caption token id", cli=False)

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_MODES:
            raise ConfigError(f"attention must be one of {ATTENTION_MODES}, got {self.attention!r}")
        check_fields(self)
        if self.canvas < self.grid or self.grid < 1:
            raise ConfigError(f"grid must lie in 1..canvas={self.canvas}, got {self.grid}")
        self.channels = encoder_channels(self.channels)


@dataclass
class CaptionerState:
    """The decoder state: LSTM ``h``, ``m`` ``(B, H)``; the annotations prepared once (keys ``U a_i + b``
    and values ``a_i``); ``soft_rows (B,)``, in hard training, the sentences that read the expected context."""

    h: Tensor
    m: Tensor
    memory: PreparedMemory = field(metadata=PER_SOURCE)
    soft_rows: Tensor | None = None


class CaptionerOutput(NamedTuple):
    """Teacher-forced outputs: everything the losses and the metrics need."""

    logits: Tensor  # (B, T, V)
    alphas: Tensor  # (B, T, L) attention distribution of each step (α_t, soft probabilities)
    betas: Tensor  # (B, T) gating scalars
    log_probs: Tensor | None  # (B, T) log α_{t,s_t} of the sampled location (hard, sampling), else None
    entropies: Tensor | None  # (B, T) H(α_t) (hard, sampling), else None
    locations: Tensor | None  # (B, T) sampled/argmax cell index (hard), else None
    baseline: Tensor | None = None  # () the REINFORCE reward baseline b (hard, once set), detached


class CNNEncoder(nn.Module):
    """Conv blocks (3×3 conv, batch norm, ReLU, 2×2 max pool), a last 3×3 conv at grid resolution
    (widens the receptive field to a whole item), then adaptive pooling to ``grid × grid``.

    ``forward(images (B, 1, C, C)) -> (B, feature_dim, grid, grid)``. The conv blocks (``trunk``)
    have the same layout as the Fashion-MNIST classifier's, so a classifier can initialise them.
    """

    def __init__(self, channels: list[int], feature_dim: int, grid: int):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 1
        for c in channels:
            layers += [
                nn.Conv2d(c_in, c, 3, padding=1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            c_in = c
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Conv2d(c_in, feature_dim, 3, padding=1), nn.ReLU(inplace=True))
        self.grid = grid

    def forward(self, images: Tensor) -> Tensor:
        x = self.head(self.trunk(images))
        if x.shape[-2:] != (self.grid, self.grid):
            x = F.adaptive_avg_pool2d(x, self.grid)
        return x


def doubly_stochastic_penalty(alphas: Tensor, step_mask: Tensor) -> Tensor:
    """``Σ_i (1 − Σ_t α_ti)²`` per sentence, over the real (unpadded) steps: ``(B, T, L), (B, T) -> (B,)``."""
    coverage = (alphas * step_mask.unsqueeze(-1).to(alphas.dtype)).sum(1)  # (B, L)
    return ((1.0 - coverage) ** 2).sum(-1)


def reinforce_terms(nll_per_sentence: Tensor, log_probs: Tensor, step_mask: Tensor, baseline: Tensor | float) -> Tensor:
    """The REINFORCE surrogate ``−(R − b) Σ_t log p(s_t)`` per sentence, with ``R = −NLL``.

    ``nll_per_sentence (B,)``, ``log_probs (B, T)`` of the sampled locations, ``step_mask (B, T)``
    bool (real steps), ``baseline`` a scalar. The advantage is detached, so the gradient of the
    returned ``(B,)`` surrogate is the score-function estimate of ``∇ E_s[NLL(s)]`` (minus the
    baseline term, whose expectation is zero).
    """
    advantage = (-nll_per_sentence.detach()) - baseline
    logp = (log_probs * step_mask.to(log_probs.dtype)).sum(1)
    return -advantage * logp


@register_model("captioner")
class ShowAttendTell(ConfiguredModel, nn.Module):
    """Show, Attend and Tell with soft or hard attention (see the module docstring)."""

    config_class = CaptionerConfig

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        c = self.config = config
        self.encoder = CNNEncoder(c.channels, c.feature_dim, c.grid)
        self.num_cells = c.grid * c.grid
        self.pos = nn.Parameter(torch.randn(self.num_cells, c.pos_dim)) if c.pos_dim > 0 else None
        self.annotation_dim = d = c.feature_dim + c.pos_dim
        self.embedding = nn.Embedding(c.vocab_size, c.emb_dim, padding_idx=c.pad_id)
        self.init_h = nn.Linear(d, c.hidden_dim)
        self.init_m = nn.Linear(d, c.hidden_dim)
        score = canonical_score_name(c.score)
        key_proj = c.hidden_dim if score in ("dot", "scaled_dot") else None
        self.attention = Attention(c.hidden_dim, d, score=score, hidden_dim=c.attn_dim, key_proj_dim=key_proj)
        self.f_beta = nn.Linear(c.hidden_dim, 1)
        self.cell = nn.LSTMCell(c.emb_dim + (d if c.context_to_lstm else 0), c.hidden_dim)
        self.deep_output = nn.Linear(c.hidden_dim + d + c.emb_dim, c.emb_dim)
        self.out = nn.Linear(c.emb_dim, c.vocab_size)
        self.drop = nn.Dropout(c.dropout)
        # the moving-average reward baseline of hard attention: a buffer, so checkpoints keep it
        self.register_buffer("reward_baseline", torch.zeros(()))
        self.register_buffer("baseline_initialised", torch.zeros((), dtype=torch.bool))

    @property
    def grid_shape(self) -> tuple[int, int]:
        return (self.config.grid, self.config.grid)

    # ---------------------------------------------------------------- pieces
    def _check_images(self, images: Tensor) -> None:
        c = self.config.canvas
        if not isinstance(images, Tensor) or images.dim() != 4 or tuple(images.shape[1:]) != (1, c, c):
            raise ValueError(f"images must have shape (B, 1, {c}, {c}), got {tuple(getattr(images, 'shape', ()))}")

    def encode(self, images: Tensor) -> Tensor:
        """``(B, 1, C, C) -> (B, L, D)`` annotation vectors ``a_i = [CNN(x)_i; p_i]`` (row-major cells)."""
        self._check_images(images)
        feats = self.encoder(images).flatten(2).transpose(1, 2)  # (B, L, feature_dim)
        if self.pos is not None:
            feats = torch.cat([feats, self.pos.unsqueeze(0).expand(feats.shape[0], -1, -1)], dim=-1)
        return feats

    def init_state(self, annotations: Tensor) -> CaptionerState:
        mean = annotations.mean(1)  # (B, D)
        return CaptionerState(
            torch.tanh(self.init_h(mean)), torch.tanh(self.init_m(mean)), self.attention.prepare(annotations)
        )

    def _mode(self, hard: str | None) -> str | None:
        """``None`` (soft), ``"sample"`` or ``"argmax"``: hard models sample while training."""
        if self.config.attention == "soft":
            return None
        if hard is not None:
            if hard not in ("sample", "argmax"):
                raise ValueError(f"hard must be 'sample', 'argmax' or None, got {hard!r}")
            return hard
        return "sample" if self.training else "argmax"

    def _attend(self, h_prev: Tensor, state: CaptionerState, mode: str | None, generator=None):
        """Context ``ẑ_t``, ``α_t``, ``β_t`` and (hard) log-prob, entropy and location, all from the
        core: soft attention, or one cell sampled / the argmax cell (:meth:`Attention.hard`)."""
        logp = ent = loc = None
        if mode is None:
            z, alpha = self.attention(h_prev, prepared=state.memory, need_weights=True)
        else:
            out = self.attention.hard(h_prev, prepared=state.memory, mode=mode, generator=generator)
            z, alpha, loc = out.context, out.probs, out.index
            if mode == "sample":
                logp = out.log_prob
                ent = -(alpha * torch.log(alpha.clamp_min(1e-12))).sum(-1)
                soft_rows = state.soft_rows
                if soft_rows is not None:  # these sentences read the expected context: no sample, no REINFORCE term
                    z = torch.where(soft_rows.unsqueeze(-1), out.expected, z)
                    logp = logp.masked_fill(soft_rows, 0.0)
        beta = torch.sigmoid(self.f_beta(h_prev))  # (B, 1)
        return beta * z, alpha, beta.squeeze(-1), logp, ent, loc

    def _cell_input(self, y_emb: Tensor, z: Tensor) -> Tensor:
        return torch.cat([y_emb, z], dim=-1) if self.config.context_to_lstm else y_emb

    def _logits(self, h: Tensor, z: Tensor, y_emb: Tensor) -> Tensor:
        t = torch.tanh(self.deep_output(torch.cat([h, z, y_emb], dim=-1)))
        return self.out(self.drop(t))

    # ---------------------------------------------------------------- teacher forcing
    def forward(
        self, images: Tensor, captions_in: Tensor, *, hard: str | None = None, generator: torch.Generator | None = None
    ) -> CaptionerOutput:
        """Teacher forcing over ``captions_in (B, T)`` (bos + words, without the last token).

        Returns :class:`CaptionerOutput`; ``alphas[:, t]`` is the attention that predicts
        ``captions_in``'s next token ``y_{t+1}``. Hard models sample locations in training mode
        (or with ``hard="sample"``) and take the argmax in eval mode (or ``hard="argmax"``).
        """
        if captions_in.dim() != 2 or captions_in.shape[0] != images.shape[0] or captions_in.dtype != torch.long:
            raise ValueError(
                f"captions_in must be a (B={images.shape[0]}, T) long tensor, got "
                f"{tuple(captions_in.shape)} {captions_in.dtype}"
            )
        mode = self._mode(hard)
        state = self.init_state(self.encode(images))
        if mode == "sample" and self.training and self.config.hard_soft_mix > 0:
            u = torch.rand(images.shape[0], generator=generator, device=images.device)
            state.soft_rows = u < self.config.hard_soft_mix
        y_emb = self.drop(self.embedding(captions_in))
        hs, zs, alphas, betas, logps, ents, locs = [], [], [], [], [], [], []
        h, m = state.h, state.m
        for y_t in y_emb.unbind(1):
            z, alpha, beta, logp, ent, loc = self._attend(h, state, mode, generator)
            h, m = self.cell(self._cell_input(y_t, z), (h, m))
            hs.append(h)
            zs.append(z)
            alphas.append(alpha)
            betas.append(beta)
            logps.append(logp)
            ents.append(ent)
            locs.append(loc)
        logits = self._logits(self.drop(torch.stack(hs, 1)), torch.stack(zs, 1), y_emb)
        stack = lambda xs: torch.stack(xs, 1) if xs[0] is not None else None
        baseline = self.reward_baseline.detach().clone() if bool(self.baseline_initialised) else None
        return CaptionerOutput(
            logits, torch.stack(alphas, 1), torch.stack(betas, 1), stack(logps), stack(ents), stack(locs), baseline
        )

    @torch.no_grad()
    def update_baseline(self, mean_reward: float) -> float:
        """``b ← decay·b + (1 − decay)·R̄`` (the first call sets ``b = R̄``); returns the new ``b``."""
        decay = self.config.baseline_decay
        r = torch.as_tensor(float(mean_reward), dtype=self.reward_baseline.dtype)
        if not bool(self.baseline_initialised):
            self.reward_baseline.copy_(r)
            self.baseline_initialised.fill_(True)
        else:
            self.reward_baseline.mul_(decay).add_((1.0 - decay) * r)
        return float(self.reward_baseline)

    # ---------------------------------------------------------------- decoding protocol
    def start(self, images: Tensor) -> CaptionerState:
        """Encode the images once; the state for :meth:`step`."""
        return self.init_state(self.encode(images))

    def step(self, prev_tokens: Tensor, state: CaptionerState):
        """``prev_tokens (R,)`` → ``(log_probs (R, V), state, α (R, L))``; hard models use the argmax cell."""
        y_emb = self.embedding(prev_tokens)
        mode = None if self.config.attention == "soft" else "argmax"
        z, alpha, _, _, _, _ = self._attend(state.h, state, mode)
        h, m = self.cell(self._cell_input(y_emb, z), (state.h, state.m))
        return torch.log_softmax(self._logits(h, z, y_emb), dim=-1), dataclasses.replace(state, h=h, m=m), alpha

    def reorder(self, state: CaptionerState, index: Tensor, *, beams_only: bool = False) -> CaptionerState:
        return reorder_state(state, index, beams_only=beams_only)
