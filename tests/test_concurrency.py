"""Concurrent runs (onyx/runtime/concurrency.py): short runs take turns, long ones run side by
side, and a child forked while another thread runs is not left waiting for that run."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
from onyx.runtime import concurrency, turns

THREADS = 4
#: The session's attributes the tests watch: its plan (whose run, on the full path and the
#: fast one, is inside the run slot), and its Pace.
PLAN, PACE = "_plan", "_pace"


@pytest.fixture(autouse=True)
def _as_if_other_threads_ran(monkeypatch):
    """Some tests here watch the main thread's runs take turns before other threads start: a
    run alone takes none (concurrency._other_threads)."""
    monkeypatch.setattr(concurrency, "_other_threads", lambda: 1)


@pytest.fixture
def lock_bells(monkeypatch):
    """Waiters sleep on Python locks and look in Python (without turn.c, or ONYX_NATIVE=0)."""
    monkeypatch.setattr(turns, "_turn_wait", None)


#: Whether waiters sleep in C (turn.c) by default here.
NATIVE_BELLS = turns._turn_wait is not None  # noqa: SLF001
needs_native_bells = pytest.mark.skipif(not NATIVE_BELLS, reason="no turn.c here")


def _relu_session(gil_bound: bool = False) -> onyx.InferenceSession:
    """A one-Relu session; taking turns however tiny its runs unless ``gil_bound`` (its
    own Pace says it is: no op on the native pool; the turns' tests watch the turns)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    assert getattr(sess, PACE).gil_bound  # (Relu: numpy's, holding the GIL)
    getattr(sess, PACE).gil_bound = gil_bound
    return sess


