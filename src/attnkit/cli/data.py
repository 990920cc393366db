"""``attnkit data prepare`` (the built-in corpora and the user's parallel corpus) and ``attnkit data scene`` (one
scene as a PNG)."""

from __future__ import annotations

import sys

from ..checks import CANVAS, MAX_LENGTH, THREADS, arg_type, between
from ..data.corpus import DEFAULT_MAX_CHARS, DEFAULT_MAX_WORDS, SPM_MAX_SENTENCES
from .align import add_data_links_parser
from .common import CLIError, _output
from .flags import _add_split_flag


def cmd_data_prepare(args) -> None:
    if args.dataset == "bible":
        import time

        from ..data.datasets.bible import load_pairs, prepare_bible

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
        from ..data.datasets.scenes import prepare_scenes

        try:
            path = prepare_scenes(home=args.home, canvas=args.canvas, force=args.force)
        except ValueError as exc:  # a canvas the scenes cannot use (too small for two items a side, odd)
            raise CLIError(f"--canvas: {exc}") from None
        print(f"Fashion-MNIST scenes: {path}")
    else:  # argparse restricts choices
        raise CLIError(f"unknown dataset {args.dataset!r}")


def _prepare_parallel(args) -> None:
    """``attnkit data prepare parallel NAME ...``: the user's corpus (see :mod:`attnkit.data.corpus`)."""
    from ..data.corpus import describe_dropped, prepare_parallel

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
        max_chars=args.max_chars,
        home=args.home,
        force=args.force,
        workers=args.workers,
        spm_max_sentences=args.tokenizer_sample,
    )
    m = corpus.meta
    held = f" (valid/test held out of the training files: {', '.join(m['heldout']['from_train'])})" * bool(
        m["heldout"]["from_train"]
    )
    print(
        f"corpus {corpus.name} ({corpus.src_lang} → {corpus.tgt_lang}): {corpus.path}\n"
        f"  pairs: {', '.join(f'{k} {v}' for k, v in m['splits'].items())}{held}\n"
        + "".join(
            [f"  dropped from {k}: {describe_dropped(m, k)}\n" for k, d in m["dropped"].items() if any(d.values())]
            or ["  dropped: nothing\n"]
        )
        + f"  vocabulary: {m['vocab_size']} pieces{' per side' if m['separate_vocab'] else ' (joint)'}; "
        f"{m['seconds']:.1f} s\n  train with: attnkit train translation --data {corpus.name}"
    )
    if m["test_sources_in_train"]:
        print(
            f"attnkit: warning: {m['test_sources_in_train']} training pairs have a source sentence that is also "
            "in the test set: test scores will be flattered",
            file=sys.stderr,
        )


def cmd_data_scene(args) -> None:
    """``attnkit data scene N --out scene.png``: one of the captioned Fashion-MNIST scenes (the test split's,
    which ``evaluate captioning`` scores and the captioners never saw) as a PNG, for ``attnkit caption``."""
    from ..data.datasets.scenes import load_scenes, save_scene_png

    _output(args.out, "--out")
    try:
        scenes = load_scenes(args.split, args.home, canvas=args.canvas)
    except ValueError as exc:  # a canvas the scenes cannot use
        raise CLIError(f"--canvas: {exc}") from None
    if args.index >= len(scenes):
        raise CLIError(
            f"N: the {args.split} split has {len(scenes)} scenes: give 0 to {len(scenes) - 1}, got {args.index}"
        )
    scene = scenes[args.index]
    path = save_scene_png(scene["image"], args.out, scale=args.scale, boxes=scene["boxes"] if args.boxes else None)
    print(f'wrote {path}: {args.split} scene {args.index}, "{scene["caption"]}"')


def add_parser(sub) -> None:
    d = sub.add_parser("data", help="prepare the corpora").add_subparsers(dest="action", required=True)
    add_data_links_parser(d)
    ds = d.add_parser(
        "scene",
        help="write one captioned Fashion-MNIST scene as a PNG (to try `attnkit caption` on)",
        description="Write scene N of a split of the captioned Fashion-MNIST scenes (prepared and cached on first "
        "use, as `attnkit data prepare scenes` does) as a grayscale PNG, and print its true caption. The test "
        "split's scenes are the ones `attnkit evaluate captioning` scores, made of photos no captioner trained on.",
    )
    ds.add_argument(
        "index", metavar="N", type=arg_type(between(0, 1_000_000_000, integer=True), "N"), help="the scene, from 0"
    )
    ds.add_argument(
        "--out",
        "--output",
        dest="out",
        required=True,
        metavar="PNG",
        help="the PNG file to write (required, no default)",
    )
    _add_split_flag(ds, "test")
    ds.add_argument(
        "--canvas",
        type=arg_type(CANVAS, "canvas"),
        default=64,
        help="canvas size in pixels, the captioner's (default: 64, the shipped captioners')",
    )
    ds.add_argument(
        "--scale",
        type=arg_type(between(1, 32, integer=True), "scale"),
        default=1,
        help="enlarge the picture N times to look at it (default: 1: the canvas as the captioner reads it)",
    )
    ds.add_argument(
        "--boxes", action="store_true", help="draw each item's box in colour (a picture to look at) (default: off)"
    )
    ds.set_defaults(func=cmd_data_scene)
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
        type=arg_type(between(300, 1_000_000, integer=True), "vocab-size"),
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
        type=arg_type(MAX_LENGTH, "max-words"),
        default=DEFAULT_MAX_WORDS,
        help="parallel: drop (and count) pairs with a side over this many words (default: %(default)s)",
    )
    dp.add_argument(
        "--max-chars",
        type=arg_type(between(1, 1_000_000, integer=True), "max-chars"),
        default=DEFAULT_MAX_CHARS,
        help="parallel: drop (and count) pairs with a side over this many characters, such as a long line "
        "with few spaces (default: %(default)s)",
    )
    dp.add_argument(
        "--tokenizer-sample",
        type=arg_type(between(1, 10_000_000, integer=True), "tokenizer-sample"),
        default=SPM_MAX_SENTENCES,
        help="parallel: sentencepiece trains on at most this many sentences, sampled; it needs about 4 KB of "
        "memory per sentence (default: %(default)s)",
    )
    dp.add_argument(
        "--workers",
        type=arg_type(THREADS, "workers"),
        default=None,
        help="parallel: tokenising processes (default: one per core)",
    )
    dp.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if cached; parallel: replaces only the files the earlier prepare wrote (its meta.json "
        "lists them; a corpus folder with a file of yours in it is refused) (default: off)",
    )
    dp.add_argument(
        "--canvas",
        type=arg_type(CANVAS, "canvas"),
        default=64,
        help="scenes: canvas size in pixels (default: 64)",
    )
    dp.set_defaults(func=cmd_data_prepare)
