"""Per-GEMM CPU time of the fused loss's three products in each operand layout (issue 57, "Quality"), one thread."""

import statistics
import time

import torch

torch.set_num_threads(1)
C, E, V = 256, 256, 8000
hc = torch.randn(C, E)
w = torch.randn(V, E)
wt = w.t().contiguous()
z = torch.randn(C, V)
gw = torch.zeros(V, E)
gwt = torch.zeros(E, V)
out = torch.empty(C, V)
gh = torch.empty(C, E)
v = {
    "fwd mm(hc,w.t())": lambda: torch.mm(hc, w.t(), out=out),
    "fwd mm(hc,wt)": lambda: torch.mm(hc, wt, out=out),
    "gw addmm_(z.t(),hc)": lambda: gw.addmm_(z.t(), hc),
    "gwT addmm_(hc.t(),z)": lambda: gwt.addmm_(hc.t(), z),
    "gh mm(z,w)": lambda: torch.mm(z, w, out=gh),
    "gh mm(z,wt.t())": lambda: torch.mm(z, wt.t(), out=gh),
}


def t(f):
    a = time.process_time()
    for _ in range(4):
        f()
    return time.process_time() - a


res = {k: [] for k in v}
for k in v:
    t(v[k])
for _r in range(15):
    for k in v:
        res[k].append(t(v[k]))
for k in v:
    print(f"{k:<24} {1000 * statistics.median(res[k]) / 4:.2f} ms")
