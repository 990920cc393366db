"""Every flag of every command says what it does and what its default is."""

import argparse

from attnkit.cli import build_parser


def _walk(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def test_every_optional_flag_has_help_with_its_default():
    missing = []
    for path, parser in _walk(build_parser()):
        for action in parser._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            text = action.help or ""
            if not text.strip():
                missing.append(f"attnkit {' '.join(path)} {action.option_strings[0]}: no help")
            elif action.option_strings[0] != "--version" and "default" not in text:
                missing.append(f"attnkit {' '.join(path)} {action.option_strings[0]}: help does not show the default")
    assert not missing, "\n".join(missing)


def test_the_walk_sees_every_command():
    commands = {" ".join(p) for p, _ in _walk(build_parser())}
    assert {
        "train translation",
        "train captioning",
        "train classifier",
        "translate",
        "caption",
        "evaluate translation",
        "evaluate captioning",
        "export",
        "explain",
        "heads",
        "demo",
        "models",
        "data prepare",
    } <= commands


def test_building_the_commands_does_not_load_the_web_stack():
    """``attnkit train`` and the other commands parse their options without importing pydantic or
    FastAPI (only ``serve`` needs them): a fresh interpreter builds the whole parser and is checked."""
    import subprocess
    import sys

    code = (
        "import sys; from attnkit.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('pydantic', 'fastapi', 'starlette', 'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    from attnkit.explorer import ExplorerData  # the package's names still load, on first use

    assert ExplorerData.__name__ == "ExplorerData"
