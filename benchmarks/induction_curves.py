"""The phase change of induction heads, read from training logs (Olsson et al. 2022).

Reads the ``train_log.jsonl`` of one or more ``attnkit train language-model`` runs (each given as
``LABEL=RUN_FOLDER``) and writes, per run, the training loss and the induction measurements of every
validation (prefix matching of the best head of the last layer, previous token of the best head of
the first layer, in-context learning) as JSON, a markdown table at each validation, and one figure:
loss above, scores below, against steps, so a loss bump and a score jump at the same steps show as one.

    PYTHONPATH=src .venv/bin/python benchmarks/induction_curves.py two=/work/runs/lm-attn2 one=/work/runs/lm-attn1 \\
        --json benchmarks/results/induction_curves.json --png docs/assets/induction-curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_run(folder: Path) -> dict:
    """The train and valid events of ``folder/train_log.jsonl`` (the last record of a step wins, as a resumed run rewrites it)."""
    train, valid = {}, {}
    for line in (folder / "train_log.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("event") == "train":
            train[r["step"]] = r["loss"]
        elif r.get("event") == "valid":
            valid[r["step"]] = r
    layers = max(
        (
            int(k.rsplit("layer", 1)[1])
            for r in valid.values()
            for k in r
            if k.startswith("induction_prefix_matching_layer")
        ),
        default=0,
    )
    rows = [
        {
            "step": s,
            "valid_loss": r["valid_loss"],
            "prefix_matching_last_layer": r.get(f"induction_prefix_matching_layer{layers}"),
            "induction_head_last_layer": r.get(f"induction_head_layer{layers}"),
            "copying_last_layer": r.get(f"induction_copying_layer{layers}"),
            "previous_token_first_layer": r.get("induction_previous_token_layer1"),
            "in_context_learning": r.get("in_context_learning"),
        }
        for s, r in sorted(valid.items())
    ]
    return {"layers": layers, "train": sorted(train.items()), "valid": rows}


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_FOLDER")
    ap.add_argument("--json", type=Path, help="write the curves here")
    ap.add_argument("--png", type=Path, help="write the figure here")
    ap.add_argument("--every", type=int, default=1, help="table: every Nth validation")
    args = ap.parse_args(argv)
    runs = {}
    for spec in args.runs:
        label, _, folder = spec.partition("=")
        runs[label] = read_run(Path(folder))
    for label, run in runs.items():
        print(f"\n{label} ({run['layers']} layer(s))\n")
        print(
            f"| step | valid loss | prefix matching, layer {run['layers']} | previous token, layer 1 | copying | ICL |"
        )
        print("|---|---|---|---|---|---|")
        for r in run["valid"][:: args.every]:
            print(
                f"| {r['step']} | {r['valid_loss']:.3f} | {_fmt(r['prefix_matching_last_layer'])} | "
                f"{_fmt(r['previous_token_first_layer'])} | {_fmt(r['copying_last_layer'])} | {_fmt(r['in_context_learning'])} |"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
        for label, run in runs.items():
            steps, loss = zip(*run["train"]) if run["train"] else ((), ())
            top.plot(steps, loss, label=f"{label}: training loss")
            v = run["valid"]
            bottom.plot(
                [r["step"] for r in v],
                [r["prefix_matching_last_layer"] for r in v],
                marker=".",
                label=f"{label}: prefix matching, layer {run['layers']}",
            )
            bottom.plot(
                [r["step"] for r in v],
                [r["previous_token_first_layer"] for r in v],
                linestyle="--",
                label=f"{label}: previous token, layer 1",
            )
        top.set_ylabel("loss (nats)")
        top.legend(fontsize=8)
        bottom.set_ylabel("score (best head)")
        bottom.set_xlabel("step")
        bottom.set_ylim(0, 1)
        bottom.legend(fontsize=8)
        fig.tight_layout()
        args.png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
