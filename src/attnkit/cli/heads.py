"""``attnkit heads --model M [--limit N] [--roles]``: does each head of a Transformer translator matter, and
what does each head of any model do?

Per attention type (encoder self-attention, decoder self-attention, cross-attention) and per layer and
head, two scores over the first ``N`` held-out verses, in nats per reference piece
(:func:`attnkit.attribution.head_importance.head_importance`): the **ablation** importance, the forced
reference's loss added when the head's output is set to zero, and Michel, Levy & Neubig (2019)'s
**gradient** importance ``E_x |∂L(x)/∂ξ_h|`` of a gate ``ξ_h = 1`` on the head's output. Layers and heads
are numbered from 1.

``--roles`` (the only table for a language model: attnkit's own or a Hugging Face folder) scores every head
on the roles of :mod:`attnkit.attribution.head_roles` instead: positional (previous, self, next), attention
sinks (first, end), rare tokens, and for a language model induction and duplicate tokens; each head's
strongest role at or above ``--threshold`` marked, and a translator's guided-alignment head.

``--composition`` and ``--qk LAYER.HEAD --text T [--position N]`` (attnkit language models) say why a head
attends where it does (:mod:`attnkit.cli.heads_circuits`); ``--patching [--repeated N --seed S]`` which heads
carry an induction task's answer (:mod:`attnkit.cli.heads_patching`)."""

from __future__ import annotations

import json

from ..checks import COUNT, LAYERS, SEED, arg_type, between
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from ..tasks.capabilities import ReadsText
from .common import CLIError, _open_model, _shown_name
from .flags import _add_device_flags, _add_json_flag, _add_model_flag, _add_split_flag

__all__ = ["add_parser", "cmd_heads", "format_head_roles", "format_heads", "head_roles_report"]


def format_heads(report: dict) -> str:
    """The text tables of a :class:`~attnkit.attribution.head_importance.HeadImportanceReport`'s JSON."""
    from ..attribution.head_importance import SITE_NAMES

    lines = [
        f"head importance of {report['model']} on {report['verses']} {report['split']} verses "
        f"({report['pieces']} reference pieces with eos; clean loss {report['clean_loss']:.4f} nats per piece)",
        "ablation: the loss added when the head's output is zero (nats per piece); "
        "gradient: |dL/dxi_h| of a gate on the head's output (Michel et al. 2019)",
    ]
    for site, name in SITE_NAMES.items():
        rows = [h for h in report["heads"] if h["site"] == site]
        if not rows:
            continue
        lines += ["", name, "layer head |  ablation  gradient"]
        lines += [f"{h['layer']:>5} {h['head']:>4} | {h['ablation']:9.4f} {h['gradient']:9.4f}" for h in rows]
    for by in ("ablation", "gradient"):
        top = max(report["heads"], key=lambda h: h[by])
        lines.append(
            f"most important by {by}: {SITE_NAMES[top['site']]}, layer {top['layer']}, head {top['head']} "
            f"({top[by]:.4f})"
        )
    return "\n".join(lines)


def format_head_roles(report: dict) -> str:
    """The text table of a :class:`~attnkit.attribution.head_roles.HeadRolesReport`'s JSON: one line per head,
    its strongest role (at or above the threshold) marked with ``*``."""
    from ..attribution.head_roles import SITE_NAMES

    roles = report["roles"]
    what = f"{report['inputs']} {report['split']} verses"
    if report.get("repeated"):
        what += f" and {report['repeated']} rows of {report['length']} random tokens repeated twice"
    lines = [
        f"head roles of {report['model']} on {what}",
        "previous/self/next: share of queries whose most-attended key is at offset -1/0/+1 (Voita et al. 2019); "
        "first/end: mean weight on the first/last key (attention sinks); rare: share whose most-attended key is "
        "the rarest token; induction: prefix matching (Olsson et al. 2022); duplicate: weight on the same token's "
        f"first occurrence. * marks a head's strongest role at or above {report['threshold']:g}; - not measured",
        *(f"{note}" for note in report["notes"].values()),
    ]
    for site, name in SITE_NAMES.items():
        rows = [h for h in report["heads"] if h["site"] == site]
        if not rows:
            continue
        lines += ["", name, "layer head | " + " ".join(f"{r:>9}" for r in roles) + " | strongest"]
        for h in rows:
            cells = []
            for r in roles:
                v = h[r]
                cells.append(f"{'-':>9}" if v is None else f"{v:8.3f}" + ("*" if h["strongest"] == r else " "))
            mark = (h["strongest"] or "") + (" (guided alignment head)" if h["guided"] else "")
            lines.append(f"{h['layer']:>5} {h['head']:>4} | " + " ".join(cells) + f" | {mark}")
    return "\n".join(lines)


