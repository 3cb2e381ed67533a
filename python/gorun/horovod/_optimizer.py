"""DistributedOptimizer: gradients averaged over the ranks as backward
computes them (horovod.torch.optimizer)."""

import contextlib
import functools
import os
import warnings

import torch

from . import _ops
from ._ops import (Adasum, Average, allreduce_async_, global_process_set, grouped_allreduce_async_, size,
                   sparse_allreduce_async, synchronize)
from .compression import Compression


def fusion_threshold():
    """The most bytes of gradients one all-reduce carries
    (HOROVOD_FUSION_THRESHOLD, as in Horovod; 0 gives each gradient its own
    all-reduce). The default is DDP's bucket size, 25 MiB: a bucket starts
    as soon as backward has produced all of it, so smaller buckets start
    earlier and overlap more of backward."""
    v = os.environ.get("HOROVOD_FUSION_THRESHOLD", "")
    try:
        return max(int(v), 0) if v else 25 << 20
    except ValueError:
        raise ValueError(f"HOROVOD_FUSION_THRESHOLD={v!r}: want a number of bytes") from None


class _BucketResult:
    """One bucket's grouped all-reduce, waited for once: bucket member i's
    result is get(i)."""

    def __init__(self, handle):
        self.handle = handle
        self.out = None

    def get(self, i):
        if self.out is None:
            self.out = synchronize(self.handle)
        return self.out[i]

    def forget(self):
        if self.out is None:
            _ops._forget(self.handle)
            self.out = ()


