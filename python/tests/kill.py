"""A rank killed mid-step: every other rank's pending Work fails naming it.

    gorun -np N /usr/bin/python3 python/tests/kill.py [--victim V] [--at STEP]

Every rank runs all-reduces with several Works outstanding; the victim
SIGKILLs itself at step STEP. Survivors ignore the SIGTERM with which gorun
ends the job (until its grace period's SIGKILL). Each survivor prints
"gorun-kill-seen rank=R after=SECONDS error=<type>: <message>" and exits 3.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

import gorun.torch as gt

ap = argparse.ArgumentParser()
ap.add_argument("--victim", type=int, default=1)
ap.add_argument("--at", type=int, default=20)
args = ap.parse_args()

# gorun ends the job with SIGTERM as soon as the victim dies; note it and
# go on, so that what this rank's pending Work does is what is shown.
signal.signal(signal.SIGTERM, lambda *_: None)
gt.init()
R = dist.get_rank()
bufs = [torch.ones(n) for n in (1, 1000, 100000, 7)]
step = 0
killed_at = None
try:
    while True:
        if R == args.victim and step == args.at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == args.at:
            killed_at = time.monotonic()
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for w in works:
            w.wait()
        step += 1
        if step > 100000:
            raise SystemExit("the victim never died")
except RuntimeError as e:
    after = time.monotonic() - (killed_at or time.monotonic())
    print(f"gorun-kill-seen rank={R} after={after:.2f} error={type(e).__name__}: {e}", flush=True)
    raise SystemExit(3)
