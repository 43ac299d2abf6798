"""The BLAS libraries whose thread count a run sets (concurrency.py), found without
threadpoolctl where that is simple: on Linux, when every BLAS library the process has loaded
is an OpenBLAS with its own threads (numpy's wheels bundle one). Importing threadpoolctl and
its survey of the process's libraries cost more than a small model's first run, and a fresh
process pays them at that run. Anything else (MKL, BLIS, FlexiBLAS, an OpenBLAS on OpenMP,
another system) returns None: threadpoolctl then finds and sets them, as before.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

#: A mapped shared object's path at the end of a /proc/self/maps line.
_MAPPED = re.compile(rb"\s(/\S+\.so(?:\.[^\s/]*)?)$", re.M)
#: File-name prefixes of the BLAS libraries threadpoolctl knows (its controllers' lists).
_OPENBLAS = ("libopenblas", "libscipy_openblas")
_OTHER_BLAS = ("libblas", "libblis", "libmkl_rt", "mkl_rt", "libflexiblas")
#: openblas_get_parallel's answer for the OpenMP threading layer (threads set through OpenMP).
_OPENMP = 2


class OpenBLAS:
    """One loaded OpenBLAS: its thread count read and set through its own functions (what
    concurrency.py asks of a threadpoolctl controller: get_num_threads, set_num_threads)."""

    __slots__ = ("filepath", "get_num_threads", "set_num_threads")

    def __init__(self, filepath: str, get, set_):  # noqa: ANN001  (ctypes functions)
        self.filepath = filepath
        self.get_num_threads = get
        self.set_num_threads = set_


def loaded_openblas() -> list[OpenBLAS] | None:
    """Every BLAS library loaded, when all are OpenBLAS on their own threads; else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps", "rb") as f:
            paths = set(_MAPPED.findall(f.read()))
    except OSError:
        return None
    found = []
    for path in sorted(paths):
        name = os.path.basename(path).decode("utf-8", "replace")
        if name.startswith(_OTHER_BLAS):
            return None
        if name.startswith(_OPENBLAS):
            lib = _openblas(os.fsdecode(path))
            if lib is None:
                return None
            found.append(lib)
    return found


def _openblas(path: str) -> OpenBLAS | None:
    try:
        dll = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)  # (already loaded: only a handle to it)
    except OSError:
        return None
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            get = getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(dll, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is None or set_ is None:
                continue
            parallel = getattr(dll, f"{prefix}openblas_get_parallel{suffix}", None)
            if parallel is None or parallel() == _OPENMP:
                return None  # (threadpoolctl sets an OpenMP build's threads through OpenMP)
            get.restype, get.argtypes = ctypes.c_int, []
            set_.restype, set_.argtypes = None, [ctypes.c_int]
            return OpenBLAS(path, get, set_)
    return None
