"""Short runs take turns, process-wide. A small model's run is mostly Python's per-node dispatch,
which holds the GIL: eight threads running it at once only took the GIL from each other at
every kernel call (a context switch and a cold cache each time; 8 threads took 1.1-1.5x one
thread's time in total). Taking turns, seven of them wait in a lock, outside the GIL, while
one runs. A thread keeps the turn across its consecutive runs for a slice of time (handing it
over after every run cost a context switch or more per run, and moved runs between cores),
but not past the run that ends one of its usual streaks of runs while others wait: a thread
that had stopped calling (a server's worker back at its queue) kept the turn, and the cores
idle, for the rest of its slice. A thread handed the turn runs on the core its last holder ran
on, whose cache holds the model: the holder binds it there before waking it (``_bind``), and
a waiter that takes the turn itself moves there (``_move_to``). A session measures its runs
(``Pace``) to know whether they are short; long runs (their kernels release the GIL for their
work) run side by side. Turns order runs and nothing else: a run's results do not depend on
them, and every run runs on its caller's thread (its exceptions, its run options, its
context's settings are its caller's).

Where the native library has turn.c (Linux), waiters sleep there on a futex, without the GIL,
and the first of them watches the holder through a few shared numbers: it comes back to
Python only when the turn is handed to it or the holder has had no run in progress for
IDLE_SECONDS. Each look and nudge of a waiter sleeping on a Python lock took the GIL from the
holder and ran the waiter's Python with cold caches (as many nudges as hand-overs). A holder
whose slice is over hands the turn over as its next run starts and queues behind the others:
turn.c rings the next holder as the old one's wait begins, the GIL let go (``_turn_pass``),
so that it wakes once, to a free GIL (rung from Python, it woke to a GIL still held, slept on
it and was woken again: about 15 futex calls a hand-over, 9 now). Watched
that way, a holder that stops calling loses the turn within milliseconds whatever its slice,
so a slice is counted in its runs' time (their sessions' ``Pace``), RUN_SLICES slices long,
with a wall-clock bound of WALL_SLICES slices: other processes stretching the runs no longer
end slices early, and a job of a few milliseconds' runs no longer loses the turn mid-job.

This module is loaded on a process's first contention (``concurrency.run_slot``, when a
second thread started from Python runs a short run): a process that never runs a second
thread never imports it (a session's creation imports concurrency.py, whose turn machinery
was most of its bytecode: issue 23's cold start).
"""

from __future__ import annotations

import _thread
import array
import collections
import itertools
import os
import threading
import time

#: How long a thread keeps the turn across its consecutive short runs while others wait (its
#: first run past it hands the turn over): CPython's own switch interval for the GIL. Handing
#: the turn over after every run cost a context switch or more per run and moved runs between
#: cores; shorter slices still woke waiters often enough to cost most of that. Longer ones
#: (20 ms) cut the hand-overs, each a tenth of a millisecond of CPU or more (the woken
#: thread's caches are cold), but a holder that stops calling unforeseen then kept an idle
#: turn longer (docs/reliability.md).
SLICE_SECONDS = 0.005  # (of the holder's runs' time, ``_Turn._over``)
#: A thread that finds the turn held by a thread between runs for this long takes it at once,
#: or hands it to the first waiter and queues behind: the holder has stopped calling (a
#: server's worker gone back to wait for its next request: the request on another thread
#: waited for its slice to end), since one running short runs one after the other comes back
#: within tens of microseconds.
IDLE_SECONDS = 0.001


