"""DDP on an elastic gorun job: a rank is killed, the survivors resync and go
on, and with --max-restarts the restarted rank comes back in.

    gorun --elastic [--max-restarts 1] -np N /usr/bin/python3 python/tests/elastic.py [--victim V] [--at S] [--steps K]

This is the loop docs/pytorch.md shows. At the end every rank of the final
view checks that it holds the same weights and step as every other, and
prints "gorun-elastic-ok rank=R step=S size=M resyncs=K restarts=T".
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gorun.torch as gt

ap = argparse.ArgumentParser()
ap.add_argument("--victim", type=int, default=1)
ap.add_argument("--at", type=int, default=10)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--until-size", type=int, default=0, help="train on until the view has this many ranks")
args = ap.parse_args()
torch.set_num_threads(1)

gt.init()
w = gt.world()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step, resyncs = 0, 0
if w.restarts > 0:  # a restarted rank holds no state: take the survivors'
    step, _ = gt.resync(model, opt, step)
    resyncs += 1
ddp = None
g = torch.Generator()
while step < args.steps or dist.get_world_size() < args.until_size:
    if step > args.steps + 2000:
        raise SystemExit(f"rank {w.rank}: the view never grew back to {args.until_size} ranks")
    if w.restarts == 0 and w.rank == args.victim and step == args.at:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if ddp is None:
            ddp = DDP(model)
        g.manual_seed(step)
        n, r = dist.get_world_size(), dist.get_rank()
        x = torch.randn(8 * n, 16, generator=g)
        y = torch.randn(8 * n, 4, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x[8 * r:8 * (r + 1)]), y[8 * r:8 * (r + 1)]).backward()
        opt.step()
        step += 1
        time.sleep(0.01)
    except Exception as e:
        if not gt.is_view_changed(e):
            raise
        ddp = None  # its group is stale; wrap again on the new view
        step, _ = gt.resync(model, opt, step)
        resyncs += 1

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()] + [torch.tensor([float(step)])])
n = dist.get_world_size()
all_w = [torch.empty_like(flat) for _ in range(n)]
dist.all_gather(all_w, flat)
for q in range(n):
    if not torch.equal(all_w[q], flat):
        raise AssertionError(f"rank {w.rank}: weights or step differ from group rank {q}'s")
print(f"gorun-elastic-ok rank={w.rank} step={step} size={n} resyncs={resyncs} restarts={w.restarts}", flush=True)
dist.destroy_process_group()
