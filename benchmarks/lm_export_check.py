"""A language model exported to Hugging Face's format, against attnkit itself, on held-out prompts.

    PYTHONPATH=src .venv/bin/python benchmarks/lm_export_check.py MODEL_FOLDER               # 100 prompts
    PYTHONPATH=src .venv/bin/python benchmarks/lm_export_check.py MODEL_FOLDER --prompts 10  # a quick check

``attnkit export MODEL_FOLDER OUT --format huggingface`` (a language-model checkpoint folder, or a
training run's folder: its newest checkpoint), then the folder is loaded with plain ``transformers``
(``AutoModelForCausalLM``, ``AutoTokenizer``; no attnkit code on that side, no ``trust_remote_code``)
and both read the same prompts: the first ``--words`` words of the first ``--prompts`` texts of one
side of the prepared Bible's **valid** split (held out: a language model trains on the train split's
texts only, :mod:`attnkit.tasks.language_model.data`).

- **tokenizer**: ``tokenizer(prompt)["input_ids"]`` against attnkit's ``[<s>] + Tokenizer.encode(prompt)``;
- **logits**: the largest ``|Δ logit|`` over every position of each prompt followed by attnkit's greedy
  continuation (teacher-forced on both sides, so the positions compared are the same);
- **greedy continuations**: ``LanguageModel.generate(temperature=0)`` against
  ``model.generate(do_sample=False)``, ``--new-tokens`` at most, each cut after its first ``</s>``:
  how many are token-identical.

With ``--precision fp16`` attnkit's side is the model with its weights rounded to float16 (what the
export is), and ``fp16_vs_float32_weights`` says what the rounding changed: the same two numbers
against the model's own float32 weights.

Writes a JSON report (``--out``, default ``benchmarks/results/lm_export_check.json``).
"""

from __future__ import annotations

import argparse
import copy
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
from attnkit.data.tokenizer import Tokenizer  # noqa: E402
from attnkit.deploy.hf_lm_export import export_language_model_folder  # noqa: E402
from attnkit.service import model_folder  # noqa: E402
from attnkit.training.checkpoint import load_model  # noqa: E402


def cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")


def prompts(n: int, side: str, words: int, home: str | None) -> list[str]:
    """The first ``words`` words of the first ``n`` texts of ``side`` (``en``: the target side, ``es``: the
    source side) of the Bible's valid split."""
    pairs = load_pairs("valid", home=home, limit=n)
    return [" ".join((p.tgt if side == "en" else p.src).split()[:words]) for p in pairs]


def cut(ids: list[int], eos: int) -> list[int]:
    """``ids`` up to and including the first ``eos`` (attnkit repeats it after; generate pads after)."""
    return ids[: ids.index(eos) + 1] if eos in ids else ids


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a language-model checkpoint folder, or a training run's folder")
    ap.add_argument("--prompts", type=int, default=100, help="held-out prompts (default: 100)")
    ap.add_argument("--side", choices=["en", "es"], default="en", help="the Bible's side (default: en)")
    ap.add_argument("--words", type=int, default=5, help="words of each text in its prompt (default: 5)")
    ap.add_argument("--new-tokens", type=int, default=32, help="greedy tokens at most (default: 32)")
    ap.add_argument("--precision", choices=["fp32", "fp16"], default="fp32", help="the export's (default: fp32)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    ap.add_argument("--home", default=None, help="ATTNKIT_HOME with the prepared Bible corpus")
    ap.add_argument("--out", default=str(HERE / "results" / "lm_export_check.json"), help="JSON report")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import __version__ as tf_version

    folder = model_folder(args.model)
    ours, _, _ = load_model(folder)
    ours = ours.float().eval()
    unrounded = None
    if args.precision == "fp16":  # the export is the model with its weights rounded: compare with that
        unrounded = copy.deepcopy(ours)
        for p in ours.parameters():
            p.copy_(p.half().float())
    tok = Tokenizer.load(folder)
    texts = prompts(args.prompts, args.side, args.words, args.home)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        out = export_language_model_folder(folder, Path(tmp) / "hf", precision=args.precision)
        export_s = time.perf_counter() - t
        manifest = json.loads((out / "attnkit.json").read_text(encoding="utf-8"))
        hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        hf_tok = AutoTokenizer.from_pretrained(out)
    eos = tok.eos_id
    max_new = min(args.new_tokens, ours.config.max_len // 2)  # half the context at most: the prompt has room
    same_ids = same_greedy = same_as_unrounded = 0
    max_diff = unrounded_diff = 0.0
    differing, example = [], {}
    for i, text in enumerate(texts):
        ids = [tok.bos_id, *tok.encode(text)][: ours.config.max_len - max_new]
        hf_ids = hf_tok(text)["input_ids"][: len(ids)]
        same_ids += hf_ids == ids
        prompt = torch.tensor([ids])  # (1, T)
        want = cut(ours.generate(prompt, max_new, eos_id=eos)[0, len(ids) :].tolist(), eos)
        got = cut(hf.generate(prompt, do_sample=False, max_new_tokens=max_new)[0, len(ids) :].tolist(), eos)
        same_greedy += got == want
        if not example:
            example = {
                "prompt": text,
                "attnkit": tok.decode(want),
                "transformers": hf_tok.decode(got, skip_special_tokens=True),
            }
        if got != want and len(differing) < 5:
            k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
            differing.append({"prompt": i, "text": text, "first_different_token": k})
        seq = torch.tensor([ids + want])  # (1, T + n): both sides read the same tokens
        theirs = hf(input_ids=seq).logits
        max_diff = max(max_diff, float((ours(seq).logits - theirs).abs().max()))
        if unrounded is not None:  # what rounding to fp16 changed: the export against the float32 weights
            same_as_unrounded += got == cut(
                unrounded.generate(prompt, max_new, eos_id=eos)[0, len(ids) :].tolist(), eos
            )
            unrounded_diff = max(unrounded_diff, float((unrounded(seq).logits - theirs).abs().max()))
    report = {
        "command": f"PYTHONPATH=src python benchmarks/lm_export_check.py {args.model} --prompts {args.prompts}"
        + (f" --precision {args.precision}" if args.precision != "fp32" else ""),
        "machine": f"{cpu_name()}, {args.threads} torch thread(s), shared with other work",
        "torch": torch.__version__,
        "transformers": tf_version,
        "model": str(folder),
        "config": ours.config.to_dict(),
        "architecture": type(hf).__name__,
        "precision": args.precision,
        "export_seconds": round(export_s, 1),
        "self_check_max_logit_diff": manifest["self_check_max_logit_diff"],
        "prompts": len(texts),
        "prompt_source": f"Bible valid split, {args.side} side, first {args.words} words",
        "tokenizer_identical": same_ids,
        "max_abs_logit_diff": max_diff,
        "greedy_new_tokens": max_new,
        "greedy_identical": same_greedy,
        "greedy_first_differences": differing,
        **(
            {}
            if unrounded is None
            else {
                "fp16_vs_float32_weights": {
                    "max_abs_logit_diff": unrounded_diff,
                    "greedy_identical": same_as_unrounded,
                }
            }
        ),
        "example": example,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
