"""One session shared by threads: total time of a fixed number of runs on 1 thread against
the same runs spread over 8 threads, and whether every result is bit-identical.

    python benchmarks/bench_concurrency.py [--model tests/models/bert_dynamo_op18.onnx ...]
        [--runs 400] [--threads 8] [--rounds 5] [--no-turns] [--warm | --cold] [--slice S]
        [--unbound] [--at-once K] [--intra-op N] [--floor] [--run-queue] [--warm-rounds N]
        [--tiny S]
    python benchmarks/bench_concurrency.py --model M --runs 3200 --once 8   (then --once 1)

Concurrent runs must not oversubscribe the cores (each thread's BLAS call starting its own
threads), nor take the GIL from each other (short runs take turns, runtime/concurrency.py):
the 8-thread total should not exceed the 1-thread one. The last column gives, per 8-thread
round (medians), how often the turn changed hands: handed over by its holder, taken by a
waiter's look from a holder that had stopped calling, and waiters nudged to look (each wakes
a thread whose caches have gone cold: tenths of a millisecond of CPU on small models, and
the counts vary less than the times on a shared machine). The two are timed in alternating
rounds, and each 8-thread round is compared with the 1-thread round next to it (on a shared
machine single rounds vary by 2x or more). Two kinds of threads: new ones each round (their
first runs and their start included: the cold figure) and long-lived ones that have run the
session before (a server's worker threads: the steady state, reached after --warm-rounds N
untimed rounds, default 2, in which the turn learns their jobs' length); --cold or --warm runs
one kind.
--once times nothing itself: it makes the runs of one side only, for a timer outside the
process. --unbound wakes the turn's next holder wherever Linux likes (then moved to the core
its last holder ran on), not bound to that core before it is woken (turns._bind).
--tiny S sets concurrency.TINY_RUN_SECONDS: tiny runs of a GIL-bound session (no op on the
native pool) take no turn (--tiny 0: they take turns; the default, 0.00015, lets them go without);
a line per model after the table says what the rule made of its runs by the end (a session
whose tiny runs lost the GIL midway goes back to turns: concurrency.Pace.switched).
--no-turns lets short runs run side by side (the behaviour before turns); --at-once K
lets at most K run side by side (turns off, a semaphore around each run), with --intra-op N
threads each (SessionOptions.intra_op_num_threads): runs overlapping so that one's Python
overlaps another's kernels, measured against turns in docs/reliability.md.
ONYX_NATIVE_TURN=0 makes waiters sleep on Python locks and look in Python, as they do without
the native library's turn.c (their nudges are the last column's third count).
--floor adds a row per model timing the harness itself: a stand-in for the session whose run
is a loop of pure Python taking the model's CPU time per run, each thread's whole job holding
one lock (a perfect turn: one hand-over per thread, no cost per run). Its ratio is what 8
threads cost over one without onyx: CPython's thread starts, GIL hand-offs and wake-ups with
cold caches (docs/reliability.md). A second row per model, "perfect turn", times the session
itself that way (its jobs one at a time under one lock, its own turns off): what switching
threads costs with the model's own runs (on a loaded machine a run after its thread slept
finds its caches taken by the processes that ran meanwhile, which a loop of pure Python barely
notices); the session's rows exceed it by what onyx's turns cost.
--run-queue adds a row per model timing a run queue (flat combining) instead of turns: a run
arriving while another runs queues itself, and the running thread runs the queued runs back to
back on its warm caches and hands each caller its results (``RunQueue``; its caller woken
once per run: docs/reliability.md measures it against the turns).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402
from onyx.runtime import concurrency, turns  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = ("bert_dynamo_op18", "gpt_dynamo_op18", "mobilenet_quant_qdq", "resnet_dynamo_op18",
          "zoo/skl2onnx_coltrans_onehot_logreg")  # fmt: skip


def feeds_for(sess, seed: int = 0, path: str = "") -> dict:
    """The model's own test feeds (a zoo model's ``.npz`` beside it, arrays ``in:NAME``), or
    random feeds of the inputs' declared shapes (symbolic dims as 1, or 8 for sequences)."""
    saved = path.removesuffix(".onnx") + ".npz"
    if path and os.path.exists(saved):
        with np.load(saved, allow_pickle=True) as arrays:
            return {i.name: arrays["in:" + i.name] for i in sess.get_inputs()}
    rng = np.random.default_rng(seed)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else (8 if n else 1) for n, d in enumerate(i.shape)]
        if "int64" in i.type:
            out[i.name] = rng.integers(0, 10, shape).astype(np.int64)
        elif "int32" in i.type:
            out[i.name] = rng.integers(0, 10, shape).astype(np.int32)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


