"""Configs are dataclasses; this module describes their fields as options and builds configs back from values.

One option is one dataclass field: its default, its type and its help text live on the field, and
the ``attnkit`` command line is generated from them (:func:`attnkit.cli.options.add_config_arguments`),
so adding a field adds a flag (with its help and default shown in ``--help``). Nested config
dataclasses (a task config holding its model's config) are flattened: every leaf field becomes
``--field-name``, and :func:`config_from_dict` builds the nested config back from the flat values.

We write this small helper instead of adopting ``tyro`` or ``jsonargparse`` because the command
keeps its hand-written argparse subcommands (``attnkit train translation``, ``attnkit caption``…),
which both libraries would want to own; what we need from them is only "fields → flags → fields".
The flags and the parsed namespace stay in :mod:`attnkit.cli`: this module, as everything below the
command line, takes plain values and typed records.

Usage::

    @dataclass
    class MyConfig:
        lr: float = option(1e-3, "Adam's learning rate")
        name: str = option("x", "a name", choices=("x", "y"))
        internal: int = option(0, "set by the program", cli=False)

    cfg = config_from_dict(MyConfig, {"lr": 3e-4})  # the command line: config_from_dict(MyConfig, vars(args))
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

from .checks import Range

__all__ = [
    "ConfigRecord",
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


def option_names(cls: type) -> set[str]:
    """The option names (field names) of ``cls``, nested configs flattened: the flags the command line makes."""
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
