"""Horovod's collectives (horovod.torch.mpi_ops) on gorun's communicators."""

import atexit
import os
import sys
import threading
import warnings

import torch

from .. import _core, _rendezvous
from . import _engine as E
from ._engine import HorovodInternalError

Average, Sum, Adasum, Min, Max, Product = E.AVERAGE, E.SUM, E.ADASUM, E.MIN, E.MAX, E.PRODUCT


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.engine = None
        self.world = None
        self.local_rank = self.local_size = self.cross_rank = self.cross_size = 0
        self.homogeneous = True
        self.sets = {}  # id -> ProcessSet
        self.next_set = 1
        self.handles = {}  # int handle -> Handle
        self.next_handle = 1
        self.view = None  # an elastic job's view (job ranks) when init ran
        self.names = {}  # (process set, kind, name) of collectives not yet synchronized -> handle


_s = _State()


class ProcessSet:
    """A set of ranks that run collectives among themselves (over a gorun
    communicator of their own). Make one with a list of ranks and pass it to
    init(process_sets=...) or add_process_set()."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks):
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(gorun.horovod has no mpi4py communicators)") from None
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks")
        self.ranks = ranks
        self.comm = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's place in the set (-1 outside it)."""
        if self.process_set_id is None:
            return None
        r = rank()
        return self.ranks.index(r) if r in self.ranks else -1

    def included(self):
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _need_init():
    if _s.engine is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")


# Variables by which other launchers say how many processes they started.
_OTHER_LAUNCHERS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "HOROVOD_SIZE")


def _solo_env():
    """The variables of a job of one rank, for a process no gorun started;
    refused if another launcher started it as one of several."""
    for name in _OTHER_LAUNCHERS:
        if os.environ.get(name, "1").strip() not in ("", "0", "1"):
            raise ValueError(f"gorun.horovod: this process is one of {os.environ[name]} ({name}) that another "
                             "launcher started; start the job with `gorun -np N` instead")
    return _rendezvous.solo_env()


# init warns about HOROVOD_TIMELINE once a process (Horovod's tests, and
# elastic scripts, call init many times).
_timeline_warned = False


