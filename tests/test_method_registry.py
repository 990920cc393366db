"""One registry of attribution methods (:mod:`attnkit.method_registry`): every front end's list of names is
read off it, no module keeps a second table of names, and the docs' method table is the registry's."""

from __future__ import annotations

import ast
from pathlib import Path

import attnkit
from attnkit.method_registry import GRADIENTS, REGISTRY, RESIDUAL_TRACE, markdown_table, names

SRC = Path(attnkit.__file__).parent
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _tables(path: Path) -> list[tuple[int, list[str]]]:
    """Module-level constants of ``path`` (tuples, lists, sets, dict keys) naming two or more registered methods."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        for sub in ast.walk(value):
            elts = sub.keys if isinstance(sub, ast.Dict) else getattr(sub, "elts", None)
            if not isinstance(sub, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or elts is None:
                continue
            hits = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in REGISTRY]
            if len(hits) >= 2:
                found.append((node.lineno, hits))
    return found


def test_no_module_keeps_a_second_table_of_method_names():
    seconds = {
        str(p.relative_to(SRC)): t for p in SRC.rglob("*.py") if p.name != "method_registry.py" and (t := _tables(p))
    }
    assert seconds == {}


def test_the_scan_finds_a_planted_table(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('__all__ = ["alti", "routes"]\nMINE = ("attention", "rollout")\nOTHER = {"x": 1}\n')
    assert _tables(planted) == [(2, ["attention", "rollout"])]


def test_every_front_end_list_is_the_registrys():
    from attnkit.attribution import GENERATION_METHODS, METHODS
    from attnkit.attribution.gradients import GRADIENT_METHODS
    from attnkit.attribution.lm_methods import LAYER_METHODS, LM_METHOD_INFO, LM_MIXING_METHODS, LM_VIEWS
    from attnkit.cli.explain_hf import VIEW_METHODS
    from attnkit.explorer.payload import method_info
    from attnkit.service.requests import LM_VIEW_KINDS

    assert set(METHODS) == set(names(where="translation")) | set(names(where="caption"))
    assert GRADIENT_METHODS == ("saliency", "input_x_gradient", "integrated_gradients")
    assert (
        "attention",
        "rollout",
        "attention_norm",
        "value_zeroing",
        "attention_flow",
        "attention_relevance",
        "alti",
        "alti_logit",
        *GRADIENT_METHODS,
    ) == GENERATION_METHODS
    assert LM_MIXING_METHODS == ("attention_norm", "value_zeroing", "alti", "alti_logit")
    assert LAYER_METHODS == ("attention_norm", "value_zeroing", "alti")
    assert ("attention", "rollout", *LAYER_METHODS) == VIEW_METHODS
    assert LM_VIEWS == LM_VIEW_KINDS == ("logit_lens", "direct_logit", "routes")
    for name, spec in REGISTRY.items():
        assert method_info(name)["title"] == spec.title
        if name in METHODS:
            m = METHODS[name]
            assert (m.title, m.reference, m.needs_gradients) == (spec.title, spec.reference, GRADIENTS in spec.needs)
        if name in LM_METHOD_INFO:
            assert LM_METHOD_INFO[name] == (spec.title, spec.reference, spec.needs_gradients)
    # ALTI and ALTI+ are two methods: one reads a language model's blocks, the other an encoder-decoder's stacks
    assert REGISTRY["alti"].text_rows and not REGISTRY["alti"].translation
    assert REGISTRY["alti_plus"].translation and not REGISTRY["alti_plus"].text_rows
    assert all(RESIDUAL_TRACE in REGISTRY[n].needs for n in (*LM_MIXING_METHODS, *LM_VIEWS))


def test_the_explorers_lane_and_worker_split_is_the_registrys():
    from attnkit.explorer.routes.self_attention import HEAVY_METHODS

    assert set(HEAVY_METHODS) == {n for n, s in REGISTRY.items() if s.heavy and s.text_rows}
    assert {"saliency", "value_zeroing", "alti_logit"} <= set(HEAVY_METHODS) and "attention" not in HEAVY_METHODS


def test_the_docs_method_table_is_the_registrys():
    page = (DOCS / "reference" / "methods.md").read_text(encoding="utf-8")
    assert markdown_table() in page
    assert page.count("\n| `") == len(REGISTRY)
