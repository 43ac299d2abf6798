"""Where a small model's run time goes, and what a native replay loop would remove (issue 23).

    python benchmarks/bench_replay_estimate.py                 # tiny fixtures + serving NNs
    python benchmarks/bench_replay_estimate.py --only vad --repeat 800

All figures are CPU time of the calling thread (time.thread_time_ns) at one thread, medians:
a loaded machine hurts them less than wall time. Per model:

- run: the session's run;
- fixed: the same run with every kernel swapped for one returning its recorded result (the
  generated runner and run() around the steps);
- per step, timed in a loop, once as it is and once with the native pool's entry
  (lib.onyx_parallel) stubbed out: the difference is the step's native part, the rest its
  Python (and numpy) part. Step times are scaled so that they add up to run - fixed.

The replay estimate keeps the native part of every step that enters the pool and all the time
of the others (numpy, BLAS, native calls outside the pool), a fifth of view ops' time, the fixed
part, and 1 us per return to Python (one per run of consecutive native steps). It is an upper
bound for steps that enter the pool and also do numpy work, a lower one for steps whose native
call is not the pool's. "GIL held" is the run's time outside native parts.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

SERVING = ("audio_vad", "audio_kws", "cnn_unet", "cnn_mobilenet", "transformer_d128", "rnn_lstm7")
FIXTURES = ("gru", "lstm", "mobilenet", "resnet", "unet", "bert")
#: ops that are views (or shape reads) on these models: a replay keeps a fifth of their time
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape"})
RETURN_US = 1.0  # a return from the native loop to Python and back


def cases() -> list[tuple[str, str, dict]]:
    from benchmarks.zoo import make_feeds, zoo_models

    out = [
        (f"tiny/{m.name.split('_')[0]}", str(m.path), m.feeds(batch=1))
        for m in zoo_models(quantized=False, ort_optimized=False)
        if m.family in FIXTURES and m.name == f"{m.family}_torchscript_op17"
    ]
    folder = ROOT / "benchmarks" / "models" / "serving"
    manifest = folder / "manifest.json"
    if manifest.exists():
        entries = json.loads(manifest.read_text())
        out += [
            (name, str(folder / entries[name]["file"]), make_feeds(entries[name]["inputs"], 1))
            for name in SERVING
            if name in entries
        ]
    return out


def run_time(sess, feeds: dict, repeat: int) -> float:
    """Median CPU microseconds of sess.run."""
    times = []
    for _ in range(repeat):
        t = time.thread_time_ns()
        sess.run(None, feeds)
        times.append(time.thread_time_ns() - t)
    return statistics.median(times) / 1e3


def recorded(plan, inputs: list) -> tuple[list, object]:
    """Each step of one run with its arguments and results; the run's frame."""
    frame = plan.frame(inputs, None)
    slots, calls = frame.slots, []
    for step in plan.default_schedule:
        args = [slots[i] if i >= 0 else None for i in step.ins]
        result = step.call(args, frame)
        calls.append((step, args, result))
        for slot, value in zip(step.outs, result):
            if slot >= 0:
                slots[slot] = value
    return calls, frame


def step_times(calls: list, frame, repeat: int, timer_us: float) -> list[float]:
    """Median CPU microseconds of each step, replayed in order on its recorded arguments."""
    times: list[list[int]] = [[] for _ in calls]
    for _ in range(repeat):
        for k, (step, args, _) in enumerate(calls):
            t = time.thread_time_ns()
            step.call(args, frame)
            times[k].append(time.thread_time_ns() - t)
    return [max(statistics.median(t) / 1e3 - timer_us, 0.0) for t in times]