class _Waiter:
    """A thread waiting for the turn: rung when the turn is handed to it, or to look again
    (``_Turn._nudge``). Its bell is a lock, or with turn.c a word it sleeps on in C."""

    __slots__ = ("thread", "bell", "looks_at", "native_id", "cores", "token", "address")

    def __init__(self, thread: int) -> None:
        self.thread = thread
        if _turn_wait is None:
            self.bell = _thread.allocate_lock()
            self.bell.acquire()
        else:
            self.bell = array.array("i", (0,))  # (turn.c's word: quiet, rung or poked)
            self.address = self.bell.buffer_info()[0]
            self.token = float(next(_tokens))  # (how turn.c tells the first waiter)
        self.looks_at = 0.0  # when its wait ends for a look, if not rung before
        self.native_id = _native_id()  # (Linux's id of the thread, -1 where not needed)
        self.cores: set | None = None  # its own cores while bound to the holder's (``_bind``)

    def ring(self) -> None:
        """Wake it: the turn is its own (under ``_Turn.guard``)."""
        if _turn_wait is not None:
            _turn_ring(self.address, RUNG)
        elif self.bell.locked():  # (not if it was nudged and has not slept again)
            self.bell.release()


class _Turn:
    """The turn short runs take: held by one thread at a time, for its runs in progress and,
    until its slice ends, between them, so that a thread running short runs one after the
    other keeps the core and its cache. Waiters queue in order, each on its own lock, and the
    turn is handed to the first directly (no other waiter wakes, no thread barges in). A holder
    that stops calling cannot keep it: the run that ends one of its usual streaks hands the
    turn over (``_GiveBackAtThreadEnd`` counts the streaks), a thread arriving after it has
    been between runs for IDLE_SECONDS takes it (or, others queued, hands it to the first of
    them), once its slice ends the first waiter takes it (the first waiter's wait ends
    LATE_SECONDS after the slice), and a thread that ends gives it back. Nested runs on the
    holder's thread count its depth.

    With turn.c (Linux, the native library loaded) waiters sleep in C, without the GIL, and
    the first of them watches the holder there (``shared``, which the holder writes as its
    runs start and end while others wait): it comes back to Python only when the turn is
    handed to it or the holder has had no run in progress for IDLE_SECONDS. Its looks and
    nudges then take no GIL from the holder, so none is needed at a slice's end: a holder
    still calling hands the turn over as its next run starts."""

    __slots__ = ("guard", "owner", "depth", "deadline", "released", "queue", "core", "counts")
    __slots__ += ("shared", "shared_address", "head", "spent")

    def __init__(self) -> None:
        self.guard = _thread.allocate_lock()
        self.owner: int | None = None  # the thread holding the turn
        self.depth = 0  # its runs in progress (0: it holds the turn between runs)
        self.deadline = 0.0  # its slice's end
        self.spent = 0.0  # its runs' time in its slice so far (the sessions' Pace)
        self.released = 0.0  # when its last run ended
        self.queue: collections.deque = collections.deque()  # of _Waiter, in order
        #: the core its holder ran on as it got the turn (a waiter that takes it over moves
        #: there; read at each run's end, it cost a small pipeline's runs 0.2% more)
        self.core = -1
        #: hand-overs to a waiter, turns a waiter took after a look, and nudges so far (each
        #: wakes a thread whose caches are cold: benchmarks/bench_concurrency.py reports them)
        self.counts = [0, 0, 0]
        #: for turn.c: the holder's runs in progress, when its last one ended, the first
        #: waiter's token (0: none); written while others wait
        self.shared = array.array("d", (0.0, 0.0, 0.0))
        self.shared_address = self.shared.buffer_info()[0]
        self.head: _Waiter | None = None  # the first waiter as ``shared`` names it

    def _publish(self) -> None:
        """Tell turn.c's waiters the holder's state and the first waiter (poked if it has
        just become the first, to watch the holder) (under ``guard``, with turn.c)."""
        shared = self.shared
        shared[1], shared[0] = self.released, self.depth
        head = self.queue[0] if self.queue else None
        if head is not self.head:
            self.head = head
            shared[2] = head.token if head is not None else 0.0
            if head is not None and head.thread != _thread.get_ident():
                _turn_ring(head.address, POKED)  # (not the caller: it reads it as it waits)

    def acquire(self, cost: float = 0.0) -> None:
        """Take the turn for a run that takes ``cost`` seconds (its session's Pace)."""
        me = _thread.get_ident()
        mine = _leaving.__dict__.get("hook")
        if mine is None:
            mine = _leaving.hook = _GiveBackAtThreadEnd(me)
        now = _now()
        mine.starts(now)
        with self.guard:
            if self.owner == me and (self.depth or self._keeps(now, cost)):
                self.depth += 1
                if self.queue and _turn_wait is not None:
                    self.shared[0] = self.depth
                return
            if self.owner is None or not (self.depth or self.queue) and self._left():
                self._take(me)  # (free, or left by a thread whose slice is over or idle)
                self.spent, self.core = cost, _core()
                return
            passing = None  # (a waiter handed the turn, rung as this thread's wait begins)
            if self.owner == me:  # its slice is over and others wait: queue behind them
                passing = self._hand_over(ring=False)
            elif not self.depth and _now() - self.released >= IDLE_SECONDS:
                passing = self._hand_over(ring=False)  # (its holder has stopped calling)
            entry = _Waiter(me)
            self.queue.append(entry)
            if _turn_wait is not None:
                self._publish()
        try:
            self._wait(entry, passing)
        except BaseException:  # (no run began: the streak does not count it)
            if passing is not None:  # (interrupted before its wait rang it; rung twice: no harm)
                passing.ring()
            mine.nested -= 1
            # (an interrupt as _wait begins, before its own handler: the same, done here)
            self._leave(entry)
            _free(entry)
            raise

    def _keeps(self, now: float, cost: float) -> bool:
        """Whether the holder, between runs, keeps the turn for a run that takes ``cost``
        seconds: its slice goes on, or nobody waits (a new slice then). Its slice's end is
        read once: a run of a small pipeline takes tens of microseconds, and the bookkeeping
        of a holder with others waiting was a hundredth of it."""
        if self._over(now):
            if self.queue:
                return False
            self._new_slice()
        self.spent += cost
        return True

    def _left(self) -> bool:
        """Whether the holder, between runs, has left the turn: its slice is over, or it has
        not come back for IDLE_SECONDS."""
        now = _now()
        return self._over(now) or now - self.released >= IDLE_SECONDS

    def _over(self, now: float) -> bool:
        """Whether the holder's slice is over at ``now``: its runs took SLICE_SECONDS (by
        their sessions' Pace), or its wall-clock slice has ended."""
        return self.spent >= _run_slice() or now >= self.deadline

    def _new_slice(self) -> None:
        """A slice of SLICE_SECONDS of runs; with turn.c, of WALL_SLICES times that in wall
        time at most: other processes taking the cores stretch a slice's runs, and a slice
        ended by the wall clock alone handed the turn over two or three times as often on a
        loaded machine. (Without turn.c waiters look at the wall-clock slice's end: a holder
        that stops calling would keep the turn that much longer.)"""
        wall = SLICE_SECONDS * (WALL_SLICES if _turn_wait is not None else 1)
        self.deadline, self.spent = _now() + wall, 0.0

    def _take(self, me: int) -> None:
        self.owner, self.depth = me, 1
        self._new_slice()

    def _hand_over(self, ring: bool = True) -> _Waiter | None:
        """Give the turn to the first waiter, or to nobody (under ``guard``). With ``ring``
        false and turn.c, the waiter is not rung here but returned, for the caller's wait to
        ring as it lets the GIL go (``_wait``): rung now, it woke while this thread held the
        GIL, fought for it, slept again and was woken a second time when this thread's wait
        let it go (a hand-over at a slice's end, its old holder queueing)."""
        if not self.queue:
            self.owner, self.depth = None, 0
            return None
        entry = self.queue.popleft()
        self.counts[0] += 1
        self.core = _core()
        early = not self._over(_now())  # (its holder gave it back before its slice's end)
        self.owner, self.depth = entry.thread, 1
        self._new_slice()
        if BIND_WAITERS and (_turn_wait is not None or entry.bell.locked()):
            entry.cores = _bind(entry.native_id, self.core)  # (not if it is awake in Python)
        later = not ring and _turn_wait is not None and _turn_pass is not None
        if not later:
            entry.ring()
        if _turn_wait is not None:
            self._publish()  # (the next waiter watches its new holder)
        elif self.queue:
            self._nudge(self.queue[0], early)
        return entry if later else None

    def _nudge(self, first: _Waiter, early: bool = True) -> None:
        """Wake the new first waiter if it sleeps past the look its new place calls for (its
        patience counted on the holders before it using their whole slices, and one handed
        the turn over ``early``): else a holder that stops calling unforeseen could keep the
        turn, the cores idle, for as many slices as the waiter had holders before it. The
        waiter looks, and sleeps again for its new patience. After a hand-over at the end of
        its slice the waiter's look is on time if it comes within the margin its patience
        allowed (one slice at most): it is woken only if it sleeps past that (an early
        hand-over before, when it was not the first); waking it at every hand-over cost two
        thirds of the hand-overs a look that found the turn taken."""
        late = 2 * LATE_SECONDS if early else max(SLICE_SECONDS, LATE_SECONDS) + LATE_SECONDS
        if first.looks_at > self.deadline + late and first.bell.locked():
            first.bell.release()
            self.counts[2] += 1

    def _wait(self, entry: _Waiter, passing: _Waiter | None = None) -> None:
        """Wait until the turn is the waiter ``entry``'s; ``passing``, a waiter this thread
        has just handed the turn to, is rung by turn.c as the wait begins, the GIL let go."""
        try:
            while True:
                if _turn_wait is None:
                    entry.bell.acquire(timeout=self._patience(entry))  # (handed, or timed out)
                else:  # (handed over, the holder idle, a signal, or a check now and then)
                    until = _now() + CHECK_SECONDS
                    poll = max(SLICE_SECONDS, IDLE_SECONDS)
                    if passing is not None:
                        ended = _turn_pass(passing.address, entry.address, self.shared_address,
                                           entry.token, IDLE_SECONDS, poll, until)  # fmt: skip
                        passing = None
                    else:
                        ended = _turn_wait(entry.address, self.shared_address, entry.token,
                                           IDLE_SECONDS, poll, until)  # fmt: skip
                    if ended < 0:  # (arguments turn.c refused: a patched setting; no spinning)
                        time.sleep(LATE_SECONDS)
                if self._served(entry):
                    if entry.cores is None:  # (not bound to the holder's core: moved there)
                        _move_to(self.core)
                    return
        except BaseException:  # (Ctrl-C while waiting)
            self._leave(entry)
            raise
        finally:
            if passing is not None:  # (not rung by turn.c: an interrupt before its call)
                passing.ring()
            _free(entry)

    def _leave(self, entry: _Waiter) -> None:
        """An interrupted waiter leaves: the turn, if handed to it, goes on; else it leaves
        the queue (nothing left to do when it has already)."""
        with self.guard:
            if self.owner == entry.thread:
                self._hand_over()
            elif entry in self.queue:
                self.queue.remove(entry)
                if _turn_wait is not None:
                    self._publish()

    def _patience(self, entry: _Waiter) -> float:
        """How long a waiter waits before it looks whether the holder left the turn: until
        its turn would come if every holder before it used its whole slice, plus
        LATE_SECONDS per holder, one slice at most (the holders hand it over sooner, and
        wake it; a waiter whose look would come late, after an early hand-over, is nudged to
        look when its new place calls for). A holder whose slice ends mid-run hands the turn
        over as its next run starts, within LATE_SECONDS if it goes on calling: a look sooner
        would find it running (and take the GIL from it for nothing: half the hand-overs were
        preceded by one). The first waiter's wait ends then, or one slice later if the holder
        runs past it (its next run will hand the turn over: one look per slice, not a poll): a
        holder that stopped calling keeps it two slices at most."""
        with self.guard:
            place = self.queue.index(entry) if entry in self.queue else 0
            now = _now()
            left = self.deadline - now
            margin = min((place + 1) * LATE_SECONDS, max(SLICE_SECONDS, LATE_SECONDS))
            wait = (left if left > 0 else SLICE_SECONDS) + place * SLICE_SECONDS + margin
            entry.looks_at = now + wait
        return wait

    def _served(self, entry: _Waiter) -> bool:
        """Whether the waiter has the turn, handed over or taken from a holder that left it
        (its slice over, no run in progress)."""
        me = entry.thread
        with self.guard:
            if self.owner == me:
                return True
            if self.queue and self.queue[0] is entry and not self.depth and self._left():
                self.queue.popleft()
                self._take(me)
                self.counts[1] += 1
                if _turn_wait is not None:
                    self._publish()
                elif self.queue:
                    self._nudge(self.queue[0])
                return True
            return False

    def release(self, failed: bool = False) -> None:
        """End a run; the turn stays with its thread until its slice ends, unless the run
        failed (Ctrl-C, say: the thread may never run again) or, others waiting, it ends the
        thread's usual streak of runs (it will most likely not come back soon). With nobody
        waiting, a run ending a usual streak leaves the turn with its thread but idle: a run
        arriving on another thread takes it at once, where it waited IDLE_SECONDS (a
        server's next request on another worker, a benchmark's next round; and woken, its
        caches cold). (Giving the turn up at a usual streak's end with nobody waiting was
        measured and left: a thread whose streak went on then queued behind the threads
        that arrived meanwhile. Idle, the thread back first keeps it.)"""
        now = _now()
        mine = _leaving.__dict__.get("hook")
        streak_over = mine is not None and mine.ends(now)
        with self.guard:
            if self.owner != _thread.get_ident():
                return  # (taken from it, or a fork in between)
            self.depth -= 1
            # (a run that likely ends its thread's streak, nobody waiting: the turn counts
            # as idle at once, so that a run arriving on another thread takes it now instead
            # of waiting IDLE_SECONDS for nothing; the thread, back sooner, keeps it)
            self.released = now - IDLE_SECONDS if streak_over else now
            if self.queue and _turn_wait is not None:  # (its end, then idle: for turn.c's
                shared = self.shared  # watcher; the first waiter is the same, not published)
                shared[1], shared[0] = self.released, self.depth
            if self.depth <= 0 and (failed or streak_over and self.queue):
                if streak_over and self.queue:  # (a failed run's hand-over to nobody: no guess)
                    mine.gave_up_at = mine.runs  # (forgotten if it comes straight back)
                self._hand_over()  # (else its next run hands it over once its slice ends)

    def give_back(self, thread: int) -> None:
        with self.guard:
            if self.owner == thread and not self.depth:
                self._hand_over()


