"""Runs of one session on many threads at once (onyx/runtime/concurrency.py): each caller gets
its own results bit for bit, its own exceptions, its own terminate, and a run nested in
another does not wait for itself; a thread that stopped calling does not keep the turn."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
from onyx.runtime import concurrency, turns

THREADS = 8
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


@pytest.fixture(autouse=True)
def _as_if_other_threads_ran(monkeypatch):
    """The tests here watch the main thread's runs take turns, alone or before other threads
    start: a run alone takes none (concurrency._other_threads)."""
    monkeypatch.setattr(concurrency, "_other_threads", lambda: 1)


def _feeds(sess, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 8 for d in i.shape]
        if "int64" in i.type:
            feeds[i.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _saved_feeds(sess, path: str, seed: int) -> dict:
    """A zoo model's own test feeds, the float ones shifted by the seed (a different feed
    per thread)."""
    with np.load(path.removesuffix(".onnx") + ".npz", allow_pickle=True) as arrays:
        feeds = {i.name: arrays["in:" + i.name] for i in sess.get_inputs()}
    return {k: v + np.float32(seed) if v.dtype == np.float32 else v for k, v in feeds.items()}


def _on_threads(work, count: int = THREADS, timeout: float = 120) -> None:
    """Run work(k) on ``count`` threads started together; fail on a hang or on any error."""
    gate, errors = threading.Barrier(count), []

    def body(k):
        try:
            gate.wait(timeout)
            work(k)
        except BaseException as e:  # (reported on the main thread)
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b)
    )


@pytest.fixture
def lock_bells(monkeypatch):
    """Waiters sleep on Python locks and look in Python (without turn.c, or ONYX_NATIVE=0)."""
    monkeypatch.setattr(turns, "_turn_wait", None)


@pytest.fixture(params=[("default", "native"), (0.0, "native"), ("default", "locks")])
def slices(request, monkeypatch):
    """Turns with the default slices, and a turn handed over at every run (the most
    hand-overs), waiters sleeping in C (turn.c, where built) or on Python locks."""
    seconds, bells = request.param
    if seconds != "default":
        monkeypatch.setattr(turns, "SLICE_SECONDS", seconds)
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)


@pytest.mark.parametrize(
    "model", ["bert_dynamo_op18.onnx", "zoo/skl2onnx_coltrans_onehot_logreg.onnx"]
)
def test_each_thread_gets_its_own_results_bit_for_bit(model, slices):
    """A small transformer and a small scikit-learn pipeline, a different feed per thread:
    every result equals its feed's lone run (results handed to the wrong caller, or bits
    that depend on what else runs, would differ)."""
    path = os.path.join(MODELS, model)
    sess = onyx.InferenceSession(path)
    make = _saved_feeds if model.startswith("zoo/") else lambda s, p, k: _feeds(s, k)
    feeds = [make(sess, path, k) for k in range(THREADS)]
    expected = [sess.run(None, f) for f in feeds]
    assert not _same(expected[0], expected[1])  # (the feeds tell the callers apart)
    got: list = [[] for _ in range(THREADS)]

    def work(k):
        for _ in range(12):
            got[k].append(sess.run(None, feeds[k]))

    _on_threads(work)
    for k in range(THREADS):
        assert all(_same(expected[k], r) for r in got[k]), f"thread {k}"


def _reshape_session() -> onyx.InferenceSession:
    """y = Reshape(x, shape): a shape that does not fit x fails inside the run."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onyx.InferenceSession(model.SerializeToString())


def test_each_thread_gets_its_own_exceptions(slices):
    """Even threads feed shapes that fit, odd ones a shape that does not: every failing call
    raises an OnyxError, every other returns its own result, and the turn goes on."""
    sess = _reshape_session()
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    good = {k: np.array([3, 4] if k % 4 == 0 else [4, 3], np.int64) for k in range(THREADS)}
    bad = np.array([5, 5], np.int64)
    outcomes: list = [[] for _ in range(THREADS)]

    def work(k):
        for _ in range(10):
            shape = good[k] if k % 2 == 0 else bad
            try:
                outcomes[k].append(sess.run(None, {"x": x, "shape": shape})[0].shape)
            except onyx.OnyxError as e:  # (naming the node that failed, in its caller's thread)
                outcomes[k].append("error" if "Reshape node" in str(e) else str(e))

    _on_threads(work)
    for k in range(THREADS):
        assert outcomes[k] == (["error"] * 10 if k % 2 else [tuple(good[k])] * 10), f"thread {k}"
    assert sess.run(None, {"x": x, "shape": good[0]})[0].shape == (3, 4)


