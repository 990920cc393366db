"""What ``attnkit train translation`` trains when no ``--model`` is given: a written rule, from measurements.

The rule (:func:`pick_model`), and the measurements behind it (benchmarks/RESULTS.md, "Training that
fits its budget"; docs/howto/first-model-in-ten-minutes.md):

- **RNNsearch at its default size, for every budget.** On a 2-core CPU it learns the most per second
  of the models here: at 600 s on the English→Spanish Bible it reached 23.88 test BLEU (beam 5) where
  the Transformer reached 2.24 with its recipe's 2,000-step warm-up cut off at 562 steps; at the
  shipped models' 100-minute budget the two are level (33.18 against 32.82, beam 5), so nothing
  measured favours switching to the Transformer at any budget.
- The budget-fitted schedule (:mod:`attnkit.training.budget`) applies to whichever model runs.

Only the model is picked here; a model flag given (``--hidden-dim 128``) still applies. A new
measurement that changes the rule changes :data:`RULE` and this docstring, nothing else.
"""

from __future__ import annotations

__all__ = ["RULE", "pick_model"]

#: (budget in seconds up to which the entry holds, model, why); the first entry whose bound the
#: budget does not exceed is picked (None: any budget).
RULE: tuple[tuple[float | None, str, str], ...] = (
    (
        None,
        "rnnsearch",
        "on a 2-core CPU RNNsearch learns the most per second here (600 s on the en-es Bible: 23.88 test BLEU "
        "against 2.24 for the Transformer on its recipe; level at 100 minutes: 33.18 against 32.82)",
    ),
)


def pick_model(max_time_s: float | None) -> tuple[str, str]:
    """``(model, why)`` for a run of ``max_time_s`` seconds (None: no time budget) by :data:`RULE`."""
    for bound, model, why in RULE:
        if bound is None or (max_time_s is not None and max_time_s <= bound):
            return model, why
    raise AssertionError("RULE must end with an entry for any budget")  # pragma: no cover
