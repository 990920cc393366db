"""``measure_induction(model, ...)``: the induction-head scores (Olsson et al. 2022, "In-context Learning
and Induction Heads") of a language model opened by :func:`~attnkit.service.open_model`, as one report
that ``attnkit evaluate induction`` prints and an API can return.

- attnkit's own language model: prefix-matching, previous-token and copying scores per layer and head
  (:func:`attnkit.models.induction.induction_scores`), and the in-context-learning score on the model's
  own validation text when its folder says which corpus
  (:func:`attnkit.tasks.language_model.valid_text.valid_text_ids`);
- a Hugging Face causal language model (a stock ``LlamaForCausalLM``/``GPT2LMHeadModel``, e.g. attnkit's
  export): prefix-matching and previous-token scores from the attention ``transformers`` computes
  (:func:`attnkit.hf.induction.hf_induction_scores`); copying is not measured for it.

Both share the formula of :func:`attnkit.models.induction.prefix_matching_from_attention`. Layers and heads
are numbered from 1 in the report.
"""

from __future__ import annotations

from ..errors import InputError
from .model import Model, ModelKind

__all__ = ["measure_induction"]


def _check_length(length, context: int | None, label: str) -> None:
    if length is None:
        return
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise InputError(f"length must be an int >= 2, got {length!r}")
    if context is not None and 2 * length > context:
        raise InputError(
            f"length {length} is too long for {label}: the repeated sequence is 2 × length tokens and the model "
            f"reads at most {context} positions (give at most {context // 2})"
        )


def measure_induction(
    model: Model, *, length: int | None = None, batch: int = 8, seed: int = 0, home=None, icl: bool = True
) -> dict:
    """The report of ``model``'s induction heads on ``batch`` seeded rows of ``length`` random tokens repeated
    twice: :meth:`attnkit.models.induction.InductionScores.to_dict` plus ``model``, ``kind``, ``best_head``
    (``{"layer", "head", "prefix_matching"}``, from 1), ``copying_note`` and ``icl_note`` (why a score is
    absent, or what text it was measured on). ``icl=False`` skips the in-context-learning score."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be an int >= 1, got {batch!r}")
    if model.kind is ModelKind.LANGUAGE_MODEL:
        from ..models.induction import induction_scores
        from ..tasks.language_model.valid_text import valid_text_ids

        gen = model.impl
        _check_length(length, gen.context, model.label)
        text, icl_note = None, "not asked"
        if icl and model.path is None:
            icl_note = "the model has no folder to say which corpus it was trained on"
        elif icl:
            text, icl_note = valid_text_ids(model.path, gen.tokenizer, gen.context, home=home)
        scores = induction_scores(gen.model, length=length, batch=batch, seed=seed, text_ids=text)
        copying_note = "the OV circuit of each head on every non-special token (chance is 0.5)"
    elif model.kind is ModelKind.SELF_ATTENTION:
        from ..hf.induction import hf_induction_scores

        sa = model.impl
        if not sa.causal:
            raise InputError(
                f"{model.label} is an encoder-only model: induction heads are measured on a causal language model"
            )
        _check_length(length, sa.max_length(), model.label)
        scores = hf_induction_scores(sa, length=length, batch=batch, seed=seed)
        copying_note = "not measured for a Hugging Face model (attnkit reads the OV circuit of its own models only)"
        icl_note = "not measured for a Hugging Face model"
    else:
        raise InputError(
            f"{model.label} is a {model.kind.value} model: induction heads are measured on a language model "
            "(attnkit's own, or a Hugging Face causal language model)"
        )
    layer, head, best = scores.best_induction_head()
    report = scores.to_dict()
    report.update(
        model=model.label,
        kind=str(model.kind),
        best_head={"layer": layer, "head": head, "prefix_matching": best},
        copying_note=copying_note,
        icl_note=icl_note,
    )
    return report
