"""init_process_group with gorun named in torch 2.x's device:backend form,
alone ("cpu:gorun") and beside another backend for another device
("cpu:gorun,cuda:gloo", which runs without a GPU). Run under gorun:

    gorun -np N /usr/bin/python3 python/tests/backends.py --spec SPEC

Checks that importing gorun.torch registers the backend without torch's
warning that its devices are unknown; that CPU tensors go through gorun's
group (results against the reference computed here from every rank's
inputs), in the default group and in a new_group; that a device the spec
gives no backend is refused naming it; and, for "cuda:gloo", that the
group's CUDA backend is torch's Gloo, made over the group's store and
connected (an all-reduce through it, on CPU tensors as Gloo takes them,
against the reference).

Prints "gorun-backends-ok rank=R spec=S torch=V checks=K" and exits 0. Torch
1.13 knows no device:backend form: init_process_group refuses the spec
with ValueError, and the script prints "gorun-backends-refused rank=R
torch=V error=..." and exits 0 (the Go test accepts that from 1.x only).
"""

import argparse
import os
import sys
import warnings

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--spec", required=True)
args = ap.parse_args()

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import gorun.torch as gt
for w in caught:
    if "Device capability" in str(w.message):
        raise AssertionError(f"registering gorun warned: {w.message}")

# env:// starts torch's TCPStore (Gloo rendezvous through it); Debian 13's
# PyTorch has no libuv, which the store asks for unless USE_LIBUV=0.
os.environ.setdefault("USE_LIBUV", "0")
try:
    dist.init_process_group(args.spec)
except ValueError as e:
    if int(torch.__version__.split(".")[0]) >= 2:
        raise
    print(f"gorun-backends-refused rank={os.environ.get('RANK')} torch={torch.__version__} error={e}", flush=True)
    sys.exit(0)

R, N = dist.get_rank(), dist.get_world_size()
checks = 0


def same(what, got, want):
    global checks
    checks += 1
    if not torch.equal(got, want):
        raise AssertionError(f"rank {R}/{N} spec {args.spec} {what}: got {got.tolist()}, want {want.tolist()}")


def gen(n, rank, salt):
    g = torch.Generator().manual_seed(salt * 1009 + rank)
    return torch.randint(-1000, 1000, (n,), generator=g)


pg = dist.distributed_c10d._get_default_group()
if not isinstance(pg, gt.ProcessGroupGorun):
    raise AssertionError(f"spec {args.spec}: the default group is a {type(pg).__name__}")
checks += 1
devices = dict(d.split(":") for d in args.spec.split(",")) if ":" in args.spec else {"cpu": args.spec}
if sorted(d.type for d in pg._device_types) != sorted(devices):
    raise AssertionError(f"spec {args.spec}: the group serves {pg._device_types}")
checks += 1

ins = [gen(7, r, 1) for r in range(N)]
t = ins[R].clone()
dist.all_reduce(t)
same("all_reduce", t, torch.stack(ins).sum(0))
outs = [torch.zeros(7, dtype=torch.int64) for _ in range(N)]
dist.all_gather(outs, ins[R])
for q in range(N):
    same(f"all_gather block {q}", outs[q], ins[q])
t = ins[R].clone()
dist.broadcast(t, src=N - 1)
same(f"broadcast from {N - 1}", t, ins[N - 1])

evens = list(range(0, N, 2))
grp = dist.new_group(evens)
if R in evens:
    if not isinstance(grp, gt.ProcessGroupGorun):
        raise AssertionError(f"new_group({evens}) is a {type(grp).__name__}")
    t = ins[R].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=grp)
    same(f"new_group {evens} all_reduce max", t, torch.stack([ins[r] for r in evens]).max(0).values)

# A device the spec names no backend for is refused, naming the device.
try:
    dist.all_reduce(torch.empty(3, device="meta"))
    raise AssertionError("a meta tensor was accepted")
except ValueError as e:
    assert "meta" in str(e), e
    checks += 1

if devices.get("cuda") == "gloo":
    for group, ranks, label in [(pg, list(range(N)), "default group")] + \
            ([(grp, evens, f"group {evens}")] if R in evens else []):
        b = group._backend_for("cuda")
        if type(b).__name__ != "ProcessGroupGloo" or group._get_backend(torch.device("cuda")) is not b:
            raise AssertionError(f"{label}: the CUDA backend is {b!r}")
        x = [gen(5, r, 2) for r in ranks]
        t = x[ranks.index(R)].clone()
        b.allreduce([t]).wait()
        same(f"{label}: all_reduce through its CUDA backend (Gloo)", t, torch.stack(x).sum(0))

dist.barrier()
print(f"gorun-backends-ok rank={R} spec={args.spec} torch={torch.__version__} checks={checks}", flush=True)
dist.destroy_process_group()
