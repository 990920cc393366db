"""The ``attnkit`` command: data, train, translate, align, caption, evaluate, export, models, serve, demo.

Every subcommand reports bad input as one clear line on stderr (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

from . import __version__
from .checks import NON_NEGATIVE_INT, POSITIVE_INT, Range, arg_type
from .errors import AttnkitError
from .pretrained import DEFAULT_CAPTION_MODEL, DEFAULT_TRANSLATION_MODEL


class CLIError(AttnkitError):
    """A user-facing error found by the command line itself: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors (an unknown flag, ``--beam 0``) are one :class:`CLIError` line, like every
    other bad input, instead of argparse's usage block and ``SystemExit``."""

    def error(self, message: str):
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _output(path: str | Path | None, flag: str, *, folder: bool = False) -> Path | None:
    """Check an output path before any work is done, without creating anything: the nearest folder
    that exists on the way to it must be a writable folder, and the path itself, if it exists, a
    folder (``folder=True``) or a file. A path that cannot be written (a file in the way, no
    permission) is a one-line :class:`CLIError` naming ``flag``, not a traceback after the work."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and p.is_dir() != folder:
        raise CLIError(f"{flag}: {p} is a {'file' if folder else 'folder'}; give a {'folder' if folder else 'file'}")
    existing = (p if folder else p.parent).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CLIError(f"{flag}: cannot create {p}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CLIError(f"{flag}: cannot create {p}: {existing} is not writable")
    return p


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


# ---------------------------------------------------------------- data
def cmd_data_prepare(args) -> None:
    if args.dataset == "bible":
        import time

        from .data.bible import load_pairs, prepare_bible

        t0 = time.perf_counter()
        path = prepare_bible(home=args.home, force=args.force)
        counts = {s: len(load_pairs(s, home=args.home)) for s in ("train", "valid", "test")}
        print(
            f"Bible corpus: {path}  ({', '.join(f'{k} {v}' for k, v in counts.items())} verse pairs; "
            f"{time.perf_counter() - t0:.1f} s)"
        )
    elif args.dataset == "parallel":
        _prepare_parallel(args)
    elif args.dataset == "scenes":
        from .data.scenes import prepare_scenes

        path = prepare_scenes(home=args.home, canvas=args.canvas, force=args.force)
        print(f"Fashion-MNIST scenes: {path}")
    else:  # argparse restricts choices
        raise CLIError(f"unknown dataset {args.dataset!r}")


def _prepare_parallel(args) -> None:
    """``attnkit data prepare parallel NAME ...``: the user's corpus (see :mod:`attnkit.data.corpus`)."""
    from .data.corpus import prepare_parallel

    if not args.name:
        raise CLIError("data prepare parallel: give the corpus a NAME (e.g. `attnkit data prepare parallel de-en ...`)")
    for flag in ("src_lang", "tgt_lang", "train"):
        if getattr(args, flag) is None:
            raise CLIError(f"data prepare parallel: --{flag.replace('_', '-')} is required")
    corpus = prepare_parallel(
        args.name,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        train=args.train,
        valid=args.valid,
        test=args.test,
        vocab_size=args.vocab_size,
        separate_vocab=args.separate_vocab,
        max_words=args.max_words,
        home=args.home,
        force=args.force,
        workers=args.workers,
    )
    m = corpus.meta
    held = f" (valid/test held out of the training files: {', '.join(m['heldout']['from_train'])})" * bool(
        m["heldout"]["from_train"]
    )
    print(
        f"corpus {corpus.name} ({corpus.src_lang} → {corpus.tgt_lang}): {corpus.path}\n"
        f"  pairs: {', '.join(f'{k} {v}' for k, v in m['splits'].items())}{held}\n"
        f"  dropped: "
        + "; ".join(
            f"{k} {d['empty']} empty, {d['too_long']} over {m['max_words']} words" for k, d in m["dropped"].items()
        )
        + f"\n  vocabulary: {m['vocab_size']} pieces{' per side' if m['separate_vocab'] else ' (joint)'}; "
        f"{m['seconds']:.1f} s\n  train with: attnkit train translation --data {corpus.name}"
    )
    if m["test_sources_in_train"]:
        print(
            f"attnkit: warning: {m['test_sources_in_train']} training pairs have a source sentence that is also "
            "in the test set: test scores will be flattered",
            file=sys.stderr,
        )


# ---------------------------------------------------------------- translation
def cmd_train_translation(args) -> None:
    import os

    from .tasks.translation import TranslationConfig, train_translation

    cfg = TranslationConfig.from_args(args)
    _output(cfg.run.out_dir, "--out-dir", folder=True)
    summary = train_translation(cfg, resume=args.resume, home=args.home)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one summary
        _print_json(summary)


