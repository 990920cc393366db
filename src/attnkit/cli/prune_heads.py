"""``attnkit export MODEL OUT --prune-heads SPEC`` / ``--prune-heads-by ablation|gradient --prune-share S``: an
attnkit export of a Transformer translator with heads removed for good (Michel, Levy & Neubig 2019; Voita et
al. 2019), :func:`attnkit.models.head_pruning.prune_heads`.

``SPEC`` names heads as ``site:layer.head``, comma-separated, 1-based, numbered as ``attnkit heads`` prints them
for the model given (``encoder:1.2,cross:2.1``); sites ``encoder`` (the encoder's self-attention), ``self`` (the
decoder's self-attention) and ``cross``. ``--prune-heads-by`` removes the ``round(S · heads)`` least important
heads by that score of :func:`attnkit.attribution.head_importance.head_importance`, measured on the first
``--limit`` verses of ``--split`` (valid by default: the choice never sees a test verse)."""

from __future__ import annotations

import re

from .common import CLIError

__all__ = ["add_prune_flags", "check_prune_flags", "choose_heads", "parse_head_spec", "prune_export", "pruning"]

_SITES = ("encoder", "self", "cross")
_ITEM = re.compile(r"^(encoder|self|cross):(\d+)\.(\d+)$")


def parse_head_spec(spec: str) -> list[tuple[str, int, int]]:
    """``"encoder:1.2,cross:2.1"`` → ``[("encoder", 0, 1), ("cross", 1, 0)]`` (0-based); a :class:`CLIError`
    naming ``--prune-heads`` and the bad item otherwise (the layers' and heads' ranges are the model's to check)."""
    heads = []
    for item in spec.split(","):
        m = _ITEM.match(item.strip())
        if not m or int(m[2]) < 1 or int(m[3]) < 1:
            raise CLIError(
                f"--prune-heads: {item.strip()!r} is not site:layer.head (sites {', '.join(_SITES)}; layer and "
                "head from 1), e.g. encoder:1.2,cross:2.1"
            )
        heads.append((m[1], int(m[2]) - 1, int(m[3]) - 1))
    if len(set(heads)) != len(heads):
        raise CLIError(f"--prune-heads: {spec!r} names a head twice")
    return heads


def _spec(heads) -> str:
    return ",".join(f"{s}:{layer + 1}.{h + 1}" for s, layer, h in heads)


def pruning(args) -> bool:
    """Whether the export prunes heads."""
    return args.prune_heads is not None or args.prune_heads_by is not None


def check_prune_flags(args) -> None:
    """The pruning flags' combinations, refused in one line naming the flag."""
    if args.prune_share is not None and args.prune_heads_by is None:
        raise CLIError("--prune-share: for --prune-heads-by (the share of heads it removes)")
    if not pruning(args):
        return
    flag = "--prune-heads" if args.prune_heads is not None else "--prune-heads-by"
    if args.prune_heads is not None and args.prune_heads_by is not None:
        raise CLIError("--prune-heads and --prune-heads-by: give one (the heads named, or the least important)")
    if args.format != "attnkit":
        raise CLIError(
            f"{flag}: for --format attnkit; a {args.format} model has one head count for every attention, so a "
            "model with heads pruned in some layers cannot be written in it"
        )
    if args.prune_heads_by is not None and args.average_last is not None:
        raise CLIError("--prune-heads-by with --average-last: export the averaged model first, then prune that")


