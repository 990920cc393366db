"""Where a Transformer training step's time goes, and how close it runs to the core's GEMM peak.

    PYTHONPATH=src python benchmarks/profile_training.py [--steps 8] [--threads 1] [--d-model 256] [--size ten-minute]

The step is ``Trainer.train_step`` as training runs it (forward, label-smoothed loss through the
fused linear + cross-entropy, backward, clipping, fused Adam, schedule) on the shipped Transformer
(``TranslationConfig`` defaults for ``model="transformer"``: 3+3 layers, d_model 256, 4 heads, FFN
1024, 8k vocabulary) and real batches of 64 verses (bucketed by length, seed 0), as in
``benchmarks/train_throughput.py``. It reports:

- **operators' share**: ``torch.profiler`` over ``--steps`` steps after ``--warmup`` untimed ones,
  each operator's *self* CPU time (time in the operator itself, not in the operators it calls), the
  top ``--top`` of them, then the same grouped by kind (GEMM, attention, layer norm, dropout, ...);
  what the profiler cannot attribute to an operator (the wall time of the steps minus the operators'
  self time) is the Python/dispatcher overhead between them;
- **achieved FLOP/s**: the step's floating-point operations (matrix products and attention, forward
  and backward, counted by ``torch.utils.flop_counter.FlopCounterMode``, 2 per multiply-add) over its
  wall time without the profiler, against the **fp32 GEMM peak** of this core measured in the same
  run (a 2048 x 2048 ``torch.mm``, 1 and 2 threads; bf16 too, for CPUs that have bf16 units).

Writes ``benchmarks/results/profile_training.json`` and prints markdown tables. Numbers from a shared
machine are hints; ratios measured side by side in one run are what count.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import attnkit.attention.dropout as attnkit_dropout  # noqa: E402
from attnkit.attention import MultiHeadAttention  # noqa: E402
from attnkit.data.batching import encode_pairs  # noqa: E402
from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.tasks.translation import (  # noqa: E402
    TranslationConfig,
    build_optimizer,
    build_translation_model,
    get_tokenizer,
    translation_batches,
    translation_loss_fn,
)
from attnkit.tasks.translation.budget_defaults import pick_for  # noqa: E402
from attnkit.training import ListBatches, RunConfig, Trainer  # noqa: E402

#: The Transformer row of benchmarks/train_throughput.py (the shipped size).
TRANSFORMER = dict(model="transformer", dropout=0.1, warmup_steps=500, lr=1.5e-3)

#: ``--size``: the recipe's Transformer, or the size the CPU rule trains for a ten-minute budget.
SIZES = {"recipe": {}, "ten-minute": pick_for("transformer", 600, "cpu").options}

#: Operator kinds, matched in this order on the operator's name (first match wins).
KINDS = [
    ("GEMM (linear, matmul)", ("addmm", "aten::mm", "bmm", "matmul", "linear", "baddbmm")),
    ("attention (SDPA)", ("scaled_dot_product", "flash_attention", "_softmax", "softmax")),
    ("layer norm", ("layer_norm",)),
    ("dropout (mask draws)", ("dropout", "bernoulli", "native_dropout", "uniform_")),
    ("embedding", ("embedding",)),
    ("cross-entropy (fused linear + CE)", ("LinearCrossEntropy", "gather", "scatter_add", "exp_", "amax", "log_")),
    ("Adam (fused)", ("_fused_adam", "Adam", "Optimizer")),
    ("grad clipping (norms)", ("norm", "_foreach")),
    ("copies / layout", ("copy_", "clone", "contiguous", "to_copy", "reshape", "cat", "index", "_unsafe_view")),
    ("element-wise (add, mul, relu, masks)", ("add", "mul", "div", "sub", "relu", "threshold", "fill", "where")),
]


@contextlib.contextmanager
def torch_dropout():
    """PyTorch's own dropout (``bernoulli_``) and fused attention kernel, as before attnkit's CPU dropout."""
    saved = attnkit_dropout.FAST_DEVICES
    attnkit_dropout.FAST_DEVICES = ()
    try:
        yield
    finally:
        attnkit_dropout.FAST_DEVICES = saved


def _project_qkv_indexed(self, query, key, value):
    """``MultiHeadAttention._project_qkv`` as it was: q, k, v by indexing a permuted view."""
    if self.packed and query is key and key is value:
        b, n, _ = query.shape
        qkv = self._linear("qkv", query, self.in_proj_weight, self.in_proj_bias)  # (B, N, 3E)
        qkv = qkv.view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, N, Dh)
        return qkv[0], qkv[1], qkv[2]
    k, v = self.project_kv(key, value)
    return self.project_query(query), k, v


@contextlib.contextmanager
def float_dropout_masks():
    """attnkit's CPU dropout with its mask drawn as ``u ≥ p``, ``u ~ U[0, 1)`` (``torch.rand``), as
    before the 16-bit integer draws (four per 64-bit draw of the generator)."""
    saved = attnkit_dropout.keep_mask
    attnkit_dropout.keep_mask = lambda shape, drop, device: torch.rand(shape, device=device) >= drop / 2**16
    try:
        yield
    finally:
        attnkit_dropout.keep_mask = saved


@contextlib.contextmanager
def indexed_qkv():
    """The self-attention's q, k, v split by indexing (before ``unbind``)."""
    saved = MultiHeadAttention._project_qkv
    MultiHeadAttention._project_qkv = _project_qkv_indexed
    try:
        yield
    finally:
        MultiHeadAttention._project_qkv = saved


