"""attnkit against inseq on a decoder-only model: the same model, text and method in both, the numbers
compared, the time and the peak memory of the attribution measured.

inseq (Sarti et al. 2023) is the field's tool for attributing a causal language model's tokens. It is not a
dependency of attnkit: install it into a virtualenv of its own (its pins differ from ours) and name that
interpreter::

    python3 -m venv /tmp/inseq-venv
    /tmp/inseq-venv/bin/pip install torch==2.13.0 inseq==0.7.1
    PYTHONPATH=src python benchmarks/lm_vs_inseq.py --inseq-python /tmp/inseq-venv/bin/python

The model is a random-weight GPT-2 with GPT-2 small's shape (12 layers, width 768, 12 heads; a 300-piece
vocabulary: the tests' tiny Unigram tokenizer), saved once to a folder both read. The text is Bible verses
of the gold set, ``--tokens`` pieces long; its last ``--attributed`` tokens are attributed (forced) to every
token before them. Both explain ``log p(token | prefix)`` (inseq through a step function registered here,
``logprob``), over the input word embeddings (positions added inside the model); integrated gradients with
Gauss-Legendre points from the zero embedding (inseq's baseline is the ``<unk>`` embedding, which is set to
zero in this model, so the two baselines are one). The per-token numbers compared are the signed sums over
the embedding of each input token (attnkit's ``raw``; inseq's granular attributions summed), attention as
the last layer's head mean.

Each side runs in a process of its own, one after the other, with the same torch threads; a warm-up on a
short text first. Time is the attribution call's wall time; memory is the process's peak RSS during the
call above its RSS before it; CPU time is the process's (user + system) during the call, the measure that
other jobs on a shared machine disturb least. ``--repeats N`` runs each tool N times, interleaved (attnkit, inseq, attnkit,
inseq, ...), and reports the medians and the machine's 1-minute load average around the runs: on a shared
machine other jobs' load falls on both tools alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "tests" / "hf_tiny_tokenizer.json"
METHODS = ("attention", "saliency", "input_x_gradient", "integrated_gradients")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(folder: Path, tokens: int, seed: int) -> dict:
    """The model folder and the text's token ids (the same ids in both tools: checked by re-tokenising)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from attnkit.alignment.gold import GOLD_DIR

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(TOKENIZER), unk_token="<unk>", pad_token="<pad>", eos_token="</s>", bos_token="<s>"
    )
    if not (folder / "config.json").exists():
        cfg = GPT2Config(
            vocab_size=len(tok), n_layer=12, n_embd=768, n_head=12, n_positions=1024,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(cfg)
        with torch.no_grad():
            model.transformer.wte.weight[tok.unk_token_id] = 0  # inseq's baseline = attnkit's zero embedding
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    lines = [line.strip() for line in (GOLD_DIR / "es-en.en").read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = tok(" ".join(lines))["input_ids"]
    if len(ids) < tokens:
        raise SystemExit(f"--tokens must be at most {len(ids)}, the gold verses' length")
    ids = ids[:tokens]
    text = tok.decode(ids)
    if tok(text)["input_ids"] != ids:
        raise SystemExit("the text does not read back as the same tokens; choose another --tokens")
    return {"ids": ids, "text": text}


def run_attnkit(folder: str, ids: list[int], prompt_len: int, method: str, steps: int) -> dict:
    import torch

    from attnkit.attribution import explain_generation
    from attnkit.service import open_model

    sa = open_model(folder).impl
    kw = {"steps": steps} if method == "integrated_gradients" else {}
    explain_generation(sa, "", method=method, continuation=(ids[:12], 8), **kw)  # warm-up
    before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    att = explain_generation(sa, "", method=method, continuation=(ids, prompt_len), **kw)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    values = att.scores if method == "attention" else att.raw
    return {
        "values": values.to(torch.float64).tolist(),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_extra_mb": max(0.0, _peak_mb() - before),
        "peak_mb": _peak_mb(),
        **floor_passes(sa.model, ids, prompt_len, gradients=method != "attention"),
    }


def floor_passes(model, ids: list[int], prompt_len: int, *, gradients: bool) -> dict:
    """The passes no exact method can skip, timed alone by CPU time on the same model and text: one plain
    forward over the inputs ``ids[:-1]`` (the model's own attention kernel, no weights kept, the logits of the
    attributed positions only) — the least any attention method costs, since the last layer's keys need every
    layer below at every position — and, for the gradient methods, one forward that keeps its graph plus one
    vector-Jacobian product from one attributed token's log-probability back to the input embeddings: ``G``
    tokens' exact gradients need that forward and ``G`` such products (batched or not, the same work); timed
    only when ``gradients``."""
    import torch

    n_gen = len(ids) - prompt_len
    x = torch.tensor([ids[:-1]])  # (1, n-1)
    emb = model.get_input_embeddings()
    with torch.no_grad():
        model(input_ids=x, logits_to_keep=n_gen)  # warm-up
        c0 = time.process_time()
        model(input_ids=x, logits_to_keep=n_gen)
        forward = time.process_time() - c0
    if not gradients:
        return {"floor_forward_cpu_s": forward}
    e = emb(x).detach().requires_grad_(True)  # (1, n-1, E)
    c0 = time.process_time()
    logits = model(inputs_embeds=e, logits_to_keep=n_gen).logits  # (1, G, V)
    graph_forward = time.process_time() - c0
    lp = torch.log_softmax(logits[0, -1].float(), -1)[ids[-1]]
    c0 = time.process_time()
    torch.autograd.grad(lp, e)
    vjp = time.process_time() - c0
    return {"floor_forward_cpu_s": forward, "floor_graph_forward_cpu_s": graph_forward, "floor_vjp_cpu_s": vjp}


def run_inseq(folder: str, ids: list[int], prompt_len: int, method: str, steps: int) -> dict:
    import inseq
    import torch
    from inseq.attr.step_functions import StepFunctionArgs

    def logprob(args: StepFunctionArgs):
        logits = args.attribution_model.output2logits(args.forward_output)
        return torch.log_softmax(logits.float(), -1).gather(-1, args.target_ids.reshape(-1, 1)).squeeze(-1)

    inseq.register_step_function(logprob, "logprob", overwrite=True)
    model = inseq.load_model(folder, method)
    tok = model.tokenizer
    kw = {"n_steps": steps} if method == "integrated_gradients" else {}  # Captum's default points: Gauss-Legendre
    extra = {} if method == "attention" else {"attributed_fn": "logprob"}

    def attribute(seq: list[int], p: int):
        return model.attribute(
            input_texts=tok.decode(seq[:p]), generated_texts=tok.decode(seq), show_progress=False,
            skip_special_tokens=False, **extra, **kw,
        )  # fmt: skip

    attribute(ids[:12], 8)  # warm-up
    before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    out = attribute(ids, prompt_len)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    seq = out.sequence_attributions[0]
    a = seq.target_attributions.to(torch.float64)  # (n, G, E) or (n, G, layers, heads) for attention
    a = a[..., -1, :].mean(-1) if method == "attention" else a.sum(-1)  # (n, G)
    a = torch.nan_to_num(a, nan=0.0)[: len(ids) - 1].T  # (G, n-1): the inputs are ids[:-1]
    return {
        "values": a.tolist(),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_extra_mb": max(0.0, _peak_mb() - before),
        "peak_mb": _peak_mb(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inseq-python", required=False, help="the interpreter of a virtualenv with inseq")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--attributed", type=int, default=4, help="the text's last N tokens are attributed")
    ap.add_argument("--steps", type=int, default=16, help="integrated gradients' points (both tools)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each tool, interleaved; medians reported")
    ap.add_argument("--folder", default="/tmp/attnkit-lm-vs-inseq")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "lm_vs_inseq.json"))
    ap.add_argument("--worker", choices=("attnkit", "inseq"), help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        job = json.loads(Path(args.job).read_text())
        fn = run_attnkit if args.worker == "attnkit" else run_inseq
        print(json.dumps(fn(args.folder, job["ids"], job["prompt_len"], args.method, args.steps)))
        return
    if not args.inseq_python:
        ap.error("--inseq-python is required (the interpreter of a virtualenv with inseq installed)")
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = build(folder, args.tokens, seed=0)
    job = folder / "job.json"
    job.write_text(json.dumps({"ids": text["ids"], "prompt_len": len(text["ids"]) - args.attributed}))
    rows = []
    for method in args.methods.split(","):
        runs: dict[str, list[dict]] = {"attnkit": [], "inseq": []}
        load = [os.getloadavg()[0]]
        for _ in range(args.repeats):  # interleaved, A B A B: the machine's other load falls on both alike
            for worker, python in (("attnkit", sys.executable), ("inseq", args.inseq_python)):
                cmd = [python, __file__, "--worker", worker, "--method", method, "--job", str(job)]
                cmd += ["--folder", str(folder), "--steps", str(args.steps), "--threads", str(args.threads)]
                env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
                res = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if res.returncode:
                    raise SystemExit(f"{worker} {method} failed:\n{res.stderr[-3000:]}")
                runs[worker].append(json.loads(res.stdout.strip().splitlines()[-1]))
                load.append(os.getloadavg()[0])
        got = {
            w: {
                "values": r[0]["values"],
                "seconds": statistics.median(x["seconds"] for x in r),
                "all_seconds": [round(x["seconds"], 3) for x in r],
                "cpu_seconds": statistics.median(x["cpu_seconds"] for x in r),
                "all_cpu_seconds": [round(x["cpu_seconds"], 3) for x in r],
                "peak_extra_mb": statistics.median(x["peak_extra_mb"] for x in r),
                "peak_mb": statistics.median(x["peak_mb"] for x in r),
            }
            for w, r in runs.items()
        }
        import torch

        a = torch.tensor(got["attnkit"]["values"], dtype=torch.float64)
        b = torch.tensor(got["inseq"]["values"], dtype=torch.float64)
        if a.shape != b.shape:
            raise SystemExit(f"{method}: attnkit gave {tuple(a.shape)}, inseq {tuple(b.shape)}")
        rel = float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
        row = {
            "method": method,
            "max_relative_difference": rel,
            "attnkit_s": round(got["attnkit"]["seconds"], 3),
            "inseq_s": round(got["inseq"]["seconds"], 3),
            "speed_ratio": round(got["inseq"]["seconds"] / got["attnkit"]["seconds"], 2),
            "attnkit_peak_extra_mb": round(got["attnkit"]["peak_extra_mb"], 1),
            "inseq_peak_extra_mb": round(got["inseq"]["peak_extra_mb"], 1),
            "attnkit_peak_mb": round(got["attnkit"]["peak_mb"], 1),
            "inseq_peak_mb": round(got["inseq"]["peak_mb"], 1),
            "attnkit_cpu_s": round(got["attnkit"]["cpu_seconds"], 3),
            "inseq_cpu_s": round(got["inseq"]["cpu_seconds"], 3),
            "cpu_speed_ratio": round(got["inseq"]["cpu_seconds"] / got["attnkit"]["cpu_seconds"], 2),
            "attnkit_all_s": got["attnkit"]["all_seconds"],
            "inseq_all_s": got["inseq"]["all_seconds"],
            "attnkit_all_cpu_s": got["attnkit"]["all_cpu_seconds"],
            "inseq_all_cpu_s": got["inseq"]["all_cpu_seconds"],
            "load_average_1min": [round(v, 2) for v in load],
        }
        # The floor (attnkit's worker, medians): what inseq's time is over the passes no exact method skips
        fl = {k: statistics.median(x[k] for x in runs["attnkit"]) for k in runs["attnkit"][0] if k.startswith("floor_")}
        g = args.attributed
        floor = (
            fl["floor_forward_cpu_s"]
            if method == "attention"
            else fl["floor_graph_forward_cpu_s"] + g * fl["floor_vjp_cpu_s"]
        )
        if method == "integrated_gradients":
            floor = args.steps * floor  # one forward per point at least (batched or not), G products per point
        row.update({k: round(v, 3) for k, v in fl.items()})
        row["floor_cpu_s"] = round(floor, 3)
        row["inseq_over_floor"] = round(got["inseq"]["cpu_seconds"] / floor, 2)
        row["attnkit_over_floor"] = round(got["attnkit"]["cpu_seconds"] / floor, 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    result = {
        "model": "random GPT-2 small shape (12 x 768, 12 heads), 300-piece vocabulary",
        "tokens": args.tokens,
        "attributed": args.attributed,
        "steps": args.steps,
        "threads": args.threads,
        "repeats": args.repeats,
        "rows": rows,
    }
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
