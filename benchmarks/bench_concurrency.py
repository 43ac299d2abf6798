"""One session shared by threads: total time of a fixed number of runs on 1 thread against
the same runs spread over 8 threads, and whether every result is bit-identical.

    python benchmarks/bench_concurrency.py [--model tests/models/bert_dynamo_op18.onnx ...]
        [--runs 400] [--threads 8] [--rounds 5] [--no-turns]

Concurrent runs must not oversubscribe the cores (each thread's BLAS call starting its own
threads), nor take the GIL from each other (short runs take turns, runtime/concurrency.py):
the 8-thread total should not exceed the 1-thread one. The two are timed in alternating
rounds and the medians compared (on a shared machine single rounds vary by 2x or more).
--no-turns lets short runs run side by side (the behaviour before turns), for comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402
from onyx.runtime import concurrency  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = ("bert_dynamo_op18", "gpt_dynamo_op18", "mobilenet_quant_qdq", "resnet_dynamo_op18")


def feeds_for(sess, seed: int = 0) -> dict:
    """Random feeds of the inputs' declared shapes (symbolic dims as 1, or 8 for sequences)."""
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


def run_threads(sess, feeds, runs: int, threads: int) -> tuple[float, float, list]:
    """Wall and CPU seconds (the process's) of ``runs`` runs spread over ``threads`` threads,
    and their results."""
    results: list = [None] * runs
    per = runs // threads

    def work(k: int) -> None:
        for j in range(k * per, (k + 1) * per):
            results[j] = sess.run(None, feeds)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t, cpu = time.perf_counter(), time.process_time()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return time.perf_counter() - t, time.process_time() - cpu, results[: per * threads]


def identical(a: list, b: list) -> bool:
    return all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def compare(sess, feeds, runs: int, threads: int = 8, rounds: int = 5) -> dict:
    """Median wall and CPU seconds of ``runs`` runs on 1 thread and on ``threads`` threads
    (alternating rounds), and whether every result equals a lone run's bit for bit. (On a
    shared machine the wall time also measures the other processes; the CPU time does not.)"""
    reference = sess.run(None, feeds)
    run_threads(sess, feeds, threads, threads)  # warm-up
    wall: dict[int, list[float]] = {1: [], threads: []}
    cpu: dict[int, list[float]] = {1: [], threads: []}
    same = True
    for r in range(rounds):
        for n in (1, threads) if r % 2 == 0 else (threads, 1):
            seconds, cpu_seconds, results = run_threads(sess, feeds, runs, n)
            wall[n].append(seconds)
            cpu[n].append(cpu_seconds)
            same &= all(identical(reference, got) for got in results)
    med = statistics.median
    return {"wall1": med(wall[1]), "wall": med(wall[threads]), "cpu1": med(cpu[1]),
            "cpu": med(cpu[threads]), "same": same}  # fmt: skip


HEADER = ("| model ({runs} runs) | wall s, 1 thread | {n} threads | ratio | CPU s, 1 thread "
          "| {n} threads | ratio | bit-identical |")  # fmt: skip


def row(name: str, r: dict) -> str:
    return (f"| {name} | {r['wall1']:.3f} | {r['wall']:.3f} | {r['wall'] / r['wall1']:.2f} "
            f"| {r['cpu1']:.3f} | {r['cpu']:.3f} | {r['cpu'] / r['cpu1']:.2f} | {r['same']} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="*", default=[])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-turns", action="store_true", help="short runs run side by side")
    args = ap.parse_args()
    if args.no_turns:
        concurrency.SHORT_RUN_SECONDS = 0.0
    paths = args.model or [os.path.join(ROOT, "tests", "models", m + ".onnx") for m in MODELS]
    print(f"{args.runs} runs, {args.rounds} rounds, {os.cpu_count()} cores, "
          f"turns {'off' if args.no_turns else 'on'}")  # fmt: skip
    print(HEADER.format(runs=args.runs, n=args.threads))
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for path in paths:
        sess = onyx.InferenceSession(path)
        result = compare(sess, feeds_for(sess), args.runs, args.threads, args.rounds)
        print(row(os.path.basename(path).removesuffix(".onnx"), result), flush=True)


if __name__ == "__main__":
    main()