def _most_at_once(sess, inside=lambda: time.sleep(0.005)) -> int:
    """The most runs of ``sess`` in progress at once, THREADS threads running it 3 times each
    (``inside`` is called within every run: a sleep leaves the GIL to the others)."""
    plan_run, counts, guard = getattr(sess, PLAN).run, [0, 0], threading.Lock()

    def run_plan(*args, **kwargs):
        with guard:
            counts[0] += 1
            counts[1] = max(counts)
        try:
            inside()
            return plan_run(*args, **kwargs)
        finally:
            with guard:
                counts[0] -= 1

    getattr(sess, PLAN).run = run_plan
    x = {"x": np.ones((2, 3), np.float32)}
    threads = [
        threading.Thread(target=lambda: [sess.run(None, x) for _ in range(3)])
        for _ in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts[1]


def test_short_runs_take_turns():
    sess = _relu_session()
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert 0 < getattr(sess, PACE).seconds < concurrency.SHORT_RUN_SECONDS  # its thread's CPU time
    assert _most_at_once(sess) == 1


def test_without_turns_short_runs_overlap(monkeypatch):
    """(the check above can fail: short runs overlap once turns are off)"""
    monkeypatch.setattr(concurrency, "SHORT_RUN_SECONDS", 0.0)
    assert _most_at_once(_relu_session()) > 1


def test_a_run_alone_takes_no_turn_and_one_beside_another_thread_does(monkeypatch):
    taken = []

    class Turns:
        def acquire(self, cost=0.0):
            taken.append(1)

        def release(self, failed=False):
            pass

    monkeypatch.setattr(turns, "_turns", Turns())
    sess, x = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    monkeypatch.setattr(concurrency, "_other_threads", lambda: 0)
    sess.run(None, x)
    assert taken == []
    monkeypatch.setattr(concurrency, "_other_threads", lambda: 1)
    sess.run(None, x)
    assert taken == [1]


@pytest.fixture
def tiny_rule(monkeypatch):
    """Tiny runs without turns at 150 us (the default: concurrency.TINY_RUN_SECONDS)."""
    monkeypatch.setattr(concurrency, "TINY_RUN_SECONDS", 0.00015)


def test_tiny_runs_of_a_gil_bound_session_take_no_turn_by_default():
    """(the quiet machine measured the GIL alone about as fast as a perfect turn and steadier
    than turns, once the runs kept the GIL: concurrency.py); 0 switches the rule off"""
    assert _tiny_pace(seconds=1e-6).tiny()
    assert not _tiny_pace(seconds=concurrency.SHORT_RUN_SECONDS / 2).tiny()


def test_tiny_runs_of_a_gil_bound_session_take_no_turn(tiny_rule):
    """The GIL orders them: a turn only added its hand-overs (Pace.tiny)."""
    sess, x = _relu_session(gil_bound=True), {"x": np.ones((2, 3), np.float32)}
    for _ in range(concurrency.SAMPLE_EVERY + 1):  # (its first runs, measured, take turns)
        sess.run(None, x)
    assert getattr(sess, PACE).seconds < concurrency.TINY_RUN_SECONDS
    assert _most_at_once(sess) > 1  # (a sleep inside each run leaves the GIL to the others)


def test_a_gil_bound_sessions_first_and_longer_runs_take_turns():
    sess = _relu_session(gil_bound=True)
    assert _most_at_once(sess) == 1  # (its first runs: not yet measured)
    pace = getattr(sess, PACE)
    # (short, not tiny; and stays so: 12 runs, one in 8 measured, each counting 1/8)
    pace.seconds, pace.runs = concurrency.SHORT_RUN_SECONDS / 2, 100
    assert _most_at_once(sess) == 1


def test_a_session_with_ops_on_the_native_pool_is_not_gil_bound():
    """Their kernels let the GIL go at every call: side by side, runs would take it from
    each other at each one, so their short runs take turns however tiny."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 3, 3], [1.0] * 9)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert not getattr(onyx.InferenceSession(model.SerializeToString()), PACE).gil_bound


def _tiny_pace(seconds: float | None = None) -> concurrency.Pace:
    pace = concurrency.Pace(gil_bound=True)
    pace.seconds = concurrency.TINY_RUN_SECONDS / 10 if seconds is None else seconds
    pace.runs = 100
    return pace


def _inside_at_once(slots: list, timeout: float = 2.0) -> int:
    """How many of ``slots`` (run_slot arguments, each on a thread of its own) were in
    progress at once, each staying inside until all are in or ``timeout`` passes."""
    inside, guard, most = [0], threading.Lock(), [0]
    everyone = threading.Barrier(len(slots))

    def run(args):
        with concurrency.run_slot(*args):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            try:
                everyone.wait(timeout=timeout)
            except threading.BrokenBarrierError:
                pass
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=run, args=(args,)) for args in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return most[0]


def test_tiny_runs_share_a_blas_setting_of_several_threads(tiny_rule):
    """Their products are too small for BLAS to thread; alone each, every run waited for the
    last one's end. The setting stays the session's own."""
    assert _inside_at_once([(1, 2, _tiny_pace()) for _ in range(3)]) == 3


def test_a_run_needing_several_blas_threads_alone_still_runs_alone():
    long_pace = concurrency.Pace(gil_bound=True)
    long_pace.seconds, long_pace.runs = 1.0, 100
    # (a long run beside tiny ones, and two long ones: one at a time)
    assert _inside_at_once([(1, 2, long_pace), (1, 2, _tiny_pace())], timeout=0.3) == 1
    assert _inside_at_once([(1, 2, long_pace), (1, 2, long_pace)], timeout=0.3) == 1
    assert concurrency._blas_runs == concurrency._shared_wide == 0  # noqa: SLF001


def test_tiny_runs_sharing_blas_do_not_join_while_a_run_waits_for_another_setting(tiny_rule):
    """(tiny runs overlapping one another would otherwise keep BLAS's setting forever; once
    the setting is free, whoever comes first takes it, as before)"""
    beside, holding, release = {}, threading.Event(), threading.Event()

    def run(name, args, inside=lambda: None):
        with concurrency.run_slot(*args):
            beside[name] = concurrency._blas_runs  # noqa: SLF001 (runs holding BLAS now)
            inside()

    def held():
        holding.set()
        release.wait(timeout=5)

    first = threading.Thread(target=run, args=("tiny", (1, 2, _tiny_pace()), held))
    first.start()
    holding.wait(timeout=5)
    narrow = threading.Thread(target=run, args=("one thread", (1, 1, concurrency.Pace())))
    narrow.start()
    while not concurrency._waiting:  # noqa: SLF001 (until it waits for BLAS's setting)
        time.sleep(0.001)
    late = threading.Thread(target=run, args=("tiny late", (1, 2, _tiny_pace())))
    late.start()
    time.sleep(0.05)
    assert "tiny late" not in beside  # (it waits too)
    release.set()
    for t in (first, narrow, late):
        t.join(timeout=5)
    assert beside == {"tiny": 1, "one thread": 1, "tiny late": 1}


def test_long_runs_run_side_by_side():
    sess = _relu_session()
    getattr(
        sess, PACE
    ).seconds = 1.0  # as if its runs were long (and stay so: a sleep takes no CPU)
    everyone = threading.Barrier(THREADS)
    # every thread gets inside a run before any may leave: all THREADS runs are in progress
    assert _most_at_once(sess, lambda: everyone.wait(timeout=30)) == THREADS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_during_another_threads_short_run_runs_too():
    sess = _relu_session()
    x = {"x": np.ones((2, 3), np.float32)}
    sess.run(None, x)
    inside, leave = threading.Event(), threading.Event()
    plan_run = getattr(sess, PLAN).run

    def held(*args, **kwargs):
        inside.set()
        leave.wait(30)
        return plan_run(*args, **kwargs)

    getattr(sess, PLAN).run = held
    holder = threading.Thread(target=sess.run, args=(None, x))
    holder.start()
    try:
        assert inside.wait(30)  # the other thread's run holds the turn
        pid = os.fork()
        if pid == 0:
            getattr(sess, PLAN).run = plan_run
            code = 0 if sess.run(None, x)[0].tolist() == [[1.0] * 3] * 2 else 1
            os._exit(code)
        for _ in range(300):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child waited for a run of a thread it does not have")
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        leave.set()
        holder.join()


def test_a_run_on_another_thread_limits_blas_too():
    """A run sets BLAS's thread count from its own thread: threadpoolctl ignores a count set
    from any thread but the first that set one, and onyx would count BLAS limited when not."""
    if concurrency._default_blas() < 2:  # noqa: SLF001 (the setting before onyx's runs)
        pytest.skip("BLAS runs on one thread here already")
    libs = concurrency._blas_libs()  # noqa: SLF001 (the controllers onyx sets)
    seen = []
    with concurrency.run_slot(0, 1):  # the main thread sets a count first
        seen.append(max(lib.get_num_threads() for lib in libs))

    def run():
        with concurrency.run_slot(0, 1):
            seen.append(max(lib.get_num_threads() for lib in libs))

    # (the main thread, which set a count first, lives on while the other runs)
    other = threading.Thread(target=run)
    other.start()
    other.join()
    assert seen == [1, 1]
    assert max(lib.get_num_threads() for lib in libs) == concurrency._default_blas()  # noqa: SLF001


def test_an_interrupted_wait_for_blas_gives_the_turn_back(monkeypatch):
    """Ctrl-C while a short run waits for its BLAS place: the turn must not stay taken (every
    later short run of the process would wait for it forever)."""

    def interrupted(n):
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrency, "_enter_blas", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with concurrency.run_slot(1, 1, concurrency.Pace()):
            pass
    ran = []

    def short_run():
        with concurrency.run_slot(1, None, concurrency.Pace()):
            ran.append(True)

    other = threading.Thread(target=short_run, daemon=True)
    other.start()
    other.join(timeout=5)
    assert ran == [True]


def _short_run_on_another_thread() -> float:
    """Seconds a short run on a new thread waited for its turn (at most 5)."""
    ran = []

    def short_run():
        start = time.perf_counter()
        with concurrency.run_slot(1, None, concurrency.Pace()):
            ran.append(time.perf_counter() - start)

    other = threading.Thread(target=short_run, daemon=True)
    other.start()
    other.join(timeout=5)
    return ran[0] if ran else 5.0


def test_a_thread_keeps_the_turn_between_its_runs_for_one_slice(monkeypatch, lock_bells):
    """(a waiter already queued looks once the holder's slice ends; turn.c's waiter watches
    for an idle holder instead: test_concurrency_runs)"""
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.2)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 60.0)  # (no idle take-over: a slow start)
    with concurrency.run_slot(1, None, concurrency.Pace()):
        pass
    turn = turns._turns  # noqa: SLF001
    assert turn.owner == threading.get_ident() and turn.depth == 0  # kept between runs
    waited = _short_run_on_another_thread()  # the holder stopped calling: taken after a slice
    assert 0.1 < waited < 2
    assert turn.owner != threading.get_ident()


@pytest.mark.parametrize("bells", ["locks", "native"])
def test_a_holder_past_its_slice_hands_the_turn_to_a_waiter(monkeypatch, bells):
    """(runs that sleep: their CPU time, which Pace counts, does not end the slice; its wall
    time does, one slice long here with turn.c too)"""
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.05)
    monkeypatch.setattr(turns, "WALL_SLICES", 1)
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    order = []

    def runs(name):
        for _ in range(3):
            with concurrency.run_slot(1, None, concurrency.Pace()):
                order.append(name)
                time.sleep(0.03)  # (a run longer than half a slice: two runs use it up)

    threads = [threading.Thread(target=runs, args=(k,)) for k in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(order) == list("aaabbb")
    assert order not in (list("aaabbb"), list("bbbaaa"))  # neither kept the turn throughout


def test_a_thread_that_ends_gives_its_turn_back(monkeypatch):
    monkeypatch.setattr(turns, "SLICE_SECONDS", 60.0)

    def short_run():
        with concurrency.run_slot(1, None, concurrency.Pace()):
            pass

    ended = threading.Thread(target=short_run)
    ended.start()
    ended.join()
    assert turns._turns.owner is None  # noqa: SLF001  (a new thread may reuse its id)


@pytest.mark.parametrize("bells", ["locks", pytest.param("native", marks=needs_native_bells)])
def test_an_interrupted_wait_for_the_turn_leaves_the_queue(monkeypatch, bells):
    monkeypatch.setattr(turns, "SLICE_SECONDS", 60.0)
    turn = turns._turns  # noqa: SLF001
    holding, done = threading.Event(), threading.Event()

    def holder():
        with concurrency.run_slot(1, None, concurrency.Pace()):
            holding.set()
            done.wait(10)

    other = threading.Thread(target=holder)
    other.start()
    assert holding.wait(10)

    class Interrupted(BaseException):
        pass

    def interrupted(*args):  # (Ctrl-C as the wait begins)
        raise Interrupted

    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
        monkeypatch.setattr(turns._Turn, "_patience", interrupted)  # noqa: SLF001
    else:
        monkeypatch.setattr(turns, "_turn_wait", interrupted)
    entry = turns._Waiter(threading.get_ident())  # noqa: SLF001
    turn.queue.append(entry)
    with pytest.raises(Interrupted):
        turn._wait(entry)  # noqa: SLF001
    assert entry not in turn.queue
    done.set()
    other.join()
    monkeypatch.undo()
    assert _short_run_on_another_thread() < 2


@pytest.mark.parametrize("bells", ["locks", "native"])
def test_a_slice_ends_once_its_runs_took_a_slice_of_time(monkeypatch, bells):
    """Runs of 20 ms each (their sessions' Pace) in slices of 50 ms (RUN_SLICES times that
    with turn.c): the holder hands the turn to the waiter as its 4th run starts (with turn.c
    its 6th), though the wall clock (each run takes microseconds here; the wall-clock slice
    made 10**6 times longer for turn.c) has not ended its slice (a slice of wall time only:
    the check can fail)."""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.05)
    monkeypatch.setattr(turns, "WALL_SLICES", 10**6)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 60.0)
    # (this thread's streaks start afresh: lengths learnt in earlier tests' runs predicted
    # the end of one here, and the turn went over at the 4th run)
    monkeypatch.setattr(turns._leaving, "hook", None, raising=False)  # noqa: SLF001
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    turn, got, stay = turns._turns, [], threading.Event()  # noqa: SLF001
    stay.set()  # (the waiter's thread ends after its run: the turn comes back)
    turn.acquire(0.02)
    waiter = _queue_on_another_thread(turn, got, stay)
    turn.release()
    runs = 1
    while not got and runs < 10:
        turn.acquire(0.02)
        runs += 1
        turn.release()
    waiter.join(10)
    native = turns._turn_wait is not None  # noqa: SLF001
    slice_runs = 0.05 * (turns.RUN_SLICES if native else 1) / 0.02
    assert runs == 1 + math.ceil(slice_runs) and got and got[0][1] != threading.get_ident()


def _bench_concurrency():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    try:
        import bench_concurrency
    finally:
        sys.path.pop(0)
    return bench_concurrency


def test_the_benchmarks_long_lived_threads_serve_every_round():
    """(its steady-state figure: a server's worker threads, not new ones each round)"""
    bench = _bench_concurrency()
    sess, feeds = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    run, threads = sess.run, set()

    def recorded(*args):
        threads.add(threading.current_thread())
        return run(*args)

    sess.run = recorded
    workers = bench.Workers(sess, feeds, 3)
    for _ in range(2):
        *_, results = bench.run_threads(sess, feeds, 6, 3, workers)
        assert bench.identical([r for got in results for r in got], [run(None, feeds)[0]] * 6)
    workers.close()
    assert len(threads) == 3
    bench.run_threads(sess, feeds, 6, 3)  # new threads
    assert len(threads) == 6


def test_the_benchmarks_long_lived_threads_reach_the_steady_state_before_timed_rounds(
    monkeypatch,
):
    """(the turn predicts a job's end once its length recurs: long-lived threads first make
    two untimed rounds of the timed shape, so that the first timed ones are not its learning)"""
    bench = _bench_concurrency()
    sess, feeds = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    calls, run_threads = [], bench.run_threads

    def recorded(sess, feeds, runs, threads, workers=None):
        calls.append((runs, threads, workers is not None))
        return run_threads(sess, feeds, runs, threads, workers)

    monkeypatch.setattr(bench, "run_threads", recorded)
    bench.compare(sess, feeds, runs=6, threads=3, rounds=1, warm=True)
    assert calls == [(3, 3, True), (6, 3, True), (6, 3, True), (6, 1, True), (6, 3, True)]
    calls.clear()
    bench.compare(sess, feeds, runs=6, threads=3, rounds=1)  # (new threads: nothing to learn)
    assert calls == [(3, 3, False), (6, 1, False), (6, 3, False)]
    calls.clear()
    bench.compare(sess, feeds, runs=6, threads=3, rounds=1, warm=True, warm_rounds=0)
    assert calls == [(3, 3, True), (6, 1, True), (6, 3, True)]


def test_the_benchmarks_floor_runs_its_threads_jobs_one_at_a_time():
    """(--floor: a perfect turn's stand-in, its runs pure Python, its jobs serialized)"""
    bench = _bench_concurrency()
    sess, feeds = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    stand_in = bench.StandIn(sess, feeds, runs=5)
    run, inside, most = stand_in.run, [0], [0]

    def recorded(*args):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.001)  # (lets the GIL go: jobs not serialized would overlap here)
        inside[0] -= 1
        return run(*args)

    stand_in.run = recorded
    *_, results = bench.run_threads(stand_in, feeds, 12, 4)
    assert len(results) == 12 and most[0] == 1 and stand_in.loops >= 1


def test_the_benchmarks_perfect_turn_runs_the_session_serialized_without_turns():
    """(--floor's second row: the session's own runs, its jobs one at a time, no turn taken)"""
    bench = _bench_concurrency()
    sess, feeds = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    perfect, taken = bench.PerfectTurn(sess), []
    acquire = turns._Turn.acquire  # noqa: SLF001

    def counted(self, *args):
        taken.append(1)
        return acquire(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(turns._Turn, "acquire", counted)  # noqa: SLF001
        with bench.turns_off():
            *_, results = bench.run_threads(perfect, feeds, 12, 4)
        assert len(results) == 12 and not taken
        bench.run_threads(perfect, feeds, 4, 2)  # (turns back on)
        assert taken
    assert bench.identical([r for got in results for r in got], [sess.run(None, feeds)[0]] * 12)


def test_the_benchmarks_run_queue_runs_queued_runs_back_to_back_on_the_running_thread():
    """(--run-queue's row: runs one at a time, a queued run made by the running thread, and
    its results, bit for bit, to its own caller)"""
    bench = _bench_concurrency()
    sess, feeds = _relu_session(), {"x": np.ones((2, 3), np.float32)}
    run, inside, most, made = sess.run, [0], [0], {}

    class Recorded:
        def run(self, *args):
            me = threading.get_ident()
            made[me] = made.get(me, 0) + 1
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.002)  # (lets the GIL go: the other threads queue meanwhile)
            inside[0] -= 1
            return run(*args)

    with bench.turns_off():
        *_, results = bench.run_threads(bench.RunQueue(Recorded()), feeds, 24, 4)
    assert len(results) == 24 and most[0] == 1
    assert max(made.values()) > 6  # (a thread made others' runs: 6 of its own each)
    assert bench.identical([r for got in results for r in got], [run(None, feeds)[0]] * 24)


def test_the_benchmarks_run_queue_hands_each_caller_its_own_results_and_exceptions():
    bench = _bench_concurrency()

    class Echo:  # (a run's result: its feed; a feed that is an exception is raised)
        def run(self, _names, feed):
            time.sleep(0.002)
            if isinstance(feed, Exception):
                raise feed
            return feed

    queue, got, gate = bench.RunQueue(Echo()), {}, threading.Barrier(6)

    def call(k: int) -> None:
        gate.wait()
        for j in range(4):
            feed = ValueError(f"{k}.{j}") if (k + j) % 3 == 0 else f"{k}.{j}"
            try:
                got[k, j] = queue.run(None, feed)
            except ValueError as e:
                got[k, j] = f"raised {e}"

    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {
        (k, j): f"raised {k}.{j}" if (k + j) % 3 == 0 else f"{k}.{j}"
        for k in range(6)
        for j in range(4)
    }
    assert not queue.running and not queue.queue


def _queue_on_another_thread(turn, got: list, stay: threading.Event) -> threading.Thread:
    """A thread that waits for the turn, notes when it got it (and its thread), and keeps it
    between runs (a fresh thread has no streaks to end) until ``stay`` is set (a thread that
    ends gives the turn back). Returns once it is queued."""

    def run():
        turn.acquire()
        got.append((time.perf_counter(), threading.get_ident()))
        turn.release()
        stay.wait(10)

    queued = len(turn.queue)
    other = threading.Thread(target=run, daemon=True)
    other.start()
    deadline = time.perf_counter() + 10
    while len(turn.queue) == queued and time.perf_counter() < deadline:
        time.sleep(0.001)
    return other


def test_a_waiter_whose_turn_comes_early_looks_when_its_new_place_calls_for(
    monkeypatch, lock_bells
):
    """The holder hands the turn over early (a failed run here; a streak's end likewise):
    the next waiter, which counted on whole slices before its turn, is woken to sleep for
    its new place, and takes the turn from a holder that stopped calling one slice after
    that one got it, not two. (Without the nudge, 1 s: the check can fail.)"""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.5)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 60.0)  # (no idle take-over)
    turn, got, stay = turns._turns, [], threading.Event()  # noqa: SLF001
    turn.acquire()
    first = _queue_on_another_thread(turn, got, stay)  # takes the turn and stops calling
    second = _queue_on_another_thread(turn, got, stay)  # counts on the first's whole slice
    turn.release(failed=True)  # (hands the turn over at once)
    deadline = time.perf_counter() + 10
    while len(got) < 2 and time.perf_counter() < deadline:
        time.sleep(0.01)
    stay.set()
    first.join(10)
    second.join(10)
    assert len(got) == 2
    assert 0.3 < got[1][0] - got[0][0] < 0.8


