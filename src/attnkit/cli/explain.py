"""``attnkit explain`` and ``attnkit evaluate explanations``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..checks import arg_type, between
from ..paths import atomic_write_text
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from ..tasks.capabilities import ReadsText
from .common import CLIError, _check_explanations_model, _model_folder, _open_model, _output, _shown_name
from .corpus_job import add_corpus_job_flags, corpus_job_wanted, launch, start_group
from .flags import (
    _add_beam_flag,
    _add_device_flags,
    _add_json_flag,
    _add_layer_head_flags,
    _add_limit_flag,
    _add_model_flag,
    _add_output_flag,
    _add_progress_flag,
)


def _progress_printer(label: str):
    """A progress callback that redraws one line on a terminal's stderr (nothing when stderr is a file)."""
    if not sys.stderr.isatty():
        return None
    return lambda f: print(f"\r{label}: {100 * f:3.0f} %", end="", file=sys.stderr, flush=True)


#: the flags of a decoder-only model's attributions only, and their argparse names
_GENERATION_FLAGS = (
    ("--text", "text"),
    ("--sample", "sample"),
    ("--seed", "seed"),
    ("--temperature", "temperature"),
    ("--top-k", "top_k"),
    ("--contrast", "contrast"),
)


def _refuse_unknown_method(args, model) -> None:
    """An unknown ``--method``, refused in one line listing the methods ``model`` takes."""
    from ..attribution import UnknownMethodError, canonical_method

    if not model.can(ReadsText):
        canonical_method(args.method)  # raises, listing the translators' and captioners' methods
    from .explain_hf import model_methods

    raise UnknownMethodError(
        f"unknown attribution method {args.method!r}; {_shown_name(model)} takes: "
        + ", ".join(model_methods(args, model.impl))
    )


