"""What bound steps (registry.binds, plan.BoundCall) save on small models, in one process.

    python benchmarks/bench_bound_steps.py                  # tiny fixtures + serving NNs
    python benchmarks/bench_bound_steps.py --only "bert|d128" --repeat 1000

Each model's session runs with its bound steps as they are and with every bound step turned
back into its kernel called as written (the runners made afresh), rounds interleaved so that
a loaded machine hurts both alike. Figures are CPU time of the calling thread
(time.thread_time_ns) at one thread, medians over the rounds' medians, in microseconds; the
outputs of both are compared bit for bit.
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

from benchmarks.bench_replay_estimate import cases  # noqa: E402


def run_time(sess, feeds: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.thread_time_ns()
        sess.run(None, feeds)
        times.append(time.thread_time_ns() - t)
    return statistics.median(times) / 1e3


class Unbound:
    """The session's bound steps as their kernels called as written, inside the block."""

    def __init__(self, sess):
        from onyx.runtime.plan import BoundCall

        self.plan = sess.plan
        self.steps = [s for s in self.plan.default_schedule if s.fn.__class__ is BoundCall]
        self.bound = [s.fn for s in self.steps]

    def __enter__(self):
        for s, bound in zip(self.steps, self.bound):
            s.fn, s.attrs = bound.fn, bound.attrs
        self.plan._runners.clear()  # noqa: SLF001  (the runners bind the kernels they were made with)

    def __exit__(self, *exc) -> None:
        for s, bound in zip(self.steps, self.bound):
            s.fn, s.attrs = bound, {}
        self.plan._runners.clear()  # noqa: SLF001


def measure(name: str, path: str, feeds: dict, repeat: int, rounds: int) -> dict:
    import onyx

    options = onyx.SessionOptions()
    options.intra_op_num_threads = 1
    sess = onyx.InferenceSession(path, options)
    for _ in range(20):
        bound_out = sess.run(None, feeds)
    unbound = Unbound(sess)
    on, off = [], []
    for _ in range(rounds):
        on.append(run_time(sess, feeds, repeat))
        with unbound:
            sess.run(None, feeds)
            off.append(run_time(sess, feeds, repeat))
            plain_out = sess.run(None, feeds)
    same = all(np.array_equal(a, b) for a, b in zip(bound_out, plain_out))
    return dict(
        name=name,
        bound=len(unbound.steps),
        steps=len(sess.plan.default_schedule),
        on=statistics.median(on),
        off=statistics.median(off),
        same=same,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="regex on model names")
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| model | bound steps | as written us | bound us | ratio | outputs |")
    print("|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for name, path, feeds in cases():
            if not re.search(args.only, name):
                continue
            r = measure(name, path, feeds, args.repeat, args.rounds)
            print(
                f"| {r['name']} | {r['bound']}/{r['steps']} | {r['off']:.1f} | {r['on']:.1f} "
                f"| {r['on'] / r['off']:.2f} | {'identical' if r['same'] else 'DIFFER'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
