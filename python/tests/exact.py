"""Exact float sums through torch.distributed on gorun.

    gorun [--exact] [--strategy hub] -np N /usr/bin/python3 python/tests/exact.py [--init-exact]

Every rank makes every rank's float32 tensor (values over many binades,
half of them cancelling another rank's) and all-reduces its own with SUM,
exact sums on (from gorun --exact, or gt.init(exact=True) with
--init-exact). Each element must be within the stated bound of the exact
sum (math.fsum of the float32 values); each rank prints a digest of the
result's bits, which must be the same on every rank and in every run,
whatever the strategy. A float16 tensor is summed exactly too (widened).
"""

import argparse
import hashlib
import math
import random

import torch
import torch.distributed as dist

import gorun.torch as gt

p = argparse.ArgumentParser()
p.add_argument("--init-exact", action="store_true")
args = p.parse_args()
gt.init(exact=True if args.init_exact else None)
R, N = dist.get_rank(), dist.get_world_size()


def row(r, n=20011):
    g = random.Random(r * 7919 + 5)
    out = []
    for i in range(n):
        if r % 2 == 1 and i % 4 == 0:
            out.append(-row_cache[r - 1][i])
            continue
        out.append(float(torch.tensor(math.ldexp(g.gauss(0, 1), g.randint(-30, 30)), dtype=torch.float32)))
    return out


row_cache = {}
for r in range(N):
    row_cache[r] = row(r)
t = torch.tensor(row_cache[R], dtype=torch.float32)
dist.all_reduce(t)
h = max(1, N.bit_length())
for i in range(t.numel()):
    col = [row_cache[r][i] for r in range(N)]
    exact = math.fsum(col)
    top = max(abs(v) for v in col)
    e = math.frexp(top)[1]
    got = t[i].item()
    eg = math.frexp(abs(got))[1]
    bound = math.ldexp(N, e - 32 + h) + math.ldexp(1, max(eg - 25, -150))
    if abs(got - exact) > bound:
        raise SystemExit(f"rank {R}: element {i}: {got}, exact {exact}, off by {abs(got - exact)} > {bound}")
half = torch.tensor([row_cache[R][i] for i in range(0, 64)], dtype=torch.float16)
dist.all_reduce(half)
digest = hashlib.sha256(t.numpy().tobytes() + half.numpy().tobytes()).hexdigest()[:16]
print(f"gorun-exact rank={R} digest={digest}", flush=True)
dist.destroy_process_group()
