"""The models a server (or an export) uses, loaded once by name: :func:`load_models` for the server and
:func:`load_one` for a worker process, which loads only the model its job asks for."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoadedModels", "ModelSpec", "checkpoint_fields", "describe", "load_models", "load_one", "run_spec"]


@dataclass(frozen=True)
class ModelSpec:
    """How to load one model again in another process: the name or folder given, and the engine settings.
    For a training run's folder (``name``), ``checkpoint`` is the checkpoint folder loaded (its newest
    complete one when it was loaded; :mod:`.follow` moves it on as the run writes newer ones)."""

    name: str
    device: str = "cpu"
    dtype: str | None = None
    engine: str = "pytorch"
    keep_spelling: bool = False  # translators read the input as typed, not in their training spelling
    checkpoint: str | None = None

    @property
    def label(self) -> str | None:
        """A training run's name (its folder's), which stays while its checkpoints change; None for others."""
        return Path(self.name).name if self.checkpoint else None


def run_spec(name: str, **engine) -> ModelSpec:
    """The spec of ``name``: for a training run's folder, with its newest complete checkpoint (a model still
    training, as it is now); a run with none yet is a :class:`CheckpointError`."""
    from ..training.checkpoint import CheckpointError, is_training_run, latest_checkpoint

    path = Path(name).expanduser()
    if engine.get("engine", "pytorch") != "pytorch" or not is_training_run(path):
        return ModelSpec(name, **engine)
    newest = latest_checkpoint(path)
    if newest is None:
        raise CheckpointError(
            f"--model {path}: a training run with no complete checkpoint yet (one is written every "
            "--save-every-steps steps and at the end of every epoch)"
        )
    return ModelSpec(str(path), checkpoint=str(newest), **engine)


def checkpoint_fields(spec: ModelSpec | None) -> dict:
    """``{"checkpoint": folder name, "step": its step}`` of a training run's model (what a server shows beside
    its name, so a learner knows which moment of the training they see); ``{}`` for other models."""
    if spec is None or spec.checkpoint is None:
        return {}
    from ..training.checkpoint import checkpoint_step

    return {"checkpoint": Path(spec.checkpoint).name, "step": checkpoint_step(spec.checkpoint)}


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

    if spec.checkpoint is not None:  # a training run's checkpoint, named for its run
        path, label = Path(spec.checkpoint), spec.label
    else:
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
    """Load models by name or folder (default: every shipped model). The task is the model's own. A training
    run's folder loads its newest complete checkpoint, named for the run (its spec keeps the checkpoint).
    ``engine="ctranslate2"``: each name is a CTranslate2 export (``attnkit export --format ctranslate2``).
    ``keep_spelling``: translators read the input as typed, not rewritten in their training spelling."""
    if engine == "ctranslate2":
        from ..deploy.manifest import DeployError

        if not names:
            raise DeployError(
                "serve --engine ctranslate2 needs --model FOLDER, written by "
                "`attnkit export MODEL OUT --format ctranslate2`"
            )
    from ..pretrained import known_models, shipped_models
    from .payload import method_info

    infos = {m.name: m for m in known_models()}
    chosen = names or [m.name for m in shipped_models()]
    loaded = LoadedModels()
    for name in chosen:
        spec = run_spec(name, device=device, dtype=dtype, engine=engine, keep_spelling=keep_spelling)
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
        (loaded.translators if task == "translation" else loaded.captioners)[label] = model
        info = infos.get(name)
        loaded.info[label] = describe(label, task, model, spec, dict(info.scores) if info else {})
    return loaded


def describe(label: str, task: str, model, spec: ModelSpec, scores: dict) -> dict:
    """``/api/models``' entry of a translator or captioner loaded by ``spec``."""
    from ..attribution import methods_for
    from ..pretrained import resolve_model
    from ..training.checkpoint import CONFIG_NAME
    from .payload import method_info

    path = Path(spec.checkpoint) if spec.checkpoint else resolve_model(spec.name)
    if task == "translation":
        probe = model.attention("Hola.", "Hello.").maps.alignment is not None
        config = getattr(model.model.config, "to_dict", dict)()
    else:
        probe = True
        config = model.config.to_dict()
    out = {
        "methods": [method_info(m) for m in methods_for(model)],
        "name": label,
        "task": task,
        "kind": json.loads((path / CONFIG_NAME).read_text()).get("model_type", "?"),
        "scores": scores,
        "has_attention": probe,
        "config": config,
        **checkpoint_fields(spec),
    }
    if task == "translation":
        out.update(src_lang=model.src_lang, tgt_lang=model.tgt_lang, corpus=model.corpus)
    return out
