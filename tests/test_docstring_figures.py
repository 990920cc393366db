"""No benchmark figures in docstrings: timings, speed-ups, throughput, memory sizes, BLEU and AER scores
measured on some machine go stale unnoticed there. They live in ``benchmarks/RESULTS.md``; a docstring
says the fact and names the section that measured it.

Every module, class and function docstring under ``src/attnkit`` is read with :mod:`ast` (nothing is
imported) and searched for :data:`FIGURE` (numbers with a unit of time, a ratio like ``2.4×``, a memory
size, a rate, a BLEU or AER score, a share of a step). Formulas and constants that define behaviour
(``1 − t² = 4 s (1 − s)``, a 95 % interval, a split's 3 %) do not match. :data:`ALLOWED` lists files
exempt from the check (none: every docstring is checked).
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnkit"

#: Files (relative to src/attnkit, shell patterns) whose docstrings are not checked yet.
ALLOWED: tuple[str, ...] = ()

_NUM = r"(?<![\w.^/])~?\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    "|".join(
        [
            _NUM + r"\s?(?:ms|µs|us|ns)\b",  # a time in ms, µs, ns
            _NUM + r"\s?(?:s|sec|seconds?|minutes?|hours?)\b(?!\s*\()",  # seconds (not ``4 s (1 − s)``)
            r"(?<![\w.])\d+(?:\.\d+)?\s?[×x](?=\s+(?:faster|slower|as fast|the|a\b|one\b))",  # a ratio: 2.4× faster
            r"(?<![\w.])\d+(?:\.\d+)?×(?!\s*\d)",  # a ratio: 1.59× (not a shape, 188 × 256)
            _NUM + r"\s?(?:KB|kB|MB|GB|TB|KiB|MiB|GiB|TiB)\b",  # a memory size
            _NUM + r"\s?(?:tokens?|tok|sentences?|verses?|pairs?|steps?|it|GFLOP|GB|MB)/s\b",  # a rate
            r"\bBLEU\s+(?:of\s+)?\d",  # a BLEU score
            r"(?<![\w.-])\d+\.\d+\s+(?:test\s+|valid\s+)?BLEU\b",
            r"\bAER\s+(?:of\s+)?\d",  # an AER
            r"(?<![\w.-])\d\.\d+\s+AER\b",
            _NUM + r"\s?%\s+(?:faster|slower|less|more)\b",  # a speed-up in percent
            _NUM + r"\s?%\s+of\s+(?:an?|the|every|each)\s+[^.]{0,40}?\b(?:step|run|time)\b",  # a share of a step
            r"\b\d+\s+of\s+\d+\s+(?:test\s+|dev\s+|valid\s+)?verses\b",  # an agreement count
        ]
    )
)


def _docstrings(path: Path):
    """``(line, text)`` of each module, class and function docstring of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def figures(path: Path, root: Path | None = None) -> list[str]:
    """``file:line: match`` for each figure in the file's docstrings (the file relative to ``root``,
    default src/)."""
    root = PACKAGE.parent if root is None else root
    found = []
    for first, doc in _docstrings(path):
        for m in FIGURE.finditer(doc):
            line = first + doc.count("\n", 0, m.start())
            found.append(f"{path.relative_to(root).as_posix()}:{line}: {m.group(0)!r}")
    return found


def _allowed(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).as_posix()
    return any(fnmatch(rel, pattern) for pattern in ALLOWED)


def test_no_benchmark_figures_in_docstrings():
    found = [f for path in sorted(PACKAGE.rglob("*.py")) if not _allowed(path) for f in figures(path)]
    assert not found, (
        "benchmark figures in docstrings (move them to benchmarks/RESULTS.md and name the section):\n"
        + "\n".join(found)
    )


def test_the_pattern_finds_figures_and_not_formulas(tmp_path):
    """What counts as a figure, on made-up docstrings: the check must catch these and pass the formulas."""
    figure_lines = [
        "It was 2.4× faster than F.linear.",
        "0.7 against 3.4 ms per step.",
        "Takes ~10 s.",
        "the logits alone are 64 MB",
        "it trains 1,234 tokens/s",
        "valid BLEU 17.35 against 14.47",
        "scored 26.29 BLEU",
        "reached AER 0.34 after 450 steps",
        "it took 11 % of a Transformer training step",
        "5 % faster",
        "on 197 of 200 test verses",
        "48 µs of GPU work",
    ]
    formulas = [
        "(1 − t² = 4 s (1 − s))",
        "each with a 95 % bootstrap interval",
        "buckets 0–29 are test (3%)",
        "at 188 × 256 × 8,000",
        "BLEU-1..4 and exact match",
        "AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)",
        "complete within 1 % (see below)",
    ]
    for i, text in enumerate(figure_lines):
        (tmp_path / f"f{i}.py").write_text(f'"""{text}"""\n', encoding="utf-8")
        assert figures(tmp_path / f"f{i}.py", tmp_path), text
    body = "\n".join(formulas)
    (tmp_path / "ok.py").write_text(f'"""{body}"""\n\n\ndef f():\n    """{body}"""\n', encoding="utf-8")
    assert figures(tmp_path / "ok.py", tmp_path) == []
    (tmp_path / "cls.py").write_text('class A:\n    """Ran at 12 ms a step."""\n', encoding="utf-8")
    assert figures(tmp_path / "cls.py", tmp_path) == ["cls.py:2: '12 ms'"]
