"""The import graph of ``src/attnkit`` against the layer order written in the docs' architecture page.

Every module is parsed with :mod:`ast` (nothing is imported): each ``import``/``from ... import``
anywhere in it (function bodies included: a lazy import is still a dependency) and each
``importlib.import_module("...")`` with a literal name becomes an edge from the module to the module
it names. Each module belongs to a layer (its top-level package under ``attnkit``, or its own name for
a top-level module); the page lists the layers top first, several to a line for one layer. An edge
may point within a layer or down, never up; the module graph and the graph of layers' packages have
no cycles. The checks are plain graph facts, reported with the file and line of each import.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "attnkit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_order(page: Path = ARCHITECTURE) -> list[list[str]]:
    """The layers, top first, from the first ```text block after the "## Layer order" heading."""
    text = page.read_text(encoding="utf-8")
    m = re.search(r"^## Layer order\s*$.*?^```text\n(.*?)^```", text, flags=re.M | re.S)
    if m is None:
        raise AssertionError(f"{page}: no ```text block under '## Layer order'")
    return [[name.strip() for name in line.split(",")] for line in m.group(1).splitlines() if line.strip()]


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported module, dotted
    line: int
    path: Path


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _absolute(module: str | None, level: int, importer: str, is_pkg: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _known(name: str, mods: dict) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (``a.b.C`` -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in mods:
            return ".".join(parts)
        parts.pop()
    return None


def edges(mods: dict | None = None) -> list[Edge]:
    mods = modules() if mods is None else mods
    out = []
    for name, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, name, is_pkg)
                # `from pkg import sub` depends on the submodule; `from mod import name` on the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                pkg = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
                rel = node.args[0].value
                level = len(rel) - len(rel.lstrip("."))
                anchor = name if is_pkg else name.rpartition(".")[0]
                if level and pkg is None:  # `import_module(".x", __name__)`: __name__ is the importer
                    pkg = anchor if is_pkg else name
                targets = [_absolute(rel.lstrip(".") or None, level, pkg or name, True) if level else rel]
            for target in targets:
                known = _known(target, mods)
                if known is not None and known != name:
                    out.append(Edge(name, known, node.lineno, path))
    return out


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


@pytest.fixture(scope="module")
def graph():
    order = layer_order()
    rank = {name: i for i, line in enumerate(order) for name in line}
    mods = modules()
    return order, rank, mods, edges(mods)


def _where(e: Edge) -> str:
    return f"{e.path.relative_to(ROOT)}:{e.line}: {e.src} imports {e.dst}"


def test_the_page_lists_each_layer_once(graph):
    order, _, _, _ = graph
    names = [n for line in order for n in line]
    assert len(names) == len(set(names)), f"a layer is listed twice: {names}"
    assert all(re.fullmatch(r"[a-z_][a-z0-9_]*", n) for n in names), names
    assert order[0] == [PACKAGE], "the package root is the top layer"


def test_every_package_and_top_level_module_has_a_layer(graph):
    _, rank, mods, _ = graph
    missing = sorted({layer_of(m) for m in mods} - set(rank))
    assert not missing, f"not placed in the layer order of {ARCHITECTURE.name}: {missing}"


def test_no_import_points_up(graph):
    _, rank, _, es = graph
    upward = [_where(e) for e in es if rank[layer_of(e.dst)] < rank[layer_of(e.src)]]
    assert not upward, "imports that go up the layer order:\n" + "\n".join(sorted(upward))


def test_nothing_inside_imports_the_package_root(graph):
    _, _, _, es = graph
    bad = [_where(e) for e in es if e.dst == PACKAGE]
    assert not bad, "read the version from attnkit.version, not the root:\n" + "\n".join(bad)


def _cycle(nodes: set[str], succ: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (as a list of nodes, first repeated last), or None: depth-first search."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(succ.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_module_import_cycle(graph):
    _, _, mods, es = graph
    succ: dict[str, set[str]] = {}
    for e in es:
        succ.setdefault(e.src, set()).add(e.dst)
    cycle = _cycle(set(mods), succ)
    assert cycle is None, "modules that import each other in a circle: " + " -> ".join(cycle)


def test_no_cycle_between_packages_of_one_layer(graph):
    _, _, mods, es = graph
    succ: dict[str, set[str]] = {}
    for e in es:
        a, b = layer_of(e.src), layer_of(e.dst)
        if a != b:
            succ.setdefault(a, set()).add(b)
    cycle = _cycle({layer_of(m) for m in mods}, succ)
    assert cycle is None, "packages that import each other in a circle: " + " -> ".join(cycle)


# The checker itself, on a small made-up package: it must see what it claims to see.


def _write(root: Path, files: dict[str, str]) -> dict:
    for rel, text in files.items():
        path = root / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(root)


def test_the_parser_sees_lazy_relative_and_importlib_imports(tmp_path):
    mods = _write(
        tmp_path,
        {
            "__init__.py": "import importlib\ndef f():\n    return importlib.import_module('.low.b', __name__)\n",
            "low/__init__.py": "",
            "low/b.py": "def g():\n    from ..high import c\n",
            "high/__init__.py": "from . import c\n",
            "high/c.py": "from attnkit.low.b import g\nimport attnkit.low\n",
        },
    )
    found = {(e.src, e.dst, e.line) for e in edges(mods)}
    assert found == {
        ("attnkit", "attnkit.low.b", 3),
        ("attnkit.low.b", "attnkit.high.c", 2),
        ("attnkit.high", "attnkit.high.c", 1),
        ("attnkit.high.c", "attnkit.low.b", 1),
        ("attnkit.high.c", "attnkit.low", 2),
    }
    succ: dict[str, set[str]] = {}
    for src, dst, _ in found:
        succ.setdefault(src, set()).add(dst)
    cycle = _cycle(set(mods), succ)
    assert cycle[0] == cycle[-1] and set(cycle) == {"attnkit.high.c", "attnkit.low.b"}


def test_the_order_is_read_from_the_page(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# A\n\n## Layer order\n\ntext\n\n```text\nattnkit\ncli\nx, y\n\nz\n```\n\n```text\nw\n```\n")
    assert layer_order(page) == [["attnkit"], ["cli"], ["x", "y"], ["z"]]


def external_imports(path: Path) -> list[tuple[str, int]]:
    """``(top-level name, line)`` of each absolute import in the file (function bodies included) and each
    ``importlib.import_module("...")`` of an absolute name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.module.split(".")[0], node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            out.append((node.args[0].value.split(".")[0], node.lineno))
    return out


def test_only_hf_imports_transformers():
    """docs/architecture.md: only ``attnkit/hf/`` imports ``transformers`` (lazy imports included)."""
    hf = SRC / PACKAGE / "hf"
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((SRC / PACKAGE).rglob("*.py"))
        if hf not in path.parents
        for name, line in external_imports(path)
        if name == "transformers"
    ]
    assert not bad, "transformers imported outside attnkit/hf/:\n" + "\n".join(bad)


def test_the_external_import_parser_sees_every_form(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text(
        "import os.path\nfrom transformers.utils import logging\n"
        "def f():\n    import transformers as t\n    import importlib\n"
        "    importlib.import_module('transformers.models')\n    from . import transformers\n",
        encoding="utf-8",
    )
    assert external_imports(mod) == [
        ("os", 1),
        ("transformers", 2),
        ("transformers", 4),
        ("importlib", 5),
        ("transformers", 6),
    ]
