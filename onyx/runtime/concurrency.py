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

Short runs take turns, process-wide (runtime/turns.py: a small model's run is mostly Python,
which holds the GIL, and eight threads running it at once only took the GIL from each other).
That module is imported by the first short run made while another thread started from Python
is alive (``_turn_of``): a process that never runs a second thread never loads it.

Tiny runs of a GIL-bound session take no turn (``Pace.tiny``; TINY_RUN_SECONDS 0 switches
the rule off, as it was while their runs let the GIL go): runs under TINY_RUN_SECONDS
of a session with no op on the native pool (a small scikit-learn pipeline: 40-80 us). The
GIL orders them, handed over every few milliseconds as a turn's slice is, and the turn only
added its own costs (taking it at every run, its hand-overs, its watcher); such runs needing
BLAS on several threads share that setting rather than each running alone (``_share_blas``),
which made every run wait for the last one's end. The rule pays only where the runs never
let the GIL go: each release (numpy's argmax, searchsorted, take; a ctypes call through a CDLL)
woke a waiting thread, which took the GIL from the run (2.00x one thread on the quiet machine).
The small scikit-learn kernels now keep the GIL on small inputs (ml/_common.row_argmax,
native.core.keeping_gil; tests/test_gil_releases.py counts the releases: none). Other sessions
without an op on the native pool still let it go (numpy's take, FFTs and sorts in a kNN, a
TfIdf, a Loop's body; a forest's call on more work than it keeps the GIL for): a session whose
measured tiny runs lose the GIL midway, their thread made to wait for it (its voluntary
context switches, or the library's count of calls that let it go), takes turns again for good
(``Pace.switched``).

Runs side by side on fewer threads each (two runs at once, each on one intra-op thread, so that
one's Python overlaps the other's kernels) were measured and left: on small transformers and
a QDQ MobileNet they took more wall time and far more CPU time than turns (their kernel calls
release the GIL for microseconds, and each one handed the GIL to the other run:
docs/reliability.md). So was a run queue (one thread making the queued runs of the others back
to back, warm): each caller's next call needs its results, so every queued run woke its caller,
a switch per run where a turn makes one per job (``bench_concurrency.py --run-queue``).
"""

from __future__ import annotations

import _thread
import os
import threading
import time

from . import native

_setting = native.THREAD_SETTING  # (the native thread setting: ``run_slot`` sets it per run)
_mutex = _thread.allocate_lock()  # (a run's BLAS place is taken and given back under it)
_lock = threading.Condition(_mutex)  # (waits for a BLAS place; ``with _mutex`` is cheaper)
_blas_runs = 0  # runs holding the BLAS setting
_shared_wide = 0  # of them, tiny runs sharing a setting of several threads (``_share_blas``)
_blas_mode = 0  # the BLAS thread count they need
_waiting_wide = 0  # runs waiting to use BLAS on several threads
_waiting = 0  # runs waiting for any reason
_saved: list[int] | None = None  # the BLAS libraries' thread counts before onyx limited them
_current: int | None = None  # BLAS's thread count as onyx last read or set it
_libs: list | None = None
_controls: list | None = None  # each BLAS library's (get, set) of its thread count


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _blas_libs() -> list:
    """The BLAS libraries' controllers (threadpoolctl's), found once: surveying them on every
    run costs more than a tiny model's run."""
    global _libs, _libs_loads
    if _libs is None:
        from . import blas_threads  # (the common case, without threadpoolctl)

        _libs_loads = blas_threads.load_count()
        _libs = blas_threads.loaded_openblas()
    if _libs is None:
        from threadpoolctl import ThreadpoolController

        _libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return _libs


_libs_loads: int | None = None  # the process's count of loaded objects when _libs was found


def refresh_blas_libs() -> None:
    """Find the BLAS libraries again at the next run if the process has loaded objects since
    they were found (called at a session's creation: scipy's OpenBLAS, loaded after a first
    run, kept its own threads otherwise), unless a run holds BLAS's setting now."""
    global _libs, _controls, _current
    if _libs is None:
        return
    from .blas_threads import load_count

    with _lock:
        if _blas_runs == 0 and _saved is None and load_count() != _libs_loads:
            _libs, _controls, _current = None, None, None


def _blas_controls() -> list:
    """Each BLAS library's (get, set) of its thread count, bound once (a run of a small model
    limits BLAS and restores it: looking the methods up at every call was a good part of the
    run slot's bookkeeping). The setter works from whichever thread runs: threadpoolctl 3.8's
    set_num_threads ignores, for OpenBLAS, a call from any thread but the first one that set
    a count, while that one lives (a run on another thread then kept BLAS's threads while
    onyx counted it limited)."""
    global _controls
    if _controls is None:
        _controls = [_openblas_functions(lib) or _methods(lib) for lib in _blas_libs()]
    return _controls


def _methods(lib) -> tuple:
    return lib.get_num_threads, getattr(lib, "_real_set_num_threads", lib.set_num_threads)


def _openblas_functions(lib) -> tuple | None:
    """OpenBLAS's own (get, set) functions on its own thread pool (what threadpoolctl calls
    for it, found through it once: its methods look the symbols up at every call), called
    keeping the GIL (a run's start and end must not hand the GIL to another thread for a
    call that takes nanoseconds); None for other libraries, OpenMP's threading layer or
    other threadpoolctl versions."""
    find = getattr(lib, "_get_symbol", None)
    if getattr(lib, "internal_api", "") != "openblas" or find is None:
        return None
    if getattr(lib, "threading_layer", "") not in ("pthreads", "disabled"):
        return None  # (OpenMP's layer: threadpoolctl sets OpenMP's count)
    try:
        get, set_ = find("openblas_get_num_threads"), find("openblas_set_num_threads")
    except Exception:  # (a threadpoolctl whose look-up works otherwise)
        return None
    if get is None or set_ is None:
        return None
    import ctypes

    def keeping_gil(function, prototype):
        return prototype(ctypes.cast(function, ctypes.c_void_p).value)

    return (
        keeping_gil(get, ctypes.PYFUNCTYPE(ctypes.c_int)),
        keeping_gil(set_, ctypes.PYFUNCTYPE(None, ctypes.c_int)),
    )


def _blas_now() -> int:
    global _current
    if _current is None:
        _current = max((get() for get, _ in _blas_controls()), default=1)
    return _current


def limit_blas(n: int) -> None:
    """Set every BLAS library to ``n`` threads, remembering the setting to restore (under
    ``_lock``; nothing to do, the common case, costs no call into the libraries)."""
    global _saved, _current
    if n == _blas_now():
        return
    controls = _blas_controls()
    if _saved is None:
        _saved = [get() for get, _ in controls]
    for _, set_threads in controls:
        set_threads(n)
    _current = n


def _restore_blas() -> None:
    global _saved, _current
    if _saved is not None:
        for (_, set_threads), had in zip(_blas_controls(), _saved):
            set_threads(had)
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


def _share_blas(n: int) -> None:
    """Wait until a tiny run (``Pace.gil_bound``) may use BLAS on ``n`` threads: beside other
    tiny runs that use it on as many (under ``_lock``). A run needing several threads runs its
    BLAS work alone so that concurrent products do not fight for the cores; a tiny run's
    products are too small for BLAS to thread (OpenBLAS splits a product only past some
    hundred thousand multiply-adds, tens of microseconds), and a tiny run holding the place
    alone made each of 8 threads wait for it at every run, woken by the last one's end (a
    small scikit-learn pipeline: 2x one thread's time). The thread count stays the session's
    own, so the results do not change; a run that waits for the place (alone, or on another
    thread count) is not passed: tiny runs overlapping one another would keep it forever."""
    global _blas_runs, _blas_mode, _shared_wide, _waiting
    while not _may_share(n):
        _waiting += 1
        _lock.wait()
        _waiting -= 1
    _blas_runs += 1
    _shared_wide += 1
    _blas_mode = n
    limit_blas(n)


def _may_share(n: int) -> bool:
    """Whether a tiny run may take a BLAS place on ``n`` threads now: free, or held by tiny
    runs on as many with nobody waiting (and no run waiting to run BLAS alone)."""
    if _waiting_wide:
        return False
    return not _blas_runs or _blas_mode == n and _shared_wide == _blas_runs and not _waiting


def _leave_blas(shared: bool = False) -> None:
    global _blas_runs, _shared_wide
    if shared and _shared_wide:  # (0 already: the run began before a fork)
        _shared_wide -= 1
    _blas_runs = max(0, _blas_runs - 1)  # (0 already: the run began before a fork)
    if _blas_runs == 0:
        _restore_blas()
        if _waiting:
            _lock.notify_all()


#: A run whose calling thread takes less CPU time than this, on average, is short. (Its
#: thread's CPU time, not the wall time: concurrent runs and other processes stretch the wall
#: time of long runs and short ones alike. Work on the native pool's or BLAS's threads does
#: not count: a run that waits for them leaves the GIL to others meanwhile.)
SHORT_RUN_SECONDS = 0.001
_turns_module = None  # (runtime/turns.py once a run has needed a turn)


def _turn_of():
    """The process's turn (turns._turns, read at each call: a fork renews it, tests swap
    it), its module imported by the first run that takes one: a process that never runs a
    second thread never loads the turn machinery."""
    module = _turns_module
    if module is None:
        module = _load_turns()
    return module._turns  # noqa: SLF001


def _load_turns():
    """Import the turn machinery, and find the switches' reader (``resource``) with it: the
    tiny runs that read their switches follow a session's first runs, which take turns, and
    an import inside a measured run would let the GIL go (file reads) in that run."""
    global _turns_module, _switches
    from . import turns

    if _switches is _first_switches:
        _switches = _switch_reader()
    _turns_module = turns
    return turns


#: the number of threads started from Python besides the main one (a C call: the check costs
#: nanoseconds, where an uncontended turn costs a microsecond)
_other_threads = getattr(_thread, "_count", lambda: 1)


#: A session measures its first runs, then one run in this many: reading a thread's CPU clock
#: is a system call, and twice a run it cost a tiny model's run a tenth of its time.
SAMPLE_EVERY = 8


#: A run of a GIL-bound session (``Pace.gil_bound``) whose calling thread spends less CPU time
#: than this, on average, takes no turn: the GIL alone orders such runs. On the quiet machine
#: (benchmarks/bench_concurrency.py --floor, 8 threads / 1 thread) a small scikit-learn
#: pipeline took 2.00 (new threads) and 1.79 (long-lived) with 150 us here, 1.33 and 1.25 with
#: turns, while each of its runs' two GIL releases (numpy's searchsorted and argmax) woke a
#: waiting thread. Its runs keep the GIL now (docs/reliability.md, "Runs that keep the GIL"):
#: then 1.11-1.13 / 1.05-1.12 against turns' 0.95-1.18 / 1.11-1.23 there (three alternating
#: pairs), about the perfect turn's 1.08-1.13 / 1.05-1.09, and on the loaded 2-core machine
#: 4-6% less CPU than turns in 5 of 6 alternating pairs (7% more in the sixth). Sessions
#: whose tiny runs still let the GIL go go back to turns (``Pace.switched``). 0 switches it off;
#: ``bench_concurrency.py --tiny S`` compares the two.
TINY_RUN_SECONDS = 0.00015


class Pace:
    """A session's recent run time (the calling thread's CPU time, an exponential average
    over the runs it measures), which decides whether its runs take turns; and whether its
    runs hold the GIL throughout (``gil_bound``: no op of the session runs on the native
    pool, whose kernels let the GIL go at every call, so that runs side by side would take it
    from each other at each one; and its tiny runs without turns were not seen losing the
    GIL midway, ``switched``)."""

    __slots__ = ("seconds", "runs", "gil_bound", "released")

    def __init__(self, gil_bound: bool = False) -> None:
        self.seconds = 0.0  # a new session's first runs take turns, and so are measured alone
        self.runs = 0
        self.gil_bound = gil_bound
        self.released = 0.0  # of its measured tiny runs, the share that lost the GIL midway

    def switched(self, lost: bool) -> None:
        """Count a measured tiny run (one without a turn): whether its thread waited midway
        (``_switches``). Runs that let the GIL go (numpy's take, argmax or FFTs, a CDLL call:
        a forest on more rows than it keeps the GIL for, a kNN, a TfIdf, a Loop's body) lose
        it at each release to a thread woken for it, and go back to turns for good: their
        turns no longer see the releases, which cost them nothing there."""
        if not self.gil_bound:  # (runs in progress as it went back to turns)
            return
        self.released += (lost - self.released) * RELEASED_WEIGHT
        if self.released > RELEASED_SHARE:
            self.gil_bound = False

    def tiny(self) -> bool:
        """Whether the session's runs go without turns: GIL-bound, measured (its first
        SAMPLE_EVERY runs, measured alone, take turns) and under TINY_RUN_SECONDS."""
        return self.gil_bound and self.seconds < TINY_RUN_SECONDS and self.runs > SAMPLE_EVERY

    def measures(self) -> bool:
        """Whether to measure the run now starting (a race between threads only shifts which
        run is measured)."""
        runs = self.runs = self.runs + 1
        return runs <= SAMPLE_EVERY or not runs % SAMPLE_EVERY

    def add(self, seconds: float) -> None:
        if self.seconds:  # (a one-off counts at most OUTLIER times the pace so far)
            seconds = min(seconds, OUTLIER * self.seconds)
        self.seconds += (seconds - self.seconds) * 0.125


#: The share of a session's measured tiny runs that lost the GIL midway (their thread waited
#: for it: ``Pace.switched``), an exponential average of RELEASED_WEIGHT a run, past which the
#: session's runs take turns again: three losses in a row (1 - (7/8)**3 = 0.33). A run that
#: lets the GIL go loses it at nearly every release while other threads wait for it and a core
#: is free to run them; one that keeps it loses it to CPython's switch interval alone (5 ms:
#: one run in a hundred of 50 us), or in bursts on a loaded machine (a coltrans pipeline: up
#: to four of its 400 measured runs in a row, 1-5% of them; an FFT model's 10-25%). A slower
#: average (1/16) kept the FFT models' rule on the loaded 2-core machine and still sent a
#: GIL-keeping pipeline back to turns once of two: sending one back only costs it the rule.
RELEASED_SHARE = 0.3
RELEASED_WEIGHT = 1 / 8


def _switch_reader():
    """The calling thread's (voluntary, involuntary) context switches so far (Linux's and the
    BSDs' RUSAGE_THREAD), or (0, 0) where the platform does not count them per thread. A
    thread waiting for the GIL that another thread took when it let it go sleeps: a voluntary
    switch. So does one holding the GIL when the system preempted it (an involuntary one): its
    waiters, kept waiting past CPython's switch interval, have it dropped as it comes back (on
    a loaded machine, a tenth of a pipeline's runs in bursts). (The call's CPU times are no
    substitute for the CPU clock: Linux updates them at its ticks, so a run's came out 0.)"""
    try:
        import resource

        who = resource.RUSAGE_THREAD
        read = resource.getrusage
        read(who)
    except (ImportError, AttributeError, OSError):  # (Windows, macOS)
        return lambda: (0, 0)

    def switches() -> tuple[int, int]:
        counts = read(who)
        return counts.ru_nvcsw, counts.ru_nivcsw

    return switches


def _first_switches() -> tuple[int, int]:
    """``_switches`` until its first call, which finds the reader (``resource``, imported only
    by a process whose tiny runs meet another thread's: a cold start without threads skips
    it) and puts it in its place."""
    global _switches
    _switches = _switch_reader()
    return _switches()


_switches = _first_switches
#: A measured tiny run reads its switches (``_switches``, a system call at each end) one time
#: in this many: every time, they cost the pipeline's runs 1.2 us a run on the loaded machine.
SWITCHES_EVERY = 4
_let_go = native._core.let_go  # noqa: SLF001  (native calls of larger inputs letting the GIL go)


#: A measured run counts in its session's Pace as at most this many times the pace so far: a
#: one-off (the plan compiling its runner at the second run: 8 ms of CPU for a one-Relu model
#: whose runs take 30 us) made a tiny session's runs count as long, side by side, for the
#: next hundred runs. A lasting change still shows within a few measured runs.
OUTLIER = 8


class run_slot:  # noqa: N801  (used as a function: ``with run_slot(threads, blas, pace):``)
    """Hold one run's place: ``threads`` is the run's native thread setting (0: every core),
    ``blas`` the BLAS thread count it needs (0: the library's setting, or None when the model
    does no BLAS work), ``pace`` the session's run time (None: the run does not take turns).
    A class, not a generator: it wraps every run of tiny models too."""

    __slots__ = ("blas", "native", "pace", "turn", "start", "shared", "token", "switches", "let_go")

    def __init__(self, threads: int, blas: int | None, pace: Pace | None = None):
        self.blas = _default_blas() if blas == 0 else blas
        # (the native pool's thread count stays the run's own: some kernels choose their
        # path by it, and a path's bits must not depend on what else runs; None: the setting
        # in force is already it, the common case; set as native.threads sets it)
        self.native = None if threads == _setting.get() else threads
        self.pace = pace
        self.turn = None
        self.shared = False  # (a tiny run sharing a BLAS setting of several threads)
        self.let_go = None  # (a measured tiny run: the library's calls letting the GIL go so far)
        self.switches = None  # (and one in SWITCHES_EVERY: its thread's context switches)

    def __enter__(self):
        pace = self.pace
        tiny = False
        # (alone: no other thread started from Python, so no other run to take turns with;
        # one that starts meanwhile overlaps this run only, as turns order runs and never
        # change their results. Taking the turn cost a one-row run a sixth of its time.
        # A tiny GIL-bound run takes none either: the GIL orders it, Pace.tiny)
        if pace is not None and pace.seconds < SHORT_RUN_SECONDS and _other_threads():
            if pace.tiny():
                tiny = True
                self.shared = bool(self.blas) and self.blas > 1
            else:
                self.turn = _turn_of()  # (the lock taken is the one released, a fork too)
                self.turn.acquire(pace.seconds)
        try:
            self._enter_resources()
        except BaseException:  # (Ctrl-C while waiting for BLAS: the turn must not stay taken)
            if self.turn is not None:
                self.turn.release(failed=True)
            raise
        self.start = time.thread_time() if pace is not None and pace.measures() else None
        if tiny and self.start is not None:  # (whether it loses the GIL midway: Pace.switched)
            self.let_go = _let_go[0]
            if not pace.runs % (SAMPLE_EVERY * SWITCHES_EVERY):
                self.switches = _switches()
        return self

    def _enter_resources(self) -> None:
        if self.blas:
            with _mutex:
                _share_blas(self.blas) if self.shared else _enter_blas(self.blas)
        try:
            if self.native is not None:
                self.token = _setting.set(self.native)
        except BaseException:
            if self.blas:
                with _mutex:
                    _leave_blas(self.shared)
            raise

    def _count_losses(self) -> None:
        """Tell the Pace whether this measured tiny run lost the GIL midway: a native call
        that let it go, or (where its switches were read) its thread waited (voluntary
        switches) twice, or once without being preempted (an involuntary switch: one wait
        after it says nothing, and the run is not counted). A run letting the GIL go at
        several calls waits at several of them, and is preempted too by the threads its
        releases woke."""
        if _let_go[0] != self.let_go:
            self.pace.switched(True)
        elif self.switches is not None:
            waited, preempted = _switches()
            waited -= self.switches[0]
            if waited > 1:
                self.pace.switched(True)
            elif preempted == self.switches[1] or not waited:
                self.pace.switched(bool(waited))

    def __exit__(self, *exc) -> None:
        if self.start is not None:
            self.pace.add(time.thread_time() - self.start)
            if self.let_go is not None:
                self._count_losses()
        if self.native is not None:
            _setting.reset(self.token)
        if self.blas:
            with _mutex:
                _leave_blas(self.shared)
        if self.turn is not None:
            self.turn.release(failed=exc[0] is not None and not issubclass(exc[0], Exception))


def _after_fork_in_child() -> None:
    """A child forked while other threads ran has none of them: their turn and their BLAS
    places would never be given back (the child's first run would wait forever)."""
    global _mutex, _lock, _blas_runs, _waiting_wide, _waiting, _shared_wide
    _mutex = _thread.allocate_lock()
    _lock = threading.Condition(_mutex)  # (turns.py renews its own turn)
    _blas_runs = _waiting_wide = _waiting = _shared_wide = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _default_blas() -> int:
    """BLAS's own thread count, as it was before onyx changed it."""
    if _saved is not None:
        return max(_saved, default=1)
    return _blas_now()
