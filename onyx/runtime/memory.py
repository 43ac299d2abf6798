"""Large tensors and the C heap: SessionOptions.enable_cpu_mem_arena.

onyx's tensors are numpy arrays, allocated from the C heap. glibc hands every block above its
mmap threshold (adjusted as the program runs, but never above 32 MB) back to the system when
it is freed, so a model whose activations are large maps, and faults in page by page, fresh
memory for them on every run, several times slower than reusing freed memory kept in the
heap. Copy-bound ops (Pad, Concat, Resize on a batch-8 U-Net) spent
most of their time there.

onnxruntime keeps such memory in its own arena (``enable_cpu_mem_arena``, on by default). The
same option here raises glibc's thresholds, once per process: freed blocks up to 1 GiB stay in
the heap for the next run instead of going back to the system. The cost is the same as an
arena's: the process keeps what it used at its peak. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
import threading

#: Blocks below this are served from (and freed back to) the heap.
KEEP_BELOW = 1 << 30

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_lock = threading.Lock()
_state: bool | None = None  # None: not tried yet


def keep_freed_memory() -> bool:
    """Have glibc keep freed large blocks for reuse (once per process); whether it does."""
    global _state
    with _lock:
        if _state is None:
            _state = _raise_thresholds()
        return _state


def freed_memory_kept() -> bool | None:
    """Whether keep_freed_memory took effect (None: it has not been asked yet)."""
    return _state


def _raise_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        # the process's own symbols (libc among them): ctypes.util.find_library would run
        # ldconfig in a subprocess, a tenth of a cold start
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has mallopt's meaning here)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # trim first: a heap top above the trim threshold would otherwise be released at once
    return bool(mallopt(_M_TRIM_THRESHOLD, KEEP_BELOW) and mallopt(_M_MMAP_THRESHOLD, KEEP_BELOW))


# -- huge pages while a session is created -------------------------------------------------------
#
# numpy asks the kernel for transparent huge pages (madvise) on every array of 4 MB or more.
# Where the system's THP defrag setting is "madvise" (a common default), each fault on such an
# array may compact memory first, synchronously: on a machine whose memory is fragmented (a
# full page cache), a session that generates its weights (onnx's light VGG-19, 550 MB of
# ConstantOfShape) took 1.2 s of CPU and seconds of wall time to fill them where 4 kB pages
# took 0.25 s. The weights a session makes while it is created (folded constants, fused and
# converted weights) get ordinary pages, as onnxruntime's do; what runs make keeps numpy's
# setting.

_pages_lock = threading.Lock()
_small_pages_users = 0
_huge_before: bool | None = None


def _madvise_switch():
    """numpy's (private) huge page switch, or None where this numpy has none."""
    try:
        from numpy._core import multiarray
    except ImportError:  # (numpy 1.x)
        from numpy.core import multiarray
    return getattr(multiarray, "_set_madvise_hugepage", None)


class small_pages:  # noqa: N801  (used as a function: ``with small_pages():``)
    """Arrays made inside the block get 4 kB pages (numpy's huge page advice is off while
    any thread is inside one; the last to leave puts it back)."""

    __slots__ = ()

    def __enter__(self):
        global _small_pages_users, _huge_before
        with _pages_lock:
            if _small_pages_users == 0:
                switch = _madvise_switch()
                _huge_before = switch(False) if switch is not None else None
            _small_pages_users += 1
        return self

    def __exit__(self, *exc) -> None:
        global _small_pages_users, _huge_before
        with _pages_lock:
            _small_pages_users -= 1
            if _small_pages_users == 0 and _huge_before is not None:
                _madvise_switch()(_huge_before)
                _huge_before = None
