"""Shared fixtures: the real Bible corpus, prepared once per test session in a temporary home."""

from pathlib import Path

import pytest

try:  # Playwright's expect() waits 5 s by default; two pytest workers, their servers and chromium share two cores
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
except ImportError:
    pass

SWORD = Path("/usr/share/sword")
HAVE_SWORD = all((SWORD / "mods.d" / f"{m}.conf").is_file() for m in ("spaRV1909eb", "engWEB2015eb"))


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
