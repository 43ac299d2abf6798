"""The BLAS libraries whose thread count a run sets (concurrency.py), found without
threadpoolctl where that is simple: on Linux, when every BLAS library the process has loaded
is an OpenBLAS with its own threads (numpy's wheels bundle one). Importing threadpoolctl and
its survey of the process's libraries cost more than a small model's first run, and a fresh
process pays them at that run. Anything else (MKL, BLIS, FlexiBLAS, an OpenBLAS on OpenMP,
another system) returns None: threadpoolctl then finds and sets them, as before.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import os
import sys

import numpy as np

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
    paths = _loaded_files()
    if paths is None:
        return None
    found = []
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith(_OTHER_BLAS):
            return None
        if name.startswith(_OPENBLAS):
            lib = _openblas(path)
            if lib is None:
                return None
            found.append(lib)
    return found


_libc = None


@functools.cache
def _phdr_types() -> tuple[int, type]:
    """(the end of dl_phdr_info's ``adds`` field, the callback type of dl_iterate_phdr) for
    the walk through ctypes callbacks, made at its first use: where the native library walks
    the objects (_native_walk), a process never makes them."""

    class _ObjectInfo(ctypes.Structure):  # struct dl_phdr_info's first fields (link.h)
        _fields_ = [
            ("addr", ctypes.c_void_p),
            ("name", ctypes.c_char_p),
            ("phdr", ctypes.c_void_p),
            ("phnum", ctypes.c_uint16),
            ("adds", ctypes.c_ulonglong),  # (glibc 2.4 on: objects loaded so far, ever)
        ]

    each = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(_ObjectInfo), ctypes.c_size_t, ctypes.c_void_p
    )
    return _ObjectInfo.adds.offset + ctypes.sizeof(ctypes.c_ulonglong), each


def _native_walk(names: bool = True) -> tuple[list[bytes], int] | None:
    """(the loaded objects' paths, none without ``names``; how many objects the process has
    loaded ever: 0 where unknown) from the native library's onyx_loaded_objects (abi.c:
    dl_iterate_phdr without a ctypes callback per object, whose first one alone cost a fresh
    process's first run a sixth of a millisecond); None where the library is off, lacks it (built from older
    sources) or the platform has no dl_iterate_phdr. Its prototype is set at its first use,
    of plain addresses: the buffers are numpy arrays (ctypes' POINTER(c_uint64) and
    create_string_buffer each made a ctypes type, a fresh process's first run paying both)."""
    from .native import _core

    lib = _core.lib
    if lib is None:
        return None
    try:
        walk = lib.onyx_loaded_objects
    except AttributeError:
        return None
    if walk.restype is not ctypes.c_int64:
        walk.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        walk.restype = ctypes.c_int64
    adds, room = np.zeros(1, np.uint64), 4096
    if not names:  # (no buffer: the count alone, no path copied)
        return None if walk(None, 0, adds.ctypes.data) < 0 else ([], int(adds[0]))
    while True:  # (an object loaded by another thread meanwhile: room for it next time)
        buf = np.empty(room, np.uint8)
        size = walk(buf.ctypes.data, room, adds.ctypes.data)
        if size < 0:
            return None
        if size <= room:
            return buf[:size].tobytes().split(b"\n")[:-1], int(adds[0])
        room = size + 1024


def load_count() -> int | None:
    """How many shared objects the process has loaded so far (a counter dl_iterate_phdr
    reports, read from its first object: a few microseconds), or None where there is none."""
    walked = _native_walk(names=False)
    if walked is not None:
        return walked[1] or None
    seen: list[int] = []
    adds_end = _phdr_types()[0]

    def first(info, size, data) -> int:  # noqa: ANN001  (ctypes' arguments)
        if size >= adds_end:
            seen.append(info.contents.adds)
        return 1  # (stops the walk: one object tells it)

    try:
        _each_object(first)
    except (OSError, AttributeError):
        return None
    return seen[0] if seen else None


def _each_object(visit) -> None:  # noqa: ANN001  (a Python function of the callback type)
    """Call ``visit`` on each loaded shared object (dl_iterate_phdr) until it returns non-zero;
    OSError or AttributeError where the C library or the function is missing."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    _libc.dl_iterate_phdr(_phdr_types()[1](visit), None)


def _loaded_files() -> set[str] | None:
    """The paths of the shared objects loaded: dl_iterate_phdr's names (microseconds), as the
    loader has them (numpy's OpenBLAS as ``.../numpy/_core/../../numpy.libs/...``: not
    normalized, for dlopen finds a loaded object by that very name without opening its file,
    and by any other only after opening it), else the files /proc/self/maps lists (the kernel
    takes most of a millisecond to write it)."""
    walked = _native_walk()
    if walked is not None:
        return {os.fsdecode(n) for n in walked[0]}
    names: list[bytes] = []

    def note(info, size, data) -> int:  # noqa: ANN001  (ctypes' arguments)
        names.append(info.contents.name or b"")
        return 0

    try:
        _each_object(note)
    except (OSError, AttributeError):
        try:
            with open("/proc/self/maps", "rb") as f:
                return _mapped_files(f.read())
        except OSError:
            return None
    return {os.fsdecode(n) for n in names if n.startswith(b"/")}


def _mapped_files(maps: bytes) -> set[str]:
    """The files mapped, from /proc/self/maps (the path is a line's sixth field; a regular
    expression's compilation alone cost more than this whole walk)."""
    paths = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith(b"/"):
            paths.add(os.fsdecode(fields[5]))
    return paths


def _openblas(path: str) -> OpenBLAS | None:
    try:
        # (already loaded: only a handle to it, its symbols' addresses and functions made of
        # them as PyDLL's keep the GIL, as a run's start and end want for a call of
        # nanoseconds: concurrency._openblas_functions. Not a PyDLL: each instance makes a
        # ctypes class, a fresh process's first run paying it)
        handle = _ctypes.dlopen(path, os.RTLD_NOLOAD)
    except (OSError, AttributeError):  # (AttributeError: a Python without _ctypes.dlopen)
        return None
    # (the names its file name suggests first: each symbol missed is a failed look-up and an
    # exception; numpy's libscipy_openblas64_ has scipy_openblas_get_num_threads64_)
    name = os.path.basename(path)
    prefixes = ("scipy_", "") if name.startswith("libscipy_") else ("", "scipy_")
    suffixes = ("64_", "", "_64") if "64_" in name else ("", "64_", "_64")
    for prefix in prefixes:
        for suffix in suffixes:
            get = _function(handle, f"{prefix}openblas_get_num_threads{suffix}")
            set_ = get and _function(handle, f"{prefix}openblas_set_num_threads{suffix}")
            if get is None or set_ is None:
                continue
            parallel = _function(handle, f"{prefix}openblas_get_parallel{suffix}")
            if parallel is None or parallel() == _OPENMP:
                return None  # (threadpoolctl sets an OpenMP build's threads through OpenMP)
            get.restype, get.argtypes = ctypes.c_int, []
            set_.restype, set_.argtypes = None, [ctypes.c_int]
            return OpenBLAS(path, get, set_)
    return None


def _function(handle: int, name: str):
    """The library's function ``name`` as a PyDLL's (keeping the GIL; restype int), or None
    where it has none: an instance of ctypes.pythonapi's function class (a PyDLL's), so no
    class is made."""
    try:
        make = ctypes.pythonapi._FuncPtr  # noqa: SLF001  (PyDLL's class, public since 2.5)
        return make(_ctypes.dlsym(handle, name))
    except (OSError, AttributeError):
        return None
