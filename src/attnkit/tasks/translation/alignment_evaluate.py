"""``attnkit evaluate alignment``: does a model's attention align words, measured against gold links.

Rows: the model's attention (``attention``) and, by default beside it, **Shift-Att** (``shift``; Chen
et al. 2020): the attention of the decoder step whose *input* is target word t (row t + 1 of the
pass over ``[bos, y_0 .. y_{T-1}]``), which has read the word it is asked to align; for a Transformer
from the decoder layer whose head mean has the lowest AER on the dev pairs (never the scored ones).

For each gold pair the model is forced to write the **reference** target (so the words line up with
the gold's), its attention is read as :class:`~attnkit.tasks.translation.alignment.ModelAligner`
reads it (plain or Shift-Att rows, a layer or head), and each target word is linked to its argmax
source word. AER, precision and recall are summed over the **scored** pairs, each with a 95 %
bootstrap interval over pairs (:mod:`attnkit.alignment.bootstrap`); every row after the first is
compared with the first, paired, and called a tie when the difference's interval holds 0. A layer
or head is chosen on the **dev** pairs only (the built-in gold set's first 50 verses; none for a
user's gold unless ``dev`` says how many of its first lines to use).

References in the same table: the diagonal baseline, and eflomal (Östling & Tiedemann 2016) trained
without labels on the gold sentences plus, for the built-in gold set, the Bible training split, both
directions symmetrised with grow-diag-final-and (:mod:`attnkit.alignment.eflomal`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from ...alignment import AERCounts, aer_counts, diagonal_links
from ...alignment.bootstrap import DEFAULT_SAMPLES, aer_interval, paired_aer_difference
from ...alignment.eflomal import EFLOMAL_MISSING, eflomal_available, eflomal_directional
from ...alignment.gold import (
    DEV_VERSES,
    GOLD_LANGUAGES,
    GoldVerse,
    format_links,
    load_gold,
    load_gold_files,
    parse_links,
)
from ...alignment.symmetrize import grow_diag_final_and, invert, symmetrize
from ...errors import InputError
from ...paths import atomic_write_text, attnkit_home
from .alignment import (
    GUIDED_BOTH_WAYS,
    ROWS_ONLY,
    AttentionReading,
    ModelAligner,
    _model_layers,
    default_method,
    describe_reading,
    has_guided_head,
)
from .guided import guided_head
from .inference import Translator

__all__ = ["DEFAULT_METHODS", "evaluate_alignment", "gold_eflomal_links", "per_verse_counts"]

#: The rows ``evaluate alignment`` scores unless told: the model's attention, and Shift-Att (and its guided
#: head, first, for a model trained with guided alignment).
DEFAULT_METHODS = ("attention", "shift")


def per_verse_counts(links: list[set], verses: list[GoldVerse]) -> list[AERCounts]:
    """The AER counts of each verse (sum them for the corpus AER)."""
    return [aer_counts(a, v.sure, v.possible) for a, v in zip(links, verses)]


def _total(counts: list[AERCounts]) -> AERCounts:
    return sum(counts, AERCounts())


def gold_eflomal_links(verses: list[GoldVerse], *, builtin: bool, home=None) -> list[set]:
    """eflomal's grow-diag-final-and links for the gold pairs, trained on them (plus the Bible
    training split for the built-in gold). Both directions are cached under ``$ATTNKIT_HOME/alignment``."""
    src = [" ".join(v.source) for v in verses]
    tgt = [" ".join(v.target) for v in verses]
    key = hashlib.sha256(("bible\n" if builtin else "\n").encode() + "\n".join(src + tgt).encode()).hexdigest()[:12]
    folder = attnkit_home(home) / "alignment"
    fwd_path, rev_path = folder / f"eflomal-{key}.fwd", folder / f"eflomal-{key}.rev"
    if not (fwd_path.is_file() and rev_path.is_file()):
        extra: tuple = ((), ())
        if builtin:
            from ...data.datasets.bible import load_pairs

            train = load_pairs("train", home=home)
            extra = ([p.src for p in train], [p.tgt for p in train])
        forward, reverse = eflomal_directional(src, tgt, extra=extra)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(fwd_path, "".join(format_links(a) + "\n" for a in forward))
        atomic_write_text(rev_path, "".join(format_links(a) + "\n" for a in reverse))
    forward = [parse_links(x) for x in fwd_path.read_text().splitlines()]
    reverse = [parse_links(x) for x in rev_path.read_text().splitlines()]
    return [grow_diag_final_and(f, r) for f, r in zip(forward, reverse)]


def _candidates(aligner: ModelAligner, base: AttentionReading, all_heads: bool) -> dict[str, AttentionReading]:
    """The readings to score: ``base`` resolved, and with ``all_heads`` every layer's head mean and every head.
    Each layer's and head's reading is plain (``attention``, or ``shift`` under Shift-Att): under ``guided``
    they read the heads' rows as the attention method does, the guided head's among them, so they are named so."""
    model = aligner.translator.model
    layers = _model_layers(model)
    out = {"": aligner.resolve(aligner.translator, base)}
    if layers is None:
        return out
    heads = getattr(model.config, "nhead", 1)
    method = "attention" if base.method == "guided" else base.method
    if all_heads or (base.method == "shift" and base.layer is None):
        for layer in range(1, layers + 1):
            out[f"L{layer}avg"] = AttentionReading(method, layer, None, base.threshold, base.both_ways)
    if all_heads:
        for layer in range(1, layers + 1):
            for head in range(1, heads + 1):
                out[f"L{layer}H{head}"] = AttentionReading(method, layer, head, base.threshold, base.both_ways)
    return out


def evaluate_alignment(
    model,
    *,
    methods: tuple[str, ...] | None = None,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
    threshold: float | None = None,
    both_ways: str | None = None,
    reverse_model=None,
    references: bool = True,
    gold: tuple[str | Path, str | Path, str | Path] | None = None,
    dev: int | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    batch_size: int = 32,
    home=None,
    device: str = "cpu",
    dtype=None,
    split: tuple[int, int, Callable[[object], list]] | None = None,
) -> dict | None:
    """The AER table of a model (see the module docstring). ``methods``: one row per attention
    reading (``attention``, ``shift``, ``guided``; default :data:`DEFAULT_METHODS`); ``layer``/``head`` (1-based) pick a
    cross-attention layer or head for them; Shift-Att without ``layer`` uses the layer with the best
    dev AER when there are dev pairs. ``gold``: ``(source, target, gold)`` files of a user's gold
    set (else the built-in Spanish–English one), whose first ``dev`` pairs are for choosing.
    ``both_ways``: links are the symmetrisation of each matrix's row and column argmaxes, or, with
    ``reverse_model`` (a model of the other direction, read with its default method), of this model's
    links and that model's (``both_ways`` names the method; default grow-diag-final-and).
    ``split``: ``(rank, world, gather)`` under torchrun: this rank reads every ``world``-th run of
    8 × ``batch_size`` pairs, ``gather`` (``all_gather_object``) brings every rank's per-pair counts (AER's
    sufficient statistics) to all, and rank 0 returns the one-process table; the other ranks None."""
    from ...pretrained import resolve_model

    builtin = gold is None
    verses = load_gold() if builtin else load_gold_files(*gold)
    n_dev = (DEV_VERSES if builtin else 0) if dev is None else dev
    if not 0 <= n_dev < len(verses):
        raise InputError(f"dev must leave at least one scored pair: 0 <= dev < {len(verses)}, got {n_dev}")
    scored = verses[n_dev:]
    path = resolve_model(model)
    aligner = ModelAligner(Translator.load(path, device=device, dtype=dtype))
    # a model of the other direction (English → Spanish) on the built-in gold: it reads each verse's
    # English, writes its Spanish, and its (English, Spanish) links are scored turned around
    reverse = builtin and (aligner.translator.tgt_lang, aligner.translator.src_lang) == GOLD_LANGUAGES
    if methods is None:
        methods = (("guided",) if has_guided_head(aligner.translator) else ()) + DEFAULT_METHODS
    methods = tuple(methods)
    pairs = [(v.target, v.source) if reverse else (v.source, v.target) for v in verses]

    readings: dict[str, AttentionReading] = {}
    one_model_both_ways = None if reverse_model is not None else both_ways
    for k, method in enumerate(dict.fromkeys(methods)):
        base = AttentionReading(method, layer, head, threshold, one_model_both_ways)
        for name, r in _candidates(aligner, base, all_heads and k == 0).items():
            readings[f"{method}{' ' + name if name else ''}"] = r
    names = list(readings)
    back, back_rule = None, ""
    if reverse_model is not None:  # the other direction's links, turned to this model's orientation
        back_translator = Translator.load(resolve_model(reverse_model), device=device, dtype=dtype)
        back = ModelAligner(back_translator, AttentionReading(default_method(back_translator)))
        back_rule = f"; {both_ways or 'grow-diag-final-and'} of those and the links of {Path(str(reverse_model)).name} ({describe_reading(back.reading)})"

    def unit_counts(start: int) -> dict[str, list[AERCounts]]:
        """The per-pair counts of each reading on pairs ``start`` to ``start + 8 × batch_size``: whole
        batches of the forward pass and a whole bucket of the reverse model's (:meth:`ModelAligner.align`),
        so the same numbers as the whole list at once."""
        sub = pairs[start : start + 8 * batch_size]
        attention: dict[str, list] = {n: [] for n in names}
        for b in range(0, len(sub), batch_size):
            for n, wa in zip(names, aligner.word_attentions(sub[b : b + batch_size], list(readings.values()))):
                attention[n].extend(wa)
        links = {n: [set() if wa is None else readings[n].links(wa) for wa in attention[n]] for n in names}
        if back is not None:
            back_links = list(back.align(sub, batch_size=batch_size, reverse=True))
            rule = both_ways or "grow-diag-final-and"
            links = {n: [symmetrize(f, b or set(), rule) for f, b in zip(per, back_links)] for n, per in links.items()}
        if reverse:
            links = {n: [invert(x) for x in per_pair] for n, per_pair in links.items()}
        return {n: per_verse_counts(links[n], verses[start : start + len(sub)]) for n in names}

    rank, world, gather = split or (0, 1, None)
    starts = list(range(0, len(pairs), 8 * batch_size))
    done = [(start, unit_counts(start)) for start in starts[rank::world]]
    if gather is not None:  # every rank's units, each rank's counts of its pairs
        done = [unit for part in gather(done) for unit in part]
        if rank != 0:
            return None
    counts: dict[str, list[AERCounts]] = {n: [] for n in names}
    for _, unit in sorted(done, key=lambda u: u[0]):
        for n in names:
            counts[n].extend(unit[n])

    def dev_aer(n):
        return round(_total(counts[n][:n_dev]).aer, 4) if n_dev else None

    main_rows = []
    for method in dict.fromkeys(methods):
        n = method
        if method == "shift" and layer is None and f"{method} L1avg" in readings and n_dev:
            n = min((x for x in names if x.startswith(f"{method} L") and x.endswith("avg")), key=dev_aer)
        main_rows.append(
            (n, f"{path.name} {describe_reading(readings[n])}" + (" (layer chosen on dev)" if n != method else ""))
        )
    guided = guided_head(getattr(aligner.translator.model, "config", None))

    def head_label(n: str) -> str:
        r = readings[n]
        is_guided = guided is not None and (r.layer, r.head) == guided[:2]
        return f"{path.name} {describe_reading(r)}" + (" (the guided head)" if is_guided else "")

    rows_spec = list(main_rows)
    best = None
    per_layer: list[str] = []
    if all_heads and len(readings) > 1:
        first = methods[0]
        per_layer = [n for n in names if n.startswith(first + " L")]
        rows_spec += [(n, head_label(n)) for n in per_layer]
        heads = [n for n in per_layer if not n.endswith("avg")]
        if heads and n_dev:
            best = min(heads, key=dev_aer)

    def row(label: str, per_verse: list[AERCounts], with_dev: str | None = None) -> dict:
        scored_counts = per_verse[n_dev:]
        lo, hi = aer_interval(scored_counts, samples=samples, seed=seed)
        out = {"name": label, **_total(scored_counts).to_dict(), "aer_95ci": [round(lo, 4), round(hi, 4)]}
        if with_dev is not None:
            out["dev_aer"] = dev_aer(with_dev)
        return out

    def which(r: dict, n: str) -> dict:  # which attention a row read
        reading = readings[n]
        r.update(method=reading.method, layer=reading.layer, head=reading.head, input_step=reading.shifted)
        r["per_layer"] = n in per_layer  # one of --all-heads' rows: a layer's head mean or one head
        return r

    rows = [which(row(label, counts[n], n), n) for n, label in rows_spec]
    best_row = which(row(f"{head_label(best)} (best head on dev)", counts[best], best), best) if best else None
    refs = []
    ref_counts: list[list[AERCounts]] = []
    if references:
        diag = [diagonal_links(len(v.source), len(v.target)) for v in verses]
        ref_counts.append(per_verse_counts(diag, verses))
        refs.append(row("diagonal baseline", ref_counts[-1]))
        if eflomal_available():
            ef = gold_eflomal_links(verses, builtin=builtin, home=home)
            ref_counts.append(per_verse_counts(ef, verses))
            refs.append(row("eflomal (unsupervised, grow-diag-final-and)", ref_counts[-1]))
        else:
            refs.append({"name": f"eflomal: {EFLOMAL_MISSING}", "skipped": True})

    # paired comparisons with the first row, on the scored pairs
    first = counts[rows_spec[0][0]][n_dev:]
    others = [(r, counts[n][n_dev:]) for r, (n, _) in zip(rows[1:], rows_spec[1:])]
    others += [(best_row, counts[best][n_dev:])] if best_row else []
    others += list(zip([r for r in refs if not r.get("skipped")], [c[n_dev:] for c in ref_counts]))
    for r, c in others:
        d = paired_aer_difference(c, first, samples=samples, seed=seed)
        r["vs_first"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}
    return {
        "model": path.name,
        "guided_head": None if guided is None else {"layer": guided[0], "head": guided[1]},
        "gold": ("built-in es-en gold set" + (", read the other way (the model translates en → es)" if reverse else ""))
        if builtin
        else str(gold[2]),
        "scored_verses": len(scored),
        "dev_verses": n_dev,
        "bootstrap": {"samples": samples, "seed": seed, "confidence": 0.95, "unit": "scored pair"},
        "rule": "links: each target word → its argmax source word (word attention = mean over the target "
        "word's pieces of the sum over the source word's pieces)"
        + (f", plus every pair ≥ {threshold}" if threshold is not None else "")
        + (
            f"; {both_ways} of those and each source word's argmax target word"
            if one_model_both_ways not in (None, ROWS_ONLY)
            else f"; for a guided head, the {GUIDED_BOTH_WAYS} of those and each source word's argmax target word"
            if one_model_both_ways is None and "guided" in methods
            else ""
        )
        + back_rule,
        "rows": rows,
        "best_head": best_row,
        "references": refs,
    }
