"""The documentation site: ``mkdocs build --strict`` (mkdocs.yml raises broken links, missing anchors and
pages left out of the nav to warnings, and --strict makes every warning an error) renders every page, the
tutorial notebooks with the outputs they store (``tests/test_tutorials.py`` executes them and compares);
then the built HTML is checked on its own terms: every relative link and image resolves to a file of the site
(and its anchor to an id there), nothing is loaded from the network, every tutorial shows its stored outputs
and figures, and the API reference has an entry for every public name (each documented module's
``__all__``)."""

from __future__ import annotations

import importlib
import inspect
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import docs_site

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocs_jupyter")
pytest.importorskip("mkdocstrings_handlers.python")
pytest.importorskip("material")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once per test run: by the run's controller in the background under pytest-xdist
    (:mod:`docs_site`), which the workers wait for; else by the first worker to get here, under a lock."""
    background = os.environ.get(docs_site.ENV)
    if background:
        out = Path(background)
        pid = os.environ.get(docs_site.PID_ENV)
        log = docs_site.wait(out, int(pid) if pid else None)
        assert log is None, f"mkdocs build --strict failed:\n{log}"
        return out
    from filelock import FileLock

    run = tmp_path_factory.getbasetemp()  # this run's folder; under pytest-xdist each worker's, inside the run's
    out = (run.parent if os.environ.get("PYTEST_XDIST_WORKER") else run) / "docs-site"
    with FileLock(f"{out}.lock"):
        if not (out / "index.html").is_file():  # a failed build leaves none, and the next worker builds again
            log = docs_site.build(out)
            assert log is None, f"mkdocs build --strict failed:\n{log}"
    return out


class _Page(HTMLParser):
    """The ids, the links (href/src) and the remote loads of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.remote: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) is not None:
                self.links.append(a[key])
        loads = (tag == "script" and a.get("src")) or (
            tag == "link" and "stylesheet" in (a.get("rel") or "") and a.get("href")
        )
        if loads and urlsplit(loads).scheme in ("http", "https", "") and loads.startswith(("http", "//")):
            self.remote.append(f"<{tag}> {loads}")


def _pages(site: Path) -> dict[Path, _Page]:
    pages = {}
    for path in sorted(site.rglob("*.html")):
        if path == site / "404.html":  # a server's page: its links are absolute from the server's root
            continue
        p = _Page()
        p.feed(path.read_text(encoding="utf-8"))
        pages[path] = p
    return pages


@pytest.fixture(scope="module")
def pages(site):
    return _pages(site)


def test_every_relative_link_resolves_to_a_file_and_anchor_of_the_site(site, pages):
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "data:", "javascript:", "mailto:")) or not link:
                continue
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_nothing_is_loaded_from_the_network(site, pages):
    """Offline reading from site/: no CDN script, stylesheet or font (Material's font: false, the offline
    plugin, and the hook that drops the remaining script tags)."""
    remote = [f"{p.relative_to(site)}: {r}" for p, page in pages.items() for r in page.remote]
    assert not remote, "\n".join(remote[:20])
    cdn = re.compile(r"fonts\.googleapis|fonts\.gstatic|unpkg\.com|cdnjs\.cloudflare|cdn\.jsdelivr")
    hits = [str(p.relative_to(site)) for p in pages if cdn.search(p.read_text(encoding="utf-8"))]
    assert not hits, f"pages that name a CDN: {hits}"


@pytest.mark.parametrize("notebook", TUTORIALS, ids=lambda p: p.stem)
def test_every_tutorial_page_shows_the_outputs_and_figures_it_stores(site, notebook):
    """The site shows each tutorial as stored (mkdocs-jupyter, ``execute: false``): every tutorial stores its
    outputs (``tests/test_tutorials.py`` executes it and compares them; ``NOT_YET_STORED`` names the exceptions),
    and its page has every code cell, an output, every stored figure, no traceback and nothing from stderr."""
    import nbformat

    from test_tutorials import NOT_YET_STORED

    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    html = (site / "tutorials" / f"{notebook.stem}.html").read_text(encoding="utf-8")
    assert html.count("jp-CodeCell") >= len(code)
    if notebook.stem in NOT_YET_STORED:
        return
    assert all(c.get("execution_count") for c in code), (
        f"{notebook.name} is stored without its outputs: python tools/notebooks.py {notebook.stem[:2]}"
    )
    assert "jp-OutputArea-output" in html, f"{notebook.name}: no output in the built page"
    figures = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert html.count("data:image/png;base64,") >= figures, f"{notebook.name}: a stored figure is not on its page"
    assert "Traceback (most recent call last)" not in html
    assert not re.search(r'jp-OutputArea-output[^>]*data-mime-type="application/vnd.jupyter.stderr"', html), (
        f"{notebook.name} writes to stderr (a warning?)"
    )


def _documented_modules() -> list[tuple[str, Path]]:
    out = []
    for md in sorted((DOCS / "api").glob("*.md")):
        out += [(m, md) for m in re.findall(r"^::: ([\w.]+)\s*$", md.read_text(encoding="utf-8"), flags=re.M)]
    return out


def test_the_api_reference_has_an_entry_for_every_public_name(site, pages):
    ids = {i for path, page in pages.items() if path.parent.name == "api" for i in page.ids}
    missing = []
    for name, md in _documented_modules():
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None)
        assert public is not None, f"{md.name} documents {name}, which has no __all__"
        for attr in public:
            obj = getattr(module, attr)
            if inspect.ismodule(obj):  # a submodule: its own entry
                wants = {obj.__name__}
            else:  # where it is exported, or where it is defined (a function named like its module)
                wants = {f"{name}.{attr}", f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"}
            if not wants & ids:
                missing.append(f"{name}.{attr} ({md.name})")
    assert not missing, "public names without an entry in the API reference:\n" + "\n".join(missing)


def test_every_package_has_an_api_page():
    documented = {name for name, _ in _documented_modules()}
    packages = sorted(p.name for p in (ROOT / "src" / "attnkit").iterdir() if (p / "__init__.py").is_file())
    missing = [p for p in packages if not any(d == f"attnkit.{p}" or d.startswith(f"attnkit.{p}.") for d in documented)]
    assert not missing, f"packages with no page in docs/api/: {missing}"


def test_every_public_class_function_and_module_has_its_own_docstring():
    """What the reference shows under each name: a docstring written for it (a dataclass's generated
    signature does not count)."""
    missing = []
    for name, _ in _documented_modules():
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
                doc = (obj.__doc__ or "").strip()
                if not doc or (inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(")):
                    missing.append(f"{name}.{attr}")
    assert not missing, f"public names without a docstring: {missing}"