def test_terminate_stops_only_its_own_run(slices):
    """One thread's RunOptions.terminate ends its runs; the other threads' runs, taking
    turns with it, finish with their own results."""
    sess = onyx.InferenceSession(os.path.join(MODELS, "bert_dynamo_op18.onnx"))
    feeds = [_feeds(sess, k) for k in range(THREADS)]
    expected = [sess.run(None, f) for f in feeds]
    stop = onyx.RunOptions()
    stop.terminate = True
    outcomes: list = [[] for _ in range(THREADS)]

    def work(k):
        for _ in range(8):
            try:
                result = sess.run(None, feeds[k], stop if k == 0 else None)
                outcomes[k].append(_same(expected[k], result))
            except onyx.OnyxError as e:
                outcomes[k].append("terminated" if "terminate" in str(e) else str(e))

    _on_threads(work)
    assert outcomes[0] == ["terminated"] * 8
    assert all(outcomes[k] == [True] * 8 for k in range(1, THREADS))
    assert _same(expected[0], sess.run(None, feeds[0], onyx.RunOptions()))


def test_an_interrupt_inside_a_run_reaches_only_its_thread(slices):
    """Ctrl-C (a KeyboardInterrupt) inside one thread's run while the others queue for the
    turn, bound to the holder's core as it is handed to them: it reaches that thread alone,
    the others finish with their own results bit for bit, every thread ends with the cores
    it began with, and the turn is free afterwards."""
    sess = onyx.InferenceSession(os.path.join(MODELS, "bert_dynamo_op18.onnx"))
    feeds = [_feeds(sess, k) for k in range(THREADS)]
    expected = [sess.run(None, f) for f in feeds]
    plan_run = sess._plan.run  # noqa: SLF001  (the run inside the run slot)
    victim: list = []  # (the thread whose next run is interrupted)

    def run_plan(*args, **kwargs):
        if threading.get_ident() in victim:
            raise KeyboardInterrupt
        return plan_run(*args, **kwargs)

    sess._plan.run = run_plan  # noqa: SLF001
    outcomes: list = [[] for _ in range(THREADS)]
    cores: list = [None] * THREADS
    own = getattr(os, "sched_getaffinity", lambda pid: None)

    def work(k):
        before = own(0)
        for n in range(8):
            if k == 0 and n == 3:
                victim.append(threading.get_ident())
            try:
                outcomes[k].append(_same(expected[k], sess.run(None, feeds[k])))
            except KeyboardInterrupt:
                outcomes[k].append("interrupted")
                victim.clear()
        cores[k] = own(0) == before

    _on_threads(work)
    assert outcomes[0] == [True] * 3 + ["interrupted"] + [True] * 4
    assert all(outcomes[k] == [True] * 8 for k in range(1, THREADS))
    assert cores == [True] * THREADS
    assert turns._turns.owner is None or not turns._turns.depth  # noqa: SLF001


def _relu_session() -> onyx.InferenceSession:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onyx.InferenceSession(model.SerializeToString())


def test_a_run_nested_in_a_run_on_its_thread_does_not_wait_for_itself(slices):
    """A run that makes another run of onyx on its own thread (a callback, a custom op)
    while other threads queue for the turn: the inner run counts as the same turn."""
    outer, inner = _relu_session(), _relu_session()
    x = np.full((2, 3), -1.0, np.float32)
    plan_run = outer._plan.run  # noqa: SLF001  (the run inside the run slot)

    def nested(*args, **kwargs):
        assert inner.run(None, {"x": -x})[0].tolist() == [[1.0] * 3] * 2
        return plan_run(*args, **kwargs)

    outer._plan.run = nested  # noqa: SLF001
    counts = [0] * THREADS

    def work(k):
        for _ in range(20):
            assert outer.run(None, {"x": x})[0].tolist() == [[0.0] * 3] * 2
            counts[k] += 1

    _on_threads(work, timeout=60)
    assert counts == [20] * THREADS


def _wait_for_turn_on_another_thread() -> float:
    """Seconds a short run on a new thread waited for its turn (at most 10)."""
    waited = []

    def short_run():
        start = time.perf_counter()
        with concurrency.run_slot(1, None, concurrency.Pace()):
            waited.append(time.perf_counter() - start)

    other = threading.Thread(target=short_run, daemon=True)
    other.start()
    other.join(timeout=10)
    return waited[0] if waited else 10.0


