"""Speed and memory of attnkit's attention core, side by side with its baselines, in one run.

    PYTHONPATH=src python benchmarks/attention.py            # full run (a few minutes), writes benchmarks/results/attention.json
    PYTHONPATH=src python benchmarks/attention.py --quick    # tiny sizes, to check it runs

Measured (medians of interleaved repetitions, so the ratios are robust to background load):

1. ``attend(score="scaled_dot", need_weights=False)`` vs ``F.scaled_dot_product_attention`` vs the
   naive matmul-softmax-matmul, N = 256…4096, and GFLOP/s as a share of this machine's fp32
   matmul peak (a 2048² GEMM measured in the same run).
2. ``MultiHeadAttention`` vs ``torch.nn.MultiheadAttention`` (copied weights), forward+backward,
   B=8, N=512, E=512, H=8, both without weights (fused kernel) and both with weights.
3. Additive attention at Nq = Nk = 2048, hidden 256: peak memory of attnkit's blocked path vs the
   direct broadcast form (each in a fresh subprocess: peak RSS minus the RSS just before the
   computation, Linux), and the largest difference between the two.
4. Additive attention at NMT shapes (B=64, Nq=Nk=50, hidden 512) vs the broadcast form of
   OpenNMT-py's ``mlp`` score: inference (no grad) and forward+backward.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from attnkit import MultiHeadAttention, attend
from attnkit.attention import scores as score_fns

OUT = Path(__file__).resolve().parent / "results"


def bench(fns: dict, repeats: int, warmup: int = 1) -> dict:
    """Median seconds per call of each function, repetitions interleaved across functions."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def matmul_peak(repeats: int) -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    t = bench({"mm": lambda: a @ b}, repeats)["mm"]
    return 2 * 2048**3 / t / 1e9


def sdpa_table(sizes, repeats, peak) -> list[dict]:
    rows = []
    B, H, D = 1, 8, 64
    for n in sizes:
        q, k, v = (torch.randn(B, H, n, D) for _ in range(3))

        def naive(q=q, k=k, v=v):  # bound now: each size's tensors
            w = torch.softmax(q @ k.transpose(-2, -1) / D**0.5, -1)
            return w @ v

        t = bench(
            {
                "attnkit": lambda q=q, k=k, v=v: attend(q, k, v, need_weights=False),
                "sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                "naive": naive,
            },
            repeats,
        )
        flops = 4 * B * H * n * n * D
        rows.append(
            {
                "N": n,
                **{f"{k}_ms": round(v * 1e3, 2) for k, v in t.items()},
                "attnkit_vs_sdpa_speed": round(t["sdpa"] / t["attnkit"], 3),
                "attnkit_vs_naive_speed": round(t["naive"] / t["attnkit"], 3),
                "attnkit_gflops": round(flops / t["attnkit"] / 1e9, 1),
                "share_of_matmul_peak": round(flops / t["attnkit"] / 1e9 / peak, 3),
            }
        )
        print(
            f"  N={n:5d}  attnkit {t['attnkit'] * 1e3:8.2f} ms  sdpa {t['sdpa'] * 1e3:8.2f} ms  "
            f"naive {t['naive'] * 1e3:8.2f} ms  -> {rows[-1]['attnkit_vs_sdpa_speed']:.2f}x of sdpa, "
            f"{rows[-1]['attnkit_gflops']} GFLOP/s ({rows[-1]['share_of_matmul_peak']:.0%} of peak)"
        )
    return rows


def mha_compare(B, N, E, H, repeats) -> dict:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    x = torch.randn(B, N, E, requires_grad=True)

    def step(fn):
        def run():
            out = fn()
            out.sum().backward()

        return run

    res = {}
    for need in (False, True):
        t = bench(
            {
                "attnkit": step(lambda need=need: ours(x, need_weights=need)[0]),
                "torch": step(lambda need=need: theirs(x, x, x, need_weights=need, average_attn_weights=False)[0]),
            },
            repeats,
        )
        key = "with_weights" if need else "no_weights"
        res[key] = {
            "attnkit_ms": round(t["attnkit"] * 1e3, 2),
            "torch_ms": round(t["torch"] * 1e3, 2),
            "attnkit_vs_torch_speed": round(t["torch"] / t["attnkit"], 3),
        }
        print(
            f"  MHA fwd+bwd {key:12s}: attnkit {t['attnkit'] * 1e3:.1f} ms, torch {t['torch'] * 1e3:.1f} ms "
            f"-> {res[key]['attnkit_vs_torch_speed']:.2f}x"
        )
    return res


