"""The alignment commands of ``attnkit``: ``align`` (Pharaoh links from a model's attention or from
eflomal) and ``evaluate alignment`` (AER with bootstrap intervals against gold links)."""

from __future__ import annotations

import json
import sys

from ..checks import COUNT, arg_type, between
from ..errors import InputError
from .common import _model_folder, _open_model, _output, _output_text
from .corpus_job import (
    add_corpus_job_flags,
    add_processes_flag,
    corpus_job_wanted,
    is_rank0,
    job_options,
    launch,
    run_corpus_job,
    start_group,
    torchrun_world,
)
from .flags import (
    _add_device_flags,
    _add_json_flag,
    _add_layer_head_flags,
    _add_limit_flag,
    _add_model_flag,
    _add_output_flag,
    _add_progress_flag,
    _add_split_flag,
)

__all__ = [
    "add_align_parser",
    "add_data_links_parser",
    "add_evaluate_alignment_parser",
    "cmd_align",
    "cmd_data_links",
    "cmd_evaluate_alignment",
]

_SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
_DEV = between(0, COUNT.high, integer=True)
_THRESHOLD = between(0, 1, open_low=True)  # an attention weight


# ---------------------------------------------------------------- align
def cmd_align(args) -> int | None:
    from ..alignment.gold import format_links

    _output(args.output, "--output")
    if args.method == "eflomal":
        if args.model or args.reverse_model or args.layer or args.head:
            raise InputError("--method eflomal aligns the files with eflomal itself: give no --model/--layer/--head")
        if args.processes is not None or corpus_job_wanted(args):
            raise InputError(
                "--method eflomal learns its alignments from the whole corpus at once: it cannot be split into "
                "parts (no --processes, --job-dir or torchrun)"
            )
        links = _eflomal_file_links(args)
    elif args.processes is not None:
        return launch(args.argv, args.processes)
    elif corpus_job_wanted(args):
        return _align_corpus_job(args)
    else:
        links = _model_file_links(args)
    skipped = 0
    # a file appears whole, or an earlier one is kept; a reader that stops early (`| head`) ends the command
    # quietly (attnkit.cli.main)
    with _output_text(args.output) as out:
        for a in links:
            skipped += a is None
            out.write(("" if a is None else format_links(a)) + "\n")
    if skipped:
        print(
            f"attnkit: {skipped} pairs had a source longer than the model accepts: their lines are empty",
            file=sys.stderr,
        )


def _require_eflomal() -> None:
    from ..alignment.eflomal import eflomal_available

    if not eflomal_available():
        raise InputError("eflomal is not installed: pip install 'attnkit[align]'")


def _eflomal_file_links(args):
    from ..alignment.eflomal import eflomal_links
    from ..tasks.translation.alignment import read_parallel

    _require_eflomal()
    if args.symmetrize == "none":
        raise InputError("--symmetrize none reads one direction of a model; eflomal's two directions need a rule")
    _, pairs = read_parallel(args.src, args.tgt)
    pairs = [(" ".join(s), " ".join(t)) for s, t in pairs]
    return eflomal_links([s for s, _ in pairs], [t for _, t in pairs], method=args.symmetrize or "grow-diag-final-and")


def _check_reverse_flags(args) -> None:
    """``--symmetrize none`` reads one direction of one model: a ``--reverse-model`` beside it is refused."""
    if args.symmetrize == "none" and args.reverse_model not in (None, "none"):
        raise InputError("--symmetrize none reads one direction: give no --reverse-model")


