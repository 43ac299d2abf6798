"""Timing helpers the per-op micro-benchmarks share (bench_conv.py, bench_resize.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np


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