def fixed_time(sess, feeds: dict, calls: list, repeat: int) -> float:
    """run_time with every kernel returning its recorded result."""
    plan = sess.plan
    saved = [step.fn for step, _, _ in calls]
    for step, _, result in calls:
        step.fn = lambda *a, _r=result, **k: _r
    plan._runners.clear()  # noqa: SLF001  (the runners bind the kernels they were made with)
    try:
        run_time(sess, feeds, 20)
        return run_time(sess, feeds, repeat)
    finally:
        for (step, _, _), fn in zip(calls, saved):
            step.fn = fn
        plan._runners.clear()  # noqa: SLF001


def estimate(name: str, path: str, feeds: dict, repeat: int, timer_us: float) -> dict:
    import onyx
    from onyx.runtime.native import _core

    options = onyx.SessionOptions()
    options.intra_op_num_threads = 1
    sess = onyx.InferenceSession(path, options)
    for _ in range(20):
        sess.run(None, feeds)
    full = run_time(sess, feeds, repeat)
    plan = sess.plan
    inputs = [feeds.get(v.name) for v in plan.graph.inputs]
    lib, pool = _core.lib, _core.lib.onyx_parallel
    entered = [0]

    def counting(*args):
        entered[0] += 1
        return pool(*args)

    lib.onyx_parallel = counting
    try:
        with np.errstate(all="ignore"):
            calls, frame = recorded(plan, inputs)
            native_calls = []
            for step, args, _ in calls:
                before = entered[0]
                step.call(args, frame)
                native_calls.append(entered[0] - before)
            lib.onyx_parallel = pool
            real = step_times(calls, frame, repeat // 4, timer_us)
            lib.onyx_parallel = lambda *args: 0
            stubbed = step_times(calls, frame, repeat // 4, timer_us)
    finally:
        lib.onyx_parallel = pool
    fixed = fixed_time(sess, feeds, calls, repeat)
    scale = (full - fixed) / max(sum(real), 1e-9)
    parts = collections.Counter()
    blockers: collections.Counter = collections.Counter()
    segments, in_segment = 0, False
    for (step, _, _), r, u, n in zip(calls, real, stubbed, native_calls):
        r, u = r * scale, min(u, r) * scale
        if n:
            parts["native"] += r - u
            parts["python of native steps"] += u
            segments += not in_segment
            in_segment = True
        elif step.node.op_type in VIEWS:
            parts["views"] += r
        else:
            parts["other"] += r
            blockers[step.node.op_type] += 1
            in_segment = False
    replay = parts["native"] + parts["other"] + parts["views"] / 5 + fixed + RETURN_US * segments
    return dict(
        name=name,
        run=full,
        fixed=fixed,
        parts=parts,
        replay=replay,
        segments=segments,
        native_calls=sum(native_calls),
        gil_now=(full - parts["native"]) / full,
        gil_replay=(replay - parts["native"]) / replay,
        blockers=blockers,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="regex on model names")
    ap.add_argument("--repeat", type=int, default=800)
    args = ap.parse_args()
    timer = []
    for _ in range(20000):
        t = time.thread_time_ns()
        timer.append(time.thread_time_ns() - t)
    timer_us = statistics.median(timer) / 1e3
    print(
        "| model | run us | fixed | native parts | Python of native steps | views | numpy/other "
        "| replay est. | less | pool calls | segments | GIL held now -> replay | what blocks |"
    )
    print("|---" * 13 + "|")
    with threadpool_limits(1):
        for name, path, feeds in cases():
            if not re.search(args.only, name):
                continue
            e = estimate(name, path, feeds, args.repeat, timer_us)
            p = e["parts"]
            blocks = ", ".join(f"{op} x{n}" for op, n in e["blockers"].most_common(5))
            print(
                f"| {name} | {e['run']:.0f} | {e['fixed']:.0f} | {p['native']:.0f} "
                f"| {p['python of native steps']:.0f} | {p['views']:.0f} | {p['other']:.0f} "
                f"| {e['replay']:.0f} | {1 - e['replay'] / e['run']:.0%} | {e['native_calls']} "
                f"| {e['segments']} | {e['gil_now']:.0%} -> {e['gil_replay']:.0%} | {blocks} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
