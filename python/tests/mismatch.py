"""Shapes that disagree across ranks raise on every rank, naming the ranks.

    gorun -np N /usr/bin/python3 python/tests/mismatch.py

Rank r all-reduces 3 + r elements (rank 0 and the last rank differ at
least). Each rank prints "gorun-mismatch-seen rank=R error=<type>: <message>"
and exits 3; a rank whose all-reduce succeeds fails the test.
"""

import signal

import torch
import torch.distributed as dist

import gorun.torch as gt

signal.signal(signal.SIGTERM, lambda *_: None)  # let this rank report what it saw
gt.init()
R = dist.get_rank()
try:
    dist.all_reduce(torch.ones(3 + R))
    raise SystemExit(f"rank {R}: an all-reduce of {3 + R} elements succeeded")
except gt.GorunError as e:
    print(f"gorun-mismatch-seen rank={R} error={type(e).__name__}: {e}", flush=True)
    raise SystemExit(3)
