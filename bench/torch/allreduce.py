"""torch.distributed.all_reduce timed through a backend, for side-by-side runs.

    gorun -np N /usr/bin/python3 bench/torch/allreduce.py --backend gorun|gloo [--sizes 4096,1048576] [--iters K] [--back-to-back]

Each size (bytes of float32) is warmed up, then timed over K calls (a
barrier before each, so that every call starts together); rank 0 prints one
line per size: "size=B backend=X np=N median_us=... p10_us=... busbw_GBps=..."
(bus bandwidth as nccl-tests defines it: 2(N-1)/N x bytes / time).

--dump PREFIX writes each rank's timed calls to PREFIX.RANK.csv (size,
barrier_exit_s,end_s, on the host's monotonic clock, which ranks on one
host share), to see how the barrier's skew between ranks shapes a call's
time (bench/torch/skew.py reads them).

--back-to-back times calls as a Go program's sweep does (examples/allreduce,
gorun bench): K blocks of calls with no barrier between them, each block's
time divided by its calls (100 calls a block up to 64 KiB, 10 above); the
median and p10 are over the blocks.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import backend

ap = argparse.ArgumentParser()
ap.add_argument("--backend", choices=["gorun", "gloo"], required=True)
ap.add_argument("--sizes", default="4096,65536,1048576,16777216,67108864")
ap.add_argument("--iters", type=int, default=30)
ap.add_argument("--back-to-back", action="store_true", help="time blocks of calls with no barrier between them")
ap.add_argument("--dump", help="write each timed call's barrier exit and end to DUMP.RANK.csv")
args = ap.parse_args()
if args.dump and args.back_to_back:
    ap.error("--dump times calls after a barrier: it does not go with --back-to-back")

torch.set_num_threads(1)
backend.init(args.backend)
R, N = dist.get_rank(), dist.get_world_size()
dump = open(f"{args.dump}.{R}.csv", "w") if args.dump else None
for size in [int(s) for s in args.sizes.split(",")]:
    t = torch.ones(size // 4)
    iters = args.iters if size <= (1 << 20) else max(5, args.iters // 4)
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    if args.back_to_back:
        calls = 100 if size <= (64 << 10) else 10
        for _ in range(iters):
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            times.append((time.perf_counter() - t0) / calls)
    else:
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            if dump:
                dump.write(f"{size},{t0:.9f},{t1:.9f}\n")
    if R == 0:
        med = statistics.median(times)
        p10 = sorted(times)[len(times) // 10]
        busbw = 2 * (N - 1) / N * size / med / 1e9 if N > 1 else 0.0
        print(f"size={size} backend={args.backend} np={N} median_us={med * 1e6:.1f} p10_us={p10 * 1e6:.1f} "
              f"busbw_GBps={busbw:.3f}", flush=True)
if dump:
    dump.close()
dist.destroy_process_group()
