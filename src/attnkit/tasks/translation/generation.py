"""A translation model's decoding defaults: ``generation.json`` beside its ``config.json`` (as Hugging
Face keeps ``generation_config.json``), written by ``attnkit export --length-penalty``.

``length_penalty`` is the ``α`` of the GNMT length normalisation beam search ranks finished
hypotheses by (Wu et al. 2016, §7):

    ``score(Y) = log P(Y | X) / lp(Y)``,   ``lp(Y) = ((5 + |Y|) / 6)^α``

``α = 0`` ranks by the summed log-probability, which favours short outputs; larger ``α`` favours
longer ones. The best ``α`` depends on the model (how well it is calibrated about ending a sentence),
so it is chosen on the model's validation data and shipped with it; a model without the file is
searched with Wu et al.'s ``α = 0.6`` (:data:`DEFAULT_LENGTH_PENALTY`). Greedy search has no
penalty to apply.

CTranslate2 divides by ``|Y|^β`` instead. The two rank two lengths of one source alike where their
slopes in ``log`` agree, ``α / (5 + L) = β / L``; at ``L = 25`` pieces (a typical verse) that is
``β = 5α / 6`` (:func:`attnkit.deploy.ct2_engine.ctranslate2_length_penalty`), which maps 0.6 to the
0.5 measured to give attnkit's beam-5 output on nearly all test verses (benchmarks/RESULTS.md, section
"attnkit against CTranslate2").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ...checks import LENGTH_PENALTY, check
from ...training.checkpoint import CheckpointError

__all__ = [
    "DEFAULT_LENGTH_PENALTY",
    "GENERATION_FILE",
    "GenerationDefaults",
    "check_length_penalty",
    "read_generation_defaults",
]

GENERATION_FILE = "generation.json"
#: Wu et al.'s α, for a model that was shipped without its own.
DEFAULT_LENGTH_PENALTY = 0.6


def check_length_penalty(value, name: str = "length_penalty") -> float:
    """``value`` as a float in ``[0, 10]`` (:data:`attnkit.checks.LENGTH_PENALTY`), else a ``ValueError`` naming ``name``."""
    return float(check(name, value, LENGTH_PENALTY))


@dataclass(frozen=True)
class GenerationDefaults:
    """What a model's searches use unless told otherwise (the fields of ``generation.json``)."""

    length_penalty: float = DEFAULT_LENGTH_PENALTY

    def __post_init__(self) -> None:
        object.__setattr__(self, "length_penalty", check_length_penalty(self.length_penalty))

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self), indent=1) + "\n").encode()


def read_generation_defaults(model_dir: str | Path) -> GenerationDefaults:
    """The model folder's ``generation.json``, or the defaults when it has none; a file that is not a
    JSON object of known fields with valid values is a :class:`CheckpointError` naming it."""
    path = Path(model_dir) / GENERATION_FILE
    if not path.is_file():
        return GenerationDefaults()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("it is not a JSON object")
        unknown = sorted(set(data) - {"length_penalty"})
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)}")
        return GenerationDefaults(**data)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not a valid {GENERATION_FILE} ({exc})") from None
