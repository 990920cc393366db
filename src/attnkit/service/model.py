"""What a loaded model is, whatever opened it: :class:`Model`, its :class:`ModelKind`, and the
:class:`ModelSpec` that opens it again (in a worker process, or at a training run's newer checkpoint)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Model", "ModelKind", "ModelSpec", "kind_of", "text_model"]


class ModelKind(str, enum.Enum):
    """The kinds of model attnkit opens; the value is the task name a checkpoint's config records."""

    TRANSLATOR = "translation"  # attnkit's translators, Hugging Face encoder-decoders, CTranslate2 exports
    CAPTIONER = "captioning"  # Show, Attend and Tell
    SELF_ATTENTION = "self-attention"  # Hugging Face encoder-only and decoder-only models
    LANGUAGE_MODEL = "language-model"  # attnkit's own decoder-only models

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ModelSpec:
    """How to open one model again, in this process or another: the name or folder given, and the engine
    settings. For a training run's folder (``name``), ``checkpoint`` is the checkpoint folder opened (its
    newest complete one when it was opened; a server following the run moves it on as newer ones appear)."""

    name: str
    device: str = "cpu"
    dtype: str | None = None
    engine: str = "pytorch"
    keep_spelling: bool = False  # translators read the input as typed, not in their training spelling
    checkpoint: str | None = None
    length_penalty: float | None = None  # translators: a GNMT α for beam search instead of the model's own

    @property
    def label(self) -> str | None:
        """A training run's name (its folder's), which stays while its checkpoints change; None for others."""
        return Path(self.name).name if self.checkpoint else None


@dataclass
class Model:
    """A loaded model: ``impl`` is the task's wrapper (a ``Translator``, ``Captioner``, CTranslate2 translator,
    :class:`attnkit.hf.self_attention.SelfAttentionModel`, or, for attnkit's own language model, a
    :class:`attnkit.tasks.language_model.inference.LanguageModelGenerator`), ``label`` the name it is shown
    by, ``path`` the folder its weights came from (None for an ``hf:`` hub name read from the cache), ``spec``
    how to open it again."""

    label: str
    kind: ModelKind
    impl: Any
    spec: ModelSpec
    path: Path | None = None

    def __post_init__(self) -> None:
        found = kind_of(self.impl)
        if found is not None and found is not self.kind:
            raise TypeError(
                f"Model {self.label!r}: kind {self.kind.name} but its impl ({type(self.impl).__name__}) is a "
                f"{found.name} model; the kind follows from what the impl can do (kind_of)"
            )

    def can(self, capability: type) -> bool:
        """Whether the model's wrapper implements ``capability``, one of the protocols of
        :mod:`attnkit.tasks.capabilities` (``model.can(ContinuesText)``)."""
        return isinstance(self.impl, capability)


def kind_of(impl: Any) -> ModelKind | None:
    """The kind of model ``impl`` is, from the protocols it implements (:mod:`attnkit.tasks.capabilities`): a
    translator, a captioner, or a text model, attnkit's own (``LANGUAGE_MODEL``, analysed natively) or a
    Hugging Face one (``SELF_ATTENTION``); None for an object that implements none of them."""
    from ..tasks.capabilities import Captions, ReadsText, Translates

    if isinstance(impl, Translates):
        return ModelKind.TRANSLATOR
    if isinstance(impl, Captions):
        return ModelKind.CAPTIONER
    if isinstance(impl, ReadsText):
        from ..tasks.language_model.text_model import LanguageModelText

        return ModelKind.LANGUAGE_MODEL if isinstance(impl, LanguageModelText) else ModelKind.SELF_ATTENTION
    return None


def text_model(label: str, impl: Any) -> Model:
    """A :class:`Model` around a text model already loaded (what a server holds): its kind read off the object,
    attnkit's own language model (``LANGUAGE_MODEL``) or a Hugging Face one (``SELF_ATTENTION``)."""
    kind = kind_of(impl)
    if kind not in (ModelKind.LANGUAGE_MODEL, ModelKind.SELF_ATTENTION):
        raise TypeError(f"impl must be a text model (attnkit's language model or a Hugging Face one), got {impl!r}")
    return Model(label, kind, impl, ModelSpec(label or "model"))