_MEM_CHILD = r"""
import resource, sys, torch
torch.manual_seed(0)
sys.path.insert(0, sys.argv[3])
from attnkit.attention import scores as score_fns
mode, n, a = sys.argv[1], int(sys.argv[2]), 256
q, k, w = torch.randn(1, n, a), torch.randn(1, n, a), torch.randn(a)
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = rss_kb()  # current resident memory (the peak so far may be higher: imports)
with torch.no_grad():
    if mode == "direct":
        e = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1)) @ w
    else:
        e = score_fns.additive_prepared(q, k, w)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
torch.save(e, sys.argv[4])
print((peak - base) * 1024)
"""


def additive_memory(n: int, tmp: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    res = {}
    outs = {}
    for mode in ("direct", "blocked"):
        f = tmp / f"additive_{mode}.pt"
        r = subprocess.run(
            [sys.executable, "-c", _MEM_CHILD, mode, str(n), src, str(f)], capture_output=True, text=True, check=True
        )
        res[f"{mode}_peak_mb"] = round(int(r.stdout.strip()) / 2**20, 1)
        outs[mode] = torch.load(f)
        f.unlink()
    res["blocked_over_direct_memory"] = round(res["blocked_peak_mb"] / max(res["direct_peak_mb"], 1e-9), 4)
    res["max_abs_difference"] = float((outs["direct"] - outs["blocked"]).abs().max())
    print(
        f"  additive N={n}: direct {res['direct_peak_mb']} MB, blocked {res['blocked_peak_mb']} MB "
        f"({res['blocked_over_direct_memory']:.2%}), max |diff| {res['max_abs_difference']:.2e}"
    )
    return res


def additive_nmt(B, N, A, repeats) -> dict:
    torch.manual_seed(0)
    s, h = torch.randn(B, N, A), torch.randn(B, N, A)
    lq, lk = torch.nn.Linear(A, A, bias=False), torch.nn.Linear(A, A)
    v = torch.nn.Linear(A, 1, bias=False)

    def onmt_mlp():  # OpenNMT-py GlobalAttention.score, attn_type="mlp"
        wq = lq(s).view(B, N, 1, A).expand(B, N, N, A)
        uh = lk(h).view(B, 1, N, A).expand(B, N, N, A)
        return v(torch.tanh(wq + uh).view(-1, A)).view(B, N, N)

    def ours():
        return score_fns.additive_prepared(lq(s), lk(h), v.weight[0])

    with torch.no_grad():
        diff = float((onmt_mlp() - ours()).abs().max())
        t_inf = bench({"attnkit": ours, "onmt": onmt_mlp}, repeats)
    t_train = bench({"attnkit": lambda: ours().sum().backward(), "onmt": lambda: onmt_mlp().sum().backward()}, repeats)
    res = {
        "max_abs_difference": diff,
        "inference": {
            "attnkit_ms": round(t_inf["attnkit"] * 1e3, 2),
            "onmt_ms": round(t_inf["onmt"] * 1e3, 2),
            "speedup": round(t_inf["onmt"] / t_inf["attnkit"], 2),
        },
        "forward_backward": {
            "attnkit_ms": round(t_train["attnkit"] * 1e3, 2),
            "onmt_ms": round(t_train["onmt"] * 1e3, 2),
            "speedup": round(t_train["onmt"] / t_train["attnkit"], 2),
        },
    }
    print(
        f"  additive B={B} N={N} A={A}: inference {res['inference']['speedup']}x, fwd+bwd "
        f"{res['forward_backward']['speedup']}x vs OpenNMT-py mlp broadcast form (max |diff| {diff:.1e})"
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that everything runs")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    q = args.quick
    reps = 2 if q else args.repeats
    OUT.mkdir(exist_ok=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    peak = matmul_peak(reps)
    print(f"fp32 matmul peak (2048² GEMM): {peak:.1f} GFLOP/s")
    result = {
        "machine": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "matmul_peak_gflops": round(peak, 1),
        }
    }
    print("1. scaled dot-product attention, B=1, H=8, D=64")
    result["sdpa"] = sdpa_table([64, 128] if q else [256, 512, 1024, 2048, 4096], reps, peak)
    print("2. multi-head attention vs torch.nn.MultiheadAttention")
    result["mha"] = mha_compare(2, 32, 64, 4, reps) if q else mha_compare(8, 512, 512, 8, reps)
    print("3. additive attention memory (each form in a fresh process)")
    result["additive_memory"] = additive_memory(128 if q else 2048, OUT)
    print("4. additive attention at NMT shapes")
    result["additive_nmt"] = additive_nmt(4, 10, 32, reps) if q else additive_nmt(64, 50, 512, reps)
    name = "attention_quick.json" if q else "attention.json"
    (OUT / name).write_text(json.dumps(result, indent=2))
    print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
