"""gorun for Python: gorun's collectives from Python programs that gorun starts.

    import gorun.torch   # the "gorun" backend of torch.distributed

gorun._core is the ctypes binding of libgorun.so (built by `make python`);
it needs nothing but the standard library.
"""

__version__ = "0.1.0"