def init(comm=None, process_sets=None):
    """Join gorun's job (started by `gorun -np N`; a process started
    otherwise is a job of one rank) and start the engine.
    process_sets: ProcessSet objects (or "dynamic", which needs nothing
    here: add_process_set always works) made on every rank."""
    if comm is not None:
        raise ValueError("gorun.horovod: init(comm=...) takes no MPI communicator; gorun's job is the world")
    global _timeline_warned
    if os.environ.get("HOROVOD_TIMELINE") and not os.environ.get("GORUN_TIMELINE_FILE") and not _timeline_warned:
        _timeline_warned = True
        warnings.warn("gorun.horovod: HOROVOD_TIMELINE is not read; record the job's timeline with "
                      "`gorun --timeline FILE.json`", stacklevel=2)
    with _s.lock:
        if _s.engine is not None:
            return
        # A script run without a launcher (python3 train.py) is a job of
        # one rank, as under Horovod's MPI build.
        solo = None if _core.joined() or "GORUN_RANK" in os.environ else _solo_env()
        w = _core.world(E.timeout(), env=solo)
        _s.world = w
        _s.view = w.view() if w.elastic else None
        global_process_set.ranks = list(range(len(_s.view) if _s.view is not None else w.size))
        global_process_set.comm = w
        global_process_set.process_set_id = 0
        _s.engine = E.Engine(global_process_set)
    local = int(os.environ.get("GORUN_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    node = int(os.environ.get("GORUN_NODE_RANK", "0"))
    lsize = int(os.environ.get("GORUN_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    _s.local_rank, _s.local_size, _s.cross_rank = local, lsize, node
    if _s.view is not None:
        # No collective here on an elastic job (a restarted rank's first one
        # is its resync): the launch's placement stands in.
        _s.cross_size = -(-w.job_size // max(lsize, 1))
        _s.homogeneous = True
    else:
        try:
            rows = E.allgather_int64(w, [local, node, lsize], w.size)
            # Horovod's cross communicator: the ranks of the same local rank,
            # in rank order (one a node where every node holds that many).
            _s.cross_size = sum(1 for r in rows if r[0] == local)
            _s.cross_rank = sum(1 for r in rows[:w.rank] if r[0] == local)
            _s.homogeneous = len({r[2] for r in rows}) == 1
        except BaseException:
            shutdown()
            raise
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            add_process_set(ps)


def shutdown():
    """Stop the engine; init() may start it again. The job's communicator stays joined."""
    with _s.lock:
        eng, _s.engine = _s.engine, None
    if eng is None:
        return
    eng.stop()
    for ps in list(_s.sets.values()):
        if ps.comm is not None:
            ps.comm.close()
            ps.comm = None
        ps._invalidate()
    _s.sets.clear()
    _s.handles.clear()
    _s.names.clear()


def _at_exit():
    # Stop the engine while the interpreter is whole; leave the job unless
    # gorun.torch is loaded (its own exit hook leaves it, after torch's groups).
    try:
        shutdown()
        if "gorun.torch" not in sys.modules and _core._world is not None:
            _core._world.close()
    except Exception:
        pass


atexit.register(_at_exit)


def is_initialized():
    return _s.engine is not None


def size():
    _need_init()
    return len(global_process_set.ranks)


def rank():
    _need_init()
    if _s.view is not None:  # an elastic job: the place in the view the engine runs on
        return _s.view.index(_s.world.rank)
    return _s.world.rank


def _root(ps, place):
    """A member's place as gorun's collectives take a root: on an elastic
    job, its job rank."""
    if ps.process_set_id == 0 and _s.view is not None:
        return _s.view[place]
    return place


def local_rank():
    _need_init()
    return _s.local_rank


def local_size():
    _need_init()
    return _s.local_size


def cross_rank():
    _need_init()
    return _s.cross_rank


def cross_size():
    _need_init()
    return _s.cross_size


def is_homogeneous():
    _need_init()
    return _s.homogeneous


def mpi_threads_supported():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Refused: gorun records a job's timeline from its start (gorun
    --timeline FILE), not from a call."""
    raise NotImplementedError("gorun.horovod: start_timeline is not supported; record the job's timeline with "
                              "`gorun --timeline FILE.json`")


def stop_timeline():
    """Refused, as start_timeline is."""
    raise NotImplementedError("gorun.horovod: stop_timeline is not supported; record the job's timeline with "
                              "`gorun --timeline FILE.json`")


def _false(*_):
    return False


mpi_enabled = mpi_built = gloo_enabled = gloo_built = nccl_built = ddl_built = ccl_built = cuda_built = \
    rocm_built = _false


def _set(process_set):
    _need_init()
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, not {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not initialized: pass it to hvd.init or hvd.add_process_set")
    if process_set.process_set_id != 0 and process_set.process_set_id not in _s.sets:
        raise ValueError(f"{process_set} has been removed")
    if not process_set.included():
        raise ValueError(f"rank {rank()} is not in {process_set}: only its members run its collectives")
    return process_set


# -- handles ------------------------------------------------------------------

def _register(handle):
    with _s.lock:
        h = _s.next_handle
        _s.next_handle += 1
        _s.handles[h] = handle
    return h


def _submit(req):
    """Queue req; synchronize(handle) returns what its run returns.

    A name is taken from when its collective is issued until synchronize()
    returns its result (or the handle is forgotten): issuing another
    collective of the same kind and name on the same process set meanwhile
    raises ValueError, as Horovod does while one is in flight. (Taking it
    until synchronize, not until the data has moved, makes the check the
    same however fast the other ranks are.)"""
    name = req.name
    key = (req.pset.process_set_id, req.kind, name)
    if name is not None and key in _s.names:
        raise ValueError(f"Requested to {E.KIND_NAMES[req.kind]} a tensor with the same name as another tensor "
                         f"that is currently being processed: {name!r}")
    handle = _register(_s.engine.submit(req))
    if name is not None:
        _s.names[key] = handle
    return handle


def poll(handle):
    """Whether the operation of handle has finished (synchronize then returns at once)."""
    h = _s.handles.get(handle)
    if h is None:
        raise ValueError(f"unknown handle {handle}")
    return h.done()


def _forget(handle):
    """Drop handle without waiting: its name is free again (its collective
    still runs when the other ranks issue it)."""
    h = _s.handles.pop(handle, None)
    if h is not None and h.name is not None:
        for k, v in list(_s.names.items()):
            if v == handle:
                del _s.names[k]
    return h


def synchronize(handle):
    """Wait for the operation of handle and return its result; raises
    HorovodInternalError when it failed."""
    h = _s.handles.get(handle)
    if h is None:
        return None
    try:
        return h.wait()
    finally:
        _forget(handle)


# -- helpers ------------------------------------------------------------------

def _check_tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{what}: gorun.horovod moves CPU tensors; this one is on {t.device} (use .cpu())")
    if t.dtype not in E.DTYPE_CODE:
        raise ValueError(f"Tensor type {t.type()} is not supported.")
    if t.is_sparse:
        raise ValueError(f"{what}: sparse tensors are not supported here (use sparse_allreduce_async)")


def _flat(t):
    return t.detach().contiguous().reshape(-1)


def _scale(buf, factor):
    """buf (a reduction's wide buffer) times factor, as Horovod scales: in
    floating point for floating-point data, truncated for integers."""
    if factor == 1.0:
        return buf
    if buf.dtype.is_floating_point:
        return buf.mul_(factor)
    return (buf.to(torch.float64) * factor).to(buf.dtype)


def _prescale(buf, factor, dtype):
    """buf (in the wide type) times factor, rounded to dtype as Horovod's
    prescaled tensor is, before the sum."""
    buf = _scale(buf, factor)
    if factor != 1.0 and buf.dtype != dtype and dtype.is_floating_point:
        buf = buf.to(dtype).to(buf.dtype)
    return buf


def _op_value(op, average, default=Average):
    if average is not None:
        if op is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return Average if average else Sum
    return default if op is None else op


def _check_op(op, process_set, what="allreduce"):
    if op == Adasum:
        raise NotImplementedError("gorun.horovod: Adasum is not supported (gorun has Sum, Average, Min, Max and "
                                  "Product); use op=hvd.Average")
    if op not in E.CORE_OP:
        raise ValueError(f"gorun.horovod: unknown reduction {op!r} for {what}")


def _reduce_group(comm, tensors, outputs, op, pre, post, n, kind=_core.ALLREDUCE):
    """All-reduce tensors into outputs: one gorun collective per data type,
    in data-type order (ranks in join() run the same)."""
    for code in range(1, len(E.DTYPES) + 1):
        dtype = E.DTYPES[code - 1]
        idx = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        if not idx:
            continue
        wide = E.WIDE.get(dtype, dtype)
        parts = [_flat(tensors[i]).to(wide) for i in idx]
        buf = torch.cat(parts) if len(parts) > 1 else parts[0]
        if len(parts) == 1 and outputs[idx[0]] is not tensors[idx[0]] and buf.data_ptr() == tensors[idx[0]].data_ptr():
            buf = buf.clone()  # the input stays as it is
        if buf.numel() == 0:
            continue
        buf = _prescale(buf, pre, dtype)
        E.run_op(comm, kind, E.NATIVE[wide], E.CORE_OP[op], 0, buf, None)
        if op == Average:
            if post == 1.0 and not buf.dtype.is_floating_point:
                buf = buf.div(n, rounding_mode="trunc")
            elif post == 1.0:
                buf.div_(n)
            else:
                buf = _scale(buf, post / n)
        else:
            buf = _scale(buf, post)
        off = 0
        for i in idx:
            o, k = outputs[i], tensors[i].numel()
            part = buf[off:off + k]
            off += k
            if o.data_ptr() != part.data_ptr() or not o.is_contiguous():
                with torch.no_grad():
                    o.copy_((part != 0).view(o.shape) if dtype == torch.bool else part.view(o.shape))


def _allreduce_request(tensors, outputs, name, op, pre, post, process_set):
    ps = _set(process_set)
    _check_op(op, ps)
    for t in tensors:
        _check_tensor(t, "allreduce")
        if op == Average and t.dtype == torch.bool:
            raise ValueError("gorun.horovod: Average of bool tensors (use Sum, Min or Max)")
    n = ps.size()

    def run(engine, comm, descs):
        _reduce_group(comm, tensors, outputs, op, pre, post, n)
        return outputs
    return E.Request(E.ALLREDUCE, ps, tensors, op=op, name=name, run=run, joinable=ps.process_set_id == 0)


def _submit_one(req):
    """Queue a request whose run returns a list of one: its handle gives the one."""
    run = req.run
    req.run = lambda engine, comm, descs: run(engine, comm, descs)[0]
    return _submit(req)


# -- allreduce ------------------------------------------------------------------

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Start averaging (or op) tensor over the process set; the input is not
    changed. Returns a handle for poll() and synchronize()."""
    op = _op_value(op, average)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format) if isinstance(tensor, torch.Tensor) \
        else None
    req = _allreduce_request([tensor], [output], name, op, prescale_factor, postscale_factor, process_set)
    return _submit_one(req)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """allreduce_async in place: tensor receives the result."""
    op = _op_value(op, average)
    req = _allreduce_request([tensor], [tensor], name, op, prescale_factor, postscale_factor, process_set)
    return _submit_one(req)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, pre, post, process_set):
        ctx.args = (op, pre, post, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, pre, post, process_set))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps), \
            None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """tensor averaged (or op) over the process set, as a new tensor;
    differentiable."""
    from .compression import Compression
    compression = compression or Compression.none
    op = _op_value(op, average)
    c, ctx = compression.compress(tensor)
    return compression.decompress(_Allreduce.apply(c, op, name, prescale_factor, postscale_factor, process_set), ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_check(tensors):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("a grouped collective needs at least one tensor")
    return tensors


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    tensors = _grouped_check(tensors)
    op = _op_value(op, average)
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    req = _allreduce_request(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)
    return _submit(req)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    tensors = _grouped_check(tensors)
    op = _op_value(op, average)
    req = _allreduce_request(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)
    return _submit(req)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, pre, post, process_set, *tensors):
        ctx.args = (op, pre, post, process_set)
        return tuple(synchronize(grouped_allreduce_async(tensors, None, name, op, pre, post, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        out = grouped_allreduce(list(grads), op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
        return (None, None, None, None, None) + tuple(out)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    from .compression import Compression
    compression = compression or Compression.none
    tensors = _grouped_check(tensors)
    op = _op_value(op, average)
    pairs = [compression.compress(t) for t in tensors]
    out = _GroupedAllreduce.apply(op, name, prescale_factor, postscale_factor, process_set, *[c for c, _ in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """A sparse COO tensor's all-reduce (Sum or Average), as Horovod does it:
    every member's indices and values are gathered. Returns a function
    that waits and returns the sparse result (Horovod's handle here is one)."""
    if op not in (Sum, Average):
        raise NotImplementedError("sparse_allreduce_async supports Sum and Average")
    c = tensor.coalesce()
    hv = allgather_async(c.values().contiguous(), None if name is None else f"{name}.values", process_set)
    hi = allgather_async(c.indices().t().contiguous(), None if name is None else f"{name}.indices", process_set)
    n = _set(process_set).size()

    def handle():
        val, idx = synchronize(hv), synchronize(hi)
        if op == Average:
            val = val / n
        return torch.sparse_coo_tensor(idx.t(), val, tensor.shape)
    return handle


# -- allgather ------------------------------------------------------------------

def _gather_request(tensors, name, process_set):
    ps = _set(process_set)
    for t in tensors:
        _check_tensor(t, "allgather")
        if t.dim() == 0:
            raise ValueError("allgather: a tensor needs at least one dimension (concatenation is on the first)")
    n = ps.size()
    outputs = [None] * len(tensors)

    def run(engine, comm, descs):
        if len(tensors) == 1:
            dims = [[d[E.D_SHAPE]] for d in descs]
        else:
            dims = E.allgather_int64(comm, [t.shape[0] for t in tensors], n)
        row = [t[0].numel() * t.element_size() if t.shape[0] else
               int(torch.tensor(t.shape[1:]).prod().item()) * t.element_size() for t in tensors]
        totals = [sum(row[i] * r[i] for i in range(len(tensors))) for r in dims]
        width = max(totals)
        send = torch.zeros(width, dtype=torch.uint8)
        off = 0
        for t in tensors:
            b = E.as_bytes(_flat(t))
            send[off:off + b.numel()] = b
            off += b.numel()
        recv = torch.empty(width * n, dtype=torch.uint8)
        E.run_op(comm, _core.ALLGATHER, _core.UINT8, 0, 0, send, recv)
        for i, t in enumerate(tensors):
            rows = sum(r[i] for r in dims)
            out = torch.empty((rows,) + tuple(t.shape[1:]), dtype=t.dtype)
            ob = E.as_bytes(out)
            at = 0
            for p in range(n):
                start = p * width + sum(row[j] * dims[p][j] for j in range(i))
                k = row[i] * dims[p][i]
                ob[at:at + k] = recv[start:start + k]
                at += k
            outputs[i] = out
        return outputs
    return E.Request(E.ALLGATHER, ps, tensors, name=name, run=run)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating tensor from every member along the first dimension
    (which may differ between ranks)."""
    return _submit_one(_gather_request([tensor], name, process_set))


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.ps = tensor.shape[0], process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        red = allreduce(grad, op=Average, process_set=ctx.ps)  # Horovod averages here
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.ps)
        off = int(dims[:ctx.ps.rank()].sum())
        return red.narrow(0, off, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    tensors = _grouped_check(tensors)
    return _submit(_gather_request(tensors, name, process_set))


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims, ctx.ps = [t.shape[0] for t in tensors], process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        red = grouped_allreduce(list(grads), op=Average, process_set=ctx.ps)  # Horovod averages here
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64), process_set=ctx.ps)
        offs = dims[:ctx.ps.rank()].sum(0).tolist() if ctx.ps.rank() else [0] * len(grads)
        return (None, None) + tuple(r.narrow(0, int(o), d) for r, o, d in zip(red, offs, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(_GroupedAllgather.apply(name, process_set, *_grouped_check(tensors)))


# -- broadcast ------------------------------------------------------------------

def _broadcast_request(tensor, output, root_rank, name, process_set):
    ps = _set(process_set)
    _check_tensor(tensor, "broadcast")
    if root_rank not in ps.ranks:
        raise ValueError(f"broadcast: root rank {root_rank} is not in {ps}")
    root = _root(ps, ps.ranks.index(root_rank))

    def run(engine, comm, descs):
        src = _flat(tensor)
        b = E.as_bytes(src if src.data_ptr() != tensor.data_ptr() or output is tensor else src.clone())
        E.run_op(comm, _core.BROADCAST, _core.UINT8, 0, root, b, None)
        if b.numel() and (output.data_ptr() != b.data_ptr() or not output.is_contiguous()):
            with torch.no_grad():
                output.copy_(b.view(tensor.dtype).view(output.shape))
        return output
    return E.Request(E.BROADCAST, ps, [tensor], root=root_rank, name=name, run=run)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format) if isinstance(tensor, torch.Tensor) \
        else None
    return _submit(_broadcast_request(tensor, output, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _submit(_broadcast_request(tensor, tensor, root_rank, name, process_set))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.ps = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        red = allreduce(grad, op=Average, process_set=ctx.ps)  # Horovod averages here
        if rank() != ctx.root:
            red = red * 0
        return red, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# -- alltoall ------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start sending splits[i] rows of tensor to member i and receiving
    theirs; synchronize returns (output, received_splits)."""
    ps = _set(process_set)
    _check_tensor(tensor, "alltoall")
    n = ps.size()
    if tensor.dim() == 0:
        raise ValueError("alltoall: a tensor needs at least one dimension")
    rows = tensor.shape[0]
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall: tensor(s) first dimension ({rows}) must be a multiple of the number of "
                             f"workers ({n}) when splits are not given")
        split_list = [rows // n] * n
        split_dtype = torch.int32
    else:
        st = splits if isinstance(splits, torch.Tensor) else torch.tensor(splits)
        if st.dtype.is_floating_point or st.dtype == torch.bool:
            raise ValueError(f"alltoall: splits must be 32-bit integers, not {st.dtype}")
        split_dtype = st.dtype if isinstance(splits, torch.Tensor) else torch.int32
        split_list = [int(x) for x in st.reshape(-1).tolist()]
        if len(split_list) != n:
            raise ValueError(f"alltoall: {len(split_list)} splits for a process set of {n}")
        if any(x < 0 for x in split_list):
            raise ValueError(f"alltoall: negative splits {split_list}")
        if sum(split_list) > rows:
            raise ValueError(f"alltoall: splits sum to {sum(split_list)}, more than the tensor's first dimension "
                             f"({rows})")

    def run(engine, comm, descs):
        every = E.allgather_int64(comm, split_list, n)
        me = ps.rank()
        recv_splits = [every[p][me] for p in range(n)]
        row = (tensor.numel() // rows if rows else int(torch.tensor(tensor.shape[1:]).prod().item())) * \
            tensor.element_size()
        out = torch.empty((sum(recv_splits),) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
        send = E.as_bytes(_flat(tensor))[:sum(split_list) * row]
        counts = [s * row for s in split_list] + [s * row for s in recv_splits]
        E.run_op(comm, _core.ALLTOALLV, _core.UINT8, 0, 0, send, E.as_bytes(out), counts)
        return out, torch.tensor(recv_splits, dtype=split_dtype)
    return _submit(E.Request(E.ALLTOALL, ps, [tensor], name=name, run=run))


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, recv = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.recv, ctx.ps = recv, process_set
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, *_):
        g, _ = alltoall(grad, splits=ctx.recv, process_set=ctx.ps)
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows of tensor to every member by splits; returns the received rows,
    and with splits given, (received rows, received splits) as Horovod does."""
    out, recv = _Alltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, recv)


# -- reducescatter ------------------------------------------------------------------

def _rs_rows(rows, n, place):
    return rows // n + (1 if place < rows % n else 0)


def _reducescatter_request(tensors, name, op, process_set, pre, post):
    ps = _set(process_set)
    if op == Adasum:
        raise NotImplementedError("gorun.horovod: reducescatter does not support Adasum")
    _check_op(op, ps, "reducescatter")
    for t in tensors:
        _check_tensor(t, "reducescatter")
        if t.dim() == 0:
            raise ValueError("reducescatter: a tensor needs at least one dimension (it is split on the first)")
        if t.dtype == torch.bool:
            raise ValueError("reducescatter: bool tensors are not supported")
    n, me = ps.size(), ps.rank()
    outputs = [None] * len(tensors)

    def run(engine, comm, descs):
        for i, t in enumerate(tensors):
            rows = t.shape[0]
            rowel = t[0].numel() if rows else 0
            block = (rows + n - 1) // n * rowel
            wide = E.WIDE.get(t.dtype, t.dtype)
            src = _prescale(_flat(t).to(wide).clone(), pre, t.dtype)
            send = torch.zeros(block * n, dtype=wide)
            at = 0
            for p in range(n):
                k = _rs_rows(rows, n, p) * rowel
                send[p * block:p * block + k] = src[at:at + k]
                at += k
            recv = torch.empty(block, dtype=wide)
            if block:
                E.run_op(comm, _core.REDUCE_SCATTER, E.NATIVE[wide], E.CORE_OP[op], 0, send, recv)
            mine = recv[:_rs_rows(rows, n, me) * rowel]
            if op == Average:
                mine = mine.div(n, rounding_mode="trunc") if post == 1.0 and not wide.is_floating_point else \
                    (mine.div_(n) if post == 1.0 else _scale(mine, post / n))
            else:
                mine = _scale(mine, post)
            outputs[i] = mine.to(t.dtype).view((_rs_rows(rows, n, me),) + tuple(t.shape[1:]))
        return outputs
    return E.Request(E.REDUCESCATTER, ps, tensors, op=op, name=name, run=run)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Start reducing tensor over the members and keeping this member's
    rows (the first dimension split as evenly as it goes, the first members
    taking one more)."""
    return _submit_one(_reducescatter_request([tensor], name, op, process_set, prescale_factor, postscale_factor))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, pre, post):
        ctx.args = (op, process_set, pre, post)
        return synchronize(reducescatter_async(tensor, name, op, process_set, pre, post))

    @staticmethod
    def backward(ctx, grad):
        op, ps, pre, post = ctx.args
        g = grad * (pre * post * (ps.size() if op == Sum else 1))
        return allgather(g, process_set=ps), None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    from .compression import Compression
    compression = compression or Compression.none
    c, ctx = compression.compress(tensor)
    return compression.decompress(_Reducescatter.apply(c, name, op, process_set, prescale_factor, postscale_factor),
                                  ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    tensors = _grouped_check(tensors)
    return _submit(_reducescatter_request(tensors, name, op, process_set, prescale_factor, postscale_factor))


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, pre, post, *tensors):
        ctx.args = (op, process_set, pre, post)
        return tuple(synchronize(grouped_reducescatter_async(tensors, name, op, process_set, pre, post)))

    @staticmethod
    def backward(ctx, *grads):
        op, ps, pre, post = ctx.args
        f = pre * post * (ps.size() if op == Sum else 1)
        return (None,) * 5 + tuple(grouped_allgather([g * f for g in grads], process_set=ps))


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    from .compression import Compression
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in _grouped_check(tensors)]
    out = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                      *[c for c, _ in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, pairs)]


# -- barrier, join, process sets ------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Return once every member of the process set has called barrier."""
    ps = _set(process_set)
    synchronize(_submit(E.Request(E.BARRIER, ps)))


def join(device=-1):
    """This rank is out of data: it takes part (with neutral values) in the
    allreduces of ranks still training until every rank has joined.
    Returns the rank that joined last."""
    _need_init()
    return synchronize(_submit(E.Request(E.JOIN, global_process_set)))


def add_process_set(process_set):
    """Make a process set on every rank (every rank calls this, in the same
    order); returns it, initialized. Its members get a gorun communicator."""
    _need_init()
    if _s.view is not None:
        raise ValueError("gorun.horovod: process sets are not supported on an elastic job (gorun --elastic)")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    ranks = process_set.ranks
    if not ranks or any(r < 0 or r >= size() for r in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"add_process_set: {ranks} are not distinct ranks of this job of {size()}")
    for ps in _s.sets.values():
        if ps.ranks == ranks:
            raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
    if ranks == global_process_set.ranks:
        raise ValueError(f"Attempted to add a duplicate process set: {process_set} (the global one)")
    req = E.Request(E.ADD_SET, global_process_set, [torch.tensor(ranks, dtype=torch.int64)])
    sid = [None]

    def run(engine, comm, descs):
        with _s.lock:
            sid[0] = _s.next_set
            _s.next_set += 1
        if rank() in ranks:
            process_set.comm = _s.world.create_group(ranks, _core.group_tag(f"gorun.horovod.set.{sid[0]}"),
                                                     E.timeout())
        process_set.process_set_id = sid[0]
        _s.sets[sid[0]] = process_set
    req.run = run
    synchronize(_submit(req))
    return process_set


def remove_process_set(process_set):
    """Remove a process set (every rank calls this); False if it was not there."""
    _need_init()
    sid = process_set.process_set_id
    if sid is None or sid == 0 or sid not in _s.sets:
        return False
    req = E.Request(E.REMOVE_SET, global_process_set, [torch.tensor([sid], dtype=torch.int64)])

    def run(engine, comm, descs):
        ps = _s.sets.pop(sid)
        if ps.comm is not None:
            ps.comm.close()
            ps.comm = None
        ps._invalidate()
    req.run = run
    synchronize(_submit(req))
    return True

