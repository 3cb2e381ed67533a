"""DDP over the gorun backend against one process training on the whole batch.

    gorun -np N [--strategy hub] /usr/bin/python3 python/tests/ddp.py [--steps K]

Every rank trains its shard of each global batch under DDP (small buckets,
several all-reduces a step: run in the calling thread, being small, or with
GORUN_TORCH_INLINE_BYTES=0 handed off to overlap backward) and, beside it, a copy of the
model on the whole global batch in this process alone. After K steps the DDP
weights must equal the single-process weights within float tolerance, and be
the same bits on every rank. Prints "gorun-ddp-ok rank=R ..." and exits 0.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gorun.torch as gt

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--batch", type=int, default=8, help="samples per rank")
args = ap.parse_args()

gt.init()
R, N = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 10)
        # Buffers of other dtypes, which DDP broadcasts from rank 0.
        self.register_buffer("seen", torch.zeros(1, dtype=torch.int64))
        self.register_buffer("mask", torch.ones(10, dtype=torch.bool))

    def forward(self, x):
        self.seen += x.shape[0]
        h = torch.relu(self.conv(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(h))).masked_fill(~self.mask, 0)


def make():
    torch.manual_seed(42)
    return Net().double()


model, ref = make(), make()
ddp = DDP(model, bucket_cap_mb=0.005)  # several buckets for this model
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(7)
for step in range(args.steps):
    x = torch.randn(N * args.batch, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (N * args.batch,), generator=g)
    mine = slice(R * args.batch, (R + 1) * args.batch)
    opt.zero_grad()
    loss_fn(ddp(x[mine]), y[mine]).backward()
    opt.step()
    ref_opt.zero_grad()
    loss_fn(ref(x), y).backward()
    ref_opt.step()

worst = 0.0
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    d = (p - q).abs().max().item()
    worst = max(worst, d)
    if not torch.allclose(p, q, rtol=1e-9, atol=1e-11):
        raise AssertionError(f"rank {R}/{N}: {name} differs from the single-process run by {d}")
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
all_w = [torch.empty_like(flat) for _ in range(N)]
dist.all_gather(all_w, flat)
for q in range(N):
    if not torch.equal(all_w[q], flat):
        raise AssertionError(f"rank {R}: weights differ from rank {q}'s")
print(f"gorun-ddp-ok rank={R} size={N} steps={args.steps} maxdiff={worst:.3g} hub={gt.world().hub}", flush=True)
dist.destroy_process_group()
