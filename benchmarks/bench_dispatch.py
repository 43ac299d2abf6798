"""Per-node dispatch overhead: onyx vs onnxruntime on the tiny fixture zoo at batch 1.

    python benchmarks/bench_dispatch.py                  # every unquantized zoo model
    python benchmarks/bench_dispatch.py --only "gpt|bert" --repeat 300

Both runtimes get one thread (onyx's BLAS through threadpoolctl, onnxruntime's intra-op pool)
and run interleaved in one process, so that a loaded machine hurts both alike; latencies are
medians. The per-node overhead is onyx's latency minus the sum of its kernel times (each kernel
call of a run replayed alone on the same arguments), divided by the number of nodes run: what
the plan's loop and the session's feed/output handling cost per node. Replayed kernels find
their data in cache, so the estimate errs on the high side.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402


def onyx_session(path: str):
    import onyx

    return onyx.InferenceSession(path)


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


class _Recorder:
    """A stand-in profiler for Plan.run: keeps each step with the arguments it ran on."""

    def __init__(self):
        self.calls: list = []

    def node(self, step, start, end, args, result) -> None:
        self.calls.append((step, list(args), end - start))

    def span(self, *args, **kwargs) -> None:
        pass


def kernel_time(sess, feeds: dict, repeat: int) -> tuple[float, int]:
    """(summed kernel seconds per run, nodes per run): every kernel call of one run replayed
    alone on the same arguments, ``repeat`` times round-robin, median per call. Kernels that
    take a context (subgraphs, Split) count with their time in the recorded run."""
    from onyx.runtime.plan import Frame

    plan = sess.plan  # the session's compiled plan
    recorder = _Recorder()
    with np.errstate(all="ignore"):
        plan.run(sess._bind_inputs(feeds), None, None, profiler=recorder)  # noqa: SLF001
        times: list[list[float]] = [[] for _ in recorder.calls]
        frame = Frame(plan, list(plan.template), None)
        for _ in range(repeat):
            for k, (step, args, dur) in enumerate(recorder.calls):
                if step.uses_frame:
                    times[k].append(dur)
                    continue
                t = time.perf_counter()
                step.call(args, frame)
                times[k].append(time.perf_counter() - t)
    return sum(statistics.median(t) for t in times), len(recorder.calls)


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
    with threadpool_limits(1):
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
            kern, nodes = kernel_time(ox, feeds, max(20, args.repeat // 4))
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
