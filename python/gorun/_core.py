"""ctypes binding of libgorun.so, gorun's collective package as a C library.

Nothing here needs PyTorch: it moves memory given as addresses and element
counts. Operations are started and complete on Go's goroutines; one daemon
thread per process collects finished operations (gorun_next) and runs their
callbacks. ctypes releases the interpreter's lock around every call into the
library, so Python threads run while bytes move.
"""

import ctypes
import logging
import os
import re
import queue
import threading
import zlib

__all__ = [
    "GorunError", "PeerLost", "ViewChanged", "Mismatch", "Closed", "Aborted",
    "Timeout", "Comm", "world",
]

# Element types (package reduce's codes) and ops (reduce.Op).
FLOAT32, FLOAT64, INT32, INT64, INT8, UINT8 = 1, 2, 3, 4, 5, 6
SUM, AVG, MIN, MAX, PROD = 1, 2, 3, 4, 5

# Operation kinds (capi/main.go).
(ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, ALLTOALLV,
 GATHER, SCATTER, BARRIER, SEND, RECV, RECV_ANY) = range(1, 14)

# Facts gorun_info reports.
_RANK, _SIZE, _JOB_SIZE, _RESTARTS, _EPOCH, _INDEX, _ELASTIC, _HUB, _EXACT = range(9)

# The size up to which gorun does an all-reduce in one exchange
# (collective.Config.SmallBytes' default): operations up to it cost less
# run on the calling thread (Comm.run) than handed to gorun's threads.
SMALL_BYTES = 32 << 10

# The largest group tag gorun accepts (collective.MaxGroupTag).
MAX_GROUP_TAG = (1 << 30) - 1

_ERRLEN = 4096

# The package reports what it cannot raise (a failed callback on its own
# threads) here, never on stdout or stderr itself.
_log = logging.getLogger("gorun")


class GorunError(RuntimeError):
    """A gorun operation failed; ``code`` says how (see the subclasses)."""

    code = 7


class PeerLost(GorunError):
    """A peer's process died or stopped answering; the message names it."""

    code = 1


class ViewChanged(GorunError):
    """An elastic job's membership changed: resync, then go on (gorun.torch.resync)."""

    code = 2


class Mismatch(GorunError):
    """Ranks disagree on an operation (its length, type or root); the message names them."""

    code = 3


class Closed(GorunError):
    """The communicator was closed."""

    code = 4


class Aborted(GorunError):
    """A peer gave the operation up; its reason is in the message."""

    code = 5


class Timeout(GorunError, TimeoutError):
    """The operation's timeout ended it (the communicator is broken afterwards).

    Its message begins "the operation's timeout ended it", as torch's own
    backends say "Timed out" or "timeout" (torch's tests match on that).
    """

    code = 6

    def __init__(self, msg=""):
        prefix = "the operation's timeout ended it: "
        super().__init__(msg if msg.startswith(prefix) else prefix + msg)


_BY_CODE = {c.code: c for c in (GorunError, PeerLost, ViewChanged, Mismatch, Closed, Aborted, Timeout)}


def error(code, msg):
    """The exception for a result code and message."""
    return _BY_CODE.get(code, GorunError)(msg)


def library_path():
    """Where libgorun.so is loaded from: GORUN_LIBRARY, or beside this package's files."""
    return os.environ.get("GORUN_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgorun.so")