def compile_model(trainer: Trainer) -> None:
    """``torch.compile`` the model in place (inductor; its C++ kernels on the CPU)."""
    trainer.model.compile()


def bf16_autocast(trainer: Trainer) -> None:
    """Forward and loss under bf16 autocast, as ``--precision bf16`` trains (fp32 master weights)."""
    trainer.amp_dtype = torch.bfloat16


#: Side-by-side comparisons: name -> (baseline context, candidate context, candidate preparation);
#: the contexts wrap every step, the preparation runs once on the candidate's trainer.
COMPARISONS = {
    "dropout": (torch_dropout, contextlib.nullcontext, None),
    "dropout-16bit": (float_dropout_masks, contextlib.nullcontext, None),
    "qkv-unbind": (indexed_qkv, contextlib.nullcontext, None),
    "compile": (contextlib.nullcontext, contextlib.nullcontext, compile_model),
    "bf16": (contextlib.nullcontext, contextlib.nullcontext, bf16_autocast),
}


def compare(name: str, batches: list[dict], pad_id: int, warmup: int, tmp: str, **options) -> dict:
    """Baseline and candidate of ``COMPARISONS[name]``, two trainers from the same initial weights,
    stepping in turn on the same batches (so both see the same machine load); seconds per step each
    after ``warmup`` steps, and the warm-up's seconds (a compilation's cost shows there)."""
    base_ctx, cand_ctx, prepare = COMPARISONS[name]
    trainers = [make_trainer(batches, pad_id, tmp, **options) for _ in range(2)]
    if prepare is not None:
        prepare(trainers[1])
    seconds, warm, losses = [0.0, 0.0], [0.0, 0.0], [[], []]
    for i, b in enumerate(batches):
        for j, (trainer, ctx) in enumerate(zip(trainers, (base_ctx, cand_ctx))):
            torch.manual_seed(i)  # the same dropout draws for both: equal losses unless the change alters numerics
            with ctx():
                t = time.perf_counter()
                loss, n, _, _ = trainer.train_step(b)
                dt = time.perf_counter() - t
            if i >= warmup:
                seconds[j] += dt
                losses[j].append(loss / n)
            else:
                warm[j] += dt
    steps = len(batches) - warmup
    base, cand = (s / steps for s in seconds)
    return {
        "comparison": name,
        "baseline_ms": base * 1e3,
        "candidate_ms": cand * 1e3,
        "speedup": base / cand,
        "warmup_s": warm,
        "first_loss": (losses[0][0], losses[1][0]),
        "max_loss_diff": max(abs(a - b) for a, b in zip(*losses)),
    }


def kind_of(name: str) -> str:
    for kind, keys in KINDS:
        if any(k.lower() in name.lower() for k in keys):
            return kind
    return "other"


