"""A/B of the fused loss's chunk_rows (issue 57, "Quality"): CPU time of alternating fwd+bwd steps, one thread.

Usage: PYTHONPATH=src python benchmarks/lm_loss_chunk_ab.py 256 128 512 1024 2048  (the first size is the reference).
"""

import statistics
import sys
import time

import torch

from attnkit.training.linear_cross_entropy import linear_cross_entropy

torch.set_num_threads(1)

torch.manual_seed(0)
N, E, V = 2048, 256, 8000
h = torch.randn(N, E, requires_grad=True)
w = (torch.randn(V, E) * 0.02).requires_grad_()
y = torch.randint(0, V, (N,))


def step(c):
    t = time.process_time()
    loss = linear_cross_entropy(h, w, None, y, chunk_rows=c)
    loss.backward()
    h.grad = None
    w.grad = None
    return time.process_time() - t


sizes = [int(a) for a in sys.argv[1:]]
for c in sizes:
    step(c)
res = {c: [] for c in sizes}
for _r in range(12):
    for c in sizes:
        res[c].append(step(c))
base = sizes[0]
for c in sizes:
    ratios = [a / b for a, b in zip(res[c], res[base])]
    print(c, f"median ms {1000 * statistics.median(res[c]):.1f}", f"ratio vs {base} {statistics.median(ratios):.3f}")
