"""What the task-level inference wrappers share: :class:`attnkit.tasks.translation.Translator` and
:class:`attnkit.tasks.captioning.Captioner` are each a trained model plus the one file saved beside its
weights that turns ids into words (the tokenizer, the caption vocabulary), loaded by name or folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..training.checkpoint import CheckpointError, load_model

__all__ = ["InferenceWrapper", "ResultRecord"]


class ResultRecord:
    """Base of the typed inference results (:class:`attnkit.tasks.translation.Translation`,
    :class:`attnkit.tasks.captioning.Caption`): read them by attribute (``r.attention is None`` when
    not requested). Mapping reads (``r["translation"]``, ``"attention" in r``) still work, for code
    written against the plain dicts these results used to be; a field that is ``None`` is absent."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if isinstance(key, str) and not key.startswith("_") else None
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and not key.startswith("_") and getattr(self, key, None) is not None

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        import dataclasses

        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]  # type: ignore[arg-type]


class InferenceWrapper:
    """Base of the task wrappers: ``Wrapper(model, companion)``, where ``companion`` is read from the
    checkpoint's ``companion_file`` by :meth:`read_companion`. A subclass sets ``companion_file``,
    ``kind`` (what the checkpoint should be, for the error message) and, to accept one model class
    only, ``model_type``."""

    companion_file: str
    kind: str
    model_type: str | None = None
    model: torch.nn.Module

    @classmethod
    def read_companion(cls, path: Path) -> Any:
        raise NotImplementedError

    @classmethod
    def load(
        cls, model_dir: str | Path, *, device: str | torch.device | None = "cpu", dtype: str | torch.dtype | None = None
    ):
        """Load a model by name (``"transformer-es-en"``, ``"captioner-soft"``: see ``attnkit models``) or
        from a checkpoint folder (config.json, model.safetensors and the companion file), onto ``device``
        (``"auto"``: cuda, then mps, then cpu) with weights in ``dtype`` (``torch.bfloat16`` or ``"bf16"``,
        ``"fp16"``, ``"auto"``; default float32)."""
        from ..device import place
        from ..pretrained import resolve_model

        model_dir = resolve_model(model_dir)
        model, _, _ = load_model(model_dir, model_type=cls.model_type)
        path = model_dir / cls.companion_file
        if not path.is_file():
            raise CheckpointError(f"{path}: the checkpoint has no {cls.companion_file}; is {model_dir} {cls.kind}?")
        return cls(place(model, device, dtype), cls.read_companion(path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
