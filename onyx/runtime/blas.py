"""numpy's BLAS thread pool: a session's limit for one run, and one thread for small products.

OpenBLAS splits a product between its threads up front and waits for the slowest part. When
other processes hold the cores, a BLAS thread that is not scheduled holds up the whole product:
on a shared 2-core machine a [32, 128] @ [128, 512] product took 2.4-4.1 ms on two threads and
0.23 ms on one (onnxruntime's pool hands out work as threads come free, and the caller works
too, so it does not stall that way). Products up to SMALL multiply-adds (about a millisecond on
one core, where a second thread saves little even on an idle machine) therefore run on one
thread; larger ones get the run's limit.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

#: Products of at most this many multiply-adds run on one BLAS thread.
SMALL = 1 << 24
#: OpenBLAS runs products below about this on one thread by itself: no switch needed.
_OWN_SINGLE = 1 << 18

_libs: list | None = None
_limit = 1  # the BLAS threads of the run in progress (BLAS's setting is process-wide too)


def _controllers() -> list:
    """threadpoolctl's controllers of the loaded BLAS libraries (found once: its ``limit``
    surveys every library on each call)."""
    global _libs
    if _libs is None:
        from threadpoolctl import ThreadpoolController

        _libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return _libs


def threads() -> int:
    """The BLAS threads of the run in progress (1 outside a run)."""
    return _limit


@contextmanager
def limit(n: int):
    """Limit BLAS to ``n`` threads for one run (n <= 0: leave BLAS's own setting)."""
    global _limit
    libs = _controllers()
    before = [lib.get_num_threads() for lib in libs]
    n = n if n > 0 else max(before, default=1)
    outer, _limit = _limit, n
    for lib, had in zip(libs, before):
        if had != n:
            lib.set_num_threads(n)
    try:
        yield
    finally:
        _limit = outer
        for lib, had in zip(libs, before):
            if had != n:
                lib.set_num_threads(had)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul, on one BLAS thread where the product is small (see the module's note)."""
    if _limit > 1:
        work = a.size * (b.shape[-1] if b.ndim > 1 else 1)
        if _OWN_SINGLE < work <= SMALL:
            libs = _controllers()
            for lib in libs:
                lib.set_num_threads(1)
            try:
                return np.matmul(a, b)
            finally:
                for lib in libs:
                    lib.set_num_threads(_limit)
    return np.matmul(a, b)
