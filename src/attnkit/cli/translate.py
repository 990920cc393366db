"""``attnkit translate`` and ``attnkit shortlist``."""

from __future__ import annotations

import sys
import time

from ..checks import VOCABULARY, arg_type, between
from ..data.parallel import decode_lines, read_lines
from ..data.text import check_unicode
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from .common import CLIError, _check_engine_flags, _load_shortlist, _open_model, _output, _shown_name
from .corpus_job import (
    add_corpus_job_flags,
    corpus_job_wanted,
    launch,
)
from .flags import (
    _add_beam_flag,
    _add_device_flags,
    _add_engine_flag,
    _add_html_flag,
    _add_length_penalty_flag,
    _add_model_flag,
    _add_output_flag,
    _add_plot_flag,
    _add_shortlist_flag,
    _add_spelling_flag,
    _add_split_flag,
)
from .translate_lines import _readable, _result_text, _warn_if_english


def cmd_shortlist(args) -> None:
    from ..data.corpus import UnknownCorpusError, open_corpus
    from ..service import ModelKind
    from ..tasks.translation.lexical_shortlist import FILENAME

    model = _open_model(args, DEFAULT_TRANSLATION_MODEL, kind=ModelKind.TRANSLATOR)
    tr = model.impl
    if args.output is None and model.path is None:
        raise CLIError(f"--output: {model.label} is a Hugging Face hub model, with no folder of its own to write to")
    out = _output(args.output, "--output") or model.path / FILENAME
    try:
        corpus = open_corpus(tr.corpus, args.home)
    except UnknownCorpusError as exc:
        raise CLIError(f"the model was trained on corpus {tr.corpus!r}, which is not prepared here: {exc}") from None
    try:
        shortlist = tr.build_shortlist(corpus.pairs(args.split), frequent=args.frequent, per_source=args.per_source)
    except ValueError as exc:  # --frequent / --per-source out of range
        raise CLIError(str(exc)) from None
    try:
        shortlist.save(out)
    except OSError as exc:
        raise CLIError(f"cannot write {out}: {exc.strerror}; choose another place with --output") from None
    print(f"wrote {out} ({len(shortlist.frequent)} frequent pieces, up to {shortlist.table.shape[1]} per source piece)")


def _read_lines(lines, name: str) -> list[tuple[str, str]]:
    """``(where, line)`` of the non-empty lines of :func:`attnkit.data.parallel.read_lines` or ``decode_lines``,
    stripped, ``where`` naming the line (``FILE line 3``); a line that is not UTF-8 or holds a NUL byte is an
    error naming it, before any work."""
    return [(f"{name} line {n}", line.strip()) for n, line in lines if line.strip()]


def _arguments(texts: list[str]) -> list[tuple[str, str]]:
    """``(where, text)`` of the text arguments. An argument that is not valid Unicode (on a POSIX system, bytes
    that are not UTF-8, which Python keeps as lone surrogates) refuses the whole run before any work, as a file
    that is not UTF-8 does: the command line's encoding is wrong, not one sentence."""
    out = []
    for n, text in enumerate(texts, start=1):
        if not text.strip():
            raise CLIError(f"argument {n} is empty: give some text to translate")
        out.append((f"argument {n}", check_unicode(text, f"argument {n}")))
    return out


def cmd_translate(args) -> int:
    _check_engine_flags(args)
    _output(args.plot, "--plot")
    _output(args.html, "--html")
    _output(args.output, "--output")
    if args.format != "text":
        return _translate_markup(args)
    if args.output is not None or args.align_method is not None:
        raise CLIError("--output and --align-method go with --format html, xml, markdown or xliff")
    if args.processes is not None or corpus_job_wanted(args):
        _check_corpus_job(args)
        if args.processes is not None:
            return launch(args.argv, args.processes)
        from .translate_job import translate_corpus_job

        return translate_corpus_job(args)
    inputs = _arguments(args.text)
    if args.file:
        inputs += _read_lines(read_lines(args.file), args.file)
    if not inputs and not sys.stdin.isatty():
        inputs = _read_lines(decode_lines(sys.stdin.buffer, "<stdin>"), "<stdin>")
    if not inputs:
        raise CLIError("nothing to translate: give source-language text as arguments, with --file, or on stdin")
    need_attn = args.show_attention or args.plot is not None
    started = time.perf_counter()
    if args.engine == "ctranslate2":
        if args.html is not None:
            raise CLIError(
                "--html needs the PyTorch engine (the explorer's views replay the model); use `attnkit serve --engine ctranslate2`"
            )
        tr = _open_model(args, None).impl  # no default: an export is named with --model
        sentences = _sentences(tr, inputs)
        loaded = time.perf_counter()
        results = tr.translate(
            sentences,
            beam_size=args.beam,
            return_attention=need_attn,
            truncate=args.truncate,
            use_vocabulary_map=args.vmap,
        )
    else:
        from ..service import ModelKind

        model = _open_model(args, DEFAULT_TRANSLATION_MODEL, kind=ModelKind.TRANSLATOR)
        tr = model.impl
        sentences = _sentences(tr, inputs)
        _warn_if_english(tr, sentences)
        loaded = time.perf_counter()
        results = tr.translate(
            sentences,
            beam_size=args.beam,
            return_attention=need_attn,
            truncate=args.truncate,
            shortlist=_load_shortlist(args.shortlist),
            length_penalty=args.length_penalty,
        )
    if args.report_time:
        _report_time(results, loaded - started, time.perf_counter() - loaded)
    where = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON lines only
    for s, r in zip(sentences, results):
        print(_result_text(s, r, args), end="")
    if args.plot is not None:
        _plot_translation(tr, results, sentences, args.plot, where)
    if args.html is not None:
        from ..explorer import translation_payload, write_explorer_html

        name = _shown_name(model)
        payloads = [
            translation_payload(tr, s, beam=args.beam, heads=True, model=name, result=r)
            for s, r in zip(sentences, results)
        ]
        print(f"wrote {write_explorer_html(args.html, translations=payloads)}", file=where)
    return 1 if len(sentences) < len(inputs) else 0


