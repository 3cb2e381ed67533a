"""gorun as a torch.distributed backend.

    import torch.distributed as dist
    import gorun.torch                      # registers the "gorun" backend
    dist.init_process_group("gorun")        # under: gorun -np N /usr/bin/python3 train.py

Every operation runs on gorun's collectives (the ring, ParamHub under
--strategy hub, shared memory between ranks of a host). Small ones (up to
INLINE_BYTES) run in the calling thread and return a completed Work
(all_reduce from torch's C++ with no Python frame, where the native fast
path is built); larger ones return a Work whose future completes when
gorun's nonblocking collective does, so DDP's buckets overlap backward. No
Python lock is held while bytes move.

Tensors must be on the CPU. float32, float64, int32, int64, int8 and uint8
move as they are; float16 and bfloat16 are reduced in float32 (never summed
in half precision) and rounded once; bool reductions run on int32 (SUM and
MAX are "or", MIN and PRODUCT "and"). AVG is for floating-point tensors.
Non-contiguous tensors go through a contiguous copy.

Elastic jobs (gorun --elastic): a lost or restarted rank makes the pending
and next operations fail with gorun.torch.ViewChanged; call resync() to take
the model, optimizer and step from a survivor on the new view, wrap the
model in DDP again, and go on (docs/pytorch.md shows the loop).
"""

import atexit
import collections
import ctypes
import importlib.util
import inspect
import io
import os
import threading
import time
import warnings
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ReduceOp

from . import _core, _rendezvous
from ._core import (Aborted, Closed, GorunError, Mismatch, PeerLost,  # noqa: F401 (re-exported)
                    Timeout, ViewChanged)

__all__ = ["ProcessGroupGorun", "MONITOR_TAG", "init", "resync", "is_view_changed", "world", "GorunError", "PeerLost", "ViewChanged",
           "Mismatch", "Closed", "Aborted", "Timeout"]

_NATIVE = {
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64, torch.int32: _core.INT32,
    torch.int64: _core.INT64, torch.int8: _core.INT8, torch.uint8: _core.UINT8,
}
# Reductions of these run on a wider type, converted back once.
_WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.int32}

_OPS = {"SUM": _core.SUM, "AVG": _core.AVG, "MIN": _core.MIN, "MAX": _core.MAX, "PRODUCT": _core.PROD}


# The reduction code of each (RedOpType's int value, native dtype) pair
# gorun reduces as it lies: the fast path of allreduce looks an operation
# up here in one step (_op_code decodes every other form torch gives a
# reduction). Keyed by int: hashing a RedOpType costs a microsecond.
_FAST_OPS = {(int(ReduceOp.RedOpType.__members__[name]), dtype): code
             for name, code in _OPS.items() for dtype in _NATIVE
             if code != _core.AVG or dtype.is_floating_point}


def world():
    """The job's gorun communicator (joined on first use)."""
    return _core.world()


_AllreduceOptions = dist.AllreduceOptions

# Reductions by RedOpType value, for ops given as plain ints (the values
# are the same in torch 1.13 and 2.x).
_OP_NAMES = {int(v): k for k, v in ReduceOp.RedOpType.__members__.items()}


def _op_name(op):
    """The name (SUM, AVG, ...) of a reduction in any form torch gives one:
    an options object (AllreduceOptions and the like, whose reduceOp holds
    it), a ReduceOp object (1.13's ReduceOp.SUM, _make_nccl_premul_sum's
    result), a RedOpType (2.x's ReduceOp.SUM) or a RedOpType's int value."""
    op = getattr(op, "reduceOp", op)
    op = getattr(op, "op", op)  # a ReduceOp object wraps its RedOpType
    if isinstance(op, int) and not isinstance(op, bool):
        name = _OP_NAMES.get(op)
    else:
        name = getattr(op, "name", None)
    if not isinstance(name, str):
        raise ValueError(f"gorun: {op!r} is not a reduction (give a torch.distributed.ReduceOp)")
    return name


def _op_code(op, dtype):
    name = _op_name(op)
    code = _OPS.get(name)
    if name == "PREMUL_SUM":
        raise ValueError("gorun: PREMUL_SUM (torch's _make_nccl_premul_sum) is not supported: "
                         "multiply the tensor by the factor, then reduce with ReduceOp.SUM")
    if code is None:
        raise ValueError(f"gorun: unsupported reduction {name} (gorun has SUM, AVG, MIN, MAX and PRODUCT)")
    if code == _core.AVG and not dtype.is_floating_point:
        raise ValueError(f"gorun: ReduceOp.AVG is for floating-point tensors, not {dtype}")
    return code


def _check_device(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"gorun: expected a tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"gorun: tensors must be on the CPU; this one is on {t.device} "
                         "(move it with .cpu(), or use the nccl backend for GPU tensors)")


def _check(t):
    _check_device(t)
    if t.is_sparse:
        raise ValueError("gorun: sparse tensors are all-reduced (SUM) only")


def _reducible(dtype):
    if dtype not in _NATIVE and dtype not in _WIDE:
        raise TypeError(f"gorun: reductions of {dtype} are not supported (gorun reduces float32, float64, "
                        "float16, bfloat16, int8, uint8, int32, int64 and bool)")


def _one(tensors):
    """The native element type of tensors if they are one dense, contiguous
    CPU tensor of a native type, whose memory a collective takes as it
    lies; else None."""
    if len(tensors) != 1 or not isinstance(tensors[0], torch.Tensor):
        return None
    t = tensors[0]
    dt = _NATIVE.get(t.dtype)
    if dt is None or t.is_sparse or not t.is_cpu or not t.is_contiguous():
        return None
    return dt


def _flat(t):
    """A 1-D tensor of stride 1 with t's elements, sharing t's memory when it can."""
    f = (t if t.is_contiguous() else t.contiguous()).reshape(-1)
    if f.numel() > 0 and f.stride(0) != 1:  # one element, strided: "contiguous" to torch
        f = torch.empty(f.numel(), dtype=f.dtype).copy_(f)  # (clone keeps the stride)
    return f


def _copied(t, f):
    """Whether f (from _flat or _bytes) is a copy of t rather than t's memory."""
    return t.numel() > 0 and f.data_ptr() != t.data_ptr()


def _bytes(t):
    """t's elements as a flat uint8 tensor (a view of a contiguous t)."""
    f = _flat(t)
    if f.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    if f.dtype == torch.uint8:
        return f
    if f.dtype.is_complex:
        f = torch.view_as_real(f).reshape(-1)
    return f.view(torch.uint8)


