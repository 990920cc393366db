"""attnkit's beam search through the Hugging Face adapter against ``model.generate(num_beams=5)``.

    PYTHONPATH=src .venv/bin/python benchmarks/hf_beam.py               # the first 100 test verses, 1 thread
    PYTHONPATH=src .venv/bin/python benchmarks/hf_beam.py --limit 10    # a quick check that it runs

The shipped Transformer is exported (``attnkit export transformer-es-en OUT --format huggingface``: a
stock ``PegasusForConditionalGeneration``) and the same folder is translated two ways, beam 5:

- **attnkit via HF**: ``Translator.load(OUT)`` — attnkit's batched beam search
  (:func:`attnkit.decoding.beam_search`) stepping the ``transformers`` model through
  :class:`attnkit.hf.seq2seq.HFSeq2Seq` (its own key/value cache);
- **HF generate**: ``AutoModelForSeq2SeqLM.from_pretrained(OUT).generate(num_beams=5)``;
- and, for reference, **attnkit native**: the shipped model itself (``Translator.load("transformer-es-en")``),
  the same network in attnkit's own layers.

Same verses, same batches (sorted by length, ``--batch`` a batch), the same step limit per batch
(``min(200, 2 · longest source + 10)``, attnkit's; ``max_length = 1 +`` that for ``generate``, which
counts its start token), ``torch.set_num_threads(1)``, in one process, batch by batch, the side that
goes first rotating, so that a busy machine slows every side alike. Model loading is not timed; one
small batch warms each side up first. Ratios are ``HF generate seconds / attnkit seconds`` (> 1: attnkit
faster).

**Length penalty, as near as the two allow.** The searches normalise differently: attnkit ranks
finished hypotheses by ``score / ((5 + L) / 6)^α`` (GNMT; default α = 0.6), ``generate`` by
``score / L^λ`` (default λ = 1.0). Two settings are measured:

- ``none``: α = 0 and λ = 0, both rank by the raw log-probability sum: the same objective;
- ``default``: each its own default (α = 0.6, λ = 1.0).

What still differs: the stopping rule. ``generate`` (``early_stopping=False``) keeps a sentence open
until it has 5 finished hypotheses and no live beam can beat the worst of them; attnkit's search stops a
sentence once its best finished hypothesis cannot be beaten by any live beam (log-probabilities only
decrease a raw sum; with α > 0 at the best reachable length), since only the best is returned. The
decoder steps each side ran are counted and reported beside the seconds.

Writes ``benchmarks/results/hf_beam.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.deploy.hf_export import export_huggingface  # noqa: E402
from attnkit.pretrained import resolve_model  # noqa: E402
from attnkit.tasks.translation import Translator, corpus_scores  # noqa: E402

BEAMS = 5
SETTINGS = {"none": (0.0, 0.0), "default": (0.6, 1.0)}  # (attnkit α, generate λ)
SIDES = ("attnkit_hf", "hf_generate", "attnkit_native")


def cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")


def cpu_flags() -> str:
    """The vector extensions the CPU offers (of those that matter to torch's kernels), and torch's pick."""
    try:
        flags = set(next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags")).split())
    except (OSError, StopIteration):
        flags = set()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
    return f"{' '.join(f for f in wanted if f in flags) or 'none listed'}; torch kernels: {torch.backends.cpu.get_cpu_capability()}"


class Steps:
    """Counts the decoder calls of a module (one per search step; ``generate`` and attnkit alike)."""

    def __init__(self, decoder: torch.nn.Module):
        self.n = 0
        decoder.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.n += 1


@torch.no_grad()
def generate(model, tok, part: list[list[int]], *, lam: float) -> list[list[int]]:
    """``model.generate`` on one batch (attnkit's step limit): the tokens without the start token,
    ``</s>`` and padding."""
    longest = max(map(len, part))
    src = torch.full((len(part), longest), tok.pad_token_id, dtype=torch.long)  # (B, S)
    for r, i in enumerate(part):
        src[r, : len(i)] = torch.tensor(i)
    out = model.generate(
        input_ids=src,
        attention_mask=src != tok.pad_token_id,
        num_beams=BEAMS,
        length_penalty=lam,
        do_sample=False,
        max_length=1 + min(200, longest * 2 + 10),
    )
    got = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(tok.eos_token_id)] if tok.eos_token_id in row else row
        got.append([t for t in row if t != tok.pad_token_id])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100, help="the first N test verses (default: 100)")
    ap.add_argument("--batch", type=int, default=20, help="verses a batch (default: 20)")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--home", default=None, help="ATTNKIT_HOME with the prepared Bible corpus")
    ap.add_argument("--out", default=str(HERE / "results" / "hf_beam.json"), help="JSON report")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers import __version__ as tf_version

    pairs = load_pairs("test", home=args.home)[: args.limit]
    srcs, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    tmp = tempfile.TemporaryDirectory()
    folder = export_huggingface(resolve_model("transformer-es-en"), Path(tmp.name) / "hf")
    via_hf = Translator.load(folder)
    native = Translator.load("transformer-es-en")
    gen = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    gen_tok = AutoTokenizer.from_pretrained(folder)
    ids = native.encode_sources(srcs, truncate=True)
    assert via_hf.encode_sources(srcs, truncate=True) == ids, "the exported tokenizer cuts other pieces"
    steps = {
        "attnkit_hf": Steps(via_hf.model.hf.get_decoder()),
        "hf_generate": Steps(gen.get_decoder()),
        "attnkit_native": Steps(native.model.decoder),
    }
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [order[s : s + args.batch] for s in range(0, len(order), args.batch)]

    def run(side: str, part: list[list[int]], alpha: float, lam: float) -> list[list[int]]:
        if side == "hf_generate":
            return generate(gen, gen_tok, part, lam=lam)
        tr = via_hf if side == "attnkit_hf" else native
        return [r.tokens for r in tr.translate_ids(part, beam_size=BEAMS, length_penalty=alpha, batch_size=len(part))]

    for side in SIDES:  # warm-up, not timed
        run(side, ids[:4], *SETTINGS["default"])
    report_rows = {}
    for name in args.settings:
        alpha, lam = SETTINGS[name]
        out = {s: [None] * len(ids) for s in SIDES}
        seconds = dict.fromkeys(SIDES, 0.0)
        n_steps = dict.fromkeys(SIDES, 0)
        for n, chunk in enumerate(batches):
            part = [ids[i] for i in chunk]
            for k in range(len(SIDES)):
                side = SIDES[(n + k) % len(SIDES)]  # who goes first rotates batch by batch
                before = steps[side].n
                t = time.perf_counter()
                got = run(side, part, alpha, lam)
                seconds[side] += time.perf_counter() - t
                n_steps[side] += steps[side].n - before
                for i, g in zip(chunk, got):
                    out[side][i] = g

        def bleu(tokens):
            return round(corpus_scores([native.tokenizer.decode(t) for t in tokens], refs)["bleu"], 2)

        report_rows[name] = {
            "attnkit_alpha": alpha,
            "generate_length_penalty": lam,
            "seconds": {s: round(v, 2) for s, v in seconds.items()},
            "decoder_steps": n_steps,
            "bleu": {s: bleu(out[s]) for s in SIDES},
            "identical_hf_adapter_vs_generate": sum(a == b for a, b in zip(out["attnkit_hf"], out["hf_generate"])),
            "identical_hf_adapter_vs_native": sum(a == b for a, b in zip(out["attnkit_hf"], out["attnkit_native"])),
            "generate_over_attnkit_hf": round(seconds["hf_generate"] / seconds["attnkit_hf"], 2),
            "attnkit_native_over_attnkit_hf": round(seconds["attnkit_native"] / seconds["attnkit_hf"], 2),
        }
    tmp.cleanup()
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "?"
    report = {
        "command": "PYTHONPATH=src python benchmarks/hf_beam.py"
        + (f" --limit {args.limit}" if args.limit != 100 else "")
        + (f" --batch {args.batch}" if args.batch != 20 else ""),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_name()} ({cpu_flags()}), {torch.get_num_threads()} torch thread, "
        f"{len(__import__('os').sched_getaffinity(0))} cores shared with other jobs; load average at the end {load}",
        "torch": torch.__version__,
        "transformers": tf_version,
        "verses": len(ids),
        "batch": args.batch,
        "beams": BEAMS,
        "rows": report_rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print()
    print(
        "| length penalty | attnkit via HF s (steps) | HF generate s (steps) | attnkit native s (steps) |"
        " generate / attnkit-HF | identical adapter vs generate | BLEU HF-adapter / generate / native |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in report_rows.items():
        s, st, b = r["seconds"], r["decoder_steps"], r["bleu"]
        print(
            f"| {name} (α {r['attnkit_alpha']}, λ {r['generate_length_penalty']}) "
            f"| {s['attnkit_hf']} ({st['attnkit_hf']}) | {s['hf_generate']} ({st['hf_generate']}) "
            f"| {s['attnkit_native']} ({st['attnkit_native']}) | **{r['generate_over_attnkit_hf']}×** "
            f"| {r['identical_hf_adapter_vs_generate']} / {len(ids)} "
            f"| {b['attnkit_hf']} / {b['hf_generate']} / {b['attnkit_native']} |"
        )


if __name__ == "__main__":
    main()