def _hand_over_to_a_waiter(monkeypatch, waiter_core: int) -> list:
    """The turn, held on core 1, handed to a waiter that ran on ``waiter_core`` (of cores 0
    and 1): the affinity calls made (thread, cores; 0 the calling thread)."""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    main, calls = threading.get_ident(), []
    monkeypatch.setattr(turns, "_core", lambda: 1 if threading.get_ident() == main else waiter_core)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(
        os, "sched_setaffinity", lambda pid, cores: calls.append((pid, set(cores))), raising=False
    )
    turn, got, stay = turns._turns, [], threading.Event()  # noqa: SLF001
    turn.acquire()
    waiter = _queue_on_another_thread(turn, got, stay)
    turn.release(failed=True)
    stay.set()
    waiter.join(10)
    assert got and got[0][1] != main
    return calls


@pytest.mark.skipif(not turns._NATIVE_IDS, reason="no thread affinity here")  # noqa: SLF001
@pytest.mark.parametrize("waiter_core", [0, 1])
def test_the_next_holder_is_woken_bound_to_the_core_its_last_holder_ran_on(
    monkeypatch, waiter_core
):
    """The holder binds the waiter to its own core before it rings its bell, and the waiter
    gives itself its cores back as it takes the turn (without the binding: the check can
    fail)."""
    calls = _hand_over_to_a_waiter(monkeypatch, waiter_core)
    (bound_thread, bound), (freed_thread, freed) = calls
    assert bound_thread > 0 and bound == {1}  # (the waiter, by Linux's id)
    assert freed_thread == 0 and freed == {0, 1}