class _GiveBackAtThreadEnd:
    """Lives in a thread's locals: when the thread ends, the turn it kept goes on. It also
    counts the thread's streaks of short runs (runs less than IDLE_SECONDS apart), so that
    the turn's holder can tell that a run likely ends a streak: a server's worker making one
    run per request, a loop making N runs per job. It remembers the lengths of the thread's
    last few streaks, not only the last one: a thread whose jobs alternate between two sizes
    (a benchmark's rounds of 1600 runs on one thread and 200 on each of 8) otherwise missed
    the end of every other job and kept the turn, the cores idle, for the rest of its slice.
    The last few, repeats included, so that a length seen once ages out: kept while it was
    one of the last few distinct lengths, a one-off (a warm-up's single run) stayed for good
    among jobs of recurring sizes, and the first run of every later job handed the turn
    over, and woke the waiter behind the next holder (a hand-over and a nudge per job).
    A length whose predicted end gave the turn to a waiter for nothing (the thread came
    straight back for its next run, and queued behind the others) is forgotten at once: the
    benchmark's warm-ups of one run made each long-lived worker hand the turn over after the
    first run of each of its next jobs (6-7 extra hand-overs a round of 8 jobs), until four
    jobs had aged the one-off out. A length run past with nobody waiting costs nothing and
    stays (jobs alternating between two sizes). A length predicts a streak's end once it
    recurs (STREAK_REPEATS of the last few): a thread preempted between two runs for more
    than IDLE_SECONDS (on a loaded machine, several times a round of 8 jobs) ends a streak
    that goes on, and its two pieces, once remembered, made the thread's next jobs hand the
    turn over midway (and queue again behind the others), where a piece's length rarely
    comes back."""

    __slots__ = ("thread", "nested", "last", "runs", "_usual", "predicted", "gave_up_at")

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self.nested = 0  # the thread's runs in progress
        self.last = 0.0  # when its last run ended
        self.runs = 0  # runs in its current streak
        self.usual = ()  # the lengths of its last streaks, newest first
        self.gave_up_at = 0  # the streak's length when it gave the turn up as predicted

    @property
    def usual(self) -> tuple[int, ...]:
        return self._usual

    @usual.setter
    def usual(self, lengths: tuple[int, ...]) -> None:
        self._usual = lengths
        #: the lengths that predict a streak's end (read at every run's end)
        self.predicted = frozenset(n for n in lengths if lengths.count(n) >= STREAK_REPEATS)

    def starts(self, now: float) -> None:
        if not self.nested:
            if now - self.last >= IDLE_SECONDS and self.runs:
                self._ended_streak()  # (back after a pause: a new streak)
            elif self.gave_up_at and self.gave_up_at == self.runs:  # (a wrong prediction)
                self.usual = tuple(n for n in self.usual if n != self.runs)
            self.gave_up_at = 0
            self.runs += 1
        self.nested += 1

    def _ended_streak(self) -> None:
        runs = self.runs
        self.usual = (runs, *self.usual[: STREAKS_KEPT - 1])
        self.runs = 0

    def ends(self, now: float) -> bool:
        """Count a run's end; whether it likely ends the thread's streak (a length the
        thread's recent streaks had)."""
        self.nested = max(0, self.nested - 1)
        if self.nested:
            return False
        self.last = now
        return self.runs in self.predicted  # (past them all: the slice decides)

    def __del__(self) -> None:
        turns = globals().get("_turns")  # (None at the interpreter's exit)
        if turns is not None:
            turns.give_back(self.thread)