def _unbytes(t, b):
    """Copy b (t's elements as bytes, from _bytes) into t."""
    t.copy_(b.view(t.dtype).view(t.shape))


def _copy_back(t, b):
    """A finish that copies b into t when b is a copy of t's memory (else None)."""
    return (lambda: _unbytes(t, b)) if _copied(t, b) else None


def _narrow(t, buf):
    """Copy a reduction's result (t's elements, perhaps in a wider type) into t."""
    t.copy_((buf != 0).view(t.shape) if t.dtype == torch.bool else buf.view(t.shape))


def _addr(t):
    return t.data_ptr() if t.numel() else None


def _relay(fut):
    """The value of a finished operation, or its error raised, so that the
    future then() returns carries a real error that C++ (DDP) sees."""
    v = fut.value()
    if isinstance(v, BaseException):
        raise v
    return v


class _Work(dist.Work):
    """The Work of a gorun operation.

    wait() raises the operation's own error (PeerLost, ViewChanged, ...);
    get_future() gives torch (DDP's reducer) a future that fails with it.
    PyTorch calls these overrides from C++ only while this Python object
    lives, and it does not keep it alive itself, so each one is kept in
    _alive until well after it completed (_KEEP seconds).
    """

    def __init__(self, pending):
        super().__init__()
        self._p = pending

    def wait(self, timeout=None):
        # Wait in this thread (no hand-off through the collecting thread).
        for op_id in self._p.ids:
            if self._p.src.done():
                break
            _core.Comm.wait(op_id)
        v = self._p.src.wait()
        if isinstance(v, BaseException):
            raise v
        return True

    def get_future(self):
        return self._p.future()

    def _source_rank(self):
        """The sender of a receive from any source (dist.recv without src)."""
        src = getattr(self, "_source", None)
        if src is None:
            raise RuntimeError("gorun: only a receive from any source has a source rank")
        self.wait()
        return int(src[0])

    def is_completed(self):
        return self._p.src.done()

    def is_success(self):
        return self._p.src.done() and not isinstance(self._p.src.value(), BaseException)

    def exception(self):
        v = self._p.src.value() if self._p.src.done() else None
        return v if isinstance(v, BaseException) else None

    def result(self):
        v = self._p.src.wait()
        if isinstance(v, BaseException):
            raise v
        return v


_KEEP = 60.0
# ... and at most the latest _KEEP_COUNT completed ones (a loop of small
# operations completes a hundred thousand a second; DDP holds a handful).
_KEEP_COUNT = 1 << 16
_alive = {}  # id -> the Work, from its start until it is let go
_done = collections.deque()  # (completed at (monotonic), id), in completion order
_alive_lock = threading.Lock()


def _keep(work):
    with _alive_lock:
        _alive[id(work)] = work


def _finished(work):
    """Work completed: it is let go _KEEP seconds from now (or after
    _KEEP_COUNT later completions)."""
    with _alive_lock:
        if id(work) in _alive:
            _completed_locked(work)


def _completed_locked(work):
    """Records work's completion and lets go of the Works past their
    keeping (_alive_lock is held)."""
    now = time.monotonic()
    _done.append((now, id(work)))
    while len(_done) > _KEEP_COUNT or now - _done[0][0] > _KEEP:
        _alive.pop(_done.popleft()[1], None)
    _prune_done_locked(now)


class _DoneWork(dist.Work):
    """The Work of an operation that ran in the calling thread and
    succeeded (ProcessGroupGorun._inline): complete from the start."""

    def __init__(self, result):
        super().__init__()
        self._result = result
        self._fut = None

    def wait(self, timeout=None):
        return True

    def get_future(self):
        if self._fut is None:
            self._fut = torch.futures.Future()
            self._fut.set_result(self._result)
        return self._fut

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._result


# Works complete from the start, with their completion time: kept as
# long as the others once completed (_KEEP seconds, at most _KEEP_COUNT).
_done_keep = collections.deque(maxlen=_KEEP_COUNT)


def _done_work(result):
    w = _DoneWork(result)
    now = time.monotonic()
    _done_keep.append((now, w))
    if now - _done_keep[0][0] > _KEEP:  # (w is there: it cannot be past its keeping)
        with _alive_lock:
            _prune_done_locked(now)
    return w


def _prune_done_locked(now):
    """Lets go of the complete-from-the-start Works past their keeping
    (_alive_lock is held): at every completion, so that they go even when
    only larger operations follow."""
    while _done_keep and now - _done_keep[0][0] > _KEEP:
        _done_keep.popleft()


# An all-reduce, reduce or broadcast of one contiguous CPU tensor of a
# native type and at most this many bytes runs in the calling thread, the
# interpreter's lock released (Comm.run), and returns a Work that is
# already complete: for it, a hand-off to gorun's threads and back costs
# more than the bytes. The default is 1 MiB: between ranks that share
# memory the operation's frames go out at once, so it runs on the calling
# thread alone, which on a thread that came from C is 2-5 times faster
# than the hand-off at 64 KiB to 1 MiB (docs/pytorch.md has the figures).
# Larger ones start and return at once, so that DDP's buckets overlap
# backward. GORUN_TORCH_INLINE_BYTES sets it (0: never); elastic jobs
# never run inline (their blocking calls mean "the program saw the view
# change").
INLINE_BYTES = int(os.environ.get("GORUN_TORCH_INLINE_BYTES", 1 << 20))


