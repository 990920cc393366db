"""The command line's options as typed records: flags made from config dataclasses, and the parsed
namespace turned into the configs the library takes.

Nothing below :mod:`attnkit.cli` sees an argparse namespace: a command reads its flags here (or in its
own module) and hands the library a config (:class:`~attnkit.tasks.translation.TranslationConfig`, a
task config, :class:`~attnkit.explorer.options.ServeOptions`) or plain values. The flags come from the
configs' fields (:func:`add_config_arguments`; :func:`attnkit.config.option` describes one), and a
flag not given is ``None``, which :func:`attnkit.config.config_from_dict` reads as "keep the default".
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any

from ..checks import arg_type
from ..config import config_from_dict, iter_options, option_names
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..service import GenerationRequest
    from ..tasks.translation import TranslationConfig
    from ..tasks.translation.budget_defaults import TranslationChoices

__all__ = [
    "add_config_arguments",
    "generation_request",
    "task_config_from_args",
    "translation_choices",
    "translation_config",
    "translation_config_from_args",
]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def add_config_arguments(parser: argparse.ArgumentParser | Any, *classes: type, skip: tuple[str, ...] = ()) -> None:
    """Add ``--field-name`` for every option of each config class (see :func:`iter_options`).

    Flags default to ``None`` ("not given"), so :func:`attnkit.config.config_from_dict` keeps the dataclass
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


def task_config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """The task config ``cls`` the parsed flags describe (flags made by :func:`add_config_arguments`;
    ``--no-progress`` turns the progress bar off)."""
    cfg = config_from_dict(cls, vars(args))
    cfg.run.progress = not getattr(args, "no_progress", False)
    return cfg


def translation_choices(args: argparse.Namespace) -> TranslationChoices:
    """The user's choices on ``attnkit train translation``
    (:class:`~attnkit.tasks.translation.budget_defaults.TranslationChoices`): ``--model`` (None: not given),
    ``--max-time-s``, the device type ``--device`` trains on, and every option flag given."""
    from ..tasks.translation import TRANSLATION_MODELS, TranslationConfig, model_config_class
    from ..tasks.translation.budget_defaults import TranslationChoices, device_type

    names = option_names(TranslationConfig).union(*(option_names(model_config_class(m)) for m in TRANSLATION_MODELS))
    values = vars(args)
    given = {k: values[k] for k in sorted(names - {"model"}) if values.get(k) is not None}
    return TranslationChoices(
        model=values.get("model"),
        max_time_s=values.get("max_time_s"),
        device=device_type(values.get("device")),
        given=given,
    )


def translation_config(choices: TranslationChoices, *, progress: bool = True) -> TranslationConfig:
    """The :class:`~attnkit.tasks.translation.TranslationConfig` of ``choices`` (a model chosen: after
    :func:`~attnkit.tasks.translation.budget_defaults.apply_budget_rule`); an option of another model's
    config given is a :class:`ConfigError` naming its flags."""
    from ..tasks.translation import TRANSLATION_MODELS, TranslationConfig, model_config_class

    model = choices.model
    mine = option_names(model_config_class(model))
    others = set().union(*(option_names(model_config_class(m)) for m in TRANSLATION_MODELS)) - mine
    foreign = sorted((set(choices.given) & others) - option_names(TranslationConfig))
    if foreign:
        flags = ", ".join("--" + f.replace("_", "-") for f in foreign)
        raise ConfigError(f"{flags}: not an option of the {model} model (see `attnkit train translation --help`)")
    names = (option_names(TranslationConfig) | mine) - {"model"}
    options = {k: v for k, v in choices.given.items() if k in names and v is not None}
    return TranslationConfig.from_options(model, progress=progress, **options)


def translation_config_from_args(args: argparse.Namespace) -> TranslationConfig:
    """The :class:`~attnkit.tasks.translation.TranslationConfig` the parsed flags of ``attnkit train
    translation`` describe, the budget rules applied (silently: the command itself prints what they set)."""
    from ..tasks.translation.budget_defaults import apply_budget_rule

    choices, _ = apply_budget_rule(translation_choices(args))
    return translation_config(choices, progress=not getattr(args, "no_progress", False))


def generation_request(args: argparse.Namespace, method: str) -> GenerationRequest:
    """``attnkit explain``'s flags on a decoder-only model as a :class:`~attnkit.service.GenerationRequest`:
    ``--text`` forces the text (every next token explained), else the argument is continued, greedily or
    with ``--sample`` (``--seed``, ``--temperature``, ``--top-k``); ``--contrast``, ``--layer``, ``--head``,
    ``--steps``, ``--batch`` and ``--max-new-tokens`` as given. A flag that does not go with the others is a
    :class:`ConfigError` naming the flags."""
    from ..attribution.gradients import GRADIENT_METHODS
    from ..service import GenerationRequest

    forced = args.text is not None
    sampling = [
        f
        for f, v in (("--seed", args.seed), ("--temperature", args.temperature), ("--top-k", args.top_k))
        if v is not None
    ]
    if forced and args.sample:
        raise ConfigError("--sample is for a continuation of the argument; --text is explained as it is written")
    if sampling and not args.sample:
        raise ConfigError(f"{', '.join(sampling)}: only with --sample (the continuation is greedy without it)")
    if args.contrast is not None and method not in GRADIENT_METHODS:
        raise ConfigError(
            f"--contrast is for the gradient methods ({', '.join(GRADIENT_METHODS)}); {method} has no contrastive form"
        )
    if (args.steps is not None or args.batch is not None) and method not in GRADIENT_METHODS:
        raise ConfigError(f"--steps and --batch are for the gradient methods; {method} takes neither")
    mode = "forced" if forced else ("sample" if args.sample else "greedy")
    extra = {}
    if mode == "sample":
        extra = {"seed": args.seed, "top_k": args.top_k}
        if args.temperature is not None:
            extra["temperature"] = args.temperature
    return GenerationRequest(
        args.text if forced else args.input,
        max_new_tokens=args.max_new_tokens,
        method=method,
        steps=args.steps,
        mode=mode,
        contrast=args.contrast,
        layer=args.layer,
        head=args.head,
        batch=args.batch,
        **extra,
    )
