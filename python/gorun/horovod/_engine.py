"""The background thread that runs gorun.horovod's collectives.

Every collective is a request. Requests go into one queue, and one thread
per process (the engine) runs them. For each step the members of the first
pending request's process set all-gather a fixed-size window: the
descriptors (WINDOW x DESC int64) of their first pending requests on that
set: what each operation is, its reduction, root, data types, shapes and
name. From the windows every rank computes the same choice (choose()):
the first request that every member has, named ones matched by name in any
order (as Horovod's coordinator matches them), unnamed ones in the order
issued. Ranks that disagree on the chosen request (its data type, shape,
root...) all fail it with the same message, naming the ranks, and the
communicator stays usable (a collective whose lengths disagree would break
it). When they agree, the data moves in one gorun collective per data
type, and the request's handle completes.
"""

import os
import queue
import re
import threading
import time
import zlib

import torch

from .. import _core

# Element types gorun reduces natively, and wider types for those it does not.
NATIVE = {
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64, torch.int32: _core.INT32,
    torch.int64: _core.INT64, torch.int8: _core.INT8, torch.uint8: _core.UINT8,
}
WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.int16: torch.int32,
        torch.bool: torch.int32}

# Data types in descriptors (Horovod's CPU types, and bool).
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64, torch.bfloat16, torch.bool]
DTYPE_CODE = {t: i + 1 for i, t in enumerate(DTYPES)}

# Request kinds.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN, ADD_SET, REMOVE_SET = range(1, 10)
KIND_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", BROADCAST: "broadcast", ALLTOALL: "alltoall",
              REDUCESCATTER: "reducescatter", BARRIER: "barrier", JOIN: "join", ADD_SET: "add_process_set",
              REMOVE_SET: "remove_process_set"}

# Reductions (Horovod's ReduceOp values).
AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = 0, 1, 2, 3, 4, 5
OP_NAMES = {AVERAGE: "Average", SUM: "Sum", ADASUM: "Adasum", MIN: "Min", MAX: "Max", PRODUCT: "Product"}
CORE_OP = {AVERAGE: _core.SUM, SUM: _core.SUM, MIN: _core.MIN, MAX: _core.MAX, PRODUCT: _core.PROD}

# Descriptor layout.
DESC = 32
MAGIC = 0x67687664  # "ghvd"
(D_MAGIC, D_KIND, D_OP, D_ROOT, D_N, D_DTYPE, D_NDIM, D_SIG, D_NAME, D_JOINSEQ, D_SET) = range(11)
D_NUMEL = 11  # 10 slots: elements per data type (allreduce), for ranks in join()
D_SHAPE = 21  # 8 slots: the first tensor's shape
MAX_SHAPE = 8


def timeout():
    """Seconds any one collective may take (GORUN_HVD_TIMEOUT, default 1800):
    past it the operation fails rather than hang."""
    try:
        return float(os.environ.get("GORUN_HVD_TIMEOUT", "1800"))
    except ValueError:
        return 1800.0


class HorovodInternalError(RuntimeError):
    """A collective failed: a rank was lost (the message names it), the
    ranks disagreed on the operation, or the job's communication broke."""


class Handle:
    """The result of an asynchronous collective, filled in by the engine."""

    __slots__ = ("event", "value", "error", "name", "keep")

    def __init__(self, name=None, keep=None):
        self.event = threading.Event()
        self.value = None
        self.error = None
        self.name = name
        self.keep = keep  # inputs held until the operation ends

    def done(self):
        return self.event.is_set()

    def wait(self):
        while not self.event.wait(1.0):
            pass
        if self.error is not None:
            raise self.error
        return self.value


