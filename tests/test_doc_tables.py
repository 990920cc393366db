"""The pages' tables of slow figures and the results files that measured them agree (``tools/tables.py``):
every marked table is exactly what its file renders, every quoted figure reads as its file gives it, and a
planted stale number, an unknown table and a missing anchor are each reported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import tables  # noqa: E402 - tools/ is not a package


@pytest.mark.parametrize("page", tables.PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_and_figure_is_its_results_files(page):
    name = str(page.relative_to(ROOT))
    text = page.read_text(encoding="utf-8")
    new, changed = tables.rewrite(text)
    assert changed == [], f"{name}: {changed} differ from their results files: run python tools/tables.py"
    assert new == text
    assert tables.stale_figures(name, text) == []


def test_the_readme_marks_each_table():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert {m["name"] for m in tables._BLOCK.finditer(text)} == set(tables.TABLES)
    assert {f.page for f in tables.FIGURES} <= {str(p.relative_to(ROOT)) for p in tables.PAGES}


def test_a_stale_number_is_found_and_rewritten():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    planted = text.replace("**0.307**", "**0.308**", 1)  # attention relevance's AER, the best
    assert planted != text
    new, changed = tables.rewrite(planted)
    assert changed == ["explanations"] and new == text  # found, and put back from the file
    figure = text.replace("0.107 mean (0.099–0.114)", "0.102 mean (0.099–0.114)")
    assert figure != text and len(tables.stale_figures("README.md", figure)) == 1


def test_an_unknown_table_or_a_lost_anchor_is_named():
    with pytest.raises(KeyError, match="no table 'bleu'"):
        tables.rewrite("<!-- table: bleu (from x) -->\n| a |\n|---|\n<!-- /table -->\n")
    gone = tables.stale_figures("README.md", "nothing here")
    assert gone and all("is gone" in g for g in gone)


def test_the_check_command_exits_1_on_a_difference(tmp_path, monkeypatch, capsys):
    page = tmp_path / "README.md"
    page.write_text(
        "<!-- table: markup (from benchmarks/results/markup_transfer.json) -->\n| stale |\n<!-- /table -->\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(tables, "PAGES", [page])
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    monkeypatch.setattr(tables, "FIGURES", [])
    assert tables.main(["--check"]) == 1 and "table 'markup' differs" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8").count("stale") == 1  # --check changes nothing
    assert tables.main([]) == 0 and "stale" not in page.read_text(encoding="utf-8")
    assert tables.main(["--check"]) == 0