class Workers:
    """Long-lived threads, as a server keeps its workers: each has run the session once,
    untimed, before any round (a new thread's first runs cost more: see ``fresh_threads``)."""

    def __init__(self, sess, feeds, size: int):
        self.jobs = [queue.SimpleQueue() for _ in range(size)]
        self.done = threading.Semaphore(0)
        for jobs in self.jobs:
            threading.Thread(target=self._serve, args=(jobs,), daemon=True).start()
        self.each([lambda: sess.run(None, feeds)] * size)

    def _serve(self, jobs) -> None:
        while (job := jobs.get()) is not None:
            job()
            self.done.release()

    def each(self, jobs: list) -> None:
        """Run jobs[k] on thread k, and wait for them all."""
        for thread_jobs, job in zip(self.jobs, jobs):
            thread_jobs.put(job)
        for _ in jobs:
            self.done.acquire()

    def close(self) -> None:
        for jobs in self.jobs:
            jobs.put(None)


def fresh_threads(jobs: list) -> None:
    """Run jobs[k] on a new thread k, and wait for them all. Every thread is started before
    any job begins (a gate), so that starting them does not contend with the runs."""
    gate = threading.Event()
    threads = [threading.Thread(target=lambda j=j: (gate.wait(), j())) for j in jobs]
    for th in threads:
        th.start()
    gate.set()
    for th in threads:
        th.join()


#: At most this many runs at once (--at-once), or None: the runs are not gated.
_gate: threading.Semaphore | None = None


def _run(sess, feeds) -> list:
    if _gate is None:
        return sess.run(None, feeds)
    with _gate:
        return sess.run(None, feeds)


class StandIn:
    """A session stand-in for --floor: each run is a loop of pure Python taking about the
    session's CPU time per run (its 1-thread rounds', measured here), and its threads' jobs
    run one at a time (``serial``): the harness's own cost of 8 threads, without onyx."""

    def __init__(self, sess, feeds, runs: int) -> None:
        # (per run, the CPU time of the session's own 1-thread rounds, results kept as there:
        # the least of short batches whose results were dropped took 0.75-0.8x that, and one
        # batch on a loaded machine anything from 0.8x to 1.5x; a floor computed on a run of
        # another length than the session's is not its floor)
        rounds = [run_threads(sess, feeds, runs, 1)[1] for _ in range(3)]
        per_run = statistics.median(rounds) / runs
        self.loops = 10_000
        per_loop = _least_cpu(self.run, 10, 7) / self.loops
        self.loops = max(1, round(per_run / per_loop))
        self.serial = threading.Lock()
        # (then scaled by its own 1-thread rounds of that shape: the loop's least time in
        # short batches is not its time in a round, whose results are kept; the stand-in's
        # rounds took 1.3x the session's, 0.569 s against 0.431 s for 8000 runs of the
        # scikit-learn pipeline, so its floor was a floor for another length of round)
        own = statistics.median(run_threads(self, feeds, runs, 1)[1] for _ in range(3)) / runs
        self.loops = max(1, round(self.loops * per_run / own))

    def run(self, *_) -> list:
        total = 0
        for k in range(self.loops):
            total += k
        return [np.asarray(total)]