def _verse_pairs(args, corpus_name: str):
    from ..data.corpus import UnknownCorpusError, open_corpus

    try:
        corpus = open_corpus(corpus_name, args.home)
        pairs = corpus.pairs(args.split, limit=args.limit)
    except UnknownCorpusError as exc:
        raise CLIError(f"corpus {corpus_name!r} is not prepared here ({exc})") from None
    if not pairs:
        raise CLIError(f"corpus {corpus_name!r} has no {args.split} verses")
    return corpus, pairs


def head_roles_report(model, args) -> dict:
    """The JSON of ``attnkit heads --roles`` for an opened ``model`` (a translator or a language model)."""
    from ..attribution.head_roles import STRONG, language_model_roles, translator_roles
    from ..service import ModelKind

    threshold = STRONG if args.threshold is None else args.threshold
    if model.kind is ModelKind.TRANSLATOR:
        tr = model.impl
        corpus, pairs = _verse_pairs(args, getattr(tr, "corpus", "bible"))
        if corpus.turned_around(getattr(tr, "src_lang", None), getattr(tr, "tgt_lang", None)):
            pairs = [p._replace(src=p.tgt, tgt=p.src) for p in pairs]
        report = translator_roles(tr, [p.src for p in pairs], [p.tgt for p in pairs], threshold=threshold)
    else:
        corpus, pairs = _verse_pairs(args, "bible")
        english = [p.src if corpus.src_lang == "en" else p.tgt for p in pairs]  # the English side
        report = language_model_roles(model.impl, english, threshold=threshold)
    return {"model": _shown_name(model), "split": args.split, **report.to_dict()}


def cmd_heads(args) -> None:
    from ..attribution.head_importance import head_importance
    from ..models.transformer import TransformerTranslator
    from ..service import ModelKind

    model = _open_model(args, DEFAULT_TRANSLATION_MODEL)
    if args.patching:
        _cmd_patching(model, args)
        return
    if args.repeated is not None or args.direction is not None:
        raise CLIError("--repeated and --direction are for --patching")
    if args.composition or args.qk is not None:
        _cmd_circuits(model, args)
        return
    if args.text is not None or args.position is not None:
        raise CLIError("--text and --position are for --qk LAYER.HEAD")
    transformer = model.kind is ModelKind.TRANSLATOR and isinstance(
        getattr(model.impl, "model", None), TransformerTranslator
    )
    if not transformer and not model.can(ReadsText):
        raise CLIError(
            f"--model: {_shown_name(model)} is neither an attnkit Transformer translator nor a language model: "
            "heads are read in a Transformer's encoder self-attention, decoder self-attention and "
            "cross-attention, or a language model's self-attention"
        )
    if args.roles or not transformer:  # a language model's heads: roles only (no reference loss to ablate)
        try:
            data = head_roles_report(model, args)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        print(json.dumps(data, ensure_ascii=False) if args.json else format_head_roles(data))
        return
    tr = model.impl
    corpus, pairs = _verse_pairs(args, getattr(tr, "corpus", "bible"))
    if corpus.turned_around(getattr(tr, "src_lang", None), getattr(tr, "tgt_lang", None)):
        pairs = [p._replace(src=p.tgt, tgt=p.src) for p in pairs]
    report = head_importance(tr, [p.src for p in pairs], [p.tgt for p in pairs])
    data = {"model": _shown_name(model), "split": args.split, **report.to_dict()}
    print(json.dumps(data, ensure_ascii=False) if args.json else format_heads(data))


def _cmd_circuits(model, args) -> None:
    """``--composition`` (every pair of heads, from the weights) or ``--qk`` (one head on one text)."""
    from .heads_circuits import composition_report, format_composition, format_qk, qk_report

    if args.composition and args.qk is not None:
        raise CLIError("--composition and --qk are two tables: give one")
    if args.composition:
        if args.text is not None or args.position is not None:
            raise CLIError("--text and --position are for --qk LAYER.HEAD, not --composition")
        data = composition_report(model, args.top)
        print(json.dumps(data, ensure_ascii=False) if args.json else format_composition(data))
        return
    if args.text is None:
        raise CLIError("--qk needs --text: the text whose scores are split")
    data = qk_report(model, args.qk, args.text, args.position, args.top)
    print(json.dumps(data, ensure_ascii=False) if args.json else format_qk(data))


