"""broadcast_parameters, broadcast_optimizer_state and the object
collectives (horovod.torch.functions)."""

import pickle

import torch

from ._ops import (allgather, broadcast_, broadcast_async_, global_process_set, rank, synchronize)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcast, in place, parameters or buffers from root_rank: a
    model.state_dict(), model.named_parameters(), or a list of tensors or
    (name, tensor) pairs. Every rank passes them in the same order (a dict
    is sorted by name)."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = [broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p, root_rank, name,
                                process_set=process_set) for name, p in params]
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Broadcast an optimizer's state from root_rank, in place: its tensors
    into the optimizer's own, its scalars and options by value into its
    own state and parameter groups (so that an LR scheduler made on it
    goes on scheduling it). An optimizer without state yet takes one step
    on zero gradients first, as Horovod does, so that every rank has the
    same layout (its gradients are set to zeros: a rank's own gradients
    would move its parameters away from the others')."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p.data)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        step = getattr(optimizer, "_gorun_plain_step", None)
        (step or optimizer.step)()
    tensors, scalars = [], {}
    for gi, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key != "params":
                scalars[f"group.{gi}.{key}"] = value
        for pi, p in enumerate(group["params"]):
            for key, value in sorted(optimizer.state.get(p, {}).items(), key=lambda kv: str(kv[0])):
                if torch.is_tensor(value):
                    tensors.append((f"state.{gi}.{pi}.{key}", value))
                else:
                    scalars[f"state.{gi}.{pi}.{key}"] = value
    broadcast_parameters(tensors, root_rank, process_set=process_set)
    scalars = broadcast_object(scalars, root_rank, process_set=process_set)
    for gi, group in enumerate(optimizer.param_groups):
        for key in list(group):
            if key != "params" and f"group.{gi}.{key}" in scalars:
                group[key] = scalars[f"group.{gi}.{key}"]
        for pi, p in enumerate(group["params"]):
            st = optimizer.state.get(p, {})
            for key in list(st):
                if f"state.{gi}.{pi}.{key}" in scalars:
                    st[key] = scalars[f"state.{gi}.{pi}.{key}"]


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """obj from root_rank, pickled, on every member."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    broadcast_(size, root_rank, name + ".sz", process_set=process_set)
    if rank() != root_rank:
        data = torch.empty(int(size[0]), dtype=torch.uint8)
    broadcast_(data, root_rank, name + ".t", process_set=process_set)
    if rank() == root_rank:
        return obj
    return pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every member's obj, pickled, as a list in member order."""
    name = name or type(obj).__name__
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name=name + ".sz",
                      process_set=process_set).tolist()
    got = allgather(data, name=name + ".t", process_set=process_set).numpy().tobytes()
    out, at = [], 0
    for k in sizes:
        out.append(pickle.loads(got[at:at + k]))
        at += k
    return out