def _reverse_model_name(args, model_path, command: str, *, say: bool = True) -> str | None:
    """The model of the other direction that ``align`` and ``evaluate alignment`` combine with the model in
    ``model_path`` (the one default of both): ``--reverse-model`` as given; ``none``: no second model (both
    directions read from the one model's attention); not given, under ``--symmetrize`` (a rule, not none),
    the shipped model of the other direction when there is one (``transformer-en-es`` for
    ``transformer-es-en``), named on stderr when ``say``; else None."""
    from ..pretrained import reverse_model

    name = args.reverse_model
    if name is None and args.symmetrize not in (None, "none") and model_path is not None:
        name = reverse_model(model_path)
        if name is not None and say:
            print(f"attnkit {command}: --symmetrize reads the other direction with {name}", file=sys.stderr)
    return None if name == "none" else name


def _forward_aligner(args, *, say: bool = True, device: str | None = None):
    """``(model, aligner, reverse model's name or None, reading)`` of the flags: the model loaded (on
    ``device``, default ``--device``), the reverse model named (the shipped one of the other direction under
    ``--symmetrize``; said on stderr)."""
    from ..pretrained import DEFAULT_ALIGNMENT_MODEL
    from ..service import ModelKind
    from ..tasks.translation.alignment import AttentionReading, ModelAligner, default_method

    _check_reverse_flags(args)
    model = _open_model(args, DEFAULT_ALIGNMENT_MODEL, kind=ModelKind.TRANSLATOR, device=device)
    reverse_name = _reverse_model_name(args, model.path, "align", say=say)
    # --symmetrize without a reverse model: the row and column argmaxes of the one model's matrix
    both_ways = args.symmetrize if not reverse_name else None
    translator = model.impl
    method = args.method or default_method(translator)  # a guided head when the model has one
    reading = AttentionReading(method, args.layer, args.head, args.threshold, both_ways)
    return model, ModelAligner(translator, reading), reverse_name, reading


def _back_aligner(args, reverse_name: str, reading, device: str | None = None):
    """``(model, aligner)`` of the reverse model, read as the forward one (its own default method
    unless ``--method`` was given), on ``device`` (default ``--device``)."""
    import dataclasses

    from ..service import ModelKind
    from ..tasks.translation.alignment import ModelAligner, default_method

    back_model = _open_model(args, None, ref=reverse_name, kind=ModelKind.TRANSLATOR, device=device)
    back_translator = back_model.impl
    back_reading = reading if args.method else dataclasses.replace(reading, method=default_method(back_translator))
    return back_model, ModelAligner(back_translator, back_reading)


def _model_file_links(args):
    from ..tasks.translation.alignment import progress_bar, read_parallel, symmetrized

    _, aligner, reverse_name, reading = _forward_aligner(args)
    total, pairs = read_parallel(args.src, args.tgt)
    print(f"attnkit align: {total} pairs, {aligner.describe()}", file=sys.stderr)
    bar = progress_bar(total, not args.no_progress)

    def counted(stream):
        for x in stream:
            bar.update(1)
            yield x
        bar.close()

    forward = aligner.align(pairs, batch_size=args.batch_size)
    if not reverse_name:
        return counted(forward)
    _, back = _back_aligner(args, reverse_name, reading)
    _, pairs_again = read_parallel(args.src, args.tgt)
    reverse = back.align(pairs_again, batch_size=args.batch_size, reverse=True)
    return counted(symmetrized(forward, reverse, args.symmetrize or "grow-diag-final-and"))


