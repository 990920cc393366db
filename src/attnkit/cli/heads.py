"""``attnkit heads --model M [--limit N]``: does each head of a Transformer translator matter?

Per attention type (encoder self-attention, decoder self-attention, cross-attention) and per layer and
head, two scores over the first ``N`` held-out verses, in nats per reference piece
(:func:`attnkit.attribution.head_importance.head_importance`): the **ablation** importance, the forced
reference's loss added when the head's output is set to zero, and Michel, Levy & Neubig (2019)'s
**gradient** importance ``E_x |∂L(x)/∂ξ_h|`` of a gate ``ξ_h = 1`` on the head's output. Layers and heads
are numbered from 1."""

from __future__ import annotations

import json

from ..checks import COUNT, arg_type
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from .common import CLIError, _open_model, _shown_name
from .flags import _add_device_flags, _add_json_flag, _add_model_flag, _add_split_flag

__all__ = ["add_parser", "cmd_heads", "format_heads"]


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


def cmd_heads(args) -> None:
    from ..attribution.head_importance import head_importance
    from ..data.corpus import UnknownCorpusError, open_corpus
    from ..models.transformer import TransformerTranslator
    from ..service import ModelKind

    model = _open_model(args, DEFAULT_TRANSLATION_MODEL)
    if model.kind is not ModelKind.TRANSLATOR or not isinstance(
        getattr(model.impl, "model", None), TransformerTranslator
    ):
        raise CLIError(
            f"--model: {_shown_name(model)} is not an attnkit Transformer translator: head importance reads "
            "the heads of its encoder self-attention, decoder self-attention and cross-attention"
        )
    tr = model.impl
    corpus_name = getattr(tr, "corpus", "bible")
    try:
        corpus = open_corpus(corpus_name, args.home)
        pairs = corpus.pairs(args.split, limit=args.limit)
    except UnknownCorpusError as exc:
        raise CLIError(f"the model was trained on corpus {corpus_name!r}, which is not prepared here ({exc})") from None
    if corpus.turned_around(getattr(tr, "src_lang", None), getattr(tr, "tgt_lang", None)):
        pairs = [p._replace(src=p.tgt, tgt=p.src) for p in pairs]
    if not pairs:
        raise CLIError(f"corpus {corpus_name!r} has no {args.split} verses")
    report = head_importance(tr, [p.src for p in pairs], [p.tgt for p in pairs])
    data = {"model": _shown_name(model), "split": args.split, **report.to_dict()}
    print(json.dumps(data, ensure_ascii=False) if args.json else format_heads(data))


def add_parser(sub) -> None:
    hp = sub.add_parser(
        "heads",
        help="does each head of a Transformer translator matter: ablation and gradient importance per head",
        description="Score every head of an attnkit Transformer translator (encoder self-attention, decoder "
        "self-attention, cross-attention) on held-out verses: the forced reference's loss added when the head is "
        "zero-ablated, and Michel et al. (2019)'s gradient importance |dL/dxi_h| of a gate on the head's output. "
        "In Python: attnkit.attribution.interventions (ablate, patch, gate any head) and "
        "attnkit.attribution.head_importance.",
    )
    _add_model_flag(hp, DEFAULT_TRANSLATION_MODEL, what="an attnkit Transformer translator")
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
