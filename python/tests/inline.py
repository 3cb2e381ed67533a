"""Small operations that run in the calling thread (gorun.torch.INLINE_BYTES)
against the threaded path and a reference.

    gorun -np N /usr/bin/python3 python/tests/inline.py [--mode check|timeout|kill]

check: all_reduce (every op, AVG for the floating types), reduce and
broadcast of every native dtype at random sizes (0, 1, primes, the
threshold's element count -1, +0, +1), run inline and threaded (the
group's inline switch off), must give the same bits, equal to a
reference; an all_reduce runs a third way too, through the native fast
path (gorun.torch.NATIVE), when it is there. Small operations started
between a large nonblocking all-reduce's start and its wait keep their
order and results. Prints "gorun-inline-ok rank=R checks=K inline=I
fast=F native=V", F counting the all-reduces that the Python
allreduce's fast path ran (not the general _reduce), V those the native
path ran (-1: no native path).

timeout: rank 0 alone runs an all-reduce on a group with a 2 s timeout
and must raise Timeout; prints "gorun-inline-seen rank=R error=T".

kill: the last rank exits after a few all-reduces; every other rank,
looping on all-reduces, prints "gorun-inline-seen rank=R error=T
after=S: MESSAGE" and exits 3.

--bytes sets the all-reduces' size in timeout and kill (256: small, run in
the calling thread; above INLINE_BYTES they are started on gorun's
goroutines, natively or through Python).
"""

import argparse
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import gorun.torch as gt

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["check", "timeout", "kill"], default="check")
ap.add_argument("--bytes", type=int, default=256)
a = ap.parse_args()
signal.signal(signal.SIGTERM, lambda *_: None)  # let a rank report what it saw
gt.init()
R, N = dist.get_rank(), dist.get_world_size()
pg = dist.distributed_c10d._get_default_group()

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]


def reference(xs, op):
    s = torch.stack(xs)
    if op == dist.ReduceOp.SUM:
        return s.sum(0, dtype=xs[0].dtype)
    if op == dist.ReduceOp.MAX:
        return s.max(0).values
    if op == dist.ReduceOp.MIN:
        return s.min(0).values
    if op == dist.ReduceOp.AVG:
        return s.sum(0, dtype=xs[0].dtype) / N
    return s.prod(0, dtype=xs[0].dtype)


def data(gen, n, dtype, op):
    lo, hi = (-3, 4) if dtype not in (torch.uint8,) else (0, 4)
    if op == dist.ReduceOp.PRODUCT:
        lo, hi = (1, 3) if dtype in (torch.uint8, torch.int8) else (-2, 3)
    return [torch.randint(lo, hi, (n,), generator=gen).to(dtype) for _ in range(N)]


# The group's native all-reduce (an instance attribute over the class's
# method), taken off to run the Python paths.
NATIVE_AR = pg.__dict__.get("allreduce")
if (gt.NATIVE is not None) != (NATIVE_AR is not None):
    raise SystemExit(f"rank {R}: gorun.torch.NATIVE is {gt.NATIVE} but the group's native all-reduce is {NATIVE_AR}")


def all_reduce_paths(x, op):
    """x all-reduced through every path: [native (when there is one),
    inline, threaded]; and how many of them the Python fast path ran."""
    got, fast = [], 0
    paths = (["native"] if NATIVE_AR is not None else []) + ["inline", "threaded"]
    for path in paths:
        pg._inline_ok = path != "threaded"
        if path == "native":
            pg.allreduce = NATIVE_AR
        t = x.clone()
        before = general[0]
        dist.all_reduce(t, op=op)
        pg.__dict__.pop("allreduce", None)
        fast += int(path == "inline" and general[0] == before)
        got.append(t)
    pg._inline_ok = True
    if NATIVE_AR is not None:
        pg.allreduce = NATIVE_AR
    return got, fast


general = [0]  # calls of the general path (_reduce)


