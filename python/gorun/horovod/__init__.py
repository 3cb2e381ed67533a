"""Horovod's PyTorch API on gorun.

    import gorun.horovod as hvd      # instead of: import horovod.torch as hvd
    hvd.init()                       # run with: gorun -np N /usr/bin/python3 train.py

Collectives run on gorun's communicators (the job's, and one per process
set) from one background thread per process; named ones match across ranks
by name, unnamed ones in the order issued. hvd.elastic runs on gorun's
elastic ring (gorun --elastic). docs/horovod.md says what is supported and
where gorun differs from Horovod.
"""

from ._engine import HorovodInternalError
from ._ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather,  # noqa: F401
                   allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                   alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, ccl_built,
                   cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
                   grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                   grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                   grouped_reducescatter_async, init, is_homogeneous, is_initialized, join, local_rank, local_size,
                   mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll, rank, reducescatter,
                   reducescatter_async, remove_process_set, rocm_built, shutdown, size, sparse_allreduce_async,
                   start_timeline, stop_timeline, synchronize)
from ._functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters  # noqa
from ._optimizer import DistributedOptimizer  # noqa: F401
from .compression import Compression  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from . import elastic  # noqa: F401,E402
from .elastic import HostsUpdatedInterrupt  # noqa: F401

