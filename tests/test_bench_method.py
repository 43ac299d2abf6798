"""The benchmark harness's timing rule (benchmarks/run.py): the same for both runtimes; a row's
onyx/onnxruntime is the median of paired block ratios, which a spell of the machine running
slower or faster (over one runtime's turn, or over half the row) does not move."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import run  # noqa: E402


def _row(pairs: int, a: float, b: float, speed) -> tuple[list, list]:
    """Fake blocks of a row in pair_order: runtime a's calls take ``a`` seconds, b's ``b``,
    times the machine's slowness ``speed(block)`` for the block's place in time order."""
    blocks: tuple[list, list] = ([], [])
    for t, (k, _) in enumerate(run.pair_order(pairs)):
        blocks[k].append([(a, b)[k] * speed(t) * j for j in (0.99, 1.0, 1.02)])
    return blocks


def test_a_speed_spell_over_one_runtimes_turn_does_not_move_the_ratio():
    """The VM ran 1.7x faster for a moment: the two blocks of one turn of onnxruntime's (ABBA:
    blocks 5 and 6 of 42 are both its). The lowest block median per runtime, the rule before,
    took onnxruntime's figure from that moment and onyx's from the rest (a row of ratio 1.0
    read 1.7); the paired median moves with the two pairs that spell split, not beyond."""
    onyx, ort = _row(21, 1.0, 1.0, lambda t: 1 / 1.7 if t in (5, 6) else 1.0)
    assert run.pair_order(21)[5][0] == run.pair_order(21)[6][0] == 1
    old = min(map(np.median, onyx)) / min(map(np.median, ort))
    assert old > 1.6  # (what the rule before read)
    assert run.paired_ratio(onyx, ort)["ratio"] == 1.0
    assert run.paired_ratio(onyx, ort)["q3"] == 1.0  # (2 of 21 pairs: beyond the quartiles)


def test_a_speed_spell_over_half_the_row_does_not_move_the_ratio():
    """The VM ran 1.7x slower over the second half of the blocks (from the middle of a pair)
    and drifted within each half: every pair whose blocks ran at one speed reads 0.8."""
    onyx, ort = _row(21, 0.8, 1.0, lambda t: (1.7 if t >= 21 else 1.0) * (1 + 0.002 * t))
    r = run.paired_ratio(onyx, ort)
    assert abs(r["ratio"] - 0.8) < 0.002 and r["pairs"] == 21
    assert 0.79 < r["q1"] <= r["ratio"] <= r["q3"] < 0.81


def test_pair_order_is_abba():
    order = run.pair_order(4)
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2), (1, 3), (0, 3)]
    # each runtime goes first in half of the pairs, and a pair's two blocks are adjacent
    assert sum(k for k, _ in order[::2]) == 2


def test_paired_ratio_of_uneven_or_empty_rows():
    assert run.paired_ratio([], [[1.0]]) is None
    r = run.paired_ratio([[2.0], [3.0], []], [[1.0], [1.0], [1.0], [1.0]])
    assert r["pairs"] == 2 and r["ratio"] == 2.5  # (a block without calls pairs with nothing)


def test_latency_column_is_the_median_block_median():
    quiet, burst = [1.0, 1.1, 0.9, 1.0, 5.0], [2.0, 2.1, 1.9, 2.0, 2.0]
    assert run.latency_of([burst, quiet, burst, quiet, quiet]) == 1.0
    assert run.latency_of([[3.0], [], [2.0, 4.0]]) == 3.0


def test_block_bounds_and_pair_count():
    assert run.block_bounds(0.0005, 50, 2.0, 21) == (2, 190)  # a short model: time decides
    assert run.block_bounds(0.06, 50, 2.0, 21) == (1, 1)  # a long one: the budget's share
    assert run.block_bounds(10.0, 50, 2.0, 5) == (1, 1)
    assert run.pair_count([0.00002, 0.00003], 2.0, 21) == 21
    assert run.pair_count([0.06, 0.2], 2.0, 21) == 10  # (the slower one's calls in the budget)
    assert run.pair_count([0.5, 0.9], 2.0, 21) == run.MIN_PAIRS == 3


def test_a_row_reads_its_paired_ratio():
    case = run.Case("m b1", "serving", "", {})
    case.results = {"onyx": {"latency": 2.0}, "onnxruntime": {"latency": 1.0}}
    assert run.ratio(case, "onyx", "onnxruntime") == 2.0  # (no pairs: the latency ratio)
    case.results["paired"] = {"ratio": 1.5, "q1": 1.4, "q3": 1.6, "pairs": 21}
    assert run.ratio(case, "onyx", "onnxruntime") == 1.5
    assert run.quartiles(case) == "1.40-1.60"


def test_timed_pairs_runs_blocks_in_pair_order(monkeypatch):
    monkeypatch.setattr(run, "settle", lambda: 0.0)
    monkeypatch.setattr(run, "BLOCK_SECONDS", 0.0)
    log = []
    runs = [lambda f: log.append("a"), lambda f: log.append("b")]
    blocks, _ = run.timed_pairs(runs, None, [(1, 1), (2, 2)], 3, 1.0)
    assert [len(b) for b in blocks] == [3, 3] and list(map(len, blocks[1])) == [2, 2, 2]
    # (each turn: one untimed call, then its blocks, as pair_order says: a | b b | a a | b)
    assert "".join(log) == "a" + "a" + "b" + "bb" * 2 + "a" + "a" * 2 + "b" + "bb"
    log.clear()  # (a slow model's turns: no untimed call, WARM_CALL_MAX)
    run.timed_pairs(runs, None, [(1, 1), (2, 2)], 3, 1.0, [False, False])
    assert "".join(log) == "a" + "bb" * 2 + "a" * 2 + "bb"


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
    import time

    import pytest

    if run.other_threads() is None:
        pytest.skip("no per-thread CPU counters on this system")
    monkeypatch.setattr(run, "SETTLE", 0.01)
    stop, data = threading.Event(), bytes(1 << 22)

    def spin():  # (hashing without the GIL, as a native pool spins)
        while not stop.is_set():
            hashlib.sha256(data).digest()

    stopped_at = []

    def stop_spinning():
        stopped_at.append(time.perf_counter())
        stop.set()

    spinner = threading.Thread(target=spin)
    spinner.start()
    threading.Timer(0.3, stop_spinning).start()
    try:
        run.settle()
        returned = time.perf_counter()
        # (it waited for the spinner: it returned after the spinner was told to stop; a
        # threshold on settle()'s own seconds failed when the timer fired a little early
        # relative to settle's start)
        assert stopped_at and returned >= stopped_at[0]
    finally:
        stop.set()
        spinner.join()
    assert run.settle() < run.SETTLE_MAX  # (quiet now)
