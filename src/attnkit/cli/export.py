"""``attnkit export`` (an attnkit checkpoint, a CTranslate2 model or a Hugging Face model folder)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..checks import arg_type, between
from ..pretrained import DEFAULT_EXPORT_MODEL
from .common import CLIError, _load_shortlist, _model_folder, _output
from .flags import _add_length_penalty_flag
from .prune_heads import add_prune_flags, check_prune_flags, choose_heads, prune_export, pruning

#: The architectures a language model exports to (what ``AutoModelForCausalLM`` loads).
CAUSAL_LM_CLASSES = ("LlamaForCausalLM", "GPT2LMHeadModel")
_PRECISION_NAMES = {"fp32": "float32", "fp16": "float16"}


def cmd_export_ctranslate2(args) -> None:
    from ..deploy.ct2_engine import ct2_available
    from ..deploy.ct2_export import export_ctranslate2

    if args.fp32 or args.average_last is not None or args.length_penalty is not None:
        raise CLIError(
            "--fp32, --average-last and --length-penalty are for --format attnkit; export the averaged checkpoint "
            "(with its length penalty) first: the CTranslate2 export takes the model's own"
        )
    reason = ct2_available()
    if reason:
        raise CLIError(reason)
    _output(args.out, "out", folder=True)
    out = export_ctranslate2(
        _model_folder(args.checkpoint, DEFAULT_EXPORT_MODEL),
        args.out,
        quantization=args.quantization,
        shortlist=_load_shortlist(args.shortlist),
        force=args.force,
    )
    size = sum(f.stat().st_size for f in Path(out).iterdir() if f.is_file())
    print(
        f"wrote {out} (CTranslate2, {args.quantization} weights, {size / 1e6:.1f} MB"
        f"{', with the vocabulary map' if args.shortlist else ''}); "
        f"translate with: attnkit translate --engine ctranslate2 --model {out} TEXT"
    )


def cmd_export_huggingface(args) -> None:
    from ..deploy.hf_export import export_huggingface

    given = [
        f
        for f, on in (
            ("--fp32", args.fp32),
            ("--average-last", args.average_last is not None),
            ("--length-penalty", args.length_penalty is not None),
        )
        if on
    ]
    given += ["--shortlist"] if args.shortlist else []
    if given:
        raise CLIError(
            f"{', '.join(given)}: not for --format huggingface (it writes the network as it is, in float32 or, "
            "for a language model, --precision fp16)"
        )
    _output(args.out, "out", folder=True)
    precision = args.precision or "fp32"
    out = export_huggingface(
        _model_folder(args.checkpoint, DEFAULT_EXPORT_MODEL), args.out, force=args.force, precision=precision
    )
    config = json.loads((Path(out) / "config.json").read_text(encoding="utf-8"))
    arch = config["architectures"][0]
    auto = "AutoModelForCausalLM" if arch in CAUSAL_LM_CLASSES else "AutoModelForSeq2SeqLM"
    print(
        f"wrote {out} (Hugging Face {arch}, {_PRECISION_NAMES[precision]}, with tokenizer.json); load it with: "
        f"{auto}.from_pretrained({str(out)!r}) and AutoTokenizer.from_pretrained({str(out)!r})"
    )


def _source(args) -> Path:
    """The folder the default format exports: a shipped or local model name, a checkpoint folder, or a
    training run's newest checkpoint (:func:`attnkit.service.model_folder`, as every command that reads a
    model); with ``--average-last``, the run folder itself (resolved alike), whose last checkpoints are averaged."""
    if args.average_last is None:
        return _model_folder(args.checkpoint, DEFAULT_EXPORT_MODEL)
    from ..pretrained import UnknownModelError, resolve_model

    try:
        return resolve_model(args.checkpoint)
    except UnknownModelError as exc:
        raise CLIError(str(exc)) from None


def _generation_file(args, source: Path) -> dict[str, bytes]:
    """``--length-penalty``: the translator's ``generation.json`` for the export of ``source`` (none without it)."""
    if args.length_penalty is None:
        return {}
    from ..tasks.translation.config import TRANSLATION_MODELS
    from ..tasks.translation.generation import GENERATION_FILE, GenerationDefaults
    from ..training.checkpoint import CheckpointError, list_checkpoints

    try:
        newest = list_checkpoints(source)[-1] if args.average_last is not None else source
        model_type = json.loads((newest / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (CheckpointError, IndexError, OSError, ValueError, AttributeError):
        model_type = None  # not a readable checkpoint: export_checkpoint says what is wrong with it
    if model_type is not None and model_type not in TRANSLATION_MODELS:
        raise CLIError(f"--length-penalty is for translation models; {source} holds a {model_type} model")
    return {GENERATION_FILE: GenerationDefaults(args.length_penalty).to_bytes()}


def cmd_export(args) -> None:
    check_prune_flags(args)
    if args.precision is not None and args.format != "huggingface":
        raise CLIError(
            f"--precision: for --format huggingface (a language model's weights); --format {args.format} "
            + ("keeps fp16 weights unless --fp32" if args.format == "attnkit" else "takes --quantization")
        )
    if args.format == "ctranslate2":
        return cmd_export_ctranslate2(args)
    if args.format == "huggingface":
        return cmd_export_huggingface(args)
    import torch

    from ..training.checkpoint import CheckpointError, export_checkpoint

    _output(args.out, "out", folder=True)
    try:
        source = _source(args)
        heads = choose_heads(args, source) if pruning(args) else None
        done = export_checkpoint(
            source,
            args.out,
            average_last=args.average_last,
            dtype=None if args.fp32 else torch.float16,
            extra_files=_generation_file(args, source),
            force=args.force,
        )
    except CheckpointError as exc:
        given = f"--average-last {args.average_last}" if args.average_last is not None else "cannot load checkpoint"
        raise CLIError(f"{given}: {exc}") from None
    what = f"mean of {', '.join(p.name for p in done.sources)}" if len(done.sources) > 1 else str(done.sources[0])
    if heads is not None:
        print(prune_export(done.path, heads, None if args.fp32 else torch.float16))
        done = dataclasses.replace(done, size_bytes=sum(f.stat().st_size for f in done.path.iterdir() if f.is_file()))
    print(
        f"wrote {done.path} from {what} ({done.size_bytes / 1e6:.1f} MB, "
        f"{'fp32' if args.fp32 else 'fp16'} weights, no trainer state)"
    )


def add_parser(sub) -> None:
    ex = sub.add_parser("export", help="write a small (fp16) copy of a checkpoint for shipping")
    ex.add_argument(
        "checkpoint",
        help="a model name (`attnkit models` lists them), a checkpoint folder, e.g. runs/rnnsearch/best, or a training "
        "run's folder (its newest checkpoint); with --average-last, the run folder, e.g. runs/transformer",
    )
    ex.add_argument("out", help="destination folder, e.g. models/rnnsearch-es-en")
    ex.add_argument("--fp32", action="store_true", help="keep float32 weights (default: off: fp16)")
    ex.add_argument(
        "--average-last",
        dest="average_last",
        type=arg_type(between(1, 1000, integer=True), "average_last"),
        default=None,
        metavar="K",
        help="export the mean weights of the last K step checkpoints in the run folder (default: none: one checkpoint)",
    )
    _add_length_penalty_flag(
        ex,
        "none: the checkpoint's own, else 0.6",
        what="attnkit, a translator: ship this GNMT length penalty α as its beam search's default (generation.json; "
        "choose it on validation data with `attnkit evaluate translation --split valid --beam 5 --length-penalty A`)",
    )
    ex.add_argument(
        "--format",
        default="attnkit",
        choices=["attnkit", "ctranslate2", "huggingface"],
        help="attnkit: a checkpoint folder; ctranslate2: a CTranslate2 model of a Transformer translator, with its "
        "tokenizer and attnkit.json, for --engine ctranslate2 (pip install 'attnkit[deploy]'); huggingface: a "
        "Transformer translator as a stock transformers model folder (Marian if post-norm, Pegasus if pre-norm) "
        "with tokenizer.json, for AutoModelForSeq2SeqLM, or a language model as a stock LlamaForCausalLM or "
        "GPT2LMHeadModel (its shape's), for AutoModelForCausalLM (pip install 'attnkit[hf]') (default: attnkit)",
    )
    ex.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "fp16"],
        help="huggingface, a language model: the weights' type in model.safetensors (fp16: half the size, the "
        "weights rounded to float16; a translator exports in fp32 only) (default: fp32)",
    )
    ex.add_argument(
        "--quantization",
        default="int8",
        choices=["int8", "int8_float32", "float32"],
        help="ctranslate2: the weights' type (int8: int8 matmuls; int8_float32: the same on CPUs; float32: "
        "the exact network) (default: int8)",
    )
    ex.add_argument(
        "--shortlist",
        default=None,
        metavar="FILE",
        help="ctranslate2: a lexical shortlist (`attnkit shortlist`) written as the export's vocabulary map, "
        "for translate --vmap (default: none)",
    )
    ex.add_argument(
        "--force",
        action="store_true",
        help="replace OUT when an earlier attnkit export or checkpoint wrote it (its attnkit.json or COMPLETE lists "
        "every file; any other folder, one with files of yours in it, or the folder being exported is refused, "
        "and nothing is removed) (default: off)",
    )
    add_prune_flags(ex)
    ex.set_defaults(func=cmd_export)