class PerfectTurn:
    """A session for --floor's second row: the session itself, its threads' jobs run one at a
    time (``serial``: one hand-over per job, the fewest a turn can make) and its own turns
    off (``turns_off``: nothing is left for them to order). What it costs over one thread is
    what switching threads costs with this model's runs; the session's own rows cost more by
    what its turns add."""

    def __init__(self, sess) -> None:
        self.sess, self.serial = sess, threading.Lock()

    def run(self, *args) -> list:
        return self.sess.run(*args)


class _Slot:
    """A queued run of RunQueue: its arguments, then its results or exception, and the bell
    its caller sleeps on until they are in."""

    __slots__ = ("args", "result", "bell")

    def __init__(self, args: tuple) -> None:
        self.args, self.result, self.bell = args, None, threading.Lock()
        self.bell.acquire()


class RunQueue:
    """A session for --run-queue's row: the run queue (flat combining) a turn could give way
    to. A run arriving while another thread runs queues its arguments and sleeps on a slot of
    its own; the running thread, its own run done, runs the queued runs back to back (no
    thread takes over the runs with cold caches) and rings each one's slot, and only then
    returns to its caller. Each queued run still wakes its caller once: a caller's next run
    needs its results first. The session's own turns are off (``turns_off``)."""

    def __init__(self, sess) -> None:
        self.sess, self.guard, self.queue, self.running = sess, threading.Lock(), [], False

    def run(self, *args) -> list:
        with self.guard:
            slot = _Slot(args) if self.running else None
            if slot is None:
                self.running = True
            else:
                self.queue.append(slot)
        if slot is None:
            try:
                return self.sess.run(*args)
            finally:
                self._serve()
        slot.bell.acquire()  # (rung by the running thread once its results are in)
        if isinstance(slot.result, BaseException):
            raise slot.result  # (on its caller's thread)
        return slot.result

    def _serve(self) -> None:
        """Run the queued runs, oldest first, until none is left."""
        while True:
            with self.guard:
                if not self.queue:
                    self.running = False
                    return
                slot = self.queue.pop(0)
            try:
                slot.result = self.sess.run(*slot.args)
            except BaseException as e:  # (its caller's, raised on its thread)
                slot.result = e
            slot.bell.release()


@contextlib.contextmanager
def turns_off():
    saved = concurrency.SHORT_RUN_SECONDS
    concurrency.SHORT_RUN_SECONDS = 0.0
    try:
        yield
    finally:
        concurrency.SHORT_RUN_SECONDS = saved


def _least_cpu(call, calls: int, batches: int) -> float:
    """The calling thread's least CPU time per call of ``call`` over ``batches`` batches."""
    best = float("inf")
    for _ in range(batches):
        start = time.thread_time()
        for _ in range(calls):
            call()
        best = min(best, (time.thread_time() - start) / calls)
    return best


def run_threads(sess, feeds, runs: int, threads: int, workers: Workers | None = None):
    """Wall and CPU seconds (the process's) of ``runs`` runs spread over ``threads`` threads,
    new ones or ``workers``' long-lived ones (thread starts included in the time), and their
    results. A stand-in's jobs run one at a time."""
    results: list = [None] * runs
    per = runs // threads
    serial = getattr(sess, "serial", None) or contextlib.nullcontext()

    def job(k: int):
        def work() -> None:
            with serial:
                for j in range(k * per, (k + 1) * per):
                    results[j] = _run(sess, feeds)

        return work

    jobs = [job(k) for k in range(threads)]
    t, cpu = time.perf_counter(), time.process_time()
    fresh_threads(jobs) if workers is None else workers.each(jobs)
    return time.perf_counter() - t, time.process_time() - cpu, results[: per * threads]


def identical(a: list, b: list) -> bool:
    return all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


#: Untimed rounds of the timed shape that long-lived threads make first (--warm-rounds). The
#: turn predicts the end of a thread's job from the lengths of its last jobs once a length
#: recurs (turns.STREAK_REPEATS): without them the first two timed rounds were the
#: turn's learning, each job's end unforeseen and the turn taken from it after an idle look
#: (7 takes a round, against 0-2 after), not the steady state a server's workers reach.
WARM_ROUNDS = 2