def _add_device_flags(parser: argparse.ArgumentParser, *, int8: bool = False) -> None:
    """``--device`` and ``--precision`` for a command that runs a model (see :mod:`attnkit.device`);
    ``int8``: the command runs translators, which also take ``--precision int8``."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where to run: auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "bf16", "fp16", *(["int8"] if int8 else []), "auto"],
        help="weights and arithmetic: fp32, bf16, fp16, "
        + ("int8 (dynamic quantization, CPU), " if int8 else "")
        + "or auto (bf16 where it is measured faster) (default: fp32)",
    )


def _add_engine_flag(parser: argparse.ArgumentParser) -> None:
    """``--engine``: attnkit's own PyTorch decoding, or a CTranslate2 export (:mod:`attnkit.deploy`)."""
    parser.add_argument(
        "--engine",
        default="pytorch",
        choices=["pytorch", "ctranslate2"],
        help="pytorch: attnkit's own decoding; ctranslate2: a model written by `attnkit export MODEL OUT "
        "--format ctranslate2` (pip install 'attnkit[deploy]'; no torch import) (default: pytorch)",
    )
    parser.add_argument(
        "--vmap",
        action="store_true",
        help="ctranslate2: decode over the export's vocabulary map, the lexical shortlist given to "
        "`attnkit export --shortlist` (default: off)",
    )


def _check_engine_flags(args) -> None:
    """The flags that belong to one engine only, refused on the other with the reason."""
    if args.engine == "ctranslate2":
        if args.precision != "fp32":
            raise CLIError(
                "--precision is the PyTorch engine's: a CTranslate2 model computes in the type it was "
                "exported with (`attnkit export --quantization`)"
            )
        if getattr(args, "shortlist", None):
            raise CLIError(
                "--shortlist is the PyTorch engine's: give the shortlist to `attnkit export --shortlist` "
                "and decode with --vmap"
            )
    elif getattr(args, "vmap", False):
        raise CLIError("--vmap needs --engine ctranslate2 (the PyTorch engine takes --shortlist FILE)")


def _load_ct2(model: str | None, device: str):
    """A CTranslate2 export (a folder, or a name under ``$ATTNKIT_HOME/models``) as a
    :class:`attnkit.deploy.ct2_engine.CT2Translator`."""
    from .deploy.ct2_engine import CT2Translator
    from .paths import attnkit_home

    if not model:
        raise CLIError(
            "--engine ctranslate2 needs --model FOLDER, written by `attnkit export MODEL OUT --format ctranslate2`"
        )
    path = Path(model)
    if not path.is_dir():
        from .pretrained import PRETRAINED_DIR

        for folder in (attnkit_home() / "models" / model, PRETRAINED_DIR / model):
            if "/" not in model and folder.is_dir():
                path = folder
                break
    return CT2Translator.load(path, device=device)


def _add_evaluate_flags(parser: argparse.ArgumentParser, unit: str) -> None:
    """The flags every ``attnkit evaluate`` command shares."""
    parser.add_argument(
        "--split", default="test", choices=["train", "valid", "test"], help="which split (default: test)"
    )
    parser.add_argument(
        "--limit", type=arg_type(POSITIVE_INT, "limit"), default=None, help=f"only the first N {unit} (default: all)"
    )
    parser.add_argument(
        "--beam", type=arg_type(POSITIVE_INT, "beam"), default=1, help="beam size, 1 = greedy (default: 1)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: off: a table)")
    parser.add_argument("--output", default=None, help="also write the JSON report here (default: none)")


def _model_path(model: str | None, default: str) -> Path:
    """The folder a ``--model`` argument means (a folder, a shipped or a local model name);
    an unknown one is a CLIError that lists the known names."""
    from .pretrained import UnknownModelError, resolve_model

    try:
        return resolve_model(model or default)
    except UnknownModelError as exc:
        raise CLIError(str(exc)) from None


def _load_translator(args, path: Path | None = None):
    """The ``--model`` translator (``path``: the folder it was already resolved to)."""
    from .tasks.translation import Translator

    path = path or _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
    return Translator.load(path, device=args.device, dtype=args.precision)


def _load_shortlist(path: str | None):
    """The ``--shortlist`` file (None without one); a missing or corrupt one is a ShortlistError."""
    if path is None:
        return None
    from .tasks.translation import LexicalShortlist

    return LexicalShortlist.load(path)


def cmd_shortlist(args) -> None:
    from .data.corpus import UnknownCorpusError, open_corpus
    from .tasks.translation.lexical_shortlist import FILENAME

    path = _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
    tr = _load_translator(args, path)
    out = _output(args.output, "--output") or path / FILENAME
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


def _looks_english(text: str) -> bool:
    """A cheap guard: share of very common English function words among the words."""
    words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
    if len(words) < 4:
        return False
    common = {
        "the",
        "and",
        "of",
        "to",
        "he",
        "his",
        "they",
        "that",
        "was",
        "is",
        "with",
        "for",
        "you",
        "i",
        "it",
        "will",
        "which",
        "who",
        "him",
        "them",
        "have",
        "be",
        "not",
        "this",
        "are",
        "shall",
    }
    return sum(w in common for w in words) / len(words) > 0.3


def _read_lines(stream) -> list[str]:
    """Non-empty stripped lines of a file or stdin (here rather than tasks.translation.read_lines,
    which would import torch on the CTranslate2 path)."""
    return [line.strip() for line in stream if line.strip()]


