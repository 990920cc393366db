"""What to analyse, as typed records: one ``Request`` per kind of analysis, checked when it is made (a
:class:`ValueError` naming the field), so a request that crosses a process boundary (the server's worker
processes) or a front end (CLI, server, notebook) is the same thing everywhere. Layers count from 1, as
every layer a user sees does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..method_registry import names

__all__ = [
    "DEFAULT_THRESHOLD",
    "GENERATION_MODES",
    "LM_VIEW_KINDS",
    "CaptionRequest",
    "GenerationRequest",
    "LMViewRequest",
    "MethodOptions",
    "RepeatedRequest",
    "Request",
    "TranslationRequest",
]


def _positive_int(name: str, value, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a whole number ≥ 1, got {value!r}")


def _text(name: str, value, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, got {type(value).__name__}")
    if not value.strip():
        raise InputError(f"{name} is empty: give the text to analyse")


@dataclass(frozen=True)
class MethodOptions:
    """An attribution method's options (:func:`attnkit.attribution.explain`): the cross-attention ``layer`` and
    ``head`` it reads (1-based; default: the last layer, the mean of the heads), integrated gradients'
    ``steps``, and a gradient method's ``batch`` (rows per forward+backward pass: memory, not values)."""

    layer: int | None = None
    head: int | None = None
    steps: int | None = None
    batch: int | None = None

    def __post_init__(self) -> None:
        for name in ("layer", "head", "steps", "batch"):
            _positive_int(name, getattr(self, name), optional=True)

    def given(self) -> dict:
        """The options set, by name."""
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class TranslationRequest:
    """Translate (or force) ``source`` and show every attention the model has.

    ``beam``: the search's beam (1 = greedy); ``target``: target-language text to force instead of searching
    (teacher forcing; a gold verse then comes with its gold links); ``method``: an attribution method
    (:mod:`attnkit.attribution`, any spelling :func:`~attnkit.attribution.canonical_method` accepts);
    ``heads``: also every layer's and head's maps, or only layer ``layer`` (1-based); ``max_numbers``: the
    most numbers the per-head maps of one answer may hold (None: no limit); ``options``: the method's.
    ``source_ids``/``target_ids``: the source's ids (the model's ``encode_sources``) and the target's, when the
    caller has tokenised them already (the server's route, to check their lengths), so the analysis does not
    tokenise them again."""

    source: str
    beam: int = 5
    target: str | None = None
    method: str | None = None
    heads: bool = False
    layer: int | None = None
    max_numbers: int | None = None
    options: MethodOptions = MethodOptions()
    source_ids: tuple[int, ...] | None = None
    target_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _text("source", self.source)
        _positive_int("beam", self.beam)
        _text("target", self.target, optional=True)
        if self.method is not None and not isinstance(self.method, str):
            raise InputError(f"method must be a name, got {type(self.method).__name__}")
        if not isinstance(self.heads, bool):
            raise InputError(f"heads must be true or false, got {self.heads!r}")
        _positive_int("layer", self.layer, optional=True)
        _positive_int("max_numbers", self.max_numbers, optional=True)
        if not isinstance(self.options, MethodOptions):
            raise InputError(f"options must be MethodOptions, got {type(self.options).__name__}")
        _ids("source_ids", self.source_ids)
        _ids("target_ids", self.target_ids)
        if self.target_ids is not None and self.target is None:
            raise InputError("target_ids are the given target's ids: give the target too")


def _ids(name: str, value) -> None:
    if value is None:
        return
    if (
        not isinstance(value, tuple)
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):
        raise InputError(f"{name} must be a non-empty tuple of token ids (whole numbers ≥ 0), got {value!r}")


