"""One session shared by threads: total time of a fixed number of runs on 1 thread against
the same runs spread over 8 threads, and whether every result is bit-identical.

    python benchmarks/bench_concurrency.py [--model tests/models/bert_dynamo_op18.onnx]
        [--runs 400] [--threads 8]

Concurrent runs must not oversubscribe the cores (each thread's BLAS call starting its own
threads): the 8-thread total should not exceed the 1-thread one.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


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


def run_threads(sess, feeds, runs: int, threads: int) -> tuple[float, list]:
    results: list = [None] * runs
    per = runs // threads

    def work(k: int) -> None:
        for j in range(k * per, (k + 1) * per):
            results[j] = sess.run(None, feeds)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return time.perf_counter() - t, results[: per * threads]


def identical(a: list, b: list) -> bool:
    return all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default=os.path.join(ROOT, "tests", "models", "bert_dynamo_op18.onnx")
    )
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    sess = onyx.InferenceSession(args.model)
    feeds = feeds_for(sess)
    reference = sess.run(None, feeds)
    run_threads(sess, feeds, args.threads, args.threads)  # warm-up
    t1, r1 = run_threads(sess, feeds, args.runs, 1)
    tn, rn = run_threads(sess, feeds, args.runs, args.threads)
    same = all(identical(reference, r) for r in r1 + rn)
    print(f"model {os.path.basename(args.model)}, {args.runs} runs, {os.cpu_count()} cores")
    print(f"1 thread: {t1:.3f} s   {args.threads} threads: {tn:.3f} s   ratio {tn / t1:.2f}")
    print(f"bit-identical: {same}")


if __name__ == "__main__":
    main()
