"""Every encoder-only and decoder-only family attnkit reads, with every method ``attnkit explain`` offers
for it (issue 56): does each run, or refuse in one line, and is the captured attention the eager one?

For each family of ``tests/hf_tiny.py`` (``LM_FAMILIES``: tiny random models built offline from their
configs, the shipped tiny tokenizer), saved as a Hugging Face folder:

- **max |captured − eager|**: the self-attention attnkit reads from the model as loaded (its default
  attention implementation, ``sdpa`` but for Gemma 2) against ``output_attentions=True`` of the same
  folder loaded with ``attn_implementation="eager"``, over every layer and head of one verse;
- **every method**, through the command line itself (``attnkit.cli.main``, in-process): the methods are
  read from the registries the command uses, never listed here — ``generation_methods()`` of
  :mod:`attnkit.attribution.generation` for a decoder-only model (its continuation, 3 new tokens),
  ``VIEW_METHODS`` of :mod:`attnkit.cli.explain_hf` for an encoder-only model (the self-attention
  views) — so a method added to a registry appears in the table at the next run. A cell is ``runs``
  (exit status 0), or the one line the command printed (status 2), or ``TRACEBACK`` (a bug).

One more row: the tiny Llama with every attention module running torch's attention itself instead of
through ``transformers``' attention interface (as a remote-code model would): the attention methods
must refuse in one line and the gradient methods, which need no attention, must still run.

A second table: the Python API's context-mixing, logit-lens and routes functions
(:data:`API_METHODS`, which the command's language-model methods call), called in-process on the same tiny models.

Writes the family × method tables into ``docs/reference/model-families.md`` and every number into
``benchmarks/results/lm_families.json``; ``--api-only`` reruns the second table alone (seconds),
keeping the command-line rows already in the JSON::

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lm_families.py [--api-only]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from hf_tiny import LM_FAMILIES, build_tiny, bypass_attention_forward, bypass_interface  # noqa: E402

TEXT = "En el principio creó Dios los cielos y la tierra."
NEW_TOKENS = 3
BYPASS = "llama, attention outside the interface"
NAMES = {  # what people call each family, and a model of it on the hub
    "bert": "BERT",
    "distilbert": "DistilBERT",
    "roberta": "RoBERTa",
    "xlm-roberta": "XLM-R",
    "gpt2": "GPT-2",
    "llama": "Llama 3 (grouped-query)",
    "qwen2": "Qwen 2 / 2.5",
    "qwen3": "Qwen 3 (query/key norms)",
    "mistral": "Mistral (sliding window)",
    "gemma": "Gemma (multi-query)",
    "gemma2": "Gemma 2 (soft-capping, eager)",
    "gemma3_text": "Gemma 3 (query/key norms, local/global)",
    "phi3": "Phi-3",
    "gpt_neox": "GPT-NeoX / Pythia",
    "olmo2": "OLMo 2",
    BYPASS: "Llama whose attention bypasses the interface",
}


def methods_for(sa) -> list[str]:
    """The methods ``attnkit explain`` offers for this kind of model, from the registries it reads."""
    if sa.can_generate:
        from attnkit.attribution.generation import generation_methods

        return list(generation_methods(sa))
    from attnkit.cli.explain_hf import VIEW_METHODS

    return list(VIEW_METHODS)


def max_eager_difference(folder: Path, sa) -> float:
    """max |captured − eager| over every layer and head of :data:`TEXT`."""
    import transformers

    from attnkit.hf.loading import is_causal_lm

    config = transformers.AutoConfig.from_pretrained(folder)
    auto = transformers.AutoModelForCausalLM if is_causal_lm(config) else transformers.AutoModel
    eager = auto.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    ids, _ = sa.encode(TEXT)
    got = sa.self_attention(TEXT).attention  # (L, H, N, N)
    with torch.no_grad():
        expected = torch.stack(eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions)[:, 0]
    return float((got - expected.float()).abs().max())


def run_cli(folder: Path, method: str) -> tuple[str, float]:
    """``attnkit explain`` with ``method`` on ``folder``: ``runs``, the one line it refused with, or TRACEBACK."""
    from attnkit.cli import main

    argv = ["explain", TEXT, "--model", str(folder), "--method", method, "--json"]
    argv += ["--max-new-tokens", str(NEW_TOKENS)]
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except Exception as exc:  # a bug: the command let an exception through
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return f"TRACEBACK: {tb}", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if code == 0:
        json.loads(out.getvalue())  # the JSON the command wrote parses
        return "runs", seconds
    lines = [line for line in err.getvalue().strip().splitlines() if line.strip()]
    line = lines[-1] if lines else f"exit status {code}, nothing on stderr"
    prefix = "attnkit: error: "
    line = line[len(prefix) :] if line.startswith(prefix) else line
    return (line if len(lines) == 1 else f"{len(lines)} lines: {line}"), seconds


def family_row(family: str, root: Path) -> dict:
    import transformers

    from attnkit.hf import load_self_attention
    from attnkit.hf.capture import UntraceableModelError

    base = "llama" if family == BYPASS else family
    model, tok = build_tiny(base)
    folder = root / base
    if not folder.exists():
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    original = transformers.models.llama.modeling_llama.LlamaAttention.forward
    if family == BYPASS:
        transformers.models.llama.modeling_llama.LlamaAttention.forward = bypass_attention_forward
    try:
        sa = load_self_attention(str(folder))
        row = {
            "family": family,
            "name": NAMES.get(family, family),
            "model_type": str(model.config.model_type),
            "kind": "decoder-only" if sa.can_generate else "encoder-only",
            "implementation": str(sa.model.config._attn_implementation),
            "heads": sa.num_heads,
            "kv_heads": sa.num_kv_heads,
        }
        row["pieces"] = len(sa.encode(TEXT)[0])
        try:
            row["max_abs_diff"] = max_eager_difference(folder, sa)
        except UntraceableModelError as exc:
            row["max_abs_diff"] = None
            row["capture"] = str(exc)
        row["methods"] = {}
        row["seconds"] = {}
        for method in methods_for(sa):
            row["methods"][method], row["seconds"][method] = run_cli(folder, method)
    finally:
        transformers.models.llama.modeling_llama.LlamaAttention.forward = original
    return row


#: the Python API's context-mixing, logit-lens and routes functions (not yet offered by ``attnkit explain``)
API_METHODS = (
    "attention_norm",
    "value_zeroing",
    "alti",
    "alti_logit",
    "direct_logit_attribution",
    "logit_lens",
    "information_flow_routes",
)


def api_row(family: str) -> dict[str, str]:
    """Each of :data:`API_METHODS` called in-process on the family's tiny model and the verse: ``runs``, the
    one line it refused with (an :class:`~attnkit.errors.AttnkitError`), or ``TRACEBACK`` (a bug)."""
    from attnkit.attribution import information_flow, lm_mixing
    from attnkit.errors import AttnkitError
    from attnkit.hf.lm_decomposition import trace_lm

    model, tok = build_tiny("llama" if family == BYPASS else family)
    if family == BYPASS:
        bypass_interface(model)
    ids = torch.tensor(tok(TEXT)["input_ids"])
    calls = {
        "attention_norm": lambda: trace_lm(model, ids, lm_mixing.attention_norm),
        "value_zeroing": lambda: trace_lm(model, ids, lm_mixing.value_zeroing),
        "alti": lambda: lm_mixing.alti(model, ids),
        "alti_logit": lambda: lm_mixing.alti_logit(model, ids),
        "direct_logit_attribution": lambda: lm_mixing.direct_logit_attribution(model, ids),
        "logit_lens": lambda: lm_mixing.logit_lens(model, ids),
        "information_flow_routes": lambda: information_flow.information_flow_routes(model, ids),
    }
    out = {}
    for name in API_METHODS:
        try:
            calls[name]()
            out[name] = "runs"
        except AttnkitError as exc:
            out[name] = str(exc).strip().splitlines()[0]
        except Exception:  # a bug: recorded as such, the run goes on
            out[name] = "TRACEBACK: " + traceback.format_exc().strip().splitlines()[-1]
    return out


API_SECTION = """
## Context mixing, the logit lens and the information-flow routes (Python API)