@pytest.mark.parametrize("bells", ["locks", "native"])
@pytest.mark.parametrize("idle", [0.001, 60.0])
def test_a_thread_that_stopped_calling_does_not_keep_the_turn(monkeypatch, idle, bells):
    """The main thread runs once and stops (a server's worker back at its queue), keeping
    the turn for a slice of 2 s: a run arriving on another thread after IDLE_SECONDS takes
    it at once (with IDLE_SECONDS of 60 s it waits for the slice: the check can fail)."""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    monkeypatch.setattr(turns, "SLICE_SECONDS", 2.0)
    monkeypatch.setattr(turns, "IDLE_SECONDS", idle)
    monkeypatch.setattr(turns, "CHECK_SECONDS", 60.0)
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    elif turns._turn_wait is None or idle > 1:  # noqa: SLF001
        pytest.skip("turn.c's waiter watches for an idle holder, not for the slice's end")
    # (no streaks yet: a run ending a usual streak would give the turn up)
    monkeypatch.setattr(turns._leaving, "hook", None, raising=False)  # noqa: SLF001
    with concurrency.run_slot(1, None, concurrency.Pace()):
        pass
    time.sleep(0.01)  # (longer than the idle time: the holder has stopped calling)
    waited = _wait_for_turn_on_another_thread()
    if idle < 1:
        assert waited < 1.0
    else:
        assert 1.0 < waited < 9


def _handover_after_job(earlier_jobs: tuple) -> float:
    """Seconds between the end of a thread's job of 3 short runs (after jobs of
    ``earlier_jobs`` runs, each followed by a pause) and the start of a run queued on another
    thread meanwhile."""
    turn = turns._turns  # noqa: SLF001
    got, ended = [], []

    def short_run(inside=lambda: None):
        with concurrency.run_slot(1, None, concurrency.Pace()):
            inside()

    def queued():
        short_run(lambda: got.append(time.perf_counter()))

    def job(runs: int, other=None):
        for k in range(runs):
            if k == 0 and other is not None:

                def start_other():
                    other.start()
                    deadline = time.perf_counter() + 10
                    while not turn.queue and time.perf_counter() < deadline:
                        time.sleep(0.001)

                short_run(start_other)
            else:
                short_run()
        ended.append(time.perf_counter())

    other = threading.Thread(target=queued, daemon=True)
    for runs in earlier_jobs:
        job(runs)
        time.sleep(0.02)  # (a pause: the thread's streak ends)
    job(3, other)
    other.join(timeout=10)
    return got[0] - ended[-1] if got else 10.0


@pytest.mark.parametrize(
    "earlier_jobs",
    [(3, 3), (3,), (5, 5), (3, 5, 3, 5), (3, 3, 4, 5, 6, 7), (3, 3, 5, 5, 5, 5, 5, 5)],
)
def test_a_thread_gives_up_the_turn_at_the_end_of_its_usual_streak(
    monkeypatch, lock_bells, earlier_jobs
):
    """A thread making a job of 3 runs, another thread waiting: the turn passes as the job's
    last run ends, not when the slice (0.5 s) ends, when STREAK_REPEATS of the thread's last
    STREAKS_KEPT jobs had 3 runs too (jobs alternating between two sizes: 3, then 5). (After
    one job of 3 (a streak cut short by a preemption, say), jobs of 5 runs only, or 3 too long
    ago, repeats of 5 since included, the 3rd run is not a usual end, and the waiter waits for
    the slice: the check can fail.)"""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    monkeypatch.setattr(turns, "SLICE_SECONDS", 0.5)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 0.005)
    monkeypatch.setattr(turns._leaving, "hook", None, raising=False)  # noqa: SLF001
    waited = _handover_after_job(earlier_jobs)
    if earlier_jobs[-turns.STREAKS_KEPT :].count(3) >= turns.STREAK_REPEATS:
        assert waited < 0.25
    else:
        assert 0.25 < waited < 5


@pytest.mark.parametrize("bells", ["locks", "native"])
@pytest.mark.parametrize("usual", [True, False])
def test_a_run_arriving_after_a_usual_streak_takes_the_turn_at_once(monkeypatch, bells, usual):
    """The main thread makes jobs of 3 runs, nobody waiting, then a run arrives on another
    thread: after a job of the usual length it takes the turn at once; after a job of another
    length (2 runs) it waits until the holder has been idle for IDLE_SECONDS (0.5 s here) or
    longer (the check can fail)."""
    monkeypatch.setattr(turns, "_turns", turns._Turn())  # noqa: SLF001
    monkeypatch.setattr(turns, "SLICE_SECONDS", 2.0)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 0.5)
    monkeypatch.setattr(turns, "CHECK_SECONDS", 60.0)
    monkeypatch.setattr(turns._leaving, "hook", None, raising=False)  # noqa: SLF001
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    elif turns._turn_wait is None:  # noqa: SLF001
        pytest.skip("no turn.c here")
    mine = turns._GiveBackAtThreadEnd(threading.get_ident())  # noqa: SLF001
    mine.usual = (3, 3)  # (the thread's last streaks: jobs of 3 runs)
    monkeypatch.setattr(turns._leaving, "hook", mine, raising=False)  # noqa: SLF001
    for _ in range(3 if usual else 2):
        with concurrency.run_slot(1, None, concurrency.Pace()):
            pass
    waited = _wait_for_turn_on_another_thread()
    if usual:
        assert waited < 0.25
    else:
        assert 0.4 < waited < 9