class Request:
    """One collective: kind, process set, tensors and the rest; run() moves the data."""

    def __init__(self, kind, pset, tensors=(), op=SUM, root=0, name=None, run=None, joinable=False):
        self.kind = kind
        self.pset = pset
        self.tensors = list(tensors)
        self.op = op
        self.root = root
        self.name = name
        self.run = run  # run(engine, comm, descs) -> value, after the descriptors agree
        self.joinable = joinable
        self.handle = Handle(name, keep=self.tensors)
        self.desc = self.descriptor(ignore_dim0=kind in (ALLGATHER, ALLTOALL))

    def descriptor(self, ignore_dim0=False):
        d = [0] * DESC
        d[D_MAGIC], d[D_KIND], d[D_OP], d[D_ROOT] = MAGIC, self.kind, self.op, self.root
        d[D_N] = len(self.tensors)
        d[D_SET] = self.pset.process_set_id
        if self.name:
            d[D_NAME] = zlib.crc32(self.name.encode()) & 0x7FFFFFFF or 1
        sig = []
        for t in self.tensors:
            shape = list(t.shape)[1:] if ignore_dim0 else list(t.shape)
            sig.append((DTYPE_CODE.get(t.dtype, 0), t.dim(), tuple(shape)))
            if t.dtype in DTYPE_CODE:
                d[D_NUMEL + DTYPE_CODE[t.dtype] - 1] += t.numel()
        d[D_SIG] = zlib.crc32(repr(sig).encode()) & 0x7FFFFFFF
        if self.tensors:
            t = self.tensors[0]
            d[D_DTYPE], d[D_NDIM] = DTYPE_CODE.get(t.dtype, 0), t.dim()
            for i, s in enumerate(list(t.shape)[:MAX_SHAPE]):
                d[D_SHAPE + i] = s
        return d


def _shape(d):
    return list(d[D_SHAPE:D_SHAPE + min(d[D_NDIM], MAX_SHAPE)]) + (["..."] if d[D_NDIM] > MAX_SHAPE else [])


def _dtype_name(code):
    return str(DTYPES[code - 1]).replace("torch.", "") if 0 < code <= len(DTYPES) else "?"


def disagreement(descs, ranks, ignore_dim0=False):
    """The message that says how the ranks' descriptors disagree, or None."""
    a = descs[0]
    for i, b in enumerate(descs[1:], 1):
        ra, rb = ranks[0], ranks[i]
        if b[D_MAGIC] != MAGIC:
            return f"Mismatched operations: rank {rb} is not running gorun.horovod's collectives"
        if b[D_KIND] != a[D_KIND]:
            return (f"Mismatched collective operations: rank {ra} did an {KIND_NAMES.get(a[D_KIND], '?')}, but rank "
                    f"{rb} did an {KIND_NAMES.get(b[D_KIND], '?')} (gorun runs collectives in the order each rank "
                    "issues them: every rank must issue them in one order)")
        if b[D_SET] != a[D_SET]:
            return f"Mismatched process sets: rank {ra} used process set {a[D_SET]}, but rank {rb} used {b[D_SET]}"
        if b[D_NAME] and a[D_NAME] and b[D_NAME] != a[D_NAME]:
            return (f"Mismatched names: ranks {ra} and {rb} gave different names to their next "
                    f"{KIND_NAMES.get(a[D_KIND], '?')} (gorun runs collectives in the order each rank issues them, "
                    "not by name)")
        if b[D_OP] != a[D_OP]:
            return (f"Mismatched reduction operations: rank {ra} asked for {OP_NAMES.get(a[D_OP], a[D_OP])}, but "
                    f"rank {rb} asked for {OP_NAMES.get(b[D_OP], b[D_OP])}")
        if b[D_N] != a[D_N]:
            return (f"Mismatched number of tensors: rank {ra} gave {a[D_N]}, but rank {rb} gave {b[D_N]} to a "
                    f"grouped {KIND_NAMES.get(a[D_KIND], '?')}")
        if b[D_DTYPE] != a[D_DTYPE]:
            return (f"Mismatched data types: One rank had type {_dtype_name(a[D_DTYPE])}, but another rank had type "
                    f"{_dtype_name(b[D_DTYPE])} (ranks {ra} and {rb})")
        if b[D_ROOT] != a[D_ROOT]:
            return (f"Mismatched {KIND_NAMES.get(a[D_KIND], '?')} root ranks: One rank specified root rank "
                    f"{a[D_ROOT]}, but another rank specified root rank {b[D_ROOT]} (ranks {ra} and {rb})")
        if b[D_NDIM] != a[D_NDIM] or b[D_SIG] != a[D_SIG]:
            what = "shapes (beyond the first dimension)" if ignore_dim0 else "shapes"
            return (f"Mismatched {KIND_NAMES.get(a[D_KIND], '?')} tensor {what}: One rank sent a tensor of shape "
                    f"{_shape(a)}, but another rank sent a tensor of shape {_shape(b)} (ranks {ra} and {rb}; "
                    "in a grouped call, any of its tensors)")
    return None


