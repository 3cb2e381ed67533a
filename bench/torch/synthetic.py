"""A small CNN trained on synthetic images, in images per second, through
gorun.horovod or through DDP on a torch.distributed backend.

    gorun -np N /usr/bin/python3 bench/torch/synthetic.py --api horovod
    gorun -np N /usr/bin/python3 bench/torch/synthetic.py --api ddp --backend gorun
    gorun -np N /usr/bin/python3 bench/torch/synthetic.py --api ddp --backend gloo

What Horovod's examples/pytorch/pytorch_synthetic_benchmark.py measures,
sized for a CPU: every rank trains the same model (SmallCNN below, about
0.4 M parameters) with SGD on one fixed batch of --batch random 3x224x224
images and labels of 1000 classes, --warmup steps untimed, then --iters
timed steps. The three runs differ only in how the gradients are averaged:
gorun.horovod's DistributedOptimizer (one allreduce per gradient, started
during backward), or DDP (gradients in buckets) on gorun's backend or on
Gloo. Rank 0 prints one line:
"api=... backend=... np=N batch=B iters=K seconds=... img_per_s=...
img_per_s_per_rank=..." (img_per_s counts every rank's images).
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--api", choices=["horovod", "ddp"], required=True)
ap.add_argument("--backend", choices=["gorun", "gloo"], default="gorun", help="torch.distributed backend (ddp)")
ap.add_argument("--batch", type=int, default=16, help="images per rank and step")
ap.add_argument("--warmup", type=int, default=5, help="untimed steps")
ap.add_argument("--iters", type=int, default=30, help="timed steps")
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()
if args.api == "horovod":
    args.backend = "gorun"
# One thread per rank, as Horovod's examples set it on a CPU: the ranks
# share the machine's cores.
torch.set_num_threads(1)


class SmallCNN(nn.Module):
    """3x224x224 -> 1000 classes: two strided convolutions, pooled to 4x4,
    and two linear layers."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 5, stride=4, padding=2)   # 16x56x56, pooled to 28x28
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)  # 32x14x14
        self.pool = nn.AdaptiveAvgPool2d(4)                  # 32x4x4
        self.l1, self.l2 = nn.Linear(512, 256), nn.Linear(256, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = self.pool(F.relu(self.c2(x))).flatten(1)
        return self.l2(F.relu(self.l1(x)))


torch.manual_seed(args.seed)
model = SmallCNN()

if args.api == "horovod":
    import gorun.horovod as hvd

    hvd.init()
    R, N = hvd.rank(), hvd.size()
    # The learning rate scaled by the ranks, as Horovod's benchmark does.
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * N)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    net, barrier = model, hvd.barrier
else:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import backend
    backend.init(args.backend)
    R, N = dist.get_rank(), dist.get_world_size()
    net = DDP(model)  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(net.parameters(), lr=0.01 * N)
    barrier = dist.barrier

# The fixed synthetic batch: a different one on each rank.
g = torch.Generator().manual_seed(args.seed + R)
data = torch.randn(args.batch, 3, 224, 224, generator=g)
target = torch.randint(0, 1000, (args.batch,), generator=g)


def step():
    opt.zero_grad()
    F.cross_entropy(net(data), target).backward()
    opt.step()


for _ in range(args.warmup):
    step()
barrier()
t0 = time.perf_counter()
for _ in range(args.iters):
    step()
# Every rank's last step has averaged its gradients with the others'; the
# barrier makes rank 0's clock wait for the slowest rank.
barrier()
secs = time.perf_counter() - t0
if R == 0:
    per_rank = args.batch * args.iters / secs
    print(f"api={args.api} backend={args.backend} np={N} batch={args.batch} iters={args.iters} "
          f"seconds={secs:.3f} img_per_s={per_rank * N:.1f} img_per_s_per_rank={per_rank:.1f}", flush=True)
if args.api == "horovod":
    hvd.shutdown()
else:
    dist.destroy_process_group()
