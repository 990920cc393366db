"""Configs are dataclasses; this module turns their fields into command-line flags and back.

One option is one dataclass field: its default, its type and its help text live on the field, and
the ``attnkit`` command line is generated from them, so adding a field adds a flag (with its help
and default shown in ``--help``). Nested config dataclasses (a task config holding its model's
config) are flattened: every leaf field becomes ``--field-name``.

We write this small helper instead of adopting ``tyro`` or ``jsonargparse`` because the command
keeps its hand-written argparse subcommands (``attnkit train translation``, ``attnkit caption``…),
which both libraries would want to own; what we need from them is only "fields → flags → fields",
which is the ~100 lines below.

Usage::

    @dataclass
    class MyConfig:
        lr: float = option(1e-3, "Adam's learning rate")
        name: str = option("x", "a name", choices=("x", "y"))
        internal: int = option(0, "set by the program", cli=False)

    add_config_arguments(parser, MyConfig)
    cfg = config_from_args(MyConfig, parser.parse_args())
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from .checks import Range, arg_type

__all__ = [
    "ConfigRecord",
    "add_config_arguments",
    "config_from_args",
    "config_from_dict",
    "config_from_json",
    "iter_options",
    "option",
    "option_names",
]


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    choices: tuple | None = None,
    cli: bool = True,
    default_factory: Any = dataclasses.MISSING,
    metavar: str | None = None,
    check: Range | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """A dataclass field that is also a command-line option (``cli=False``: a field only).

    ``check``: the numbers the field takes (:mod:`attnkit.checks`); the flag refuses others when the
    command line is read, and :func:`attnkit.checks.check_fields` in the config's ``__post_init__``
    refuses them when the config is built in Python.

    ``overrides``: for a nested config field, the defaults of its fields that this config changes (a
    task's own number of epochs in its :class:`attnkit.training.RunConfig`); the flags show them and a
    config built from flags or from a file keeps them where nothing else is given.
    """
    meta = {"help": help, "choices": choices, "cli": cli, "metavar": metavar, "check": check}
    meta["overrides"] = dict(overrides or {})
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def iter_options(
    cls: type, prefix: tuple[str, ...] = (), overrides: dict[str, Any] | None = None
) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any, Any]]:
    """Every command-line leaf field of ``cls`` (nested dataclasses flattened): ``(path, field, type,
    default)``, the default being the one a nesting config gives (``option(overrides=...)``) if any."""
    hints = _hints(cls)
    overrides = overrides or {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_options(tp, (*prefix, f.name), f.metadata.get("overrides"))
        elif f.metadata.get("cli", True) and f.init:
            yield (*prefix, f.name), f, tp, overrides.get(f.name, _default_of(f))


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def add_config_arguments(parser: argparse.ArgumentParser | Any, *classes: type, skip: tuple[str, ...] = ()) -> None:
    """Add ``--field-name`` for every option of each config class (see :func:`iter_options`).

    Flags default to ``None`` ("not given"), so :func:`config_from_args` keeps the dataclass
    default; the help text shows that default. A field name that appears in several classes (or in
    two nested configs) becomes one flag; its help lists each class's default where they differ.
    """
    found: dict[str, list[tuple[type, dataclasses.Field, Any, Any]]] = {}
    for cls in classes:
        for path, f, tp, default in iter_options(cls):
            if path[-1] not in skip:
                found.setdefault(path[-1], []).append((cls, f, tp, default))
    for name, entries in found.items():
        _, f, tp, default = entries[0]
        base, _ = _unwrap_optional(tp)
        help_text = f.metadata.get("help", "")
        by_cls = {getattr(c, "flag_label", c.__name__): d for c, _, _, d in entries}
        if len(set(map(repr, by_cls.values()))) > 1:
            shown = ", ".join(f"{k} {_show(v, base)}" for k, v in by_cls.items())
        else:
            shown = _show(default, base)
        if "(default:" not in help_text:  # a help text may say its default in its own words
            help_text = f"{help_text} (default: {shown})"
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            if base not in (int, float, str):
                raise TypeError(
                    f"add_config_arguments: {entries[0][0].__name__}.{name} has type {tp!r}; "
                    "options must be int, float, str or bool (or None-able)"
                )
            kwargs["type"] = (
                base if f.metadata.get("check") is None else arg_type(f.metadata["check"], name, integer=base is int)
            )
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            if f.metadata.get("metavar"):
                kwargs["metavar"] = f.metadata["metavar"]
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)


def _show(value: Any, base: Any) -> str:
    if value is None:
        return "none"
    if base is bool:
        return "on" if value else "off"
    return str(value)


def option_names(cls: type) -> set[str]:
    """The flag names (field names) that :func:`add_config_arguments` makes for ``cls``."""
    return {path[-1] for path, _, _, _ in iter_options(cls)}


def config_from_dict(cls: type, values: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    """Build ``cls`` from a flat ``{option name: value}`` mapping (parsed flags), nested configs included.

    Only command-line options are taken from ``values`` (fields with ``cli=False`` keep their
    defaults, even when an option of another config has the same name); a name missing or mapped
    to ``None`` keeps its default (``overrides``' where it names one); names that are not options are ignored.
    """
    hints = _hints(cls)
    kwargs = dict(overrides or {})
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = config_from_dict(tp, values, f.metadata.get("overrides"))
        elif f.metadata.get("cli", True) and values.get(f.name) is not None:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


class ConfigRecord:
    """Base of the model configs: :meth:`to_dict` is the object a checkpoint's ``config.json`` holds,
    :meth:`from_dict` reads one back (old files converted by :func:`config_from_json`)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return config_from_json(cls, d)


def config_from_json(cls: type, data: dict[str, Any]) -> Any:
    """Build ``cls`` from a saved ``config.json`` object: the one place where old files are converted.

    Keys that are not fields are dropped: ``model_type`` and ``attnkit_version`` (the checkpoint's,
    not the config's), and fields that earlier versions had and this one removed (``extra``,
    ``max_tgt_len``: never used). Nested config dataclasses are rebuilt from nested objects; a file
    written before a nested config existed (a flat ``train_config.json`` whose ``epochs`` now lives in
    ``run``) gives the nested config its keys from the top level. Lists stay lists.
    """
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: config must be a JSON object, got {type(data).__name__}")
    return _from_json(cls, data, {})


def _from_json(cls: type, data: dict[str, Any], overrides: dict[str, Any]) -> Any:
    hints = _hints(cls)
    kwargs = dict(overrides)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        nested = dataclasses.is_dataclass(tp)
        if nested and isinstance(data.get(f.name), dict):
            kwargs[f.name] = _from_json(tp, data[f.name], f.metadata.get("overrides", {}))
        elif nested and f.name not in data and {g.name for g in dataclasses.fields(tp)} & data.keys():
            kwargs[f.name] = _from_json(tp, data, f.metadata.get("overrides", {}))  # an older, flat file
        elif f.name in data:
            kwargs[f.name] = data[f.name]
    return cls(**kwargs)


def config_from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """The config ``cls`` with every flag the user gave (see :func:`add_config_arguments`)."""
    values = dict(vars(args))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(cls, values)
