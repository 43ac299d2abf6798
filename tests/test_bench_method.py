"""The benchmark harness's timing rule (benchmarks/run.py): the same for both runtimes, and a
burst of another process that slows some blocks of a row does not move its latency."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import run  # noqa: E402


def test_latency_is_the_lowest_block_median():
    quiet, burst = [1.0, 1.1, 0.9, 1.0, 5.0], [2.0, 2.1, 1.9, 2.0, 2.0]
    # a burst over three of five blocks moved the median of all calls; not the lowest median
    assert run.latency_of([burst, quiet, burst, quiet, burst]) == 1.0
    assert run.latency_of([[3.0], [], [2.0, 4.0]]) == 3.0


def test_block_bounds():
    least, most = run.block_bounds(0.0005, 50, 2.0, 5)  # a short model: time decides
    assert (least, most) == (10, 800)
    assert run.block_bounds(0.06, 50, 2.0, 5) == (6, 6)  # a long one: the budget's share
    assert run.block_bounds(10.0, 50, 2.0, 5) == (2, 2)


def test_a_block_lasts_block_seconds(monkeypatch):
    monkeypatch.setattr(run, "BLOCK_SECONDS", 0.01)
    calls = []
    times = run.timed_block(lambda feeds: calls.append(feeds), "f", 3, 10**6)
    assert len(times) == len(calls) > 3 and calls[0] == "f"
    assert len(run.timed_block(lambda feeds: None, None, 2, 5)) == 5  # (the most, first)


def test_a_block_waits_for_the_other_runtimes_threads(monkeypatch):
    """settle() waits while another thread of the process spins (a runtime's idle pool after
    its block, still wanting a core) and returns once it has stopped."""
    import hashlib
    import threading

    import pytest

    if run.other_threads() is None:
        pytest.skip("no per-thread CPU counters on this system")
    monkeypatch.setattr(run, "SETTLE", 0.01)
    stop, data = threading.Event(), bytes(1 << 22)

    def spin():  # (hashing without the GIL, as a native pool spins)
        while not stop.is_set():
            hashlib.sha256(data).digest()

    spinner = threading.Thread(target=spin)
    spinner.start()
    threading.Timer(0.3, stop.set).start()
    try:
        assert run.settle() >= 0.3  # (it was still spinning until then)
    finally:
        stop.set()
        spinner.join()
    assert run.settle() < run.SETTLE_MAX  # (quiet now)
