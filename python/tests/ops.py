"""Every torch.distributed operation through the gorun backend against the
result PyTorch defines, computed here from every rank's inputs (each rank
makes all ranks' inputs from one seed). Run under gorun:

    gorun -np N /usr/bin/python3 python/tests/ops.py [--seed S] [--init env|gorun]

Prints "gorun-ops-ok rank=R checks=K" and exits 0 when every check passed;
a failed check raises, naming the operation, dtype, size and rank.
"""

import argparse
import os
import re
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import gorun.torch as gt

C10D = torch._C._distributed_c10d

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--init", choices=["env", "gorun"], default="gorun")
args = ap.parse_args()

if args.init == "env":
    # env:// starts torch's TCPStore; Debian 13's PyTorch (2.6) has no
    # libuv, which the store asks for unless USE_LIBUV=0 (1.13 ignores it).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gorun")
else:
    gt.init()
R, N = dist.get_rank(), dist.get_world_size()
SIZES = sorted({0, 1, 2, 3, 5, 7, 13, 31, 1000, max(N - 1, 0), N + 1})
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}
checks = 0
case = 0


def gen(dtype, n, rank, op="sum"):
    """Rank rank's input for the current case (the same on every rank)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + case * 101 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).to(torch.bool)
    if dtype.is_floating_point:
        x = torch.rand(n, generator=g, dtype=torch.float64)
        x = 0.5 + x if op == "product" else x * 20 - 10
        return x.to(dtype)
    lo, hi = (0, 4) if dtype == torch.uint8 or op == "product" else (-100, 100)
    if dtype == torch.int8 and op != "product":
        lo, hi = -100, 100
    return torch.randint(lo, hi, (n,), generator=g).to(dtype)


def reference(dtype, op, inputs):
    """What PyTorch defines: the reduction in a wide type, cast back once."""
    if dtype == torch.bool:
        x = torch.stack([t.to(torch.int64) for t in inputs])
        r = {"sum": x.sum(0), "max": x.max(0).values, "min": x.min(0).values, "product": x.prod(0)}[op]
        return r != 0
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    x = torch.stack([t.to(wide) for t in inputs])
    if op == "sum" or op == "avg":
        r = x.sum(0)
    elif op == "min":
        r = x.min(0).values
    elif op == "max":
        r = x.max(0).values
    else:
        r = x.prod(0)
    if op == "avg":
        r = r / len(inputs)
    if dtype.is_floating_point:
        return r.to(dtype)
    # Integer sums and products wrap around in the tensor's own width.
    bits = torch.iinfo(dtype).bits
    r = r & ((1 << bits) - 1) if bits < 64 else r
    if dtype in (torch.int8, torch.int32) :
        r = torch.where(r >= (1 << (bits - 1)), r - (1 << bits), r)
    return r.to(dtype)


def same(what, got, want, dtype):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"rank {R}/{N} {what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    if dtype.is_floating_point:
        tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad = (got.to(torch.float64) - want.to(torch.float64)).abs().argmax().item() if got.numel() else 0
        raise AssertionError(f"rank {R}/{N} {what}: element {bad}: got {got.reshape(-1)[bad].item()}, "
                             f"want {want.reshape(-1)[bad].item()}")


def noncontig(t):
    """A non-contiguous view holding t's elements (in t's order)."""
    n = t.numel()
    big = torch.zeros(n, 2, dtype=t.dtype)
    big[:, 0] = t
    v = big[:, 0]
    assert not v.is_contiguous() or n <= 1
    return v


def layouts(t):
    yield "contiguous", t.clone()
    yield "strided", noncontig(t)


# all_reduce, reduce: every op, dtype, size, layout; async handles too.
for dtype in DTYPES:
    for opname, op in OPS.items():
        if opname == "avg" and not dtype.is_floating_point:
            continue
        for n in SIZES:
            case += 1
            ins = [gen(dtype, n, r, opname) for r in range(N)]
            want = reference(dtype, opname, ins)
            for lay, t in layouts(ins[R]):
                w = dist.all_reduce(t, op=op, async_op=True)
                w.wait()
                same(f"all_reduce {opname} {dtype} n={n} {lay}", t.clone(), want, dtype)
            root = case % N
            t = ins[R].clone()
            dist.reduce(t, dst=root, op=op)
            if R == root:
                same(f"reduce {opname} {dtype} n={n} root={root}", t, want, dtype)

# Several tensors in one call (the process group's list form), one of them
# widened and one strided: the Work completes only when all are done.
case += 1
ins = [[gen(dt, n, r * 3 + k) for k, (dt, n) in enumerate([(torch.float32, 1000), (torch.float16, 5), (torch.int64, 3)])]
       for r in range(N)]
ts = [ins[R][0].clone(), ins[R][1].clone(), noncontig(ins[R][2])]
dist.distributed_c10d._get_default_group().allreduce(ts).wait()
for k, t in enumerate(ts):
    same(f"allreduce of 3 tensors: tensor {k}", t.clone(), reference(t.dtype, "sum", [ins[r][k] for r in range(N)]), t.dtype)

# The reduction in every form torch hands a process group one: a ReduceOp
# (1.13's ReduceOp.MAX, or one made from a RedOpType), a RedOpType (2.x's
# ReduceOp.MAX), an options object, a plain int; through the group's own
# methods, as DDP's hooks and torch's functional collectives call them.
pg = dist.distributed_c10d._get_default_group()
RedOpType = dist.ReduceOp.RedOpType
for opname, form, op in [
        ("max", "ReduceOp.MAX", dist.ReduceOp.MAX), ("min", "RedOpType.MIN", RedOpType.MIN),
        ("product", "ReduceOp(RedOpType.PRODUCT)", dist.ReduceOp(RedOpType.PRODUCT)),
        ("max", "int", int(RedOpType.MAX)), ("sum", "None", None)]:
    case += 1
    ins = [gen(torch.int64, 6, r, opname) for r in range(N)]
    want = reference(torch.int64, opname, ins)
    t = ins[R].clone()
    (pg.allreduce([t], op) if op is not None else pg.allreduce([t])).wait()
    same(f"group allreduce {opname} as {form}", t, want, torch.int64)
    # Options hold a ReduceOp (or a RedOpType, converted), not an int.
    held = dist.ReduceOp.SUM if op is None else RedOpType(op) if isinstance(op, int) else op
    o = C10D.AllreduceOptions()
    o.reduceOp = held
    t = ins[R].clone()
    pg.allreduce([t], o).wait()
    same(f"group allreduce {opname} as AllreduceOptions({form})", t, want, torch.int64)
    o = C10D.ReduceOptions()
    o.reduceOp, o.rootRank, o.rootTensor = held, case % N, 0
    t = ins[R].clone()
    pg.reduce([t], o).wait()
    if R == case % N:
        same(f"group reduce {opname} as ReduceOptions({form})", t, want, torch.int64)
    o = C10D.ReduceScatterOptions()
    o.reduceOp = held
    out = torch.zeros(2, dtype=torch.int64)
    big = [gen(torch.int64, 2 * N, r, opname) for r in range(N)]
    pg._reduce_scatter_base(out, big[R].clone(), o).wait()
    same(f"group reduce_scatter {opname} as ReduceScatterOptions({form})", out,
         reference(torch.int64, opname, big)[2 * R:2 * R + 2], torch.int64)

# PREMUL_SUM (NCCL's scaled sum) and the bitwise ops are refused, naming
# the op, before anything starts. (torch itself refuses a bare
# ReduceOp.PREMUL_SUM in all_reduce's options; as an int it reaches the group.)
refused = [("BAND", lambda t: dist.all_reduce(t, op=dist.ReduceOp.BAND)),
           ("PREMUL_SUM", lambda t: pg.allreduce([t], int(RedOpType.PREMUL_SUM)))]
if hasattr(dist, "_make_nccl_premul_sum"):
    refused.append(("PREMUL_SUM", lambda t: dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))))
for name, call in refused:
    t = torch.ones(3)
    try:
        call(t)
        raise AssertionError(f"all_reduce with {name} was accepted")
    except ValueError as e:
        assert name in str(e), e
        assert torch.equal(t, torch.ones(3)), t
        checks += 1

# AVG on integers is refused with a clear error.
try:
    dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG)
    raise AssertionError("AVG on int32 was accepted")
except ValueError as e:
    assert "floating-point" in str(e), e
    checks += 1
# A tensor that is not on the CPU is refused, naming its device.
try:
    dist.all_reduce(torch.empty(3, device="meta"))
    raise AssertionError("a meta tensor was accepted")
except ValueError as e:
    assert "CPU" in str(e) and "meta" in str(e), e
    checks += 1

# broadcast, all_gather (list and tensor forms), gather, scatter, every dtype.
for dtype in DTYPES + [torch.complex64]:
    for n in SIZES:
        case += 1
        ins = [gen(dtype if dtype != torch.complex64 else torch.float32, 2 * n, r).view(torch.complex64)
               if dtype == torch.complex64 else gen(dtype, n, r) for r in range(N)]
        root = case % N
        for lay, t in layouts(ins[R]):
            dist.broadcast(t, src=root)
            same(f"broadcast {dtype} n={n} root={root} {lay}", t.clone(), ins[root], dtype)
        outs = [torch.zeros_like(ins[R]) for _ in range(N)]
        dist.all_gather(outs, ins[R])
        for q in range(N):
            same(f"all_gather {dtype} n={n} block {q}", outs[q], ins[q], dtype)
        flat = torch.zeros(N * ins[R].numel(), dtype=ins[R].dtype)
        dist.all_gather_into_tensor(flat, ins[R])
        same(f"all_gather_into_tensor {dtype} n={n}", flat, torch.cat(ins), dtype)
        gl = [torch.zeros_like(ins[R]) for _ in range(N)] if R == root else None
        dist.gather(ins[R], gather_list=gl, dst=root)
        if R == root:
            for q in range(N):
                same(f"gather {dtype} n={n} root={root} block {q}", gl[q], ins[q], dtype)
        out = torch.zeros_like(ins[R])
        sl = [gen(dtype, n, 1000 + q) for q in range(N)] if dtype != torch.complex64 else None
        if sl is not None:
            dist.scatter(out, scatter_list=sl if R == root else None, src=root)
            same(f"scatter {dtype} n={n} root={root}", out, [gen(dtype, n, 1000 + q) for q in range(N)][R], dtype)

# all_gather_coalesced: tensors of several sizes (one empty) in one call
# (torch wants one dtype); output_lists[q] receives rank q's inputs.
for dtype in [torch.float32, torch.int8, torch.bfloat16]:
    case += 1
    ins = [[gen(dtype, n, r * 3 + k) for k, n in enumerate([5, 0, 3])] for r in range(N)]
    outs = [[torch.zeros_like(t) for t in ins[R]] for _ in range(N)]
    dist.all_gather_coalesced(outs, ins[R])
    for q in range(N):
        for k, t in enumerate(ins[q]):
            same(f"all_gather_coalesced {dtype} rank {q} tensor {k}", outs[q][k], t, dtype)

# reduce_scatter (list and tensor forms), every op and dtype.
for dtype in DTYPES:
    for opname, op in OPS.items():
        if opname == "avg" and not dtype.is_floating_point:
            continue
        for n in [0, 1, 3, 17]:
            case += 1
            ins = [[gen(dtype, n, r * N + q, opname) for q in range(N)] for r in range(N)]
            want = reference(dtype, opname, [ins[r][R] for r in range(N)])
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, [t.clone() for t in ins[R]], op=op)
            same(f"reduce_scatter {opname} {dtype} n={n}", out, want, dtype)
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter_tensor(out, torch.cat(ins[R]), op=op)
            same(f"reduce_scatter_tensor {opname} {dtype} n={n}", out, want, dtype)

# all_to_all_single with uneven splits (rows of 3 elements), equal splits,
# and the list form.
for dtype in [torch.float32, torch.int64, torch.float16, torch.bool, torch.uint8]:
    for trial in range(3):
        case += 1
        g = torch.Generator().manual_seed(args.seed * 7 + case)
        rows = torch.randint(0, 4, (N, N), generator=g).tolist()  # rows[i][j]: rank i to rank j
        if trial == 0:
            rows = [[0] * N for _ in range(N)]  # nothing at all
        data = {(i, j): gen(dtype, rows[i][j] * 3, i * 100 + j).reshape(rows[i][j], 3) for i in range(N) for j in range(N)}
        inp = torch.cat([data[(R, j)] for j in range(N)])
        out = torch.zeros(sum(rows[i][R] for i in range(N)), 3, dtype=dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=[rows[i][R] for i in range(N)],
                               input_split_sizes=rows[R])
        same(f"all_to_all_single {dtype} splits {rows}", out, torch.cat([data[(i, R)] for i in range(N)]), dtype)
    case += 1
    data = {(i, j): gen(dtype, 2, i * 100 + j) for i in range(N) for j in range(N)}
    out = torch.zeros(2 * N, dtype=dtype)
    dist.all_to_all_single(out, torch.cat([data[(R, j)] for j in range(N)]))
    same(f"all_to_all_single equal {dtype}", out, torch.cat([data[(i, R)] for i in range(N)]), dtype)
    outs = [torch.zeros(j + 1, dtype=dtype) for j in range(N)]
    data = {(i, j): gen(dtype, i + 1, i * 100 + j) for i in range(N) for j in range(N)}
    dist.all_to_all(outs, [data[(R, j)] for j in range(N)])
    for j in range(N):
        same(f"all_to_all {dtype} from {j}", outs[j], data[(j, R)], dtype)

# Sparse all-reduce (SUM, as Gloo): ranks hold different nonzeros (rank 0
# none), indices repeat within a rank; the result is the coalesced sum.
for dtype, shape, sd in [(torch.float32, (7, 3), 1), (torch.int64, (5, 4), 2), (torch.float64, (1,), 1)]:
    case += 1

    def sparse_of(r):
        g = torch.Generator().manual_seed(r * 7 + case)
        k = (r * 5 + case) % 4
        idx = torch.stack([torch.randint(0, shape[d], (k,), generator=g) for d in range(sd)])
        val = (torch.randint(-50, 50, (k,) + tuple(shape[sd:]), generator=g)).to(dtype)
        return torch.sparse_coo_tensor(idx, val, shape)
    t = sparse_of(R)
    dist.all_reduce(t)
    want = sum(sparse_of(r).to_dense() for r in range(N))
    if not t.is_sparse:
        raise AssertionError(f"rank {R}/{N} sparse all_reduce {dtype}: the result is not sparse")
    same(f"sparse all_reduce {dtype} {shape}", t.to_dense(), want, dtype)
try:
    dist.all_reduce(sparse_of(R), op=dist.ReduceOp.MAX)
    raise AssertionError(f"rank {R}/{N}: a sparse MAX all_reduce ran")
except ValueError:
    pass

# send and recv around the ring, with tags, blocking and not.
if N > 1:
    for dtype in [torch.float32, torch.int8, torch.bfloat16]:
        for n in [0, 1, 7, 100000]:
            case += 1
            nxt, prv = (R + 1) % N, (R - 1) % N
            got = torch.zeros(n, dtype=dtype)
            got2 = noncontig(torch.zeros(n, dtype=dtype))
            reqs = [dist.isend(gen(dtype, n, R), dst=nxt, tag=1), dist.isend(gen(dtype, n, R + 50), dst=nxt, tag=2),
                    dist.irecv(got2, src=prv, tag=2)]
            dist.recv(got, src=prv, tag=1)
            for q in reqs:
                q.wait()
            same(f"send/recv {dtype} n={n} tag 1", got, gen(dtype, n, prv), dtype)
            same(f"send/recv {dtype} n={n} tag 2 strided", got2.clone(), gen(dtype, n, prv + 50), dtype)

# Several messages to one peer with one tag, started together: they arrive
# in the order sent (one is over gorun's 4 MiB piece size).
if N > 1:
    case += 1
    nxt, prv = (R + 1) % N, (R - 1) % N
    sizes = [5, 1_500_000, 0, 3]
    got = [torch.zeros(n) for n in sizes]
    reqs = [dist.isend(gen(torch.float32, n, R * 10 + k), dst=nxt, tag=7) for k, n in enumerate(sizes)]
    reqs += [dist.irecv(got[k], src=prv, tag=7) for k in range(len(sizes))]
    for q in reqs:
        q.wait()
    for k, n in enumerate(sizes):
        same(f"isend/irecv in order: message {k} of {n}", got[k], gen(torch.float32, n, prv * 10 + k), torch.float32)

# Receives from any source (recv without src): every other rank sends rank
# 0 two messages of one tag; rank 0 gets each once, with its sender.
if N > 1:
    case += 1
    if R != 0:
        for k in range(2):
            dist.send(gen(torch.int64, 11, R * 10 + k), dst=0, tag=9)
    else:
        seen = {}
        for _ in range(2 * (N - 1)):
            got = torch.zeros(11, dtype=torch.int64)
            src = dist.recv(got, tag=9)
            k = seen.get(src, 0)
            if not 1 <= src < N or k > 1:
                raise AssertionError(f"rank {R}/{N} recv from any source: sender {src}, seen {seen}")
            same(f"recv from any source: message {k} of rank {src}", got, gen(torch.int64, 11, src * 10 + k), torch.int64)
            seen[src] = k + 1

# A group of the even ranks (new_group: every rank calls it, members use it).
case += 1
evens = list(range(0, N, 2))
grp = dist.new_group(evens)
odds = dist.new_group(list(range(1, N, 2))) if N > 1 else None
if R in evens:
    t = gen(torch.float64, 9, R)
    dist.all_reduce(t, group=grp)
    same(f"new_group {evens} all_reduce", t, reference(torch.float64, "sum", [gen(torch.float64, 9, r) for r in evens]),
         torch.float64)
    b = torch.tensor([float(R)])
    dist.broadcast(b, src=evens[-1], group=grp)
    same(f"new_group {evens} broadcast from {evens[-1]}", b, torch.tensor([float(evens[-1])]), torch.float32)
elif odds is not None:
    t = gen(torch.int32, 4, R)
    dist.all_reduce(t, group=odds)
    same("new_group odds all_reduce", t, reference(torch.int32, "sum", [gen(torch.int32, 4, r) for r in range(1, N, 2)]),
         torch.int32)

# The object collectives (pickled Python objects over the tensor ones).
case += 1
objs = [{"rank": r, "data": list(range(r * 3)), "name": "x" * (r + 1)} for r in range(N)]
got = [None] * N
dist.all_gather_object(got, objs[R])
if got != objs:
    raise AssertionError(f"rank {R}/{N} all_gather_object: got {got}")
root = case % N
lst = [objs[R], R]
dist.broadcast_object_list(lst, src=root)
if lst != [objs[root], root]:
    raise AssertionError(f"rank {R}/{N} broadcast_object_list from {root}: got {lst}")
g = [None] * N if R == root else None
dist.gather_object(objs[R], g, dst=root)
if R == root and g != objs:
    raise AssertionError(f"rank {R}/{N} gather_object to {root}: got {g}")
out = [None]
dist.scatter_object_list(out, [objs[(r + 1) % N] for r in range(N)] if R == root else None, src=root)
if out[0] != objs[(R + 1) % N]:
    raise AssertionError(f"rank {R}/{N} scatter_object_list from {root}: got {out[0]}")
checks += 4

# monitored_barrier (torch implements it for Gloo alone; gorun.torch for
# its groups): passes when all come; names the rank that does not, on rank
# 0, while those that came hear of rank 0's failure; with wait_all_ranks
# names every one that did not come; a timeout of 0 fails at once; and the
# group goes on working after each.
if N > 1:
    case += 1

    def expect(what, pattern, f):
        try:
            f()
        except RuntimeError as e:
            if not re.search(pattern, str(e)):
                raise AssertionError(f"rank {R}/{N} {what}: {e}, want /{pattern}/")
            return
        raise AssertionError(f"rank {R}/{N} {what}: no error, want /{pattern}/")

    dist.monitored_barrier(timeout=timedelta(seconds=60))
    dist.monitored_barrier(timeout=timedelta(seconds=60), wait_all_ranks=True)
    if R == 0:
        expect("monitored_barrier without the last rank", f"^Rank {N - 1} failed to pass monitoredBarrier in 500 ms",
               lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.5)))
    elif R < N - 1:
        expect("monitored_barrier whose rank 0 failed", f"^Rank {R} successfully reached monitoredBarrier, but received errors",
               lambda: dist.monitored_barrier(timeout=timedelta(seconds=1)))
    t = gen(torch.float64, 5, R)
    dist.all_reduce(t)
    same("all_reduce after monitored_barrier", t, reference(torch.float64, "sum", [gen(torch.float64, 5, r) for r in range(N)]), torch.float64)
    if R == 0:
        expect("monitored_barrier with wait_all_ranks, alone", "^Ranks " + ", ".join(map(str, range(1, N))) + " failed to pass monitoredBarrier",
               lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.2), wait_all_ranks=True))
        expect("monitored_barrier with a timeout of 0", "^Rank 0 timed out in monitoredBarrier after 0 ms",
               lambda: dist.distributed_c10d._get_default_group().monitored_barrier(timedelta(seconds=0)))
        try:
            dist.send(torch.zeros(1), dst=1, tag=gt.MONITOR_TAG)
            raise AssertionError(f"rank {R}/{N}: a send on monitored_barrier's tag")
        except ValueError:
            pass
    dist.barrier()  # no rank's next monitored_barrier may meet rank 0's lone ones
    dist.monitored_barrier(timeout=timedelta(seconds=60))
    checks += 6

dist.barrier()
print(f"gorun-ops-ok rank={R} checks={checks}", flush=True)
dist.destroy_process_group()
sys.exit(0)
