"""The models a server (or an export) uses, loaded once by name: :func:`load_models` for the server and
:func:`load_one` for a worker process, which loads only the model its job asks for."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoadedModels", "ModelSpec", "load_models", "load_one"]


@dataclass(frozen=True)
class ModelSpec:
    """How to load one model again in another process: the name or folder given, and the engine settings."""

    name: str
    device: str = "cpu"
    dtype: str | None = None
    engine: str = "pytorch"
    keep_spelling: bool = False  # translators read the input as typed, not in their training spelling


@dataclass
class LoadedModels:
    """The models a server (or an export) uses, by name, loaded once; ``specs`` says how to load each again."""

    translators: dict[str, Any] = field(default_factory=dict)
    captioners: dict[str, Any] = field(default_factory=dict)
    self_attention: dict[str, Any] = field(default_factory=dict)  # Hugging Face encoder-only, decoder-only
    info: dict[str, dict] = field(default_factory=dict)
    specs: dict[str, ModelSpec] = field(default_factory=dict)


def load_one(spec: ModelSpec):
    """``(label, task, model)`` for one model (a ``Translator``, ``Captioner``, CTranslate2 translator, or a
    Hugging Face encoder-only or decoder-only model: :class:`attnkit.hf.self_attention.SelfAttentionModel`)."""
    if spec.engine == "ctranslate2":
        from ..deploy.ct2_engine import CT2Translator
        from ..deploy.ct2_explorer import CT2ExplorerTranslator

        return (
            Path(spec.name).name,
            "translation",
            CT2ExplorerTranslator(CT2Translator.load(spec.name, device=spec.device)),
        )
    from ..pretrained import known_models, model_task, resolve_model
    from ..tasks.captioning import Captioner
    from ..tasks.translation import Translator

    path = resolve_model(spec.name)
    label = spec.name if spec.name in {m.name for m in known_models()} else path.name
    task = model_task(path)
    if task == "self-attention":  # a Hugging Face encoder-only or decoder-only model
        from ..hf import load_self_attention

        return label, task, load_self_attention(str(path), device=spec.device)
    if task == "translation":
        tr = Translator.load(path, device=spec.device, dtype=spec.dtype)
        tr.normalize_spelling = not spec.keep_spelling
        return label, "translation", tr
    return label, "captioning", Captioner.load(path, device=spec.device, dtype=spec.dtype)


def load_models(
    names: list[str] | None = None,
    *,
    device: str = "cpu",
    dtype: str | None = None,
    engine: str = "pytorch",
    keep_spelling: bool = False,
) -> LoadedModels:
    """Load models by name or folder (default: every shipped model). The task is the model's own.
    ``engine="ctranslate2"``: each name is a CTranslate2 export (``attnkit export --format ctranslate2``).
    ``keep_spelling``: translators read the input as typed, not rewritten in their training spelling."""
    if engine == "ctranslate2":
        from ..deploy.manifest import DeployError

        if not names:
            raise DeployError(
                "serve --engine ctranslate2 needs --model FOLDER, written by "
                "`attnkit export MODEL OUT --format ctranslate2`"
            )
    from ..attribution import methods_for
    from ..pretrained import known_models, shipped_models
    from .payload import method_info

    infos = {m.name: m for m in known_models()}
    chosen = names or [m.name for m in shipped_models()]
    loaded = LoadedModels()
    for name in chosen:
        spec = ModelSpec(name, device=device, dtype=dtype, engine=engine, keep_spelling=keep_spelling)
        label, task, model = load_one(spec)
        loaded.specs[label] = spec
        if engine == "ctranslate2":
            loaded.translators[label] = model
            loaded.info[label] = {
                "name": label,
                "task": "translation",
                "kind": f"{model.model.model_type} (CTranslate2 {model.ct2.quantization})",
                "scores": {},
                "has_attention": True,
                "config": model.model.config.to_dict(),
                "engine": "ctranslate2",
            }
            continue
        if task == "self-attention":
            from ..attribution.generation import generation_methods

            loaded.self_attention[label] = model
            if not model.can_generate:  # an encoder-only model has no worker job: the workers need not load it
                del loaded.specs[label]
            loaded.info[label] = {
                "methods": [method_info(m) for m in generation_methods()] if model.can_generate else [],
                "name": label,
                "task": task,
                "kind": str(getattr(model.model.config, "model_type", "?")),
                "scores": {},
                "has_attention": True,
                "config": model.model.config.to_diff_dict(),
                "num_layers": model.num_layers,
                "num_heads": model.num_heads,
                "generates": model.can_generate,
            }
            continue
        from ..pretrained import resolve_model
        from ..training.checkpoint import CONFIG_NAME

        path = resolve_model(name)
        info = infos.get(name)
        if task == "translation":
            loaded.translators[label] = model
            probe = model.attention("Hola.", "Hello.").maps.alignment is not None
            config = getattr(model.model.config, "to_dict", dict)()
        else:
            loaded.captioners[label] = model
            probe = True
            config = model.config.to_dict()
        loaded.info[label] = {
            "methods": [method_info(m) for m in methods_for(model)],
            "name": label,
            "task": task,
            "kind": json.loads((path / CONFIG_NAME).read_text()).get("model_type", "?"),
            "scores": dict(info.scores) if info else {},
            "has_attention": probe,
            "config": config,
        }
        if task == "translation":
            loaded.info[label].update(src_lang=model.src_lang, tgt_lang=model.tgt_lang, corpus=model.corpus)
    return loaded