class _Distributed:
    """Mixed in before the wrapped optimizer's class: a hook on each
    parameter's gradient accumulator counts the backward passes; when every
    gradient of a bucket (consecutive gradients in backward's usual order, up
    to fusion_threshold() bytes) has been produced backward_passes_per_step
    times, one grouped all-reduce starts for the bucket. step() (or
    synchronize()) waits for them and puts the results in .grad."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                   sparse_as_dense, process_set):
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f"allreduce.noname.{i}.{j}", p) for i, g in enumerate(self.param_groups)
                                for j, p in enumerate(g["params"])]
        if any(not isinstance(x, tuple) for x in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually produced "
                             "by model.named_parameters().")
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                             % ", ".join(dups))
        all_ids = {id(p) for g in self.param_groups for p in g["params"]}
        unnamed = all_ids - {id(p) for _, p in named_parameters}
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                             "Python object ids: %s" % ", ".join(str(i) for i in unnamed))
        self._compression = compression
        self._parameter_names = {p: k for k, p in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for _, p in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []  # in the order their all-reduces start (the same on every rank)
        self._buckets = []  # _requires_update cut by fusion_threshold()
        self._next = 0  # how many buckets have started this step
        self._synchronized = False
        self._should_synchronize = True
        # On an elastic job the view may grow later: hooks even at one rank.
        if process_set.included() and (size() > 1 or _ops._s.view is not None):
            self._register_hooks()

    def _register_hooks(self):
        # Gradients' all-reduces start in one order on every rank: the
        # parameters' order reversed, which is the order backward usually
        # produces them in, cut into buckets by size (the same cut on every
        # rank). A bucket starts when all of its gradients have come and
        # the buckets before it have started; a gradient that never comes on
        # this rank (a layer this step did not use) is all-reduced as zeros
        # by synchronize(), in its turn. Ranks whose graphs differ stay in
        # step without names.
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    self._requires_update.append(p)
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)
        self._requires_update.reverse()
        self._buckets = []
        cap, used = fusion_threshold(), 0
        for p in self._requires_update:
            nbytes = p.numel() * p.element_size()
            if not self._buckets or cap == 0 or used + nbytes > cap:
                self._buckets.append([])
                used = 0
            self._buckets[-1].append(p)
            used += nbytes

    def _start_ready(self):
        """Start the all-reduces of the ready buckets next in order."""
        while self._next < len(self._buckets):
            bucket = self._buckets[self._next]
            if any(p not in self._handles or self._allreduce_delay[p] > 0 for p in bucket):
                return
            self._start_bucket(bucket)
            self._next += 1

    def _start_bucket(self, bucket):
        """One grouped all-reduce for the bucket's gradients (each its own
        when there is one, or when one is sparse)."""
        for p in bucket:
            if p.grad is None:
                # Another rank may have a gradient here: every rank moves one.
                p.grad = torch.zeros_like(p.data)
        if len(bucket) == 1 or any(p.grad.is_sparse for p in bucket):
            for p in bucket:
                self._handles[p] = self._allreduce_grad_async(p)
            return
        pairs = [self._compression.compress(p.grad) for p in bucket]
        pre, post = self._scales()
        h = grouped_allreduce_async_([c for c, _ in pairs], name="bucket." + self._parameter_names.get(bucket[0]),
                                     op=self.op, prescale_factor=pre, postscale_factor=post,
                                     process_set=self.process_set)
        res = _BucketResult(h)
        for i, (p, (_, ctx)) in enumerate(zip(bucket, pairs)):
            self._handles[p] = (functools.partial(res.get, i), ctx)

    def _scales(self):
        """The prescale and postscale factors: an average split into a
        division before and one after the sum."""
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Another rank may have a gradient here: every rank moves one.
            p.grad = torch.zeros_like(p.data)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self.op, process_set=self.process_set), None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scales()
        h = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre, postscale_factor=post,
                             process_set=self.process_set)
        return h, ctx

    def _make_hook(self, p):
        def hook(*_):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                     "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            self._allreduce_delay[p] -= 1
            if p not in self._handles:
                self._handles[p] = (None, None)
            if self._allreduce_delay[p] == 0:
                self._start_ready()
        return hook

    def synchronize(self):
        """Wait for every gradient's all-reduce (starting those whose hooks
        did not run, in parameter order) and put the results in .grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        for bucket in self._buckets[self._next:]:
            self._start_bucket(bucket)
        self._next = 0
        for p, (handle, ctx) in self._handles.items():
            out = handle() if callable(handle) else synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            if p.grad.is_sparse:
                agg = self._compression.decompress(out, ctx) if ctx is not None else out
                p.grad.zero_().add_(agg if agg.is_sparse else agg.to_sparse())
            else:
                res = self._compression.decompress(out, ctx)
                if res.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(res)
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this does not synchronize (call synchronize() before)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your "
                              "code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def _gorun_plain_step(self):
        """The wrapped optimizer's own step (broadcast_optimizer_state uses it)."""
        return super().step()

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        for handle, _ in self._handles.values():
            if isinstance(handle, functools.partial) and isinstance(handle.func.__self__, _BucketResult):
                handle.func.__self__.forget()
            elif handle is not None and not callable(handle):
                _ops._forget(handle)
        self._handles = {}
        self._next = 0
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        # torch gives the optimizer new parameter groups; their values go
        # into the groups it had, which an LR scheduler made on the wrapped
        # optimizer holds.
        groups = self.param_groups
        out = super().load_state_dict(*args, **kwargs)
        if len(groups) == len(self.param_groups):
            for old, new in zip(groups, self.param_groups):
                old.update(new)
            self.param_groups = groups
        return out


# The wrapped optimizer's own step already runs torch's step hooks and
# profiling; marked as hooked, the wrapper's step is not wrapped again
# (torch wraps a class's step when a state dict is loaded into it).
_Distributed.step.hooked = True


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wrap optimizer so that its step() uses gradients averaged (or op)
    over the process set. The wrapper shares the optimizer's parameter
    groups and state.

    groups and num_groups are accepted for Horovod's signature; they change
    no result (each gradient's all-reduce starts when its hook runs)."""
    _ops._need_init()
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
    if op == Adasum and size() > 1:
        raise NotImplementedError("gorun.horovod: Adasum is not supported; use op=hvd.Average")
    base = optimizer.__class__
    cls = type(base.__name__, (_Distributed, base), {"__module__": __name__})
    opt = cls.__new__(cls)
    # The optimizer's attributes, less what shadows a method: an LR
    # scheduler made before the wrapper puts a step() of its own on the
    # optimizer, which would hide the wrapper's (and its all-reduces).
    opt.__dict__.update({k: v for k, v in optimizer.__dict__.items() if not (callable(v) and hasattr(cls, k))})
    opt._hvd_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                   sparse_as_dense, process_set)
    return opt
