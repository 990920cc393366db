"""``analyse(model, RepeatedRequest(length))``: a language model's attention on random tokens repeated
twice, where an induction head draws its stripe (Olsson et al. 2022, "In-context Learning and Induction
Heads").

The input is ``[r; r]``: ``length`` random tokens ``r`` drawn exactly as the induction scores draw their
rows (:func:`attnkit.models.induction.repeated_random_tokens`, seeded, the special tokens excluded, no token
twice in ``r`` when the vocabulary allows), so the sequence is the first row that
:func:`attnkit.service.induction.measure_induction` (``attnkit evaluate induction``) scores with the same seed.
Every layer's and head's map of it is read (attnkit's own language model: its ``need_weights`` pass; a
Hugging Face causal language model: the weights ``transformers`` computes,
:meth:`attnkit.hf.self_attention.SelfAttentionModel.self_attention`), and each head's prefix-matching and
previous-token scores on this one sequence go through the formulas the induction scores use
(:func:`~attnkit.models.induction.prefix_matching_from_attention`,
:func:`~attnkit.models.induction.previous_token_from_attention`). An induction head's map then shows a
stripe at key ``i − length + 1`` for each query ``i`` of the second half (the token after the earlier
occurrence of the current token); a previous-token head's the diagonal just below the main one.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import InputError
from ..tasks.capabilities import ReadsText
from .analysis import RepeatedAnalysis
from .induction import _check_length
from .model import Model
from .requests import RepeatedRequest

if TYPE_CHECKING:
    import torch

__all__ = ["analyse_repeated", "repeated_attention"]


def _maps_and_pieces(model: Model, length: int, seed: int) -> tuple[list[int], list[str], torch.Tensor]:
    """The repeated sequence's ids, pieces and every map ``(L, H, 2·length, 2·length)``."""
    import torch  # here, not at import: the service package is imported by torch-free commands (CTranslate2)

    from ..models.induction import repeated_random_tokens

    gen = torch.Generator().manual_seed(seed)
    if not model.can(ReadsText):
        raise InputError(
            f"{model.label} is a {model.kind.value} model: repeated random tokens are for a language model "
            "(attnkit's own, or a Hugging Face causal language model)"
        )
    sa = model.impl  # a text model: attnkit's language model or a Hugging Face one, one protocol
    if not sa.causal:
        raise InputError(f"{model.label} is an encoder-only model: the induction stripe is a causal language model's")
    _check_length(length, sa.max_length(), model.label)
    specials = tuple(sorted(sa.special_ids))
    ids = repeated_random_tokens(sa.vocab_size, length, 1, generator=gen, special_ids=specials)  # (1, 2N)
    row = ids[0].tolist()
    attention = sa.self_attention(row).attention.float().cpu()  # (L, H, 2N, 2N)
    return row, list(sa.pieces_of(row)), attention


def analyse_repeated(model: Model, req: RepeatedRequest) -> RepeatedAnalysis:
    """``model``'s maps of ``req.length`` seeded random tokens repeated twice, each head's scores on them,
    the best induction head and the head shown (``req.layer``, ``req.head``, else the best)."""
    from ..models.induction import InductionScores, prefix_matching_from_attention, previous_token_from_attention

    t0 = time.perf_counter()
    ids, pieces, attention = _maps_and_pieces(model, req.length, req.seed)
    n_layers, n_heads = attention.shape[:2]
    for name, value, top in (("layer", req.layer, n_layers), ("head", req.head, n_heads)):
        if value is not None and value > top:
            raise InputError(f"{name} must be in 1..{top} ({model.label} has {top} {name}s), got {value}")
    prefix = prefix_matching_from_attention(attention[:, None], req.length)  # (L, 1, H, 2N, 2N): one row
    previous = previous_token_from_attention(attention[:, None])
    best = InductionScores(prefix, previous, None, req.length, 1).best_induction_head()
    layer, head = (req.layer, req.head) if req.layer is not None else best[:2]
    return RepeatedAnalysis(
        model=model.label,
        kind=str(model.kind),
        request=req,
        length=req.length,
        seed=req.seed,
        ids=ids,
        pieces=pieces,
        attention=attention,
        prefix_matching=prefix,
        previous_token=previous,
        best=best,
        layer=layer,
        head=head,
        spec=model.spec,
        seconds=time.perf_counter() - t0,
    )


def repeated_attention(
    model: Model | str, length: int, *, seed: int = 0, layer: int | None = None, head: int | None = None
) -> RepeatedAnalysis:
    """The notebook's one call: ``model`` (a :class:`Model`, or a name or folder :func:`open_model` opens)
    on ``length`` random tokens repeated twice, as :func:`attnkit.service.analyse` of a
    :class:`RepeatedRequest` returns it (``.attention``, ``.prefix_matching``, ``.best``, ``.map()``; shown in
    a notebook as the explorer's heads grid with the induction stripe marked)."""
    from .open import open_model

    opened = model if isinstance(model, Model) else open_model(model)
    return analyse_repeated(opened, RepeatedRequest(length, seed=seed, layer=layer, head=head))