def compare(
    sess,
    feeds,
    runs: int,
    threads: int = 8,
    rounds: int = 5,
    warm: bool = False,
    warm_rounds: int = WARM_ROUNDS,
):
    """Wall and CPU seconds of ``runs`` runs on 1 thread and on ``threads`` threads in
    alternating rounds (medians, and the medians of each round's ratio to the 1-thread round
    next to it: a drift of the machine's speed moves both), and whether every result equals
    a lone run's bit for bit. New threads each round, or (``warm``) long-lived ones, which
    first make ``warm_rounds`` untimed rounds of ``runs`` runs. (On a shared machine the wall
    time also measures the other processes; the CPU time does not.)"""
    reference = sess.run(None, feeds)
    workers = Workers(sess, feeds, threads) if warm else None
    run_threads(sess, feeds, threads, threads, workers)  # warm-up
    for _ in range(warm_rounds if warm else 0):  # (the steady state: see WARM_ROUNDS)
        run_threads(sess, feeds, runs, threads, workers)
    wall: dict[int, list[float]] = {1: [], threads: []}
    cpu: dict[int, list[float]] = {1: [], threads: []}
    changes: list[list[int]] = []  # per round of ``threads``: the turn's counts' increase
    same = True
    for r in range(rounds):
        for n in (1, threads) if r % 2 == 0 else (threads, 1):
            before = list(turns._turns.counts)  # noqa: SLF001
            seconds, cpu_seconds, results = run_threads(sess, feeds, runs, n, workers)
            if n == threads:
                after = turns._turns.counts  # noqa: SLF001
                changes.append([b - a for a, b in zip(before, after)])
            wall[n].append(seconds)
            cpu[n].append(cpu_seconds)
            same &= all(identical(reference, got) for got in results)
    if workers is not None:
        workers.close()
    med = statistics.median
    return {"wall1": med(wall[1]), "wall": med(wall[threads]), "cpu1": med(cpu[1]),
            "cpu": med(cpu[threads]), "same": same,
            "turns": [med(c[k] for c in changes) for k in range(3)],
            "wall_ratio": med(a / b for a, b in zip(wall[threads], wall[1])),
            "cpu_ratio": med(a / b for a, b in zip(cpu[threads], cpu[1]))}  # fmt: skip


HEADER = ("| model ({runs} runs) | wall s, 1 thread | {n} threads | ratio | CPU s, 1 thread "
          "| {n} threads | ratio | bit-identical | turns: handed, taken, nudges |")  # fmt: skip


def row(name: str, r: dict) -> str:
    wall_ratio = r.get("wall_ratio", r["wall"] / r["wall1"])
    cpu_ratio = r.get("cpu_ratio", r["cpu"] / r["cpu1"])
    return (f"| {name} | {r['wall1']:.3f} | {r['wall']:.3f} | {wall_ratio:.2f} "
            f"| {r['cpu1']:.3f} | {r['cpu']:.3f} | {cpu_ratio:.2f} | {r['same']} "
            f"| {', '.join(f'{c:g}' for c in r.get('turns', ()))} |")  # fmt: skip