def lost(err):
    """The HorovodInternalError for a gorun error; a lost rank leads its message."""
    m = re.search(r"rank (\d+) lost", str(err))
    head = f"rank {m.group(1)} was lost: " if m else ""
    e = HorovodInternalError(f"gorun.horovod: {head}{err}")
    e.__cause__ = err
    return e


# Kinds that gorun runs on the calling thread (Comm.run), for operations of
# at most _core.SMALL_BYTES: no hand-off to gorun's threads and back.
_INLINE = {_core.ALLREDUCE, _core.BROADCAST, _core.REDUCE, _core.ALLGATHER, _core.BARRIER}


def _nbytes(t):
    return t.numel() * t.element_size() if t is not None else 0


def run_op(comm, kind, dtype, op, root, send, recv, counts=None):
    """Run one gorun collective on tensors (contiguous, flat) and wait for
    it; raises HorovodInternalError when it fails. A small one runs on this
    thread (as gorun.torch's do), except on an elastic job, whose blocking
    calls mean "the program saw the view change"."""
    if kind in _INLINE and counts is None and max(_nbytes(send), _nbytes(recv)) <= _core.SMALL_BYTES \
            and not comm.elastic:
        try:
            comm.run(kind, dtype, op, root,
                     send.data_ptr() if send is not None and send.numel() else None,
                     send.numel() if send is not None else 0,
                     recv.data_ptr() if recv is not None and recv.numel() else None,
                     recv.numel() if recv is not None else 0, timeout())
        except _core.GorunError as e:
            raise lost(e) from e
        return
    res = []
    done = threading.Event()

    def cb(code, msg):
        res.append((code, msg))
        done.set()
    op_id = comm.start(kind, dtype, op, root, 0,
                       send.data_ptr() if send is not None and send.numel() else None,
                       send.numel() if send is not None else 0,
                       recv.data_ptr() if recv is not None and recv.numel() else None,
                       recv.numel() if recv is not None else 0, counts, timeout(), cb)
    comm.wait(op_id)
    while not done.wait(1.0):  # the collecting thread is running the callback
        pass
    code, msg = res[0]
    if code != 0:
        raise lost(_core.error(code, msg))


def as_bytes(t):
    """t's elements as a flat uint8 tensor (t must be contiguous)."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return t.reshape(-1).view(torch.uint8)


def allgather_int64(comm, values, n):
    """Every member's values (int64 lists of one length), in member order."""
    send = torch.tensor(values, dtype=torch.int64)
    recv = torch.empty(len(values) * n, dtype=torch.int64)
    run_op(comm, _core.ALLGATHER, _core.INT64, 0, 0, send, recv)
    return recv.view(n, len(values)).tolist()


WINDOW = 4  # pending requests each rank shows in one exchange


def stall_limit():
    """Seconds ranks may wait for a named collective that some rank has not
    issued before it fails (GORUN_HVD_STALL_TIMEOUT, default 60, at most
    the collective timeout)."""
    try:
        v = float(os.environ.get("GORUN_HVD_STALL_TIMEOUT", "60"))
    except ValueError:
        v = 60.0
    return min(v, timeout())


def _key(d):
    return (d[D_KIND], d[D_NAME])