def _align_corpus_job(args) -> int:
    """``align`` as a corpus job (under torchrun, or resumable with ``--job-dir``): the pairs in parts
    of whole buckets of the single-process run (a multiple of 8 × ``--batch-size``, which it sorts by
    length and batches within), so every batch, and so every link, is the one-process run's."""
    from ..alignment.gold import format_links
    from ..tasks.translation.alignment import symmetrized

    rank0 = is_rank0()
    device = start_group(args.device)  # under torchrun: this rank's own GPU, before any model is loaded
    model, aligner, reverse_name, reading = _forward_aligner(args, say=rank0, device=device)
    back_model, back = _back_aligner(args, reverse_name, reading, device) if reverse_name else (None, None)
    bucket = 8 * args.batch_size
    part_lines = None if args.part_lines is None else -(-args.part_lines // bucket) * bucket
    rule = args.symmetrize or "grow-diag-final-and"

    def work(lines: list) -> tuple[bytes, dict]:
        pairs = [(s.split(), t.split()) for (_, s), (_, t) in lines]
        links = aligner.align(pairs, batch_size=args.batch_size)
        if back is not None:
            links = symmetrized(links, back.align(pairs, batch_size=args.batch_size, reverse=True), rule)
        text, skipped = [], 0
        for a in links:
            skipped += a is None
            text.append(("" if a is None else format_links(a)) + "\n")
        return "".join(text).encode("utf-8"), {"skipped": skipped}

    models = {"model_used": str(model.path or model.label)}
    if back_model is not None:
        models["reverse_model_used"] = str(back_model.path or back_model.label)
    totals = run_corpus_job(
        args,
        command="align",
        inputs=[args.src, args.tgt],
        output=args.output,
        options=job_options(args, **models),
        work=work,
        part_lines=part_lines,
        unit="pair",
        part_unit=bucket,
        describe=lambda lines: f"attnkit align: {aligner.describe()}; parts of {lines} pairs",
    )
    if totals and totals.get("skipped"):
        print(
            f"attnkit: {totals['skipped']} pairs had a source longer than the model accepts: their lines are empty",
            file=sys.stderr,
        )
    return 0


def add_align_parser(sub) -> None:
    al = sub.add_parser(
        "align",
        help="word alignments (Pharaoh i-j lines, as fast_align and eflomal write) from a model's attention",
        description="Force the model to write each target line while reading its source line, read its "
        "attention, and print one line of 0-based `source-target` word links per pair (whitespace words).",
    )
    _add_model_flag(al, "the shipped Transformer", what="a translation model")
    al.add_argument("--src", required=True, help="source-language file, one sentence per line (required, no default)")
    al.add_argument("--tgt", required=True, help="target-language file, line-parallel to --src (required, no default)")
    al.add_argument(
        "--method",
        default=None,
        choices=["attention", "shift", "guided", "eflomal"],
        help="attention: the model's attention at the step that outputs each target word; shift: Shift-Att "
        "(Chen et al. 2020), the step where it is the input (penultimate layer by default); guided: the head "
        "trained with --guided-alignment; eflomal: no model, eflomal on the two files (default: guided for a "
        "model trained with --guided-alignment, else attention)",
    )
    _add_layer_head_flags(
        al,
        "cross-attention layer, 1-based (default: the method's)",
        "with --layer: one head, 1-based (default: head mean)",
    )
    al.add_argument(
        "--threshold",
        type=arg_type(_THRESHOLD, "threshold"),
        default=None,
        help="also link pairs with attention at least this (default: none)",
    )
    al.add_argument(
        "--batch-size",
        type=arg_type(between(1, 100_000, integer=True), "batch size"),
        default=32,
        help="pairs per forced-decoding batch (default: 32)",
    )
    al.add_argument(
        "--symmetrize",
        default=None,
        choices=(*_SYMMETRIZATIONS, "none"),
        help="combine two directions: the links of the reverse model (--reverse-model, or the shipped model of "
        "the other direction); without one, each source word's argmax target word read from the same attention; "
        "with eflomal its two directions; none: each target word's argmax source word only (default: "
        "grow-diag-final-and with a reverse model or eflomal; else intersection for a guided head, none otherwise)",
    )
    al.add_argument(
        "--reverse-model",
        default=None,
        help="a model of the other direction (target → source); 'none': read both ways from the one model "
        "(default: with --symmetrize, the shipped model of the other direction when there is one)",
    )
    _add_output_flag(al, "write the links here instead of stdout (default: stdout)")
    _add_progress_flag(al)
    _add_device_flags(al)
    add_corpus_job_flags(al, "pairs")
    al.set_defaults(func=cmd_align)


# ---------------------------------------------------------------- data links
def cmd_data_links(args) -> None:
    from ..alignment.eflomal import eflomal_links
    from ..alignment.gold import format_links
    from ..data.corpus import open_corpus
    from ..paths import atomic_write_text

    corpus = open_corpus(args.dataset, args.home)  # an unknown name lists the known ones
    _output(args.output, "--output")
    _require_eflomal()
    pairs = corpus.pairs(args.split, limit=args.limit)
    if not pairs:
        raise InputError(f"corpus {corpus.name!r} has no {args.split} pairs")
    print(f"attnkit data links: eflomal on {len(pairs)} {args.split} pairs, both directions ...", file=sys.stderr)
    links = eflomal_links([p.src for p in pairs], [p.tgt for p in pairs], method=args.symmetrize)
    try:
        atomic_write_text(args.output, "".join(format_links(a) + "\n" for a in links))
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"{args.output}: {len(links)} lines of {args.symmetrize} links (Pharaoh i-j, source-target)")


