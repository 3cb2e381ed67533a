"""Horovod's elastic training API (horovod.torch.elastic) on gorun's elastic
ring: run under `gorun --elastic [--max-restarts K] -np N`.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

When a rank is lost (or a restarted one comes back), the survivors'
collectives raise HorovodInternalError; run() then puts the state back to
its last commit, starts the engine again on the new view, and every rank of
the view takes the state of the view's first rank that holds one (gorun's
resync: a restarted rank holds none), then calls the function again.

On a job of fixed size (no --elastic) nothing joins or leaves: run() gives
every rank rank 0's state and calls the function once; a lost rank's
HorovodInternalError reaches the caller.
"""

import copy
import functools
import io
import math

import torch

from .. import _core
from . import _functions, _ops
from ._engine import HorovodInternalError, timeout

__all__ = ["State", "ObjectState", "TorchState", "ElasticSampler", "HostsUpdatedInterrupt", "run"]


class HostsUpdatedInterrupt(RuntimeError):
    """The job's membership changed since the last commit (raised by
    commit() and check_host_updates()); run() then syncs the state on the
    new view without putting it back."""

    def __init__(self, skip_sync=False):
        super().__init__("gorun.horovod: the job's membership changed")
        self.skip_sync = skip_sync


class State:
    """The state run() keeps across membership changes: save() at each
    commit, restore() after a failure, sync() on every (new) view."""

    def __init__(self):
        self._reset_callbacks = []
        self._epoch = _epoch()
        self._synced = False

    def register_reset_callbacks(self, callbacks):
        """Functions run after each reset (to scale the learning rate with
        the new size, for example)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._epoch = _epoch()
        self.reset()
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        """Save the state, then raise HostsUpdatedInterrupt if the job's
        membership changed since the last reset."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt if gorun's launcher has sent a new view
        since the last reset (the next collective would fail on it)."""
        if _epoch() != self._epoch:
            raise HostsUpdatedInterrupt(False)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def reset(self):
        pass

    def _payload(self):
        raise NotImplementedError

    def _load(self, payload):
        raise NotImplementedError

    def sync(self):
        """Every rank of the view takes the state of the view's first rank
        that holds one (a restarted rank holds none until its first sync)."""
        w = _core.world()
        if not w.elastic:
            buf = io.BytesIO()
            if w.rank == 0:
                torch.save(self._payload(), buf)
            got = _functions.broadcast_object(buf.getvalue(), 0)
            self._load(torch.load(io.BytesIO(got), weights_only=False))
            self._synced = True
            self.save()
            return
        holds = self._synced or w.restarts == 0
        buf = io.BytesIO()
        if holds:
            torch.save(self._payload(), buf)
        try:
            got = w.resync(buf.getvalue() if holds else b"", timeout())
        except _core.GorunError as e:
            raise HorovodInternalError(f"gorun.horovod: resync: {e}") from e
        self._load(torch.load(io.BytesIO(got), weights_only=False))
        self._synced = True
        self.save()


def _epoch():
    w = _core.world()
    return w.epoch if w.elastic else 0


class ObjectState(State):
    """Picklable values kept as attributes (state.epoch, state.batch...)."""

    def __init__(self, **kwargs):
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))

    def _payload(self):
        return {"attrs": {k: getattr(self, k) for k in self._saved_state}}

    def _load(self, payload):
        self._saved_state = payload["attrs"]
        self._set_attrs()


class ElasticSampler(torch.utils.data.Sampler):
    """A sampler that gives each rank its share of the dataset's samples not
    yet processed this epoch, and shares them out again after a reset (a
    new view). Keep it in the TorchState, call record_batch() after each
    batch and set_epoch() at the end of each epoch.

    The order is a permutation drawn from seed + epoch (the same on every
    rank) when shuffle is True; the last share is filled up with the first
    samples, so that every rank has as many."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Start epoch: nothing of it is processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """batch_size samples were processed on every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        """Share the samples not yet processed among the current view."""
        self.num_replicas = _ops.size()
        self.rank = _ops.rank()
        n = len(self.dataset)
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(n))
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        idx = list(self.remaining_indices)
        while idx and len(idx) < self.total_size:
            idx += idx[:self.total_size - len(idx)]
        return iter(idx[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


class TorchState(ObjectState):
    """A model's and an optimizer's state, and any other values as
    attributes: modules, optimizers and ElasticSamplers (a second model
    passed by keyword too) are kept by their state_dict, in place, as
    Horovod keeps them; other values are copied, as ObjectState copies
    them."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._kept = {k: v for k, v in dict(kwargs, model=model, optimizer=optimizer).items()
                      if isinstance(v, (torch.nn.Module, torch.optim.Optimizer, ElasticSampler))}
        self._saved_kept = {}
        for k in kwargs:
            if k in self._kept:
                setattr(self, k, kwargs[k])
        super().__init__(**{k: v for k, v in kwargs.items() if k not in self._kept})
        self.save()

    def reset(self):
        for v in self._kept.values():
            if isinstance(v, ElasticSampler):
                v.reset()

    def save(self):
        self._saved_kept = {k: copy.deepcopy(v.state_dict()) for k, v in self._kept.items()}
        super().save()

    def restore(self):
        for k, v in self._saved_kept.items():
            self._kept[k].load_state_dict(v)
        super().restore()

    def _payload(self):
        p = super()._payload()
        p["kept"] = {k: v.state_dict() for k, v in self._kept.items()}
        return p

    def _load(self, payload):
        for k, v in payload["kept"].items():
            self._kept[k].load_state_dict(v)
        super()._load(payload)


def _reset():
    _ops.shutdown()
    _ops.init()


def run(func):
    """Run func(state, ...) until it returns, across membership changes: on
    HorovodInternalError (a lost rank, or a new one) the state goes back to
    its last commit; on HostsUpdatedInterrupt it stays; then the engine
    starts again on the new view, the state is synced, and func runs again.
    An error that is no membership change is raised. On a job of fixed
    size, func runs once on rank 0's state."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _core.world().elastic:
            state.sync()
            return func(state, *args, **kwargs)
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if not _view_changed(e):
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _reset()
            state.on_reset()
    return wrapper


def _view_changed(err):
    e = err
    while e is not None:
        if isinstance(e, _core.ViewChanged) or "membership changed" in str(e):
            return True
        e = e.__cause__
    return False
