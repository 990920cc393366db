"""The record of one head's step-through (:func:`attnkit.service.head_step.head_step`), its JSON, and the
argument checks its builders share."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..errors import InputError

__all__ = ["POSITION_NOTES", "HeadStep", "check_attends", "check_number"]

POSITION_NOTES = {
    "rope": "RoPE rotates q and k by their positions before q·k: swapping two keys here permutes the rows "
    "of the products, not the result; swapping the tokens in the text would change q and k themselves",
    "absolute": "the position embeddings are added to the input before q, k and v are made: swapping two "
    "keys here permutes the rows of the products, not the result; swapping the tokens in the text would "
    "change q, k and v themselves",
    "recurrent": "the annotations h_j come from a bidirectional RNN, which reads the order: swapping two keys "
    "here permutes the rows, not the result; swapping the words would change every h_j",
    "none": "no position enters q or k: swapping two tokens permutes the keys, the products and the weights "
    "alike, and the output at the query is unchanged (attention is permutation-equivariant)",
}


@dataclass
class HeadStep:
    """One head at one query (see the module docstring). Numbers from 1 (``layer``, ``head``, ``query``);
    ``columns`` is the head's ``[start, stop)`` in the concatenation of width ``width`` (0-based, as
    a slice). ``q (d_h)``, ``keys (n, d_h)``: None for an additive head, which has ``scores (n)``;
    ``values (n, d_v)``; ``mask[j]``: True where the query may attend to key ``j``."""

    model: str
    site: str
    layer: int
    head: int
    num_heads: int
    query: int
    query_pieces: list[str]
    key_pieces: list[str]
    score: str
    formula: str
    q: Tensor | None
    keys: Tensor | None
    scores: Tensor | None
    values: Tensor
    scale: float
    mask: list[bool]
    weights: Tensor
    output: Tensor
    columns: tuple[int, int]
    width: int
    positions: str
    kv_group: int | None = None

    def to_dict(self) -> dict:
        """The JSON of ``/api/head-step`` (float32 numbers written in full, so the page recomputes the
        model's row to float32 rounding)."""
        vec = lambda t: None if t is None else t.double().tolist()
        return {
            "model": self.model,
            "site": self.site,
            "layer": self.layer,
            "head": self.head,
            "num_heads": self.num_heads,
            "query": self.query,
            "query_pieces": self.query_pieces,
            "key_pieces": self.key_pieces,
            "score": self.score,
            "formula": self.formula,
            "q": vec(self.q),
            "keys": vec(self.keys),
            "scores": vec(self.scores),
            "values": vec(self.values),
            "scale": self.scale,
            "mask": list(self.mask),
            "weights": vec(self.weights),
            "output": vec(self.output),
            "columns": list(self.columns),
            "width": self.width,
            "positions": self.positions,
            "position_note": POSITION_NOTES[self.positions],
            "kv_group": self.kv_group,
        }


def check_number(value, name: str, top: int, what: str) -> int:
    """``value`` when it is an int in ``1..top``; else an :class:`~attnkit.errors.InputError` naming ``name``
    and saying ``what`` bounds it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise InputError(f"{name} must be in 1..{top} ({what}), got {value!r}")
    return value


def check_attends(weights: Tensor, mask: list[bool]) -> None:
    """Refuse a query that may attend to no key (nothing to normalise)."""
    if not any(mask):
        raise InputError("this query may attend to no key")
