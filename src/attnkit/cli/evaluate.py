"""``attnkit evaluate translation|captioning`` (and the parser of every ``evaluate`` task)."""

from __future__ import annotations

import argparse
import json
import sys

from ..paths import atomic_write_text
from ..pretrained import DEFAULT_CAPTION_MODEL, DEFAULT_TRANSLATION_MODEL
from .align import add_evaluate_alignment_parser
from .common import (
    CLIError,
    _check_engine_flags,
    _checkpoint_errors_as_cli,
    _load_shortlist,
    _model_folder,
    _open_model,
    _output,
)
from .corpus_job import add_processes_flag, is_rank0, launch, start_group, torchrun_world
from .evaluate_induction import add_evaluate_induction_parser
from .explain import add_evaluate_explanations_parser
from .flags import (
    _add_beam_flag,
    _add_device_flags,
    _add_engine_flag,
    _add_json_flag,
    _add_length_penalty_flag,
    _add_limit_flag,
    _add_model_flag,
    _add_output_flag,
    _add_plot_flag,
    _add_shortlist_flag,
    _add_spelling_flag,
    _add_split_flag,
)


def _add_evaluate_flags(parser: argparse.ArgumentParser, unit: str) -> None:
    """The flags every ``attnkit evaluate`` command shares."""
    _add_split_flag(parser, "test")
    _add_limit_flag(parser, f"only the first N {unit} (default: all)")
    _add_beam_flag(parser, 1)
    _add_json_flag(parser)
    _add_output_flag(parser, "also write the JSON report here (default: none)")


def _translate_on_ranks():
    """Under torchrun, once the group is joined (:func:`start_group`): ``translate_sources`` for
    :func:`evaluate_translation` that splits the one-process batches over the ranks and gathers the
    translations on every rank."""
    from functools import partial

    from ..tasks.translation.split_translation import translations_on_ranks
    from ..training import distributed

    return partial(
        translations_on_ranks,
        rank=distributed.rank(),
        world=distributed.world_size(),
        gather=distributed.all_gather_object,
    )


def cmd_evaluate_translation(args) -> int | None:
    if args.processes is not None or torchrun_world() > 1:
        if args.engine == "ctranslate2":
            raise CLIError("--processes and torchrun evaluate with the PyTorch engine: give no --engine ctranslate2")
        if args.processes is not None:
            return launch(args.argv, args.processes)
        try:
            device = start_group(args.device)  # this rank's own GPU, before the models are loaded
            return _evaluate_translation(args, _translate_on_ranks(), rank0=is_rank0(), device=device)
        finally:
            from ..training.distributed import cleanup

            cleanup()
    return _evaluate_translation(args, None, rank0=True)