def cmd_translate(args) -> None:
    _check_engine_flags(args)
    _output(args.plot, "--plot")
    _output(args.html, "--html")
    sentences = list(args.text)
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as fh:
                sentences += _read_lines(fh)
        except OSError as exc:
            raise CLIError(f"cannot read {args.file}: {exc.strerror}") from None
    if not sentences and not sys.stdin.isatty():
        sentences = _read_lines(sys.stdin)
    if not sentences or not any(s.strip() for s in sentences):
        raise CLIError("nothing to translate: give source-language text as arguments, with --file, or on stdin")
    for s in sentences:
        if not s.strip():
            raise CLIError("one of the inputs is empty: give some text to translate")
    need_attn = args.show_attention or args.plot is not None
    if args.engine == "ctranslate2":
        if args.html is not None:
            raise CLIError(
                "--html needs the PyTorch engine (the explorer's views replay the model); use `attnkit serve --engine ctranslate2`"
            )
        tr = _load_ct2(args.model, args.device)
        results = tr.translate(
            sentences,
            beam_size=args.beam,
            return_attention=need_attn,
            truncate=args.truncate,
            use_vocabulary_map=args.vmap,
        )
    else:
        model_dir = _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
        tr = _load_translator(args, model_dir)
        src_lang, tgt_lang = tr.src_lang, tr.tgt_lang
        for s in sentences:
            if src_lang != "en" and tgt_lang == "en" and _looks_english(s):
                print(
                    f"attnkit: warning: this looks like English, but the model translates {tr.language_pair}: "
                    f"{s[:60]!r}",
                    file=sys.stderr,
                )
        results = tr.translate(
            sentences,
            beam_size=args.beam,
            return_attention=need_attn,
            truncate=args.truncate,
            shortlist=_load_shortlist(args.shortlist),
        )
    for r in results:
        print(r.translation)
        if args.show_attention and r.attention is not None:
            from .viz import format_top_alignments

            print(format_top_alignments(r.attention, r.source_pieces, r.target_pieces, k=3))
    if args.plot is not None:
        _plot_translation(tr, results, sentences, args.plot)
    if args.html is not None:
        from .explorer import translation_payload, write_explorer_html

        name = model_dir.name
        payloads = [
            translation_payload(tr, s, beam=args.beam, heads=True, model=name, result=r)
            for s, r in zip(sentences, results)
        ]
        print(f"wrote {write_explorer_html(args.html, translations=payloads)}")


def _plot_translation(tr, results, sentences, path) -> None:
    from .viz import plot_alignment, plot_alignments

    per_head = hasattr(tr, "attention") and results[0].tokens  # the CTranslate2 engine has the alignment only
    first = tr.attention(sentences[0], results[0].tokens) if per_head else None
    if first is not None and first.maps.cross is not None:  # a per-layer, per-head model: the head grid
        from .viz import plot_transformer_heads

        m = first.maps
        out = plot_transformer_heads(m.enc_self, m.dec_self, m.cross, first.source_pieces, first.target_pieces, path)
        print(f"wrote {out}")
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
    print(f"wrote {out}")


def cmd_evaluate_translation(args) -> None:
    from .tasks.translation import evaluate_translation
    from .tasks.translation.evaluate import read_test_files
    from .training.checkpoint import CheckpointError

    _check_engine_flags(args)
    _output(args.output, "--output")
    _output(args.plot, "--plot")
    if (args.src is None) != (args.ref is None):
        raise CLIError("--src and --ref go together: the source sentences and their reference translations")
    pairs = read_test_files(args.src, args.ref) if args.src is not None else None
    reports = []
    shortlist = _load_shortlist(args.shortlist)  # read once, checked against each model's tokenizer
    if args.engine == "ctranslate2":
        from .deploy.ct2_engine import evaluate_ct2

        for name in args.model or [None]:
            tr = _load_ct2(name, args.device)
            reports.append(
                evaluate_ct2(
                    tr,
                    split=args.split,
                    limit=args.limit,
                    beam_size=args.beam,
                    home=args.home,
                    use_vocabulary_map=args.vmap,
                )
            )
    for name in [] if args.engine == "ctranslate2" else args.model or [DEFAULT_TRANSLATION_MODEL]:
        m = _model_path(name, DEFAULT_TRANSLATION_MODEL)
        try:
            reports.append(
                evaluate_translation(
                    m,
                    split=args.split,
                    limit=args.limit,
                    beam_size=args.beam,
                    home=args.home,
                    device=args.device,
                    dtype=args.precision,
                    shortlist=shortlist,
                    pairs=pairs,
                )
            )
        except CheckpointError as exc:
            raise CLIError(f"cannot load model: {exc}") from None
    if args.output:
        Path(args.output).write_text(json.dumps(reports, indent=2, ensure_ascii=False))
    if args.plot:
        from .viz.curves import plot_bleu_by_length

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
            f"{', lexical shortlist' if r.get('shortlist') else ''}"
            f"{', CTranslate2 ' + r['quantization'] if r.get('engine') == 'ctranslate2' else ''})"
        )
        print("  source words  " + "  ".join(f"{b['bucket']:>6}" for b in r["by_length"]))
        print("  sentences     " + "  ".join(f"{b['n']:>6}" for b in r["by_length"]))
        print("  BLEU          " + "  ".join(f"{b['bleu']:>6.1f}" for b in r["by_length"]))


# ---------------------------------------------------------------- attribution
def _progress_printer(label: str):
    """A progress callback that redraws one line on a terminal's stderr (nothing when stderr is a file)."""
    if not sys.stderr.isatty():
        return None
    return lambda f: print(f"\r{label}: {100 * f:3.0f} %", end="", file=sys.stderr, flush=True)