def choose(windows):
    """What every rank runs next, from every member's window (their first
    pending requests' descriptors, in order; a rank in join() shows JOIN
    alone). The same on every rank: ("join", last rank) when every rank has
    joined; ("run", [index in each window or None for joined ranks]) for
    the request they all have (named ones match by name, in any order;
    unnamed ones in the order issued); ("wait", None) when a named request
    is not yet issued everywhere; ("mismatch", None) when the ranks' next
    unnamed requests differ."""
    joined = [i for i, w in enumerate(windows) if w[0][D_KIND] == JOIN]
    active = [i for i in range(len(windows)) if i not in joined]
    if not active:
        return "join", max(range(len(windows)), key=lambda i: (windows[i][0][D_JOINSEQ], i))
    first = windows[active[0]]

    def first_unnamed(w):
        return next((j for j, d in enumerate(w) if not d[D_NAME]), None)
    for j, d in enumerate(first):
        if d[D_NAME]:
            idx = [next((k for k, e in enumerate(windows[i]) if _key(e) == _key(d)), None) for i in active]
        else:
            if j != first_unnamed(first):
                continue
            idx = [first_unnamed(windows[i]) for i in active]
            idx = [k if k is not None and windows[i][k][D_KIND] == d[D_KIND] else None
                   for i, k in zip(active, idx)]
        if all(k is not None for k in idx):
            at = dict(zip(active, idx))
            return "run", [at.get(i) for i in range(len(windows))]
    if all(not windows[i][0][D_NAME] for i in active):
        return "mismatch", None
    return "wait", None


