"""The models attnkit ships, and how a model name or folder resolves to a checkpoint folder.

The shipped models are package data (``attnkit/pretrained/<name>/``: config.json,
model.safetensors in fp16, tokenizer or vocabulary, and the COMPLETE manifest), so they travel
inside the wheel and work after a plain ``pip install``, from any folder. Their test scores live
in one place, ``index.json`` beside this file, read by ``attnkit models``, the demo and the
explorer.

A model argument resolves in this order (:func:`resolve_model`):

1. an existing folder (a path: ``runs/rnnsearch/best``, ``./my-model``);
2. a shipped model name (``transformer-es-en``);
3. a locally trained model exported under ``$ATTNKIT_HOME/models/<name>``;
4. ``hf:NAME``: a model on the Hugging Face hub (or in its local cache), kept as the path
   ``hf:NAME`` so that it flows through every caller like a folder.

A folder that holds a ``config.json`` but no attnkit ``COMPLETE`` manifest is a Hugging Face model
folder (``save_pretrained``, ``huggingface-cli download``): :func:`hf_source` tells the two kinds
apart, and the loaders (:meth:`attnkit.tasks.translation.Translator.load`) hand those to
:mod:`attnkit.hf`.

An unknown name raises :class:`UnknownModelError`, which lists the names that are known.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import AttnkitError
from ..paths import COMPLETE_NAME, attnkit_home

__all__ = [
    "DEFAULT_ALIGNMENT_MODEL",
    "DEFAULT_CAPTION_MODEL",
    "DEFAULT_EXPORT_MODEL",
    "DEFAULT_TRANSLATION_MODEL",
    "DEMO_TRANSLATION_MODEL",
    "HF_PREFIX",
    "PRETRAINED_DIR",
    "ModelInfo",
    "UnknownModelError",
    "hf_source",
    "known_models",
    "local_models",
    "model_task",
    "resolve_model",
    "reverse_model",
    "shipped_models",
]

PRETRAINED_DIR = Path(__file__).resolve().parent
DEFAULT_TRANSLATION_MODEL = "transformer-es-en"  # the best shipped translator at beam 5 (test BLEU in index.json)
DEFAULT_EXPORT_MODEL = "transformer-es-en"  # the shipped Transformer: the kind every export format takes
DEFAULT_ALIGNMENT_MODEL = "transformer-es-en"  # the best shipped aligner (layer 2: AER 0.381 vs RNNsearch 0.409)
DEMO_TRANSLATION_MODEL = "rnnsearch-es-en"  # the demo's picture: Bahdanau's alignment
DEFAULT_CAPTION_MODEL = "captioner-soft"
HF_PREFIX = "hf:"  # `--model hf:Helsinki-NLP/opus-mt-es-en`: a model on the Hugging Face hub


class UnknownModelError(AttnkitError, ValueError):
    """A model name that is neither a folder, a shipped model nor a local one."""


@dataclass
class ModelInfo:
    """One model ``attnkit models`` lists: where it is, what it is and how it scored."""

    name: str
    path: Path
    source: str  # "shipped" | "local"
    task: str  # "translation" | "captioning" | "?"
    model_type: str
    size_bytes: int
    scores: dict = field(default_factory=dict)  # e.g. {"test_bleu": 31.23, "test_chrf": 51.99}
    src_lang: str | None = None  # translation models: the pair and the corpus from config.json
    tgt_lang: str | None = None
    corpus: str | None = None
    lang: str | None = None  # language models: the language of their text (index.json, or config.json's "lang")

    def to_dict(self) -> dict:
        return {
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "corpus": self.corpus,
            "lang": self.lang,
            "name": self.name,
            "path": str(self.path),
            "source": self.source,
            "task": self.task,
            "model_type": self.model_type,
            "size_bytes": self.size_bytes,
            "scores": self.scores,
        }


@lru_cache(maxsize=1)
def _index() -> dict:
    return json.loads((PRETRAINED_DIR / "index.json").read_text(encoding="utf-8"))


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def hf_source(name_or_path: str | os.PathLike) -> str | None:
    """What to give ``from_pretrained`` when ``name_or_path`` (as :func:`resolve_model` returns it) is a
    Hugging Face model: the hub name of ``hf:NAME``, or the folder of a Hugging Face model folder (a
    ``config.json`` and no attnkit ``COMPLETE`` manifest); ``None`` for an attnkit model."""
    text = str(name_or_path)
    if text.startswith(HF_PREFIX) and not Path(text).is_dir():
        return text[len(HF_PREFIX) :]
    path = Path(text).expanduser()
    if path.is_dir() and (path / "config.json").is_file() and not (path / COMPLETE_NAME).exists():
        return str(path)
    return None


def _hf_task(source: str) -> str:
    """The task of a Hugging Face model, from its ``config.json`` (the folder's, or the hub cache's
    copy): ``"translation"`` for an encoder-decoder, ``"self-attention"`` for an encoder-only or
    decoder-only model; ``"translation"`` when the config cannot be read here (loading says why)."""
    config = Path(source) / "config.json"
    if not config.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return "translation"
        found = try_to_load_from_cache(source, "config.json")
        if not isinstance(found, str):
            return "translation"
        config = Path(found)
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "translation"
    return "translation" if data.get("is_encoder_decoder") else "self-attention"


def model_task(path: str | os.PathLike) -> str:
    """What the model in folder ``path`` does, from the files beside its weights: ``"language-model"``
    (attnkit's decoder-only model: ``model_type`` ``language_model`` in its ``config.json``),
    ``"translation"`` (a sentencepiece tokenizer, or a Hugging Face encoder-decoder), ``"captioning"`` (a
    caption vocabulary), ``"self-attention"`` (a Hugging Face encoder-only or decoder-only model) or ``"?"``."""
    from ..data.tokenizer import MODEL_FILENAME

    source = hf_source(path)
    if source is not None:
        return _hf_task(source)
    path = Path(path)
    if _model_type(path) == "language_model":  # it has a tokenizer.model too: asked first
        return "language-model"
    if (path / MODEL_FILENAME).is_file():
        return "translation"
    from ..data.vocab import VOCAB_FILENAME

    return "captioning" if (path / VOCAB_FILENAME).is_file() else "?"


def _model_type(path: Path) -> str | None:
    """The ``model_type`` of ``path/config.json``, or None when there is none to read."""
    try:
        return json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _info(name: str, path: Path, source: str) -> ModelInfo:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    model_type = str(config.get("model_type", "?"))
    entry = _index().get(name, {}) if source == "shipped" else {}
    task = entry.get("task") or model_task(path)
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    pair = {}
    if task == "translation":  # models saved before languages were recorded are the Bible's es → en
        pair = {k: str(config.get(k, d)) for k, d in (("src_lang", "es"), ("tgt_lang", "en"), ("corpus", "bible"))}
    elif task == "language-model" and (entry.get("lang") or config.get("lang")):
        pair = {"lang": str(entry.get("lang") or config.get("lang"))}
    return ModelInfo(name, path, source, task, model_type, size, dict(entry.get("scores", {})), **pair)


def shipped_models() -> list[ModelInfo]:
    """The models inside the package, in ``index.json`` order."""
    return [_info(name, PRETRAINED_DIR / name, "shipped") for name in _index() if _is_model_dir(PRETRAINED_DIR / name)]


def local_models(home: str | os.PathLike | None = None) -> list[ModelInfo]:
    """Model folders under ``$ATTNKIT_HOME/models`` (``attnkit export RUN $ATTNKIT_HOME/models/NAME``)."""
    folder = attnkit_home(home) / "models"
    if not folder.is_dir():
        return []
    return [_info(p.name, p, "local") for p in sorted(folder.iterdir()) if p.is_dir() and _is_model_dir(p)]


def known_models(home: str | os.PathLike | None = None) -> list[ModelInfo]:
    """Shipped models, then local ones."""
    return shipped_models() + local_models(home)


def reverse_model(path: str | os.PathLike) -> str | None:
    """The shipped model that translates the other way with the same architecture and corpus as the
    translation model in folder ``path`` (``transformer-en-es`` for ``transformer-es-en``), or None: the
    second direction ``attnkit align --symmetrize`` reads by default. A Hugging Face name (no folder) has none."""
    if not Path(path).is_dir():
        return None
    this = _info(Path(path).name, Path(path), "local")
    if this.task != "translation":
        return None
    for other in shipped_models():
        if (other.task, other.model_type, other.corpus) == (this.task, this.model_type, this.corpus) and (
            other.src_lang,
            other.tgt_lang,
        ) == (this.tgt_lang, this.src_lang):
            return other.name
    return None


def resolve_model(name_or_path: str | os.PathLike, *, home: str | os.PathLike | None = None) -> Path:
    """The checkpoint folder that ``name_or_path`` means (see the module docstring for the order)."""
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise TypeError(f"model must be a model name or a folder, got {name_or_path!r}")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    text = str(name_or_path)
    if text.startswith(HF_PREFIX):
        if not text[len(HF_PREFIX) :].strip():
            raise UnknownModelError(
                f"model {text!r} names no Hugging Face model: give hf:NAME, e.g. hf:Helsinki-NLP/opus-mt-es-en"
            )
        return Path(text)
    if os.sep not in text and "/" not in text:
        if _is_model_dir(PRETRAINED_DIR / text) and text in _index():
            return PRETRAINED_DIR / text
        local = attnkit_home(home) / "models" / text
        if _is_model_dir(local):
            return local
    known = ", ".join(m.name for m in known_models(home)) or "none"
    if os.sep in text or "/" in text:
        raise UnknownModelError(f"model folder {text} does not exist (known model names: {known})")
    raise UnknownModelError(
        f"model {text!r} is neither a folder nor a known model name (known: {known}; `attnkit models` lists them)"
    )