def cmd_explain(args) -> None:
    from .attribution import canonical_method, explain, explain_caption
    from .attribution.report import format_attribution, plot_attribution

    method = canonical_method(args.method)
    _output(args.plot, "--plot")
    path = _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
    progress = _progress_printer(method)
    options = dict(method=method, steps=args.steps, progress=progress)
    from .pretrained import model_task

    if model_task(path) == "translation":
        from .tasks.translation import Translator

        tr = Translator.load(path, device=args.device, dtype=args.precision)
        att = explain(tr, args.input, target=args.target, beam=args.beam, layer=args.layer, head=args.head, **options)
    else:
        from .tasks.captioning import Captioner, load_image_file

        if args.layer is not None or args.head is not None:
            raise CLIError("--layer and --head are for Transformer translators; a captioner has one attention")
        cm = Captioner.load(path, device=args.device, dtype=args.precision)
        try:
            image = load_image_file(args.input, cm.canvas)
        except (FileNotFoundError, ValueError) as exc:
            raise CLIError(f"{exc} (a captioner explains an image file)") from None
        att = explain_caption(cm, image, caption=args.target, beam=args.beam, **options)
    if progress is not None:
        print("\r", end="", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": path.name, **att.to_dict()}, ensure_ascii=False))
    else:
        print(format_attribution(att, k=args.top, pieces=args.pieces))
    if args.plot is not None:
        print(
            f"wrote {plot_attribution(att, args.plot, pieces=args.pieces)}",
            file=sys.stderr if args.json else sys.stdout,
        )


def cmd_evaluate_explanations(args) -> None:
    from .attribution.evaluate import evaluate_caption_explanations, evaluate_explanations, format_report

    path = _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
    options = dict(methods=args.method, limit=args.limit, sanity_verses=args.sanity_verses, device=args.device)
    if (path / "tokenizer.model").is_file():
        report = evaluate_explanations(path, dtype=args.precision, **options)
    else:
        options["limit"] = args.limit or 100
        report = evaluate_caption_explanations(path, dtype=args.precision, home=args.home, **options)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(json.dumps(report, ensure_ascii=False) if args.json else format_report(report))


# ---------------------------------------------------------------- captioning
def cmd_train_captioning(args) -> None:
    from .tasks.captioning import CaptioningConfig, train_captioning

    cfg = CaptioningConfig.from_args(args)
    for opt in ("encoder_from", "init_from"):
        if getattr(cfg, opt) and not Path(getattr(cfg, opt)).exists():
            raise CLIError(f"--{opt.replace('_', '-')}: folder {getattr(cfg, opt)} does not exist")
    _output(cfg.run.out_dir, "--out-dir", folder=True)
    summary = train_captioning(cfg, resume=args.resume, home=args.home)
    _print_json(summary)


def cmd_train_classifier(args) -> None:
    from .tasks.classification import ClassifierTaskConfig, train_classifier

    cfg = ClassifierTaskConfig.from_args(args)
    _output(cfg.run.out_dir, "--out-dir", folder=True)
    _print_json(train_classifier(cfg, resume=args.resume))


def _load_captioner(args, path: Path | None = None):
    """The ``--model`` captioner (``path``: the folder it was already resolved to)."""
    from .tasks.captioning import Captioner

    path = path or _model_path(args.model, DEFAULT_CAPTION_MODEL)
    return Captioner.load(path, device=args.device, dtype=args.precision)


def cmd_caption(args) -> None:
    import torch

    from .tasks.captioning import load_image_file

    _output(args.plot, "--plot")
    _output(args.html, "--html")
    model_dir = _model_path(args.model, DEFAULT_CAPTION_MODEL)
    cm = _load_captioner(args, model_dir)
    images = []
    for f in args.images:
        try:
            images.append(load_image_file(f, cm.canvas))
        except (FileNotFoundError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    batch = torch.stack(images)
    greedy = cm.caption(batch, beam_size=1)
    beam = cm.caption(batch, beam_size=args.beam) if args.beam > 1 else greedy
    for f, g, b in zip(args.images, greedy, beam):
        print(f"{f}")
        print(f"  greedy:    {g.caption}")
        if args.beam > 1:
            print(f"  beam {args.beam:<4} {b.caption}")
    if args.plot is not None:
        if len(args.images) == 1:
            out = cm.plot(batch[0], beam[0], args.plot)
            print(f"wrote {out}")
        else:
            stem = Path(args.plot)
            for k, (f, r) in enumerate(zip(args.images, beam)):
                path = stem.with_name(f"{stem.stem}-{k + 1}{stem.suffix or '.png'}")
                title = f"{Path(f).name}: {r.caption}"
                print(f"wrote {cm.plot(batch[k], r, path, title=title)}")
    if args.html is not None:
        from .explorer import caption_payload, write_explorer_html

        name = model_dir.name
        payloads = [caption_payload(cm, img, model=name, beam=args.beam) for img in batch]
        print(f"wrote {write_explorer_html(args.html, captions=payloads)}")


def cmd_evaluate_captioning(args) -> None:
    from .tasks.captioning import evaluate_captioning
    from .training.checkpoint import CheckpointError

    m = _model_path(args.model, DEFAULT_CAPTION_MODEL)
    _output(args.output, "--output")
    try:
        r = evaluate_captioning(
            m,
            split=args.split,
            limit=args.limit,
            beam_size=args.beam,
            home=args.home,
            device=args.device,
            dtype=args.precision,
        )
    except CheckpointError as exc:
        raise CLIError(f"cannot load model: {exc}") from None
    if args.output:
        Path(args.output).write_text(json.dumps(r, indent=2))
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


# ---------------------------------------------------------------- export
def cmd_export_ctranslate2(args) -> None:
    from .deploy.ct2_engine import ct2_available
    from .deploy.ct2_export import export_ctranslate2

    if args.fp32 or args.average_last is not None:
        raise CLIError("--fp32 and --average-last are for --format attnkit; export the averaged checkpoint first")
    reason = ct2_available()
    if reason:
        raise CLIError(reason)
    _output(args.out, "out", folder=True)
    out = export_ctranslate2(
        _model_path(args.checkpoint, DEFAULT_TRANSLATION_MODEL),
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


def cmd_export(args) -> None:
    if args.format == "ctranslate2":
        return cmd_export_ctranslate2(args)
    import torch

    from .training.checkpoint import CheckpointError, export_checkpoint

    _output(args.out, "out", folder=True)
    try:
        done = export_checkpoint(
            args.checkpoint, args.out, average_last=args.average_last, dtype=None if args.fp32 else torch.float16
        )
    except CheckpointError as exc:
        given = f"--average-last {args.average_last}" if args.average_last is not None else "cannot load checkpoint"
        raise CLIError(f"{given}: {exc}") from None
    what = f"mean of {', '.join(p.name for p in done.sources)}" if len(done.sources) > 1 else str(done.sources[0])
    print(
        f"wrote {done.path} from {what} ({done.size_bytes / 1e6:.1f} MB, "
        f"{'fp32' if args.fp32 else 'fp16'} weights, no trainer state)"
    )


# ---------------------------------------------------------------- serve
def cmd_serve(args) -> None:
    import uvicorn

    from .explorer.app import create_app, load_models

    _check_engine_flags(args)
    if args.vmap:
        raise CLIError("--vmap is for translate and evaluate; the explorer decodes over the whole vocabulary")
    models = load_models(args.model, device=args.device, dtype=args.precision, engine=args.engine)
    loaded = ", ".join(f"{n} ({i['task']})" for n, i in models.info.items())
    print(f"attnkit explorer: {loaded}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: --host {args.host} lets other machines reach this server, which has no authentication",
            file=sys.stderr,
        )
    print(f"open http://{args.host}:{args.port}/  (API docs at /docs; Ctrl-C stops)", flush=True)
    uvicorn.run(create_app(models, home=args.home), host=args.host, port=args.port, log_level="warning")


# ---------------------------------------------------------------- models
def cmd_models(args) -> None:
    from .pretrained import known_models

    infos = known_models(args.home)
    if args.json:
        _print_json([m.to_dict() for m in infos])
        return
    print(f"{'name':<22} {'source':<8} {'task':<12} {'kind':<12} {'pair':<14} {'size':>8}  test score")
    for m in infos:
        sc = m.scores
        beam5 = f", {sc['test_beam5_bleu']:.2f} beam 5" if "test_beam5_bleu" in sc else ""
        score = (
            f"BLEU {sc['test_bleu']:.2f} {sc.get('decoding', '')}{beam5}"
            if "test_bleu" in sc
            else f"BLEU-4 {sc['test_bleu4']:.2f}, attention correctness {sc['test_attention_correctness']:.3f}"
            if "test_bleu4" in sc
            else "not measured"
        )
        pair = f"{m.src_lang}→{m.tgt_lang} {m.corpus}" if m.task == "translation" else "-"
        print(
            f"{m.name:<22} {m.source:<8} {m.task:<12} {m.model_type:<12} {pair:<14} {m.size_bytes / 1e6:>6.1f}MB  {score}"
        )


# ---------------------------------------------------------------- demo
def cmd_demo(args) -> None:
    from .demo import run_demo

    run_demo(home=args.home, out_dir=_output(args.out, "--out", folder=True), device=args.device, dtype=args.precision)


# ---------------------------------------------------------------- parser
class _VersionAction(argparse.Action):
    """``--version``: attnkit's version, torch's, and the device ``--device auto`` would use."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from .device import describe

        print(f"attnkit {__version__} ({describe()})")
        parser.exit()


def _add_train_flags(parser: argparse.ArgumentParser, func) -> None:
    """``--resume`` and ``--no-progress``, which every ``attnkit train`` task takes, and the task's command."""
    parser.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint in --out-dir (default: off)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: off)")
    parser.set_defaults(func=func)


def _add_model_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """``--model``: a shipped or local model name, or a checkpoint folder."""
    parser.add_argument("--model", default=None, help=f"a model name (`attnkit models`) or folder (default: {default})")


def _add_shortlist_flag(parser: argparse.ArgumentParser) -> None:
    """``--shortlist FILE`` for the commands that translate."""
    parser.add_argument(
        "--shortlist",
        default=None,
        metavar="FILE",
        help="search only each batch's lexical shortlist "
        "of the vocabulary (faster), from `attnkit shortlist` (default: none: the whole vocabulary)",
    )


def _add_translate_parser(sub) -> None:
    """``attnkit translate``'s flags (torch-free: :func:`main` also builds it alone, for the CTranslate2 path)."""
    tr = sub.add_parser("translate", help="translate with a model, from the language pair it was trained on")
    tr.add_argument("text", nargs="*", help="sentences in the model's source language (or --file, or stdin)")
    _add_model_flag(tr, DEFAULT_TRANSLATION_MODEL)
    tr.add_argument("--file", default=None, help="read sentences from this file, one per line (default: none)")
    tr.add_argument("--beam", type=arg_type(POSITIVE_INT, "beam"), default=5, help="beam size, 1 = greedy (default: 5)")
    tr.add_argument(
        "--show-attention", action="store_true", help="print the top source pieces of each output piece (default: off)"
    )
    tr.add_argument(
        "--plot", default=None, help="write the alignment heatmap (or head grid) to this PNG (default: none)"
    )
    tr.add_argument(
        "--html",
        default=None,
        help="write the explorer's views of these translations to this "
        "self-contained HTML file (opens offline) (default: none)",
    )
    _add_device_flags(tr, int8=True)
    _add_engine_flag(tr)
    _add_shortlist_flag(tr)
    tr.add_argument(
        "--truncate",
        action="store_true",
        help="cut sentences longer than the model's maximum instead of stopping (default: off)",
    )
    tr.set_defaults(func=cmd_translate)


def build_parser() -> argparse.ArgumentParser:
    from .cli_alignment import add_align_parser, add_data_links_parser, add_evaluate_alignment_parser
    from .tasks.translation.lexical_shortlist import DEFAULT_FREQUENT, DEFAULT_PER_SOURCE

    p = _Parser(prog="attnkit", description="Attention mechanisms for PyTorch, and the models built from them.")
    p.add_argument(
        "--version", action=_VersionAction, help="print the attnkit and torch versions and the device auto picks"
    )
    p.add_argument("--home", default=None, help="data and cache folder (default $ATTNKIT_HOME or ~/.cache/attnkit)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("data", help="prepare the corpora").add_subparsers(dest="action", required=True)
    add_data_links_parser(d)
    dp = d.add_parser(
        "prepare",
        help="build and cache a dataset",
        description="bible and scenes: the built-in corpora; parallel NAME: your own parallel corpus "
        "(aligned text files or a TSV, .gz accepted), prepared under $ATTNKIT_HOME/corpora/NAME for "
        "`attnkit train translation --data NAME`",
    )
    dp.add_argument("dataset", choices=["bible", "scenes", "parallel"])
    dp.add_argument("name", nargs="?", default=None, help="parallel: the corpus's name, e.g. de-en")
    dp.add_argument(
        "--src-lang", default=None, help="parallel: source language code, e.g. de (required; default: none)"
    )
    dp.add_argument(
        "--tgt-lang", default=None, help="parallel: target language code, e.g. en (required; default: none)"
    )
    for split, what in (
        ("train", "required; default: none"),
        ("valid", "default: held out of --train"),
        ("test", "default: held out of --train"),
    ):
        dp.add_argument(
            f"--{split}",
            nargs="+",
            metavar="FILE",
            default=None,
            help=f"parallel: {split} data, SRC TGT (aligned, one sentence a line) or PAIRS.tsv ({what})",
        )
    dp.add_argument(
        "--vocab-size",
        type=arg_type(Range(300, integer=True), "vocab-size"),
        default=8000,
        help="parallel: sentencepiece pieces (default: 8000)",
    )
    dp.add_argument(
        "--separate-vocab",
        action="store_true",
        help="parallel: one vocabulary per language instead of a joint one (default: off: joint)",
    )
    dp.add_argument(
        "--max-words",
        type=arg_type(POSITIVE_INT, "max-words"),
        default=250,
        help="parallel: drop pairs with a side over this many words (default: 250)",
    )
    dp.add_argument(
        "--workers",
        type=arg_type(POSITIVE_INT, "workers"),
        default=None,
        help="parallel: tokenising processes (default: one per core)",
    )
    dp.add_argument("--force", action="store_true", help="rebuild even if cached (default: off)")
    dp.add_argument(
        "--canvas",
        type=arg_type(POSITIVE_INT, "canvas"),
        default=64,
        help="scenes: canvas size in pixels (default: 64)",
    )
    dp.set_defaults(func=cmd_data_prepare)

    t = sub.add_parser("train", help="train a model").add_subparsers(dest="task", required=True)
    tt = t.add_parser(
        "translation",
        help="a translation model on the Bible (Spanish→English) or on your corpus (--data NAME)",
        description="Train a translation model on --data (bible, or a corpus prepared with `attnkit data "
        "prepare parallel`). Model options apply to the model named by --model.",
    )
    from .config import add_config_arguments
    from .tasks.translation import TRANSLATION_MODELS, TranslationConfig, model_config_class

    add_config_arguments(tt, TranslationConfig, *dict.fromkeys(model_config_class(m) for m in TRANSLATION_MODELS))
    tt.set_defaults(model="rnnsearch")
    _add_train_flags(tt, cmd_train_translation)

    tc = t.add_parser(
        "captioning", help="Show, Attend and Tell on Fashion-MNIST scenes, or on photos (--captions, --images)"
    )
    from .tasks.captioning import CaptioningConfig
    from .tasks.classification import ClassifierTaskConfig

    add_config_arguments(tc, CaptioningConfig)
    _add_train_flags(tc, cmd_train_captioning)

    tk = t.add_parser("classifier", help="Fashion-MNIST classifier (its conv encoder can start a captioner)")
    add_config_arguments(tk, ClassifierTaskConfig)
    _add_train_flags(tk, cmd_train_classifier)

    _add_translate_parser(sub)

    add_align_parser(sub, _add_device_flags)

    sl = sub.add_parser("shortlist", help="build a translation model's lexical shortlist (for translate --shortlist)")
    _add_model_flag(sl, DEFAULT_TRANSLATION_MODEL)
    sl.add_argument(
        "--output", default=None, help="where to write it (default: shortlist.safetensors in the model's folder)"
    )
    sl.add_argument(
        "--split",
        default="train",
        choices=["train", "valid", "test"],
        help="the pairs of the model's own corpus to count (default: train)",
    )
    sl.add_argument(
        "--frequent",
        type=arg_type(NON_NEGATIVE_INT, "frequent"),
        default=DEFAULT_FREQUENT,
        help=f"the most common target pieces always in the list (default: {DEFAULT_FREQUENT})",
    )
    sl.add_argument(
        "--per-source",
        type=arg_type(POSITIVE_INT, "per_source"),
        default=DEFAULT_PER_SOURCE,
        help=f"target pieces per source piece, by Dice association (default: {DEFAULT_PER_SOURCE})",
    )
    _add_device_flags(sl)
    sl.set_defaults(func=cmd_shortlist)

    ca = sub.add_parser("caption", help="caption images with a Show, Attend and Tell model")
    ca.add_argument(
        "images", nargs="+", help="image files (any size/colour mode; converted to the model's grayscale canvas)"
    )
    _add_model_flag(ca, DEFAULT_CAPTION_MODEL)
    ca.add_argument(
        "--beam",
        type=arg_type(POSITIVE_INT, "beam"),
        default=3,
        help="beam size for the second caption, 1 = greedy only (default: 3)",
    )
    ca.add_argument(
        "--plot", default=None, help="write the per-word attention overlay grid to this PNG (default: none)"
    )
    ca.add_argument(
        "--html",
        default=None,
        help="write the explorer's views of these captions to this "
        "self-contained HTML file (opens offline) (default: none)",
    )
    _add_device_flags(ca)
    ca.set_defaults(func=cmd_caption)

    xp = sub.add_parser(
        "explain",
        help="which source words (or image cells) each output word used, by an attribution method",
        description="Attribute every output word of a translation (or caption) to the source words (or image "
        "grid cells) under forced decoding: raw attention, rollout, attention_norm, value_zeroing, alti_plus, "
        "saliency, input_x_gradient, integrated_gradients (see attnkit.attribution).",
    )
    xp.add_argument("input", help="Spanish text (translation models) or an image file (captioners)")
    _add_model_flag(xp, DEFAULT_TRANSLATION_MODEL)
    xp.add_argument("--method", default="attention", help="the attribution method (default: attention)")
    xp.add_argument(
        "--target", default=None, help="the English (or caption) to force (default: the model's own output)"
    )
    xp.add_argument(
        "--beam",
        type=arg_type(POSITIVE_INT, "beam"),
        default=5,
        help="beam size of the model's own output (default: 5)",
    )
    xp.add_argument(
        "--layer",
        type=arg_type(POSITIVE_INT, "layer"),
        default=None,
        help="cross-attention layer, 1-based (default: the last)",
    )
    xp.add_argument(
        "--head",
        type=arg_type(POSITIVE_INT, "head"),
        default=None,
        help="one head, 1-based (default: the mean of the heads)",
    )
    xp.add_argument(
        "--steps",
        type=arg_type(POSITIVE_INT, "steps"),
        default=None,
        help="integrated gradients: quadrature points (default: 32, refined per piece until complete within 1 %%)",
    )
    xp.add_argument(
        "--top", type=arg_type(POSITIVE_INT, "top"), default=3, help="sources shown per target word (default: 3)"
    )
    xp.add_argument("--pieces", action="store_true", help="subword pieces instead of whole words (default: off)")
    xp.add_argument("--json", action="store_true", help="print one JSON object (default: off: a table)")
    xp.add_argument("--plot", default=None, help="write a heatmap (or caption overlays) to this PNG (default: none)")
    _add_device_flags(xp)
    xp.set_defaults(func=cmd_explain)

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
    et.add_argument("--plot", default=None, help="plot BLEU by source length to this PNG (default: none)")
    _add_device_flags(et, int8=True)
    _add_engine_flag(et)
    _add_shortlist_flag(et)
    et.set_defaults(func=cmd_evaluate_translation)

    ec = e.add_parser("captioning", help="BLEU-1..4, exact match and attention correctness on the test scenes")
    _add_model_flag(ec, DEFAULT_CAPTION_MODEL)
    _add_evaluate_flags(ec, "scenes")
    _add_device_flags(ec)
    ec.set_defaults(func=cmd_evaluate_captioning)

    add_evaluate_alignment_parser(e, _add_device_flags)

    ee = e.add_parser(
        "explanations",
        help="every attribution method of a translator: AER, deletion area, sanity (randomised model), ms per verse",
    )
    ee.add_argument(
        "--model",
        default=None,
        help=f"a model name (`attnkit models`) or folder (default: {DEFAULT_TRANSLATION_MODEL})",
    )
    ee.add_argument(
        "--method", action="append", default=None, help="score only this method; repeat for more (default: all)"
    )
    ee.add_argument(
        "--limit",
        type=arg_type(POSITIVE_INT, "limit"),
        default=None,
        help="only the first N of the 100 scored gold verses (captioners: test scenes; default: all verses, 100 scenes)",
    )
    ee.add_argument(
        "--sanity-verses",
        type=arg_type(POSITIVE_INT, "sanity_verses"),
        default=3,
        help="verses for the randomisation check, the first of those scored (default: 3)",
    )
    ee.add_argument("--json", action="store_true", help="print one JSON object (default: off: a table)")
    ee.add_argument("--output", default=None, help="also write the JSON report here (default: none)")
    _add_device_flags(ee)
    ee.set_defaults(func=cmd_evaluate_explanations)

    ex = sub.add_parser("export", help="write a small (fp16) copy of a checkpoint for shipping")
    ex.add_argument(
        "checkpoint",
        help="checkpoint folder, e.g. runs/rnnsearch/best; with --average-last, the run folder, e.g. runs/transformer",
    )
    ex.add_argument("out", help="destination folder, e.g. models/rnnsearch-es-en")
    ex.add_argument("--fp32", action="store_true", help="keep float32 weights (default: off: fp16)")
    ex.add_argument(
        "--average-last",
        dest="average_last",
        type=arg_type(POSITIVE_INT, "average_last"),
        default=None,
        metavar="K",
        help="export the mean weights of the last K step checkpoints in the run folder (default: none: one checkpoint)",
    )
    ex.add_argument(
        "--format",
        default="attnkit",
        choices=["attnkit", "ctranslate2"],
        help="attnkit: a checkpoint folder; ctranslate2: a CTranslate2 model of a Transformer translator, with its "
        "tokenizer and attnkit.json, for --engine ctranslate2 (pip install 'attnkit[deploy]') (default: attnkit)",
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
    ex.add_argument("--force", action="store_true", help="ctranslate2: replace a non-empty OUT (default: off)")
    ex.set_defaults(func=cmd_export)

    sv = sub.add_parser("serve", help="the attention explorer: a local web page and JSON API over the models")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; anything but 127.0.0.1 exposes the "
        "server to the network and must be given explicitly (default: 127.0.0.1)",
    )
    sv.add_argument(
        "--port", type=arg_type(Range(0, high=65536, integer=True), "port"), default=8000, help="port (default: 8000)"
    )
    sv.add_argument(
        "--model",
        action="extend",
        nargs="+",
        default=None,
        metavar="MODEL",
        help="model names or folders to load (--model a b, or --model a --model b) (default: every shipped model)",
    )
    _add_device_flags(sv, int8=True)
    _add_engine_flag(sv)
    sv.set_defaults(func=cmd_serve)

    ms = sub.add_parser("models", help="list the shipped and locally trained models ($ATTNKIT_HOME/models)")
    ms.add_argument("--json", action="store_true", help="print a JSON list (default: a table)")
    ms.set_defaults(func=cmd_models)

    dm = sub.add_parser("demo", help="the main job: translate held-out verses, plot, score")
    dm.add_argument("--out", default="out/demo", help="folder for the pictures (default: out/demo)")
    _add_device_flags(dm)
    dm.set_defaults(func=cmd_demo)
    return p


def _is_ct2_translate(argv: list[str]) -> bool:
    """Whether the command line is ``attnkit [--home H] translate ... --engine ctranslate2``."""
    rest = list(argv)
    while rest and rest[0].startswith("--home"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    if not rest or rest[0] != "translate":
        return False
    return "--engine=ctranslate2" in rest or any(
        a == "--engine" and b == "ctranslate2" for a, b in itertools.pairwise(rest)
    )


def _ct2_translate_parser() -> argparse.ArgumentParser:
    """The parser for ``translate --engine ctranslate2`` alone: :func:`build_parser` imports the models'
    configs (and so torch) to list every command's options; this path must not (a CTranslate2 export
    translates in a fraction of the second torch's import takes)."""
    p = _Parser(prog="attnkit")
    p.add_argument("--home", default=None, help="data and cache folder (default $ATTNKIT_HOME or ~/.cache/attnkit)")
    _add_translate_parser(p.add_subparsers(dest="command", required=True))
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; bad input (an :class:`attnkit.errors.AttnkitError`, a bad flag, a file that is not
    there or cannot be written) is one line on stderr and exit status 2. Any other exception is a bug: it keeps its traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _ct2_translate_parser() if _is_ct2_translate(argv) else build_parser()
    try:
        args = parser.parse_args(argv)
        args.func(args)
    except (AttnkitError, FileNotFoundError) as exc:
        print(f"attnkit: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file-system error on a path the checks above could not foresee (a full disk)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"attnkit: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnkit: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
