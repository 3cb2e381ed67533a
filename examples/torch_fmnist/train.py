"""Fashion-MNIST with PyTorch DDP, on gorun's collectives or on Gloo.

    gorun -np 4 /usr/bin/python3 examples/torch_fmnist/train.py --backend gorun --model cnn
    gorun -np 4 /usr/bin/python3 examples/torch_fmnist/train.py --backend gloo  --model cnn
    gorun -np 4 --strategy hub /usr/bin/python3 examples/torch_fmnist/train.py --backend gorun

The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
Every rank takes the same seeded shuffle of the first --train samples and
trains on its shard of each global batch, so runs with either backend see the
same data in the same order. Rank 0 prints one line per epoch and a summary:
"final backend=... np=... epochs=... test_acc=... seconds_per_epoch=...
longest_stall_s=... weights=..." (the longest time between two of its
completed steps, and a digest of the trained weights' bits: under
gorun --exact the same whatever the strategy or algorithm).

On an elastic gorun job (gorun --elastic [--max-restarts R], --backend gorun)
a lost rank makes the survivors resync (model, optimizer, position in the
epoch) and train on; a restarted rank takes their state and comes back in.
--kill-rank/--kill-step make the drill: that rank (of the job) SIGKILLs
itself at that global step (once: a restarted process does not).
"""

import argparse
import gzip
import hashlib
import os
import signal
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = "/usr/share/datasets/fashion-mnist"

ap = argparse.ArgumentParser()
ap.add_argument("--backend", choices=["gorun", "gloo"], default="gorun")
ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--train", type=int, default=10000, help="training samples (of 60000)")
ap.add_argument("--test", type=int, default=2000, help="test samples (of 10000)")
ap.add_argument("--batch", type=int, default=128, help="global batch")
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--kill-rank", type=int, default=-1)
ap.add_argument("--kill-step", type=int, default=-1)
args = ap.parse_args()
torch.set_num_threads(1)


def idx(name, n):
    with gzip.open(os.path.join(DATA, name)) as f:
        magic, count = struct.unpack(">II", f.read(8))
        dims = [struct.unpack(">I", f.read(4))[0] for _ in range((magic & 0xFF) - 1)]
        n = min(n, count)
        size = 1
        for d in dims:
            size *= d
        return torch.frombuffer(bytearray(f.read(n * size)), dtype=torch.uint8).reshape(n, *dims)


def load(split, n):
    x = idx(f"{split}-images-idx3-ubyte.gz", n).float().div_(255).sub_(0.2860).div_(0.3530)
    y = idx(f"{split}-labels-idx1-ubyte.gz", n).long()
    return x.unsqueeze(1), y


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x.flatten(1))))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 8, 5), nn.Conv2d(8, 16, 5)
        self.fc1, self.fc2 = nn.Linear(16 * 4 * 4, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


if args.backend == "gorun":
    import gorun.torch as gt
    gt.init()
    elastic, restarts = gt.world().elastic, gt.world().restarts
    job_rank = gt.world().rank  # on an elastic job dist.get_rank() is the place in the current view
else:
    # env:// starts torch's TCPStore, which asks for libuv from torch 2.4
    # on; Debian 13's PyTorch is built without it (USE_LIBUV=0 takes the
    # store's other server; torch 1.13 ignores the variable).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo")
    elastic, restarts = False, 0
    job_rank = dist.get_rank()

xtr, ytr = load("train", args.train)
xte, yte = load("t10k", args.test)
torch.manual_seed(args.seed)
model = MLP() if args.model == "mlp" else CNN()
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
steps_per_epoch = args.train // args.batch
step = 0  # global step: epoch * steps_per_epoch + position
if restarts > 0:
    try:
        step, _ = gt.resync(model, opt, step)
    except gt.GorunError as e:
        # Restarted after the others had finished: there is nothing to
        # resume, and no state to take.
        if "holds the training state" not in str(e):
            raise
        print(f"rank {job_rank}: restarted after the other ranks finished; nothing to resume", flush=True)
        raise SystemExit(0)
ddp = None


def weights_digest():
    """The first 16 hex digits of a SHA-256 of the parameters' bits."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def accuracy():
    model.eval()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    model.train()
    return acc


t_start = time.perf_counter()
last_step_at, longest_stall = None, 0.0  # the longest time between two completed steps (after the first)
epoch_times = []
t_epoch = time.perf_counter()
while step < args.epochs * steps_per_epoch:
    epoch, pos = divmod(step, steps_per_epoch)
    if step == args.kill_step and job_rank == args.kill_rank and restarts == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if ddp is None:
            ddp = DDP(model)
        n, r = dist.get_world_size(), dist.get_rank()
        perm = torch.randperm(args.train, generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        batch = perm[pos * args.batch:(pos + 1) * args.batch]
        mine = batch[r::n]  # this rank's shard of the global batch
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xtr[mine]), ytr[mine])
        loss.backward()
        opt.step()
        step += 1
        now = time.perf_counter()
        if last_step_at is not None:
            longest_stall = max(longest_stall, now - last_step_at)
        last_step_at = now
    except Exception as e:
        if not (elastic and gt.is_view_changed(e)):
            raise
        ddp = None
        step, _ = gt.resync(model, opt, step)
        if dist.get_rank() == 0:
            print(f"view changed: {dist.get_world_size()} ranks, resuming at step {step}", flush=True)
        continue
    if step % steps_per_epoch == 0:
        now = time.perf_counter()
        epoch_times.append(now - t_epoch)
        if dist.get_rank() == 0:
            print(f"epoch {step // steps_per_epoch} seconds={now - t_epoch:.2f} loss={loss.item():.4f} "
                  f"test_acc={accuracy():.4f}", flush=True)
        t_epoch = time.perf_counter()
        last_step_at = None  # the test evaluation is not a stall

if dist.get_rank() == 0:
    per_epoch = sum(epoch_times) / max(len(epoch_times), 1)
    print(f"final backend={args.backend} np={dist.get_world_size()} model={args.model} epochs={args.epochs} "
          f"test_acc={accuracy():.4f} seconds_per_epoch={per_epoch:.2f} "
          f"total_seconds={time.perf_counter() - t_start:.2f} longest_stall_s={longest_stall:.3f} "
          f"weights={weights_digest()}", flush=True)
dist.destroy_process_group()