#: How late after its slice's end a holder still calling hands the turn over (its run in
#: progress ends, its next one starts): a short run and its caller's work between runs.
LATE_SECONDS = 0.001
#: With turn.c, a slice's wall-clock length at most, in SLICE_SECONDS (``_Turn._new_slice``).
WALL_SLICES = 8
#: With turn.c, a slice's length in its runs' time, in SLICE_SECONDS (``_Turn._over``). Each
#: hand-over cost the threads about ten futex calls (the waiter's wake, the GIL fought over
#: by the old holder, the new one and the caller's thread); a 100-run job of a 37-us model
#: outlasted a 5-ms slice (its runs' Pace, cold runs included, near 50 us), and a slice ending
#: mid-job added a hand-over and a wait for its thread. The watcher still looks every
#: SLICE_SECONDS, so a holder that stops calling loses the turn as soon as before. (Without
#: turn.c a waiter looks at the slice's end: a longer slice would keep an idle turn longer.)
RUN_SLICES = 2


def _run_slice() -> float:
    return SLICE_SECONDS * (RUN_SLICES if _turn_wait is not None else 1)


#: With turn.c, how long a waiter sleeps in C at most before it looks in Python whether it
#: has been served (it is woken sooner when it is, or when the holder is idle): a safety net.
CHECK_SECONDS = 1.0
#: How many of a thread's last streak lengths it remembers, and how many of them must have a
#: length for it to predict the end of a streak (``_GiveBackAtThreadEnd``). A wrong prediction
#: costs a hand-over (the thread queues again behind the others) when others wait.
STREAKS_KEPT = 6
STREAK_REPEATS = 2

