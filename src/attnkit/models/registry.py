"""The model registry: ``config["model_type"]`` → the class that rebuilds the model.

A checkpoint's ``config.json`` names its ``model_type``; :func:`build_model` finds the class and
calls its ``from_config(config: dict)``. attnkit's own models are listed in :data:`BUILTIN`
(imported on first use, so no module has to be imported for its side effects); a user's model
registers itself with the :func:`register_model` decorator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["BUILTIN", "ConfiguredModel", "build_model", "model_class", "register_model", "registered_models"]

#: attnkit's models: model_type → "module:Class" (relative to attnkit.models).
BUILTIN: dict[str, str] = {
    "rnnsearch": "seq2seq:RNNSearch",
    "rnnencdec": "seq2seq:RNNEncDec",
    "transformer": "transformer:TransformerTranslator",
    "captioner": "captioner:ShowAttendTell",
    "fashion_classifier": "classifier:FashionClassifier",
    "language_model": "language_model:LanguageModel",
}

_REGISTRY: dict[str, type] = {}


class ConfiguredModel:
    """Mixin of a model built from one config dataclass (``config_class``, a
    :class:`attnkit.config.ConfigRecord`): :meth:`from_config` takes the dataclass or a ``config.json``
    object, :meth:`to_config` is what a checkpoint saves (the config's fields and ``model_type``)."""

    config_class: type
    model_type: str
    config: Any

    @classmethod
    def from_config(cls, config: Any) -> Any:
        return cls(config if isinstance(config, cls.config_class) else cls.config_class.from_dict(config))

    def to_config(self) -> dict:
        return {**self.config.to_dict(), "model_type": self.model_type}


def register_model(name: str) -> Callable[[type], type]:
    """Class decorator: make ``config["model_type"] == name`` rebuild ``cls`` via ``cls.from_config``.

    The class must define a ``from_config(config: dict)`` classmethod; it receives the whole
    config.json object (including ``model_type`` and ``attnkit_version``, which it may ignore).
    The decorator also sets ``cls.model_type = name``, which checkpoints write.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_model: name must be a non-empty string, got {name!r}")

    def deco(cls: type) -> type:
        if not callable(getattr(cls, "from_config", None)):
            raise TypeError(f"register_model({name!r}): {cls.__name__} must define a from_config(config) classmethod")
        prev = _REGISTRY.get(name)
        if prev is not None and prev.__qualname__ != cls.__qualname__:
            raise ValueError(f"register_model: name {name!r} is already registered to {prev.__qualname__}")
        _REGISTRY[name] = cls
        cls.model_type = name
        return cls

    return deco


def model_class(model_type: str) -> type:
    """The class for ``model_type`` (a built-in, imported now, or a registered one)."""
    if model_type in _REGISTRY:
        return _REGISTRY[model_type]
    if model_type in BUILTIN:
        module, cls = BUILTIN[model_type].split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), cls)
    known = ", ".join(sorted(set(_REGISTRY) | set(BUILTIN)))
    raise ValueError(
        f"model_type {model_type!r} is not registered (known: {known}); "
        "decorate the class with @attnkit.models.register_model"
    )


def registered_models() -> dict[str, type]:
    """Every known model_type → class (built-ins imported)."""
    return {name: model_class(name) for name in sorted(set(_REGISTRY) | set(BUILTIN))}


def build_model(config: Mapping[str, Any]) -> torch.nn.Module:
    """Build a fresh (untrained) model from a config dict via its class's ``from_config``."""
    if not isinstance(config, Mapping):
        raise TypeError(f"build_model: config must be a dict, got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is None:
        raise ValueError("build_model: config has no 'model_type' key")
    try:
        cls = model_class(model_type)
    except ValueError as exc:
        raise ValueError(f"build_model: config['model_type']={model_type!r}: {exc}") from None
    return cls.from_config(dict(config))
