"""``attnkit models`` and ``attnkit demo``."""

from __future__ import annotations

from .common import _output, _print_json
from .flags import _add_device_flags, _add_json_flag


def cmd_models(args) -> None:
    from ..pretrained import known_models

    infos = known_models(args.home)
    if args.json:
        _print_json([m.to_dict() for m in infos])
        return
    rows = []
    for m in infos:
        sc = m.scores
        beam5 = f", {sc['test_beam5_bleu']:.2f} beam 5" if "test_beam5_bleu" in sc else ""
        if "test_modern_beam5_bleu" in sc:  # the test sources in today's spelling (attnkit.data.spelling)
            beam5 += f" ({sc['test_modern_beam5_bleu']:.2f} in modern spelling)"
        score = (
            f"BLEU {sc['test_bleu']:.2f} {sc.get('decoding', '')}{beam5}"
            if "test_bleu" in sc
            else f"BLEU-4 {sc['test_bleu4']:.2f}, attention correctness {sc['test_attention_correctness']:.3f}"
            if "test_bleu4" in sc
            else _language_model_score(sc)
            if "test_ppl" in sc
            else "not measured"
        )
        pair = f"{m.src_lang}→{m.tgt_lang} {m.corpus}" if m.task == "translation" else "-"
        rows.append([m.name, m.source, m.task, m.model_type, pair, f"{m.size_bytes / 1e6:.1f}MB", score])
    print(_columns(["name", "source", "task", "kind", "pair", "size", "test score"], rows, right={5}))


def _columns(header: list[str], rows: list[list[str]], *, right: set[int] = frozenset()) -> str:
    """A plain-text table: each column as wide as its widest cell, two spaces between columns (so no two
    cells run together, however long a name), the columns in ``right`` aligned right, the last unpadded."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for row in table:
        cells = [
            cell if i == len(row) - 1 else cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# a head that puts at least half its attention where an induction head would (Olsson et al. 2022's
# prefix matching on repeated random tokens) is called one; chance is about 1 / the sequence's length
INDUCTION_HEAD_BAR = 0.5


def _language_model_score(sc: dict) -> str:
    """A language model's line: its test perplexity and its best induction head (layers and heads from 1)."""
    out = f"test perplexity {sc['test_ppl']:.1f}"
    if "induction_prefix_matching" not in sc:
        return out
    if sc["induction_prefix_matching"] < INDUCTION_HEAD_BAR:  # the best head attends elsewhere: say so
        return out + (
            f", no induction head (best: {sc['induction_head']}, prefix matching {sc['induction_prefix_matching']:.2f})"
        )
    return out + (
        f", induction head {sc['induction_head']} (prefix matching {sc['induction_prefix_matching']:.2f}, "
        f"copying {sc['induction_copying']:.2f})"
    )


# ---------------------------------------------------------------- demo
def cmd_demo(args) -> None:
    from ..demo import DEMO_KIND, run_demo
    from ..output_folder import WrittenFolder

    out = _output(args.out, "--out", folder=True)
    WrittenFolder.check(out, DEMO_KIND)  # before the work: a folder of the user's is refused, nothing touched
    run_demo(home=args.home, out_dir=out, device=args.device, dtype=args.precision)


def add_parser(sub) -> None:
    ms = sub.add_parser("models", help="list the shipped and locally trained models ($ATTNKIT_HOME/models)")
    _add_json_flag(ms, "a JSON list")
    ms.set_defaults(func=cmd_models)

    dm = sub.add_parser("demo", help="the main job: translate held-out verses, plot, score")
    dm.add_argument(
        "--out",
        default="out/demo",
        help="folder for the pictures: a new or empty one, or an earlier demo's (its attnkit-files.json lists "
        "what the demo wrote; a file of yours in the way is refused) (default: out/demo)",
    )
    _add_device_flags(dm)
    dm.set_defaults(func=cmd_demo)
