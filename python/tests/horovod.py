"""gorun.horovod (Horovod's PyTorch API on gorun) against naive references
computed here: each rank makes every rank's inputs from one seed.

    gorun -np N /usr/bin/python3 python/tests/horovod.py --mode ops   [--seed S]
    gorun -np N /usr/bin/python3 python/tests/horovod.py --mode train
    gorun -np N /usr/bin/python3 python/tests/horovod.py --mode kill --victim V --at STEP
    gorun --elastic -np N /usr/bin/python3 python/tests/horovod.py --mode elastic --victim V --at STEP
    /usr/bin/python3 python/tests/horovod.py --mode ops|train   (no launcher: a job of one rank)

ops: the job's shape (local and cross ranks); every collective, data
type and a spread of sizes; compression; process sets of the even and
the odd ranks; join; the errors of ranks that disagree; shutdown and init
again; the timeline calls refused and HOROVOD_TIMELINE warned about.
train: DistributedOptimizer equals one process on the whole batch
(float64), also with backward_passes_per_step=2,
gradient_predivide_factor and op=Sum, and wrapped after an LR scheduler
was made on it; fp16 compression within its bound; broadcast_parameters
and broadcast_optimizer_state (also after a backward pass);
SyncBatchNorm; elastic.run on a job of fixed size.
kill: rank V SIGKILLs itself at step STEP with all-reduces outstanding;
every survivor must get HorovodInternalError naming it.
elastic: hvd.elastic.run through the loss of rank V at step STEP.

Prints "hvd-ok rank=R mode=M size=N checks=K" (kill: "hvd-kill-seen
rank=R error=T: message") and exits 0 when every check passed; a failed
check raises, naming the call, data type, size and rank.
"""

import argparse
import os
import signal
import socket
import time
import warnings

import torch
import torch.nn as nn

import gorun.horovod as hvd

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["ops", "train", "kill", "elastic"], default="ops")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--until-size", type=int, default=0, help="elastic: train on until the view has this many ranks")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--victim", type=int, default=1)
ap.add_argument("--at", type=int, default=10)
args = ap.parse_args()

if args.mode == "kill":
    # gorun ends the job with SIGTERM once the victim dies: note it and go
    # on, so that what this rank's pending handles do is what is shown.
    signal.signal(signal.SIGTERM, lambda *_: None)
torch.set_num_threads(1)
hvd.init()
R, N = hvd.rank(), hvd.size()
checks = 0
case = 0
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64]
if hasattr(torch, "bfloat16"):
    DTYPES.append(torch.bfloat16)
SIZES = sorted({0, 1, 2, 3, 7, 13, 31, 257, max(N - 1, 0), N + 1})
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52}