def real_batches(n: int) -> tuple[list[dict], int]:
    tok = get_tokenizer(8000)
    examples = encode_pairs(load_pairs("train"), tok, 100)
    source = translation_batches(examples, batch_size=64, max_tokens=None, seed=0)
    source.set_epoch(0)
    return list(itertools.islice(iter(source), n)), tok.pad_id


def make_trainer(batches: list[dict], pad_id: int, tmp: str, **options) -> Trainer:
    """The shipped Transformer's trainer; ``options`` override ``TranslationConfig`` fields."""
    cfg = TranslationConfig.from_options(**{**TRANSFORMER, **options})
    torch.manual_seed(0)
    model = build_translation_model(cfg, 8000).train()
    opt, sched = build_optimizer(cfg, model)
    run = RunConfig(out_dir=tmp, clip_grad_norm=cfg.run.clip_grad_norm, progress=False, device=None)
    return Trainer(
        model,
        opt,
        run,
        loss_fn=translation_loss_fn(pad_id, cfg.label_smoothing),
        train_batches=ListBatches(batches),
        scheduler=sched,
    )


def gemm_peak(threads: int, dtype: torch.dtype, n: int = 2048, repeats: int = 8) -> float:
    """FLOP/s of an ``n x n`` by ``n x n`` ``torch.mm`` (best of ``repeats``: on a shared machine the
    best run is the one least disturbed) at ``threads`` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    torch.set_num_threads(before)
    return 2 * n**3 / best


def gemm_peaks(threads: int) -> dict[str, float]:
    """fp32 GEMM peaks at 1 and 2 threads, and bf16 at ``threads`` (slow without bf16 units: few repeats)."""
    peaks = {f"fp32 {t} thread(s)": gemm_peak(t, torch.float32) for t in (1, 2)}
    peaks[f"bf16 {threads} thread(s)"] = gemm_peak(threads, torch.bfloat16, n=1024, repeats=2)
    return peaks


def step_flops(trainer: Trainer, batch: dict) -> int:
    """Floating-point operations of one training step (matrix products and attention)."""
    with FlopCounterMode(display=False) as counter:
        trainer.train_step(batch)
    return counter.get_total_flops()


def profile_steps(trainer: Trainer, batches: list[dict]) -> tuple[list[dict], float, float]:
    """Per-operator self CPU time over ``batches``: ``(rows, wall_s, ops_self_s)``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for b in batches:
            trainer.train_step(b)
        wall = time.perf_counter() - t
    rows = []
    for e in prof.key_averages():
        if e.self_cpu_time_total <= 0:
            continue
        rows.append({"op": e.key, "calls": e.count, "self_s": e.self_cpu_time_total / 1e6})
    rows.sort(key=lambda r: -r["self_s"])
    return rows, wall, sum(r["self_s"] for r in rows)


def cpu_name() -> dict:
    """The CPU's model name and the SIMD flags that pick PyTorch's and CTranslate2's kernels."""
    info = {"model": platform.processor() or "unknown", "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if line.startswith("model name") and info["model"] in ("unknown", "", platform.processor()):
            info["model"] = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            info["flags"] = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in flags]
            break
    return info


