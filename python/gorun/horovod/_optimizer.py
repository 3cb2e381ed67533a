"""DistributedOptimizer: gradients averaged over the ranks as backward
computes them (horovod.torch.optimizer)."""

import contextlib
import warnings

import torch

from . import _ops
from ._ops import Adasum, Average, allreduce_async_, global_process_set, size, sparse_allreduce_async, synchronize
from .compression import Compression


class _Distributed:
    """Mixed in before the wrapped optimizer's class: a hook on each
    parameter's gradient accumulator starts its all-reduce when backward has
    produced it backward_passes_per_step times; step() (or synchronize())
    waits for them and puts the results in .grad."""

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
        self._next = 0  # how many of them have started this step
        self._synchronized = False
        self._should_synchronize = True
        if process_set.included() and size() > 1:
            self._register_hooks()

    def _register_hooks(self):
        # Gradients' all-reduces start in one order on every rank: the
        # parameters' order reversed, which is the order backward usually
        # produces them in. A gradient that comes early waits for those
        # before it; one that never comes on this rank (a layer this step
        # did not use) is all-reduced as zeros by synchronize(), in its
        # turn. Ranks whose graphs differ stay in step without names.
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    self._requires_update.append(p)
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)
        self._requires_update.reverse()

    def _start_ready(self):
        """Start the all-reduces of the ready gradients next in order."""
        order = self._requires_update
        while self._next < len(order):
            p = order[self._next]
            if p not in self._handles or self._allreduce_delay[p] > 0:
                return
            self._handles[p] = self._allreduce_grad_async(p)
            self._next += 1

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
        pre, post = 1.0, 1.0
        if self.op == Average:  # the average split into a division before and one after the sum
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
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
        for p in self._requires_update[self._next:]:
            self._handles[p] = self._allreduce_grad_async(p)
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
            if handle is not None and not callable(handle):
                _ops._forget(handle)
        self._handles = {}
        self._next = 0
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        return super().load_state_dict(*args, **kwargs)


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
    opt.__dict__.update(optimizer.__dict__)
    opt._hvd_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                   sparse_as_dense, process_set)
    return opt