def add_data_links_parser(d) -> None:
    dl = d.add_parser(
        "links",
        help="word links for a corpus's pairs with eflomal (both directions, symmetrised), for --guided-alignment",
    )
    dl.add_argument(
        "dataset", metavar="CORPUS", help="bible, or the NAME of a corpus prepared with `attnkit data prepare parallel`"
    )
    _add_split_flag(dl, "train")
    _add_limit_flag(dl, "the first N pairs only (as --limit-train N) (default: all)")
    dl.add_argument(
        "--symmetrize", default="grow-diag-final-and", choices=_SYMMETRIZATIONS, help="(default: %(default)s)"
    )
    _add_output_flag(dl, "the links file to write, one line per pair (required, no default)", required=True)
    dl.set_defaults(func=cmd_data_links)


# ---------------------------------------------------------------- evaluate alignment
def cmd_evaluate_alignment(args) -> int | None:
    if args.processes is not None:
        return launch(args.argv, args.processes)
    if torchrun_world() == 1:
        return _evaluate_alignment(args, None)
    from ..training import distributed

    device = start_group(args.device)  # this rank's own GPU, before the models are loaded
    try:
        split = (distributed.rank(), distributed.world_size(), distributed.all_gather_object)
        return _evaluate_alignment(args, split, device)
    finally:
        distributed.cleanup()


def _evaluate_alignment(args, split, device: str | None = None) -> None:
    from ..pretrained import DEFAULT_ALIGNMENT_MODEL
    from ..tasks.translation.alignment_evaluate import evaluate_alignment

    if args.head is not None and args.layer is None:
        raise InputError("--head needs --layer (heads are numbered within a layer)")
    gold_files = (args.src, args.tgt, args.gold)
    if any(gold_files) and not all(gold_files):
        raise InputError("a gold set of your own needs all three of --src, --tgt and --gold")
    _check_reverse_flags(args)
    folder = _model_folder(args.model, DEFAULT_ALIGNMENT_MODEL)
    reverse_name = _reverse_model_name(args, folder, "evaluate alignment", say=split is None or split[0] == 0)
    try:
        r = evaluate_alignment(
            folder,
            methods=tuple(args.method) if args.method else None,
            layer=args.layer,
            head=args.head,
            all_heads=args.all_heads,
            threshold=args.threshold,
            both_ways=args.symmetrize,
            reverse_model=reverse_name,
            references=not args.no_references,
            gold=gold_files if all(gold_files) else None,
            dev=args.dev,
            samples=args.samples,
            home=args.home,
            device=args.device if device is None else device,
            dtype=args.precision,
            split=split,
        )
    except ValueError as exc:  # a model without attention, a layer it does not have, a malformed gold file
        raise InputError(str(exc)) from None
    if r is None:  # under torchrun, rank 0 reports
        return
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return
    print(_alignment_table(r))


