"""The models a server (or an export) uses, opened once by name with :func:`attnkit.service.open_model`:
:func:`load_models` for the server, :func:`open_spec` for a worker process (which opens only the model its
job asks for) and a followed training run's newer checkpoint."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..service import Model, ModelSpec, open_model
from . import schema
from .payload import checkpoint_fields, method_info

__all__ = [
    "LoadedModels",
    "ModelSpec",
    "describe",
    "distinct_labels",
    "explorer_model",
    "load_models",
    "open_spec",
]


@dataclass
class LoadedModels:
    """The models a server (or an export) uses, by name, loaded once; ``specs`` says how to load each again."""

    translators: dict[str, Any] = field(default_factory=dict)
    captioners: dict[str, Any] = field(default_factory=dict)
    self_attention: dict[str, Any] = field(default_factory=dict)  # Hugging Face encoder-only, decoder-only
    info: dict[str, schema.ModelInfo] = field(default_factory=dict)  # /api/models' entries
    specs: dict[str, ModelSpec] = field(default_factory=dict)


def explorer_model(model: Model):
    """What the explorer's payloads read of ``model``: its wrapper, with a CTranslate2 export given the
    PyTorch translator's interface (:class:`attnkit.deploy.ct2_explorer.CT2ExplorerTranslator`). An attnkit
    language model is a text model itself (:class:`attnkit.tasks.language_model.text_model.LanguageModelText`),
    read natively, as the page reads any decoder-only model, with every language-model view."""
    if model.spec.engine == "ctranslate2":
        from ..deploy.ct2_explorer import CT2ExplorerTranslator

        return CT2ExplorerTranslator(model.impl)
    return model.impl


def open_spec(spec: ModelSpec) -> Model:
    """The model ``spec`` opens (a worker's job), with :func:`attnkit.service.open_model`, its ``impl`` the
    explorer's view of it (:func:`explorer_model`)."""
    import dataclasses

    opened = open_model(spec)
    return dataclasses.replace(opened, impl=explorer_model(opened))


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

    infos = {m.name: m for m in known_models()}
    chosen = names or [m.name for m in shipped_models()]
    loaded = LoadedModels()
    every = [
        open_model(name, device=device, precision=dtype, engine=engine, keep_spelling=keep_spelling) for name in chosen
    ]
    for name, opened in zip(chosen, distinct_labels(every)):
        label, task, model, spec = opened.label, str(opened.kind), explorer_model(opened), opened.spec
        loaded.specs[label] = spec
        if engine == "ctranslate2":
            loaded.translators[label] = model
            loaded.info[label] = schema.ModelInfo(
                name=label,
                task="translation",
                kind=f"{model.model.model_type} (CTranslate2 {model.ct2.quantization})",
                scores={},
                has_attention=True,
                config=model.model.config.to_dict(),
                engine="ctranslate2",
            )
            continue
        if task in (
            "self-attention",
            "language-model",
        ):  # text models: Hugging Face decoder- or encoder-only, attnkit's
            from ..attribution.generation import row_methods

            loaded.self_attention[label] = model
            if not model.can_generate:  # an encoder-only model has no worker job: the workers need not load it
                del loaded.specs[label]
            loaded.info[label] = schema.ModelInfo(
                methods=[method_info(m) for m in row_methods(model)] if model.can_generate else [],
                name=label,
                task="self-attention",
                kind=model.family,
                scores={},
                has_attention=True,
                config=_config_dict(model.model.config),
                num_layers=model.num_layers,
                num_heads=model.num_heads,
                generates=model.can_generate,
                lang=infos[name].lang if name in infos else None,  # the page's example text is in it
            )
            continue
        (loaded.translators if task == "translation" else loaded.captioners)[label] = model
        info = infos.get(name)
        loaded.info[label] = describe(opened, dict(info.scores) if info else {})
    return loaded


def _config_dict(config) -> dict:
    """A model's config as JSON: a ``transformers`` config's entries that differ from its defaults, or an
    attnkit config's fields."""
    diff = getattr(config, "to_diff_dict", None)
    return diff() if diff is not None else config.to_dict()


def distinct_labels(models: list[Model]) -> list[Model]:
    """``models`` with labels that differ: two models whose folders share a name (``a/bert``, ``b/bert``)
    are both served, each named by the shortest end of its path that no other of them shares
    (``a/bert``, ``b/bert``); a model without a folder (a hub name) keeps its label, or its name."""
    import dataclasses

    def where(m: Model) -> tuple[str, ...]:  # a training run's folder, else the model's own
        path = Path(m.spec.name) if m.spec.checkpoint else m.path
        return Path(os.path.abspath(path.expanduser())).parts if path is not None else (m.label,)

    out = list(models)
    for i, m in enumerate(models):
        twins = [where(o) for j, o in enumerate(models) if j != i and o.label == m.label]
        if not twins:
            continue
        parts = where(m)
        n = next(
            (k for k in range(2, len(parts) + 1) if all(t[-k:] != parts[-k:] for t in twins)),
            len(parts),
        )
        out[i] = dataclasses.replace(m, label="/".join(parts[-n:]).lstrip("/") or m.label)
    return out


def describe(opened: Model, scores: dict) -> schema.ModelInfo:
    """``/api/models``' entry of ``opened``, an opened translator or captioner (PyTorch engine), with a
    training run's checkpoint (``checkpoint``, ``step``)."""
    from ..attribution import methods_for
    from ..training.checkpoint import CONFIG_NAME

    label, task, spec, path, model = opened.label, str(opened.kind), opened.spec, opened.path, opened.impl
    if task == "translation":
        probe = model.attention("Hola.", "Hello.").maps.alignment is not None
        config = getattr(model.model.config, "to_dict", dict)()
        langs = dict(src_lang=model.src_lang, tgt_lang=model.tgt_lang, corpus=model.corpus)
    else:
        probe = True
        config = model.config.to_dict()
        langs = {}
    return schema.ModelInfo(
        methods=[method_info(m) for m in methods_for(model)],
        name=label,
        task=task,
        kind=(
            json.loads((path / CONFIG_NAME).read_text()).get("model_type", "?")
            if path is not None
            else str(getattr(getattr(model.model, "config", None), "model_type", "?"))  # a Hugging Face hub name
        ),
        scores=scores,
        has_attention=probe,
        config=config,
        **langs,
        **checkpoint_fields(spec),
    )