def gen(dtype, shape, rank, kind="sum"):
    """Rank rank's input for the current case (the same on every rank)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + case * 101 + rank)
    if dtype.is_floating_point:
        x = torch.rand(shape, generator=g, dtype=torch.float64)
        x = 0.75 + x / 2 if kind == "product" else x * 20 - 10
        return x.to(dtype)
    if kind == "product":
        lo, hi = 1, 3
    elif dtype == torch.uint8:
        lo, hi = 0, 40  # sums of five ranks stay below 256
    elif dtype == torch.int8:
        lo, hi = -20, 20
    else:
        lo, hi = -1000, 1000
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def check(ok, what):
    global checks
    if not ok:
        raise AssertionError(f"rank {R}/{N}: {what}")
    checks += 1


def close(got, want, dtype, bound, what):
    """got (in dtype) against want (float64): exact for integers, else
    within bound (elementwise, float64)."""
    check(got.dtype == dtype, f"{what}: result dtype {got.dtype}, want {dtype}")
    check(tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    if not dtype.is_floating_point:
        check(torch.equal(got.to(torch.int64), want.to(torch.int64)), f"{what}: {got} != {want}")
        return
    err = (got.to(torch.float64) - want).abs()
    bad = err > bound
    check(not bool(bad.any()), f"{what}: worst error {err.max().item() if err.numel() else 0} over the bound "
          f"(got {got[bad][:4].tolist()}, want {want[bad][:4].tolist()})")


def next_case():
    global case
    case += 1


def reduce_ref(xs, op, dtype):
    """The reduction of every rank's input, in float64 (integers exact), and
    an error bound for a float result in dtype."""
    x = torch.stack([t.to(torch.float64) for t in xs])
    absum = x.abs().sum(0)
    if op == hvd.Sum or op == hvd.Average:
        ref = x.sum(0)
    elif op == hvd.Min:
        ref = x.min(0).values
    elif op == hvd.Max:
        ref = x.max(0).values
    else:
        ref = x.prod(0)
        absum = ref.abs() * len(xs)
    if op == hvd.Average:
        if dtype.is_floating_point:
            ref, absum = ref / len(xs), absum / len(xs)
        else:
            ref = torch.div(ref.to(torch.int64), len(xs), rounding_mode="trunc").to(torch.float64)
    eps = EPS.get(dtype, 0.0)
    # gorun sums half types in float32 and rounds once: one rounding in
    # dtype plus float32's accumulated error.
    bound = eps * ref.abs() + 2.0 ** -22 * absum * len(xs) + (eps * 1e-3 if eps else 0)
    if dtype in (torch.float32, torch.float64):
        bound = 4 * len(xs) * eps * absum + 1e-300
    return ref, bound


def shapes():
    for n in SIZES:
        yield (n,)
    yield (3, 5)
    yield (2, 0, 3)


def shape_of_job():
    """init's answers against what every rank reports of itself: ranks of
    one host are local to each other (in rank order), and cross_* counts
    the ranks of the same local rank, as Horovod's do."""
    check(hvd.is_initialized(), "is_initialized() after init()")
    every = hvd.allgather_object(socket.gethostname())
    local = {r: [q for q in range(N) if every[q] == every[r]] for r in range(N)}
    lrank = {r: local[r].index(r) for r in range(N)}
    cross = [r for r in range(N) if lrank[r] == lrank[R]]
    got = (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    want = (lrank[R], len(local[R]), cross.index(R), len(cross))
    check(got == want, f"(local_rank, local_size, cross_rank, cross_size) = {got}, want {want}")
    check(hvd.is_homogeneous() == (len({len(v) for v in local.values()}) == 1), "is_homogeneous()")


def ops():
    shape_of_job()
    # allreduce: every op, dtype and shape; the forms it comes in.
    for dtype in DTYPES:
        for shape in shapes():
            for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
                next_case()
                kind = "product" if op == hvd.Product else "sum"
                xs = [gen(dtype, shape, r, kind) for r in range(N)]
                ref, bound = reduce_ref(xs, op, dtype)
                name = f"allreduce {hvd._engine.OP_NAMES[op]} {dtype} {shape}"
                mine = xs[R].clone()
                got = hvd.allreduce(mine, op=op)
                close(got, ref, dtype, bound, name)
                check(torch.equal(mine, xs[R]), f"{name}: the input changed")
                h = hvd.allreduce_async_(mine, op=op, name=f"ar.{case}")
                got2 = hvd.synchronize(h)
                check(got2 is mine, f"{name}: allreduce_async_ returned another tensor")
                close(mine, ref, dtype, bound, name + " in place")
            if dtype.is_floating_point or dtype in (torch.int32, torch.int64):
                next_case()
                xs = [gen(dtype, (5,), r) for r in range(N)]
                pre, post = (0.5, 3.0) if dtype.is_floating_point else (2.0, 1.0)
                ref, bound = reduce_ref([x.to(torch.float64) * pre for x in xs], hvd.Sum, dtype)
                got = hvd.allreduce(xs[R], op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
                close(got, ref * post, dtype, bound * post * 4, f"allreduce pre/postscale {dtype}")
    # grouped allreduce of mixed dtypes and sizes, and the deprecated average=.
    next_case()
    group = [(DTYPES[i % len(DTYPES)], (SIZES[i % len(SIZES)],)) for i in range(11)]
    xs = [[gen(d, s, r) for d, s in group] for r in range(N)]
    got = hvd.grouped_allreduce(xs[R], op=hvd.Sum)
    for i, (d, s) in enumerate(group):
        ref, bound = reduce_ref([xs[r][i] for r in range(N)], hvd.Sum, d)
        close(got[i], ref, d, bound, f"grouped_allreduce [{i}] {d} {s}")
    mine = [x.clone() for x in xs[R]]
    hvd.synchronize(hvd.grouped_allreduce_async_(mine, average=False))
    for i, (d, s) in enumerate(group):
        ref, bound = reduce_ref([xs[r][i] for r in range(N)], hvd.Sum, d)
        close(mine[i], ref, d, bound, f"grouped_allreduce_async_ [{i}] {d} {s}")
    h = hvd.grouped_allreduce_async(xs[R], op=hvd.Max)
    while not hvd.poll(h):
        time.sleep(0.001)
    got = hvd.synchronize(h)
    for i, (d, s) in enumerate(group):
        ref, bound = reduce_ref([xs[r][i] for r in range(N)], hvd.Max, d)
        close(got[i], ref, d, bound, f"grouped_allreduce_async Max [{i}] {d} {s}")

    # allgather: first dimensions that differ between ranks (0 included).
    for dtype in DTYPES:
        for tail in [(), (3,), (2, 2)]:
            next_case()
            g = torch.Generator().manual_seed(args.seed + case)
            rows = torch.randint(0, 6, (N,), generator=g).tolist()
            xs = [gen(dtype, (rows[r],) + tail, r) for r in range(N)]
            ref = torch.cat(xs)
            got = hvd.allgather(xs[R])
            check(torch.equal(got, ref), f"allgather {dtype} rows {rows} tail {tail}")
            got = hvd.synchronize(hvd.allgather_async(xs[R]))
            check(torch.equal(got, ref), f"allgather_async {dtype} rows {rows} tail {tail}")
    next_case()
    xs = [[gen(d, (r + i % 3,) + (2,) * (i % 2), r) for i, d in enumerate(DTYPES)] for r in range(N)]
    got = hvd.grouped_allgather(xs[R])
    for i, d in enumerate(DTYPES):
        check(torch.equal(got[i], torch.cat([xs[r][i] for r in range(N)])), f"grouped_allgather [{i}] {d}")

    # broadcast from every root.
    for dtype in DTYPES:
        for shape in [(0,), (1,), (13,), (4, 5)]:
            for root in range(N):
                next_case()
                xs = [gen(dtype, shape, r) for r in range(N)]
                mine = xs[R].clone()
                got = hvd.broadcast(mine, root)
                check(torch.equal(got, xs[root]), f"broadcast {dtype} {shape} root {root}")
                check(torch.equal(mine, xs[R]), f"broadcast {dtype}: the input changed")
                hvd.broadcast_(mine, root)
                check(torch.equal(mine, xs[root]), f"broadcast_ {dtype} {shape} root {root}")
                got = hvd.synchronize(hvd.broadcast_async(xs[R], root))
                check(torch.equal(got, xs[root]), f"broadcast_async {dtype} {shape} root {root}")
                mine = xs[R].clone()
                got = hvd.synchronize(hvd.broadcast_async_(mine, root))
                check(got is mine and torch.equal(mine, xs[root]), f"broadcast_async_ {dtype} {shape} root {root}")

    # alltoall: uneven splits (zeros included), and the even default.
    for dtype in DTYPES:
        for tail in [(), (3,)]:
            next_case()
            g = torch.Generator().manual_seed(args.seed * 7 + case)
            splits = torch.randint(0, 4, (N, N), generator=g)  # splits[r][q]: r sends q
            xs = [gen(dtype, (int(splits[r].sum()),) + tail, r) for r in range(N)]
            got, recv = hvd.alltoall(xs[R], splits=splits[R].to(torch.int32))
            parts = []
            for r in range(N):
                off = int(splits[r][:R].sum())
                parts.append(xs[r][off:off + int(splits[r][R])])
            check(torch.equal(got, torch.cat(parts)), f"alltoall {dtype} splits {splits.tolist()}")
            check(recv.tolist() == splits[:, R].tolist() and recv.dtype == torch.int32,
                  f"alltoall received splits {recv} want {splits[:, R].tolist()}")
            next_case()
            xs = [gen(dtype, (2 * N,) + tail, r) for r in range(N)]
            got = hvd.alltoall(xs[R])
            check(torch.equal(got, torch.cat([x[2 * R:2 * R + 2] for x in xs])), f"alltoall even {dtype}")
            out, recv = hvd.synchronize(hvd.alltoall_async(xs[R]))
            check(torch.equal(out, got) and recv.tolist() == [2] * N, f"alltoall_async {dtype}")

    # reducescatter: rows that do not divide (fewer than ranks, 0, primes).
    for dtype in DTYPES:
        for rows in sorted({0, 1, 2, 3, 7, 13, N, 2 * N + 1}):
            for op in (hvd.Sum, hvd.Average):
                next_case()
                xs = [gen(dtype, (rows, 3), r) for r in range(N)]
                ref, bound = reduce_ref(xs, op, dtype)
                sizes = [rows // N + (1 if q < rows % N else 0) for q in range(N)]
                lo = sum(sizes[:R])
                got = hvd.reducescatter(xs[R], op=op)
                close(got, ref[lo:lo + sizes[R]], dtype, bound[lo:lo + sizes[R]],
                      f"reducescatter {hvd._engine.OP_NAMES[op]} {dtype} rows {rows}")
                again = hvd.synchronize(hvd.reducescatter_async(xs[R], op=op))
                check(torch.equal(again, got), f"reducescatter_async {hvd._engine.OP_NAMES[op]} {dtype} rows {rows}")
    next_case()
    group = [(d, ((i * 3) % 7 + 1, 2)) for i, d in enumerate(DTYPES)]
    xs = [[gen(d, s, r) for d, s in group] for r in range(N)]
    got = hvd.grouped_reducescatter(xs[R], op=hvd.Sum)
    for i, (d, s) in enumerate(group):
        ref, bound = reduce_ref([xs[r][i] for r in range(N)], hvd.Sum, d)
        sizes = [s[0] // N + (1 if q < s[0] % N else 0) for q in range(N)]
        lo = sum(sizes[:R])
        close(got[i], ref[lo:lo + sizes[R]], d, bound[lo:lo + sizes[R]], f"grouped_reducescatter [{i}] {d}")
    again = hvd.synchronize(hvd.grouped_reducescatter_async(xs[R], op=hvd.Sum))
    check(len(again) == len(got) and all(torch.equal(a, b) for a, b in zip(again, got)),
          "grouped_reducescatter_async")

    # Compression: none moves the tensor as it is; fp16 moves floats as
    # float16 and gives back the input's type, within float16's rounding.
    for dtype in (torch.float32, torch.float64, torch.int32):
        next_case()
        xs = [gen(dtype, (29,), r) for r in range(N)]
        plain = hvd.allreduce(xs[R], op=hvd.Average)
        check(torch.equal(hvd.allreduce(xs[R], op=hvd.Average, compression=hvd.Compression.none), plain),
              f"allreduce with Compression.none {dtype}")
        got = hvd.allreduce(xs[R], op=hvd.Average, compression=hvd.Compression.fp16)
        if not dtype.is_floating_point:
            check(torch.equal(got, plain), f"Compression.fp16 changed an {dtype} allreduce")
            continue
        parts = torch.stack([x.to(torch.float64) for x in xs])
        want = parts.mean(0)
        # Each input rounded to float16, summed in float32, the mean rounded
        # to float16 (and the sum, where it is rounded before the division).
        bound = 2.0 ** -11 * (parts.abs().mean(0) + 2 * want.abs()) * 1.01 + 2.0 ** -23 + 2.0 ** -20 * parts.abs().sum(0)
        close(got, want, dtype, bound, f"allreduce with Compression.fp16 {dtype}")

    # objects
    obj = {"rank": R, "x": list(range(R))}
    check(hvd.allgather_object(obj) == [{"rank": r, "x": list(range(r))} for r in range(N)], "allgather_object")
    check(hvd.broadcast_object(obj, N - 1) == {"rank": N - 1, "x": list(range(N - 1))}, "broadcast_object")

    # autograd through allreduce and allgather
    x = torch.full((3,), float(R + 1), dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * torch.arange(3.0, dtype=torch.float64)).sum().backward()
    check(torch.equal(x.grad, torch.arange(3.0, dtype=torch.float64) * N), f"allreduce gradient {x.grad}")
    x = torch.ones((R + 1, 2), dtype=torch.float64, requires_grad=True)
    hvd.allgather(x).sum().backward()  # Horovod's allgather gradient is the average of the ranks' gradients
    check(torch.equal(x.grad, torch.ones((R + 1, 2), dtype=torch.float64)), f"allgather gradient {x.grad}")

    # process sets: the even ranks and the odd ranks.
    even, odd = list(range(0, N, 2)), list(range(1, N, 2))
    sets = [hvd.add_process_set(even)] if odd else []  # one rank: the even ranks are the global set
    sets += [hvd.add_process_set(hvd.ProcessSet(odd))] if odd else []
    if not odd:
        try:
            hvd.add_process_set(even)
            check(False, "a duplicate of the global process set was added")
        except ValueError as e:
            check("duplicate" in str(e), f"duplicate process set: {e}")
    for ps in sets:
        check(ps.process_set_id is not None and ps.size() == len(ps.ranks), f"process set {ps}")
        if not ps.included():
            check(ps.rank() == -1, f"{ps}.rank() outside it")
            continue
        check(ps.rank() == ps.ranks.index(R), f"{ps}.rank()")
        for dtype in DTYPES:
            next_case()
            xs = {r: gen(dtype, (17,), r) for r in ps.ranks}
            ref, bound = reduce_ref(list(xs.values()), hvd.Average, dtype)
            close(hvd.allreduce(xs[R], op=hvd.Average, process_set=ps), ref, dtype, bound,
                  f"allreduce on {ps} {dtype}")
            rows = {r: r % 3 for r in ps.ranks}
            ys = {r: gen(dtype, (rows[r], 2), r) for r in ps.ranks}
            check(torch.equal(hvd.allgather(ys[R], process_set=ps), torch.cat([ys[r] for r in ps.ranks])),
                  f"allgather on {ps} {dtype}")
            root = ps.ranks[-1]
            check(torch.equal(hvd.broadcast(xs[R], root, process_set=ps), xs[root]), f"broadcast on {ps} {dtype}")
            n = ps.size()
            sp = {r: [(r + q) % 3 for q in range(n)] for r in ps.ranks}
            zs = {r: gen(dtype, (sum(sp[r]),), r) for r in ps.ranks}
            out, recv = hvd.alltoall(zs[R], splits=sp[R], process_set=ps)
            me = ps.rank()
            want = torch.cat([zs[r][sum(sp[r][:me]):sum(sp[r][:me + 1])] for r in ps.ranks])
            check(torch.equal(out, want) and recv.tolist() == [sp[r][me] for r in ps.ranks],
                  f"alltoall on {ps} {dtype}")
            xr = {r: gen(dtype, (n + 1, 2), r) for r in ps.ranks}
            ref, bound = reduce_ref(list(xr.values()), hvd.Sum, dtype)
            sizes = [(n + 1) // n + (1 if q < (n + 1) % n else 0) for q in range(n)]
            lo = sum(sizes[:me])
            close(hvd.reducescatter(xr[R], op=hvd.Sum, process_set=ps), ref[lo:lo + sizes[me]], dtype,
                  bound[lo:lo + sizes[me]], f"reducescatter on {ps} {dtype}")
        hvd.barrier(process_set=ps)
        check(hvd.broadcast_object(R, ps.ranks[0], process_set=ps) == ps.ranks[0], f"broadcast_object on {ps}")
    for ps in sets:
        if not ps.included():
            try:
                hvd.allreduce(torch.ones(1), process_set=ps)
                check(False, f"an allreduce on {ps} outside it raised nothing")
            except ValueError as e:
                check("is not in" in str(e), f"allreduce outside a process set: {e}")
    for ps in sets:
        check(hvd.remove_process_set(ps) and ps.process_set_id is None, f"remove_process_set {ps}")

    # Named collectives match by name, whatever order the ranks issue them in.
    next_case()
    xs = [[gen(torch.float64, (4,), r) for r in range(N)] for _ in range(3)]
    order = [0, 1, 2] if R % 2 == 0 else [2, 0, 1]
    hs = {i: hvd.allreduce_async(xs[i][R], op=hvd.Sum, name=f"named.{i}") for i in order}
    for i in range(3):
        ref, bound = reduce_ref(xs[i], hvd.Sum, torch.float64)
        close(hvd.synchronize(hs[i]), ref, torch.float64, bound, f"allreduce named.{i} issued in order {order}")
    if R == 0:
        h = hvd.allgather_async(xs[0][R], name="early")
    hvd.barrier()  # rank 0's "early" waits for the others' below
    if R != 0:
        h = hvd.allgather_async(xs[0][R], name="early")
    check(torch.equal(hvd.synchronize(h), torch.cat(xs[0])), "a named allgather issued before a barrier on one rank")

    # A name is taken until its handle is synchronized.
    h = hvd.allreduce_async(torch.ones(2), name="dup")
    try:
        hvd.allreduce_async(torch.ones(2), name="dup")
        check(False, "a second allreduce named 'dup' in flight raised nothing")
    except ValueError as e:
        check("same name" in str(e), f"duplicate name: {e}")
    check(torch.equal(hvd.synchronize(h), torch.ones(2)), "allreduce 'dup'")
    check(torch.equal(hvd.allreduce(torch.ones(2), name="dup"), torch.ones(2)), "allreduce 'dup' again")

    if N > 1:
        # Ranks that disagree all raise, and the next collective works.
        for bad, what in [(lambda: hvd.allreduce(torch.ones(3 + R)), "shapes"),
                          (lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32 if R else torch.float32)),
                           "data types"),
                          (lambda: hvd.broadcast(torch.ones(3), R), "root ranks"),
                          (lambda: hvd.allgather(torch.ones(2, R + 1)), "allgather shapes"),
                          (lambda: hvd.allreduce(torch.ones(2)) if R else hvd.allgather(torch.ones(2)),
                           "operations")]:
            try:
                bad()
                check(False, f"ranks that disagree on {what} raised nothing")
            except hvd.HorovodInternalError as e:
                check("Mismatched" in str(e), f"disagreeing {what}: {e}")
            got = hvd.allreduce(torch.full((2,), float(R)), op=hvd.Sum)
            check(torch.equal(got, torch.full((2,), float(sum(range(N))))), f"allreduce after disagreeing on {what}")
        # join: the last rank runs out of data first; the others' averages
        # count its zeros, as Horovod's do.
        for dtype in (torch.float32, torch.int64):
            next_case()
            xs = [gen(dtype, (9,), r) for r in range(N)]
            if R == N - 1:
                last = hvd.join()
            else:
                got = hvd.allreduce(xs[R], op=hvd.Average)
                if dtype.is_floating_point:
                    ref = torch.stack([x.double() for x in xs[:N - 1]]).sum(0) / N
                else:
                    ref = torch.div(torch.stack(xs[:N - 1]).sum(0), N, rounding_mode="trunc")
                close(got, ref, dtype, 1e-5 * (ref.abs() + 1), f"allreduce beside join {dtype}")
                last = hvd.join()
            check(hvd.allgather_object(last) == [last] * N and last != N - 1, f"join returned {last}")
    try:
        hvd.alltoall(torch.ones(N + 1)) if N > 1 else hvd.alltoall(torch.ones(2), splits=[3])
        check(False, "alltoall with rows that do not split raised nothing")
    except ValueError as e:
        check("alltoall" in str(e), f"alltoall error: {e}")
    try:
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
        check(False, "Adasum raised nothing")
    except NotImplementedError as e:
        check("Adasum" in str(e), f"Adasum: {e}")

    # shutdown stops the engine and drops the process sets; init starts
    # again on the same job.
    hvd.shutdown()
    hvd.shutdown()
    check(not hvd.is_initialized(), "is_initialized() after shutdown()")
    try:
        hvd.size()
        check(False, "size() after shutdown() raised nothing")
    except ValueError as e:
        check("not been initialized" in str(e), f"size() after shutdown(): {e}")
    # HOROVOD_TIMELINE is not read, and init says so; start_timeline and
    # stop_timeline are refused naming gorun's way.
    os.environ["HOROVOD_TIMELINE"] = "/nonexistent/timeline.json"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        hvd.init()
    check(any("HOROVOD_TIMELINE is not read" in str(w.message) for w in seen),
          f"init() with HOROVOD_TIMELINE set: warnings {[str(w.message) for w in seen]}")
    # Once a process: a second init says nothing more.
    hvd.shutdown()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        hvd.init()
    del os.environ["HOROVOD_TIMELINE"]
    check(not any("HOROVOD_TIMELINE" in str(w.message) for w in seen),
          f"a second init() with HOROVOD_TIMELINE set warned again: {[str(w.message) for w in seen]}")
    for f, a in ((hvd.start_timeline, ("/tmp/t.json",)), (hvd.stop_timeline, ())):
        try:
            f(*a)
            check(False, f"{f.__name__} raised nothing")
        except NotImplementedError as e:
            check("gorun --timeline" in str(e), f"{f.__name__}: {e}")
    check(hvd.is_initialized() and (hvd.size(), hvd.rank()) == (N, R), "size() and rank() after init() again")
    got = hvd.allreduce(torch.full((3,), float(R), dtype=torch.float64), op=hvd.Sum)
    check(torch.equal(got, torch.full((3,), float(sum(range(N))), dtype=torch.float64)), f"allreduce after init() again: {got}")
    odd = list(range(1, N, 2))
    if odd:
        ps = hvd.add_process_set(odd)
        if ps.included():
            got = hvd.allreduce(torch.full((2,), float(R), dtype=torch.float64), op=hvd.Sum, process_set=ps)
            check(torch.equal(got, torch.full((2,), float(sum(odd)), dtype=torch.float64)),
                  f"allreduce on {ps} after init() again: {got}")
        hvd.remove_process_set(ps)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 4)
        self.unused = nn.Linear(2, 2)  # no gradient: step() all-reduces zeros for it

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make(seed=42):
    torch.manual_seed(seed)
    return Net().double()


def weights(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def train():
    loss_fn = nn.MSELoss()
    batch = 4
    # Gradients fused into buckets: one (the default threshold), each its
    # own (0), and two buckets of the six (1000 bytes: the unused layer's
    # zeros share one with fc2 and fc1's bias).
    # op=Sum: the ranks' gradients added, as one process's on N times the loss.
    for passes, predivide, opt_cls, fusion, buckets, op in [(1, 1.0, "sgd", None, 1, hvd.Average),
                                                            (2, 1.0, "adam", "0", 6, hvd.Average),
                                                            (1, 2.0, "sgd", "1000", 2, hvd.Average),
                                                            (1, 1.0, "sgd", None, 1, hvd.Sum)]:
        next_case()
        model, ref = make(), make()
        os.environ.pop("HOROVOD_FUSION_THRESHOLD", None)
        if fusion is not None:
            os.environ["HOROVOD_FUSION_THRESHOLD"] = fusion

        def opt_of(m):
            if opt_cls == "sgd":  # op=Sum: the step of the mean's size
                return torch.optim.SGD(m.parameters(), lr=0.1 / (N if op == hvd.Sum else 1), momentum=0.9)
            return torch.optim.Adam(m.parameters(), lr=0.01)
        opt = hvd.DistributedOptimizer(opt_of(model), named_parameters=model.named_parameters(),
                                       backward_passes_per_step=passes, gradient_predivide_factor=predivide, op=op)
        ref_opt = opt_of(ref)
        if N > 1:
            check(len(opt._buckets) == buckets, f"HOROVOD_FUSION_THRESHOLD={fusion}: {len(opt._buckets)} buckets, "
                  f"want {buckets}")
        g = torch.Generator().manual_seed(args.seed + case)
        for step in range(6):
            xs, ys = [], []
            opt.zero_grad()
            for _ in range(passes):
                x = torch.randn(N * batch, 6, generator=g, dtype=torch.float64)
                y = torch.randn(N * batch, 4, generator=g, dtype=torch.float64)
                xs.append(x)
                ys.append(y)
                mine = slice(R * batch, (R + 1) * batch)
                loss_fn(model(x[mine]), y[mine]).backward()
            opt.step()
            ref_opt.zero_grad()
            (sum(loss_fn(ref(x), y) for x, y in zip(xs, ys)) * (N if op == hvd.Sum else 1)).backward()
            ref_opt.step()
        d = (weights(model) - weights(ref)).abs().max().item()
        check(d <= 1e-9, f"DistributedOptimizer {opt_cls} passes={passes} predivide={predivide} fusion={fusion} "
              f"op={hvd._engine.OP_NAMES[op]}: "
              f"differs from one process by {d}")
        every = hvd.allgather(weights(model).unsqueeze(0))
        check(all(torch.equal(every[r], every[0]) for r in range(N)), "the ranks' weights differ")
    os.environ.pop("HOROVOD_FUSION_THRESHOLD", None)

    # An LR scheduler made on the optimizer before it is wrapped (the
    # scheduler puts a step() of its own on the optimizer): the wrapper's
    # step still averages, and the schedule applies to it.
    # broadcast_optimizer_state does not break the link; a state dict loaded
    # into the wrapper leaves torch's step hooks running once a step.
    next_case()
    model, ref = make(), make()
    plain = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(plain, step_size=2, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "lr_scheduler.step() before optimizer.step()", as under Horovod
        opt = hvd.DistributedOptimizer(plain, named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        opt.load_state_dict(opt.state_dict())
        hooked = []
        if hasattr(opt, "register_step_post_hook"):  # torch 2
            opt.register_step_post_hook(lambda *_: hooked.append(1))
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
        g = torch.Generator().manual_seed(args.seed + case)
        for step in range(5):
            x = torch.randn(N * batch, 6, generator=g, dtype=torch.float64)
            y = torch.randn(N * batch, 4, generator=g, dtype=torch.float64)
            opt.zero_grad()
            loss_fn(model(x[R * batch:(R + 1) * batch]), y[R * batch:(R + 1) * batch]).backward()
            opt.step()
            sched.step()
            ref_opt.zero_grad()
            (sum(loss_fn(ref(x[r * batch:(r + 1) * batch]), y[r * batch:(r + 1) * batch])
                 for r in range(N)) / N).backward()
            ref_opt.step()
            ref_sched.step()
    check(not hasattr(opt, "register_step_post_hook") or len(hooked) == 5,
          f"a step post hook ran {len(hooked)} times in 5 steps")
    d = (weights(model) - weights(ref)).abs().max().item()
    check(d <= 1e-9 and opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"],
          f"DistributedOptimizer of an optimizer with a scheduler: differs from one process by {d}, "
          f"lr {opt.param_groups[0]['lr']} against {ref_opt.param_groups[0]['lr']}")

    # Ranks whose graphs differ: each rank's step uses one of two heads, so
    # the other head has no gradient on it (its all-reduce carries zeros).
    next_case()

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 4), nn.Linear(8, 4)

        def forward(self, x, which):
            return (self.a if which == 0 else self.b)(torch.tanh(self.body(x)))
    torch.manual_seed(3)
    model = TwoHeads().double()
    torch.manual_seed(3)
    ref = TwoHeads().double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(args.seed + case)
    for step in range(5):
        x = torch.randn(N * batch, 6, generator=g, dtype=torch.float64)
        y = torch.randn(N * batch, 4, generator=g, dtype=torch.float64)
        which = [(step + r) % 2 if step < 4 else 0 for r in range(N)]
        opt.zero_grad()
        loss_fn(model(x[R * batch:(R + 1) * batch], which[R]), y[R * batch:(R + 1) * batch]).backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(loss_fn(ref(x[r * batch:(r + 1) * batch], which[r]), y[r * batch:(r + 1) * batch])
             for r in range(N)) / N).backward()
        ref_opt.step()
    d = (weights(model) - weights(ref)).abs().max().item()
    check(d <= 1e-9, f"DistributedOptimizer with graphs that differ between ranks: differs from one process by {d}")

    # fp16 compression: each gradient within the bound of the exact mean.
    next_case()
    model, ref = make(), make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=hvd.Compression.fp16)
    g = torch.Generator().manual_seed(args.seed + case)
    x = torch.randn(N * batch, 6, generator=g, dtype=torch.float64)
    y = torch.randn(N * batch, 4, generator=g, dtype=torch.float64)
    loss_fn(model(x[R * batch:(R + 1) * batch]), y[R * batch:(R + 1) * batch]).backward()
    opt.synchronize()
    grads = []
    for r in range(N):
        ref.zero_grad()
        loss_fn(ref(x[r * batch:(r + 1) * batch]), y[r * batch:(r + 1) * batch]).backward()
        grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()])
    for i, p in enumerate(model.parameters()):
        parts = torch.stack([grads[r][i] for r in range(N)])
        want = parts.mean(0)
        # Each input rounded to float16, summed in float32, the mean rounded to float16.
        bound = 2.0 ** -11 * (parts.abs().mean(0) + want.abs()) * 1.01 + 2.0 ** -24 * 2 + 2.0 ** -20 * parts.abs().sum(0)
        got = p.grad if p.grad is not None else torch.zeros_like(p)  # one rank: no hook, no all-reduce
        err = (got - want).abs()
        check(bool((err <= bound).all()), f"fp16 compression: gradient {i} off by {err.max().item()}")
    with opt.skip_synchronize():
        opt.step()

    # broadcast_parameters and broadcast_optimizer_state from the last rank.
    next_case()
    model = make(seed=100 + R)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(R + 1):
        opt.zero_grad()
        model(torch.randn(3, 6, dtype=torch.float64)).sum().backward()
        opt.step()
    root = N - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    every = hvd.allgather(weights(model).unsqueeze(0))
    check(torch.equal(every[R], every[root]), "broadcast_parameters")
    st = torch.cat([v.reshape(-1).double() for p in model.parameters() for k, v in sorted(opt.state[p].items())
                    if torch.is_tensor(v)])
    every = hvd.allgather(st.unsqueeze(0))
    check(torch.equal(every[R], every[root]), "broadcast_optimizer_state")

    # broadcast_optimizer_state on an optimizer without state, after a
    # backward pass (each rank holds gradients of its own): its first step
    # is on zero gradients, so the ranks' weights stay the same.
    next_case()
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed + case + R)
    model(torch.randn(3, 6, generator=g, dtype=torch.float64)).sum().backward()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    every = hvd.allgather(weights(model).unsqueeze(0))
    check(all(torch.equal(every[r], every[0]) for r in range(N)),
          "broadcast_optimizer_state after a backward pass: the ranks' weights differ")

    # elastic.run on a job of fixed size: every rank starts from rank 0's
    # state (a second model passed by keyword included, updated in place)
    # and the function runs once; restore() puts back the last commit.
    next_case()
    main, second = make(seed=200 + R), make(seed=300 + R)
    st = hvd.elastic.TorchState(main, torch.optim.SGD(main.parameters(), lr=0.1), second=second, value=10 * R + 1)
    calls = []

    @hvd.elastic.run
    def once(state, k):
        calls.append(k)
        state.value += k
        state.commit()
        return state.value
    got = once(st, 5)
    check(calls == [5] and got == 6 and st.value == 6, f"elastic.run on a fixed job: calls {calls}, value {got}")
    every = hvd.allgather(torch.cat([weights(main), weights(second)]).unsqueeze(0))
    check(st.second is second and all(torch.equal(every[r], every[0]) for r in range(N)),
          "elastic.run on a fixed job: the models differ between ranks after its sync")
    kept = torch.cat([weights(main), weights(second)])
    with torch.no_grad():
        for p in list(main.parameters()) + list(second.parameters()):
            p.add_(1.0)
    st.value = 99
    st.restore()
    check(torch.equal(torch.cat([weights(main), weights(second)]), kept) and st.value == 6,
          "TorchState.restore(): the models or values are not those of the last commit")

    # ElasticSampler: the shares cover the dataset; after two batches the new
    # shares cover exactly what was not processed.
    smp = hvd.elastic.ElasticSampler(list(range(37)), shuffle=True, seed=5)
    every = hvd.allgather_object(list(smp))
    check(len(every[R]) == len(smp) == -(-37 // N) and set().union(*every) == set(range(37)),
          f"ElasticSampler shares {every}")
    done = set().union(*[e[:2] for e in every])
    smp.record_batch(0, 2)
    again = hvd.elastic.ElasticSampler(list(range(37)), shuffle=True, seed=5)
    again.load_state_dict(smp.state_dict())
    rest = hvd.allgather_object(list(again))
    check(set().union(*rest) == set(range(37)) - done and len(done) == min(2 * N, 37),
          f"ElasticSampler after record_batch: {rest} (processed {sorted(done)})")

    # SyncBatchNorm against BatchNorm on the whole batch.
    next_case()
    g = torch.Generator().manual_seed(args.seed + case)
    x = torch.randn(N * 3, 5, 4, generator=g, dtype=torch.float64)
    w = torch.randn(N * 3, 5, 4, generator=g, dtype=torch.float64)
    torch.manual_seed(1)
    sbn = hvd.SyncBatchNorm(5).double()
    bn = nn.BatchNorm1d(5).double()
    with torch.no_grad():
        sbn.weight.copy_(torch.linspace(0.5, 2, 5))
        bn.weight.copy_(torch.linspace(0.5, 2, 5))
    mine = x[R * 3:(R + 1) * 3].clone().requires_grad_()
    full = x.clone().requires_grad_()
    out = sbn(mine)
    (out * w[R * 3:(R + 1) * 3]).sum().backward()
    ref_out = bn(full)
    (ref_out * w).sum().backward()
    check(torch.allclose(out, ref_out[R * 3:(R + 1) * 3], atol=1e-10), "SyncBatchNorm output")
    check(torch.allclose(mine.grad, full.grad[R * 3:(R + 1) * 3], atol=1e-10), "SyncBatchNorm input gradient")
    check(torch.allclose(sbn.running_mean, bn.running_mean, atol=1e-12) and
          torch.allclose(sbn.running_var, bn.running_var, atol=1e-12), "SyncBatchNorm running statistics")
    check(torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, atol=1e-10),
          "SyncBatchNorm weight gradient")