def _evaluate_translation(args, translate_sources, *, rank0: bool, device: str | None = None) -> None:
    from ..tasks.translation import evaluate_translation
    from ..tasks.translation.translation_quality import read_test_files

    _check_engine_flags(args)
    _output(args.output, "--output")
    _output(args.plot, "--plot")
    if (args.src is None) != (args.ref is None):
        raise CLIError("--src and --ref go together: the source sentences and their reference translations")
    pairs = read_test_files(args.src, args.ref) if args.src is not None else None
    reports = []
    shortlist = _load_shortlist(args.shortlist)  # read once, checked against each model's tokenizer
    if args.engine == "ctranslate2":
        from ..deploy.ct2_engine import evaluate_ct2

        for name in args.model or [None]:
            tr = _open_model(args, None, ref=name).impl
            report = evaluate_ct2(
                tr,
                split=args.split,
                limit=args.limit,
                beam_size=args.beam,
                home=args.home,
                use_vocabulary_map=args.vmap,
                modernize=args.modernize,
            )
            reports.append(_named(report, name))
    for name in [] if args.engine == "ctranslate2" else args.model or [DEFAULT_TRANSLATION_MODEL]:
        m = _model_folder(name, DEFAULT_TRANSLATION_MODEL)
        report = _checkpoint_errors_as_cli(
            evaluate_translation,
            m,
            split=args.split,
            limit=args.limit,
            beam_size=args.beam,
            home=args.home,
            device=args.device if device is None else device,
            dtype=args.precision,
            shortlist=shortlist,
            pairs=pairs,
            normalize_spelling=not args.keep_spelling,
            modernize=args.modernize,
            length_penalty=args.length_penalty,
            translate_sources=translate_sources,
        )
        reports.append(_named(report, name or DEFAULT_TRANSLATION_MODEL))
    if not rank0:  # under torchrun, rank 0 reports
        return
    if args.output:
        atomic_write_text(args.output, json.dumps(reports, indent=2, ensure_ascii=False))
    if args.plot:
        from ..viz.curves import plot_bleu_by_length

        print(f"wrote {plot_bleu_by_length(reports, args.plot)}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        out = reports[0] if len(reports) == 1 else reports
        print(json.dumps(out, ensure_ascii=False, default=str))
        return
    for r in reports:
        on = f"{args.src}" if r["split"] == "files" else f"{r['split']} sentences"
        print(
            f"{r['model']} ({r['model_type']}, {r['src_lang']} → {r['tgt_lang']}): BLEU {r['bleu']:.2f}  "
            f"chrF {r['chrf']:.2f}  on {r['n_sentences']} {on}, {r['sentences_per_s']:.1f} sentences/s "
            f"(beam {r['beam_size']}"
            f"{'' if r.get('length_penalty') is None else ', length penalty ' + format(r['length_penalty'], 'g')}"
            f"{', lexical shortlist' if r.get('shortlist') else ''}"
            f"{', sources in modern spelling' if r.get('modernized') else ''}"
            f"{', input as typed' if r.get('input_spelling') == 'modern' else ''}"
            f"{', CTranslate2 ' + r['quantization'] if r.get('engine') == 'ctranslate2' else ''})"
        )
        print("  source words  " + "  ".join(f"{b['bucket']:>6}" for b in r["by_length"]))
        print("  sentences     " + "  ".join(f"{b['n']:>6}" for b in r["by_length"]))
        print("  BLEU          " + "  ".join(_bucket_bleu(b) for b in r["by_length"]))


def _named(report: dict, name: str | None) -> dict:
    """``report`` with its model named as the user named it (``rnnsearch-es-en``, a folder as typed), not by
    the folder it was loaded from; unchanged when the user named none (the engine's own default)."""
    return report if name is None else {**report, "model": str(name)}


def _bucket_bleu(bucket: dict) -> str:
    """A length bucket's BLEU in the printed table, 6 wide: "–" for a bucket with no sentence (no score)."""
    return f"{'–':>6}" if bucket["bleu"] is None else f"{bucket['bleu']:>6.1f}"


def cmd_evaluate_captioning(args) -> None:
    from ..tasks.captioning import evaluate_captioning

    m = _model_folder(args.model, DEFAULT_CAPTION_MODEL)
    _output(args.output, "--output")
    r = _checkpoint_errors_as_cli(
        evaluate_captioning,
        m,
        split=args.split,
        limit=args.limit,
        beam_size=args.beam,
        home=args.home,
        device=args.device,
        dtype=args.precision,
    )
    r = _named(r, args.model or DEFAULT_CAPTION_MODEL)
    if args.output:
        atomic_write_text(args.output, json.dumps(r, indent=2))
    if args.json:
        print(json.dumps(r, default=str))
        return
    print(
        f"{r['model']} ({r['attention']} attention, {r['score']} score) on {r['n_scenes']} {r['split']} scenes, "
        f"beam {r['beam_size']}:"
    )
    print(
        "  BLEU-1 {bleu1:6.2f}  BLEU-2 {bleu2:6.2f}  BLEU-3 {bleu3:6.2f}  BLEU-4 {bleu4:6.2f}  exact match {exact_match:.3f}".format(
            **r
        )
    )
    d = r["attention_correctness_detail"]["generated"]["model"]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
    print(
        f"  attention correctness (mass inside the named item's box): {fmt(r['attention_correctness'])} "
        f"over {d['n']} generated item words (median {fmt(d.get('quantiles', {}).get('0.5'))}); "
        f"uniform attention {fmt(r['uniform_attention_correctness'])}; "
        f"teacher-forced {fmt(r['teacher_forced_attention_correctness'])}; "
        f"map of the word before {fmt(r['previous_word_attention_correctness'])}"
    )


def add_parser(sub) -> None:
    e = sub.add_parser("evaluate", help="evaluate a model").add_subparsers(dest="task", required=True)
    et = e.add_parser(
        "translation",
        help="BLEU/chrF on a split of the model's corpus (the test split by default) or on your files "
        "(--src, --ref), and BLEU by source length",
    )
    et.add_argument(
        "--model",
        action="append",
        help=f"a model name or folder; repeat to compare models (default: {DEFAULT_TRANSLATION_MODEL})",
    )
    _add_evaluate_flags(et, "sentences")
    et.add_argument(
        "--src", default=None, metavar="FILE", help="source sentences, one a line (with --ref; default: the split)"
    )
    et.add_argument(
        "--ref",
        default=None,
        metavar="FILE",
        help="their reference translations, line by line (with --src; default: none)",
    )
    _add_plot_flag(et, "plot BLEU by source length")
    _add_device_flags(et, int8=True)
    _add_engine_flag(et)
    _add_shortlist_flag(et)
    _add_length_penalty_flag(et, "each model's own, chosen on its validation data, else 0.6")
    _add_spelling_flag(et)
    et.add_argument(
        "--modernize",
        action="store_true",
        help="score a copy of the sources rewritten in today's spelling (attnkit.data.spelling.modernize: "
        "fué → fue, á → a, crió → creó), to see how the model reads what people type (default: off)",
    )
    add_processes_flag(et, "sentences' batches", same="the scores are")
    et.set_defaults(func=cmd_evaluate_translation)

    ec = e.add_parser("captioning", help="BLEU-1..4, exact match and attention correctness on the test scenes")
    _add_model_flag(ec, DEFAULT_CAPTION_MODEL)
    _add_evaluate_flags(ec, "scenes")
    _add_device_flags(ec)
    ec.set_defaults(func=cmd_evaluate_captioning)

    add_evaluate_alignment_parser(e)

    add_evaluate_explanations_parser(e)

    add_evaluate_induction_parser(e)
