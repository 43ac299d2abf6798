"""Where a run's time goes outside the kernels: the session's bookkeeping around the plan.

    python benchmarks/bench_run_overhead.py                       # the serving zoo, batch 1
    python benchmarks/bench_run_overhead.py --only "vad|lstm" --threads 2

Per model, medians of the calling thread's CPU time per run (time.thread_time, so that a
loaded machine stretches no figure; work on pool or BLAS threads is not counted):

- run: ``session.run`` as a caller makes it (the fast path once the signature is checked);
- runner: the plan's generated runner alone on the same inputs (every kernel, no session);
- session: run - runner, what run() adds: feed checks and views, the run slot, outputs;
- slot: entering and leaving the run slot alone (concurrency.run_slot: the native thread
  setting, BLAS's thread limit set and restored, the turn, the pace sample);
- blas: of the slot, limiting BLAS to the run's wish and restoring it (0 where the session
  has no BLAS wish or BLAS already runs with the count it wishes).

bench_dispatch.py estimates the per-node cost inside the runner against onnxruntime.
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

SERVING = ROOT / "benchmarks" / "models" / "serving"


def feeds_for(session, batch: int) -> dict:
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        if "int" in i.type:
            feeds[i.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            dtype = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = rng.random(shape).astype(dtype)
    return feeds


def cpu_per_call(fn, calls: int, rounds: int = 9) -> float:
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        samples.append((time.thread_time() - start) / calls)
    return statistics.median(samples)


def measure(path: Path, batch: int, threads: int, calls: int) -> dict:
    import onyx
    from onyx.runtime import concurrency
    from onyx.runtime.fpstate import ignoring_fp_errors

    options = onyx.SessionOptions()
    options.intra_op_num_threads = threads
    session = onyx.InferenceSession(str(path), options)
    feeds = feeds_for(session, batch)
    for _ in range(20):  # (the checked first run, then the fast path)
        session.run(None, feeds)
    inputs = session._bind_inputs(feeds)  # noqa: SLF001
    runner = session.plan.runner(None)
    wish = session._run_blas  # noqa: SLF001

    def run_plan():
        with ignoring_fp_errors():
            runner(inputs, None)

    def slot():
        with session._run_slot():  # noqa: SLF001
            pass

    def blas():
        if wish:
            concurrency.limit_blas(wish)
            concurrency._restore_blas()  # noqa: SLF001

    run = cpu_per_call(lambda: session.run(None, feeds), calls)
    inner = cpu_per_call(run_plan, calls)
    return {
        "run": run,
        "runner": inner,
        "session": run - inner,
        "slot": cpu_per_call(slot, calls * 4),
        "blas": cpu_per_call(blas, calls * 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="regex on model names")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", type=float, default=0.05, help="seconds per sample")
    args = parser.parse_args()
    paths = sorted(p for p in SERVING.glob("*.onnx") if re.search(args.only, p.stem))
    if not paths:
        sys.exit(f"no models in {SERVING} (generate the serving zoo first: benchmarks/run.py)")
    print(f"CPU us per run, {args.threads} thread(s), batch {args.batch}")
    cols = ("run", "runner", "session", "slot", "blas")
    print(f"| model | {' | '.join(cols)} |\n|---|{'---:|' * len(cols)}")
    for path in paths:
        probe = measure(path, args.batch, args.threads, 20)
        calls = max(20, int(args.target / max(probe["run"], 1e-7)))
        row = measure(path, args.batch, args.threads, calls)
        print(f"| {path.stem} | " + " | ".join(f"{row[c] * 1e6:.2f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
