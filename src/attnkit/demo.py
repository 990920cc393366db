"""``make demo`` / ``attnkit demo``: the main job, end to end, on the shipped models.

1. prepare the verse-aligned Spanish/English Bible (cached after the first run);
2. translate a handful of held-out test verses with the shipped RNNsearch (beam 5) and print
   source, reference and output;
3. write their alignment heatmaps (target words × source words) to a PNG;
4. score RNNsearch (and RNNencdec, when shipped) on a 200-verse slice of the test split;
5. caption a few held-out Fashion-MNIST scenes with the shipped captioners, when present;
6. write ``explorer.html``, the attention explorer's offline page for those verses and scenes.

Its pictures and page go into ``out_dir`` (default ``out/demo``): a new or empty folder, or one an
earlier demo wrote (its ``attnkit-files.json`` lists what the demo wrote; :mod:`attnkit.output_folder`);
each file is named there before it is written, and a file of the user's in the way is refused.
"""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

from .output_folder import WrittenFolder
from .pretrained import PRETRAINED_DIR
from .tasks.captioning.demo import DEMO_KIND

DEMO_VERSES = 5
BLEU_SLICE = 200


def _rule(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)))


def run_demo(*, home=None, out_dir: Path = Path("out/demo"), device: str = "cpu", dtype=None) -> dict:
    from .data.datasets.bible import load_pairs, prepare_bible
    from .service import ModelKind, open_model
    from .tasks.translation import corpus_scores
    from .viz import plot_alignments

    out_dir = Path(out_dir)
    folder = WrittenFolder.open(out_dir, DEMO_KIND, adopt=_earlier_demo)  # before any work: a user's is refused
    t0 = time.perf_counter()
    _rule("Data: Reina-Valera 1909 (es) and World English Bible (en), verse-aligned")
    path = prepare_bible(home=home)
    test = load_pairs("test", home=home)
    print(f"corpus {path}; {len(test)} held-out test verses (whole chapters never seen in training)")

    model_dir = PRETRAINED_DIR / "rnnsearch-es-en"
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"the shipped model {model_dir} is missing; train one with `attnkit train translation`")
    tr = open_model(model_dir, device=device, precision=dtype, kind=ModelKind.TRANSLATOR).impl
    _rule(f"Translating {DEMO_VERSES} held-out verses with RNNsearch (beam 5)")
    # a spread of lengths: short to long, where attention matters most
    by_len = sorted(test[:400], key=lambda p: len(p.src.split()))
    picks = [by_len[int(i * (len(by_len) - 1) / (DEMO_VERSES - 1))] for i in range(DEMO_VERSES)]
    results = tr.translate([p.src for p in picks], beam_size=5, return_attention=True)
    for p, r in zip(picks, results):
        print(f"\n[{p.ref}]  ({len(p.src.split())} words)")
        for label, text in (("source", p.src), ("reference", p.tgt), ("RNNsearch", r.translation)):
            print(textwrap.fill(text, width=100, initial_indent=f"  {label:>10}: ", subsequent_indent=" " * 14))
    shown = [(p, r) for p, r in zip(picks, results) if len(p.src.split()) <= 35][-3:]  # readable sizes
    heat = plot_alignments(
        [(r.attention, r.source_pieces, r.target_pieces, p.ref) for p, r in shown],
        folder.claim("alignment.png")[0],
        ncols=1,
    )
    print(f"\nalignment heatmaps (target pieces × source pieces): {heat}")

    _rule(f"Test BLEU on the first {BLEU_SLICE} test verses (greedy, sacrebleu)")
    slice_ = test[:BLEU_SLICE]
    scores = {}
    for name in ("rnnsearch-es-en", "rnnencdec-es-en", "transformer-es-en"):
        d = PRETRAINED_DIR / name
        if not (d / "config.json").is_file():
            continue
        m = (
            tr
            if name == "rnnsearch-es-en"
            else open_model(d, device=device, precision=dtype, kind=ModelKind.TRANSLATOR).impl
        )
        t1 = time.perf_counter()
        hyps = [h.translation for h in m.translate([p.src for p in slice_], beam_size=1)]
        sc = corpus_scores(hyps, [p.tgt for p in slice_])
        scores[name] = sc
        print(f"  {name:<20} BLEU {sc['bleu']:6.2f}   chrF {sc['chrf']:6.2f}   ({time.perf_counter() - t1:.1f} s)")

    captions = _caption_demo(home, folder)
    explorer = _explorer_page(home, folder, [p.src for p, _ in shown], device, dtype)
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s; pictures in {out_dir}/")
    return {"scores": scores, "alignment_png": str(heat), "captions": captions, "explorer": str(explorer)}


_DEMO_FILE = re.compile(r"^(alignment\.png|explorer\.html|[a-z0-9-]+-scene\d+\.png)$")


def _earlier_demo(path: Path) -> list[str] | None:
    """The files of a demo folder written before manifests (only the demo's own names, all plain files), to
    adopt; None when anything else is in it."""
    entries = list(path.iterdir())
    if all(p.is_file() and not p.is_symlink() and _DEMO_FILE.match(p.name) for p in entries):
        return [p.name for p in entries]
    return None


def _explorer_page(home, folder: WrittenFolder, sources: list[str], device="cpu", dtype=None) -> Path:
    """The explorer's offline page for the demo verses (every shipped translator) and scenes (every
    shipped captioner), and the command that serves the live one."""
    from .data.datasets.scenes import load_scenes
    from .explorer import write_explorer_html
    from .explorer.app import load_models
    from .explorer.payload import caption_answer, translation_answer
    from .explorer.state import served
    from .service import CaptionRequest, ModelKind, TranslationRequest, analyse
    from .tasks.captioning.demo import demo_picks

    _rule("The attention explorer")
    models = load_models(device=device, dtype=dtype)
    translators = [served(n, ModelKind.TRANSLATOR, tr, models.specs.get(n)) for n, tr in models.translators.items()]
    captioners = [served(n, ModelKind.CAPTIONER, cm, models.specs.get(n)) for n, cm in models.captioners.items()]
    translations = [
        translation_answer(analyse(model, TranslationRequest(src, beam=5, heads=True)))
        for src in sources
        for model in translators
    ]
    captions = []
    if captioners:
        data = load_scenes("test", home, canvas=captioners[0].impl.canvas)
        for i in demo_picks(data)[:2]:
            request = CaptionRequest(data[i]["image"], scene=data[i])
            captions += [caption_answer(analyse(model, request)) for model in captioners]
    path = write_explorer_html(
        folder.claim("explorer.html")[0],
        translations=translations,
        captions=captions,
        models=list(models.info.values()),
    )
    print(f"offline page for these verses and scenes (opens in any browser, no server): {path}")
    print("explore any sentence or image live: attnkit serve   (then open http://127.0.0.1:8000/)")
    return path


def _caption_demo(home, folder: WrittenFolder) -> dict | None:
    """Caption a few held-out scenes with the shipped captioners (Show, Attend and Tell), when they exist."""
    soft = PRETRAINED_DIR / "captioner-soft"
    if not (soft / "config.json").is_file():
        return None
    from .tasks.captioning import caption_demo

    _rule("Show, Attend and Tell: captioning held-out Fashion-MNIST scenes")
    return caption_demo(
        home=home,
        out_dir=folder.path,
        folder=folder,
        model_dirs=[d for d in (soft, PRETRAINED_DIR / "captioner-hard") if (d / "config.json").is_file()],
    )
