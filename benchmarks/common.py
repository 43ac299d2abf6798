"""Timing helpers the benchmarks share (bench_conv.py, bench_resize.py, bench_scale.py,
bench_validate.py)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import numpy as np


def median_time(fn: Callable, repeat: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The median of ``repeat`` timed calls of ``fn`` (``clock``: wall time, or CPU time with
    time.process_time)."""
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def calls_for(fn: Callable, target: float) -> int:
    """How many calls make one timed batch of about ``target`` seconds (after a warm-up)."""
    fn()
    t = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t, 1e-7)
    return max(1, min(1000, int(target / once)))


def time_alternating(runners: dict[str, Callable], rounds: int, target: float) -> dict:
    """Median seconds per call of each runner: batches of calls of about ``target`` seconds,
    the runners taking turns per round (the order alternates so neither always goes first)."""
    calls = {k: calls_for(fn, target) for k, fn in runners.items()}
    times: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(rounds):
        for k in list(runners)[:: 1 if r % 2 == 0 else -1]:
            fn, n = runners[k], calls[k]
            t = time.perf_counter()
            for _ in range(n):
                fn()
            times[k].append((time.perf_counter() - t) / n)
    return {k: float(np.median(v)) for k, v in times.items()}


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference of two outputs (nan when their shapes differ)."""
    if a.shape != b.shape:
        return float("nan")
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0


def report(cases, before: dict, width: int, group_of: Callable | None = None) -> None:
    """One line per case (``name`` and ``results`` with onyx, ort, ratio, max_diff seconds), then
    the geomean and worst ratio per group (``group_of(case)``) and over all cases; ``before``
    maps case names to earlier ratios (a --compare file) shown alongside."""
    head = f"{'case':{width}} {'onyx ms':>9} {'ort ms':>9} {'ratio':>6}"
    print(head + (f" {'before':>7}" if before else "") + f" {'max diff':>9}")
    for c in cases:
        r = c.results
        line = f"{c.name:{width}} {r['onyx'] * 1e3:9.3f} {r['ort'] * 1e3:9.3f} {r['ratio']:6.2f}"
        if before:
            line += f" {before[c.name]:7.2f}" if c.name in before else f" {'':>7}"
        print(line + f" {r['max_diff']:9.2g}")
    print()
    groups: dict[str, list] = {}
    for c in cases if group_of is not None else ():
        groups.setdefault(group_of(c), []).append(c)
    groups["all"] = cases
    for g, members in groups.items():
        line = f"geomean {g:28} {geomean(c.results['ratio'] for c in members):6.2f}"
        known = [c for c in members if c.name in before]
        if known:
            line += f"   before {geomean(before[c.name] for c in known):6.2f}"
        line += f"   worst {max(c.results['ratio'] for c in members):6.2f}"
        print(line + f"   ({len(members)} cases)")
