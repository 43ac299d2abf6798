"""Per-node dispatch overhead: onyx vs onnxruntime on the tiny fixture zoo at batch 1.

    python benchmarks/bench_dispatch.py                  # every unquantized zoo model
    python benchmarks/bench_dispatch.py --only "gpt|bert" --repeat 300

Both runtimes get one thread (onyx's BLAS through threadpoolctl, onnxruntime's intra-op pool)
and run interleaved in one process, so that a loaded machine hurts both alike; latencies are
medians. The per-node overhead is onyx's latency minus the sum of its kernel times (from the
session's own profiler, which times each kernel call alone), divided by the number of nodes
run: what the plan's loop and the session's feed/output handling cost per node.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402


def onyx_session(path: str, profile_prefix: str | None = None):
    import onyx

    so = onyx.SessionOptions()
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return onyx.InferenceSession(path, so)


def ort_session(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def interleaved(runs: dict, repeat: int) -> dict[str, float]:
    """Median seconds per call of each runner, calls interleaved round-robin."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(repeat):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def kernel_time(path: str, feeds: dict, repeat: int, tmp: str) -> tuple[float, float]:
    """(median summed kernel seconds per run, nodes per run) from onyx's profiler."""
    sess = onyx_session(path, profile_prefix=os.path.join(tmp, "p"))
    for _ in range(repeat):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    # node events are written as they end and each run's span after its nodes: a run's nodes are
    # those before its span
    per_run: list[list[float]] = [[]]
    for e in events:
        if e["cat"] == "Node":
            per_run[-1].append(e["dur"] * 1e-6)
        elif e["name"] == "model_run":
            per_run.append([])
    per_run = [r for r in per_run if r][1:]  # drop the first (warm-up) run
    return statistics.median(sum(r) for r in per_run), statistics.median(len(r) for r in per_run)


def main() -> None:
    from benchmarks.zoo import zoo_models

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="regex on model names")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--quantized", action="store_true", help="include the quantized models")
    args = ap.parse_args()

    models = [
        m
        for m in zoo_models(quantized=args.quantized)
        if m.path.exists() and re.search(args.only, m.name)
    ]
    print(
        f"{'model':26s} {'nodes':>5s} {'onyx ms':>8s} {'ort ms':>7s} {'ratio':>6s} "
        f"{'kernels ms':>10s} {'overhead us/node':>16s}"
    )
    ratios = []
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        for m in models:
            feeds = m.feeds(1)
            ox, rt = onyx_session(str(m.path)), ort_session(str(m.path))
            med = interleaved(
                {
                    "onyx": lambda f=feeds, s=ox: s.run(None, f),
                    "ort": lambda f=feeds, s=rt: s.run(None, f),
                },
                args.repeat,
            )
            kern, nodes = kernel_time(str(m.path), feeds, max(20, args.repeat // 4), tmp)
            per_node = (med["onyx"] - kern) / max(nodes, 1)
            ratios.append(med["onyx"] / med["ort"])
            print(
                f"{m.name:26s} {nodes:5.0f} {med['onyx'] * 1e3:8.3f} {med['ort'] * 1e3:7.3f} "
                f"{ratios[-1]:6.2f} {kern * 1e3:10.3f} {per_node * 1e6:16.2f}"
            )
    if ratios:
        print(f"geomean onyx/onnxruntime: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
