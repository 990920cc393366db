"""Shared fixtures: the real Bible corpus, prepared once per test session in a temporary home."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import background
import bible_home as bible
import docs_site

try:  # Playwright's expect() waits 5 s by default; two pytest workers, their servers and chromium share two cores
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
except ImportError:
    pass

SWORD = bible.SWORD
HAVE_SWORD = bible.have_sword()

_background: list = []  # (process, folder, its variables) of the xdist controller's background preparations


def _start(module, out: Path) -> None:
    """Start ``module``'s background preparation of ``out`` and tell the workers, started after this, about it."""
    proc = module.start(out)
    os.environ[module.ENV] = str(out)
    os.environ[module.PID_ENV] = str(proc.pid)
    _background.append((proc, out.parent, (module.ENV, module.PID_ENV)))


def pytest_configure(config):
    """Under pytest-xdist, the controller starts the slow shared preparations as the run starts, so that no worker
    sits waiting for another to make them: the prepared Bible (~35 s, :mod:`bible_home`), and the documentation
    site's build (:mod:`docs_site`; the tutorials as stored, so ~20 s) when the docs tests are among those run."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or a run without xdist: the tests prepare what they need themselves
    if config.option.keyword or config.option.markexpr:
        return  # a filtered run may leave out the tests that need them: they prepare them themselves if they run
    args = [Path(a.split("::")[0]).resolve() for a in config.args]
    tests = Path(__file__).resolve().parent
    whole = not args or any(a in (tests, tests.parent) for a in args)
    if whole and HAVE_SWORD and not os.environ.get(bible.ENV):
        _start(bible, Path(tempfile.mkdtemp(prefix="attnkit-bible-")) / "home")
    if not (whole or tests / "test_docs.py" in args) or os.environ.get(docs_site.ENV):
        return
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        return  # the docs tests skip themselves
    _start(docs_site, Path(tempfile.mkdtemp(prefix="attnkit-docs-")) / "site")


#: Modules holding the run's longest tests (torchrun's processes, a wheel built and installed, servers and
#: chromium driven through whole pages, corpus jobs on two processes), longest first: run first, so that the run
#: ends on short tests, which the two workers share out, instead of one worker alone in a long one while the
#: other idles. (Those that read the prepared Bible come after the first two, by when it is ready.)
LONG_FIRST = (
    "test_multinode.py",
    "test_distributed.py",
    "test_wheel.py",
    "test_hf_browser.py",
    "test_serve_abuse.py",
    "test_explorer_browser.py",
    "test_corpus_training.py",
    "test_tutorials.py",  # eleven notebooks executed, 10 s to 2 min each
    "test_corpus_job_commands.py",
    "test_serve_follow.py",
    "test_shift_att.py",
    "test_reverse_direction.py",
    "test_atomic_outputs.py",
)


def pytest_collection_modifyitems(config, items):
    """The long tests (:data:`LONG_FIRST`) run first; the documentation tests last, when the site's background
    build (above) has long finished: run early, both workers would wait for it, the build being slower for the CPU
    it shares with them. A stable sort: the others keep their order."""
    order = {name: i - len(LONG_FIRST) for i, name in enumerate(LONG_FIRST)} | {"test_docs.py": 1}  # the others: 0
    items.sort(key=lambda item: order.get(item.path.name, 0))


def pytest_unconfigure(config):
    while _background:
        proc, folder, variables = _background.pop()
        for name in variables:
            os.environ.pop(name, None)
        background.stop(proc)  # if the run ended first (interrupted), it is no longer wanted
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def bible_home(tmp_path_factory):
    """An ATTNKIT_HOME holding the prepared corpus: under pytest-xdist a copy of the one the run's controller
    prepared in the background, with the 1,000-piece tokenizer the training tests use (:mod:`bible_home`); else
    prepared here (~7 s)."""
    if not HAVE_SWORD:
        pytest.skip("SWORD modules not installed (apt-get install sword-text-sparv sword-text-web)")
    home = tmp_path_factory.mktemp("attnkit_home")
    prepared = os.environ.get(bible.ENV)
    if prepared:
        pid = os.environ.get(bible.PID_ENV)
        bible.copy_into(home, Path(prepared), int(pid) if pid else None)
    else:
        bible.prepare(home, tokenizer=False)
    return home


@pytest.fixture(scope="session")
def tokenizer():
    """The shipped Spanish-English tokenizer (loaded once per session)."""
    from tiny import es_en_tokenizer

    return es_en_tokenizer()
