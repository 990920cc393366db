"""Shared fixtures: the real Bible corpus, prepared once per test session in a temporary home."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import docs_site

try:  # Playwright's expect() waits 5 s by default; two pytest workers, their servers and chromium share two cores
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
except ImportError:
    pass

SWORD = Path("/usr/share/sword")
HAVE_SWORD = all((SWORD / "mods.d" / f"{m}.conf").is_file() for m in ("spaRV1909eb", "engWEB2015eb"))


_docs_build = None  # (process, folder) of the documentation site's background build, in the xdist controller


def pytest_configure(config):
    """Under pytest-xdist, the controller starts the documentation site's build (~100 s) as the run starts, when
    the docs tests are among those run, so that no worker sits waiting for it (:mod:`docs_site`)."""
    global _docs_build
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or a run without xdist: the docs tests build the site themselves
    if config.option.keyword or config.option.markexpr or os.environ.get(docs_site.ENV):
        return  # a filtered run may leave the docs tests out: they build it themselves if they run
    args = [Path(a.split("::")[0]).resolve() for a in config.args]
    tests = Path(__file__).resolve().parent
    if args and not any(a in (tests, tests.parent, tests / "test_docs.py") for a in args):
        return
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        return  # the docs tests skip themselves
    folder = Path(tempfile.mkdtemp(prefix="attnkit-docs-"))
    out = folder / "site"
    proc = docs_site.start(out)
    os.environ[docs_site.ENV] = str(out)  # the workers, started after this, inherit both
    os.environ[docs_site.PID_ENV] = str(proc.pid)
    _docs_build = (proc, folder)


def pytest_collection_modifyitems(config, items):
    """The documentation tests run last, when the site's background build (above) has long finished: run early,
    both workers would wait for it, the build being slower for the CPU it shares with them."""
    items.sort(key=lambda item: item.path.name == "test_docs.py")  # a stable sort: the others keep their order


def pytest_unconfigure(config):
    global _docs_build
    if _docs_build is None:
        return
    proc, folder = _docs_build
    _docs_build = None
    os.environ.pop(docs_site.ENV, None)
    os.environ.pop(docs_site.PID_ENV, None)
    docs_site.stop(proc)  # if the run ended first (interrupted), its build is no longer wanted
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def bible_home(tmp_path_factory):
    """An ATTNKIT_HOME holding the prepared corpus (prepare runs once, ~6 s)."""
    if not HAVE_SWORD:
        pytest.skip("SWORD modules not installed (apt-get install sword-text-sparv sword-text-web)")
    from attnkit.data.datasets.bible import prepare_bible

    home = tmp_path_factory.mktemp("attnkit_home")
    prepare_bible(home, sword_path=SWORD)
    return home


@pytest.fixture(scope="session")
def tokenizer():
    """The shipped Spanish-English tokenizer (loaded once per session)."""
    from tiny import es_en_tokenizer

    return es_en_tokenizer()
