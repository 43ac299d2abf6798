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
