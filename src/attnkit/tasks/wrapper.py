"""What the task-level inference wrappers share: :class:`attnkit.tasks.translation.Translator` and
:class:`attnkit.tasks.captioning.Captioner` are each a trained model plus the one file saved beside its
weights that turns ids into words (the tokenizer, the caption vocabulary), loaded by name or folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..training.checkpoint import CheckpointError, load_model

__all__ = ["InferenceWrapper"]


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

    @staticmethod
    def resolve_folder(model_dir: str | Path) -> Path:
        """The folder ``model_dir`` means: a ``Path`` already resolved (an existing folder, or ``hf:NAME``) as it
        is, so a model opened by :func:`attnkit.service.open_model` is not looked up twice; a name or a text path
        through :func:`attnkit.pretrained.resolve_model`."""
        from ..pretrained import HF_PREFIX, resolve_model

        if isinstance(model_dir, Path) and (
            model_dir.is_dir() or (str(model_dir).startswith(HF_PREFIX) and str(model_dir)[len(HF_PREFIX) :].strip())
        ):
            return model_dir
        return resolve_model(model_dir)

    @classmethod
    def load(
        cls, model_dir: str | Path, *, device: str | torch.device | None = "cpu", dtype: str | torch.dtype | None = None
    ):
        """Load a model by name (``"transformer-es-en"``, ``"captioner-soft"``: see ``attnkit models``) or
        from a checkpoint folder (config.json, model.safetensors and the companion file), onto ``device``
        (``"auto"``: cuda, then mps, then cpu) with weights in ``dtype`` (``torch.bfloat16`` or ``"bf16"``,
        ``"fp16"``, ``"auto"``; default float32)."""
        from ..device import place

        model_dir = cls.resolve_folder(model_dir)
        model, _, _ = load_model(model_dir, model_type=cls.model_type)
        path = model_dir / cls.companion_file
        if not path.is_file():
            raise CheckpointError(f"{path}: the checkpoint has no {cls.companion_file}; is {model_dir} {cls.kind}?")
        return cls(place(model, device, dtype), cls.read_companion(path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