@pytest.mark.parametrize("waiter_core", [0, 1])
def test_an_unbound_next_holder_moves_to_the_core_its_last_holder_ran_on(monkeypatch, waiter_core):
    """Bound to that core and let free at once; nothing done when it runs there already."""
    monkeypatch.setattr(turns, "BIND_WAITERS", False)
    calls = _hand_over_to_a_waiter(monkeypatch, waiter_core)
    assert calls == ([] if waiter_core == 1 else [(0, {1}), (0, {0, 1})])


@pytest.mark.parametrize("bells", ["locks", pytest.param("native", marks=needs_native_bells)])
def test_a_bound_waiter_interrupted_gets_its_cores_back(monkeypatch, bells):
    calls = []
    monkeypatch.setattr(
        os, "sched_setaffinity", lambda pid, cores: calls.append((pid, set(cores))), raising=False
    )

    def interrupted(*args):  # (Ctrl-C as it wakes)
        raise KeyboardInterrupt

    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
        monkeypatch.setattr(turns._Turn, "_patience", interrupted)  # noqa: SLF001
    else:
        monkeypatch.setattr(turns, "_turn_wait", interrupted)
    turn = turns._Turn()  # noqa: SLF001
    entry = turns._Waiter(threading.get_ident())  # noqa: SLF001
    entry.cores = {0, 1}  # (bound by a holder handing the turn over)
    with pytest.raises(KeyboardInterrupt):
        turn._wait(entry)  # noqa: SLF001
    assert calls == [(0, {0, 1})]


