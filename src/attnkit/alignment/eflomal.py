"""The statistical reference aligner: eflomal (Östling & Tiedemann 2016), both directions, symmetrised.

eflomal is a Bayesian IBM-style aligner trained by Gibbs sampling, without labels: it reads
sentence pairs and writes, per direction, each target word's source word. Both directions are
combined here with grow-diag-final-and (:mod:`attnkit.alignment.symmetrize`). Unsupervised aligners
are trained on the pairs they align (plus, for quality, any more pairs of the same languages):
they see the sentences, never gold links. Words are lower-cased for it. eflomal samples without a
fixed seed, so two runs differ slightly (measured in benchmarks/RESULTS.md, section "Word alignment").
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .gold import parse_links
from .symmetrize import symmetrize

__all__ = ["EFLOMAL_MISSING", "eflomal_available", "eflomal_directional", "eflomal_links"]

EFLOMAL_MISSING = "eflomal is not installed: pip install 'attnkit[align]'"

Link = tuple[int, int]


def eflomal_available() -> bool:
    try:
        import eflomal  # noqa: F401
    except ImportError:
        return False
    return True


def eflomal_directional(
    source: Sequence[str], target: Sequence[str], *, extra: tuple[Sequence[str], Sequence[str]] = ((), ())
) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward and reverse links (both as ``(source word, target word)``) for each pair of
    whitespace-tokenised ``source``/``target`` lines, trained on them plus the ``extra`` pairs.
    ImportError (with the install command) without eflomal."""
    try:
        import eflomal
    except ImportError:
        raise ImportError(EFLOMAL_MISSING) from None
    if len(source) != len(target) or len(extra[0]) != len(extra[1]):
        raise ValueError(
            f"source and target must be parallel: got {len(source)} and {len(target)} lines "
            f"(extra: {len(extra[0])} and {len(extra[1])})"
        )

    def text(lines):
        return "".join(" ".join(line.lower().split()) + "\n" for line in lines)

    with tempfile.TemporaryDirectory(prefix="attnkit-eflomal-") as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(
            io.StringIO(text(source) + text(extra[0])),
            io.StringIO(text(target) + text(extra[1])),
            links_filename_fwd=str(fwd),
            links_filename_rev=str(rev),
            quiet=True,
        )
        n = len(source)
        f_lines = fwd.read_text().splitlines()[:n]
        r_lines = rev.read_text().splitlines()[:n]
    f_lines += [""] * (n - len(f_lines))
    r_lines += [""] * (n - len(r_lines))
    return (
        [parse_links(line, where=f"eflomal forward line {k + 1}") for k, line in enumerate(f_lines)],
        [parse_links(line, where=f"eflomal reverse line {k + 1}") for k, line in enumerate(r_lines)],
    )


def eflomal_links(
    source: Sequence[str],
    target: Sequence[str],
    *,
    extra: tuple[Sequence[str], Sequence[str]] = ((), ()),
    method: str = "grow-diag-final-and",
) -> list[set[Link]]:
    """eflomal's links of each pair, both directions symmetrised by ``method`` (see the module docstring)."""
    forward, reverse = eflomal_directional(source, target, extra=extra)
    return [symmetrize(f, r, method) for f, r in zip(forward, reverse)]
