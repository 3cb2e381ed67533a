"""An operation's timeout ends it with Timeout, and the job's
communication with it.

    gorun -np N /usr/bin/python3 python/tests/timeout.py

Rank 0 alone enters a barrier of a group made with a 0.5 s timeout; the
other ranks enter a barrier of the job's group, which rank 0 never
reaches. Rank 0 must raise gorun's Timeout (a TimeoutError whose message
says " timeout ", as torch's backends do) no sooner than 0.5 s; the others
must raise Aborted naming rank 0's timeout. Each rank prints
"gorun-timeout-seen rank=R error=<type> took=<s>: <message>" and exits 3.
"""

import signal
import time
from datetime import timedelta

import torch.distributed as dist

import gorun.torch as gt

signal.signal(signal.SIGTERM, lambda *_: None)  # let this rank report what it saw
gt.init()
R, N = dist.get_rank(), dist.get_world_size()
g = dist.new_group(list(range(N)), timeout=timedelta(seconds=0.5))
t0 = time.monotonic()
try:
    if R == 0:
        dist.barrier(group=g)
    else:
        dist.barrier()
    raise SystemExit(f"rank {R}: a barrier no other rank entered returned")
except gt.GorunError as e:
    took = time.monotonic() - t0
    kind = type(e).__name__ + ("(TimeoutError)" if isinstance(e, TimeoutError) else "")
    print(f"gorun-timeout-seen rank={R} error={kind} took={took:.3f}: {e}", flush=True)
    raise SystemExit(3)