@pytest.mark.parametrize("bells", ["locks", "native"])
def test_a_streak_length_that_gave_the_turn_up_for_nothing_is_forgotten(monkeypatch, bells):
    """The main thread's last streaks had 1 and 3 runs, twice (warm-ups' single runs, jobs);
    a thread queues during the first run of its next job of 3: the turn passes as that run
    ends (1 run: a usual length), the main thread comes straight back, and 1 is forgotten
    (kept, the first run of every later job would hand the turn over: the check can fail),
    while 3 stays."""
    turn = turns._Turn()  # noqa: SLF001
    monkeypatch.setattr(turns, "_turns", turn)
    monkeypatch.setattr(turns, "SLICE_SECONDS", 2.0)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 0.5)
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    mine = turns._GiveBackAtThreadEnd(threading.get_ident())  # noqa: SLF001
    mine.usual = (1, 3, 1, 3)
    monkeypatch.setattr(turns._leaving, "hook", mine, raising=False)  # noqa: SLF001
    got = []

    def short_run():
        with concurrency.run_slot(1, None, concurrency.Pace()):
            got.append(threading.get_ident())

    other = threading.Thread(target=short_run, daemon=True)
    for k in range(3):
        with concurrency.run_slot(1, None, concurrency.Pace()):
            if k == 0:
                other.start()
                deadline = time.perf_counter() + 10
                while not turn.queue and time.perf_counter() < deadline:
                    time.sleep(0.001)
    other.join(timeout=10)
    assert got == [other.ident]  # (handed over after the first run)
    assert mine.usual == (3, 3)


def test_an_arriving_thread_hands_an_idle_turn_to_the_first_waiter(monkeypatch, lock_bells):
    """The main thread runs once, a waiter queued meanwhile, and stops calling (its first
    streak: no usual end), keeping the turn for a slice of 2 s: a run arriving on a third
    thread after IDLE_SECONDS hands the turn to the waiter at once (without it the waiter
    waits for the slice: the check can fail)."""
    turn = turns._Turn()  # noqa: SLF001
    monkeypatch.setattr(turns, "_turns", turn)
    monkeypatch.setattr(turns, "SLICE_SECONDS", 2.0)
    monkeypatch.setattr(turns, "IDLE_SECONDS", 0.005)
    monkeypatch.setattr(turns._leaving, "hook", None, raising=False)  # noqa: SLF001
    got = []

    def short_run():
        with concurrency.run_slot(1, None, concurrency.Pace()):
            got.append(time.perf_counter())

    waiter, arriving = (threading.Thread(target=short_run, daemon=True) for _ in range(2))
    with concurrency.run_slot(1, None, concurrency.Pace()):
        waiter.start()
        deadline = time.perf_counter() + 10
        while not turn.queue and time.perf_counter() < deadline:
            time.sleep(0.001)
    time.sleep(0.02)  # (longer than the idle time: the holder has stopped calling)
    arrived = time.perf_counter()
    arriving.start()
    for t in (waiter, arriving):
        t.join(timeout=10)
    assert len(got) == 2 and got[0] - arrived < 1.0


@pytest.mark.parametrize("bells", ["locks", "native"])
def test_no_thread_is_starved(monkeypatch, bells):
    """8 threads making short runs without pause, each until every thread has made 5: each
    gets the turn within a few slices (a holder keeping it for as long as it calls would
    starve the others, and the threads would hang until the timeout)."""
    if bells == "locks":
        monkeypatch.setattr(turns, "_turn_wait", None)
    sess = _relu_session()
    x = {"x": np.ones((2, 3), np.float32)}
    sess.run(None, x)
    made = [0] * THREADS

    def work(k):
        deadline = time.perf_counter() + 60
        while min(made) < 5 and time.perf_counter() < deadline:
            sess.run(None, x)
            made[k] += 1

    _on_threads(work, timeout=90)
    assert min(made) >= 5
