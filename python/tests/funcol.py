"""torch 2.x's functional collectives (torch.distributed._functional_collectives,
what DTensor and torch.compile'd code call) on the gorun backend, against
the result PyTorch defines, computed here from every rank's inputs. Run
under gorun:

    gorun -np N /usr/bin/python3 python/tests/funcol.py [--seed S]

They find a process group by its name, which torch keeps in the C++
backends of a group; gorun's group (written in Python) answers for it.
Every operation runs on the default group, given as the group and as its
name, and on a group of the even ranks.

Prints "gorun-funcol-ok rank=R checks=K" and exits 0 when every check
passed. Torch 1.13 has no functional collectives: the script then prints
"gorun-funcol-skip torch=V" and exits 0 (a torch 2 never skips).
"""

import argparse
import sys

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()

if int(torch.__version__.split(".")[0]) < 2:
    print(f"gorun-funcol-skip torch={torch.__version__}: no functional collectives before torch 2", flush=True)
    sys.exit(0)

import torch.distributed._functional_collectives as funcol  # noqa: E402

import gorun.torch as gt  # noqa: E402

gt.init()
R, N = dist.get_rank(), dist.get_world_size()
checks = 0
case = 0


def gen(dtype, shape, rank):
    """Rank rank's input for the current case (the same on every rank)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + case * 101 + rank)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 20 - 10).to(dtype)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def reduced(op, xs):
    """The reduction PyTorch defines, in float64 or int64, cast back once."""
    wide = torch.float64 if xs[0].dtype.is_floating_point else torch.int64
    x = torch.stack([t.to(wide) for t in xs])
    r = {"sum": lambda: x.sum(0), "avg": lambda: x.sum(0) / len(xs), "max": lambda: x.max(0).values,
         "min": lambda: x.min(0).values}[op]()
    return r.to(xs[0].dtype)


def same(what, got, want):
    global checks
    checks += 1
    got = got.wait() if isinstance(got, funcol.AsyncCollectiveTensor) else got
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"rank {R}/{N} {what}: got {got.dtype} {tuple(got.shape)}, "
                             f"want {want.dtype} {tuple(want.shape)}")
    tol = {torch.float16: 1e-2, torch.float32: 1e-5, torch.float64: 1e-12}.get(want.dtype)
    ok = torch.equal(got, want) if tol is None else torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    if not ok:
        raise AssertionError(f"rank {R}/{N} {what}: got {got.reshape(-1)[:8].tolist()}, "
                             f"want {want.reshape(-1)[:8].tolist()}")


def run(group, ranks, label):
    """Every functional collective on group (whose members are ranks), as
    rank me of it."""
    global case
    me, n = ranks.index(R), len(ranks)
    for dtype in [torch.float32, torch.int64, torch.float16]:
        for rows in [0, 1, 5]:
            case += 1
            ins = [gen(dtype, (rows, 3), r) for r in ranks]
            for op in ["sum", "max", "min"] + (["avg"] if dtype.is_floating_point else []):
                same(f"{label} all_reduce {op} {dtype} rows={rows}",
                     funcol.all_reduce(ins[me].clone(), op, group), reduced(op, ins))
            same(f"{label} all_gather_tensor dim 0 {dtype} rows={rows}",
                 funcol.all_gather_tensor(ins[me], 0, group), torch.cat(ins, 0))
            same(f"{label} all_gather_tensor dim 1 {dtype} rows={rows}",
                 funcol.all_gather_tensor(ins[me], 1, group), torch.cat(ins, 1))
            big = [gen(dtype, (rows * n, 2), 100 + r) for r in ranks]
            same(f"{label} reduce_scatter_tensor {dtype} rows={rows}",
                 funcol.reduce_scatter_tensor(big[me], "sum", 0, group), reduced("sum", big)[rows * me:rows * (me + 1)])
            root = case % n  # the group's rank, as the backend reads it
            same(f"{label} broadcast from {root} {dtype} rows={rows}",
                 funcol.broadcast(ins[me].clone(), root, group), ins[root])
    # all_to_all_single with uneven splits: rank i sends splits[i][j] rows to j.
    case += 1
    g = torch.Generator().manual_seed(args.seed * 7 + case)
    splits = torch.randint(0, 4, (n, n), generator=g).tolist()
    data = {(i, j): gen(torch.float32, (splits[i][j], 2), 1000 + 10 * i + j) for i in range(n) for j in range(n)}
    same(f"{label} all_to_all_single splits {splits}",
         funcol.all_to_all_single(torch.cat([data[(me, j)] for j in range(n)]), [splits[i][me] for i in range(n)],
                                  splits[me], group),
         torch.cat([data[(i, me)] for i in range(n)]))
    # The coalesced forms: several tensors in one call.
    case += 1
    a = [gen(torch.float32, (4,), r) for r in ranks]
    b = [gen(torch.int64, (2, 2), 50 + r) for r in ranks]
    for got, want, what in zip(funcol.all_reduce_coalesced([a[me].clone(), b[me].clone()], "max", group),
                               [reduced("max", a), reduced("max", b)], ["float32", "int64"]):
        same(f"{label} all_reduce_coalesced max {what}", got, want)
    for got, want, what in zip(funcol.all_gather_into_tensor_coalesced([a[me], b[me]], group),
                               [torch.cat(a), torch.cat(b)], ["float32", "int64"]):
        same(f"{label} all_gather_into_tensor_coalesced {what}", got, want)
    big = [gen(torch.float64, (3 * n,), 200 + r) for r in ranks]
    big2 = [gen(torch.int64, (n, 2), 300 + r) for r in ranks]
    got = funcol.reduce_scatter_tensor_coalesced([big[me], big2[me]], "sum", [0, 0], group)
    same(f"{label} reduce_scatter_tensor_coalesced float64", got[0], reduced("sum", big)[3 * me:3 * me + 3])
    same(f"{label} reduce_scatter_tensor_coalesced int64", got[1], reduced("sum", big2)[me:me + 1])


default = dist.distributed_c10d._get_default_group()
if default.group_name != dist.distributed_c10d._world.pg_names[default]:
    raise AssertionError(f"group_name {default.group_name!r}, torch's {dist.distributed_c10d._world.pg_names[default]!r}")
run(default, list(range(N)), "default group")
run(default.group_name, list(range(N)), "default group by name")
evens = list(range(0, N, 2))
grp = dist.new_group(evens)
if R in evens:
    if grp.group_name == default.group_name:
        raise AssertionError(f"the group of {evens} has the default group's name {grp.group_name!r}")
    run(grp, evens, f"group {evens}")
dist.barrier()
print(f"gorun-funcol-ok rank={R} checks={checks}", flush=True)
dist.destroy_process_group()