def once(sess, feeds, runs: int, threads: int) -> None:
    """Only ``runs`` runs on ``threads`` new threads, for timing whole processes from outside
    (`/usr/bin/time`, or a paired timer running ``--once 8`` against ``--once 1``)."""
    sess.run(None, feeds)
    run_threads(sess, feeds, runs, threads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="*", default=[])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-turns", action="store_true", help="short runs run side by side")
    ap.add_argument("--warm", action="store_true", help="only long-lived threads (a server's)")
    ap.add_argument("--cold", action="store_true", help="only new threads each round")
    ap.add_argument("--once", type=int, metavar="THREADS", help="only the runs, on THREADS")
    ap.add_argument("--unbound", action="store_true", help="next holder not bound to the core")
    ap.add_argument(
        "--slice",
        type=float,
        help="SLICE_SECONDS (default 0.005; turn.c: RUN_SLICES of it of run time)",
    )
    ap.add_argument(
        "--tiny",
        type=float,
        metavar="S",
        help="TINY_RUN_SECONDS (0: tiny GIL-bound runs take turns too)",
    )
    ap.add_argument("--at-once", type=int, metavar="K", help="turns off, at most K runs at once")
    ap.add_argument("--intra-op", type=int, default=0, metavar="N", help="threads a run uses")
    ap.add_argument("--floor", action="store_true", help="also time a perfect turn's stand-in")
    ap.add_argument("--run-queue", action="store_true", help="also time a run queue's rows")
    ap.add_argument(
        "--warm-rounds",
        type=int,
        default=WARM_ROUNDS,
        metavar="N",
        help="untimed rounds long-lived threads make first (0: one run each only)",
    )
    args = ap.parse_args()
    options = onyx.SessionOptions()
    options.intra_op_num_threads = args.intra_op
    if args.at_once:
        global _gate
        _gate = threading.BoundedSemaphore(args.at_once)
        args.no_turns = True
    if args.slice:
        turns.SLICE_SECONDS = args.slice
    if args.tiny is not None:
        concurrency.TINY_RUN_SECONDS = args.tiny
    if args.unbound:
        turns.BIND_WAITERS = False
    if args.no_turns:
        concurrency.SHORT_RUN_SECONDS = 0.0
    paths = args.model or [os.path.join(ROOT, "tests", "models", m + ".onnx") for m in MODELS]
    if args.once:
        for path in paths:
            sess = onyx.InferenceSession(path, options)
            once(sess, feeds_for(sess, path=path), args.runs, args.once)
        return
    modes = [True] if args.warm else [False] if args.cold else [False, True]
    unbound = ", next holder unbound" if args.unbound else ""
    print(f"{args.runs} runs, {args.rounds} rounds, {os.cpu_count()} cores, "
          f"tiny runs under {concurrency.TINY_RUN_SECONDS * 1e6:g} us without turns, "
          f"turns {'off' if args.no_turns else 'on'}{unbound}, at once {args.at_once or 'any'}, "
          f"intra-op threads {args.intra_op or 'all'}")  # fmt: skip
    print(HEADER.format(runs=args.runs, n=args.threads))
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    paces = []  # (each model's session's Pace after its rounds: whether its runs went tiny)
    for path in paths:
        sess = onyx.InferenceSession(path, options)
        name = os.path.basename(path).removesuffix(".onnx")
        feeds = feeds_for(sess, path=path)
        sessions = [(name, sess)]
        if args.floor:  # (the stand-in's rounds measuring the session: only when asked for)
            sessions.append((f"{name} floor", StandIn(sess, feeds, args.runs)))
            sessions.append((f"{name} perfect turn", PerfectTurn(sess)))
        if args.run_queue:
            sessions.append((f"{name} run queue", RunQueue(sess)))
        for label, runner in sessions:
            for warm in modes:
                own_turns = not isinstance(runner, (PerfectTurn, RunQueue))
                with contextlib.nullcontext() if own_turns else turns_off():
                    result = compare(
                        runner, feeds, args.runs, args.threads, args.rounds, warm, args.warm_rounds
                    )
                kind = "long-lived" if warm else "new"
                print(row(f"{label}, {kind} threads", result), flush=True)
        paces.append((name, sess._pace))  # noqa: SLF001
    if concurrency.TINY_RUN_SECONDS:
        print()
        for name, pace in paces:
            print(f"{name}: {tiny_state(pace)}")


def tiny_state(pace) -> str:
    """What the tiny rule made of a session's runs by the end (concurrency.Pace): a session
    whose tiny runs lost the GIL midway went back to turns (Pace.switched), which its rows
    then measured in part."""
    if pace.tiny():
        return f"tiny runs without turns (lost the GIL midway: {pace.released:.2f})"
    if pace.released > concurrency.RELEASED_SHARE:
        return "back to turns: its tiny runs lost the GIL midway (Pace.switched)"
    if not pace.gil_bound:
        return "turns: ops on the native pool (not GIL-bound)"
    return f"turns: runs of {pace.seconds * 1e6:.0f} us, not tiny"


if __name__ == "__main__":
    main()
