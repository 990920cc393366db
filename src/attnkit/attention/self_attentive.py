"""Self-attention over the states another layer computed: the positions of a CNN feature map
(:class:`SpatialSelfAttention`), the states of an RNN, CNN or linear layer extended with their
context, ``[h_i; c_i]`` (:class:`SelfAttentiveEncoder`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._inputs import _check_last_dim, _check_rank
from .functional import AttentionOutput, attend
from .masks import key_mask, padding_mask
from .scores import ScoreModule, canonical_score_name, make_score

__all__ = ["SelfAttentiveEncoder", "SpatialSelfAttention"]


class SpatialSelfAttention(nn.Module):
    """Self-attention over the ``H×W`` positions of a CNN feature map (the "attention in ConvNets").

    ``f = W_f x``, ``g = W_g x``, ``h = W_h x`` (1×1 convolutions); every position attends over
    every other, ``o_i = Σ_j softmax_j(f_i·g_j) h_j``, and ``y = γ·W_o o + x`` with ``γ`` learned
    and starting at 0, so the block begins as the identity (Zhang et al., SAGAN).

    ``forward(x (B, C, H, W), need_weights=False) -> (y (B, C, H, W), weights (B, HW, HW) or None)``.
    """

    def __init__(
        self, channels: int, *, key_channels: int | None = None, value_channels: int | None = None, score: str = "dot"
    ):
        super().__init__()
        key_channels = key_channels or max(1, channels // 8)
        value_channels = value_channels or channels
        self.channels = channels
        self.f = nn.Conv2d(channels, key_channels, 1)
        self.g = nn.Conv2d(channels, key_channels, 1)
        self.h = nn.Conv2d(channels, value_channels, 1)
        self.o = nn.Conv2d(value_channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(()))
        self.score = canonical_score_name(score)
        if self.score not in ("dot", "scaled_dot"):
            raise ValueError(f"score must be 'dot' or 'scaled_dot' for SpatialSelfAttention, got {score!r}")

    def forward(self, x: Tensor, need_weights: bool = False) -> AttentionOutput:
        _check_rank("x", x, (4,), "(B, C, H, W)")
        if x.shape[1] != self.channels:
            raise ValueError(f"x must have {self.channels} channels, got shape {tuple(x.shape)}")
        b, _, hgt, wid = x.shape
        q = self.f(x).flatten(2).transpose(1, 2)  # (B, HW, Ck)
        k = self.g(x).flatten(2).transpose(1, 2)  # (B, HW, Ck)
        v = self.h(x).flatten(2).transpose(1, 2)  # (B, HW, Cv)
        ctx, weights = attend(q, k, v, score=self.score, need_weights=need_weights)  # (B, HW, Cv)
        o = ctx.transpose(1, 2).reshape(b, -1, hgt, wid)
        return AttentionOutput(self.gamma * self.o(o) + x, weights)


class SelfAttentiveEncoder(nn.Module):
    """Self-attention over the hidden states of a base layer ``L``, each state extended with its context.

    ``H = (h_1..h_n) = L(X)`` where ``L`` is a GRU, an LSTM, a 1-D CNN or a position-wise linear
    layer; ``e_ij = f(h_i, h_j)``, ``a_ij = softmax_j(e_ij)``, ``c_i = Σ_j a_ij h_j``, and the
    output is ``X^next = ([h_1; c_1], …, [h_n; c_n])``.

    ``forward(x (B, N, D_in), lengths=None, need_weights=False) -> (y (B, N, 2·D_h), weights (B, N, N) or None)``
    where ``D_h = hidden_dim`` (×2 for a bidirectional RNN). Padded positions (from ``lengths``)
    are never attended to, and their outputs are zero.
    """

    BASES = ("gru", "lstm", "rnn", "cnn", "linear")

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int,
        *,
        base: str = "gru",
        bidirectional: bool = False,
        num_layers: int = 1,
        kernel_size: int = 3,
        score: str | ScoreModule = "scaled_dot",
    ):
        super().__init__()
        if base not in self.BASES:
            raise ValueError(f"base must be one of {self.BASES}, got {base!r}")
        if base in ("cnn",) and kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd so outputs align with inputs, got {kernel_size}")
        self.base, self.input_dim = base, input_dim
        if base in ("gru", "lstm", "rnn"):
            rnn = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[base]
            self.layer = rnn(
                input_dim, hidden_dim, num_layers=num_layers, batch_first=True, bidirectional=bidirectional
            )
            self.hidden_size = hidden_dim * (2 if bidirectional else 1)
        elif base == "cnn":
            self.layer = nn.Conv1d(input_dim, hidden_dim, kernel_size, padding=kernel_size // 2)
            self.hidden_size = hidden_dim
        else:
            self.layer = nn.Linear(input_dim, hidden_dim)
            self.hidden_size = hidden_dim
        self.score = make_score(score, self.hidden_size, self.hidden_size)
        self.output_dim = 2 * self.hidden_size

    def forward(self, x: Tensor, lengths: Tensor | None = None, need_weights: bool = False) -> AttentionOutput:
        _check_rank("x", x, (3,), "(B, N, D_in)")
        _check_last_dim("x", x, self.input_dim, "(B, N, D_in)")
        b, n, _ = x.shape
        valid = None
        if lengths is not None:
            if lengths.shape != (b,):
                raise ValueError(f"lengths must have shape (B,) = ({b},), got {tuple(lengths.shape)}")
            valid = padding_mask(lengths.to(x.device), n)  # (B, N)
        if self.base in ("gru", "lstm", "rnn"):
            if lengths is not None:
                packed = nn.utils.rnn.pack_padded_sequence(
                    x, lengths.cpu().clamp_min(1), batch_first=True, enforce_sorted=False
                )
                h, _ = self.layer(packed)
                h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=n)
            else:
                h, _ = self.layer(x)
        elif self.base == "cnn":
            xin = x if valid is None else x * valid.unsqueeze(-1)
            h = torch.relu(self.layer(xin.transpose(1, 2))).transpose(1, 2)  # (B, N, D_h)
        else:
            h = torch.tanh(self.layer(x))  # (B, N, D_h)
        if valid is not None:
            h = h * valid.unsqueeze(-1)
        m = key_mask(valid) if valid is not None else None  # (B, 1, N)
        c, weights = attend(h, h, h, score=self.score, mask=m, need_weights=need_weights)  # (B, N, D_h)
        if valid is not None:
            c = c * valid.unsqueeze(-1)
        return AttentionOutput(torch.cat([h, c], dim=-1), weights)  # (B, N, 2·D_h)
