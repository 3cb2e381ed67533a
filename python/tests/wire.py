"""float32 all_reduce through the gorun backend with gorun --wire fp16 or
bf16: each rank's result within the format's bound of the exact sum (made
here from every rank's inputs), a value of the format (the format was
used), and the same bits on every rank (a digest printed for the test to
compare). Other dtypes stay exact. Run under gorun:

    gorun --wire bf16 -np N /usr/bin/python3 python/tests/wire.py

Prints "gorun-wire-ok rank=R wire=W digest=D worst=F" and exits 0.
"""

import hashlib
import os

import torch
import torch.distributed as dist

import gorun.torch as gt

gt.init()
R, N = dist.get_rank(), dist.get_world_size()
WIRE = os.environ["GORUN_WIRE"]
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}[WIRE]
U = {"fp16": 2.0**-11, "bf16": 2.0**-8}[WIRE]
n = 100_003


def inputs(rank):
    g = torch.Generator().manual_seed(36_000 + rank)
    return (torch.randn(n, generator=g, dtype=torch.float64) * 10).to(torch.float32)


ins = [inputs(r) for r in range(N)]
exact = torch.stack([x.to(torch.float64) for x in ins]).sum(0)
absum = torch.stack([x.to(torch.float64).abs() for x in ins]).sum(0)
t = ins[R].clone()
dist.all_reduce(t, op=dist.ReduceOp.SUM)
bound = N * (U + 2.0**-24) * absum * 1.125 + N * 2.0**-25
off = (t.to(torch.float64) - exact).abs()
if not bool((off <= bound).all()):
    i = int((off - bound).argmax())
    raise SystemExit(f"rank {R}: element {i} is {t[i].item()}, exact {exact[i].item()}, off by {off[i].item()} > {bound[i].item()}")
if N > 1 and not bool((t.to(HALF).to(torch.float32) == t).all()):
    raise SystemExit(f"rank {R}: the sums are not values of {WIRE}: the wire format was not used")
# Other dtypes never travel in a lossy format.
ints = [torch.arange(1000, dtype=torch.int64) * (r + 1) for r in range(N)]
it = ints[R].clone()
dist.all_reduce(it)
if not torch.equal(it, torch.stack(ints).sum(0)):
    raise SystemExit(f"rank {R}: int64 all_reduce not exact under --wire {WIRE}")
digest = hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]
worst = float((off / bound).max()) if n else 0.0
print(f"gorun-wire-ok rank={R} wire={WIRE} digest={digest} worst={worst:.2f}", flush=True)
dist.destroy_process_group()