The functions of `attnkit.attribution.lm_mixing` and `attnkit.attribution.information_flow`
([how-to](../howto/inside-a-language-model.md)), called in-process on the same tiny models and verse
({when}). Each replays every block from its real input with the model's own projections and norms and
refuses unless the replay gives the layer's real output. Post-norm encoders (BERT, DistilBERT,
RoBERTa, XLM-R) and the norms after each sub-block of Gemma 2/3 and OLMo 2 are decomposed through the
norm's linear part at its real input's statistics; the methods that explain a next-token prediction
refuse an encoder-only model.

"""


def api_markdown(rows: list[dict], when: str) -> str:
    out = [
        "| family | `model_type` | " + " | ".join(f"`{m}`" for m in API_METHODS) + " |",
        "|" + "---|" * (2 + len(API_METHODS)),
    ]
    notes: list[str] = []

    def cell(text: str) -> str:
        if text == "runs":
            return text
        if text not in notes:
            notes.append(text)
        return f"refused ({notes.index(text) + 1})"

    for r in rows:  # the row's model type written as <model_type>: one note per kind of refusal
        cells = [cell(r["api"].get(m, "—").replace(r["model_type"], "`<model_type>`")) for m in API_METHODS]
        out.append(f"| {r['name']} | `{r['model_type']}` | " + " | ".join(cells) + " |")
    out += ["", "Refusals, each the one line the function raised (`<model_type>`: the row's):", ""]
    out += [f"{i}. {text}" for i, text in enumerate(notes, 1)]
    return API_SECTION.format(when=when) + "\n".join(out) + "\n"


def markdown(rows: list[dict], header: str) -> str:
    methods: list[str] = []
    for r in rows:
        methods += [m for m in r["methods"] if m not in methods]
    out = [
        "| family | `model_type` | kind | heads (key/value) | attention read by | max \\|captured − eager\\| | "
        + " | ".join(f"`{m}`" for m in methods)
        + " |",
        "|" + "---|" * (6 + len(methods)),
    ]
    notes: list[str] = []  # each distinct refusal once, under the table

    def cell(text: str) -> str:
        if text in ("runs", "—"):
            return text
        if text not in notes:
            notes.append(text)
        return f"refused ({notes.index(text) + 1})"

    for r in rows:
        diff = cell(r["capture"]) if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}"
        cells = [cell(r["methods"].get(m, "—")) for m in methods]
        out.append(
            f"| {r['name']} | `{r['model_type']}` | {r['kind']} | {r['heads']} ({r['kv_heads']}) | "
            f"{r['implementation']} | {diff} | " + " | ".join(cells) + " |"
        )
    out += ["", "Refusals, each the one line `attnkit explain` printed:", ""]
    out += [f"{i}. {text}" for i, text in enumerate(notes, 1)]
    return header + "\n".join(out) + "\n"


PAGE = """# Hugging Face families × methods

