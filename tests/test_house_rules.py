"""House rules checked on the source text (nothing imported): a module stays within :data:`MAX_LINES`
lines (split it by job beyond that), and no comment or docstring names an issue of the tracker ("issue 56"):
an issue number says nothing to a reader of the code; the idea or the paper it asked for does."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnkit"
MAX_LINES = 600
ISSUE = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.IGNORECASE)


def _modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 100  # the package was found
    return found


def test_every_module_stays_within_the_line_limit():
    long = {
        str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_no_source_names_an_issue_number():
    hits = [
        f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
        for p in _modules()
        for i, line in enumerate(p.read_text("utf-8").splitlines(), 1)
        if ISSUE.search(line)
    ]
    assert not hits, "name the idea, not the issue:\n" + "\n".join(hits)


def test_the_issue_pattern_finds_what_it_should():
    assert ISSUE.search('"""The language-model task (issue 57): train"""')
    assert ISSUE.search("bounds (issue 54: 130 sockets)")
    assert not ISSUE.search("an issue with 3 tokens; tissue 5")
