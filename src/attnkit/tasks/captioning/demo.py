"""The captioning part of ``attnkit demo``: caption held-out scenes and draw their overlays."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ...data.datasets.scenes import ScenesDataset, load_scenes
from ...output_folder import WrittenFolder
from .inference import Captioner
from .metrics import words_to_items

# ---------------------------------------------------------------------------------------- demo

DEMO_KIND = "demo"  # the kind of ``attnkit demo``'s output folder (attnkit-files.json), which this part shares


def demo_picks(data: ScenesDataset, k: int = 4) -> list[int]:
    """The first test scenes with 1, 2, 3 and 4 items (a spread of caption lengths)."""
    picks = []
    n_items = data.arrays["n_items"]
    for m in range(1, k + 1):
        idx = np.nonzero(n_items == m)[0]
        if len(idx):
            picks.append(int(idx[0]))
    return picks


def overlay_for_scene(cm: Captioner, item: dict, result: dict, path, title: str | None = None):
    """Write the per-word overlay of a captioned scene, each item word with its true box."""
    wi = words_to_items(result.words, item["classes"].tolist(), item["places"].tolist())
    boxes = [item["boxes"][k].tolist() if k >= 0 else None for k in wi]
    return cm.plot(item["image"], result, path, boxes=boxes, title=title)


def caption_demo(
    *,
    home=None,
    out_dir: Path = Path("out/demo"),
    model_dirs: Sequence[str | Path] = (),
    folder: WrittenFolder | None = None,
) -> dict:
    """Caption ~4 held-out test scenes with each model; print truth vs output; write overlays.

    ``out_dir`` is the demo's folder (:mod:`attnkit.output_folder`): new, empty, or an earlier demo's;
    each overlay is named in its manifest before it is written. ``folder``: that folder already open
    (``attnkit demo`` passes its own, so that one manifest records everything)."""
    if folder is None:
        folder = WrittenFolder.open(out_dir, DEMO_KIND)
    report: dict = {}
    data = None
    for d in model_dirs:
        cm = Captioner.load(d)
        if data is None:
            data = load_scenes("test", home, canvas=cm.canvas)
            picks = demo_picks(data)
        name = Path(d).name
        items = [data[i] for i in picks]
        images = torch.stack([it["image"] for it in items])
        results = cm.caption(images)
        print(f"\n{name} ({cm.config.attention} attention, greedy):")
        rows = []
        for i, (it, r) in enumerate(zip(items, results)):
            ok = "=" if r.caption == it["caption"] else "≠"
            print(f"  scene {picks[i]:>4}  true: {it['caption']}")
            print(f"              {ok} out: {r.caption}")
            png = overlay_for_scene(cm, it, r, folder.claim(f"{name}-scene{picks[i]}.png")[0])
            rows.append({"scene": picks[i], "truth": it["caption"], "output": r.caption, "png": str(png)})
        print("  overlays: " + ", ".join(r["png"] for r in rows))
        report[name] = rows
    return report