def _cmd_patching(model, args) -> None:
    """``--patching``: activation and path patching on repeated random tokens (:mod:`attnkit.cli.heads_patching`)."""
    from .heads_patching import format_patching, patching_report

    if args.composition or args.qk is not None or args.roles:
        raise CLIError("--patching is its own table: give it without --roles, --composition or --qk")
    data = patching_report(model, args.repeated or 20, args.seed, args.direction or "noise")
    print(json.dumps(data, ensure_ascii=False) if args.json else format_patching(data))


def add_parser(sub) -> None:
    hp = sub.add_parser(
        "heads",
        help="does each head of a Transformer translator matter (ablation and gradient importance), and what "
        "does each head of a translator or language model do (--roles)",
        description="Score every head of an attnkit Transformer translator (encoder self-attention, decoder "
        "self-attention, cross-attention) on held-out verses: the forced reference's loss added when the head is "
        "zero-ablated, and Michel et al. (2019)'s gradient importance |dL/dxi_h| of a gate on the head's output. "
        "In Python: attnkit.attribution.interventions (ablate, patch, gate any head) and "
        "attnkit.attribution.head_importance. With --roles (a language model's only table): every head's roles "
        "(previous-token and positional, attention sinks, rare tokens, induction and duplicate tokens), "
        "from attnkit.attribution.head_roles. With --composition or --qk (attnkit language models): why a head "
        "attends where it does (attnkit.attribution.head_composition, attnkit.attribution.qk_decomposition).",
    )
    _add_model_flag(
        hp, DEFAULT_TRANSLATION_MODEL, what="an attnkit Transformer translator, language model, or Hugging Face model"
    )
    hp.add_argument(
        "--roles",
        action="store_true",
        help="score each head's roles instead of its importance (default: off for a translator; a language model's only table)",
    )
    hp.add_argument(
        "--composition",
        action="store_true",
        help="attnkit language models: the pairs of heads that compose most (Elhage et al. 2021's Q-, K- and "
        "V-composition from the weights, less a random baseline) instead of the roles (default: off)",
    )
    hp.add_argument(
        "--qk",
        default=None,
        metavar="LAYER.HEAD",
        help="attnkit language models: split that head's pre-softmax scores at --position of --text over the "
        "residual stream's parts (embedding, each earlier head and MLP) (default: none)",
    )
    hp.add_argument(
        "--patching",
        action="store_true",
        help="attnkit language models: activation patching of every head and path patching into the best "
        "induction head on random tokens repeated twice, the first copy redrawn as the corruption (default: off)",
    )
    hp.add_argument(
        "--repeated",
        type=arg_type(LAYERS, "repeated"),
        default=None,
        metavar="N",
        help="with --patching: N random tokens repeated twice (default: 20)",
    )
    hp.add_argument(
        "--seed", type=arg_type(SEED, "seed"), default=0, help="with --patching: the tokens' seed (default: 0)"
    )
    hp.add_argument(
        "--direction",
        choices=("noise", "denoise"),
        default=None,
        help="with --patching: noise (corrupted activations into the clean run, Wang et al. 2022) or denoise "
        "(clean ones into the corrupted run) (default: noise)",
    )
    hp.add_argument("--text", default=None, help="with --qk: the text read (default: none)")
    hp.add_argument(
        "--position",
        type=arg_type(LAYERS, "position"),
        default=None,
        help="with --qk: the query position, 1-based over the text's pieces with its <s> (default: the last)",
    )
    hp.add_argument(
        "--top",
        type=arg_type(LAYERS, "top"),
        default=5,
        help="with --composition: pairs shown per kind; with --qk: terms shown (default: 5)",
    )
    hp.add_argument(
        "--threshold",
        type=arg_type(between(0, 1), "threshold"),
        default=None,
        help="with --roles: the score a role must reach to be marked as a head's strongest "
        "(default: attnkit.attribution.head_roles.STRONG, 0.5)",
    )
    hp.add_argument(
        "--limit",
        type=arg_type(COUNT, "limit"),
        default=16,
        help="score over the first N verses of the split (default: 16)",
    )
    _add_split_flag(hp, "test", "the split of the model's corpus the verses come from")
    _add_json_flag(hp)
    _add_device_flags(hp)
    hp.set_defaults(func=cmd_heads)
