"""The command line turns its flags into typed records itself: nothing below ``attnkit.cli`` imports argparse or
names its ``Namespace``, and the budget rule of ``attnkit train translation`` is a pure function of the user's
choices (new choices and the line to print back, its input untouched)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from attnkit.cli import build_parser
from attnkit.cli.options import translation_config_from_args
from attnkit.errors import ConfigError
from attnkit.tasks.translation.budget_defaults import TranslationChoices, apply_budget_rule, pick_for, pick_model

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnkit"

#: Modules below the command line that may import argparse, and why.
ARGPARSE_ALLOWED = {
    # arg_type is argparse's ``type=`` for a checked number: it raises argparse.ArgumentTypeError so that argparse
    # words the error, and it stays beside the ranges it checks (the command modules import it from there); it
    # takes a string and returns a number, never a namespace.
    "checks.py": "arg_type",
}


def _below_cli() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in ("cli", "__main__.py")]


def _offences(path: Path, root: Path = PACKAGE) -> list[str]:
    """Where ``path`` imports argparse, names ``Namespace`` or defines a ``from_args``: ``"file:line: what"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names):
            what = "imports argparse"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
            what = "imports from argparse"
        elif isinstance(node, ast.ImportFrom) and any(a.name == "Namespace" for a in node.names):
            what = "imports a Namespace"
        elif isinstance(node, ast.Name) and node.id == "Namespace":
            what = "names Namespace"
        elif isinstance(node, ast.Attribute) and node.attr == "Namespace":
            what = "names .Namespace"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in (
            "from_args",
            "config_from_args",
        ):
            what = f"defines {node.name} (the command line builds its records: attnkit.cli.options)"
        if what is not None:
            found.append((rel, node.lineno, what))
    return [
        f"{rel}:{line}: {what}"
        for rel, line, what in found
        if not (rel in ARGPARSE_ALLOWED and what.startswith("imports argparse"))
    ]


def test_nothing_below_the_command_line_sees_an_argparse_namespace():
    files = _below_cli()
    assert (
        len(files) > 100
        and PACKAGE / "config.py" in files
        and not any(p.relative_to(PACKAGE).parts[0] == "cli" for p in files)
    )
    offences = [o for p in files for o in _offences(p)]
    assert not offences, "\n".join(offences)


def test_the_check_finds_what_it_looks_for(tmp_path):
    probe = tmp_path / "attnkit" / "training" / "x.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from argparse import Namespace\nimport argparse as ap\ndef from_args(args: ap.Namespace): return args\n",
        encoding="utf-8",
    )
    found = _offences(probe, tmp_path / "attnkit")
    assert any("imports from argparse" in f for f in found) and any("imports argparse" in f for f in found)
    assert any("names .Namespace" in f for f in found) and any("defines from_args" in f for f in found)


def test_the_budget_rule_returns_new_choices_and_leaves_its_input_unchanged():
    asked = TranslationChoices(model=None, max_time_s=600.0, device="cpu", given={"encoder_dim": 8, "epochs": 2})
    before = dataclasses.asdict(asked)
    new, said = apply_budget_rule(asked)
    assert dataclasses.asdict(asked) == before and new is not asked
    assert new.model == "rnnsearch" and (new.max_time_s, new.device) == (600.0, "cpu")
    # the rule's options the user left unset; a given one (encoder_dim) wins
    assert new.given == {"encoder_dim": 8, "epochs": 2, "rnn_attention": "luong", "dropout": 0.1}
    why = pick_model(600).why
    assert said == f"attnkit: no --model given: training rnnsearch (--rnn-attention luong --dropout 0.1): {why}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.model = "transformer"  # type: ignore[misc]

    small = TranslationChoices(model="transformer", max_time_s=600.0, device="cpu", given={"d_model": 16})
    before = dataclasses.asdict(small)
    new, said = apply_budget_rule(small)
    assert dataclasses.asdict(small) == before and new.given["d_model"] == 16 and new.given["num_decoder_layers"] == 2
    flags = "--num-encoder-layers 2 --num-decoder-layers 2 --dim-feedforward 512 --lr 0.004"
    assert said == f"attnkit: a 600-s budget: training transformer ({flags}): {pick_for('transformer', 600).why}"
    # every option the rule would set given: the model stands, nothing said; on a GPU the recipe stands
    full = dataclasses.replace(small, given=dict(pick_for("transformer", 600).options))
    assert apply_budget_rule(full) == (full, None)
    assert apply_budget_rule(dataclasses.replace(small, device="cuda")) == (
        dataclasses.replace(small, device="cuda"),
        None,
    )
    # no budget: the shipped recipe's model, and the line says so
    new, said = apply_budget_rule(TranslationChoices())
    assert (
        new.model == "rnnsearch"
        and new.given == {}
        and said.startswith("attnkit: no --model given: training rnnsearch: ")
    )


def test_the_command_line_builds_the_translation_config_from_its_flags():
    argv = ["train", "translation", "--model", "transformer", "--max-time-s", "600", "--device", "cpu"]
    args = build_parser().parse_args([*argv, "--d-model", "64", "--nhead", "2", "--no-progress"])
    before = vars(args).copy()
    cfg = translation_config_from_args(args)
    assert vars(args) == before  # the namespace is read, never written
    mc = cfg.model_config
    assert (mc.d_model, mc.nhead, mc.num_encoder_layers, mc.dim_feedforward, cfg.lr) == (64, 2, 2, 512, 4e-3)
    assert cfg.run.max_time_s == 600 and cfg.run.progress is False
    with pytest.raises(ConfigError, match=r"^--encoder-dim: not an option of the transformer model \(see"):
        translation_config_from_args(build_parser().parse_args([*argv, "--encoder-dim", "8"]))


def test_train_translation_with_neither_model_nor_data_checks_the_default_corpus(bible_home, tmp_path, monkeypatch):
    """No --model and no --data: the budget rule picks the model and the corpus is the config's default
    (bible), checked before any work; it was read as a corpus named None (a TypeError's traceback)."""
    import attnkit.tasks.translation as translation
    from attnkit.cli import main

    trained = []
    monkeypatch.setattr(translation, "train_translation", lambda cfg, **kw: trained.append(cfg) or {})
    argv = ["--home", str(bible_home), "train", "translation", "--max-steps", "1", "--out-dir", str(tmp_path / "r")]
    assert main(argv) == 0
    assert [cfg.data for cfg in trained] == ["bible"]
    assert main(["--home", str(bible_home), "train", "translation", "--data", "nope", "--max-steps", "1"]) == 2