def _translate_markup(args) -> int:
    """``--format html|xml|markdown|xliff``: one document from ``--file`` or stdin, its tags moved across by the
    model's word alignment (:mod:`attnkit.tasks.translation.markup`), written whole to ``--output`` or stdout."""
    given = {
        "text arguments": args.text,
        "--show-attention": args.show_attention,
        "--json": args.json,
        "--plot": args.plot,
        "--html": args.html,
        "--job-dir or torchrun": corpus_job_wanted(args),
        "--shortlist": args.shortlist,
        "--vmap": getattr(args, "vmap", False),
    }
    for flag, on in given.items():
        if on:
            raise CLIError(f"--format {args.format} translates one document from --file or stdin: give no {flag}")
    from ..tasks.translation.markup import decode_document, translate_document

    if args.processes is not None and not args.file:
        raise CLIError(f"--processes with --format {args.format} splits a --file: give the document with --file")
    if args.file:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CLIError(f"--file: cannot read {args.file}: {exc.strerror or exc}") from None
        name = args.file
    elif not sys.stdin.isatty():
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        raise CLIError(f"nothing to translate: give the {args.format} document with --file or on stdin")
    text = decode_document(data, name)
    if args.processes is not None:
        from .translate_markup_job import translate_markup_split

        result, described = translate_markup_split(args, text)
    else:
        from .translate_markup_job import markup_translator

        tr, aligner = markup_translator(args)
        result = translate_document(
            tr, text, args.format, aligner=aligner, beam_size=args.beam, length_penalty=args.length_penalty
        )
        described = aligner.describe()
    if result.notes:
        print(f"attnkit translate: {name}: repaired the markup: {'; '.join(result.notes)}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(result.text)
        sys.stdout.flush()
        return 0
    from ..paths import atomic_writer

    try:
        with atomic_writer(args.output, "wb") as out:  # whole or not at all; an earlier file is kept on failure
            out.write(result.text.encode("utf-8"))
    except OSError as exc:
        raise CLIError(f"--output: cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output} ({result.blocks} blocks translated, tags moved by {described})", file=sys.stderr)
    return 0


def _check_corpus_job(args) -> None:
    """The flags a split ``translate`` (``--processes``, ``--job-dir``, torchrun) cannot take: it reads
    ``--file`` only and writes the translations (or JSON lines) to stdout, with the PyTorch engine."""
    if args.text or not args.file:
        raise CLIError("--processes, --job-dir and torchrun translate a --file only (no text arguments or stdin)")
    for flag, given in (("--plot", args.plot), ("--html", args.html), ("--report-time", args.report_time)):
        if given:
            raise CLIError(f"{flag} needs every sentence in one process: give no --processes, --job-dir or torchrun")
    if args.engine == "ctranslate2":
        raise CLIError("--processes, --job-dir and torchrun run the PyTorch engine: give no --engine ctranslate2")


def _sentences(tr, inputs: list[tuple[str, str]]) -> list[str]:
    """The texts of the inputs ``tr`` can read (:func:`_readable`); none at all is a :class:`CLIError`."""
    kept = _readable(tr, inputs)
    if not kept:
        raise CLIError(f"nothing to translate: none of the {len(inputs)} inputs has a word the model can read")
    return [text for _, text in kept]


def _report_time(results, load_s: float, translate_s: float) -> None:
    """``--report-time``: the model's loading and the translation's own seconds on stderr (as
    ``onmt_translate -report_time``), so a whole process's start-up (torch's import, reading the
    weights) and its decoding can be told apart."""
    n, pieces = len(results), sum(len(r.tokens) for r in results)
    per_s = (lambda k: f"{k / translate_s:,.1f}") if translate_s > 0 else (lambda k: "inf")
    print(
        f"attnkit: model loaded in {load_s:.3f} s; {n} sentences, {pieces} target pieces translated in "
        f"{translate_s:.3f} s ({per_s(n)} sentences/s, {per_s(pieces)} target pieces/s)",
        file=sys.stderr,
    )


def _plot_translation(tr, results, sentences, path, where) -> None:
    from ..viz import plot_alignment, plot_alignments

    per_head = hasattr(tr, "attention") and results[0].tokens  # the CTranslate2 engine has the alignment only
    first = tr.attention(sentences[0], results[0].tokens) if per_head else None
    if first is not None and first.maps.cross is not None:  # a per-layer, per-head model: the head grid
        from ..viz import plot_transformer_heads

        m = first.maps
        out = plot_transformer_heads(m.enc_self, m.dec_self, m.cross, first.source_pieces, first.target_pieces, path)
        print(f"wrote {out}", file=where)
        return
    with_attn = [r for r in results if r.attention is not None]
    if not with_attn:
        raise CLIError(f"this model ({getattr(tr.model, 'model_type', '?')}) has no attention weights to plot")
    if len(with_attn) == 1:
        r = with_attn[0]
        out = plot_alignment(r.attention, r.source_pieces, r.target_pieces, path, title=r.translation[:80])
    else:
        out = plot_alignments(
            [(r.attention, r.source_pieces, r.target_pieces, r.translation[:60]) for r in with_attn], path
        )
    print(f"wrote {out}", file=where)


def add_parser(sub) -> None:
    """``attnkit translate``'s flags (torch-free: :func:`attnkit.cli.main` also builds it alone, for the CTranslate2 path)."""
    tr = sub.add_parser("translate", help="translate with a model, from the language pair it was trained on")
    tr.add_argument("text", nargs="*", help="sentences in the model's source language (or --file, or stdin)")
    _add_model_flag(tr, DEFAULT_TRANSLATION_MODEL)
    tr.add_argument(
        "--file",
        default=None,
        help="read sentences from this file, one per line; with --format, the document (default: none)",
    )
    tr.add_argument(
        "--format",
        default="text",
        choices=["text", "html", "xml", "markdown", "xliff"],
        help="text: one sentence per line; html, xml, markdown: one document from --file or stdin, each block "
        "translated with its inline tags moved across by the model's word alignment, what is not text kept "
        "as written; xliff: each unit's source so translated into its target (XLIFF 1.2 or 2.x) (default: text)",
    )
    tr.add_argument(
        "--align-method",
        default=None,
        choices=["attention", "shift", "guided"],
        help="with --format: how tags are moved, as `attnkit align --method` reads the model (default: its "
        "guided head when it has one, else attention)",
    )
    _add_output_flag(tr, "with --format: write the translated document here, whole or not at all (default: stdout)")
    _add_beam_flag(tr, 5)
    _add_length_penalty_flag(tr, "the model's own, chosen on its validation data, else 0.6")
    tr.add_argument(
        "--show-attention", action="store_true", help="print the top source pieces of each output piece (default: off)"
    )
    tr.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per translated sentence, a line each: source, translation, tokens, score "
        "(and with --show-attention the pieces and the attention) (default: off)",
    )
    _add_plot_flag(tr, "write the alignment heatmap (or head grid)")
    _add_html_flag(tr, "these translations")
    _add_device_flags(tr, int8=True)
    _add_engine_flag(tr)
    _add_shortlist_flag(tr)
    _add_spelling_flag(tr)
    tr.add_argument(
        "--truncate",
        action="store_true",
        help="cut sentences longer than the model's maximum instead of stopping (default: off)",
    )
    tr.add_argument(
        "--report-time",
        action="store_true",
        help="print the seconds of loading the model and of translating, and sentences/s, on stderr (default: off)",
    )
    add_corpus_job_flags(tr, "lines of --file (with --format: the document's blocks, in a process pool, not torchrun)")
    tr.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar on stderr with --processes, --job-dir or torchrun (default: off)",
    )
    tr.set_defaults(func=cmd_translate)


def add_shortlist_parser(sub) -> None:
    from ..tasks.translation.lexical_shortlist import DEFAULT_FREQUENT, DEFAULT_PER_SOURCE

    sl = sub.add_parser("shortlist", help="build a translation model's lexical shortlist (for translate --shortlist)")
    _add_model_flag(sl, DEFAULT_TRANSLATION_MODEL)
    _add_output_flag(sl, "where to write it (default: shortlist.safetensors in the model's folder)")
    _add_split_flag(sl, "train", "the pairs of the model's own corpus to count")
    sl.add_argument(
        "--frequent",
        type=arg_type(between(0, VOCABULARY.high, integer=True), "frequent"),
        default=DEFAULT_FREQUENT,
        help=f"the most common target pieces always in the list (default: {DEFAULT_FREQUENT})",
    )
    sl.add_argument(
        "--per-source",
        type=arg_type(between(1, VOCABULARY.high, integer=True), "per_source"),
        default=DEFAULT_PER_SOURCE,
        help=f"target pieces per source piece, by Dice association (default: {DEFAULT_PER_SOURCE})",
    )
    _add_device_flags(sl)
    sl.set_defaults(func=cmd_shortlist)
