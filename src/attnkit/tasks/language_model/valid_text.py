"""The validation text a language model was trained beside, found again from its folder: what
``attnkit evaluate induction`` measures the in-context-learning score on (Olsson et al. 2022).

A training run writes ``train_config.json`` (the corpus ``data``, its ``side``, the block ``context``) in
its folder, beside the ``step-*`` checkpoints; an exported or copied checkpoint has none, and then there
is no text to measure on (the caller says so in one line).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...data.corpus import CorpusError, open_corpus
from .data import side_texts, token_stream
from .train import ICL_BLOCKS, valid_blocks

__all__ = ["valid_text_ids"]


def _record(checkpoint: Path) -> dict | None:
    """The run's ``train_config.json`` beside ``checkpoint`` (in it, or in its run folder), else None."""
    for folder in (checkpoint, checkpoint.parent):
        f = folder / "train_config.json"
        if f.is_file():
            try:
                found = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return found if isinstance(found, dict) and "data" in found else None
    return None


def valid_text_ids(
    checkpoint: str | Path, tokenizer, max_len: int, *, home: str | Path | None = None, blocks: int = ICL_BLOCKS
) -> tuple[torch.Tensor | None, str]:
    """``(ids (B, T), what)``: the first ``blocks`` blocks of the model's own validation text, cut as the
    trainer cuts them (``T`` = the run's ``context``, at most ``max_len``), and a line naming it; or
    ``(None, why)`` when the folder does not say which corpus, or the corpus cannot be read."""
    record = _record(Path(checkpoint))
    if record is None:
        return None, "the folder does not say which corpus the model was trained on (no train_config.json)"
    name, side = str(record["data"]), str(record.get("side", "en"))
    context = min(int(record.get("context") or max_len), max_len)
    try:
        corpus = open_corpus(name, home)
        stream = token_stream(side_texts(corpus, "valid", side), tokenizer)
    except (CorpusError, OSError, ValueError) as exc:
        return None, f"its corpus {name!r} cannot be read here ({str(exc).splitlines()[0] if str(exc) else exc})"
    ids = valid_blocks(stream, context, blocks)[:, :-1]  # (B, T)
    if ids.shape[0] == 0 or ids.shape[1] < 4:
        return None, f"the valid split of {name!r} holds no block of {context} + 1 tokens"
    return ids, f"{ids.shape[0]} blocks of {ids.shape[1]} tokens of the valid split of {name!r} ({side})"
