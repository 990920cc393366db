"""The prepared Bible for the tests: the corpus (~7 s) and its 1,000-piece tokenizer, which the training tests use
(~27 s to train), made once per test run.

Under pytest-xdist the run's controller prepares them in the background as the run starts (:mod:`background`);
each worker waits for them the first time a test asks, and copies them into a home of its own (tests may write
into it). Before, each worker prepared the corpus and trained the tokenizer itself.

    python tests/bible_home.py OUT     # prepares OUT, then writes OUT.status.json (the log of a failure)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import background

SWORD = Path("/usr/share/sword")
#: The environment variables through which the controller tells the workers where the Bible goes, and its process.
ENV = "ATTNKIT_TEST_BIBLE_HOME"
PID_ENV = "ATTNKIT_TEST_BIBLE_HOME_PID"
TIMEOUT_S = 600


def have_sword() -> bool:
    return all((SWORD / "mods.d" / f"{m}.conf").is_file() for m in ("spaRV1909eb", "engWEB2015eb"))


def prepare(home: Path, tokenizer: bool = True) -> None:
    """The corpus under ``home`` (and, with ``tokenizer``, its 1,000-piece tokenizer)."""
    from attnkit.data.datasets.bible import get_tokenizer, prepare_bible

    prepare_bible(home, sword_path=SWORD)
    if tokenizer:
        get_tokenizer(1000, home)


def start(out: Path) -> subprocess.Popen:
    return background.start(__file__, out)


def copy_into(home: Path, out: Path, pid: int | None) -> None:
    """Wait for the background preparation of ``out``, then copy it into ``home``."""
    log = background.wait(out, pid, "Bible preparation", TIMEOUT_S)
    if log is not None:
        raise RuntimeError(f"preparing the Bible failed:\n{log}")
    shutil.copytree(out / "bible", home / "bible")


if __name__ == "__main__":
    background.finish(Path(sys.argv[1]), prepare)
