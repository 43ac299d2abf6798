"""Runs in progress, counted process-wide, so that concurrent runs share the cores.

Every numpy BLAS call uses the BLAS library's whole thread pool: eight threads sharing a
session each asked for every core, and their BLAS threads fought over them (a small
transformer's runs took 100x longer than on one thread). Yet OpenBLAS's results depend on its
thread count (a [64, 256] x [256, 256] product differs in its last bits between 1, 2 and 3
threads), so a run's BLAS thread count must not depend on what else is running, or concurrent
results would stop being bit-identical. So each run states the BLAS thread count it needs
(one for a session whose heavy ops run on onyx's own pool or with intra_op_num_threads=1),
runs needing one BLAS thread run side by side, and a run needing more runs its BLAS work
alone: it waits for the others (which would only have fought it for the cores). Native
kernels split their work by output, so their thread count never changes a result: a run gets
its share of the cores while others run. The last run to finish restores BLAS's setting.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from . import native

_lock = threading.Condition()
_active = 0  # runs in progress
_blas_runs = 0  # runs holding the BLAS setting
_blas_mode = 0  # the BLAS thread count they need
_waiting_wide = 0  # runs waiting to use BLAS on several threads
_saved: list[int] | None = None  # the BLAS libraries' thread counts before onyx limited them
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


def limit_blas(n: int) -> None:
    """Set every BLAS library to ``n`` threads, remembering the setting to restore (under
    ``_lock``)."""
    global _saved
    libs = _blas_libs()
    if _saved is None:
        _saved = [lib.get_num_threads() for lib in libs]
    for lib in libs:
        if lib.get_num_threads() != n:
            lib.set_num_threads(n)


def _restore_blas() -> None:
    global _saved
    if _saved is not None:
        for lib, had in zip(_blas_libs(), _saved):
            if lib.get_num_threads() != had:
                lib.set_num_threads(had)
        _saved = None


def _enter_blas(n: int) -> None:
    """Wait until BLAS may run on ``n`` threads for this run (under ``_lock``)."""
    global _blas_runs, _blas_mode, _waiting_wide
    if n == 1:
        while (_blas_runs and _blas_mode != 1) or _waiting_wide:
            _lock.wait()
    else:
        _waiting_wide += 1
        while _blas_runs:
            _lock.wait()
        _waiting_wide -= 1
    _blas_runs += 1
    _blas_mode = n
    limit_blas(n)


def _leave_blas() -> None:
    global _blas_runs
    _blas_runs -= 1
    if _blas_runs == 0:
        _restore_blas()
        _lock.notify_all()


@contextmanager
def run_slot(threads: int, blas: int):
    """Hold one run's place: ``threads`` is the run's native thread setting (0: every core),
    ``blas`` the BLAS thread count it needs (0: the library's setting, or None when the model
    does no BLAS work)."""
    global _active
    if blas == 0:
        blas = _default_blas()
    with _lock:
        _active += 1
        active = _active
        if blas:
            _enter_blas(blas)
    share = threads if active == 1 else max(1, (threads or cores()) // active)
    try:
        with native.threads(share):
            yield
    finally:
        with _lock:
            _active -= 1
            if blas:
                _leave_blas()


def _default_blas() -> int:
    """BLAS's own thread count, as it was before onyx changed it."""
    if _saved is not None:
        return max(_saved)
    return max((lib.get_num_threads() for lib in _blas_libs()), default=1)
