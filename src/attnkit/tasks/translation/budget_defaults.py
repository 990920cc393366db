"""What ``attnkit train translation`` trains when no ``--model`` is given: a written rule, from measurements.

The rule (:data:`RULE`, applied by :func:`pick_model`), and the measurements behind it
(benchmarks/RESULTS.md, "The model for a budget"; docs/howto/first-model-in-ten-minutes.md):

- **Budgets up to an hour: RNNsearch with attention after the GRU step, a 128-unit-per-direction
  encoder and dropout 0.1** (``--rnn-attention luong --encoder-dim 128 --dropout 0.1``; OpenNMT-py's
  ``brnn`` 256 sizes). On a
  2-core CPU it trains 1.59× the target tokens per second of the Bahdanau-style RNNsearch and learns
  more per token (one epoch of the English→Spanish Bible: valid BLEU 17.35 against 14.47, same
  budget-fitted schedule), and far more than any Transformer size measured (the default Transformer's
  valid BLEU after one epoch is about 3; a d_model-128 one trains 2.6× faster and is still behind).
  In 600 s on a quiet 2-core AMD EPYC (AVX2) it ran 1,488 and 1,444 steps in two runs and scored 26.29
  and 28.08 test BLEU (beam 5;
  25.80 with the recipe's dropout 0.2, 1,393 steps: in about 2.5 epochs the model underfits, and less
  dropout learns faster), where the Bahdanau-order RNNsearch on its constant-rate recipe had scored
  23.88 and the Transformer 4.36 (budget-fitted; 2.24 on its recipe). On a second corpus (King James → World English Bible) the
  same model (with dropout 0.2) scores 60.54 against the Transformer's 27.20 at the step budgets 600 s
  gives (copying the source: 42.93).
- **Longer or open-ended runs: RNNsearch as shipped** (Bahdanau's order, the context entering the
  GRU): the shipped recipe, 33.18 test BLEU after 100 minutes (35.92 after fine-tuning).
- The budget-fitted schedule (:mod:`attnkit.training.budget`) applies to whichever model runs.

Only options the user did not give are set: ``--hidden-dim 128`` or ``--rnn-attention bahdanau`` on
the command line still win. A new measurement that changes the rule changes :data:`RULE` and this
docstring, nothing else.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RULE", "Pick", "apply_pick", "pick_model"]


class Pick(NamedTuple):
    """The rule's answer: the model, the model options it sets (unless given), and why."""

    model: str
    options: dict
    why: str


#: (budget in seconds up to which the entry holds, the pick); the first entry whose bound the budget
#: does not exceed is used (None: any budget, including none).
RULE: tuple[tuple[float | None, Pick], ...] = (
    (
        3600.0,
        Pick(
            "rnnsearch",
            {"rnn_attention": "luong", "encoder_dim": 128, "dropout": 0.1},
            "for budgets up to an hour RNNsearch with attention after the GRU step, a 128-unit encoder and light "
            "dropout learns the most per second on a 2-core CPU (600 s on the en-es Bible: 26.29 test BLEU, "
            "against 23.88 for RNNsearch's recipe and 4.36 for the Transformer)",
        ),
    ),
    (
        None,
        Pick(
            "rnnsearch",
            {},
            "for long or open-ended runs RNNsearch as shipped (its recipe: 33.18 test BLEU after 100 minutes "
            "on the Bible, level with the Transformer's 32.82)",
        ),
    ),
)


def pick_model(max_time_s: float | None) -> Pick:
    """The :class:`Pick` for a run of ``max_time_s`` seconds (None: no time budget) by :data:`RULE`."""
    for bound, pick in RULE:
        if bound is None or (max_time_s is not None and max_time_s <= bound):
            return pick
    raise AssertionError("RULE must end with an entry for any budget")  # pragma: no cover


def apply_pick(args, pick: Pick) -> list[str]:
    """Set ``args.model`` and each of the pick's options the user left unset (None) on ``args``;
    return the flags set, as ``--name value`` strings, to say what was picked."""
    args.model = pick.model
    chosen = []
    for name, value in pick.options.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
            chosen.append(f"--{name.replace('_', '-')} {value}")
    return chosen