def choose_heads(args, source) -> list[tuple[str, int, int]]:
    """The heads to remove: ``--prune-heads``'s, or ``--prune-heads-by``'s least important (0-based)."""
    if args.prune_heads is not None:
        return parse_head_spec(args.prune_heads)
    from ..attribution.head_importance import head_importance
    from ..data.corpus import UnknownCorpusError, open_corpus
    from ..models.transformer import TransformerTranslator
    from ..service import open_model

    tr = open_model(str(source)).impl
    if not isinstance(getattr(tr, "model", None), TransformerTranslator):
        raise CLIError(f"--prune-heads-by: {source} is not an attnkit Transformer translator")
    try:
        corpus = open_corpus(getattr(tr, "corpus", "bible"), args.home)
        pairs = corpus.pairs(args.split, limit=args.limit)
    except UnknownCorpusError as exc:
        raise CLIError(f"--prune-heads-by: the model's corpus is not prepared here ({exc})") from None
    if not pairs:
        raise CLIError(f"--prune-heads-by: the corpus has no {args.split} verses")
    if corpus.turned_around(getattr(tr, "src_lang", None), getattr(tr, "tgt_lang", None)):
        pairs = [p._replace(src=p.tgt, tgt=p.src) for p in pairs]
    report = head_importance(tr, [p.src for p in pairs], [p.tgt for p in pairs])
    share = 0.25 if args.prune_share is None else args.prune_share
    k = round(share * len(report.heads))
    order = sorted(report.heads, key=lambda h: getattr(h, args.prune_heads_by))  # least important first
    return sorted((h.site, h.layer, h.head) for h in order[:k])


def prune_export(path, heads, dtype) -> str:
    """Prune ``heads`` from the attnkit export at ``path`` (written just now) and write it back in place;
    returns a line saying what went."""
    from ..models.head_pruning import head_counts, prune_heads
    from ..models.transformer import TransformerTranslator
    from ..training.checkpoint import load_model, save_checkpoint

    model, config, ckpt = load_model(path)
    if not isinstance(model, TransformerTranslator):
        raise CLIError(f"--prune-heads: {config.get('model_type')} is not a Transformer translator")
    total = sum(sum(v) for v in head_counts(model.config).values())
    try:
        model = prune_heads(model, heads, copy=False)
    except ValueError as exc:
        raise CLIError(f"--prune-heads: {exc}") from None
    reserved = {"config.json", "model.safetensors", "COMPLETE", "trainer_state.pt"}
    extra = {name: p.read_bytes() for name, p in ckpt.files.items() if name not in reserved}
    save_checkpoint(path, model=model, config={**config, **model.to_config()}, extra_files=extra, dtype=dtype)
    counts = "; ".join(f"{s} {','.join(map(str, n))}" for s, n in head_counts(model.config).items())
    guided = config.get("alignment_layer"), config.get("alignment_head")
    gone = guided[1] is not None and model.config.alignment_head is None
    note = f"; the guided-alignment head cross:{guided[0]}.{guided[1]} went, so the export has none" if gone else ""
    return f"pruned {len(heads)} of {total} heads ({_spec(heads) or 'none'}); heads per layer: {counts}{note}"


def add_prune_flags(ex) -> None:
    """The pruning flags of ``attnkit export``."""
    from ..checks import arg_type, between
    from .flags import _add_split_flag

    ex.add_argument(
        "--prune-heads",
        dest="prune_heads",
        default=None,
        metavar="SPEC",
        help="attnkit, a Transformer translator: remove these heads for good, site:layer.head comma-separated, "
        "1-based as `attnkit heads` prints them (sites encoder, self, cross), e.g. encoder:1.2,cross:2.1; the "
        "export computes what the model computes with them zero-ablated (default: none)",
    )
    ex.add_argument(
        "--prune-heads-by",
        dest="prune_heads_by",
        default=None,
        choices=["ablation", "gradient"],
        help="attnkit, a Transformer translator: remove the least important heads by this score of "
        "`attnkit heads` on the first --limit verses of --split (default: none)",
    )
    ex.add_argument(
        "--prune-share",
        dest="prune_share",
        type=arg_type(between(0, 1), "prune_share"),
        default=None,
        metavar="S",
        help="with --prune-heads-by: the share of all heads removed, rounded to a count (default: 0.25)",
    )
    ex.add_argument(
        "--limit",
        type=arg_type(between(1, 10**9, integer=True), "limit"),
        default=32,
        help="with --prune-heads-by: score the heads on the first N verses (default: 32)",
    )
    _add_split_flag(ex, "valid", "with --prune-heads-by: the split of the model's corpus the verses come from")
