"""``attnkit evaluate alignment``: does a model's attention align words, measured against the gold set.

For each gold verse the model is forced to write the **reference** English (teacher forcing, so the
words line up with the gold's), its attention is read through the one interface every translation
model has (:meth:`attnkit.tasks.translation.Translator.attention`), turned into word attention (sum
over a source word's pieces, mean over a target word's pieces), and each target word is linked to
the source word it attends to most. AER, precision and recall are summed over the **100 scored
verses**; a best head is chosen on the **50 dev verses** only. The same run scores the references:
the diagonal baseline and eflomal (Östling & Tiedemann 2016), trained without labels on the whole
training split plus the gold verses, both directions symmetrised with grow-diag-final-and.
"""

from __future__ import annotations

import hashlib
import io

import torch

from ..paths import atomic_write_text, attnkit_home
from .aer import AERCounts, aer_counts, argmax_links, diagonal_links, grow_diag_final_and, threshold_links
from .gold import DEV_VERSES, GoldVerse, format_links, load_gold, parse_links
from .words import word_attention

__all__ = ["eflomal_links", "evaluate_alignment", "score_links", "verse_word_maps"]


def verse_word_maps(translator, verse: GoldVerse, *, all_heads: bool = False) -> dict[str, torch.Tensor]:
    """Word attention ``(target words, source words)`` of one gold verse under forced decoding of its
    reference: ``"model"`` (the model's alignment) and, with ``all_heads``, ``"L{l}H{h}"`` for every
    cross-attention head and ``"L{l}avg"`` for each layer's head mean. Empty for a model without attention."""
    ta = translator.attention(" ".join(verse.source), " ".join(verse.target))
    m = ta.maps
    if m.alignment is None:
        return {}
    out = {"model": word_attention(m.alignment, ta.source_pieces, ta.target_pieces)}
    if all_heads and m.cross is not None:
        for layer in range(m.cross.shape[0]):
            out[f"L{layer + 1}avg"] = word_attention(m.cross[layer].mean(0), ta.source_pieces, ta.target_pieces)
            for head in range(m.cross.shape[1]):
                out[f"L{layer + 1}H{head + 1}"] = word_attention(
                    m.cross[layer, head], ta.source_pieces, ta.target_pieces
                )
    return out


def score_links(links: list[set], verses: list[GoldVerse]) -> AERCounts:
    """Summed AER counts of per-verse link sets."""
    total = AERCounts()
    for a, v in zip(links, verses):
        total = total + aer_counts(a, v.sure, v.possible)
    return total


def eflomal_links(verses: list[GoldVerse], *, home=None) -> list[set] | None:
    """eflomal's symmetrised links for the gold verses (``None`` if eflomal is not installed).

    Trained unsupervised on the training split plus the gold verses (standard for unsupervised
    aligners: they see the test sentences, never their links); the result is cached under
    ``$ATTNKIT_HOME/alignment``."""
    try:
        import eflomal
    except ImportError:
        return None
    from ..data.bible import load_pairs

    src = [" ".join(v.source) for v in verses]
    tgt = [" ".join(v.target) for v in verses]
    key = hashlib.sha256("\n".join(src + tgt).encode()).hexdigest()[:12]
    cache = attnkit_home(home) / "alignment" / f"eflomal-{key}.txt"
    if not cache.is_file():
        train = load_pairs("train", home=home)
        lower = lambda s: s.lower()
        src_all = [lower(s) for s in src] + [lower(" ".join(p.src.split())) for p in train]
        tgt_all = [lower(s) for s in tgt] + [lower(" ".join(p.tgt.split())) for p in train]
        out_dir = cache.parent
        out_dir.mkdir(parents=True, exist_ok=True)
        fwd, rev = out_dir / f"{key}.fwd", out_dir / f"{key}.rev"
        eflomal.Aligner().align(
            io.StringIO("\n".join(src_all) + "\n"),
            io.StringIO("\n".join(tgt_all) + "\n"),
            links_filename_fwd=str(fwd),
            links_filename_rev=str(rev),
            quiet=True,
        )
        f_lines, r_lines = fwd.read_text().splitlines(), rev.read_text().splitlines()
        sym = [
            format_links(grow_diag_final_and(parse_links(a), parse_links(b)))
            for a, b in zip(f_lines[: len(verses)], r_lines[: len(verses)])
        ]
        atomic_write_text(cache, "\n".join(sym) + "\n")
    return [parse_links(line) for line in cache.read_text().splitlines()]


def evaluate_alignment(
    model,
    *,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
    threshold: float | None = None,
    references: bool = True,
    gold_dir=None,
    home=None,
    device: str = "cpu",
    dtype=None,
) -> dict:
    """The AER table of a model (see the module docstring). ``layer``/``head`` (1-based) score one
    cross-attention head instead of the model's alignment; ``threshold`` adds links above it."""
    from ..pretrained import resolve_model
    from ..tasks.translation import Translator

    verses = load_gold(gold_dir)
    dev, scored = verses[:DEV_VERSES], verses[DEV_VERSES:]
    path = resolve_model(model)
    tr = Translator.load(path, device=device, dtype=dtype)
    rows = []
    maps = [verse_word_maps(tr, v, all_heads=all_heads or layer is not None) for v in verses]
    if not maps[0]:
        raise ValueError(
            f"{path.name} has no attention (it encodes the source into one vector), so it "
            "aligns nothing; RNNencdec is the model without attention"
        )
    key = "model" if layer is None else f"L{layer}H{head}" if head is not None else f"L{layer}avg"
    if key not in maps[0]:
        raise ValueError(
            f"{path.name} has no cross-attention {'layer ' + str(layer)}"
            f"{' head ' + str(head) if head else ''} (it has {sorted(k for k in maps[0] if k != 'model')})"
        )

    def links_of(name, part):
        out = []
        for m in part:
            a = argmax_links(m[name])
            if threshold is not None:
                a |= threshold_links(m[name], threshold)
            out.append(a)
        return out

    def row(name, label):
        counts = score_links(links_of(name, maps[DEV_VERSES:]), scored)
        dev_counts = score_links(links_of(name, maps[:DEV_VERSES]), dev)
        return {"name": label, **counts.to_dict(), "dev_aer": round(dev_counts.aer, 4)}

    rows.append(row(key, f"{path.name}" + ("" if key == "model" else f" {key}")))
    best = None
    if all_heads and len(maps[0]) > 1:
        names = [k for k in maps[0] if k != "model"]
        rows += [row(n, f"{path.name} {n}") for n in names]
        best = min((r for r in rows[1:] if "avg" not in r["name"]), key=lambda r: r["dev_aer"])
        best = {**best, "name": best["name"] + " (best head on dev)"}
    refs = []
    if references:
        diag = [diagonal_links(len(v.source), len(v.target)) for v in scored]
        refs.append({"name": "diagonal baseline", **score_links(diag, scored).to_dict()})
        ef = eflomal_links(verses, home=home)
        if ef is not None:
            refs.append(
                {
                    "name": "eflomal (unsupervised, grow-diag-final-and)",
                    **score_links(ef[DEV_VERSES:], scored).to_dict(),
                }
            )
        else:
            refs.append({"name": "eflomal: not installed (pip install 'attnkit[align]')", "skipped": True})
    return {
        "model": path.name,
        "scored_verses": len(scored),
        "dev_verses": len(dev),
        "rule": "links: each target word → its argmax source word (word attention = mean over the target "
        "word's pieces of the sum over the source word's pieces)"
        + (f", plus every pair ≥ {threshold}" if threshold is not None else ""),
        "rows": rows,
        "best_head": best,
        "references": refs,
    }
