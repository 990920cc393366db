"""``attnkit train translation|captioning|classifier|language-model``."""

from __future__ import annotations

import argparse

from .common import CLIError, _output, _print_json
from .flags import _add_progress_flag
from .options import add_config_arguments, task_config_from_args, translation_choices, translation_config


def _check_out_dir(cfg) -> None:
    """``--out-dir``, before any work: a writable path, and a new or empty folder or a run's own
    (:mod:`attnkit.training.run_folder`); a folder of the user's is refused, nothing in it touched."""
    from ..training.run_folder import check_run_folder

    _output(cfg.run.out_dir, "--out-dir", folder=True)
    check_run_folder(cfg.run.out_dir)


def cmd_train_translation(args) -> None:
    import os
    import sys

    from ..data.corpus import open_corpus
    from ..tasks.translation import train_translation
    from ..tasks.translation.budget_defaults import apply_budget_rule

    # no --model, or a short budget on a CPU: the written rules set what is unset
    choices, said = apply_budget_rule(translation_choices(args))
    if args.model is None:  # an unknown corpus is the error, before any pick is announced
        from ..tasks.translation import TranslationConfig

        data = args.data if args.data is not None else TranslationConfig.__dataclass_fields__["data"].default
        open_corpus(data, home=args.home)
    if said is not None and os.environ.get("RANK", "0") == "0":
        print(said, file=sys.stderr)
    cfg = translation_config(choices, progress=not args.no_progress)
    _check_out_dir(cfg)
    summary = train_translation(cfg, resume=args.resume, home=args.home)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one summary
        _print_json(summary)


def cmd_train_captioning(args) -> None:
    from ..tasks.captioning import CaptioningConfig, train_captioning

    cfg = task_config_from_args(CaptioningConfig, args)
    from ..pretrained import UnknownModelError, resolve_model

    for opt in ("encoder_from", "init_from"):  # a model name or a folder, checked before any work
        if getattr(cfg, opt):
            try:
                resolve_model(getattr(cfg, opt), home=args.home)
            except UnknownModelError as exc:
                raise CLIError(f"--{opt.replace('_', '-')}: {exc}") from None
    _check_out_dir(cfg)
    summary = train_captioning(cfg, resume=args.resume, home=args.home)
    _print_json(summary)


def cmd_train_classifier(args) -> None:
    from ..tasks.classification import ClassifierTaskConfig, train_classifier

    cfg = task_config_from_args(ClassifierTaskConfig, args)
    _check_out_dir(cfg)
    _print_json(train_classifier(cfg, resume=args.resume))


def cmd_train_language_model(args) -> None:
    import os

    from ..data.corpus import open_corpus
    from ..tasks.language_model import LanguageModelTaskConfig, train_language_model

    cfg = task_config_from_args(LanguageModelTaskConfig, args)
    open_corpus(cfg.data, home=args.home)  # an unknown corpus is the error, before anything is written
    _check_out_dir(cfg)
    summary = train_language_model(cfg, resume=args.resume, home=args.home)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one summary
        _print_json(summary)


def _add_train_flags(parser: argparse.ArgumentParser, func) -> None:
    """``--resume`` and ``--no-progress``, which every ``attnkit train`` task takes, and the task's command."""
    parser.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint in --out-dir (default: off)"
    )
    _add_progress_flag(parser)
    parser.set_defaults(func=func)


def add_parser(sub) -> None:
    """(Imports the task configs, and so torch, to list every model option.)"""
    t = sub.add_parser("train", help="train a model").add_subparsers(dest="task", required=True)
    tt = t.add_parser(
        "translation",
        help="a translation model on the Bible (Spanish→English) or on your corpus (--data NAME)",
        description="Train a translation model on --data (bible, or a corpus prepared with `attnkit data "
        "prepare parallel`). Model options apply to the model named by --model.",
    )
    from ..tasks.translation import TRANSLATION_MODELS, TranslationConfig, model_config_class

    add_config_arguments(tt, TranslationConfig, *dict.fromkeys(model_config_class(m) for m in TRANSLATION_MODELS))
    tt.set_defaults(model=None)  # not given: budget_defaults.pick_model decides
    _add_train_flags(tt, cmd_train_translation)

    tc = t.add_parser(
        "captioning", help="Show, Attend and Tell on Fashion-MNIST scenes, or on photos (--captions, --images)"
    )
    from ..tasks.captioning import CaptioningConfig
    from ..tasks.classification import ClassifierTaskConfig

    add_config_arguments(tc, CaptioningConfig)
    _add_train_flags(tc, cmd_train_captioning)

    tl = t.add_parser(
        "language-model",
        help="a decoder-only language model (GPT-2 or Llama shape) on one side of the Bible or of your corpus",
        description="Train a decoder-only language model on one language of --data (bible: --side en or es; or "
        "a corpus prepared with `attnkit data prepare parallel`). Validation logs the loss, the perplexity and "
        "the induction-head scores (Olsson et al. 2022) to train_log.jsonl.",
    )
    from ..tasks.language_model import LanguageModelTaskConfig

    add_config_arguments(tl, LanguageModelTaskConfig)
    _add_train_flags(tl, cmd_train_language_model)

    tk = t.add_parser("classifier", help="Fashion-MNIST classifier (its conv encoder can start a captioner)")
    add_config_arguments(tk, ClassifierTaskConfig)
    _add_train_flags(tk, cmd_train_classifier)
