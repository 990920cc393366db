"""``attnkit evaluate explanations`` on a decoder-only language model: every attribution method scored by
deletion and insertion of each next token's log-probability, against random orders, with the
randomised-model check (:mod:`attnkit.attribution.lm_faithfulness`)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import no_such_file
from .common import CLIError, _open_model

#: texts scored when neither --texts nor --limit is given
DEFAULT_TEXTS = 20


def _texts(args) -> list[str]:
    """``--texts FILE`` (one text a line, blank lines skipped), else the English Bible's validation verses;
    the first ``--limit`` of either."""
    limit = args.limit
    if args.texts is not None:
        from ..data.corpus import read_text_lines

        if not Path(args.texts).is_file():
            raise CLIError(no_such_file(args.texts))
        try:
            texts = [t for t in read_text_lines(args.texts) if t]
        except (OSError, UnicodeDecodeError) as e:
            raise CLIError(f"--texts: cannot read {args.texts} as UTF-8 text ({e})") from None
        if not texts:
            raise CLIError(f"--texts: {args.texts} holds no text")
        return texts[:limit] if limit else texts
    from ..data.corpus import open_corpus

    return [pair.tgt for pair in open_corpus("bible").iter_pairs("valid", limit or DEFAULT_TEXTS)]


def evaluate_language_model(path, args) -> tuple[dict, str]:
    """``(report, table)`` of every method (or ``--method``) of the decoder-only model at ``path``."""
    from ..attribution.lm_faithfulness import evaluate_lm_explanations, format_lm_report

    if args.resume:
        raise CLIError("--resume is for translators and captioners; a language model's report is made in one go")
    texts = _texts(args)
    sa = _open_model(args, None, ref=str(path)).impl

    def progress(method: str, stage: str) -> None:
        print(f"[explanations] {method}: {stage}", file=sys.stderr, flush=True)

    report = evaluate_lm_explanations(sa, texts, args.method, sanity_texts=args.sanity_verses, progress=progress)
    return report, format_lm_report(report)
