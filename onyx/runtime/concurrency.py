"""Runs in progress, counted process-wide, so that concurrent runs share the cores.

Every numpy BLAS call uses the BLAS library's whole thread pool: eight threads sharing a
session each asked for every core, and their BLAS threads fought over them (a small
transformer's runs took 100x longer than on one thread). Yet OpenBLAS's results depend on its
thread count (a [64, 256] x [256, 256] product differs in its last bits between 1, 2 and 3
threads), so a run's BLAS thread count must not depend on what else is running, or concurrent
results would stop being bit-identical. So each run states the BLAS thread count it needs
(one for a session whose heavy ops run on onyx's own pool or with intra_op_num_threads=1),
runs needing one BLAS thread run side by side, and a run needing more runs its BLAS work
alone: it waits for the others (which would only have fought it for the cores). The native
pool's thread count stays each run's own (some kernels choose their path by it). The last run
to finish restores BLAS's setting. A run does not use blas.limit: its per-product switch to
one thread, under concurrent runs, gave results that differed from a lone run's (OpenBLAS on
one thread computes in the calling thread, and its bits differ between the main thread and
another: a [128, 1024] x [1024, 256] product, checked with OpenBLAS 0.3.31).
"""

from __future__ import annotations

import os
import threading

from . import native

_lock = threading.Condition()
_active = 0  # runs in progress
_blas_runs = 0  # runs holding the BLAS setting
_blas_mode = 0  # the BLAS thread count they need
_waiting_wide = 0  # runs waiting to use BLAS on several threads
_waiting = 0  # runs waiting for any reason
_saved: list[int] | None = None  # the BLAS libraries' thread counts before onyx limited them
_current: int | None = None  # BLAS's thread count as onyx last read or set it
_libs: list | None = None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def active_runs() -> int:
    return _active


def _blas_libs() -> list:
    """The BLAS libraries' controllers (threadpoolctl's), found once: surveying them on every
    run costs more than a tiny model's run."""
    global _libs
    if _libs is None:
        from threadpoolctl import ThreadpoolController

        _libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return _libs


def _blas_now() -> int:
    global _current
    if _current is None:
        _current = max((lib.get_num_threads() for lib in _blas_libs()), default=1)
    return _current


def limit_blas(n: int) -> None:
    """Set every BLAS library to ``n`` threads, remembering the setting to restore (under
    ``_lock``; nothing to do, the common case, costs no call into the libraries)."""
    global _saved, _current
    if n == _blas_now():
        return
    libs = _blas_libs()
    if _saved is None:
        _saved = [lib.get_num_threads() for lib in libs]
    for lib in libs:
        lib.set_num_threads(n)
    _current = n


def _restore_blas() -> None:
    global _saved, _current
    if _saved is not None:
        for lib, had in zip(_blas_libs(), _saved):
            lib.set_num_threads(had)
        _current = max(_saved, default=1)
        _saved = None


def _enter_blas(n: int) -> None:
    """Wait until BLAS may run on ``n`` threads for this run (under ``_lock``)."""
    global _blas_runs, _blas_mode, _waiting_wide
    global _waiting
    if n == 1:
        while (_blas_runs and _blas_mode != 1) or _waiting_wide:
            _waiting += 1
            _lock.wait()
            _waiting -= 1
    else:
        _waiting_wide += 1
        while _blas_runs:
            _waiting += 1
            _lock.wait()
            _waiting -= 1
        _waiting_wide -= 1
    _blas_runs += 1
    _blas_mode = n
    limit_blas(n)


def _leave_blas() -> None:
    global _blas_runs
    _blas_runs -= 1
    if _blas_runs == 0:
        _restore_blas()
        if _waiting:
            _lock.notify_all()


class run_slot:  # noqa: N801  (used as a function: ``with run_slot(threads, blas):``)
    """Hold one run's place: ``threads`` is the run's native thread setting (0: every core),
    ``blas`` the BLAS thread count it needs (0: the library's setting, or None when the model
    does no BLAS work). A class, not a generator: it wraps every run of tiny models too."""

    __slots__ = ("blas", "native")

    def __init__(self, threads: int, blas: int | None):
        global _active
        if blas == 0:
            blas = _default_blas()
        with _lock:
            _active += 1
            if blas:
                _enter_blas(blas)
        self.blas = blas
        # (the native pool's thread count stays the run's own: some kernels choose their
        # path by it, and a path's bits must not depend on what else runs)
        self.native = native.threads(threads)

    def __enter__(self):
        self.native.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self.native.__exit__(*exc)
        with _lock:
            _active -= 1
            if self.blas:
                _leave_blas()


def _default_blas() -> int:
    """BLAS's own thread count, as it was before onyx changed it."""
    if _saved is not None:
        return max(_saved, default=1)
    return _blas_now()
