"""The method matrix: every method of the registry on every kind of model attnkit reads, run through the typed
service (:func:`attnkit.service.analyse`, what the CLI, the JSON API and the page call), on the shipped models
and tiny Hugging Face ones. Each cell runs, or is refused in one line (an :class:`attnkit.errors.AttnkitError`,
no traceback); ``docs/reference/method-matrix.md`` is this test's table (``python tests/test_method_matrix.py``
writes it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from attnkit.errors import AttnkitError
from attnkit.method_registry import REGISTRY
from attnkit.service import (
    CaptionRequest,
    GenerationRequest,
    LMViewRequest,
    MethodOptions,
    ModelKind,
    TranslationRequest,
    analyse,
    open_model,
)
from hf_tiny import saved_tiny

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "method-matrix.md"
#: the kinds of model, each by a model of that kind: a shipped one, or a tiny Hugging Face one of that family
KINDS = {
    "RNNencdec": "rnnencdec-es-en",
    "RNNsearch": "rnnsearch-es-en",
    "Transformer translator": "transformer-es-en",
    "captioner (soft)": "captioner-soft",
    "captioner (hard)": "captioner-hard",
    "attnkit LM": "lm-4l-en",
    "attnkit LM, attention-only": "attention-only-2l-en",
    "HF encoder-decoder (Marian)": "hf:marian",
    "HF encoder-only (BERT)": "hf:bert",
    "HF decoder-only (GPT-2)": "hf:gpt2",
}
TEXT = "In the beginning God created"


def _open(name: str):
    return open_model(str(saved_tiny(name[3:])) if name.startswith("hf:") else name)


def _run(model, method: str) -> None:
    """``method`` on ``model`` as a front end asks for it (integrated gradients with 4 points: the cell asks
    whether it runs, not for its precision)."""
    spec = REGISTRY[method]
    steps = 4 if method == "integrated_gradients" else None
    if model.kind is ModelKind.TRANSLATOR:
        analyse(model, TranslationRequest("Jesús lloró.", beam=1, method=method, options=MethodOptions(steps=steps)))
    elif model.kind is ModelKind.CAPTIONER:
        c = model.impl.canvas
        image = torch.rand(1, c, c, generator=torch.Generator().manual_seed(0))
        analyse(model, CaptionRequest(image, method=method, options=MethodOptions(steps=steps)))
    elif not model.impl.can_generate and spec.text_layers:  # an encoder-only model: every layer's map of a text
        from attnkit.attribution.lm_methods import LAYER_METHODS, layer_maps

        ids, _ = model.impl.encode(TEXT)
        if method in LAYER_METHODS:
            layer_maps(model.impl.model, ids, method)
        else:
            maps = model.impl.self_attention(TEXT)
            maps.rollout() if method == "rollout" else maps.head_mean
    elif spec.text_view:
        analyse(model, LMViewRequest(TEXT, view=method))
    else:
        analyse(model, GenerationRequest(TEXT, mode="forced", method=method, steps=steps))


def matrix() -> dict[str, dict[str, str]]:
    """``{kind: {method: "runs" or the one-line refusal}}``; anything but an :class:`AttnkitError` propagates."""
    out: dict[str, dict[str, str]] = {}
    for kind, name in KINDS.items():
        model = _open(name)
        row = out[kind] = {}
        for method in REGISTRY:
            try:
                _run(model, method)
                row[method] = "runs"
            except AttnkitError as e:
                row[method] = str(e)
    return out


def render(cells: dict[str, dict[str, str]]) -> str:
    """The page's table: kinds down, methods across, ✓ where a method runs and ✗ where it is refused."""
    methods = list(REGISTRY)
    lines = ["| model | " + " | ".join(f"`{m}`" for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for kind, row in cells.items():
        lines.append(f"| {kind} | " + " | ".join("✓" if row[m] == "runs" else "✗" for m in methods) + " |")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cells():
    return matrix()


def test_every_cell_runs_or_is_refused_in_one_line(cells):
    for kind, row in cells.items():
        for method, said in row.items():
            assert "\n" not in said and said, (kind, method, said)
            if said != "runs":  # the refusal names the method (or what the model lacks), never a bare error
                assert method in said or "does not write text" in said or "no language-model head" in said, said


def test_the_language_models_run_every_language_model_method(cells):
    lm = [m for m, s in REGISTRY.items() if s.text_rows or s.text_view]
    for kind in ("attnkit LM", "attnkit LM, attention-only", "HF decoder-only (GPT-2)"):
        assert [m for m in lm if cells[kind][m] != "runs"] == [], kind
    for kind in ("Transformer translator", "HF encoder-decoder (Marian)"):
        translation = [m for m, s in REGISTRY.items() if s.translation]
        assert [m for m in translation if cells[kind][m] != "runs"] == [], kind


def test_the_docs_matrix_is_what_runs(cells):
    assert render(cells) in PAGE.read_text(encoding="utf-8")


if __name__ == "__main__":  # write the page's table from a run
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    page = PAGE.read_text(encoding="utf-8")
    head = page[: page.index("| model |")] if "| model |" in page else page
    PAGE.write_text(head + render(matrix()), encoding="utf-8")
    print(f"wrote {PAGE}")
