"""The default process group of the bench scripts, over gorun or Gloo."""

import os

import torch.distributed as dist


def init(backend):
    """init_process_group over backend ("gorun" or "gloo") in a job that
    gorun started."""
    if backend == "gorun":
        import gorun.torch as gt
        gt.init()
        return
    # Gloo's env:// rendezvous starts a TCPStore, which asks for libuv
    # from torch 2.4 on; Debian 13's PyTorch 2.6 is built without it.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo")