def check():
    gen = torch.Generator().manual_seed(99)
    checks = inline = fast = 0
    above = 0  # all-reduces too large to run inline
    reduce_ = pg._reduce

    def counted(*args):
        general[0] += 1
        return reduce_(*args)
    pg._reduce = counted
    for dtype in DTYPES:
        edge = gt.INLINE_BYTES // torch.tensor([], dtype=dtype).element_size()
        sizes = [0, 1, 2, 3, 7, 13, 31, 257, edge - 1, edge, edge + 1]
        for n in sizes:
            for op in OPS + ([dist.ReduceOp.AVG] if dtype.is_floating_point else []):
                xs = data(gen, n, dtype, op)
                want = reference(xs, op) if n else xs[R]
                got, f = all_reduce_paths(xs[R], op)
                fast += f
                assert all(torch.equal(g, want) for g in got), (dtype, n, op, len(got))
                checks += 1
                small = pg._inline([xs[R]]) is not None
                inline += int(small)
                above += int(not small)
            root = n % N
            xs = data(gen, n, dtype, dist.ReduceOp.SUM)
            for on in (True, False):
                pg._inline_ok = on
                t = xs[R].clone()
                dist.broadcast(t, root)
                assert torch.equal(t, xs[root]), ("broadcast", dtype, n, on)
                t = xs[R].clone()
                dist.reduce(t, root, op=dist.ReduceOp.SUM)
                if R == root:
                    assert torch.equal(t, reference(xs, dist.ReduceOp.SUM) if n else xs[R]), ("reduce", dtype, n, on)
                checks += 2
            pg._inline_ok = True
    # A future's callback that waits for another operation's future: the
    # thread that runs it must not be the one the other's completion needs.
    # Both are started (above INLINE_BYTES), so that their futures complete
    # on gorun's threads.
    started = gt.INLINE_BYTES // 4 + 1
    for _ in range(5):
        a, b = torch.ones(started), torch.ones(started)
        wa = dist.all_reduce(a, async_op=True)
        fb = dist.all_reduce(b, async_op=True).get_future()
        got = wa.get_future().then(lambda f: fb.wait()[0].sum().item())
        assert got.wait() == N * started, ("callback waiting on a future", got.value())
        checks += 1
    # A large operation in flight while small ones run inline.
    big = [torch.full((max(1 << 20, started),), float(r + 1)) for r in range(N)]
    t = big[R].clone()
    w = dist.all_reduce(t, async_op=True)
    smalls = []
    for i in range(20):
        s = torch.full((16,), float(i * N + R))
        dist.all_reduce(s)
        smalls.append(s)
    w.wait()
    assert torch.equal(t, sum(big)), "large all-reduce beside small ones"
    for i, s in enumerate(smalls):
        assert torch.equal(s, torch.full((16,), float(sum(i * N + r for r in range(N))))), ("small", i)
    checks += 21
    pg._reduce = reduce_
    native = -1
    if NATIVE_AR is not None:
        native = NATIVE_AR.ran
        # Every all-reduce small enough to run inline, and only those,
        # ran natively in this thread: the checks' and the 20 beside the
        # large one; every larger one started natively: the checks', the
        # 10 of the callbacks and the large one.
        assert native == inline + 20, ("native", native, inline)
        assert NATIVE_AR.started == above + 10 + 1, ("native started", NATIVE_AR.started, above)
    print(f"gorun-inline-ok rank={R} checks={checks} inline={inline} fast={fast} native={native}", flush=True)


def seen(e, t0):
    print(f"gorun-inline-seen rank={R} error={type(e).__name__} after={time.monotonic() - t0:.2f}: {e}",
          flush=True)
    os._exit(3)


if a.mode == "check":
    check()
elif a.mode == "timeout":
    g = dist.new_group(list(range(N)), timeout=timedelta(seconds=2))
    t0 = time.monotonic()
    try:
        if R == 0:
            dist.all_reduce(torch.ones(a.bytes // 4), group=g)
        else:
            dist.barrier()
        raise SystemExit(f"rank {R}: an operation no other rank entered returned")
    except gt.GorunError as e:
        seen(e, t0)
else:
    t = torch.ones(a.bytes // 4)
    for _ in range(10):
        dist.all_reduce(t)
    if R == N - 1:
        os._exit(9)
    t0 = time.monotonic()
    try:
        for _ in range(10_000_000):
            dist.all_reduce(t)
        raise SystemExit(f"rank {R}: all-reduces went on without rank {N - 1}")
    except gt.GorunError as e:
        seen(e, t0)
dist.destroy_process_group()