@pytest.mark.parametrize("handed_over", [False, True])
def test_an_interrupt_as_the_wait_begins_leaves_nothing_behind(monkeypatch, handed_over):
    """Ctrl-C after the thread queued but before _wait's own handler: it leaves the queue, or
    passes the turn on (and gets its cores back) if a holder handed it over and bound it."""
    calls = []
    monkeypatch.setattr(
        os, "sched_setaffinity", lambda pid, cores: calls.append((pid, set(cores))), raising=False
    )
    turn = turns._Turn()  # noqa: SLF001
    turn.owner, turn.depth = -1, 1  # (another thread's run in progress)

    def interrupted(turn, entry, passing=None):
        if handed_over:
            turn.queue.remove(entry)
            turn.owner, entry.cores = entry.thread, {0, 1}
        raise KeyboardInterrupt

    monkeypatch.setattr(turns._Turn, "_wait", interrupted)  # noqa: SLF001
    with pytest.raises(KeyboardInterrupt):
        turn.acquire()
    assert not turn.queue
    assert turn.owner == (None if handed_over else -1)
    assert calls == ([(0, {0, 1})] if handed_over else [])


def test_a_thread_moved_to_a_core_and_interrupted_gets_its_cores_back(monkeypatch):
    calls = []

    def set_affinity(pid, cores):
        calls.append((pid, set(cores)))
        if len(calls) == 1:
            raise KeyboardInterrupt  # (Ctrl-C as the move is made)

    monkeypatch.setattr(turns, "_core", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", set_affinity, raising=False)
    with pytest.raises(KeyboardInterrupt):
        turns._move_to(1)  # noqa: SLF001
    assert calls == [(0, {1}), (0, {0, 1})]


@pytest.mark.parametrize(
    "left, looks_after, nudged",
    [
        (1.0, 0.0, True),  # (its look counted on the early holder's whole slice)
        (-0.001, 0.0025, False),  # (on time: its look comes within its margin)
        (-0.001, 1.0, True),  # (on time, but an early hand-over before it was first)
    ],
)
def test_the_next_waiter_is_nudged_only_when_it_would_look_late(
    monkeypatch, lock_bells, left, looks_after, nudged
):
    """A hand-over at the holder's slice's end leaves the waiter behind the next holder
    asleep when its look comes within the margin its patience allows; one before the
    slice's end (the holder handed the turn over ``left`` seconds before it), or a look
    later than that margin, wakes it to look when its new place calls for (without the
    distinction, the check of the on-time case can fail)."""
    monkeypatch.setattr(turns, "BIND_WAITERS", False)
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.005)
    monkeypatch.setattr(turns, "LATE_SECONDS", 0.001)
    turn = turns._Turn()  # noqa: SLF001
    turn.owner, turn.depth = threading.get_ident(), 0
    turn.deadline = turns._now() + left  # noqa: SLF001
    first, second = (turns._Waiter(k) for k in (1, 2))  # noqa: SLF001
    # (queued second: its look counted on the holder's and the first waiter's whole slices)
    second.looks_at = turn.deadline + turns.SLICE_SECONDS + 2 * turns.LATE_SECONDS + looks_after
    turn.queue.extend([first, second])
    turn._hand_over()  # noqa: SLF001
    assert turn.owner == 1 and not first.bell.locked()
    assert second.bell.locked() != nudged