def kill():
    bufs = [torch.ones(n) for n in (1, 1000, 100000, 7)]
    step = 0
    killed_at = None
    try:
        while True:
            if R == args.victim and step == args.at:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == args.at:
                killed_at = time.monotonic()
            handles = [hvd.allreduce_async_(b, op=hvd.Sum) for b in bufs]
            for h in handles:
                hvd.synchronize(h)
            for b in bufs:
                b.fill_(1)
            step += 1
            if step > 100000:
                raise SystemExit("the victim never died")
    except hvd.HorovodInternalError as e:
        after = time.monotonic() - (killed_at or time.monotonic())
        print(f"hvd-kill-seen rank={R} after={after:.2f} error={type(e).__name__}: {e}", flush=True)
        raise SystemExit(3)


def elastic():
    """hvd.elastic.run with TorchState and a DistributedOptimizer on an
    elastic job: the victim dies at step --at (its first life only); the
    survivors go back to their last commit, sync and go on. Every rank of
    the final view must hold the same weights and step."""
    w = hvd._ops._s.world
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(1000)), shuffle=False)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, step=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        g = torch.Generator()
        while state.step < args.steps or hvd.size() < args.until_size:
            if state.step > args.steps + 3000:
                raise SystemExit(f"rank {w.rank}: the view never grew back to {args.until_size} ranks")
            if w.restarts == 0 and w.rank == args.victim and state.step == args.at:
                os.kill(os.getpid(), signal.SIGKILL)
            g.manual_seed(state.step)
            n, r = hvd.size(), hvd.rank()
            x = torch.randn(4 * n, 16, generator=g, dtype=torch.float64)
            y = torch.randn(4 * n, 4, generator=g, dtype=torch.float64)
            opt.zero_grad()
            nn.functional.mse_loss(model(x[4 * r:4 * (r + 1)]), y[4 * r:4 * (r + 1)]).backward()
            opt.step()
            state.step += 1
            check(state.sampler.num_replicas == n and state.sampler.rank == r, "the sampler's view")
            state.sampler.record_batch(0, 1)
            state.commit()
            time.sleep(0.01)
    train(state)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()] + [torch.tensor([float(state.step)],
                                                                                       dtype=torch.float64)])
    every = hvd.allgather(flat.unsqueeze(0))
    check(all(torch.equal(every[q], flat) for q in range(hvd.size())), "weights or step differ between ranks")
    sizes = hvd.allgather_object(sampler.processed_num)
    check(len(set(sizes)) == 1, f"the sampler's progress differs between ranks: {sizes}")
    print(f"hvd-elastic-ok rank={w.rank} step={state.step} size={hvd.size()} resets={len(resets)} "
          f"restarts={w.restarts}", flush=True)


{"ops": ops, "train": train, "kill": kill, "elastic": elastic}[args.mode]()
print(f"hvd-ok rank={R} mode={args.mode} size={N} checks={checks}", flush=True)
hvd.shutdown()
