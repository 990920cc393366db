"""What ``attnkit train translation`` trains when no ``--model`` is given, and at what size a Transformer asked
for with a short budget trains: written rules, from measurements.

The rules (:data:`RULE`, applied by :func:`pick_model`; :data:`SIZE_RULES`, by :func:`pick_for`), and why
(the measurements: benchmarks/RESULTS.md, "The model for a budget: what learns most in ten minutes", "Figures
formerly in docstrings" under this module's name, and docs/howto/first-model-in-ten-minutes.md):

- **Budgets up to :data:`RULE`'s first bound: RNNsearch with attention after the GRU step, a
  128-unit-per-direction encoder and dropout 0.1** (``--rnn-attention luong --encoder-dim 128 --dropout 0.1``;
  OpenNMT-py's ``brnn`` sizes). On a 2-core CPU it trains more target tokens per second than the
  Bahdanau-style RNNsearch and learns more per token, and far more than any Transformer size measured; at a
  ten-minute budget it scored highest of every model tried, on the Spanish–English Bible and on a second
  corpus (King James → World English Bible).
- **Longer or open-ended runs: RNNsearch as shipped** (Bahdanau's order, the context entering the GRU): the
  shipped recipe.
- **``--model transformer`` with a budget up to :data:`SIZE_RULES`' bound: a quarter of the recipe's size**
  (d_model 128, 2+2 layers, feed-forward 512, peak learning rate 4e-3). On the 2-core CPU the recipe's size
  runs about one epoch of the Bible in ten minutes and learns too little in it; the small one runs about 2.5
  times the steps and learns as much per epoch. Past the bound the recipe's size stands. **On a CPU only**: on
  a GPU a step costs its kernel launches, both sizes run the same steps, and the recipe's size scores higher,
  so on ``cuda`` and ``mps`` the recipe stands (the no-``--model`` rule held there too).
- The budget-fitted schedule (:mod:`attnkit.training.budget`) applies to whichever model runs.

Only options the user did not give are set: ``--hidden-dim 128`` or ``--rnn-attention bahdanau`` on
the command line still win. :func:`apply_budget_rule` applies the rules to the user's choices
(:class:`TranslationChoices`, which the command line builds from its flags) and returns new ones, with
the line the command prints; it changes nothing it is given. A new measurement that changes the rule changes :data:`RULE` and this
docstring, nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "RULE",
    "SIZE_RULES",
    "Pick",
    "TranslationChoices",
    "apply_budget_rule",
    "device_type",
    "pick_for",
    "pick_model",
]


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


#: The sizes for a model that was asked for by name, per model and per device type the rule was measured on:
#: (budget in seconds up to which the entry holds, the pick), as :data:`RULE`; past the last bound, without a
#: time budget, or on a device type with no entry, the model's recipe.
SIZE_RULES: dict[str, dict[str, tuple[tuple[float, Pick], ...]]] = {
    "transformer": {
        "cpu": (
            (
                900.0,
                Pick(
                    "transformer",
                    {
                        "d_model": 128,
                        "num_encoder_layers": 2,
                        "num_decoder_layers": 2,
                        "dim_feedforward": 512,
                        "lr": 4e-3,
                    },
                    "for budgets up to 15 minutes on a CPU a Transformer a quarter of the recipe's size runs 2.5 times "
                    "its steps and learns more in them (600 s on the en-es Bible, 2 cores: 14.35-17.89 test BLEU against "
                    "4.36 at the recipe's size; with --guided-alignment 15.49 against 10.52)",
                ),
            ),
        ),
    },
}


def _first(rule, max_time_s: float | None) -> Pick | None:
    for bound, pick in rule:
        if bound is None or (max_time_s is not None and max_time_s <= bound):
            return pick
    return None


def pick_model(max_time_s: float | None) -> Pick:
    """The :class:`Pick` for a run of ``max_time_s`` seconds (None: no time budget) by :data:`RULE`."""
    pick = _first(RULE, max_time_s)
    if pick is None:  # pragma: no cover
        raise AssertionError("RULE must end with an entry for any budget")
    return pick


def pick_for(model: str | None, max_time_s: float | None, device: str = "cpu") -> Pick | None:
    """What the rules set for ``--model model`` (None: not given, :func:`pick_model`), a budget of
    ``max_time_s`` seconds and the device type training runs on (``"cpu"``, ``"cuda"``, ``"mps"``): a
    :class:`Pick`, or None where the model's recipe stands as it is (:data:`SIZE_RULES`)."""
    if model is None:
        return pick_model(max_time_s)
    return _first(SIZE_RULES.get(model, {}).get(device, ()), max_time_s)


def device_type(device: str | None) -> str:
    """The device type ``device`` (a ``--device`` value; None or ``"auto"``: what this machine has) trains on,
    for :func:`pick_for` and :class:`TranslationChoices`."""
    from ...device import resolve_device

    return resolve_device(device).type


@dataclass(frozen=True)
class TranslationChoices:
    """What the user chose for ``attnkit train translation``, as the rules read it.

    ``model``: the model asked for (None: not given, :func:`pick_model` decides); ``max_time_s``: the time
    budget (None: none); ``device``: the device type training runs on (``"cpu"``, ``"cuda"``, ``"mps"``; see
    :func:`device_type`); ``given``: every option the user gave, by its field name (``{"encoder_dim": 8}``),
    task, run and model options alike; an option left out is not given.
    """

    model: str | None = None
    max_time_s: float | None = None
    device: str = "cpu"
    given: Mapping[str, Any] = field(default_factory=dict)


def apply_budget_rule(choices: TranslationChoices) -> tuple[TranslationChoices, str | None]:
    """The rules applied to ``choices``: ``(new choices, what to say)``, ``choices`` itself left as it is.

    Where :func:`pick_for` picks, the new choices have the pick's model and each of its options the user did
    not give (a given one wins); the message (for stderr) names the model, the options set (as flags) and
    why, and is None where a model was asked for and the rule set nothing. Where it does not pick, the
    choices come back as they are, with no message.
    """
    pick = pick_for(choices.model, choices.max_time_s, choices.device)
    if pick is None:
        return choices, None
    chosen = {name: value for name, value in pick.options.items() if choices.given.get(name) is None}
    new = dataclasses.replace(choices, model=pick.model, given={**choices.given, **chosen})
    if choices.model is not None and not chosen:
        return new, None
    flags = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in chosen.items())
    sized = f" ({flags})" if flags else ""
    said = "no --model given: training" if choices.model is None else f"a {choices.max_time_s:g}-s budget: training"
    return new, f"attnkit: {said} {pick.model}{sized}: {pick.why}"