_now = time.monotonic


def _core_reader():
    """libc's sched_getcpu (the core the calling thread runs on), or a stand-in saying -1.
    Called keeping the GIL (PyDLL): it takes nanoseconds, and a thread ending a run must not
    hand the GIL to a waiter for it."""
    try:
        import ctypes

        read = ctypes.PyDLL(None).sched_getcpu
        read.restype, read.argtypes = ctypes.c_int, []
        return read
    except Exception:  # (no such function, or no C library to ask: Windows, macOS)
        return lambda: -1


_core = _core_reader()


def _move_to(core: int) -> None:
    """Move the calling thread, which has just taken the turn without being bound there
    (``_bind``), to ``core``, the one its last holder ran on: the model's weights and the
    runs' buffers are in that core's cache. Linux wakes a waiter on an idle core, so on two
    cores nearly every hand-over moved the runs to the other core, whose first runs read it
    all from the shared cache: a hand-over cost several times what it cost with the process
    pinned to one core. The thread is bound to that core alone and at once let free again
    (the first call moves it; it stays there until the scheduler has a reason to move it).
    Not where the thread may run on one core only, or the core is not among its own."""
    if core < 0 or _core() == core:
        return
    try:
        allowed = os.sched_getaffinity(0)
        if core in allowed and len(allowed) > 1:
            try:
                os.sched_setaffinity(0, (core,))
            finally:  # (its own cores back, a Ctrl-C between the two calls too)
                os.sched_setaffinity(0, allowed)
    except (AttributeError, OSError):  # (no affinity here, or the core went away)
        pass