Which encoder-only and decoder-only families attnkit reads, and which `attnkit explain` methods run on
each. Written by `benchmarks/lm_families.py` ({when}, {machine}): tiny random models of each family
built offline from their configs (2 layers, width 32, the families' own attention: query/key norms,
sliding windows shorter than the text, soft-capping, grouped- and multi-query attention), saved as
Hugging Face folders and run through the command line itself, `attnkit explain TEXT --model FOLDER
--method METHOD --json` (decoder-only models: a continuation of {new} tokens). The methods are the
ones the command offers for that kind of model, read from its registries, so a new method shows up
at the next run.

- **max \\|captured − eager\\|**: the attention attnkit reads from the model as loaded (its default
  attention implementation: `sdpa`, or `eager` where the family has no other, as Gemma 2's
  soft-capping) against `output_attentions=True` of the same folder loaded in eager mode, over every
  layer and head of one verse ({n} pieces).
- **runs**: exit status 0 and JSON that parses; otherwise the one line the command refused with.
  "—": not offered for this kind of model (encoder-only models have the self-attention views).
- **heads (key/value)**: query heads, and the key/value heads they share under grouped-query
  attention; `attnkit explain --json`, the explorer and the notebook views name each head's
  key/value group (`head 3 · kv 2`).
- The last row is the tiny Llama with every attention module running torch's attention itself,
  bypassing `transformers`' attention interface (as a remote-code model can): attnkit cannot see its
  weights and says so in one line; the gradient methods need no attention and still run.

"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lm_families.json")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "reference" / "model-families.md")
    parser.add_argument("--families", nargs="*", default=[*LM_FAMILIES, BYPASS])
    parser.add_argument(
        "--api-only",
        action="store_true",
        help="rerun only the Python API table (in-process, seconds), keeping the command-line rows of --out",
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    today = time.strftime("%Y-%m-%d")
    if args.api_only:
        report = json.loads(args.out.read_text(encoding="utf-8"))
        rows = report["rows"]
    else:
        rows = []
        with tempfile.TemporaryDirectory(prefix="attnkit-families-") as tmp:
            for family in args.families:
                row = family_row(family, Path(tmp))
                rows.append(row)
                print(f"{family:40s} {row['max_abs_diff']}  {row['methods']}", flush=True)
    for row in rows:
        row["api"] = api_row(row["family"])
        print(f"{row['family']:40s} {row['api']}", flush=True)
    sizes = sorted({r["pieces"] for r in rows})
    n = f"{sizes[0]}–{sizes[-1]}" if len(sizes) > 1 else str(sizes[0])
    machine = f"{platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} torch thread(s)"
    if args.api_only:
        when, machine = report.get("date", today), report["machine"]
    else:
        when = today
    header = PAGE.format(when=when, machine=machine, new=NEW_TOKENS, n=n)
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    args.docs.write_text(markdown(rows, header) + api_markdown(rows, today), encoding="utf-8")
    import transformers

    if not args.api_only:
        report = {
            "text": TEXT,
            "new_tokens": NEW_TOKENS,
            "machine": machine,
            "date": when,
            "transformers": transformers.__version__,
            "seconds": round(time.perf_counter() - t0, 1),
            "rows": rows,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    calls = [(r["family"], m, c) for r in rows for m, c in [*r.get("methods", {}).items(), *r["api"].items()]]
    bad = [c for c in calls if c[2].startswith("TRACEBACK")]
    worst = max(r["max_abs_diff"] for r in rows if r["max_abs_diff"] is not None)
    print(f"wrote {args.docs} and {args.out}; max |captured − eager| {worst:.1e}; tracebacks: {bad or 'none'}")
    return 1 if bad or worst > 1e-5 else 0


if __name__ == "__main__":
    sys.exit(main())
