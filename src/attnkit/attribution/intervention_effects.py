"""What an intervention (:mod:`attnkit.attribution.interventions`) changes in what the model says.

- A language model: the target token's log-probability at one position, and the logit difference
  between two answers (Wang et al. 2022's IOI metric, ``logit(target) − logit(foil)``), clean and with
  the intervention in place (:func:`lm_effect`).
- A translator: the forced reference's log-likelihood (teacher forcing, ``log p(reference, eos |
  source)``), clean and with the intervention, and the translation the model writes with the intervention
  in place, decoded by attnkit's own search (the hooks see every decoder step) (:func:`translation_effect`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .interventions import Intervention, core_model, intervenable, intervene

__all__ = [
    "ForcedBatch",
    "LMEffect",
    "TranslationEffect",
    "forced_batch",
    "forced_log_likelihood",
    "lm_effect",
    "translation_effect",
    "translator_of",
]


@dataclass
class LMEffect:
    """A language model's prediction at ``position`` clean and under the intervention: the target's
    log-probability, and (with a foil) ``logit(target) − logit(foil)``."""

    position: int
    target: int
    clean_log_prob: float
    log_prob: float
    foil: int | None = None
    clean_logit_diff: float | None = None
    logit_diff: float | None = None

    @property
    def log_prob_change(self) -> float:
        return self.log_prob - self.clean_log_prob

    @property
    def logit_diff_change(self) -> float | None:
        return None if self.foil is None else self.logit_diff - self.clean_logit_diff


def _check_token(name: str, value, vocab: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ValueError(f"{name} must be a token id in 0..{vocab - 1}, got {value!r}")


@torch.no_grad()
def lm_effect(
    model, ids: Tensor, interventions: Sequence[Intervention], *, target: int, foil: int | None = None, position=-1
) -> LMEffect:
    """Run attnkit's language model on ``ids`` (``(T,)`` or ``(1, T)``) clean and with ``interventions``, and
    compare its prediction at ``position`` (0-based, default the last: the next token after ``ids``). A Hugging
    Face causal language model (or a text model around one) is run the same way."""
    core = intervenable(model)
    if not isinstance(ids, Tensor) or ids.dim() not in (1, 2) or (ids.dim() == 2 and ids.shape[0] != 1):
        raise ValueError(f"ids must be (T,) or (1, T) token ids, got {tuple(getattr(ids, 'shape', ()))}")
    ids = ids.reshape(1, -1).to(next(core.parameters()).device)
    n = ids.shape[1]
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise ValueError(f"position must be in {-n}..{n - 1}, got {position!r}")
    vocab = core.config.vocab_size
    _check_token("target", target, vocab)
    if foil is not None:
        _check_token("foil", foil, vocab)

    def read() -> tuple[float, float | None]:
        logits = core(ids).logits[0, position].double()  # (V,)
        lp = float(F.log_softmax(logits, -1)[target])
        return lp, None if foil is None else float(logits[target] - logits[foil])

    was = core.training
    core.eval()
    try:
        clean_lp, clean_diff = read()
        with intervene(core, interventions):
            lp, diff = read()
    finally:
        core.train(was)
    return LMEffect(position % n, target, clean_lp, lp, foil, clean_diff, diff)


def translator_of(obj):
    """The translator (:class:`attnkit.tasks.translation.Translator`) under ``obj`` (itself, or a
    :class:`attnkit.service.Model`'s ``impl``), which must run attnkit's Transformer."""
    from ..models.transformer import TransformerTranslator

    tr = obj if hasattr(obj, "encode_sources") else getattr(obj, "impl", None)
    if tr is None or not isinstance(getattr(tr, "model", None), TransformerTranslator):
        raise TypeError(
            f"translator must be an attnkit Transformer translator (PyTorch engine), got {type(obj).__name__}"
        )
    return tr


@dataclass
class ForcedBatch:
    """Sources and references as one teacher-forced batch: ``src (B, S)``, ``src_lengths (B,)``,
    ``tgt_in (B, T)`` (bos + reference), ``tgt_out (B, T)`` (reference + eos), ``mask (B, T)`` (True at
    real target positions)."""

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    mask: Tensor


def forced_batch(translator, sources: Sequence[str], references: Sequence[str]) -> ForcedBatch:
    """Tokenise ``sources`` and ``references`` (over-long ones cut to the model's limits) into a
    :class:`ForcedBatch` on the translator's device."""
    tr = translator_of(translator)
    if isinstance(sources, str) or isinstance(references, str):
        raise TypeError("sources and references must be lists of str")
    if len(sources) != len(references) or not sources:
        raise ValueError(
            f"sources and references must be equally many, at least one; got {len(sources)} and {len(references)}"
        )
    tok, cfg = tr.tokenizer, tr.model.config
    src_ids = tr.encode_sources(list(sources), truncate=True)
    tgt_ids = []
    for i, r in enumerate(references):
        ids = tok.encode(r.strip())[: cfg.max_len - 1] if isinstance(r, str) else []
        if not ids:
            raise ValueError(f"references[{i}] has no tokens")
        tgt_ids.append(ids)
    b, s, t = len(src_ids), max(map(len, src_ids)), max(map(len, tgt_ids)) + 1
    src = torch.full((b, s), cfg.pad_id, dtype=torch.long)
    tgt_in = torch.full((b, t), cfg.pad_id, dtype=torch.long)
    tgt_out = torch.full((b, t), cfg.pad_id, dtype=torch.long)
    mask = torch.zeros(b, t, dtype=torch.bool)
    for i, (si, ti) in enumerate(zip(src_ids, tgt_ids)):
        src[i, : len(si)] = torch.tensor(si)
        tgt_in[i, : len(ti) + 1] = torch.tensor([cfg.bos_id, *ti])
        tgt_out[i, : len(ti) + 1] = torch.tensor([*ti, cfg.eos_id])
        mask[i, : len(ti) + 1] = True
    dev = tr.device
    lengths = torch.tensor([len(si) for si in src_ids])
    return ForcedBatch(src.to(dev), lengths.to(dev), tgt_in.to(dev), tgt_out.to(dev), mask.to(dev))


def forced_log_likelihood(model, batch: ForcedBatch) -> Tensor:
    """``log p(reference, eos | source)`` of each row, teacher-forced: ``(B,)``, summed over its pieces.
    Differentiable (no ``no_grad`` here); the caller sets eval mode."""
    core = core_model(model)
    logits, _ = core(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
    lp = F.log_softmax(logits.float() if logits.dtype != torch.float64 else logits, -1)
    token_lp = lp.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return (token_lp * batch.mask).sum(-1)


@dataclass
class TranslationEffect:
    """A translator's forced reference log-likelihood clean and under the intervention, and the
    translation it writes under the intervention beside its clean one."""

    source: str
    reference: str
    clean_log_likelihood: float
    log_likelihood: float
    clean_translation: str
    translation: str

    @property
    def log_likelihood_change(self) -> float:
        return self.log_likelihood - self.clean_log_likelihood


def translation_effect(
    translator, source: str, reference: str, interventions: Sequence[Intervention], *, beam: int = 1
) -> TranslationEffect:
    """``source`` translated and ``reference`` forced, clean and with ``interventions`` in place (decoded
    with beam size ``beam``; patches and resampling need a whole forward, so decoding takes zero and mean
    ablations and gates)."""
    tr = translator_of(translator)
    batch = forced_batch(tr, [source], [reference])
    core = tr.model
    was = core.training
    core.eval()
    try:
        with torch.no_grad():
            clean_ll = float(forced_log_likelihood(core, batch)[0])
            clean = tr.translate([source], beam_size=beam, truncate=True)[0]
            with intervene(core, interventions):
                ll = float(forced_log_likelihood(core, batch)[0])
                out = tr.translate([source], beam_size=beam, truncate=True)[0]
    finally:
        core.train(was)
    return TranslationEffect(source, reference, clean_ll, ll, clean.translation, out.translation)