@needs_native_bells
def test_turn_c_wait_ends_handed_idle_or_timed_out():
    """turn.c's protocol: a rung word ends the wait (even rung before it began, and a poke
    after the ring leaves it rung), the first waiter returns once the holder has been idle,
    another waiter (or the first while a run is in progress) sleeps until its time."""
    import array

    wait, ring = turns._turn_wait, turns._turn_ring  # noqa: SLF001
    word, state = array.array("i", (0,)), array.array("d", (0.0, 0.0, 0.0))
    w, s = word.buffer_info()[0], state.buffer_info()[0]
    now = time.monotonic()
    ring(w, turns.RUNG)
    ring(w, turns.POKED)
    assert word[0] == turns.RUNG and wait(w, s, 1.0, 0.001, 0.005, now + 5) == 1
    word[0] = 0
    state[0], state[1], state[2] = 0.0, now - 1.0, 1.0  # (idle for a second; waiter 1 first)
    assert wait(w, s, 1.0, 0.001, 0.005, now + 5) == 2  # (HOLDER_IDLE)
    assert wait(w, s, 2.0, 0.001, 0.005, time.monotonic() + 0.02) == 0  # (not the first)
    state[0] = 1.0  # (a run in progress)
    assert wait(w, s, 1.0, 0.001, 0.005, time.monotonic() + 0.02) == 0
    ring(w, turns.POKED)  # (a poke wakes it to look again, then it sleeps on)
    assert wait(w, s, 1.0, 0.001, 0.005, time.monotonic() + 0.02) == 0 and word[0] == 0
    assert wait(w, s, 1.0, -1.0, 0.005, now + 5) == -1  # (arguments refused)