#: Whether a holder binds the waiter it hands the turn to to its own core (``_bind``).
BIND_WAITERS = True


def _bind(thread: int, core: int) -> set | None:
    """Bind ``thread`` (Linux's id), a waiter about to be handed the turn, to ``core``, its
    holder's: Linux then wakes it on the core the holder is leaving, a context switch there,
    where a waiter free to run anywhere was woken on the idle core (an interrupt to wake that
    core, the runs' data read again from the shared cache; ``_move_to`` moved it back).
    Returns the thread's own cores, which it gives itself back as it wakes (``_unbind``), or
    None where it is not bound (no affinity here, the core not among its own, one core)."""
    if core < 0 or thread < 0:
        return None
    try:
        free = os.sched_getaffinity(thread)
        if core not in free or len(free) < 2:
            return None
        os.sched_setaffinity(thread, (core,))
    except (AttributeError, OSError):  # (no affinity here, or the core went away)
        return None
    return free


def _unbind(free: set) -> None:
    try:
        os.sched_setaffinity(0, free)
    except (AttributeError, OSError):
        pass


def _free(entry: _Waiter) -> None:
    """Give the calling thread, the waiter ``entry``, its own cores back if a holder bound it
    to its core (``_bind``)."""
    if entry.cores is not None:
        _unbind(entry.cores)
        entry.cores = None


def _native_id() -> int:
    return threading.get_native_id() if BIND_WAITERS and _NATIVE_IDS else -1


_NATIVE_IDS = hasattr(threading, "get_native_id") and hasattr(os, "sched_setaffinity")


_leaving = threading.local()


def _turn_native():
    """turn.c's (wait, ring, pass), or Nones: waiters sleep on locks in Python (pass alone
    None: a holder handing the turn over rings the waiter from Python)."""
    if os.environ.get("ONYX_NATIVE_TURN", "1") == "0":
        return None, None, None
    from .native import turn_functions, turn_pass

    functions = turn_functions()
    return (*functions, turn_pass()) if functions else (None, None, None)


_turn_wait, _turn_ring, _turn_pass = _turn_native()
RUNG, POKED = 1, 2  # (turn.c's words)
_tokens = itertools.count(1)
_turns = _Turn()


def _after_fork_in_child() -> None:
    """A child forked while another thread held the turn has no such thread: its turn would
    never be given back (the child's first short run would wait forever)."""
    global _turns
    _turns = _Turn()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
