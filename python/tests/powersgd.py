"""PyTorch's own PowerSGD comm hook (torch.distributed.algorithms.
ddp_comm_hooks.powerSGD_hook) on the gorun backend: DDP with the hook
trains a small float32 model for K steps past start_powerSGD_iter; every
rank ends with the same weights (bit for bit), and the loss falls. Run
under gorun:

    gorun -np N /usr/bin/python3 python/tests/powersgd.py [--steps K]

Prints "gorun-powersgd-ok rank=R loss0=A loss=B" and exits 0.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

import gorun.torch as gt

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()

gt.init()
R, N = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
torch.manual_seed(42)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
ddp = DDP(model, bucket_cap_mb=0.005)
state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3, min_compression_rate=0.5)
ddp.register_comm_hook(state, psgd.powerSGD_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator().manual_seed(7 + R)
w = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))  # one target for all ranks
losses = []
for step in range(args.steps):
    x = torch.randn(16, 32, generator=g)
    y = x @ w
    opt.zero_grad()
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
all_w = [torch.empty_like(flat) for _ in range(N)]
dist.all_gather(all_w, flat)
for q in range(N):
    if not torch.equal(all_w[q], flat):
        raise AssertionError(f"rank {R}: weights differ from rank {q}'s")
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
if not last < first:
    raise AssertionError(f"rank {R}: the loss did not fall: {first} -> {last}")
print(f"gorun-powersgd-ok rank={R} loss0={first:.4f} loss={last:.4f}", flush=True)
dist.destroy_process_group()