#: The width ``evaluate alignment`` keeps its table to (a terminal's 80 to 100 columns); ``--json`` has every
#: row's full description and unrounded interval.
TABLE_WIDTH = 100
_NUMBERS = "{aer:>6} {ci:>14} {prec:>6} {rec:>6}  {diff}"


def _short_label(row: dict, model: str, guided: dict | None) -> str:
    """A row's name in the table: ``guided L2H1``, ``shift L2 mean (chosen on dev)``, ``L2H1 (guided)``
    for --all-heads' rows; the references' names as they are."""
    if "method" not in row:
        return row["name"]
    layer, head = row.get("layer"), row.get("head")
    where = "" if layer is None else f"L{layer}" + (f"H{head}" if head is not None else " mean")
    is_guided = guided is not None and (layer, head) == (guided["layer"], guided["head"])
    if row.get("per_layer") or row["name"].endswith("(best head on dev)"):
        label = where + (" (guided)" if is_guided else "")
        return f"best on dev: {label}" if row["name"].endswith("(best head on dev)") else label
    label = f"{row['method']} {where}".rstrip()
    return label + (" (chosen on dev)" if row["name"].endswith("(layer chosen on dev)") else "")


def _alignment_table(r: dict) -> str:
    """The ``evaluate alignment`` report as text no wider than :data:`TABLE_WIDTH`: the heading wrapped, one
    row per reading under a short name (a name too long for its column takes a line of its own), and what
    each main row reads, in full, under the table."""
    import textwrap

    def wrap(text: str, indent: str = "") -> str:
        return textwrap.fill(
            text, TABLE_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False
        )

    lines = [
        wrap(
            f"{r['model']} on {r['gold']}: alignment of the reference translation, {r['scored_verses']} scored "
            f"pairs ({r['dev_verses']} more for choosing layers and heads); {r['rule']}; 95 % bootstrap intervals "
            f"over pairs ({r['bootstrap']['samples']} resamples); Δ = AER − the first row's, paired"
        )
    ]
    guided = r.get("guided_head")
    rows = r["rows"] + ([r["best_head"]] if r["best_head"] else []) + r["references"]
    shown = [(row, _short_label(row, r["model"], guided)) for row in rows]
    numbers_width = len(_NUMBERS.format(aer="", ci="", prec="", rec="", diff="+0.000 [+0.000, +0.000] tie"))
    room = TABLE_WIDTH - 3 - numbers_width
    width = min(room, max((len(label) for row, label in shown if not row.get("skipped")), default=0))
    lines.append(
        f"  {'':<{width}} "
        + _NUMBERS.format(aer="AER", ci="95% interval", prec="prec.", rec="recall", diff="Δ vs first row [95%]")
    )
    for row, label in shown:
        if row.get("skipped"):
            lines.append(wrap(label, "  "))
            continue
        lo, hi = row["aer_95ci"]
        vs = row.get("vs_first")
        diff = (
            ""
            if vs is None
            else f"{vs['difference']:+.3f} [{vs['low']:+.3f}, {vs['high']:+.3f}]" + (" tie" if vs["tie"] else "")
        )
        numbers = _NUMBERS.format(
            aer=f"{row['aer']:.3f}",
            ci=f"[{lo:.3f}, {hi:.3f}]",
            prec=f"{row['precision']:.3f}",
            rec=f"{row['recall']:.3f}",
            diff=diff,
        ).rstrip()
        if len(label) > width:  # too long for the column: the name on its own line, the numbers under it
            lines += [wrap(label, "  "), f"  {'':<{width}} {numbers}"]
        else:
            lines.append(f"  {label:<{width}} {numbers}")
    prefix = f"{r['model']} "
    main = [(row, label) for row, label in shown if "method" in row and not row.get("per_layer")]
    per_layer = [row for row in r["rows"] if row.get("per_layer")]
    if main or per_layer:
        lines.append("readings:")
        for row, label in main:
            lines.append(wrap(f"{label}: {row['name'].removeprefix(prefix).removeprefix(row['method'] + ': ')}", "  "))
        if per_layer:  # one reading for them all, from the first (a layer's head mean: `method: layer 1 head mean, …`)
            how = per_layer[0]["name"].removeprefix(prefix).split(", ", 1)[1]
            note = (
                f"; (guided): layer {guided['layer']} head {guided['head']}, the head trained to align"
                if guided
                else ""
            )
            text = f"Ln mean, LnHm: layer n's head mean and its head m, read by {per_layer[0]['method']}, {how}{note}"
            lines.append(wrap(text, "  "))
    lines.append("(--json gives every row's full description and numbers)")
    return "\n".join(lines)