@needs_native_bells
def test_turn_c_waiter_asleep_is_woken_by_a_ring_from_another_thread():
    """(the waiter sleeps without the GIL: this thread runs meanwhile, and its ring wakes it)"""
    import array

    wait, ring = turns._turn_wait, turns._turn_ring  # noqa: SLF001
    word, state = array.array("i", (0,)), array.array("d", (1.0, 0.0, 0.0))
    w, s = word.buffer_info()[0], state.buffer_info()[0]
    ended = []
    other = threading.Thread(
        target=lambda: ended.append(wait(w, s, 1.0, 0.001, 0.005, time.monotonic() + 30))
    )
    start = time.monotonic()
    other.start()
    time.sleep(0.05)
    assert not ended
    ring(w, turns.RUNG)
    other.join(10)
    assert ended == [1] and time.monotonic() - start < 10


def _held_with_a_waiter(turn):
    """The turn taken and given back by this thread, then a waiter queued behind it (a thread
    that never looks) and published to turn.c's watcher: the waiter's entry."""
    turn.acquire()
    turn.release()
    entry = turns._Waiter(-5)  # noqa: SLF001
    with turn.guard:
        turn.queue.append(entry)
        turn._publish()  # noqa: SLF001
    return entry


@needs_native_bells
def test_a_holders_runs_tell_turn_c_their_start_and_end(monkeypatch):
    """With a waiter queued, each run of the holder writes its start and its end (runs in
    progress, when the last ended) where turn.c's watcher reads them, the first waiter's
    token unchanged; the holder keeps the turn until its slice is over."""
    monkeypatch.setattr(turns, "SLICE_SECONDS", 60.0)
    monkeypatch.setattr(turns, "_leaving", threading.local())  # (no streaks to end)
    turn = turns._Turn()  # noqa: SLF001
    entry = _held_with_a_waiter(turn)
    try:
        turn.acquire(0.001)
        assert turn.owner == threading.get_ident() and list(turn.shared) == [
            1.0,
            turn.released,
            entry.token,
        ]
        turn.release()
        assert list(turn.shared) == [0.0, turn.released, entry.token] and turn.released > 0
        assert turn._keeps(turns._now(), 0.0)  # noqa: SLF001
        turn.spent = 1e9  # (its slice over: the next run hands the turn over)
        assert not turn._keeps(turns._now(), 0.0)  # noqa: SLF001
    finally:
        with turn.guard:
            turn.queue.clear()
            turn.owner, turn.depth = None, 0


@needs_native_bells
def test_turn_c_pass_rings_the_next_holder_then_waits():
    """turn.c's pass: the handed waiter's word is rung (and stays rung), then the caller
    waits on its own word as turn.c's wait does (here until its time, not being the first)."""
    import array

    passes = turns._turn_pass  # noqa: SLF001
    assert passes is not None
    handed, word = array.array("i", (0,)), array.array("i", (0,))
    state = array.array("d", (1.0, 0.0, 0.0))
    h, w, s = (a.buffer_info()[0] for a in (handed, word, state))
    assert passes(h, w, s, 2.0, 0.001, 0.005, time.monotonic() + 0.02) == 0  # (TIMED_OUT)
    assert handed[0] == turns.RUNG and word[0] == 0
    assert passes(h, w, s, 2.0, 0.001, 0.005, time.monotonic() + 0.02) == 0  # (rung twice)
    assert handed[0] == turns.RUNG


@needs_native_bells
def test_a_holder_past_its_slice_rings_the_next_holder_as_its_own_wait_begins(monkeypatch):
    """The holder whose slice is over hands the turn over as its next run starts and queues:
    the next holder is rung by turn.c's pass, once this thread has let the GIL go, not from
    Python before it queues (it woke then to fight for the GIL, slept on it, and was woken
    again). The waiter handed the turn is the one rung, and the holder then waits."""
    monkeypatch.setattr(turns, "_leaving", threading.local())  # (no streaks to end)
    rung, passed = [], []
    monkeypatch.setattr(turns._Waiter, "ring", lambda self: rung.append(self))  # noqa: SLF001
    turn = turns._Turn()  # noqa: SLF001

    def handed_back():  # (as if handed back at once: the holder's wait ends)
        with turn.guard:
            turn.queue.clear()
            turn.owner, turn.depth = threading.get_ident(), 1
        return 1

    def passes(handed, word, *args):
        passed.append(handed)
        return handed_back()

    monkeypatch.setattr(turns, "_turn_pass", passes)
    monkeypatch.setattr(turns, "_turn_wait", lambda *args: handed_back())
    monkeypatch.setattr(turns, "_bind", lambda thread, core: None)
    entry = _held_with_a_waiter(turn)
    turn.spent = 1e9  # (its slice over: the next run hands the turn over)
    turn.acquire()
    assert passed == [entry.address] and rung == []
    assert turn.counts[0] == 1 and not turn.queue
    turn.release()


def _tiny_runs(sess, runs: int = 300) -> None:
    x = {"x": np.ones((2, 3), np.float32)}
    for _ in range(runs):
        sess.run(None, x)