def _load():
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"gorun: {path} is missing: build it with `make python` in gorun's repository "
            "(or point GORUN_LIBRARY at a libgorun.so)")
    lib = ctypes.CDLL(path)
    i64, i32, p, s = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    sigs = {
        "gorun_join": (i64, [s, i32, i64, s, i32]),
        "gorun_info": (i64, [i64, i32]),
        "gorun_view": (i32, [i64, ctypes.POINTER(i64), i32]),
        "gorun_set_exact": (i32, [i64, i32]),
        "gorun_create_group": (i64, [i64, ctypes.POINTER(i64), i32, i64, i64, s, i32]),
        "gorun_close": (i32, [i64]),
        "gorun_start": (i64, [i64, i32, i32, i32, i32, i32, p, i64, p, i64, ctypes.POINTER(i64), i32, i64]),
        "gorun_run": (i32, [i64, i32, i32, i32, i32, p, i64, p, i64, i64, s, i32]),
        "gorun_next": (i64, [i64]),
        "gorun_wait": (i32, [i64, i64]),
        "gorun_result": (i32, [i64, s, i32]),
        "gorun_resync": (i32, [i64, p, i64, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(i64), i64, s, i32]),
        "gorun_free": (None, [p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


_lib = _load()


def function_address(name):
    """The address of libgorun.so's C function name, for native code (gorun.torch's fast path)."""
    return ctypes.cast(getattr(_lib, name), ctypes.c_void_p).value


def _errbuf():
    return ctypes.create_string_buffer(_ERRLEN)


_local = threading.local()


def _thread_errbuf():
    """This thread's error buffer, made once (for calls on the fast path)."""
    buf = getattr(_local, "errbuf", None)
    if buf is None:
        buf = _local.errbuf = _errbuf()
    return buf


class _Completions:
    """Runs each finished operation's callback once: in the thread that
    collects finished operations (gorun_next), or in a thread that waits
    for the operation itself (wait), whichever claims it first."""

    def __init__(self):
        self._lock = threading.Lock()
        self._callbacks = {}
        self._early = {}  # finished before their callback was registered
        self._claimed = set()  # completed by a waiter; gorun_next has yet to return them
        self._thread = None

    def register(self, op_id, callback):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gorun-completions", daemon=True)
                self._thread.start()
            early = self._early.pop(op_id, None)
            if early is None:
                self._callbacks[op_id] = callback
                return
        callback(*early)

    def wait(self, op_id):
        """Wait for op_id in this thread and run its callback here, unless
        the collecting thread has it already (then the caller waits on the
        operation's own future)."""
        while True:
            got = _lib.gorun_wait(op_id, 200)
            if got != 0:
                break
        with self._lock:
            cb = self._callbacks.pop(op_id, None)
            if cb is None:
                return
            if got == 1:  # gorun_next returns it too: skip it there
                self._claimed.add(op_id)
        cb(*_result(op_id))

    def _run(self):
        while True:
            op_id = _lib.gorun_next(500)
            if op_id <= 0:
                continue
            with self._lock:
                if op_id in self._claimed:
                    self._claimed.discard(op_id)
                    continue
                cb = self._callbacks.pop(op_id, None)
                if cb is None:  # under the lock, so that register() sees it
                    self._early[op_id] = _result(op_id)
                    continue
            res = _result(op_id)
            try:
                cb(*res)
            except BaseException:  # a callback must not end the thread
                _log.exception("gorun: a completion callback failed")


def _result(op_id):
    buf = _thread_errbuf()
    code = _lib.gorun_result(op_id, buf, _ERRLEN)
    return code, buf.value.decode(errors="replace")


_completions = _Completions()


def in_collector():
    """Whether this is the thread that collects finished operations: what
    runs here must not wait for another operation (its completion comes
    through this thread)."""
    return threading.current_thread() is _completions._thread


class _Completer:
    """Runs work off the collecting thread: a future's completion, with the
    then-callbacks torch runs inline in set_result, which may start another
    operation and wait for it (PyTorch's PowerSGD hook does). A worker is
    added whenever none is free, so waits nested in callbacks never starve
    each other; free workers wait for the next piece of work."""

    def __init__(self):
        self._q = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._free = 0

    def submit(self, fn):
        with self._lock:
            spawn = self._free == 0
            if not spawn:
                self._free -= 1  # that worker takes this piece (or another does, and it the next)
        self._q.put(fn)
        if spawn:
            threading.Thread(target=self._work, name="gorun-completer", daemon=True).start()

    def _work(self):
        while True:
            fn = self._q.get()
            try:
                fn()
            except BaseException:  # a completion must not end the worker
                _log.exception("gorun: a completion failed")
            with self._lock:
                self._free += 1


completer = _Completer()


class Comm:
    """A gorun communicator: the job's (world()) or a group made from it."""

    def __init__(self, handle, parent=None):
        self._h = handle
        self.parent = parent

    @property
    def handle(self):
        """The communicator's handle in libgorun.so's C ABI."""
        return self._h

    def _info(self, what):
        v = _lib.gorun_info(self._h, what)
        if v < 0:
            raise Closed(f"gorun: communicator {self._h} is closed")
        return v

    @property
    def exact(self):
        """Whether float32 and float64 sums are exact and order-independent
        (gorun --exact, or set here: every rank at the same point)."""
        return bool(self._info(_EXACT))

    @exact.setter
    def exact(self, on):
        if _lib.gorun_set_exact(self._h, 1 if on else 0) < 0:
            raise Closed(f"gorun: communicator {self._h} is closed")

    @property
    def rank(self):
        """The job's rank of this process (in a group: its rank there)."""
        return self._info(_RANK)

    @property
    def size(self):
        """Ranks in the current view (in a group: the group's size)."""
        return self._info(_SIZE)

    @property
    def job_size(self):
        return self._info(_JOB_SIZE)

    @property
    def restarts(self):
        """How many times gorun restarted this rank (gorun --max-restarts)."""
        return self._info(_RESTARTS)

    @property
    def epoch(self):
        return self._info(_EPOCH)

    @property
    def index(self):
        """This rank's place in the current view."""
        return self._info(_INDEX)

    @property
    def elastic(self):
        return self._info(_ELASTIC) == 1

    @property
    def hub(self):
        """True under the hub (ParamHub) strategy."""
        return self._info(_HUB) == 1

    def view(self):
        """The current view's job ranks, in order."""
        n = _lib.gorun_view(self._h, None, 0)
        while True:
            if n < 0:
                raise Closed(f"gorun: communicator {self._h} is closed")
            out = (ctypes.c_int64 * n)()
            m = _lib.gorun_view(self._h, out, n)
            if m == n:  # else the view changed between the two calls
                return list(out)
            n = m

    def create_group(self, ranks, tag, timeout=600.0):
        """The group of the given places in this communicator, made by its members only."""
        arr = (ctypes.c_int64 * len(ranks))(*ranks)
        buf = _errbuf()
        h = _lib.gorun_create_group(self._h, arr, len(ranks), tag, int(timeout * 1000), buf, _ERRLEN)
        if h < 0:
            raise _classify(buf.value.decode(errors="replace"))
        return Comm(h, parent=self)

    def start(self, kind, dtype, op, root, tag, send, nsend, recv, nrecv, counts, timeout, callback):
        """Start an operation on memory at the given addresses; callback(code, msg) runs when it is done.

        The caller keeps the memory alive and untouched until then. Returns
        the operation's id, for wait().
        """
        carr = None
        if isinstance(counts, ctypes.Array):  # an output slot (RECV_ANY's sender): the caller keeps it
            carr = counts
        elif counts:
            carr = (ctypes.c_int64 * len(counts))(*counts)
        op_id = _lib.gorun_start(self._h, kind, dtype, op, root, tag, send or None, nsend, recv or None, nrecv,
                                 carr, len(counts) if counts else 0, int(timeout * 1000) if timeout else 0)
        _completions.register(op_id, callback)
        return op_id

    def run(self, kind, dtype, op, root, send, nsend, recv, nrecv, timeout):
        """Run an all-reduce, broadcast, reduce, all-gather or barrier in
        this thread (the interpreter's lock released) and return when it is
        done; raises its error. For small operations, whose time a
        hand-off to another thread would dominate."""
        buf = _thread_errbuf()
        code = _lib.gorun_run(self._h, kind, dtype, op, root, send or None, nsend, recv or None, nrecv,
                              int(timeout * 1000) if timeout else 0, buf, _ERRLEN)
        if code != 0:
            raise error(code, buf.value.decode(errors="replace"))

    @staticmethod
    def wait(op_id):
        """Wait for a started operation in this thread; its callback has run when this returns,
        unless the collecting thread is running it."""
        _completions.wait(op_id)

    def resync(self, state, timeout=600.0):
        """Every rank gets the bytes of the view's first rank that holds the state (collective.ResyncBytes)."""
        src = ctypes.create_string_buffer(bytes(state), len(state)) if state else None
        out, outn = ctypes.c_void_p(), ctypes.c_int64()
        buf = _errbuf()
        code = _lib.gorun_resync(self._h, src, len(state) if state else 0, ctypes.byref(out), ctypes.byref(outn),
                                 int(timeout * 1000), buf, _ERRLEN)
        if code != 0:
            raise error(code, buf.value.decode(errors="replace"))
        try:
            return ctypes.string_at(out, outn.value)
        finally:
            _lib.gorun_free(out)

    def close(self):
        """Leave the job (the world) or release the group. Idempotent."""
        _lib.gorun_close(self._h)


def _classify(msg):
    for pat, cls in (("changed", ViewChanged), ("lost", PeerLost), ("disagree|mismatch", Mismatch),
                     ("closed", Closed), ("deadline", Timeout)):
        if re.search(pat, msg):
            return cls(msg)
    return GorunError(msg)


_world = None
_world_lock = threading.Lock()


def world(timeout=600.0, env=None):
    """The job's communicator, joined on first use: from the environment
    gorun's launcher set (as it is now: variables set from Python count),
    with env's variables over it (what a rendezvous of the caller's found,
    as gorun.torch's through a torch.distributed store)."""
    global _world
    with _world_lock:
        if _world is None:
            variables = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
            for k, v in (env or {}).items():
                variables[os.fsencode(k)] = os.fsencode(str(v))
            if b"GORUN_RANK" not in variables:
                raise GorunError("gorun: this process was not started by gorun (no GORUN_RANK): run it as "
                                 "`gorun -np N /usr/bin/python3 script.py`, or join through a store "
                                 "(torch.distributed.init_process_group(\"gorun\", init_method=...))")
            block = b"\0".join(k + b"=" + v for k, v in variables.items())
            buf = _errbuf()
            h = _lib.gorun_join(block, len(block), int(timeout * 1000), buf, _ERRLEN)
            if h < 0:
                raise GorunError(buf.value.decode(errors="replace"))
            _world = Comm(h)
        return _world


def joined():
    """Whether this process has joined its job (world() has returned)."""
    return _world is not None


def group_tag(name):
    """A group tag from a name: the number itself when it is one, else a hash."""
    try:
        n = int(name)
        if 0 <= n <= MAX_GROUP_TAG:
            return n
    except (TypeError, ValueError):
        pass
    return zlib.crc32(str(name).encode()) & MAX_GROUP_TAG