def _load_native():
    """The native fast path (python/csrc/torchc.cpp) built for the torch
    this process runs, from beside libgorun.so; None when there is none.
    GORUN_TORCH_NATIVE=0 turns it off; =1 makes its absence an error."""
    want = os.environ.get("GORUN_TORCH_NATIVE", "")
    if want == "0":
        return None
    tag = "".join(c if c.isalnum() else "_" for c in torch.__version__)
    path = os.path.join(os.path.dirname(_core.library_path()), f"_torchc-{tag}.so")
    if not os.path.exists(path):
        if want == "1":
            raise ImportError(f"gorun: GORUN_TORCH_NATIVE=1 but {path} is missing: build it with `make python` "
                              "(it needs g++, libtorch-dev and pybind11-dev)")
        return None
    try:
        spec = importlib.util.spec_from_file_location("gorun._torchc", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if mod.TORCH_VERSION != torch.__version__:
            raise ImportError(f"it was built for torch {mod.TORCH_VERSION}, this is {torch.__version__}")
        mod.bind({name: _core.function_address(name) for name in
                  ("gorun_run", "gorun_start_on", "gorun_next_on", "gorun_wait", "gorun_result")}, _core.error)
    except (ImportError, AttributeError) as e:  # another Python's build, an older libgorun.so: the Python path does the same, more slowly
        if want == "1":
            raise ImportError(f"gorun: GORUN_TORCH_NATIVE=1 but {path} does not load: {e}") from e
        warnings.warn(f"gorun: the native fast path {path} does not load ({e}); running without it")
        return None
    return mod


# The native fast path, or None: dist.all_reduce of one contiguous CPU
# tensor of a native type goes from torch's C++ to gorun's C ABI without a
# Python frame, in the calling thread up to INLINE_BYTES and on gorun's
# goroutines above (docs/pytorch.md has the figures).
NATIVE = _load_native()

_NATIVE_CODES = {name: getattr(_core, name) for name in
                 ("ALLREDUCE", "SUM", "AVG", "MIN", "MAX", "PROD", "FLOAT32", "FLOAT64", "INT32", "INT64", "INT8",
                  "UINT8")}


def _failed_code(code, msg):
    """The failed Work of an operation the native fast path ran."""
    return _failed_work(_core.error(code, msg))


def _slow_allreduce(ref):
    """ProcessGroupGorun.allreduce of the group ref refers to: what the
    native fast path hands every operation it does not run itself (a weak
    reference, so that the group and its fast path make no cycle)."""
    def call(*args):
        pg = ref()
        if pg is None:
            raise RuntimeError("gorun: this process group was destroyed")
        return type(pg).allreduce(pg, *args)
    return call


class _Pending:
    """Operations that together complete one Work.

    The Work completes when every added operation is done and the builder
    has sealed it (work()): an operation that finishes before the next is
    added, or before finish is set, cannot complete it early.
    """

    def __init__(self, result, finish=None):
        self.src = torch.futures.Future()  # completed with the result or the error object
        self.out = None  # src.then(_relay), made by future() when torch asks for it
        self.result = result
        self.finish = finish
        self.left = 1  # the builder's own share, released by work()
        self.err = None
        self.keep = []
        self.lock = threading.Lock()
        self.w = None
        self.ids = []

    def add(self, comm, kind, dtype, op, root, tag, send, recv, counts=None, timeout=None):
        self.keep += [send, recv]
        with self.lock:
            self.left += 1
        self.ids.append(comm.start(kind, dtype, op, root, tag, _addr(send) if send is not None else None,
                                   send.numel() if send is not None else 0, _addr(recv) if recv is not None else None,
                                   recv.numel() if recv is not None else 0, counts, timeout, self._done))

    def _done(self, code, msg):
        with self.lock:
            if code != 0 and self.err is None:
                self.err = _core.error(code, msg)
            self.left -= 1
            last = self.left == 0
        if not last:
            return
        if self.err is None and self.finish is not None:
            try:
                self.finish()
            except Exception as e:
                self.err = e
        self.keep = None
        if _core.in_collector():
            # torch runs the future's then-callbacks inside set_result, and
            # one may wait for another operation: never on the thread that
            # must deliver that operation's completion.
            _core.completer.submit(self._complete)
        else:
            self._complete()

    def _complete(self):
        self.src.set_result(self.err if self.err is not None else self.result)
        _finished(self.w)

    def future(self):
        """The future that torch gets (Work.get_future): src's value, or its
        error raised. Made on first use, since a blocking call never asks
        for it; made after src completed, it is complete from the start."""
        with self.lock:
            if self.out is None:
                self.out = self.src.then(_relay)
            return self.out

    def work(self):
        """Seal: no more operations; the Work completes when they are done."""
        self.w = _Work(self)
        _keep(self.w)
        self._done(0, "")
        return self.w


def _failed_work(err):
    p = _Pending(None)
    p.err = err
    return p.work()


def _timeout(opts, default=None):
    t = getattr(opts, "timeout", None)
    if isinstance(t, timedelta) and t.total_seconds() > 0:
        return t.total_seconds()
    return default


def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for y in x:
            t = _first_tensor(y)
            if t is not None:
                return t
    return None


def _device_map(pg):
    """Device type -> backend name, from the backend string pg was made with
    ("cpu:gorun,cuda:nccl"; torch 2.x only, {} before it is registered)."""
    config = getattr(dist.distributed_c10d, "BackendConfig", None)
    if config is None:
        return {}
    entry = dist.distributed_c10d._world.pg_map.get(pg)
    if entry is None:
        return {}
    return dict(config(dist.Backend(entry[0])).get_device_backend_map())


def _make_backend(name, device_type, store, rank, size, timeout, group_name):
    """torch's backend called name (gloo or nccl) for device_type's tensors
    in a gorun group, made as init_process_group makes it, over the group's
    store."""
    c10d = dist.distributed_c10d
    store = c10d.PrefixStore(f"{device_type}/", store)
    t = timedelta(seconds=timeout)
    if name == "gloo":
        b = c10d.ProcessGroupGloo(store, rank, size, t)
    elif name == "nccl":
        opts = c10d.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = False
        opts._timeout = t
        opts.group_name = group_name
        b = c10d.ProcessGroupNCCL(store, rank, size, opts)
    else:
        raise ValueError(f"gorun: {device_type}:{name}: a gorun process group hands other devices' tensors to "
                         "gloo or nccl only")
    if hasattr(b, "_set_sequence_number_for_group"):
        b._set_sequence_number_for_group()
    return b


def _routed(method):
    """method's tensors go to the group's backend for their device when they
    are not on the CPU and the group has one ("cpu:gorun,cuda:nccl")."""
    def run(self, *args):
        a = args[0] if args else None
        if type(a) is list and len(a) == 1 and type(a[0]) is torch.Tensor and a[0].is_cpu:
            return method(self, *args)  # the common case, quickly
        other = self._elsewhere(args)
        if other is None:
            return method(self, *args)
        while args and args[-1] is None:
            args = args[:-1]
        return getattr(other, method.__name__)(*args)
    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


class ProcessGroupGorun(dist.ProcessGroup):
    """A torch.distributed process group over a gorun communicator.

    Its rank and size are the communicator's place and size when it was
    made: on an elastic job, a view change makes it stale (every operation
    then fails with ViewChanged) and resync() makes the next one.
    """

    def __init__(self, comm, rank, size, ranks=None, timeout=None):
        super().__init__(rank, size)
        self.comm = comm
        self._default_timeout = timeout  # seconds: init_process_group's, for calls that set none
        self._ranks = ranks  # group rank -> the communicator's rank for roots and peers (elastic views)
        self._lock = NATIVE.Lock() if NATIVE else threading.Lock()  # operations start in call order
        self._name = None  # torch's name for the group (2.x), see group_name
        self._desc = None  # and its description
        self._others = {}  # device type -> the backend its tensors go to ("cpu:gorun,cuda:nccl")
        self._inline_ok = INLINE_BYTES > 0 and not comm.elastic  # see INLINE_BYTES
        if NATIVE and self._inline_ok and type(self).allreduce is ProcessGroupGorun.allreduce:
            # Found before the class's allreduce by torch's Python and,
            # through the ProcessGroup trampoline, by its C++ (DDP).
            self.allreduce = NATIVE.AllReduce(
                comm=comm.handle, inline_bytes=INLINE_BYTES,
                default_timeout_ms=int(timeout * 1000) if timeout else 0, lock=self._lock,
                slow=_slow_allreduce(weakref.ref(self)), failed=_failed_code, codes=_NATIVE_CODES)

    def getBackendName(self):
        return "gorun"

    # -- torch 2.x's view of the group ------------------------------------
    # torch keeps a process group's name and devices in the C++ backends
    # it registers on the group; a group written in Python has none, so
    # these answer for them (as torch's own Python "threaded" group does).
    # The name is what the functional collectives
    # (torch.distributed._functional_collectives) find the group by.

    def _set_group_name(self, name):
        self._name = name

    def _set_group_desc(self, desc):
        self._desc = desc

    @property
    def group_desc(self):
        return self._desc or "undefined"

    @property
    def group_name(self):
        world = getattr(dist.distributed_c10d, "_world", None)  # torch 2.x
        if self._name is None and world is not None:
            self._name = world.pg_names.get(self)
        if self._name is None:
            raise RuntimeError("gorun: this process group has no name: make it with init_process_group or new_group")
        return self._name

    @property
    def _device_types(self):
        return [torch.device(d) for d in ["cpu"] + [d for d in _device_map(self) if d != "cpu"]]

    def _get_backend(self, device):
        d = torch.device(device).type
        if d in self._others and self._others[d] is not None:
            return self._others[d]
        raise RuntimeError(f"gorun: no backend for {d} tensors in this process group")

    def _backend_for(self, device_type):
        """The backend for tensors of device_type other than the CPU, as the
        group's backend string names it ("cpu:gorun,cuda:nccl"), made on
        first use (every member of the group reaches it in the same
        operation); None where the string names none."""
        if device_type not in self._others:
            name = _device_map(self).get(device_type)
            if name is None or name == "gorun":
                self._others[device_type] = None
            else:
                _, store = dist.distributed_c10d._world.pg_map[self]
                self._others[device_type] = _make_backend(name, device_type, store, self.rank(), self.size(),
                                                          self._default_timeout or 1800.0, self.group_name)
        return self._others[device_type]

    def _elsewhere(self, args):
        """The backend that args' tensors go to when they are not on the
        CPU and the group has one for their device; else None (gorun's)."""
        t = _first_tensor(args)
        if t is None or t.device.type == "cpu":
            return None
        return self._backend_for(t.device.type)

    def _t(self, opts):
        """An operation's timeout in seconds: its own, or the group's."""
        return _timeout(opts, self._default_timeout)

    def _place(self, r):
        """A group rank as Send and Recv take it: a place in the communicator."""
        if not 0 <= r < self.size():
            raise ValueError(f"gorun: rank {r} is not in this group of {self.size()}")
        return r

    def _peer(self, r):
        if not 0 <= r < self.size():
            raise ValueError(f"gorun: rank {r} is not in this group of {self.size()}")
        return self._ranks[r] if self._ranks is not None else r

    # Each public method turns failures to start into a failed Work, so
    # that torch sees them where it waits, as it does a peer's failure.
    def _run(self, build):
        try:
            with self._lock:
                return build()
        except GorunError as e:
            return _failed_work(e)

    # -- reductions ---------------------------------------------------

    def _inline(self, tensors):
        """The native element type of tensors if they are one tensor that
        runs in the calling thread (INLINE_BYTES), else None."""
        if not self._inline_ok:
            return None
        dt = _one(tensors)
        if dt is None or tensors[0].numel() * tensors[0].element_size() > INLINE_BYTES:
            return None
        return dt

    def _run_inline(self, tensors, kind, dtype, op, root, timeout):
        """Runs an operation on tensors (_inline's) in this thread; the
        caller holds self._lock (_run)."""
        t = tensors[0]
        self.comm.run(kind, dtype, op, root, _addr(t), t.numel(), None, 0, timeout)
        return _done_work(tensors)

    def _reduce(self, tensors, op, kind, root, timeout):
        dt = _one(tensors)
        if dt is not None:
            t = tensors[0]
            code = _op_code(op, t.dtype)
            if self._inline_ok and t.numel() * t.element_size() <= INLINE_BYTES:
                return self._run_inline(tensors, kind, dt, code, root, timeout)
            # One tensor reduced where it lies: no checks, copies or
            # finish beyond what _one established.
            pend = _Pending(tensors)
            pend.add(self.comm, kind, dt, code, root, 0, t, None, timeout=timeout)
            return pend.work()
        for t in tensors:  # every tensor checked before any operation starts
            _check(t)
            _reducible(t.dtype)
            _op_code(op, t.dtype)
        pend = _Pending(tensors)
        copies = []
        for t in tensors:
            code = _op_code(op, t.dtype)
            wide = _WIDE.get(t.dtype)
            if wide is not None:
                buf = _flat(t).to(wide)
            else:
                buf = _flat(t)
            if wide is not None or _copied(t, buf):
                copies.append((t, buf))
            pend.add(self.comm, kind, _NATIVE[buf.dtype], code, root, 0, buf, None, timeout=timeout)

        def finish():
            for t, buf in copies:
                _narrow(t, buf)
        pend.finish = finish
        return pend.work()

    @_routed
    def allreduce(self, tensors, opts=None):
        # dist.all_reduce of one small tensor that gorun reduces as it
        # lies: in this thread, with no more Python than it needs (the
        # same steps as _reduce and _run_inline).
        if type(opts) is _AllreduceOptions and self._inline_ok and type(tensors) is list and len(tensors) == 1:
            t = tensors[0]
            if type(t) is torch.Tensor and t.is_cpu and not t.is_sparse and t.is_contiguous():
                code = _FAST_OPS.get((int(opts.reduceOp.op), t.dtype))
                n = t.numel()
                if code is not None and n * t.element_size() <= INLINE_BYTES:
                    try:
                        with self._lock:
                            return self._run_inline(tensors, _core.ALLREDUCE, _NATIVE[t.dtype], code, 0,
                                                    _timeout(opts, self._default_timeout))
                    except GorunError as e:
                        return _failed_work(e)
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        op = opts if opts is not None else dist.ReduceOp.SUM  # options, or an op as it stands
        if any(isinstance(t, torch.Tensor) and t.is_sparse for t in tensors):
            try:
                for t in tensors:
                    if not t.is_sparse:
                        raise ValueError("gorun: an all-reduce of sparse and dense tensors together")
                    _check_device(t)
                    self._sparse_allreduce(t, op, self._t(opts))
            except (GorunError, ValueError) as e:
                return _failed_work(e)
            pend = _Pending(tensors)
            return pend.work()
        return self._run(lambda: self._reduce(tensors, op, _core.ALLREDUCE, 0, self._t(opts)))

    @_routed
    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    @_routed
    def reduce(self, tensors, opts):
        root = self._peer(opts.rootRank)
        return self._run(lambda: self._reduce(tensors, opts, _core.REDUCE, root, self._t(opts)))

    def _reduce_scatters(self, pairs, op, timeout):
        """One Work for the reduce-scatters of (output, inputs) pairs, every
        pair checked before any starts."""
        plans = []
        for out, inputs in pairs:
            _check(out)
            _reducible(out.dtype)
            n = out.numel()
            for t in inputs:
                _check(t)
                if t.numel() != n or t.dtype != out.dtype:
                    raise ValueError(f"gorun: reduce_scatter: an input of {t.numel()} {t.dtype} for an output of "
                                     f"{n} {out.dtype}")
            code = _op_code(op, out.dtype)
            wide = _WIDE.get(out.dtype, out.dtype)
            send = torch.cat([_flat(t).to(wide) for t in inputs]) if inputs else torch.empty(0, dtype=wide)
            plans.append((out, code, send, torch.empty(n, dtype=wide)))
        pend = _Pending([out for out, _ in pairs])
        for out, code, send, recv in plans:
            pend.add(self.comm, _core.REDUCE_SCATTER, _NATIVE[recv.dtype], code, 0, 0, send, recv, timeout=timeout)

        def finish():
            for out, _, _, recv in plans:
                _narrow(out, recv)
        pend.finish = finish
        return pend.work()

    def _chunks(self, output, input):
        """input (the tensor form's) as the list form's inputs for output."""
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"gorun: reduce_scatter: input of {input.numel()} elements, want "
                             f"{self.size()} x {output.numel()}")
        if output.numel() == 0:
            return [torch.empty(0, dtype=output.dtype)] * self.size()
        return list(_flat(input).chunk(self.size()))

    @_routed
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if len(output_tensors) != 1:
            raise ValueError("gorun: reduce_scatter takes one output tensor")
        op = opts if opts is not None else dist.ReduceOp.SUM
        ins = input_tensors[0]
        if len(ins) != self.size():
            raise ValueError(f"gorun: reduce_scatter: {len(ins)} inputs for {self.size()} ranks")
        return self._run(lambda: self._reduce_scatters([(output_tensors[0], ins)], op, self._t(opts)))

    @_routed
    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts if opts is not None else dist.ReduceOp.SUM
        pairs = [(output, self._chunks(output, input))]
        return self._run(lambda: self._reduce_scatters(pairs, op, self._t(opts)))

    @_routed
    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """Several reduce_scatter_tensor as one Work (torch 2.x's functional
        collectives call this)."""
        if len(outputs) != len(inputs):
            raise ValueError(f"gorun: reduce_scatter_tensor_coalesced: {len(outputs)} outputs, {len(inputs)} inputs")
        op = opts if opts is not None else dist.ReduceOp.SUM
        pairs = [(o, self._chunks(o, i)) for o, i in zip(outputs, inputs)]
        return self._run(lambda: self._reduce_scatters(pairs, op, self._t(opts)))

    # -- data movement --------------------------------------------------

    @_routed
    def broadcast(self, tensors, opts):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = self._peer(opts.rootRank)
        dt = self._inline(tensors)
        if dt is not None:
            return self._run(lambda: self._run_inline(tensors, _core.BROADCAST, dt, 0, root, self._t(opts)))

        def build():
            for t in tensors:
                _check(t)
            pend = _Pending(tensors)
            copies = []
            for t in tensors:
                b = _bytes(t)
                if _copied(t, b):
                    copies.append((t, b))
                pend.add(self.comm, _core.BROADCAST, _core.UINT8, 0, root, 0, b, None, timeout=self._t(opts))

            def finish():
                for t, b in copies:
                    _unbytes(t, b)
            pend.finish = finish
            return pend.work()
        return self._run(build)

    def _allgather_into(self, pairs, timeout, finish=None, result=None):
        """One Work for the all-gathers of (flat uint8 output, input) pairs."""
        for _, t in pairs:
            _check(t)
        pend = _Pending(result if result is not None else [o for o, _ in pairs], finish)
        for flat_out, t in pairs:
            pend.add(self.comm, _core.ALLGATHER, _core.UINT8, 0, 0, 0, _bytes(t), flat_out, timeout=timeout)
        return pend.work()

    @_routed
    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise ValueError("gorun: allgather takes one input tensor and one output list")
        t, outs = input_tensors[0], output_tensors[0]
        if len(outs) != self.size():
            raise ValueError(f"gorun: allgather: {len(outs)} outputs for {self.size()} ranks")
        for o in outs:
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise ValueError(f"gorun: allgather: an output of {o.numel()} {o.dtype} for an input of "
                                 f"{t.numel()} {t.dtype}")

        def build():
            nbytes = _bytes(t).numel()
            recv = torch.empty(nbytes * self.size(), dtype=torch.uint8)

            def finish():
                for i, o in enumerate(outs):
                    _unbytes(o, recv[i * nbytes:(i + 1) * nbytes])
            return self._allgather_into([(recv, t)], self._t(opts), finish, output_tensors)
        return self._run(build)

    @_routed
    def _allgather_base(self, output, input, opts=None):
        return self.allgather_into_tensor_coalesced([output], [input], opts)

    @_routed
    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """Several all_gather_into_tensor as one Work (all_gather_into_tensor
        itself, and torch 2.x's functional collectives, call this)."""
        if len(outputs) != len(inputs):
            raise ValueError(f"gorun: all_gather_into_tensor: {len(outputs)} outputs, {len(inputs)} inputs")
        for output, input in zip(outputs, inputs):
            if output.numel() != input.numel() * self.size() or output.dtype != input.dtype:
                raise ValueError(f"gorun: all_gather_into_tensor: output of {output.numel()} {output.dtype}, want "
                                 f"{self.size()} x {input.numel()} {input.dtype}")

        def build():
            for output in outputs:
                _check(output)
            recvs = [_bytes(o) for o in outputs]
            copies = [(o, r) for o, r in zip(outputs, recvs) if _copied(o, r)]

            def finish():
                for o, r in copies:
                    _unbytes(o, r)
            return self._allgather_into(list(zip(recvs, inputs)), self._t(opts), finish, list(outputs))
        return self._run(build)

    @_routed
    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """all_gather of several tensors as one Work: output_lists[r][i]
        receives rank r's input_list[i]."""
        n = self.size()
        if len(output_lists) != n:
            raise ValueError(f"gorun: all_gather_coalesced: {len(output_lists)} output lists for {n} ranks")
        for outs in output_lists:
            if len(outs) != len(input_list):
                raise ValueError(f"gorun: all_gather_coalesced: an output list of {len(outs)} tensors for "
                                 f"{len(input_list)} inputs")
            for o, t in zip(outs, input_list):
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise ValueError(f"gorun: all_gather_coalesced: an output of {o.numel()} {o.dtype} for an "
                                     f"input of {t.numel()} {t.dtype}")

        def build():
            sizes = [_bytes(t).numel() for t in input_list]
            recvs = [torch.empty(k * n, dtype=torch.uint8) for k in sizes]

            def finish():
                for r, outs in enumerate(output_lists):
                    for o, recv, k in zip(outs, recvs, sizes):
                        _unbytes(o, recv[r * k:(r + 1) * k])
            return self._allgather_into(list(zip(recvs, input_list)), self._t(opts), finish, output_lists)
        return self._run(build)

    @_routed
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def build():
            _check(input)
            _check(output)
            if input.dtype != output.dtype:
                raise ValueError(f"gorun: all_to_all_single: input {input.dtype}, output {output.dtype}")
            n = self.size()
            row_in = input[0].numel() if input.dim() > 0 and input.shape[0] > 0 else 1
            row_out = output[0].numel() if output.dim() > 0 and output.shape[0] > 0 else 1
            isz = list(input_split_sizes) or ([input.shape[0] // n] * n if input.dim() > 0 else [0] * n)
            osz = list(output_split_sizes) or ([output.shape[0] // n] * n if output.dim() > 0 else [0] * n)
            if len(isz) != n or len(osz) != n:
                raise ValueError(f"gorun: all_to_all_single: {len(isz)} input and {len(osz)} output splits for {n} ranks")
            if not input_split_sizes and input.dim() > 0 and input.shape[0] % n:
                raise ValueError(f"gorun: all_to_all_single: {input.shape[0]} rows do not split equally over {n} ranks")
            if sum(isz) * row_in != input.numel() or sum(osz) * row_out != output.numel():
                raise ValueError(f"gorun: all_to_all_single: splits {isz} / {osz} do not cover input "
                                 f"{tuple(input.shape)} / output {tuple(output.shape)}")
            size = input.element_size()
            counts = [s * row_in * size for s in isz] + [s * row_out * size for s in osz]
            recv = _bytes(output)
            pend = _Pending([output], _copy_back(output, recv))
            pend.add(self.comm, _core.ALLTOALLV, _core.UINT8, 0, 0, 0, _bytes(input), recv, counts,
                     self._t(opts))
            return pend.work()
        return self._run(build)

    @_routed
    def alltoall(self, output_tensors, input_tensors, opts=None):
        def build():
            n = self.size()
            if len(output_tensors) != n or len(input_tensors) != n:
                raise ValueError(f"gorun: all_to_all: {len(input_tensors)} inputs and {len(output_tensors)} outputs for {n} ranks")
            for t in list(input_tensors) + list(output_tensors):
                _check(t)
            send = torch.cat([_bytes(t) for t in input_tensors])
            sizes = [_bytes(t).numel() for t in output_tensors]
            recv = torch.empty(sum(sizes), dtype=torch.uint8)
            counts = [_bytes(t).numel() for t in input_tensors] + sizes

            def finish():
                off = 0
                for o, s in zip(output_tensors, sizes):
                    _unbytes(o, recv[off:off + s])
                    off += s
            pend = _Pending(output_tensors, finish)
            pend.add(self.comm, _core.ALLTOALLV, _core.UINT8, 0, 0, 0, send, recv, counts, self._t(opts))
            return pend.work()
        return self._run(build)

    @_routed
    def gather(self, output_tensors, input_tensors, opts):
        root = self._peer(opts.rootRank)

        def build():
            t = input_tensors[0]
            send = _bytes(t)
            me = self.rank() == opts.rootRank
            recv = torch.empty(send.numel() * self.size() if me else 0, dtype=torch.uint8)
            outs = output_tensors[0] if me else []
            if me and len(outs) != self.size():
                raise ValueError(f"gorun: gather: {len(outs)} outputs for {self.size()} ranks")

            def finish():
                k = send.numel()
                for i, o in enumerate(outs):
                    _unbytes(o, recv[i * k:(i + 1) * k])
            pend = _Pending(output_tensors, finish)
            pend.add(self.comm, _core.GATHER, _core.UINT8, 0, root, 0, send, recv, timeout=self._t(opts))
            return pend.work()
        return self._run(build)

    @_routed
    def scatter(self, output_tensors, input_tensors, opts):
        root = self._peer(opts.rootRank)

        def build():
            out = output_tensors[0]
            _check(out)
            me = self.rank() == opts.rootRank
            if me:
                ins = input_tensors[0]
                if len(ins) != self.size():
                    raise ValueError(f"gorun: scatter: {len(ins)} inputs for {self.size()} ranks")
                send = torch.cat([_bytes(t) for t in ins])
            else:
                send = torch.empty(0, dtype=torch.uint8)
            recv = _bytes(out)
            pend = _Pending(output_tensors, _copy_back(out, recv))
            pend.add(self.comm, _core.SCATTER, _core.UINT8, 0, root, 0, send, recv, timeout=self._t(opts))
            return pend.work()
        return self._run(build)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier that names the ranks that did not reach it in time, as
        Gloo's does: rank 0 waits for each other rank in turn within the
        timeout (the group's if None) and raises naming the first that did
        not come ("Rank 2 failed to pass monitoredBarrier in 100 ms"), or
        every one with wait_all_ranks; then it releases the others, which
        raise if rank 0 does not. It runs on point-to-point messages of
        a tag of its own (MONITOR_TAG), so a rank that never comes breaks
        nothing: the group stays usable."""
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if secs is None:
            secs = self._default_timeout if self._default_timeout is not None else 1800.0
        me, n = self.rank(), self.size()
        if n == 1:
            return
        tok = torch.zeros(1, dtype=torch.uint8)
        if me != 0:
            try:
                self._p2p(_core.SEND, 0, tok, secs)
                self._p2p(_core.RECV, 0, tok, secs)
            except GorunError as e:
                raise RuntimeError(f"Rank {me} successfully reached monitoredBarrier, but received errors while "
                                   f"waiting for send/recv from rank 0 (gorun: {e}). Please check rank 0's error "
                                   "for the faulty rank.") from e
            return
        ms = int(secs * 1000)
        if secs <= 0:
            raise RuntimeError(f"Rank 0 timed out in monitoredBarrier after {ms} ms")
        deadline = time.monotonic() + secs
        failed = []
        for r in range(1, n):
            try:
                self._p2p(_core.RECV, r, tok, max(deadline - time.monotonic(), 0.001))
            except GorunError as e:
                if not wait_all_ranks:
                    raise RuntimeError(f"Rank {r} failed to pass monitoredBarrier in {ms} ms (gorun: {e})") from e
                failed.append(r)
        if failed:
            raise RuntimeError(f"Ranks {', '.join(map(str, failed))} failed to pass monitoredBarrier in {ms} ms")
        for r in range(1, n):
            self._p2p(_core.SEND, r, tok, secs)

    def _p2p(self, kind, peer, t, timeout):
        """A blocking send or receive of t (uint8) on MONITOR_TAG."""
        self._blocking(kind, t if kind == _core.SEND else None, t if kind == _core.RECV else None,
                       root=peer, tag=MONITOR_TAG, timeout=timeout)

    def _blocking(self, kind, send, recv, root=0, tag=0, timeout=None):
        """Run one operation on bytes (uint8 tensors, contiguous) to its end."""
        with self._lock:
            pend = _Pending([])
            pend.add(self.comm, kind, _core.UINT8, 0, root, tag, send, recv, timeout=timeout)
            w = pend.work()
        w.wait()

    def _sparse_allreduce(self, t, op, timeout):
        """A SUM all-reduce of a sparse COO tensor, as Gloo's: every rank's
        indices and values are gathered and summed, and t becomes the
        (coalesced) sum. Its cost grows with every rank's nonzeros."""
        if _op_name(op) != "SUM":
            raise ValueError(f"gorun: sparse tensors are all-reduced with SUM only, not {_op_name(op)}")
        if t.layout != torch.sparse_coo:
            raise ValueError(f"gorun: sparse tensors of layout {t.layout} are not supported (only sparse_coo)")
        c = t.coalesce()
        idx, val = c.indices().contiguous(), c.values().contiguous()
        n, k = self.size(), idx.shape[1]
        counts = torch.zeros(n, dtype=torch.int64)
        self._blocking(_core.ALLGATHER, _bytes(torch.tensor([k], dtype=torch.int64)), _bytes(counts), timeout=timeout)
        m = int(counts.max())
        pidx = torch.zeros(idx.shape[0], m, dtype=idx.dtype)
        pidx[:, :k] = idx
        pval = torch.zeros((m,) + tuple(val.shape[1:]), dtype=val.dtype)
        pval[:k] = val
        gidx = torch.empty((n,) + tuple(pidx.shape), dtype=idx.dtype)
        gval = torch.empty((n,) + tuple(pval.shape), dtype=val.dtype)
        self._blocking(_core.ALLGATHER, _bytes(pidx), _bytes(gidx), timeout=timeout)
        self._blocking(_core.ALLGATHER, _bytes(pval), _bytes(gval), timeout=timeout)
        total = None
        for r in range(n):
            part = torch.sparse_coo_tensor(gidx[r][:, :counts[r]], gval[r][:counts[r]], t.shape)
            total = part if total is None else total + part
        t.copy_(total.coalesce())

    def barrier(self, opts=None):
        def build():
            pend = _Pending([])
            pend.add(self.comm, _core.BARRIER, _core.INT64, 0, 0, 0, None, None, timeout=self._t(opts))
            return pend.work()
        return self._run(build)

    @_routed
    def send(self, tensors, dst, tag):
        peer = self._place(dst)
        _user_tag(tag)

        def build():
            t = tensors[0]
            _check(t)
            pend = _Pending(tensors)
            pend.add(self.comm, _core.SEND, _core.UINT8, 0, peer, tag, _bytes(t), None, timeout=self._default_timeout)
            return pend.work()
        return self._run(build)

    @_routed
    def recv(self, tensors, src, tag):
        peer = self._place(src)
        _user_tag(tag)

        def build():
            t = tensors[0]
            _check(t)
            recv = _bytes(t)
            pend = _Pending(tensors, _copy_back(t, recv))
            pend.add(self.comm, _core.RECV, _core.UINT8, 0, peer, tag, None, recv, timeout=self._default_timeout)
            return pend.work()
        return self._run(build)

    def recv_anysource(self, tensors, tag):
        _user_tag(tag)

        def build():
            t = tensors[0]
            _check(t)
            recv = _bytes(t)
            src = (ctypes.c_int64 * 1)(-1)
            pend = _Pending(tensors, _copy_back(t, recv))
            pend.add(self.comm, _core.RECV_ANY, _core.UINT8, 0, 0, tag, None, recv, counts=src,
                     timeout=self._default_timeout)
            w = pend.work()
            w._source = src
            return w
        return self._run(build)


def _user_tag(tag):
    if tag == MONITOR_TAG:
        raise ValueError(f"gorun: tag {MONITOR_TAG} is monitored_barrier's own")


def _group_of(comm, timeout=None):
    """The process group over comm's current view (the job's comm) or comm itself (a group)."""
    if comm.parent is None and comm.elastic:
        ranks = comm.view()
        return ProcessGroupGorun(comm, ranks.index(comm.rank), len(ranks), ranks, timeout=timeout)
    return ProcessGroupGorun(comm, comm.rank if comm.parent is not None else comm.index, comm.size,
                             timeout=timeout)


def _create(opts, pg_options=None):
    """torch.distributed's creator for the "gorun" backend (extended API)."""
    timeout = opts.timeout.total_seconds() if isinstance(opts.timeout, timedelta) else 600.0
    env = None
    if not _core.joined() and "GORUN_RANK" not in os.environ and not opts.global_ranks_in_group:
        # Not started by gorun (torchrun, mp.spawn, srun, an operator):
        # meet the other ranks in torch's store, as Gloo does.
        env = _rendezvous.store_env(opts.store, opts.group_rank, opts.group_size, timeout)
    w = _core.world(timeout, env)
    ranks = list(opts.global_ranks_in_group)
    if not ranks:  # the default group
        pg = _group_of(w, timeout)
        if opts.group_size != pg.size() or opts.group_rank != pg.rank():
            raise ValueError(f"gorun: init_process_group(rank={opts.group_rank}, world_size={opts.group_size}) "
                             f"does not match gorun's job, where this is rank {pg.rank()} of {pg.size()}: "
                             "leave rank and world_size to gorun")
        return pg
    # new_group: only its members get here; they make the group alike.
    default = dist.distributed_c10d._get_default_group()
    base = default.comm if isinstance(default, ProcessGroupGorun) else w
    child = base.create_group(ranks, _core.group_tag(opts.group_id), timeout)
    return ProcessGroupGorun(child, child.rank, child.size, timeout=timeout)


# torch 2.x asks which devices a backend serves (and warns when it is not
# told): the CPU's. init_process_group("cpu:gorun,cuda:nccl") then gives
# CUDA tensors to NCCL through the group (_backend_for).
if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
    dist.Backend.register_backend("gorun", _create, extended_api=True, devices=["cpu"])
else:
    dist.Backend.register_backend("gorun", _create, extended_api=True)


# The point-to-point tag of monitored_barrier's messages; send and recv
# refuse it.
MONITOR_TAG = (1 << 31) - 1

_torch_monitored_barrier = dist.monitored_barrier


def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, which torch implements for Gloo
    alone: on a gorun group it runs ProcessGroupGorun.monitored_barrier."""
    c10d = dist.distributed_c10d
    if group is not None and c10d._rank_not_in_group(group):
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)  # torch's warning, nothing else
    pg = c10d._get_default_group() if group is None or group is c10d.GroupMember.WORLD else group
    if not isinstance(pg, ProcessGroupGorun):
        return _torch_monitored_barrier(c10d.GroupMember.WORLD if group is None else group, timeout, wait_all_ranks)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


dist.monitored_barrier = dist.distributed_c10d.monitored_barrier = _monitored_barrier


class _Store(dist.Store):
    """The store init() gives torch: it answers torch's start-up barrier
    with a gorun barrier, so that no rank needs a TCP store on rank 0."""

    def __init__(self, comm, size, timeout):
        super().__init__()
        self.comm = comm
        self.size = size
        self.op_timeout = timeout
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value

    def get(self, key):
        if key not in self.kv:
            raise KeyError(f"gorun: the store holds only this rank's keys; no {key!r}")
        return self.kv[key]

    def add(self, key, value):
        if "store_based_barrier" in key and value == 1:
            res = []
            op = self.comm.start(_core.BARRIER, _core.INT64, 0, 0, 0, None, 0, None, 0, None, self.op_timeout,
                                 lambda code, msg: res.append((code, msg)))
            self.comm.wait(op)
            while not res:  # the collecting thread is running the callback
                time.sleep(0.001)
            # A view change here (a restarted rank's first collective
            # returns one) is the program's to handle at its next
            # operation, after which it resyncs; anything else fails init.
            if res[0][0] not in (0, ViewChanged.code):
                raise _core.error(*res[0])
            self.kv[key] = self.size  # what torch compares with: the group's size
            return self.size
        self.kv[key] = int(self.kv.get(key, 0)) + value
        return self.kv[key]

    def wait(self, keys, timeout=None):
        missing = [k for k in keys if k not in self.kv]
        if missing:
            raise KeyError(f"gorun: the store holds only this rank's keys; no {missing}")

    def num_keys(self):
        return len(self.kv)

    def delete_key(self, key):
        return self.kv.pop(key, None) is not None

    def set_timeout(self, timeout):
        pass


def init(timeout=timedelta(minutes=30), exact=None):
    """init_process_group("gorun") on gorun's job, without the TCP store
    that init_process_group's default (env://) starts on rank 0. Elastic
    jobs need it: rank 0 may be the rank that is lost.

    exact=True makes float32 and float64 sums (all_reduce, reduce_scatter,
    DDP's buckets; SUM and AVG) the same bits whatever gorun's algorithm,
    strategy and rank order (as gorun --exact does; None keeps what the
    job was started with). Every rank must pass the same."""
    w = _core.world(timeout.total_seconds())
    if exact is not None:
        w.exact = exact
    pg = _group_of(w)
    dist.init_process_group("gorun", store=_Store(w, pg.size(), timeout.total_seconds()), rank=pg.rank(),
                            world_size=pg.size(), timeout=timeout)


def is_view_changed(err):
    """Whether err (a ViewChanged, or the RuntimeError that DDP makes of
    one) means that an elastic job's membership changed: resync and go on."""
    return isinstance(err, ViewChanged) or "the job's membership changed" in str(err)


def resync(model=None, optimizer=None, step=0, extra=None, timeout=600.0):
    """After ViewChanged on an elastic job: every rank of the new view takes
    the model's and optimizer's state, the step and extra (anything torch
    can save) from the view's first rank that holds them, and the default
    process group is made again over the new view. Returns (step, extra).
    Wrap the model in DDP again afterwards.

    A restarted rank (gorun --max-restarts) calls it before its first step;
    it holds no state until then.
    """
    w = _core.world()
    state = {"step": step, "extra": extra}
    if model is not None:
        state["model"] = model.state_dict()
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    got = torch.load(io.BytesIO(w.resync(buf.getvalue(), timeout)))
    if model is not None:
        model.load_state_dict(got["model"])
    if optimizer is not None:
        optimizer.load_state_dict(got["optimizer"])
    if dist.is_initialized():
        dist.destroy_process_group()
    init(timedelta(seconds=timeout))
    return got["step"], got["extra"]


def _at_exit():
    # Destroy torch's groups while the interpreter is whole (a Python
    # process group torn down at interpreter exit can abort the process),
    # then leave the job.
    try:
        if dist.is_initialized() and isinstance(dist.distributed_c10d._get_default_group(), ProcessGroupGorun):
            dist.destroy_process_group()
    except Exception:
        pass
    if _core._world is not None:
        _core._world.close()


atexit.register(_at_exit)