@dataclass(frozen=True)
class CaptionRequest:
    """Caption ``image``, a ``(1, C, C)`` tensor in [0, 1], and give each word's attention over the grid.

    ``beam``: the search's beam; ``scene``: a test scene (:class:`attnkit.data.scenes.ScenesDataset` item) whose
    boxes measure the attention correctness of each word naming an item; ``method``: an attribution method
    whose maps fill the attribution (correctness then measures them); ``target``: a caption to force instead
    of searching (words of the captioner's vocabulary); ``options``: the method's (``steps``, ``batch``: a
    captioner has one attention, so no layer or head)."""

    image: Any
    beam: int = 1
    scene: dict | None = None
    method: str | None = None
    target: str | None = None
    options: MethodOptions = MethodOptions()

    def __post_init__(self) -> None:
        import torch

        if not isinstance(self.image, torch.Tensor):
            raise InputError(f"image must be a (1, C, C) tensor, got {type(self.image).__name__}")
        shape = tuple(self.image.shape)
        if len(shape) != 3 or shape[0] != 1 or shape[1] != shape[2] or shape[1] < 1:
            raise InputError(f"image must be a (1, C, C) tensor (one square grayscale canvas), got shape {shape}")
        _positive_int("beam", self.beam)
        if self.scene is not None and not isinstance(self.scene, dict):
            raise InputError(f"scene must be a test scene (a dict), got {type(self.scene).__name__}")
        if self.method is not None and not isinstance(self.method, str):
            raise InputError(f"method must be a name, got {type(self.method).__name__}")
        _text("target", self.target, optional=True)
        if not isinstance(self.options, MethodOptions):
            raise InputError(f"options must be MethodOptions, got {type(self.options).__name__}")
        if self.options.layer is not None or self.options.head is not None:
            raise InputError("options: layer and head are for Transformer translators; a captioner has one attention")


#: how a :class:`GenerationRequest` gets the tokens it explains
GENERATION_MODES = ("greedy", "sample", "forced")


@dataclass(frozen=True)
class GenerationRequest:
    """A decoder-only model's tokens, each attributed to the tokens before it by ``method``
    (:mod:`attnkit.attribution.generation`).

    ``mode``: ``"greedy"`` (the model's greedy continuation of ``text``, at most ``max_new_tokens``),
    ``"sample"`` (a sampled continuation: ``temperature``, ``top_k``, and ``seed``, which makes it
    reproducible; None draws one, reported in the analysis) or ``"forced"`` (every next token of ``text``
    itself, teacher-forced; ``max_new_tokens`` unused). ``steps``: integrated gradients' points; ``layer``,
    ``head`` (1-based): attention's; ``batch``: a gradient method's rows per pass (memory, not values);
    ``contrast``: a foil token (one token of the model's vocabulary) for the gradient methods' contrastive
    attribution, ``log p(token) − log p(contrast)`` (Yin & Neubig 2022)."""

    text: str
    max_new_tokens: int = 20
    method: str | None = None
    steps: int | None = None
    mode: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    contrast: str | None = None
    layer: int | None = None
    head: int | None = None
    batch: int | None = None

    def __post_init__(self) -> None:
        from ..attribution.generation import canonical_generation_method as canonical_method
        from ..attribution.gradients import GRADIENT_METHODS
        from ..decoding.continuation import check_sampling

        _text("text", self.text)
        _positive_int("max_new_tokens", self.max_new_tokens)
        if self.method is not None and not isinstance(self.method, str):
            raise InputError(f"method must be a name, got {type(self.method).__name__}")
        for name in ("steps", "layer", "head", "batch"):
            _positive_int(name, getattr(self, name), optional=True)
        if self.mode not in GENERATION_MODES:
            raise InputError(f"mode must be one of {', '.join(GENERATION_MODES)}, got {self.mode!r}")
        if self.mode == "sample":
            check_sampling(self.temperature, self.top_k, 0 if self.seed is None else self.seed)
        elif self.temperature != 1.0 or self.top_k is not None or self.seed is not None:
            raise InputError(f"temperature, top_k and seed are for mode sample, not {self.mode}")
        if self.contrast is not None:
            if not isinstance(self.contrast, str) or not self.contrast:
                raise InputError(f"contrast must be one token of the model's vocabulary, got {self.contrast!r}")
            method = None if self.method is None else canonical_method(self.method)
            if method not in GRADIENT_METHODS:
                raise InputError(
                    f"contrast is for the gradient methods ({', '.join(GRADIENT_METHODS)}); "
                    f"{method or 'no method'} has no contrastive form"
                )