def cmd_explain(args) -> None:
    from ..attribution import UnknownMethodError, canonical_method
    from ..attribution.generation import canonical_generation_method
    from ..attribution.report import format_attribution, plot_attribution
    from ..errors import InputError
    from ..service import CaptionRequest, MethodOptions, ModelKind, TranslationRequest, analyse

    try:  # a known name is read per kind once the model is open; an unknown one is refused then, with its methods
        canonical_generation_method(args.method)
        known = True
    except UnknownMethodError:
        try:
            canonical_method(args.method)
            known = True
        except UnknownMethodError:
            known = False
    _output(args.plot, "--plot")
    device = None
    if args.file is not None and corpus_job_wanted(args):  # a rank: its own GPU, before the model is loaded
        device = start_group(args.device)
    model = _open_model(args, DEFAULT_TRANSLATION_MODEL, device=device)
    if not known:
        _refuse_unknown_method(args, model)
    text_model = model.can(ReadsText)  # attnkit's language model or a Hugging Face one
    # the method by the registry's name for this kind of model (alti: a language model's ALTI; alti_plus: ALTI+)
    method = canonical_generation_method(args.method) if text_model else canonical_method(args.method)
    if args.repeated is not None:  # a language model's heads on random tokens repeated twice
        from .explain_repeated import explain_repeated

        return explain_repeated(args, model)
    if args.file is not None:  # every line of a file, in one process or split across processes
        from .explain_file import explain_file

        _output(args.output, "--output")
        return explain_file(args, model, method)
    for flag in ("target_file", "output", "job_dir", "processes"):
        if getattr(args, flag) is not None:
            raise CLIError(f"--{flag.replace('_', '-')} goes with --file (every line of a file)")
    progress = _progress_printer(method)
    if text_model:
        from .explain_hf import explain_self_attention_model

        return explain_self_attention_model(args, model, method, progress)
    for flag in ("--position", "--threshold"):
        if getattr(args, flag[2:]) is not None:
            raise CLIError(f"{flag} is for a language model's views (logit_lens, direct_logit, routes)")
    if args.self_attention:
        raise CLIError("--self-attention is for language models and Hugging Face encoder-only models")
    for flag, value in _GENERATION_FLAGS:
        if getattr(args, value) not in (None, False):
            raise CLIError(f"{flag} is for language models (attnkit's, GPT-2, Llama): give the input as the argument")
    if args.input is None:
        raise CLIError("give the input to explain: the source text (translators) or an image file (captioners)")
    if model.kind is ModelKind.TRANSLATOR:
        options = MethodOptions(layer=args.layer, head=args.head, steps=args.steps, batch=args.batch)
        request = TranslationRequest(args.input, beam=args.beam, target=args.target, method=method, options=options)
    else:
        from ..tasks.captioning import load_image_file

        if args.layer is not None or args.head is not None:
            raise CLIError("--layer and --head are for Transformer translators; a captioner has one attention")
        try:
            image = load_image_file(args.input, model.impl.canvas)
        except (FileNotFoundError, ValueError) as exc:
            raise CLIError(f"{exc} (a captioner explains an image file)") from None
        options = MethodOptions(steps=args.steps, batch=args.batch)
        request = CaptionRequest(image, beam=args.beam, target=args.target, method=method, options=options)
    analysis = analyse(model, request, progress)
    att = analysis.attribution
    if att is None:  # an empty output: no piece to attribute
        raise InputError("the target has no tokens: there is no output piece to explain")
    if progress is not None:
        print("\r", end="", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": _shown_name(model), **att.to_dict()}, ensure_ascii=False))
    else:
        print(format_attribution(att, k=args.top, pieces=args.pieces))
    if args.plot is not None:
        if Path(args.plot).suffix.lower() == ".html":  # the explorer's view of this analysis, one self-contained page
            from ..explorer.notebook import ExplorerView
            from ..explorer.payload import caption_answer, translation_answer

            if model.kind is ModelKind.TRANSLATOR:
                view = ExplorerView(translations=[translation_answer(analysis)])
            else:
                view = ExplorerView(captions=[caption_answer(analysis)])
            wrote = view.save(args.plot)
        else:
            wrote = plot_attribution(att, args.plot, pieces=args.pieces)
        print(f"wrote {wrote}", file=sys.stderr if args.json else sys.stdout)


def _evaluation_progress(method: str, stage: str, done: int | None = None, total: int | None = None) -> None:
    """One stderr line per stage of a method and every 5 items scored (and the last): a long evaluation
    says where it is, in a log file as on a terminal."""
    if done is None:
        print(f"[explanations] {method}: {stage}", file=sys.stderr, flush=True)
    elif done % 5 == 0 or done == total:
        print(f"[explanations] {method}: {done}/{total}", file=sys.stderr, flush=True)


def _read_resume(output: str | None) -> dict | None:
    """The earlier report at ``--output`` for ``--resume`` (None when there is none yet)."""
    if output is None:
        raise CLIError("--resume needs --output: the report it resumes is the one --output names")
    path = Path(output)
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CLIError(f"--resume: {path} is not a readable report ({e}); move it away to start afresh") from None
    if not isinstance(report, dict) or not isinstance(report.get("methods"), dict):
        raise CLIError(f"--resume: {path} is not a report of attnkit evaluate explanations")
    return report


def cmd_evaluate_explanations(args) -> int | None:
    from ..attribution.explanation_quality import evaluate_caption_explanations, evaluate_explanations, format_report
    from ..service import ModelKind, model_kind

    path = _model_folder(args.model, DEFAULT_TRANSLATION_MODEL)
    split = args.processes is not None or corpus_job_wanted(args)
    output = Path(args.output) if args.output else None

    def save(report: dict) -> None:  # after every method: an interrupted run keeps what it finished
        atomic_write_text(output, json.dumps(report, indent=2, ensure_ascii=False))

    kind = model_kind(path)
    _check_explanations_model(path, kind)
    if split and kind is not ModelKind.TRANSLATOR:
        raise CLIError(
            "--processes, torchrun and --job-dir split a translator's gold verses; score this model in one process"
        )
    if split and args.resume:
        raise CLIError(
            "--resume keeps the methods of a one-process run; a split run resumes from its parts: run the same "
            "command again (the same --job-dir)"
        )
    if args.processes is not None:
        _output(args.output, "--output")
        return launch(args.argv, args.processes)
    if split:  # a rank of a torchrun launch, or one process running in parts (--job-dir)
        from .explanations_job import evaluate_explanations_job

        _output(args.output, "--output")
        report = evaluate_explanations_job(args, path)
        if report is None:  # not rank 0
            return None
        if output:
            save(report)
        print(json.dumps(report, ensure_ascii=False) if args.json else format_report(report))
        return None
    resume = _read_resume(args.output) if args.resume else None
    options = dict(
        methods=args.method,
        limit=args.limit,
        sanity_verses=args.sanity_verses,
        device=args.device,
        progress=None if args.no_progress else _evaluation_progress,
        on_method=save if output else None,
        resume=resume,
    )
    if kind in (ModelKind.SELF_ATTENTION, ModelKind.LANGUAGE_MODEL):  # a language model (encoder-only: refused above)
        from .evaluate_lm import evaluate_language_model

        report, text = evaluate_language_model(path, args)
        if output:
            save(report)
        print(json.dumps(report, ensure_ascii=False) if args.json else text)
        return
    if args.texts is not None:
        raise CLIError("--texts is for a decoder-only language model; a translator or captioner is scored on gold")
    if kind is ModelKind.TRANSLATOR:  # attnkit's translators and Hugging Face encoder-decoders
        report = evaluate_explanations(path, dtype=args.precision, **options)
    else:
        options["limit"] = args.limit or 100
        report = evaluate_caption_explanations(path, dtype=args.precision, home=args.home, **options)
    if output:
        save(report)
    print(json.dumps(report, ensure_ascii=False) if args.json else format_report(report))


def add_parser(sub) -> None:
    xp = sub.add_parser(
        "explain",
        help="which source words (or image cells) each output word used, by an attribution method",
        description="Attribute every output word of a translation (or caption) to the source words (or image "
        "grid cells) under forced decoding: raw attention, rollout, attention_norm, value_zeroing, alti_plus, "
        "saliency, input_x_gradient, integrated_gradients (see attnkit.attribution). A language model "
        "(attnkit's, GPT-2, Llama) continues the text (greedy, or --sample) and each written token is attributed to the "
        "tokens before it, or with --text every next token of a given text (--contrast: why this token and not "
        "another); attention_norm, value_zeroing, alti and alti_logit mix its context; logit_lens, direct_logit and "
        "routes (--position, --threshold) view one prediction; "
        "an encoder-only model (BERT) shows its self-attention (attention, rollout).",
    )
    xp.add_argument(
        "input",
        nargs="?",
        default=None,
        help="Spanish text (translation models), an image file (captioners), or the text to read or continue "
        "(language models and Hugging Face encoder-only models)",
    )
    xp.add_argument(
        "--text",
        default=None,
        help="language models: explain every next token of this text as written (teacher "
        "forcing), instead of a continuation of the argument (default: none)",
    )
    _add_model_flag(xp, DEFAULT_TRANSLATION_MODEL)
    xp.add_argument("--method", default="attention", help="the attribution method (default: attention)")
    xp.add_argument(
        "--target", default=None, help="the English (or caption) to force (default: the model's own output)"
    )
    _add_beam_flag(xp, 5, "beam size of the model's own output")
    _add_layer_head_flags(
        xp,
        "cross-attention layer, 1-based (default: the last)",
        "one head, 1-based (default: the mean of the heads)",
    )
    xp.add_argument(
        "--steps",
        type=arg_type(between(1, 10_000, integer=True), "steps"),
        default=None,
        help="integrated gradients: quadrature points (default: 32, refined per piece until complete within 1 %%)",
    )
    xp.add_argument(
        "--batch",
        type=arg_type(between(1, 65536, integer=True), "batch"),
        default=None,
        help="gradient methods: the most rows (target piece x interpolation point) per forward+backward pass; "
        "bounds the memory, not the values (default: 256)",
    )
    xp.add_argument(
        "--top",
        type=arg_type(between(1, 1000, integer=True), "top"),
        default=3,
        help="sources shown per target word; the logit lens's tokens per layer (default: 3)",
    )
    xp.add_argument("--pieces", action="store_true", help="subword pieces instead of whole words (default: off)")
    from .explain_file import add_explain_file_flags

    add_explain_file_flags(xp)
    xp.add_argument(
        "--max-new-tokens",
        type=arg_type(between(1, 512, integer=True), "max_new_tokens"),
        default=20,
        help="language models: the most tokens of the greedy continuation explained (default: 20)",
    )
    xp.add_argument(
        "--sample",
        action="store_true",
        help="language models: sample the continuation instead of the greedy one "
        "(--seed, --temperature, --top-k) (default: off)",
    )
    xp.add_argument(
        "--seed",
        type=arg_type(between(0, 2**31 - 1, integer=True), "seed"),
        default=None,
        help="with --sample: the random seed; the same seed gives the same continuation (default: a new one, "
        "printed); with --repeated: the seed of the random tokens (default: 0)",
    )
    xp.add_argument(
        "--temperature",
        type=arg_type(between(1e-3, 100.0), "temperature"),
        default=None,
        help="with --sample: divide the logits by this (< 1 sharper, > 1 flatter) (default: 1)",
    )
    xp.add_argument(
        "--top-k",
        type=arg_type(between(1, 1_000_000, integer=True), "top_k"),
        default=None,
        help="with --sample: draw from the K most likely tokens only (default: every token)",
    )
    xp.add_argument(
        "--contrast",
        default=None,
        metavar="TOKEN",
        help="language models, gradient methods: explain log p(token) − log p(TOKEN), why the "
        "model wrote its token rather than TOKEN (one token of its vocabulary) (default: none)",
    )
    xp.add_argument(
        "--position",
        type=arg_type(between(1, 1_000_000, integer=True), "position"),
        default=None,
        help="language models, --method logit_lens, direct_logit or routes: the position (1-based) "
        "of the text whose prediction is viewed (default: the last, the token after the text)",
    )
    xp.add_argument(
        "--threshold",
        type=arg_type(between(0.0, 1.0), "threshold"),
        default=None,
        help="--method routes: keep the edges whose importance is at least this (Ferrando & Voita 2024) "
        "(default: 0.04)",
    )
    xp.add_argument(
        "--repeated",
        type=arg_type(between(2, 1_000_000, integer=True), "repeated"),
        default=None,
        metavar="N",
        help="language models: instead of a text, N random tokens followed by the same N again (--seed), and the "
        "best induction head's map (or --layer with --head) with the induction stripe marked (default: none)",
    )
    xp.add_argument(
        "--self-attention",
        action="store_true",
        help="language models: the self-attention views (--method attention or rollout) instead "
        "of attributing a continuation; encoder-only models always show these (default: off)",
    )
    _add_json_flag(xp)
    xp.add_argument(
        "--plot",
        default=None,
        help="write a heatmap (or caption overlays) to this PNG, or with .html the explorer's view as one "
        "self-contained page (default: none)",
    )
    _add_device_flags(xp)
    xp.set_defaults(func=cmd_explain)


def add_evaluate_explanations_parser(e) -> None:
    ee = e.add_parser(
        "explanations",
        help="every attribution method of a translator: AER, deletion area, sanity (randomised model), ms per verse; "
        "of a decoder-only language model: deletion and insertion areas per next token, sanity",
    )
    _add_model_flag(ee, DEFAULT_TRANSLATION_MODEL)
    ee.add_argument(
        "--method", action="append", default=None, help="score only this method; repeat for more (default: all)"
    )
    _add_limit_flag(
        ee, "only the first N of the 100 scored gold verses (captioners: test scenes; default: all verses, 100 scenes)"
    )
    ee.add_argument(
        "--sanity-verses",
        type=arg_type(between(1, 1000, integer=True), "sanity_verses"),
        default=3,
        help="verses for the randomisation check, the first of those scored (default: 3)",
    )
    ee.add_argument(
        "--texts",
        default=None,
        metavar="FILE",
        help="a decoder-only language model: score its next tokens on these texts, one a line (default: the first "
        "--limit verses, 20 unless given, of the English Bible's validation split)",
    )
    _add_json_flag(ee)
    _add_output_flag(ee, "also write the JSON report here, after every method as well as at the end (default: none)")
    ee.add_argument(
        "--resume",
        action="store_true",
        help="keep the methods an interrupted run finished in --output (the same settings) (default: off)",
    )
    _add_device_flags(ee)
    add_corpus_job_flags(ee, "gold verses", part_lines=1, same="the report, its ms per verse aside, is")
    _add_progress_flag(ee)
    ee.set_defaults(func=cmd_evaluate_explanations)