def add_evaluate_alignment_parser(e) -> None:
    ea = e.add_parser("alignment", help="does attention align? AER against gold alignments, with bootstrap intervals")
    _add_model_flag(ea, "the shipped Transformer", what="a translation model")
    ea.add_argument(
        "--method",
        action="append",
        choices=["attention", "shift", "guided"],
        help="how attention is read (see `attnkit align --help`); repeat to compare, one row each, paired "
        "against the first (default: attention and shift, Shift-Att with its layer chosen on the dev pairs; "
        "for a model trained with guided alignment, its guided head first)",
    )
    _add_layer_head_flags(
        ea,
        "read this cross-attention layer (1-based) instead of the method's default; with --head one "
        "head, else the layer's head mean (default: none; Shift-Att picks its layer on the dev pairs)",
        "with --layer: the head (1-based) (default: none)",
    )
    ea.add_argument(
        "--all-heads",
        action="store_true",
        help="score every layer × head, each layer's mean, and the best head chosen on the dev pairs (default: off)",
    )
    ea.add_argument(
        "--threshold",
        type=arg_type(_THRESHOLD, "threshold"),
        default=None,
        help="also link every word pair with attention at least this (default: none: argmax links only)",
    )
    ea.add_argument(
        "--symmetrize",
        default=None,
        choices=(*_SYMMETRIZATIONS, "none"),
        help="combine two directions: the links of the reverse model (--reverse-model, or the shipped model of "
        "the other direction); without one, each source word's argmax target word read from the same attention; "
        "none: each target word's argmax source word only (default: grow-diag-final-and with --reverse-model; "
        "else intersection for a guided head, none otherwise)",
    )
    ea.add_argument(
        "--reverse-model",
        default=None,
        help="a model of the other direction (target → source), read with its default method, whose links are "
        "combined with the model's; 'none': read both ways from the one model (default: with --symmetrize, the "
        "shipped model of the other direction when there is one)",
    )
    ea.add_argument("--src", default=None, help="your own gold set: source sentences, one per line (default: none)")
    ea.add_argument("--tgt", default=None, help="your own gold set: target sentences, line-parallel (default: none)")
    ea.add_argument(
        "--gold",
        default=None,
        help="your own gold set: one line of links per pair, 0-based source-target, `i-j` sure and `ipj` "
        "possible (Lilt alignment-scripts' convention; `i?j` is read as possible too) (default: the built-in "
        "Spanish-English gold set)",
    )
    ea.add_argument(
        "--dev",
        type=arg_type(_DEV, "dev"),
        default=None,
        help="the first N pairs are for choosing a layer or head, the rest are scored (default: 50 for the "
        "built-in gold set, 0 for your own)",
    )
    ea.add_argument(
        "--samples",
        type=arg_type(between(1, 1_000_000, integer=True), "samples"),
        default=1000,
        help="bootstrap resamples (default: 1000)",
    )
    ea.add_argument(
        "--no-references", action="store_true", help="skip the diagonal baseline and eflomal (default: off)"
    )
    _add_json_flag(ea)
    _add_device_flags(ea)
    add_processes_flag(ea, "pairs", same="the table is")
    ea.set_defaults(func=cmd_evaluate_alignment)
