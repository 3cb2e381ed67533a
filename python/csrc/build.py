"""Builds gorun.torch's native fast path (torchc.cpp) against the PyTorch
of the interpreter that runs this script, with the compiler flags
torch.utils.cpp_extension gives an extension (include and library paths,
the C++ ABI, the pybind11 ABI torch itself was built with).

    python3 python/csrc/build.py OUT_DIR        # writes OUT_DIR/_torchc-<tag>.so

<tag> names the torch version (gorun.torch loads only the file built for
the torch it runs with, and runs without it otherwise). Exits 0 without
building when PyTorch, its headers (Debian's libtorch-dev) or a C++
compiler are missing, after saying so: the package works without it, more
slowly. `make python` runs it; so do python/'s tests.
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig


def tag(version):
    """The file-name tag of a torch version: 1.13.0a0 -> 1_13_0a0."""
    return "".join(c if c.isalnum() else "_" for c in version)


def main():
    if len(sys.argv) != 2:
        print("usage: build.py OUT_DIR", file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    try:
        import torch
        import torch.utils.cpp_extension as ext
    except ImportError as e:
        print(f"gorun: no PyTorch for {sys.executable} ({e}): the native fast path is not built", file=sys.stderr)
        return 0
    cxx = shlex.split(os.environ.get("CXX", "")) or [c for c in (shutil.which("g++") or shutil.which("c++"),) if c]
    includes = ext.include_paths()
    pyinclude = sysconfig.get_paths()["include"]
    have = lambda rel, dirs: any(os.path.exists(os.path.join(d, rel)) for d in dirs)  # noqa: E731
    if (not cxx or not have(os.path.join("torch", "csrc", "distributed", "c10d", "Work.hpp"), includes)
            or not have(os.path.join("pybind11", "pybind11.h"), includes + [pyinclude, "/usr/include"])
            or not have("Python.h", [pyinclude])):
        print("gorun: no C++ compiler, or no PyTorch, pybind11 or Python headers (Debian: apt-get install g++ "
              "libtorch-dev pybind11-dev): the native fast path is not built", file=sys.stderr)
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(out_dir, f"_torchc-{tag(torch.__version__)}.so")
    flags = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f'-DGORUN_TORCH_VERSION="{torch.__version__}"']
    # The pybind11 ABI torch was built with, so that this module shares its
    # types (Work, the option types) with torch's (as cpp_extension does).
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        v = getattr(torch._C, f"_PYBIND11_{name}", None)
        if v is not None:
            flags.append(f'-DPYBIND11_{name}="{v}"')
    cmd = [*cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w",
           *flags, *[f"-I{p}" for p in includes], f"-I{pyinclude}",
           os.path.join(here, "torchc.cpp"), "-o", out + ".tmp",
           *[f"-L{p}" for p in ext.library_paths()], *[f"-Wl,-rpath,{p}" for p in ext.library_paths()],
           "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    os.makedirs(out_dir, exist_ok=True)
    r = subprocess.run(cmd)
    if r.returncode != 0:
        print(f"gorun: building {out} failed: {' '.join(cmd)}", file=sys.stderr)
        return 1
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