def run_profile(args, batches: list[dict], pad_id: int, tmp: str) -> dict:
    """The profile, the FLOP count and the GEMM peaks; prints their tables, returns them."""
    timed = batches[args.warmup :]
    tokens = sum(int(b["tgt_out"].ne(pad_id).sum()) for b in timed)
    peaks = gemm_peaks(args.threads)
    trainer = make_trainer(batches, pad_id, tmp, **SIZES[args.size])
    for b in batches[: args.warmup]:
        trainer.train_step(b)
    t = time.perf_counter()
    for b in timed:
        trainer.train_step(b)
    step_s = (time.perf_counter() - t) / len(timed)
    # measured again right after the steps; the higher of the two (the less disturbed) counts
    peaks = {k: max(v, w) for (k, v), w in zip(peaks.items(), gemm_peaks(args.threads).values())}
    flops = sum(step_flops(trainer, b) for b in timed) / len(timed)
    rows, wall, ops_s = profile_steps(trainer, timed)
    widths = {}
    for d in args.d_model:
        tr = make_trainer(batches, pad_id, tmp, d_model=d, dim_feedforward=4 * d)
        for b in batches[: args.warmup]:
            tr.train_step(b)
        t = time.perf_counter()
        for b in timed:
            tr.train_step(b)
        widths[d] = (time.perf_counter() - t) / len(timed)

    kinds: dict[str, float] = defaultdict(float)
    for r in rows:
        kinds[kind_of(r["op"])] += r["self_s"]
    kinds["Python / dispatcher (wall - operators)"] = max(wall - ops_s, 0.0)
    peak = peaks[f"fp32 {args.threads} thread(s)"]
    n = len(timed)
    print(f"step: {step_s * 1e3:.0f} ms, {tokens / n:.0f} target tokens, {flops / 1e9:.2f} GFLOP")
    print(f"achieved {flops / step_s / 1e9:.2f} GFLOP/s = {flops / step_s / peak:.1%} of the fp32 GEMM peak")
    print("\n| GEMM peak (torch.mm, square) | GFLOP/s |\n|---|---|")
    for k, v in peaks.items():
        print(f"| {k} | {v / 1e9:.1f} |")
    print(f"\n| operator (self CPU time, {n} steps) | calls/step | ms/step | share |\n|---|---|---|---|")
    for r in rows[: args.top]:
        print(f"| `{r['op']}` | {r['calls'] / n:.0f} | {r['self_s'] / n * 1e3:.1f} | {r['self_s'] / wall:.1%} |")
    print("\n| kind | ms/step | share |\n|---|---|---|")
    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v / n * 1e3:.1f} | {v / wall:.1%} |")
    if widths:
        print("\n| d_model (FFN 4x) | ms/step |\n|---|---|")
        print(f"| 256 (shipped) | {step_s * 1e3:.0f} |")
        for d, sec in widths.items():
            print(f"| {d} | {sec * 1e3:.0f} |")
    return {
        "step_ms": step_s * 1e3,
        "flops_per_step": flops,
        "gemm_peak_flops": peaks,
        "profiled_wall_s": wall,
        "operators": rows[: args.top],
        "kinds_s": dict(kinds),
        "d_model_step_ms": {d: sec * 1e3 for d, sec in widths.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8, help="profiled (and timed) steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=15, help="operators in the table")
    ap.add_argument("--d-model", type=int, nargs="*", default=[], help="also time these widths (FFN 4x) per step")
    ap.add_argument(
        "--compare", choices=sorted(COMPARISONS), nargs="*", default=[], help="time these changes side by side"
    )
    ap.add_argument("--no-profile", action="store_true", help="only the comparisons")
    ap.add_argument(
        "--size", choices=sorted(SIZES), default="recipe", help="the recipe's Transformer or the ten-minute rule's size"
    )
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "profile_training.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    batches, pad_id = real_batches(args.warmup + args.steps)
    cpu = cpu_name()
    print(f"CPU: {cpu['model']}; flags {' '.join(cpu['flags'])}; torch {torch.__version__}, {args.threads} thread(s)")
    print(f"kernels: ATen CPU capability {torch.backends.cpu.get_cpu_capability()}\n")
    result = {"machine": platform.platform(), "cpu": cpu, "threads": args.threads, "torch": torch.__version__}
    result["size"] = {"name": args.size, **SIZES[args.size]}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_profile:
            result.update(run_profile(args, batches, pad_id, tmp))
        comparisons = [compare(name, batches, pad_id, args.warmup, tmp, **SIZES[args.size]) for name in args.compare]
    if comparisons:
        print("\n| change | before ms/step | after ms/step | speed-up | warm-up s before / after ", end="")
        print("| first loss before / after | max loss diff |")
        print("|---|---|---|---|---|---|---|")
        for c in comparisons:
            lb, la = c["first_loss"]
            print(
                f"| {c['comparison']} | {c['baseline_ms']:.0f} | {c['candidate_ms']:.0f} | {c['speedup']:.2f}x "
                f"| {c['warmup_s'][0]:.0f} / {c['warmup_s'][1]:.0f} | {lb:.6f} / {la:.6f} | {c['max_loss_diff']:.1e} |"
            )
    result["comparisons"] = comparisons
    out = Path(args.output)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
