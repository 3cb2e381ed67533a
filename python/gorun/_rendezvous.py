"""Joining a job through a key-value store, for processes gorun did not start.

torchrun, torch.multiprocessing.spawn, Slurm's srun and the Kubernetes
operators start every rank themselves and give each a store
(init_process_group's init_method: env://, tcp://, file://, or store=).
store_env meets the other ranks there and returns the variables gorun's
launcher would have set (collective.ConfigFromEnv reads them); gorun's
gossip, transport and shared memory then run as under the launcher.

The store needs set, get, add and wait (torch.distributed.Store has them).
What goes through it: rank 0's job id and secret (the secret authenticates
gorun's connections; the store is as trusted as it is for Gloo, which
trusts it with everything), and every rank's gossip address.
"""

import os
import random
import secrets
import socket
from datetime import timedelta

# The lowest gossip port picked, and the start of the kernel's ephemeral
# range if it cannot be read: ports are picked below that range, where
# only explicit binds go (as gorun's launcher picks them).
_PORT_FLOOR = 10000
_EPHEMERAL_DEFAULT = 32768
# Ports are drawn from the system's randomness: a program's own seed of
# the random module must neither change nor be changed by them.
_random = random.SystemRandom()


def store_env(store, rank, size, timeout, environ=None):
    """Meets the other size-1 ranks in store and returns gorun's variables
    for this rank. Every rank calls it with the same store and size, each
    with its own rank; it waits for all of them, at most timeout seconds.
    A process that joins again (after destroy_process_group) meets the
    others in a new round of keys."""
    environ = os.environ if environ is None else environ
    if not 0 <= rank < size:
        raise ValueError(f"gorun: rank {rank} is not in a job of {size}")
    # Every rank joins the same number of times, so each one's count of
    # its own joins names the round they are in together.
    round_ = store.add(f"gorun/joins/{rank}", 1)
    key = f"gorun/{round_}/".__add__
    if rank == 0:
        store.set(key("job"), "torch-" + secrets.token_hex(6))
        store.set(key("secret"), secrets.token_hex(32))
    addr = advertise_address(store, environ)
    port = free_port()
    store.set(key(f"peer/{rank}"), f"{_bracket(addr)}:{port}")
    keys = [key("job"), key("secret")] + [key(f"peer/{r}") for r in range(size)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception as e:
        missing = [r for r in range(size) if not _has(store, key(f"peer/{r}"))]
        raise TimeoutError(f"gorun: ranks {missing} of {size} never reached the store within {timeout:g} s: {e}") from e
    env = {
        "GORUN_RANK": rank, "GORUN_SIZE": size,
        "GORUN_JOB_ID": store.get(key("job")).decode(),
        "GORUN_JOB_SECRET": store.get(key("secret")).decode(),
        "GORUN_PEERS": ",".join(store.get(key(f"peer/{r}")).decode() for r in range(size)),
        "GORUN_ADDR": addr, "GORUN_GOSSIP_PORT": port,
    }
    # What torchrun and Slurm say of the host's ranks.
    for theirs, ours in (("LOCAL_RANK", "GORUN_LOCAL_RANK"), ("LOCAL_WORLD_SIZE", "GORUN_LOCAL_SIZE")):
        if theirs in environ and ours not in environ:
            env[ours] = environ[theirs]
    return env


def solo_env():
    """gorun's variables for a job of one rank that no launcher started (a
    script run as `python3 train.py`), on loopback."""
    port = free_port()
    return {"GORUN_RANK": 0, "GORUN_SIZE": 1, "GORUN_JOB_ID": "solo-" + secrets.token_hex(6),
            "GORUN_JOB_SECRET": secrets.token_hex(32), "GORUN_PEERS": f"127.0.0.1:{port}",
            "GORUN_ADDR": "127.0.0.1", "GORUN_GOSSIP_PORT": port}


def _has(store, key):
    try:
        store.wait([key], timedelta(milliseconds=1))
        return True
    except Exception:
        return False


def _bracket(addr):
    return f"[{addr}]" if ":" in addr else addr


def advertise_address(store, environ):
    """The address other ranks reach this one at: GORUN_ADDR if set; else
    this host's address on the route to the store's host (MASTER_ADDR, or
    the TCP store's own host); else the address the host name resolves to;
    else loopback."""
    if environ.get("GORUN_ADDR"):
        return environ["GORUN_ADDR"]
    target = environ.get("MASTER_ADDR") or _store_host(store)
    if target:
        try:
            return _route_to(target)
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _store_host(store):
    """The host of the TCP store under store's prefixes, if it is one."""
    for _ in range(16):
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
        if store is None:
            return None
    return None


def _route_to(host):
    """This host's address on the route to host (a UDP socket's connect
    picks it; nothing is sent)."""
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, 1, type=socket.SOCK_DGRAM):
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr[:2] if family == socket.AF_INET else sockaddr)
            return s.getsockname()[0]
    raise OSError(f"no address for {host}")


def _ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
            if lo >= _PORT_FLOOR + 1000:
                return lo
    except (OSError, ValueError, IndexError):
        pass
    return _EPHEMERAL_DEFAULT


def free_port(tries=500):
    """A port free for TCP and UDP on every address (gorun's gossip binds
    both), below the ephemeral range."""
    hi = _ephemeral_start()
    for _ in range(tries):
        port = _random.randrange(_PORT_FLOOR, hi)
        if _bindable(port):
            return port
    raise OSError("gorun: no free port found below the ephemeral range")


def _bindable(port):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            t.bind(("", port))
            u.bind(("", port))
        return True
    except OSError:
        return False
