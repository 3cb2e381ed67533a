"""PyTorch's own distributed suite (TestDistBackend over
DistributedTest._DistTestBase, from the packaged
torch/testing/_internal/distributed/distributed_test.py) on the gorun
backend or on Gloo, driven as torch's test/distributed/test_distributed_spawn.py
drives it (torch's test/ is not packaged). Every test starts WORLD_SIZE
ranks; for gorun each gets a gorun job's environment on loopback, as the
gorun launcher would give it, so this runs without gorun itself:

    BACKEND=gorun WORLD_SIZE=3 PYTHONPATH=python GORUN_LIBRARY=... \
        /usr/bin/python3 python/tests/torchsuite.py -v [-k PATTERN]
    BACKEND=gloo WORLD_SIZE=3 /usr/bin/python3 python/tests/torchsuite.py -v

It runs on torch 1.13 (Debian 12) and 2.x (Debian 13, which packages the
python3-setuptools and python3-expecttest that torch.testing imports;
without expecttest it stands in a unittest.TestCase).
FEATURES=ddp,subgroup,gpu also runs for BACKEND the tests the suite gates
on those features of torch's own backends (most need CUDA and skip
without it; the object collectives and DDP's checks on the CPU run).
RESULTS=FILE appends each test's outcome to FILE ("test_x ok", "test_y
skipped", ...). GATES=gloo runs on BACKEND every test the suite runs for Gloo, as it runs
it for Gloo (the suite sees "gloo" everywhere; each rank's process groups
are BACKEND's): the measure of "every test Gloo passes".
About 15 minutes for 278 tests on 2 cores; not part of go test.
"""

import os
import secrets
import socket

os.environ.setdefault("USE_LIBUV", "0")
# BACKEND runs the tests. GATES=gloo: the suite sees "gloo" throughout (its
# decorators, read at import, and its tests' own branches), so the tests
# meet every test Gloo meets, run as for Gloo; each rank's process groups
# are made with BACKEND (_redirect). SUITE_BACKEND carries BACKEND to the
# ranks, whose BACKEND is GATES.
BACKEND = os.environ.get("SUITE_BACKEND") or os.environ["BACKEND"]
GATES = os.environ.get("GATES", BACKEND)
os.environ["SUITE_BACKEND"], os.environ["BACKEND"] = BACKEND, GATES

try:
    import expecttest  # noqa: F401
except ImportError:
    # torch.testing's TestCase derives from expecttest's, which Debian 12
    # does not package; the suite uses none of what it adds.
    import sys
    import types
    import unittest
    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)

import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# FEATURES=ddp,subgroup: run the tests torch gates on those features of its
# own backends for this backend too (before distributed_test's decorators
# read the sets).
for f in filter(None, os.environ.get("FEATURES", "").split(",")):
    DistTestCases.backend_feature[f].add(BACKEND)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


def _redirect():
    """In a rank of a GATES run: process groups asked of GATES are made
    with BACKEND. get_backend still names BACKEND: the tests' checks of
    what torch's profiler records inside Gloo (its "gloo:all_gather" spans)
    are then skipped, as for any backend but Gloo, NCCL, MPI and UCC, and
    test_get_backend, which asserts the name, fails."""
    import inspect

    import torch.distributed as dist
    c10d = dist.distributed_c10d

    def swap(f):
        sig = inspect.signature(f)

        def g(*args, **kwargs):
            b = sig.bind_partial(*args, **kwargs)
            be = b.arguments.get("backend")
            if be is not None and str(be).lower() == GATES:
                b.arguments["backend"] = BACKEND
            return f(*b.args, **b.kwargs)
        return g

    dist.init_process_group = c10d.init_process_group = swap(c10d.init_process_group)
    dist.new_group = c10d.new_group = swap(c10d.new_group)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Rank(torch.multiprocessing.get_context("spawn").Process):
    """A rank started with its own gorun variables in its environment:
    libgorun's Go runtime reads the process's starting environment."""

    ports = []

    def start(self):
        rank = self._args[0]
        os.environ["GORUN_RANK"], os.environ["GORUN_GOSSIP_PORT"] = str(rank), str(self.ports[rank])
        super().start()


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    def _spawn_processes(self):
        base = torch.multiprocessing.get_context("spawn").Process
        if BACKEND != "gorun":
            return self._start_processes(base)
        n = int(os.environ["WORLD_SIZE"])
        ports = [_free_port() for _ in range(n)]
        os.environ.update({
            "GORUN_SIZE": str(n), "GORUN_JOB_ID": secrets.token_hex(6), "GORUN_JOB_SECRET": secrets.token_hex(16),
            "GORUN_PEERS": ",".join(f"127.0.0.1:{p}" for p in ports), "GORUN_ADDR": "127.0.0.1",
            "GORUN_LOCAL_SIZE": str(n),
        })

        _Rank.ports = ports
        self._start_processes(_Rank)

    def run(self, result=None):
        # RESULTS=FILE: one line per test, "name outcome", for comparing runs.
        path = os.environ.get("RESULTS")
        if result is None or not path:
            return super().run(result)
        lists = ("errors", "failures", "skipped", "expectedFailures", "unexpectedSuccesses")
        before = [len(getattr(result, a, [])) for a in lists]
        out = super().run(result)
        after = [len(getattr(result, a, [])) for a in lists]
        grew = [a for a, x, y in zip(lists, before, after) if y > x]
        with open(path, "a") as f:
            f.write(f"{self._testMethodName} {grew[0] if grew else 'ok'}\n")
        return out

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        if BACKEND == "gorun":
            import gorun.torch  # noqa: F401 (registers the backend)
        if GATES != BACKEND:
            _redirect()
        super()._run(rank, test_name, file_name, pipe, **kwargs)


if __name__ == "__main__":
    run_tests()