#: the routes' importance threshold τ when none is given (the LM Transparency Tool's default)
DEFAULT_THRESHOLD = 0.04
#: the views of one prediction an :class:`LMViewRequest` asks for
LM_VIEW_KINDS = names(where="text_view")


@dataclass(frozen=True)
class LMViewRequest:
    """A view of one prediction of a decoder-only model reading ``text`` as given (no generation): the
    prediction at ``position`` (1-based, a token of the text; None: the last, i.e. the token after the text).

    ``view``: ``"logit_lens"`` (each block's residual read through the final norm and the unembedding:
    the ``top`` tokens and the rank of the model's own prediction, nostalgebraist 2020), ``"direct_logit"``
    (each head's and MLP block's direct contribution to the predicted token's logit, which add up to it) or
    ``"routes"`` (the information-flow graph of Ferrando & Voita 2024, edges whose importance is at least
    ``threshold``, default :data:`DEFAULT_THRESHOLD`, with the logit lens of the position; :mod:`attnkit.attribution.information_flow`);
    ``token``: the token whose logit direct logit attribution splits (one token of the vocabulary; None: the
    model's own prediction)."""

    text: str
    view: str = "routes"
    position: int | None = None
    threshold: float | None = None
    top: int = 5
    token: str | None = None

    def __post_init__(self) -> None:
        _text("text", self.text)
        if self.view not in LM_VIEW_KINDS:
            raise InputError(f"view must be one of {', '.join(LM_VIEW_KINDS)}, got {self.view!r}")
        _positive_int("position", self.position, optional=True)
        t = self.threshold
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0:
                raise InputError(f"threshold must be a number in [0, 1], got {t!r}")
            if self.view != "routes":
                raise InputError(f"threshold is for the routes view, not {self.view}")
        _positive_int("top", self.top)
        if self.top > 100:
            raise InputError(f"top must be at most 100 tokens, got {self.top}")
        if self.token is not None:
            if not isinstance(self.token, str) or not self.token:
                raise InputError(f"token must be one token of the model's vocabulary, got {self.token!r}")
            if self.view != "direct_logit":
                raise InputError(f"token is for the direct_logit view, not {self.view}")


@dataclass(frozen=True)
class RepeatedRequest:
    """A language model's attention on ``length`` random tokens followed by the same tokens again, the
    input on which an induction head shows its stripe (Olsson et al. 2022, "In-context Learning and
    Induction Heads"): the tokens are drawn as the induction scores draw them (seeded by ``seed``, special
    tokens excluded: the first row :func:`attnkit.service.induction.measure_induction` scores with the same
    seed). ``layer`` and ``head`` (1-based) choose the head shown; None: the best induction head by
    prefix-matching score on this sequence."""

    length: int
    seed: int = 0
    layer: int | None = None
    head: int | None = None

    def __post_init__(self) -> None:
        _positive_int("length", self.length)
        if self.length < 2:
            raise InputError(f"length must be at least 2 random tokens, got {self.length}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InputError(f"seed must be a whole number ≥ 0, got {self.seed!r}")
        _positive_int("layer", self.layer, optional=True)
        _positive_int("head", self.head, optional=True)
        if (self.layer is None) != (self.head is None):
            raise InputError("layer and head go together: give both to choose a head, or neither for the best one")


Request = TranslationRequest | CaptionRequest | GenerationRequest | LMViewRequest | RepeatedRequest