class Engine:
    """The queue of requests and the thread that runs it."""

    def __init__(self, world_pset):
        self.world = world_pset
        self.q = queue.SimpleQueue()
        self.pending = []  # taken from the queue, not yet run, in the order issued
        self.exchanges = 0  # exchanges on the global set (the same count on every rank)
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="gorun-horovod", daemon=True)
        self.broken = None  # the error that broke the job's communication
        self.thread.start()

    def submit(self, req):
        if self.broken is not None:
            raise HorovodInternalError(f"gorun.horovod: an earlier collective failed: {self.broken}")
        self.q.put(req)
        return req.handle

    def stop(self):
        self.q.put(None)
        self.thread.join(timeout=timeout())

    def _take(self, block, wait=None):
        """Move queued requests to pending (waiting for one if block)."""
        try:
            while True:
                req = self.q.get(block=block, timeout=wait) if block else self.q.get_nowait()
                block = False
                if req is None:
                    self.stopping = True
                    return
                self.pending.append(req)
        except queue.Empty:
            return

    def _loop(self):
        stalled = None
        while True:
            if not self.pending:
                if self.stopping:
                    return
                self._take(True)
                continue
            self._take(False)
            try:
                progressed = self._step()
            except BaseException as e:  # the job's communication broke: every pending request fails
                if isinstance(e, HorovodInternalError) and isinstance(e.__cause__, _core.GorunError):
                    self.broken = e
                for req in self.pending:
                    self._finish(req, None, e)
                self.pending = []
                continue
            if progressed:
                stalled = None
                continue
            now = time.monotonic()
            stalled = stalled or now
            if now - stalled > stall_limit():
                e = HorovodInternalError(
                    f"gorun.horovod: no collective matched for {stall_limit():.0f} s: this rank's next is "
                    f"{self._what(self.pending[0])}; the other ranks issued other names (see "
                    "GORUN_HVD_STALL_TIMEOUT)")
                self._fail_head(e)
                stalled = None
                continue
            self._take(True, 0.005)  # until something new is issued, or briefly

    @staticmethod
    def _what(req):
        return f"{KIND_NAMES.get(req.kind, '?')}" + (f" {req.name!r}" if req.name else "")

    def _fail_head(self, e):
        req = self.pending.pop(0)
        self._finish(req, None, e)

    @staticmethod
    def _finish(req, value, error):
        h = req.handle
        h.value, h.error, h.keep = value, error, None
        h.event.set()

    def exchange(self, pset, vec):
        """Every member's vector."""
        if pset.process_set_id == 0:
            self.exchanges += 1
        return allgather_int64(pset.comm, vec, pset.size())

    def _step(self):
        """One exchange on the first pending request's process set, and what
        it decides. Returns whether a request ended."""
        head = self.pending[0]
        pset = head.pset
        if head.kind == JOIN:
            window = [head]
            if head.desc[D_JOINSEQ] == 0:
                head.desc[D_JOINSEQ] = self.exchanges + 1
        else:
            window = [r for r in self.pending if r.pset is pset and r.kind != JOIN][:WINDOW]
        vec = []
        for r in window:
            vec += r.desc
        vec += [0] * (DESC * WINDOW - len(vec))
        rows = self.exchange(pset, vec)
        windows = [[row[k * DESC:(k + 1) * DESC] for k in range(WINDOW) if row[k * DESC + D_KIND]] for row in rows]
        for i, w in enumerate(windows):
            if not w or w[0][D_MAGIC] != MAGIC:
                raise HorovodInternalError(f"gorun.horovod: rank {pset.ranks[i]} is not running gorun.horovod's "
                                           "collectives in step with this one")
        what, arg = choose(windows)
        me = pset.rank()
        if what == "join":
            self.pending.remove(head)
            self._finish(head, pset.ranks[arg], None)
            return True
        if what == "wait":
            return False
        active = [i for i, w in enumerate(windows) if w[0][D_KIND] != JOIN]
        if what == "mismatch":
            msg = disagreement([windows[i][0] for i in active], [pset.ranks[i] for i in active])
            err = HorovodInternalError(f"gorun.horovod: {msg}")
            if head.kind != JOIN:
                self._fail_head(err)
            return True
        descs = [windows[i][arg[i]] for i in active]
        kind = descs[0][D_KIND]
        joined = [i for i in range(len(windows)) if i not in active]
        req = None if arg[me] is None else window[arg[me]]
        if req is None:  # this rank is in join(): take part with neutral values, or let the others fail
            if kind == ALLREDUCE and not disagreement(descs, [pset.ranks[i] for i in active]):
                self._neutral_allreduce(pset, descs[0])
            return True
        self.pending.remove(req)
        try:
            if joined and not req.joinable:
                raise HorovodInternalError(
                    f"gorun.horovod: rank {pset.ranks[joined[0]]} has called join(): while a rank is in join(), "
                    f"only allreduce runs (not {KIND_NAMES[req.kind]})")
            msg = disagreement(descs, [pset.ranks[i] for i in active], ignore_dim0=kind in (ALLGATHER, ALLTOALL))
            if msg:
                raise HorovodInternalError(f"gorun.horovod: {msg}")
            value = req.run(self, pset.comm, descs) if req.run is not None else None
        except HorovodInternalError as e:
            if isinstance(e.__cause__, _core.GorunError):
                self.pending.insert(0, req)
                raise
            self._finish(req, None, e)
            return True
        except BaseException as e:
            self._finish(req, None, e)
            return True
        self._finish(req, value, None)
        return True

    def _neutral_allreduce(self, pset, a):
        """A joined rank's part in the others' allreduce: neutral values of
        each data type, in the order the others move them."""
        for code in range(1, len(DTYPES) + 1):
            n = a[D_NUMEL + code - 1]
            if n:
                dtype = DTYPES[code - 1]
                wide = WIDE.get(dtype, dtype)
                buf = torch.full((n,), neutral(a[D_OP], wide), dtype=wide)
                run_op(pset.comm, _core.ALLREDUCE, NATIVE[wide], CORE_OP[a[D_OP]], 0, buf, None)


def neutral(op, dtype):
    """The element that leaves a reduction unchanged (for ranks in join())."""
    if op == PRODUCT:
        return 1
    if op in (MIN, MAX):
        info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
        return info.max if op == MIN else info.min
    return 0