@pytest.fixture
def tiny_however_loaded(monkeypatch):
    """The tiny rule on, every run of these tests tiny (a loaded machine stretches them)."""
    monkeypatch.setattr(concurrency, "TINY_RUN_SECONDS", 10.0)
    monkeypatch.setattr(concurrency, "SHORT_RUN_SECONDS", 10.0)


def test_tiny_runs_that_lose_the_gil_midway_take_turns_again(tiny_however_loaded, monkeypatch):
    """A run whose ops let the GIL go (numpy's take or FFTs, a CDLL call) loses it at each
    release to a thread waiting for it: its thread waits midway, a voluntary context switch
    (Pace.switched). Such a session is not GIL-bound: its runs take turns again."""
    switches = iter(range(10**6))
    # (one every run; raising=False: the old code, without it, fails the asserts below)
    monkeypatch.setattr(concurrency, "_switches", lambda: (next(switches), 0), raising=False)
    sess = _relu_session(gil_bound=True)
    _tiny_runs(sess)
    assert not getattr(sess, PACE).gil_bound
    assert not getattr(sess, PACE).tiny()


def test_tiny_runs_that_keep_the_gil_stay_without_turns(tiny_however_loaded, monkeypatch):
    """(the test above can fail: runs that never wait midway stay tiny; a few waiting now
    and then, CPython's switch interval taking the GIL, do not count)"""
    reads = iter(range(10**6))  # (one run in 9 whose switches are read waits once)
    monkeypatch.setattr(concurrency, "_switches", lambda: (next(reads) // 9, 0), raising=False)
    sess = _relu_session(gil_bound=True)
    _tiny_runs(sess, 1000)
    assert getattr(sess, PACE).gil_bound and getattr(sess, PACE).tiny()


def test_tiny_runs_preempted_midway_stay_without_turns(tiny_however_loaded, monkeypatch):
    """A thread preempted while it held the GIL has it dropped as it comes back (its waiters
    waited past the switch interval): on a loaded machine the pipeline's runs waited so in
    bursts, a tenth of them, and went back to turns. A run preempted says nothing."""
    switches = iter(range(10**6))
    monkeypatch.setattr(
        concurrency,
        "_switches",
        lambda: (n := next(switches), n),
        raising=False,
    )
    sess = _relu_session(gil_bound=True)
    _tiny_runs(sess)
    assert getattr(sess, PACE).gil_bound


def test_tiny_runs_waiting_twice_midway_take_turns_again(tiny_however_loaded, monkeypatch):
    """(preempted too: the threads a run's releases woke preempt it)"""
    switches = iter(range(10**6))
    two_waits = lambda: (2 * (n := next(switches)), n)  # noqa: E731
    monkeypatch.setattr(concurrency, "_switches", two_waits, raising=False)
    sess = _relu_session(gil_bound=True)
    _tiny_runs(sess)
    assert not getattr(sess, PACE).gil_bound


def test_tiny_runs_making_native_calls_that_let_the_gil_go_take_turns_again(
    tiny_however_loaded, monkeypatch
):
    """A native call through the library's CDLL (a forest's or SmallCall's on inputs too
    large to keep the GIL for) is counted (native._core.let_go) even where no waiter showed
    the release (no other thread waited then)."""
    from onyx.runtime.native import _core

    monkeypatch.setattr(concurrency, "_switches", lambda: (0, 0), raising=False)
    sess = _relu_session(gil_bound=True)
    plan_run = getattr(sess, PLAN).run

    def letting_go(*args, **kwargs):
        _core.let_go[0] += 1
        return plan_run(*args, **kwargs)

    getattr(sess, PLAN).run = letting_go
    _tiny_runs(sess)
    assert not getattr(sess, PACE).gil_bound


_TURNS_LOADED = """
import sys, threading
import numpy as np
from onnx import TensorProto, helper
import onyx

graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])],
    "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
sess = onyx.InferenceSession(model.SerializeToString())
sess._pace.gil_bound = False  # (its runs take turns, however tiny, once a thread runs)
x = np.ones((2, 3), np.float32)
for _ in range(20):
    sess.run(None, {"x": x})
print("alone", "onyx.runtime.turns" in sys.modules)
threads = [threading.Thread(target=lambda: [sess.run(None, {"x": x}) for _ in range(20)])
           for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", "onyx.runtime.turns" in sys.modules)
"""


def test_turn_machinery_loaded_on_first_contention():
    """A process that creates and runs a session on its main thread alone never imports the
    turn machinery (runtime/turns.py: most of concurrency's bytecode, a cold start's cost);
    two threads running it load it (their runs take turns)."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _TURNS_LOADED], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["alone False", "threads True"], out


def test_a_process_without_threads_does_not_read_context_switches():
    """The switches' reader (``resource``, for the tiny runs' ``Pace.switched``) is found at
    its first call, so a session created and run alone does not import it."""
    code = (
        "import sys, numpy as np, onyx\n"
        "from onnx import TensorProto, helper\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',"
        " [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])],"
        " [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)\n"
        "s = onyx.InferenceSession(m.SerializeToString())\n"
        "[s.run(None, {'x': np.ones((2, 3), np.float32)}) for _ in range(40)]\n"
        "print('resource' in sys.modules)\n"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
    reader = concurrency._switch_reader()  # noqa: SLF001  (what the first call puts in place)
    assert len(reader()) == 2
