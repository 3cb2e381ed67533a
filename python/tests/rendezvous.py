"""The gorun backend in jobs that gorun did not start: the ranks meet through
torch.distributed's own rendezvous, as Gloo's do.

    python3 rendezvous.py --launch procs|spawn --method env|tcp|file|store --np N [--victim R]

--launch procs starts the ranks as torchrun does (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each one's
environment; Debian's torchrun itself cannot start a job, see
docs/pytorch.md); spawn uses torch.multiprocessing.spawn. Each rank joins with
init_process_group("gorun", init_method=... | store=...), checks
all_reduce (every op), broadcast and all_gather on random sizes (0, 1,
primes) and a group of the even ranks against a reference, and prints

    gorun-rdv-ok rank=R size=N checks=K

With --victim R, rank R exits after its first all-reduce and the others
go on until their operations fail:

    gorun-rdv-seen rank=R after=SECONDS error=TYPE: MESSAGE

The launching process exits non-zero if a rank failed or any rank was
still running a minute after the first one finished.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

SIZES = [0, 1, 2, 3, 7, 13, 31, 1000, 4099]

# Debian 13's PyTorch has no libuv, which torch's TCP store asks for by
# default (docs/pytorch.md); 1.13 ignores the variable.
os.environ.setdefault("USE_LIBUV", "0")


def say(line):
    """One line to stdout in one write: the ranks share this stdout, and a
    line written in pieces could interleave with another rank's."""
    os.write(1, (line + "\n").encode())


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, size, method, where, victim):
    import torch
    import torch.distributed as dist
    import gorun.torch  # noqa: F401 (registers the backend)

    if method == "store":
        host, port = where.split(":")
        try:  # torch 2.4 on asks for libuv unless told not to; 1.13 has no such argument
            store = dist.TCPStore(host, int(port), size, rank == 0, timeout=timedelta(seconds=60), use_libuv=False)
        except TypeError:
            store = dist.TCPStore(host, int(port), size, rank == 0, timeout=timedelta(seconds=60))
        dist.init_process_group("gorun", store=store, rank=rank, world_size=size)
    else:
        dist.init_process_group("gorun", init_method=where, rank=rank, world_size=size,
                                timeout=timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "gorun", dist.get_backend()
    checks = 0
    gen = torch.Generator().manual_seed(1234)
    for n in SIZES:
        every = [torch.randint(-50, 50, (n,), generator=gen).to(torch.float64) for _ in range(size)]
        for op, ref in ((dist.ReduceOp.SUM, lambda xs: sum(xs)),
                        (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
                        (dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values)):
            t = every[rank].clone()
            dist.all_reduce(t, op=op)
            want = ref(every) if n else t
            assert torch.equal(t, want), (n, op, t[:4], want[:4])
            checks += 1
        root = n % size
        t = every[rank].clone()
        dist.broadcast(t, root)
        assert torch.equal(t, every[root]), (n, "broadcast")
        outs = [torch.empty(n, dtype=torch.float64) for _ in range(size)]
        dist.all_gather(outs, every[rank])
        assert all(torch.equal(o, e) for o, e in zip(outs, every)), (n, "all_gather")
        checks += 2
    evens = list(range(0, size, 2))
    g = dist.new_group(evens)
    if rank in evens:
        t = torch.full((5,), float(rank), dtype=torch.float64)
        dist.all_reduce(t, group=g)
        assert torch.equal(t, torch.full((5,), float(sum(evens)), dtype=torch.float64)), t
        checks += 1
    if size > 1 and sys.platform == "linux":
        # Every rank is on this host: gorun's shared memory carries the
        # bytes, as under gorun's launcher (the segment stays mapped).
        with open("/proc/self/maps") as f:
            assert any("/dev/shm/gorun-" in line for line in f), "no gorun shared memory mapped"
        checks += 1
    say(f"gorun-rdv-ok rank={rank} size={size} checks={checks}")
    if victim is not None:
        t = torch.ones(1 << 16)
        dist.all_reduce(t)
        if rank == victim:
            os._exit(9)
        t0 = time.monotonic()
        try:
            for _ in range(1_000_000):
                dist.all_reduce(t)
            say(f"gorun-rdv-noerror rank={rank}")
        except Exception as e:
            say(f"gorun-rdv-seen rank={rank} after={time.monotonic() - t0:.2f} error={type(e).__name__}: {e}")
            os._exit(3)
    # Rank 0 holds a TCP store: nobody leaves while another rank may still
    # be polling it (torch's new_group waits on the store).
    dist.barrier()
    dist.destroy_process_group()


def spawned(index, size, method, where, victim):
    worker(index, size, method, where, victim)


def wait_all(procs):
    """Waits for every process; one still running a minute after the first
    ended is killed and counts as a failure."""
    deadline = None
    codes = [None] * len(procs)
    while any(c is None for c in codes):
        for i, p in enumerate(procs):
            if codes[i] is None and p.poll() is not None:
                codes[i] = p.returncode
                deadline = deadline or time.monotonic() + 60
        if deadline and time.monotonic() > deadline:
            for i, p in enumerate(procs):
                if codes[i] is None:
                    p.kill()
                    say(f"gorun-rdv-hung index={i}")
                    codes[i] = -9
            break
        time.sleep(0.05)
    return codes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", choices=["procs", "spawn"], default="procs")
    ap.add_argument("--method", choices=["env", "tcp", "file", "store"], default="env")
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--victim", type=int)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--where", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(int(os.environ["RANK"]), a.np, a.method, a.where, a.victim)
        return
    port = free_tcp_port()
    where = {"env": "env://", "tcp": f"tcp://127.0.0.1:{port}", "store": f"127.0.0.1:{port}",
             "file": "file://" + os.path.join(tempfile.mkdtemp(prefix="gorun-rdv-"), "store")}[a.method]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if a.launch == "spawn":
        import torch.multiprocessing as mp
        ctx = mp.spawn(spawned, args=(a.np, a.method, where, a.victim), nprocs=a.np, join=False)
        procs = ctx.processes
        deadline = None
        while any(p.is_alive() for p in procs):
            if deadline is None and any(not p.is_alive() for p in procs):
                deadline = time.monotonic() + 60
            if deadline and time.monotonic() > deadline:
                for p in procs:
                    if p.is_alive():
                        p.kill()
                        say("gorun-rdv-hung")
                sys.exit(1)
            time.sleep(0.05)
        codes = [p.exitcode for p in procs]
    else:
        procs = []
        for r in range(a.np):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.np), LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE=str(a.np))
            cmd = [sys.executable, __file__, "--worker", "--launch", "procs", "--method", a.method,
                   "--np", str(a.np), "--where", where] + (["--victim", str(a.victim)] if a.victim is not None else [])
            procs.append(subprocess.Popen(cmd, env=env))
        codes = wait_all(procs)
    say(f"gorun-rdv-exit codes={','.join(str(c) for c in codes)}")
    sys.exit(0 if all(c == 0 for c in codes) else 1)


if __name__ == "__main__":
    main()
