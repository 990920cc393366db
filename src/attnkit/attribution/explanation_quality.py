"""``attnkit evaluate explanations``: every attribution method of a model, scored for plausibility,
faithfulness, sanity and cost.

Translators, on the hand-aligned gold verses (the scored ones, lines 51–150; ``limit`` takes the first
N), each forced to write the verse's reference:

- **plausibility**: AER against the gold links, each target word linked to its argmax source word
  (the rule of ``attnkit evaluate alignment``, on the word-level attributions);
- **faithfulness** (deletion curve): for each target word, remove the source words in the method's
  order, most important first (their pieces replaced by ``<unk>``, so positions stay), and record the
  drop in the forced target word's log-probability ``d_k = log p_0 − log p_k``, read at k = round(j·n/10)
  words removed, j = 0 … 10 (every k for sentences of up to 10 words); the area is the trapezoid rule over
  the fraction removed k/n. A faithful order has a larger area than a random one:
  ``random_area`` is the mean over three random orders (seeded), the floor;
- **sanity** (Adebayo et al. 2018, cascading randomisation): the model's parameters are re-drawn layer
  by layer from the output side (each tensor from a normal with its own mean and standard deviation), and
  after each stage the method's word attributions are compared with the trained model's by Spearman rank
  correlation, per target word, averaged. The score is the correlation with every stage randomised; a
  method above 0.2 there is flagged (it explains the input, not the model). Integrated gradients runs
  here with a fixed 32 points;
- **cost**: milliseconds per verse (the method's own wall-clock time, on this machine, as measured).

Everything but the cost is deterministic.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..alignment.aer import AERCounts, aer_counts, argmax_links
from ..alignment.words import word_spans
from ..errors import InputError
from .forced import ForcedTranslation, forced_translation
from .methods import PREFIX_GROUPS, explain, log_probs_at, methods_for

__all__ = [
    "SANITY_THRESHOLD",
    "evaluate_caption_explanations",
    "evaluate_explanations",
    "format_report",
    "randomisation_stages",
    "spearman",
]

SANITY_THRESHOLD = 0.2
RANDOM_ORDERS = 3
#: the deletion curve is read at k = round(j·n / DELETION_POINTS) words removed, j = 0 … DELETION_POINTS
DELETION_POINTS = 10


# ---------------------------------------------------------------------------------------- helpers
def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    _, inverse = np.unique(x, return_inverse=True)
    return (np.bincount(inverse, weights=ranks) / np.bincount(inverse))[inverse]  # ties share their mean rank


def spearman(a, b) -> float:
    """Spearman's rank correlation of two equal-length vectors (ties get average ranks); NaN when one is constant."""
    ra, rb = _average_ranks(np.asarray(a, dtype=np.float64)), _average_ranks(np.asarray(b, dtype=np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def randomisation_stages(model) -> list[list[torch.nn.Parameter]]:
    """The parameters in cascade order, output side first: the model's own parameters (output bias), then
    its children from the last registered to the first, a stack of layers (``nn.ModuleList``) one layer
    at a time from the top."""
    stages: list[list[torch.nn.Parameter]] = []

    def walk(module):
        own = list(module.parameters(recurse=False))
        if own:
            stages.append(own)
        for child in reversed(list(module.children())):
            if isinstance(child, torch.nn.ModuleList):
                for layer in reversed(list(child)):
                    if any(True for _ in layer.parameters()):
                        stages.append(list(layer.parameters()))
            elif any(isinstance(c, torch.nn.ModuleList) for c in child.children()):
                walk(child)
            elif any(True for _ in child.parameters()):
                stages.append(list(child.parameters()))

    walk(model)
    return stages


@torch.no_grad()
def _randomise(params: list[torch.nn.Parameter], generator: torch.Generator) -> None:
    for p in params:
        std = float(p.float().std()) if p.numel() > 1 else 0.0
        mean = float(p.float().mean())
        noise = torch.randn(p.shape, generator=generator, dtype=torch.float32)
        p.copy_((noise * (std if std > 0 else 1.0) + mean).to(p.dtype))


def _deletion_areas(model, pair: ForcedTranslation, orders: list[list[list[int]]], unk_id: int) -> list[list[float]]:
    """For each order set (a list with one source-word order per target word), the deletion area of each
    target word (see the module docstring). Each source variant runs once, whichever orders ask for it,
    and only as far into the target as its last asked word (:func:`~attnkit.attribution.methods.log_probs_at`)."""
    src_spans, tgt_spans = word_spans(pair.source_pieces), word_spans(pair.target_pieces)
    n = len(src_spans)
    ks = sorted({round(j * n / DELETION_POINTS) for j in range(DELETION_POINTS + 1)})  # 0 … n
    variants: dict[frozenset, int] = {}
    asked: set[tuple[int, int]] = set()  # (variant, target word)
    for order_set in orders:
        for i, order in enumerate(order_set):
            for k in ks:
                asked.add((variants.setdefault(frozenset(order[:k]), len(variants)), i))
    sources = pair.src[None].repeat(len(variants), 1)  # (variants, S)
    for removed, r in variants.items():
        for w in removed:
            sources[r, src_spans[w]] = unk_id
    entries = sorted((r, i, t) for r, i in asked for t in tgt_spans[i])
    rows = torch.tensor([r for r, _, _ in entries], dtype=torch.long)
    positions = torch.tensor([t for _, _, t in entries], dtype=torch.long)
    lengths = torch.full((1,), sources.shape[1], dtype=torch.long)

    def features(ids, length):
        out, _ = model(
            sources[ids], lengths.expand(len(ids)), pair.tgt_in[None, :length].expand(len(ids), -1), features_only=True
        )
        return out

    with torch.no_grad():
        piece_lp = log_probs_at(
            model, features, pair.tgt, positions, rows, groups=max(PREFIX_GROUPS, len(variants) // 64)
        )
    lp: dict[tuple[int, int], float] = {}
    for (r, i, _), v in zip(entries, piece_lp.tolist()):
        lp[r, i] = lp.get((r, i), 0.0) + v  # a word's log p: the sum over its pieces
    base = variants[frozenset()]
    areas = []
    for order_set in orders:
        per_word = []
        for i, order in enumerate(order_set):
            drops = [lp[base, i] - lp[variants[frozenset(order[:k])], i] for k in ks]
            per_word.append(float(np.trapezoid(drops, [k / n for k in ks])) if n > 0 else 0.0)
        areas.append(per_word)
    return areas


# ---------------------------------------------------------------------------------------- the evaluation
#: what a saved report must share with a new run for its method rows to be reused (``resume``)
RUN_KEYS = ("model", "kind", "verses", "scenes", "sanity_verses", "sanity_scenes", "seed", "random_area")


def _reusable_rows(resume: dict | None, report: dict) -> dict:
    """The finished method rows of ``resume`` (an earlier, maybe partial, report), which must have been made
    with the same model, items, sanity items, seed and random floor (else an :class:`InputError` naming what
    differs, before anything is scored)."""
    if not resume:
        return {}
    differ = [f"{k} {resume.get(k)!r} vs {report.get(k)!r}" for k in RUN_KEYS if resume.get(k) != report.get(k)]
    if differ:
        raise InputError(f"the report to resume was made with other settings ({', '.join(differ)}); start afresh")
    return {m: r for m, r in resume.get("methods", {}).items() if isinstance(r, dict) and "sanity" in r}


def _run_methods(report, names, resume, score, sanity, on_method, progress) -> dict:
    """Fill ``report["methods"]`` one method at a time: its scores (``score(m) -> row``), then its sanity
    (``sanity(m) -> dict``); after each, ``on_method(report)`` (the CLI saves the partial report there).
    Finished rows of ``resume`` are kept, those of methods not asked this time included (at the end)."""
    kept = _reusable_rows(resume, report)
    names = list(names) + [m for m in kept if m not in names]
    report["complete"] = False
    for m in names:
        if m in kept:
            report["methods"][m] = kept[m]
            report.setdefault("resumed", []).append(m)
        else:
            if progress is not None:
                progress(m, "scoring")
            row = score(m)
            if progress is not None:
                progress(m, "sanity")
            row["sanity"] = sanity(m)
            report["methods"][m] = row
        if on_method is not None:
            on_method(report)
    report["complete"] = True
    return report


@dataclass
class TranslatorRun:
    """What every verse of a translator's evaluation needs, made once: the model, the methods, the verses, their
    forced pairs and their random deletion orders (drawn verse after verse from one seeded generator, so a
    verse's orders depend on the verses before it: they are drawn here, whichever verses a process scores)."""

    path: Path
    tr: object
    names: list[str]
    verses: list
    pairs: list[ForcedTranslation]
    random_orders: list[list[list[list[int]]]]
    sanity_verses: int
    seed: int

    def random_areas(self, k: int) -> list[float]:
        """Verse ``k``'s deletion areas under its random orders: every target word of each order in turn."""
        orders = _deletion_areas(self.tr.model, self.pairs[k], self.random_orders[k], self.tr.tokenizer.unk_id)
        return [w for a in orders for w in a]

    def score_verse(self, m: str, k: int) -> tuple[AERCounts, list[float], float, torch.Tensor]:
        """Method ``m`` on verse ``k``: its AER counts, each target word's deletion area, the method's seconds,
        and its word attributions ``(target words, source words)``."""
        v, p = self.verses[k], self.pairs[k]
        att = explain(self.tr, "", method=m, pair=p)
        _, _, words = att.word_scores()
        orders = [[int(j) for j in torch.argsort(row, descending=True, stable=True)] for row in words]
        areas = _deletion_areas(self.tr.model, p, [orders], self.tr.tokenizer.unk_id)[0]
        return aer_counts(argmax_links(words), v.sure, v.possible), areas, att.seconds, words

    def attributions(self, m: str):
        """``f(model, k)``: method ``m``'s word attributions of verse ``k`` by ``model`` (a randomised copy)."""
        from ..tasks.translation import Translator

        steps = 32 if m == "integrated_gradients" else None

        def f(model, k):
            shadow = Translator(model, self.tr.tokenizer, src_tokenizer=self.tr.src_tokenizer)
            return explain(shadow, "", method=m, pair=self.pairs[k], steps=steps).word_scores()[2]

        return f

    def report_head(self, floor: float) -> dict:
        """The report's first keys, before the methods' rows (``floor``: the mean random area)."""
        return {
            "model": self.path.name,
            "kind": getattr(self.tr.model, "model_type", "?"),
            "verses": len(self.verses),
            "sanity_verses": self.sanity_verses,
            "seed": self.seed,
            "random_area": round(floor, 4),
            "methods": {},
        }


def open_translator_run(
    model,
    *,
    methods: list[str] | None = None,
    limit: int | None = None,
    sanity_verses: int = 3,
    seed: int = 0,
    gold_dir=None,
    verses=None,
    device: str = "cpu",
    dtype=None,
) -> TranslatorRun:
    """Load the translator and the verses of :func:`evaluate_explanations` (the same arguments)."""
    from ..alignment.gold import DEV_VERSES, load_gold
    from ..pretrained import resolve_model
    from ..tasks.translation import Translator
    from .methods import canonical_method

    path = resolve_model(model)
    tr = Translator.load(path, device=device, dtype=dtype)
    tr.model.eval()
    names = methods_for(tr) if not methods else [canonical_method(m) for m in methods]
    unknown = [m for m in names if m not in methods_for(tr)]
    if unknown:
        from .methods import UnknownMethodError

        raise UnknownMethodError(f"{path.name} has no {', '.join(unknown)}; it has: {', '.join(methods_for(tr))}")
    verses = load_gold(gold_dir)[DEV_VERSES:] if verses is None else list(verses)
    if limit is not None:
        verses = verses[:limit]
    pairs = [forced_translation(tr, " ".join(v.source), " ".join(v.target)) for v in verses]
    rng = np.random.default_rng(seed)
    random_orders = []
    for p in pairs:
        n_src, n_tgt = len(word_spans(p.source_pieces)), len(word_spans(p.target_pieces))
        random_orders.append([[list(rng.permutation(n_src)) for _ in range(n_tgt)] for _ in range(RANDOM_ORDERS)])
    return TranslatorRun(path, tr, names, verses, pairs, random_orders, min(sanity_verses, len(verses)), seed)


def method_row(counts: AERCounts, areas: list[float], seconds: list[float], random_area: float) -> dict:
    """A method's row from its summed AER counts, every target word's deletion area (in verse order) and every
    verse's seconds: the one formula, whether one process scored the verses or several."""
    return {
        **{k: v for k, v in counts.to_dict().items() if k in ("aer", "precision", "recall")},
        "deletion_area": round(float(np.mean(areas)), 4),
        "random_area": random_area,
        "ms_per_sentence": round(1000 * float(np.mean(seconds)), 1),
    }


def finish_report(report: dict) -> dict:
    """Name the methods better than raw attention on both AER and deletion area (when attention was scored)."""
    attention = report["methods"].get("attention")
    if attention is not None:
        better = [
            m
            for m, r in report["methods"].items()
            if m != "attention" and r["aer"] < attention["aer"] and r["deletion_area"] > attention["deletion_area"]
        ]
        report["beats_attention_on_aer_and_deletion"] = better
    return report


def evaluate_explanations(
    model,
    *,
    methods: list[str] | None = None,
    limit: int | None = None,
    sanity_verses: int = 3,
    seed: int = 0,
    gold_dir=None,
    verses=None,
    device: str = "cpu",
    dtype=None,
    progress=None,
    on_method=None,
    resume: dict | None = None,
) -> dict:
    """The explanation scores of a translation model (see the module docstring): one entry per method.
    ``verses``: gold verses to score instead of the scored ones (:func:`attnkit.alignment.gold.load_gold`).
    ``progress(method, stage, done=None, total=None)`` reports as it goes; ``on_method(report)`` is called
    with the report so far after each method; ``resume``: an earlier (partial) report of the same run,
    whose finished methods are kept instead of scored again. The same report, the verses split over
    processes: :mod:`attnkit.attribution.explanation_verses`."""
    run = open_translator_run(
        model,
        methods=methods,
        limit=limit,
        sanity_verses=sanity_verses,
        seed=seed,
        gold_dir=gold_dir,
        verses=verses,
        device=device,
        dtype=dtype,
    )
    if progress is not None:
        progress("random order", "scoring")
    random_area = [w for k in range(len(run.verses)) for w in run.random_areas(k)]
    report = run.report_head(float(np.mean(random_area)))
    trained_words: dict[str, list] = {}

    def score(m: str) -> dict:
        counts, areas, seconds = AERCounts(), [], []
        trained_words[m] = []
        for k in range(len(run.verses)):
            c, a, s, words = run.score_verse(m, k)
            counts = counts + c
            areas.extend(a)
            seconds.append(s)
            trained_words[m].append(words)
            if progress is not None:
                progress(m, "scoring", k + 1, len(run.verses))
        return method_row(counts, areas, seconds, report["random_area"])

    def sanity(m: str) -> dict:  # after score(m), which keeps the trained model's word attributions
        return _sanity(run.tr.model, trained_words[m], report["sanity_verses"], run.attributions(m), seed, min_length=3)

    _run_methods(report, run.names, resume, score, sanity, on_method, progress)
    return finish_report(report)


def _sanity(model, trained, n_items, attributions, seed, *, min_length=1) -> dict:
    """Cascading randomisation (see the module docstring) for one method: a copy of ``model`` re-drawn stage
    by stage (:func:`randomisation_stages`, seeded, so every method meets the same randomised weights),
    and after each stage the mean Spearman correlation, over the first ``n_items`` items' rows of at least
    ``min_length`` entries, between ``trained[k]`` and ``attributions(randomised model, k)``."""
    if n_items == 0:
        return sanity_summary([])
    rhos = sanity_rhos(model, trained, range(n_items), attributions, seed, min_length=min_length)
    return sanity_summary([[r for per_item in stage for r in per_item] for stage in rhos])


def sanity_rhos(model, trained, items, attributions, seed, *, min_length=1) -> list[list[list[float]]]:
    """The Spearman correlations :func:`_sanity` averages: for each randomisation stage, for each item ``k`` of
    ``items``, one per row of at least ``min_length`` entries (NaN kept). An item's values do not depend on
    the other items (every copy is re-drawn from the same seed), so items scored apart combine exactly."""
    shadow = copy.deepcopy(model).eval()
    generator = torch.Generator().manual_seed(seed)
    out = []
    for stage in randomisation_stages(shadow):
        _randomise(stage, generator)
        per_item = []
        for k in items:
            words = attributions(shadow, k)
            per_item.append(
                [spearman(a, b) for a, b in zip(trained[k].tolist(), words.tolist()) if len(a) >= min_length]
            )
        out.append(per_item)
    return out


def sanity_summary(by_stage_rhos: list[list[float]]) -> dict:
    """A method's sanity entry from each stage's correlations (every item's, in item order): their mean with NaN
    left out; the score is the last stage's, and passes at or below :data:`SANITY_THRESHOLD`. No items: NaN."""
    if not by_stage_rhos:
        return {"spearman": float("nan"), "by_stage": [], "passes": False}
    by_stage = []
    for rhos in by_stage_rhos:
        rhos = [r for r in rhos if not math.isnan(r)]
        by_stage.append(round(float(np.mean(rhos)), 4) if rhos else float("nan"))
    final = by_stage[-1]
    return {"spearman": final, "by_stage": by_stage, "passes": bool(final <= SANITY_THRESHOLD)}


# ---------------------------------------------------------------------------------------- captioners
@torch.no_grad()
def _caption_deletion_areas(model, pair, words: list[int], orders: list[list[list[int]]]) -> list[list[float]]:
    """Captioners' deletion areas: the grid cells of the image zeroed (black, the scenes' background) in each
    order, the drop in log p of caption word ``words[i]`` read at DELETION_POINTS + 1 points."""
    from .methods import _cell_index, caption_log_probs

    h, w = model.grid_shape
    n = h * w
    canvas = pair.image.shape[-1]
    cell_of = _cell_index(canvas, (h, w), pair.image.device).reshape(canvas, canvas)
    ks = sorted({round(j * n / DELETION_POINTS) for j in range(DELETION_POINTS + 1)})
    variants: dict[frozenset, int] = {}
    for order_set in orders:
        for order in order_set:
            for k in ks:
                variants.setdefault(frozenset(order[:k]), len(variants))
    images = pair.image[None].repeat(len(variants), 1, 1, 1)  # (N, 1, C, C)
    for removed, r in variants.items():
        if removed:
            keep = ~torch.isin(cell_of, torch.tensor(sorted(removed), device=cell_of.device))
            images[r, 0] *= keep
    f = caption_log_probs(model, pair)
    lp = torch.cat([f(chunk) for chunk in images.split(256)])  # (N, T)
    base = lp[variants[frozenset()]]
    areas = []
    for order_set in orders:
        areas.append(
            [
                float(
                    np.trapezoid([float(base[t] - lp[variants[frozenset(o[:k])], t]) for k in ks], [k / n for k in ks])
                )
                for t, o in zip(words, order_set)
            ]
        )
    return areas


def evaluate_caption_explanations(
    model,
    *,
    methods: list[str] | None = None,
    limit: int | None = 100,
    sanity_verses: int = 3,
    seed: int = 0,
    home=None,
    scenes=None,
    device: str = "cpu",
    dtype=None,
    progress=None,
    on_method=None,
    resume: dict | None = None,
) -> dict:
    """A captioner's explanation scores on held-out test scenes forced to their reference captions:
    plausibility is the mass inside the named item's box (the attention-correctness measure, for every
    method), faithfulness and sanity as for translators (cells zeroed; item words only), cost in ms per scene.
    ``progress``, ``on_method`` and ``resume`` as in :func:`evaluate_explanations`."""
    from ..pretrained import resolve_model
    from ..tasks.captioning import Captioner, attention_mass_in_box, words_to_items
    from .forced import forced_caption
    from .methods import canonical_method, explain_caption

    path = resolve_model(model)
    cm = Captioner.load(path, device=device, dtype=dtype)
    cm.model.eval()
    names = methods_for(cm) if not methods else [canonical_method(m) for m in methods]
    if scenes is None:
        from ..data.datasets.scenes import load_scenes

        scenes = load_scenes("test", home, canvas=cm.canvas)
    items_all = [scenes[i] for i in range(min(len(scenes), limit or len(scenes)))]
    grid = tuple(cm.model.grid_shape)
    pairs, named = [], []
    for it in items_all:
        pair = forced_caption(cm, it["image"], it["caption"])
        items = words_to_items(pair.words, it["classes"].tolist(), it["places"].tolist())
        pairs.append(pair)
        named.append([(t, k) for t, k in enumerate(items) if k >= 0])
    rng = np.random.default_rng(seed)
    n_cells = grid[0] * grid[1]
    random_area = []
    for pair, nm in zip(pairs, named):
        if nm:
            orders = [[list(rng.permutation(n_cells)) for _ in nm] for _ in range(RANDOM_ORDERS)]
            random_area += [a for o in _caption_deletion_areas(cm.model, pair, [t for t, _ in nm], orders) for a in o]
    report: dict = {
        "model": path.name,
        "kind": "captioner",
        "scenes": len(items_all),
        "sanity_scenes": min(sanity_verses, len(items_all)),
        "seed": seed,
        "random_area": round(float(np.mean(random_area)), 4) if random_area else None,
        "methods": {},
    }
    trained: dict[str, list] = {}

    def score(m: str) -> dict:
        masses, areas, seconds = [], [], []
        trained[m] = []
        for i, (it, pair, nm) in enumerate(zip(items_all, pairs, named)):
            att = explain_caption(cm, it["image"], method=m, pair=pair)
            seconds.append(att.seconds)
            trained[m].append(att.scores)
            if progress is not None:
                progress(m, "scoring", i + 1, len(pairs))
            if not nm:
                continue
            boxes = it["boxes"].numpy()[[k for _, k in nm]]
            masses += attention_mass_in_box(att.scores[[t for t, _ in nm]].numpy(), grid, cm.canvas, boxes).tolist()
            orders = [[int(j) for j in torch.argsort(att.scores[t], descending=True, stable=True)] for t, _ in nm]
            areas += _caption_deletion_areas(cm.model, pair, [t for t, _ in nm], [orders])[0]
        return {
            "mass_in_box": round(float(np.mean(masses)), 4) if masses else None,
            "deletion_area": round(float(np.mean(areas)), 4) if areas else None,
            "random_area": report["random_area"],
            "ms_per_sentence": round(1000 * float(np.mean(seconds)), 1),
        }

    def sanity(m: str) -> dict:  # after score(m), which keeps the trained model's cell attributions
        def attributions(shadow_model, k):
            steps = 32 if m == "integrated_gradients" else None
            shadow = Captioner(shadow_model, cm.vocab)
            return explain_caption(shadow, items_all[k]["image"], method=m, pair=pairs[k], steps=steps).scores

        return _sanity(cm.model, trained[m], report["sanity_scenes"], attributions, seed)

    return _run_methods(report, names, resume, score, sanity, on_method, progress)


def format_report(report: dict) -> str:
    """The table ``attnkit evaluate explanations`` prints."""
    if report.get("kind") == "captioner":
        return _format_caption_report(report)
    lines = [
        f"{report['model']} ({report['kind']}): {report['verses']} gold verses forced to their reference; "
        f"sanity on {report['sanity_verses']}",
        f"{'method':<22} {'AER':>6} {'P':>6} {'R':>6} {'deletion':>9} {'random':>7} {'sanity ρ':>9}  {'':4} {'ms/verse':>9}",
    ]
    for m, r in report["methods"].items():
        s = r.get("sanity", {})
        flag = "" if s.get("passes", True) else "FLAG"
        lines.append(
            f"{m:<22} {r['aer']:>6.3f} {r['precision']:>6.3f} {r['recall']:>6.3f} {r['deletion_area']:>9.3f} "
            f"{r['random_area']:>7.3f} {s.get('spearman', float('nan')):>9.3f}  {flag:4} {r['ms_per_sentence']:>9.1f}"
        )
    if "beats_attention_on_aer_and_deletion" in report:
        better = report["beats_attention_on_aer_and_deletion"]
        lines.append(
            "better than raw attention on both AER and deletion area: " + (", ".join(better) if better else "none")
        )
    return "\n".join(lines)


def _format_caption_report(report: dict) -> str:
    fmt = lambda x, d=3: "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"
    lines = [
        f"{report['model']} (captioner): {report['scenes']} test scenes forced to their reference; "
        f"sanity on {report['sanity_scenes']}",
        f"{'method':<22} {'mass in box':>11} {'deletion':>9} {'random':>7} {'sanity ρ':>9}  {'':4} {'ms/scene':>9}",
    ]
    for m, r in report["methods"].items():
        s = r.get("sanity", {})
        flag = "" if s.get("passes", True) else "FLAG"
        lines.append(
            f"{m:<22} {fmt(r['mass_in_box']):>11} {fmt(r['deletion_area']):>9} {fmt(r['random_area']):>7} "
            f"{fmt(s.get('spearman')):>9}  {flag:4} {r['ms_per_sentence']:>9.1f}"
        )
    return "\n".join(lines)
