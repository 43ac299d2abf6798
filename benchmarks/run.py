"""The benchmark: onyx vs onnxruntime vs onnx's ReferenceEvaluator, one command.

    python scripts/make_zoo.py --bench  # once: the realistic-size zoo into benchmarks/models/
    python benchmarks/run.py            # full run, writes docs/benchmarks.md and docs/benchmarks.png
    python benchmarks/run.py --quick    # fewer repeats, batch 1 only, memory on the zoo only
    python benchmarks/run.py --only gpt --no-memory --no-reference

Sets: the zoo (benchmarks/models at realistic sizes, batch 1 and 8; the tiny fixtures of
tests/models stand in, with a note, until it is built), the tiny fixture zoo at batch 1 as a
set of its own (it measures per-node dispatch overhead, not kernels), onnx's light models, a
scikit-learn tree ensemble and a linear pipeline (converted with skl2onnx). Every runtime gets
the same feeds and the same thread count; onyx and onnxruntime take turns in blocks of runs
(not call by call: each one's worker threads spin after a call and would slow the other),
each turn starting when the other's threads have stopped spinning (``settle``), in pairs of
adjacent blocks in ABBA order (``pair_order``). A row's onyx/onnxruntime is the median of its
pairs' ratios (``paired_ratio``: the VM's slow and fast spells move both blocks of a pair
alike), its latency columns each runtime's median block median (``latency_of``); session
creation the median of a few creations; peak memory the peak RSS growth of a fresh process that
creates the session and runs it (so onnxruntime's native allocations count too). The reference
evaluator runs once per model where it is slow (cut at --reference-timeout seconds) and is
skipped at batch 8 where batch 1 failed or took over a second. See README.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

# ---------------------------------------------------------------------------------- the cases

# group -> the title of its set in the report
SETS = {
    "zoo": "zoo (realistic sizes)",
    "fixture": "dispatch overhead: tiny fixture models",
    "light": "light models",
    "sklearn": "scikit-learn",
}
#: the serving sets (issue 23), reported in a block of their own (see serving_block)
SERVING_SETS = {
    "serving": "serving zoo",
    "scaling": "scaling: latency vs batch and threads",
}


@dataclass
class Case:
    name: str
    group: str  # zoo, fixture, light, sklearn
    path: str
    feeds: dict
    batch: int = 1
    model: str = ""  # the model's name (cases of one model at several batches share it)
    threads: int | None = None  # the case's own thread count (scaling), else --threads
    results: dict = field(default_factory=dict)  # runtime -> {latency, create, peak_mb, ...}


def zoo_cases(batches) -> tuple[list[Case], bool]:
    """The zoo set: the realistic-size zoo if built, else the fixtures; and whether it is built."""
    from benchmarks.zoo import bench_models, zoo_models

    models = bench_models()
    built = bool(models)
    cases = [
        Case(f"{m.name} b{b}", "zoo", str(m.path), m.feeds(batch=b), b, m.name)
        for m in models or zoo_models()
        for b in batches
    ]
    return cases, built


def fixture_cases() -> list[Case]:
    """The tiny fixtures at batch 1, named tiny/... (their names are the zoo's names)."""
    from benchmarks.zoo import zoo_models

    return [
        Case(f"tiny/{m.name} b1", "fixture", str(m.path), m.feeds(batch=1), 1, f"tiny/{m.name}")
        for m in zoo_models()
    ]


def light_cases() -> list[Case]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    cases = []
    for path in sorted(glob.glob(str(folder / "*.onnx"))):
        m = onnx.load(path, load_external_data=False)
        inits = {t.name for t in m.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {}
        for i in m.graph.input:
            if i.name in inits:
                continue
            t = i.type.tensor_type
            shape = [d.dim_value or 1 for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        cases.append(Case(Path(path).stem, "light", path, feeds, 1, Path(path).stem))
    return cases


def sklearn_cases(workdir: str) -> list[Case]:
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = make_classification(2000, 20, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    models = {
        "sklearn_random_forest": RandomForestClassifier(100, max_depth=10, random_state=0),
        "sklearn_linear_pipeline": make_pipeline(
            StandardScaler(), PCA(10), LogisticRegression(max_iter=500)
        ),
    }
    cases = []
    for name, est in models.items():
        est.fit(x, y)
        no_zipmap = {
            RandomForestClassifier: {"zipmap": False},
            LogisticRegression: {"zipmap": False},
        }
        onx = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=no_zipmap)
        path = os.path.join(workdir, name + ".onnx")
        with open(path, "wb") as f:
            f.write(onx.SerializeToString())
        cases.append(Case(name, "sklearn", path, {onx.graph.input[0].name: x[:256]}, 256, name))
    return cases


SERVING_DIR = ROOT / "benchmarks" / "models" / "serving"


def serving_cases() -> list[Case]:
    """The serving zoo (scripts/make_serving_zoo.py) at the batches its manifest names."""
    from benchmarks.zoo import make_feeds

    manifest = SERVING_DIR / "manifest.json"
    if not manifest.exists():
        return []
    cases = []
    for name, m in sorted(json.loads(manifest.read_text()).items()):
        path = str(SERVING_DIR / m["file"])
        for b in m["batches"]:
            feeds = make_feeds(m["inputs"], batch=b)
            cases.append(Case(f"{name} b{b}", "serving", path, feeds, b, name))
    return cases


#: batches and thread counts of the scaling tables
SCALING_BATCHES, SCALING_THREADS = (1, 8, 64), (1, 2)


def scaling_cases() -> list[Case]:
    """The serving models marked for scaling (a CNN, a transformer; float32 only) at every
    batch of SCALING_BATCHES and thread count of SCALING_THREADS (Case.threads)."""
    from benchmarks.zoo import make_feeds

    manifest = SERVING_DIR / "manifest.json"
    if not manifest.exists():
        return []
    cases = []
    for name, m in sorted(json.loads(manifest.read_text()).items()):
        if not m.get("scaling"):
            continue
        for b in SCALING_BATCHES:
            feeds = make_feeds(m["inputs"], batch=b)
            for t in SCALING_THREADS:
                path = str(SERVING_DIR / m["file"])
                cases.append(Case(f"{name} b{b} t{t}", "scaling", path, feeds, b, name, t))
    return cases


# ---------------------------------------------------------------------------------- cold start

_COLD = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
import numpy as np
feeds = dict(np.load({feeds!r}))
t1 = time.perf_counter()
if {runtime!r} == "onyx":
    import onyx as rt
    so = rt.SessionOptions()
else:
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.inter_op_num_threads = 1
so.intra_op_num_threads = {threads}
t2 = time.perf_counter()
sess = rt.InferenceSession({path!r}, so, providers=["CPUExecutionProvider"])
t3 = time.perf_counter()
sess.run(None, feeds)
t4 = time.perf_counter()
print(t2 - t1, t3 - t2, t4 - t3, t4)
"""


def cold_start(path: str, feeds: dict, workdir: str, threads: int, rounds: int) -> dict:
    """runtime -> median seconds of a fresh process: {import, create, first_run, total}, where
    total is from starting the interpreter to the first answer (the child reads the same
    monotonic clock, perf_counter, when it has it: the interpreter's shutdown after it is not
    counted). The runtimes alternate, ``rounds`` processes each, in ABBA order (each goes
    first in half of the rounds); onyx's ``paired`` is ``paired_ratio`` of the rounds' totals."""
    npz = os.path.join(workdir, "cold_feeds.npz")
    np.savez(npz, **feeds)
    samples: dict[str, list] = {"onyx": [], "onnxruntime": []}
    pairs: list[tuple[float, float]] = []  # (onyx, onnxruntime) totals of the rounds with both
    # as installed packages run: with their bytecode cached (an environment may turn the
    # cache off; the first, untimed round writes it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for r in range(rounds + 1):
        got = {}
        for rt in list(samples)[:: 1 if r % 2 else -1]:
            code = _COLD.format(root=str(ROOT), feeds=npz, runtime=rt, path=path, threads=threads)
            start = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env
            )
            if out.returncode == 0 and r > 0:
                *phases, answered = map(float, out.stdout.split()[-4:])
                got[rt] = [*phases, answered - start]
                samples[rt].append(got[rt])
        if len(got) == 2:
            pairs.append((got["onyx"][3], got["onnxruntime"][3]))
    keys = ("import", "create", "first_run", "total")
    results = {
        rt: dict(zip(keys, np.median(np.array(v), axis=0).tolist()))
        for rt, v in samples.items()
        if v
    }
    if pairs:
        # each round's two processes shared the machine's load of the moment: the median of
        # the rounds' ratios moves less than the ratio of the two medians
        results["onyx"]["paired"] = paired_ratio(*([[x] for x in col] for col in zip(*pairs)))
    return results


def cold_start_models() -> list[tuple[str, str, dict]]:
    """(name, path, feeds) of the cold-start rows: the bundled tiny CNN, and the serving zoo's
    small CNN where it is built."""
    from benchmarks.zoo import make_feeds

    rows = [("tiny_cnn (onyx/examples)", str(ROOT / "onyx" / "examples" / "tiny_cnn.onnx"), None)]
    manifest = SERVING_DIR / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text()).get("cnn_mobilenet")
        if m:
            rows.append(("cnn_mobilenet b1", str(SERVING_DIR / m["file"]),
                         make_feeds(m["inputs"], 1)))  # fmt: skip
    out = []
    for name, path, feeds in rows:
        if feeds is None:
            import onyx

            sess = onyx.InferenceSession(path)
            rng = np.random.default_rng(0)
            feeds = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        out.append((name, path, feeds))
    return out


# ---------------------------------------------------------------------------------- runtimes


def make_session(runtime: str, path: str, threads: int = 2):
    """A callable running the model once, for ``runtime`` in onyx / onnxruntime / reference."""
    if runtime == "onyx":
        import onyx

        so = onyx.SessionOptions()
        so.intra_op_num_threads = threads
        sess = onyx.InferenceSession(path, so)
        return lambda feeds: sess.run(None, feeds)
    if runtime == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds)
    if runtime == "reference":
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(path)
        return lambda feeds: ref.run(None, feeds)
    raise ValueError(runtime)


class Timeout(Exception):
    pass


@contextmanager
def deadline(seconds: float | None):
    """Raise Timeout in the main thread after ``seconds`` (the reference evaluator is Python
    code, so the signal lands between its numpy calls)."""
    if not seconds:
        yield
        return

    def alarm(signum, frame):
        raise Timeout(f"over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Seconds a runtime's turn of timed blocks waits at least for the other runtime's threads to
#: stop spinning, and at most (``settle``). The floor was once the whole guard (0.1 s:
#: onnxruntime's spin some 40 ms after a call on an idle machine, but on a busy machine their
#: spin lasted 80-180 ms, and onnxruntime's worker took 1.5-2.5 ms of CPU per call of onyx's in
#: two of SqueezeNet's five blocks); the quiet test below is the guard now: with no floor at
#: all it waited 70-135 ms after onnxruntime's blocks of the serving CNN, transformer and VAD
#: (11 ms after onyx's), and with this floor onnxruntime's threads used no CPU inside onyx's
#: following blocks (per-thread schedstat, 8 turns of 4 models). A lower floor leaves time
#: for more pairs of blocks.
SETTLE, SETTLE_MAX = 0.02, 2.0
#: The process counts as quiet once none of its other threads is running or waiting for a core
#: (a spinning pool's threads are: on a busy machine one could wait for a core for tens of
#: milliseconds, use no CPU meanwhile, and spin again inside the next block) and they have used
#: less than QUIET_SHARE of one core over a SETTLE_STEP window.
QUIET_SHARE, SETTLE_STEP = 0.05, 0.01


def other_threads() -> tuple[int, bool] | None:
    """Nanoseconds of CPU used so far by this process's threads other than the caller (every
    runtime's workers: onnxruntime's, onyx's pool, OpenBLAS's), and whether any of them is
    running or runnable now; None where Linux's per-thread counters are not available."""
    me, total, busy = str(threading.get_native_id()), 0, False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/stat") as f:
                busy |= f.read().rpartition(")")[2].split()[0] == "R"
        except (OSError, ValueError, IndexError):  # (a thread that ended meanwhile)
            continue
    return total, busy


def settle() -> float:
    """Wait until the runtimes' worker threads have stopped spinning: SETTLE seconds, then
    until the other threads of the process are quiet (above), at most SETTLE_MAX seconds in
    all. Both runtimes wait the same way before each of their blocks (and before their
    creations), so neither's block starts while the other's threads still want a core.
    Returns the seconds waited."""
    start = time.perf_counter()
    time.sleep(SETTLE)
    before = other_threads()
    while before is not None and time.perf_counter() - start < SETTLE_MAX:
        time.sleep(SETTLE_STEP)
        now = other_threads()
        if now is None or (not now[1] and now[0] - before[0] < QUIET_SHARE * SETTLE_STEP * 1e9):
            break
        before = now
    return time.perf_counter() - start


#: Pairs of blocks per row (full run, --quick), and the fewest a row gets where its budget would
#: not hold that many: a pair is a block of onyx's calls next to a block of onnxruntime's, and a
#: row's onyx/onnxruntime is the median of its pairs' ratios (``paired_ratio``).
PAIRS, QUICK_PAIRS, MIN_PAIRS = 21, 7, 3
#: The seconds a block of calls lasts at least (unless its share of the budget would not hold
#: it): a short model's block of a few calls lasted some microseconds, inside one scheduler tick.
BLOCK_SECONDS = 0.02
#: The longest call that gets an untimed call before its turn's blocks (the other runtime's
#: calls left the caches cold; a longer call's own cold start is a small part of it, and the
#: untimed calls doubled the time of a row of one-call blocks).
WARM_CALL_MAX = 0.05
#: Rounds of blocks of the reference evaluator (after the pairs; far slower, it is not paired).
REFERENCE_ROUNDS = 3


def _clock(fn, *args) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def block_bounds(once: float, repeats: int, budget: float, blocks: int) -> tuple[int, int]:
    """The fewest and the most calls in one timed block of a runtime whose call takes ``once``
    seconds and that has ``blocks`` blocks: at most a block's share of ``budget``, at least a
    share of ``repeats`` (within that) and 1. Between the two, a block goes on until it has
    lasted BLOCK_SECONDS (``once``, one call, misjudges a busy machine's calls)."""
    most = max(1, int(budget / blocks / max(once, 1e-7)))
    return max(1, min(repeats // blocks, most)), most


def timed_block(run, feeds, least: int, most: int) -> list[float]:
    """Seconds of each call of one block (see block_bounds)."""
    times, start = [], time.perf_counter()
    while len(times) < most and (len(times) < least or time.perf_counter() - start < BLOCK_SECONDS):
        times.append(_clock(run, feeds)[0])
    return times


def pair_count(once: list[float], budget: float, most: int, least: int = MIN_PAIRS) -> int:
    """How many pairs of blocks a row gets whose runtimes' calls take ``once`` seconds: ``most``,
    or as many as the slower one's calls that fit in ``budget`` (blocks of one call), at least
    ``least``."""
    calls = int(budget / max(max(once), 1e-7))
    return min(most, max(least, calls))


def pair_order(pairs: int) -> list[tuple[int, int]]:
    """(runtime 0 or 1, pair) of each block in time order: ABBA ABBA..., so that each runtime
    goes first in half of the pairs (a drift of the machine's speed inside a pair favours
    neither) and a runtime's two blocks in a row share one wait for the other's threads."""
    order = []
    for i in range(pairs):
        first = i % 2
        order += [(first, i), (1 - first, i)]
    return order


def paired_ratios(a: list[list[float]], b: list[list[float]]) -> list[float]:
    """Each pair's ratio of block medians: a's block i over b's block i (the two ran next to
    each other, so a spell of the machine running slower or faster moves both alike)."""
    return [float(np.median(x) / np.median(y)) for x, y in zip(a, b) if x and y]


def paired_ratio(a: list[list[float]], b: list[list[float]]) -> dict | None:
    """The row's a/b: the median of its pairs' ratios, with their quartiles (q1, q3: the
    row's noise) and the number of pairs; None without a pair. A spell that slows or speeds
    up the machine over some blocks moves only the pairs it splits, and the median ignores a
    minority of those (the lowest block median per runtime, the rule before, took each
    runtime's figure from whichever blocks ran in the fastest moment, not the same ones)."""
    ratios = paired_ratios(a, b)
    if not ratios:
        return None
    q1, mid, q3 = np.percentile(ratios, [25, 50, 75]).tolist()
    return {"ratio": mid, "q1": q1, "q3": q3, "pairs": len(ratios)}


def latency_of(blocks: list[list[float]]) -> float:
    """A runtime's latency column from its blocks of timed calls: the median of the blocks'
    medians (its typical call over the row, fast and slow spells of the machine alike; the
    onyx/onnxruntime column is the paired ratio, not the ratio of two such figures)."""
    return float(np.median([np.median(b) for b in blocks if b]))


#: How latency is measured, for the reports (both runtimes alike).
METHOD = (
    f"Each row's onyx/onnxruntime is a paired statistic: onyx and onnxruntime run blocks of "
    f"calls next to each other in ABBA order ({PAIRS} pairs of blocks, {QUICK_PAIRS} with "
    f"--quick, at least {MIN_PAIRS} and fewer calls per block for slow models; each block "
    f"{BLOCK_SECONDS:g} s of calls at least, one untimed call before a runtime's turn where "
    f"its call takes up to {WARM_CALL_MAX * 1e3:g} ms, and "
    "each turn starting once the other's worker threads have stopped spinning), and the row's "
    "ratio is the median of the pairs' ratios of block medians, so that a spell of the "
    "machine running slower or faster, which moves both blocks of a pair alike, does not move "
    "it; q1-q3 are the quartiles of those ratios (the row's noise). The latency columns (ms) "
    "are each runtime's median block median (its typical call over the row); their ratio can "
    "differ a little from the paired one."
)


def measure(
    case: Case,
    runtimes: list[str],
    threads: int,
    repeats: int,
    budgets: dict,
    timeouts: dict,
    pairs: int = PAIRS,
) -> None:
    """Fill case.results[runtime] with latency, creation time, run count (and outputs), and
    case.results["paired"] with onyx/onnxruntime (``paired_ratio``).

    Each runtime is created (median of 3 creations, 1 for the reference) and run once (the
    warm-up, whose outputs are kept), then once more untimed (its time sizes the blocks).
    Then onyx and onnxruntime, where their warm-up fit in the budget, run ``pairs`` pairs of
    blocks (``timed_pairs``; fewer calls per block and down to MIN_PAIRS pairs for a slow
    model, so that a runtime's timed calls stay near its budget), and the reference
    evaluator its own rounds after them. A runtime whose warm-up alone exceeds the budget
    keeps that one run. ``timeouts`` caps a runtime's warm-up (runtime -> seconds).
    """
    runs, times, once = {}, {}, {}
    for rt in runtimes:
        try:
            creates = []
            # (after the last block's threads stop spinning: a model's second row, whose
            # creations are all warm and short, otherwise ran them all inside that window)
            settle()
            for _ in range(1 if rt == "reference" else 3):
                took, run = _clock(make_session, rt, case.path, threads)
                creates.append(took)
            with deadline(timeouts.get(rt)):
                first, outputs = _clock(run, case.feeds)
        except Timeout as e:
            case.results[rt] = {"timeout": str(e)}
            continue
        except Exception as e:  # a runtime that cannot run a model: reported, not fatal
            case.results[rt] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        case.results[rt] = {"create": float(np.median(creates)), "outputs": outputs}
        times[rt] = [[first]]
        if first <= budgets[rt]:
            runs[rt] = run
            # (the warm-up pays first-run work: plans, caches; a second call is the steady state)
            once[rt] = first if rt == "reference" else min(first, _clock(run, case.feeds)[0])
    paired = [rt for rt in runtimes if rt in runs and rt != "reference"]
    if paired:
        budget = max(budgets[rt] for rt in paired)
        n = pair_count([once[rt] for rt in paired], budget, pairs, min(MIN_PAIRS, pairs))
        bounds = [block_bounds(once[rt], repeats, budgets[rt], n) for rt in paired]
        warm = [once[rt] <= WARM_CALL_MAX for rt in paired]
        blocks, case.results["settle"] = timed_pairs(
            [runs[rt] for rt in paired], case.feeds, bounds, n, budget, warm
        )
        times.update(zip(paired, blocks))
        if len(paired) == 2:
            case.results["paired"] = paired_ratio(*blocks)
    if "reference" in runs:
        bounds = block_bounds(once["reference"], repeats, budgets["reference"], REFERENCE_ROUNDS)
        times["reference"] = reference_blocks(
            runs["reference"], case.feeds, bounds, budgets["reference"]
        )
    for rt, blocks in times.items():
        case.results[rt].update(latency=latency_of(blocks), runs=sum(map(len, blocks)))


def timed_pairs(
    runs: list,
    feeds: dict,
    bounds: list[tuple[int, int]],
    pairs: int,
    budget: float,
    warm: list[bool] | None = None,
) -> tuple[list[list[list[float]]], float]:
    """Run one or two runtimes' blocks in ``pair_order`` (one runtime alone: its blocks in a
    row); returns each runtime's blocks of call seconds, pair by pair, and the longest wait.

    Runtimes take turns in blocks, not call by call: onnxruntime's and OpenBLAS's worker
    threads spin for a while after each call, so a call right after the other runtime's
    competes with its spinning threads (measured: both 1.5-2x slower on 2 cores; onnxruntime's
    spin for some 40-130 ms after its last call). So each turn waits until the process's other
    threads are quiet (``settle``), then starts with one untimed call where ``warm`` says so
    (the other runtime's calls left the caches cold; WARM_CALL_MAX). A turn is two blocks of
    one runtime except the first and the last; the waits are not counted against the budget.
    Pairs stop early (after MIN_PAIRS) where a busy machine made the calls take over twice the
    budgets.
    """
    blocks: list[list[list[float]]] = [[] for _ in runs]
    previous, longest, waited = None, 0.0, 0.0
    start = time.perf_counter()
    for k, i in pair_order(pairs):
        if k >= len(runs):
            continue
        spent = time.perf_counter() - start - waited
        if k == previous and i >= MIN_PAIRS and spent > 2 * budget * len(runs):
            break  # (only before a pair's first block: k == previous starts a pair of ABBA)
        if k != previous:
            wait = settle()
            waited, longest = waited + wait, max(longest, wait)
            if warm is None or warm[k]:
                runs[k](feeds)
            previous = k
        blocks[k].append(timed_block(runs[k], feeds, *bounds[k]))
    n = min(map(len, blocks))
    return [b[:n] for b in blocks], longest


def reference_blocks(run, feeds: dict, bounds: tuple[int, int], budget: float) -> list[list]:
    """The reference evaluator's blocks: REFERENCE_ROUNDS, or fewer once past its budget."""
    blocks, start = [], time.perf_counter()
    while len(blocks) < REFERENCE_ROUNDS:
        if blocks and time.perf_counter() - start > budget:
            break
        blocks.append(timed_block(run, feeds, *bounds))
    return blocks


def max_diff(a, b) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind in "fiub" and y.dtype.kind in "fiub" and x.shape == y.shape and x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst


# ---------------------------------------------------------------------------------- memory

_PROBE = """
import json, os, resource, sys, numpy as np
sys.path.insert(0, {root!r})
from benchmarks.run import make_session
feeds = dict(np.load({feeds!r}))
# imports are not the session's memory: `import onyx` is lazy, so its runtime is imported
# here as `import onnxruntime` loads onnxruntime's (what the first session loads besides,
# onyx's kernels and schemas, still counts)
import onyx.runtime.session, onnxruntime
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
try:  # reset the high-water mark so only what follows counts
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
base = rss()
run = make_session({runtime!r}, {path!r}, {threads})
for _ in range(3):
    run(feeds)
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
print(json.dumps({{"peak_mb": max(0, hwm - base) / 2**20}}))
"""


def peak_memory(case: Case, runtime: str, workdir: str, threads: int) -> float | None:
    feeds = os.path.join(workdir, "feeds.npz")
    np.savez(feeds, **case.feeds)
    code = _PROBE.format(
        root=str(ROOT), feeds=feeds, runtime=runtime, path=case.path, threads=threads
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
        )
        return json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
    except Exception:
        return None


# ---------------------------------------------------------------------------------- profile


@dataclass
class Hotspot:
    op: str
    ms: float = 0.0  # per run, summed over the models
    nodes: int = 0
    worst: tuple[float, str] = (0.0, "")  # (ms, model) where this op costs the most


def op_hotspots(cases: list[Case], threads: int, top: int = 15) -> tuple[list[Hotspot], float]:
    """Where onyx spends its time over ``cases``: milliseconds per run and op type (onyx's own
    profiler; up to 5 profiled runs per model, fewer for slow ones), and the kernels' total."""
    import onyx

    per_op: dict[str, Hotspot] = {}
    with tempfile.TemporaryDirectory() as d:
        for case in cases:
            so = onyx.SessionOptions()
            so.intra_op_num_threads = threads
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(d, "p")
            try:
                sess = onyx.InferenceSession(case.path, so)
                latency = case.results.get("onyx", {}).get("latency", 0.1)
                runs = int(min(max(0.5 / max(latency, 1e-6), 1), 5))
                for _ in range(runs):
                    sess.run(None, case.feeds)
                with open(sess.end_profiling()) as f:
                    events = json.load(f)
            except Exception:  # the latency table already reports a model onyx cannot run
                continue
            mine: dict[str, list] = {}
            for e in events:
                if e.get("cat") == "Node":
                    acc = mine.setdefault(e["args"]["op_name"], [0.0, 0])
                    acc[0] += e["dur"] / 1e3 / runs
                    acc[1] += 1
            for op, (ms, n) in mine.items():
                h = per_op.setdefault(op, Hotspot(op))
                h.ms += ms
                h.nodes += n // runs
                h.worst = max(h.worst, (ms, case.name))
    total = sum(h.ms for h in per_op.values())
    return sorted(per_op.values(), key=lambda h: -h.ms)[:top], total


# ---------------------------------------------------------------------------------- report


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ratio(case: Case, a: str, b: str) -> float | None:
    """a's latency over b's; onyx/onnxruntime is the row's paired ratio where it has one."""
    paired = case.results.get("paired")
    if (a, b) == ("onyx", "onnxruntime") and paired:
        return paired["ratio"]
    ra, rb = case.results.get(a), case.results.get(b)
    if not ra or not rb or "latency" not in ra or "latency" not in rb:
        return None
    return ra["latency"] / rb["latency"]


def _fmt(v, digits=2, unit="") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}{unit}"


def _ms(case: Case, runtime: str, key: str = "latency") -> str:
    r = case.results.get(runtime) or {}
    if "error" in r or "timeout" in r:
        return "error" if "error" in r else "timeout"
    v = r.get(key)
    return "–" if v is None else f"{v * 1e3:.3g}"


def quartiles(case: Case) -> str:
    """q1-q3 of the row's paired onyx/onnxruntime ratios (how much its pairs disagreed)."""
    paired = case.results.get("paired")
    return f"{paired['q1']:.2f}-{paired['q3']:.2f}" if paired else "–"


def _worst(cases: list[Case]) -> str:
    """The highest onyx/onnxruntime of ``cases``: the ratio, the row, its pairs' q1-q3."""
    rows = [(r, c) for c in cases if (r := ratio(c, "onyx", "onnxruntime"))]
    if not rows:
        return "–"
    r, c = max(rows, key=lambda rc: rc[0])
    return f"{r:.2f} ({c.name}, q1-q3 {quartiles(c)})"


def _per(cases: list[Case], key: str, a: str = "onyx", b: str = "onnxruntime") -> list[float]:
    """The per-case ratios of results[a][key] / results[b][key] where both are known."""
    out = []
    for c in cases:
        x, y = c.results.get(a, {}).get(key), c.results.get(b, {}).get(key)
        if x and y:
            out.append(x / y)
    return out


def titles(zoo_built: bool) -> dict[str, str]:
    """group -> the title of its set (SETS, the zoo's saying what it is made of)."""
    if zoo_built:
        return SETS
    return dict(SETS, zoo="zoo (tiny fixtures: benchmarks/models not built)")


#: The sets issue 6 calls its zoo: the realistic-size models, onnx's light models and the
#: scikit-learn pipelines (not the dispatch-overhead fixtures).
ISSUE_ZOO = ("zoo", "light", "sklearn")


def summary_sets(cases: list[Case], zoo_built: bool) -> list[tuple[str, list[Case]]]:
    """(label, cases) per set and batch, in report order; first, the issue's zoo as a whole."""
    rows = []
    whole = [c for c in cases if c.group in ISSUE_ZOO]
    if zoo_built and whole:
        rows.append(("**the issue's zoo: the realistic zoo (batches 1 and 8), light models, "
                     "scikit-learn**", whole))  # fmt: skip
    for group, title in titles(zoo_built).items():
        sel = [c for c in cases if c.group == group]
        batches = sorted({c.batch for c in sel}) if group in ("zoo", "fixture") else [None]
        for b in batches:
            part = [c for c in sel if b is None or c.batch == b]
            if part:
                rows.append((f"{title} batch {b}" if b is not None else title, part))
    return rows


def write_report(
    cases: list[Case], args, hotspots, png_name: str, zoo_built: bool, elapsed: float
) -> str:
    zoo_note = (
        "The zoo is the realistic-size benchmark zoo (`benchmarks/models`, built by "
        "`python scripts/make_zoo.py --bench`): ResNet-18-like CNN and MobileNetV3-small-like "
        "net at 224x224, GPT, BERT and Llama-style transformers with d=256, 4 layers, sequence "
        "128, LSTM/GRU with hidden 256 over 64 steps, a U-Net at 128x128, with their quantized "
        "variants, at batch 1 and 8. The issue's zoo is these models together with onnx's "
        "light models and the scikit-learn pipelines: the first summary row, to which its "
        "targets apply."
        if zoo_built
        else "**The realistic-size benchmark zoo is not built** (`python scripts/make_zoo.py "
        "--bench`): the zoo rows below are the tiny test fixtures (tests/models), which measure "
        "dispatch overhead rather than kernels."
    )
    command = "python benchmarks/run.py" + (" --quick" if args.quick else "")
    command += f" --threads {args.threads}" if args.threads != 2 else ""
    command += " --no-memory" if args.no_memory else ""
    command += " --no-reference" if args.no_reference else ""
    command += f" --only '{args.only}'" if args.only else ""
    lines = [
        "# Benchmarks",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d')} in {elapsed / 60:.1f} minutes: "
        f"{os.cpu_count()} CPU cores, {args.threads} threads for every runtime, numpy "
        f"{np.__version__}. {METHOD} Ratios are latency ratios (onyx/onnxruntime: lower is "
        "better for onyx; "
        "reference/onyx: how many times onyx is faster than onnx's ReferenceEvaluator, which "
        f"is cut after {args.reference_timeout:g} s and skipped at batch 8 where batch 1 failed "
        "or took over 1 s). Peak memory is the peak RSS growth of a fresh process creating the session and "
        "running it 3 times (MiB).",
        "",
        "Other benchmark reports, each written by its own script: "
        "[benchmarks_scale.md](benchmarks_scale.md) (cost against graph size, "
        "`benchmarks/bench_scale.py`) and [benchmarks_distributed.md](benchmarks_distributed.md) "
        "(Spark, Ray and Dask, `benchmarks/bench_batch.py`).",
        "",
        zoo_note,
        "",
        "The dispatch-overhead set runs the tiny fixture models (tests/models: d=64, 32x32 "
        "images, onnxruntime needs 0.05-0.5 ms) at batch 1: its ratio is mostly onyx's Python "
        "cost per node, not its kernels.",
        "",
        "## Summary",
        "",
        "Targets (issue 6, its zoo): geomean onyx/onnxruntime <= 1.5, no model worse than 3x, "
        "geomean reference/onyx >= 30, creation ratio <= 1, peak memory ratio <= 1.5.",
        "",
        "| set | models | geomean onyx/onnxruntime | worst onyx/onnxruntime | geomean reference/onyx "
        "| geomean creation onyx/onnxruntime | geomean peak memory onyx/onnxruntime |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, sel in summary_sets(cases, zoo_built):
        ratios = [r for c in sel if (r := ratio(c, "onyx", "onnxruntime"))]
        refs = _per(sel, "latency", "reference", "onyx")
        lines.append(
            f"| {label} | {len(sel)} | {_fmt(geomean(ratios))} "
            f"| {_worst(sel)} "
            f"| {_fmt(geomean(refs), 1)} ({len(refs)} of {len(sel)}) "
            f"| {_fmt(geomean(_per(sel, 'create')))} | {_fmt(geomean(_per(sel, 'peak_mb')))} |"
        )
    lines += ["", f"![ratios]({png_name})", ""]
    for group, title in titles(zoo_built).items():
        sel = [c for c in cases if c.group == group]
        if not sel:
            continue
        lines += [f"## {title[0].upper()}{title[1:]}", ""]
        lines += [
            "| model | onyx ms | onnxruntime ms | reference ms | onyx/ort | onyx/ort q1-q3 "
            "| ref/onyx | create onyx ms | create ort ms | peak onyx MiB | peak ort MiB "
            "| max abs diff |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in sel:
            o, r = c.results.get("onyx", {}), c.results.get("onnxruntime", {})
            lines.append(
                f"| {c.name} | {_ms(c, 'onyx')} | {_ms(c, 'onnxruntime')} "
                f"| {_ms(c, 'reference')} | {_fmt(ratio(c, 'onyx', 'onnxruntime'))} "
                f"| {quartiles(c)} "
                f"| {_fmt(ratio(c, 'reference', 'onyx'), 1)} | {_ms(c, 'onyx', 'create')} "
                f"| {_ms(c, 'onnxruntime', 'create')} | {_fmt(o.get('peak_mb'), 1)} "
                f"| {_fmt(r.get('peak_mb'), 1)} | {_fmt(c.results.get('diff'), 6)} |"
            )
        lines.append("")
    errors = [
        (c.name, rt, res.get("error") or f"timeout ({res['timeout']})")
        for c in cases
        for rt, res in c.results.items()
        if isinstance(res, dict) and ("error" in res or "timeout" in res)
    ]
    if errors:
        lines += ["## Errors and timeouts", ""]
        lines += [f"- {n} ({rt}): {e}" for n, rt, e in errors]
        lines.append("")
    for title, spots in hotspots.items():
        if title != SERVING_HOTSPOTS:
            lines += hotspot_lines(title, *spots, level="##")
    return "\n".join(lines)


SERVING_HOTSPOTS = "the serving zoo"


def hotspot_lines(title: str, spots, total: float, latency: float, level: str) -> list[str]:
    lines = [f"{level} Where onyx spends its time: {title}", ""]
    lines += [
        f"Kernel time per run from onyx's profiler (profiled runs after the timed ones), "
        f"summed over the models: {total:.1f} ms in all kernels, against {latency:.1f} ms of "
        "measured onyx latency; share is of the kernels' total.",
        "",
        "| op | ms | share of kernel time | nodes | costliest in |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {h.op} | {h.ms:.3f} | {h.ms / total:.1%} | {h.nodes} "
        f"| {h.worst[1]} ({h.worst[0]:.3g} ms) |"
        for h in spots
    ]
    return lines + [""]


SERVING_BEGIN, SERVING_END = "<!-- serving: begin -->", "<!-- serving: end -->"


def _case_table(sel: list[Case]) -> list[str]:
    lines = [
        "| model | onyx ms | onnxruntime ms | onyx/ort | onyx/ort q1-q3 | create onyx ms "
        "| create ort ms | peak onyx MiB | peak ort MiB | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sel:
        o, r = c.results.get("onyx", {}), c.results.get("onnxruntime", {})
        lines.append(
            f"| {c.name} | {_ms(c, 'onyx')} | {_ms(c, 'onnxruntime')} "
            f"| {_fmt(ratio(c, 'onyx', 'onnxruntime'))} | {quartiles(c)} "
            f"| {_ms(c, 'onyx', 'create')} "
            f"| {_ms(c, 'onnxruntime', 'create')} | {_fmt(o.get('peak_mb'), 1)} "
            f"| {_fmt(r.get('peak_mb'), 1)} | {_fmt(c.results.get('diff'), 6)} |"
        )
    return lines


def _scaling_table(sel: list[Case]) -> list[str]:
    """One row per model and batch, a column group per thread count."""
    head = "| model | batch |" + "".join(
        f" onyx ms ({t}t) | ort ms ({t}t) | onyx/ort ({t}t) |" for t in SCALING_THREADS
    )
    lines = [head, "|---|---|" + "---|---|---|" * len(SCALING_THREADS)]
    by_key = {(c.model, c.batch, c.threads): c for c in sel}
    for model, batch in dict.fromkeys((c.model, c.batch) for c in sel):
        row = f"| {model} | {batch} |"
        for t in SCALING_THREADS:
            c = by_key.get((model, batch, t))
            row += (
                f" {_ms(c, 'onyx')} | {_ms(c, 'onnxruntime')} | "
                f"{_fmt(ratio(c, 'onyx', 'onnxruntime'))} |"
                if c
                else " – | – | – |"
            )
        lines.append(row)
    return lines


def serving_block(
    cases: list[Case], cold: list, args, png_name: str, elapsed: float, hotspots: dict
) -> str:
    """The serving zoo's part of the report (issue 23), between SERVING_BEGIN and SERVING_END
    so that `--serving-only` can replace it in an existing report."""
    serving = [c for c in cases if c.group == "serving"]
    scaling = [c for c in cases if c.group == "scaling"]
    lines = [
        SERVING_BEGIN,
        "## Serving zoo (issue 23)",
        "",
        f"Made by `python benchmarks/run.py{' --serving-only' if args.serving_only else ''}"
        f"{' --quick' if args.quick else ''}` on {time.strftime('%Y-%m-%d')} "
        f"({elapsed / 60:.1f} minutes for the whole run), {os.cpu_count()} CPU cores, "
        f"{args.threads} threads for both runtimes unless a table says otherwise; other "
        f"processes were running, so the ratios are the figures to read. {METHOD} "
        "The models come from `python scripts/make_serving_zoo.py` "
        "(seeded random weights, `benchmarks/models/serving/`): small CNNs (a width-32 ResNet "
        "at 128x128 batch 4, a MobileNet-style net at 96x96 batch 2, a U-Net at 32x32), an "
        "audio front-end with a keyword classifier and a VAD-like model on a 512-sample chunk, "
        "1-D conv classifiers (byte-level; a long 1-channel signal), a 2-layer d=128 "
        "transformer, an LSTM over 7 steps, fp16 and quantized variants, and scikit-learn "
        "models at 1 row and 100 rows.",
        "",
        "Targets (issue 23): geomean onyx/onnxruntime <= 1.0 and no model worse than 1.5x; "
        "cold start to first answer, session creation and peak memory <= onnxruntime's.",
        "",
    ]
    if not serving:
        lines += ["The serving zoo is not built (`python scripts/make_serving_zoo.py`).", ""]
    else:
        lines += [
            "| set | models | geomean onyx/onnxruntime | worst onyx/onnxruntime "
            "| geomean creation onyx/onnxruntime | geomean peak memory onyx/onnxruntime |",
            "|---|---|---|---|---|---|",
        ]
        for label, sel in (
            ("serving zoo", serving),
            ("scikit-learn", [c for c in serving if c.name.startswith("sklearn")]),
            ("neural networks", [c for c in serving if not c.name.startswith("sklearn")]),
        ):
            rs = [r for c in sel if (r := ratio(c, "onyx", "onnxruntime"))]
            lines.append(
                f"| {label} | {len(sel)} | {_fmt(geomean(rs))} "
                f"| {_worst(sel)} | {_fmt(geomean(_per(sel, 'create')))} "
                f"| {_fmt(geomean(_per(sel, 'peak_mb')))} |"
            )
        lines += ["", f"![serving ratios]({png_name})", ""]
        lines += _case_table(serving) + [""]
    if cold:
        lines += [
            "### Cold start",
            "",
            "A fresh Python process per figure: import the runtime, create a session, run it "
            "once (median of the processes, onyx and onnxruntime alternating, after one "
            "untimed round that writes the bytecode caches as an installation would); total is "
            "from starting the interpreter to the first answer (numpy's import and loading the "
            "feeds included, alike for both; the interpreter's exit after it is not); onyx/ort "
            "is the median of the rounds' ratios of the totals (a round's two processes share "
            "the machine's load of the moment; onyx goes first in half of the rounds), with "
            "the quartiles of those ratios.",
            "",
            "| model | runtime | import ms | create ms | first run ms | total ms |",
            "|---|---|---|---|---|---|",
        ]
        for name, results in cold:
            for rt, r in results.items():
                lines.append(
                    f"| {name} | {rt} | {r['import'] * 1e3:.0f} | {r['create'] * 1e3:.1f} "
                    f"| {r['first_run'] * 1e3:.1f} | {r['total'] * 1e3:.0f} |"
                )
            paired = results.get("onyx", {}).get("paired")
            if paired:
                lines.append(
                    f"| {name} | onyx/ort (q1-q3 {paired['q1']:.2f}-{paired['q3']:.2f}) "
                    f"| | | | {paired['ratio']:.2f} |"
                )
        lines.append("")
    if scaling:
        lines += [
            "### Scaling: latency vs batch and threads",
            "",
            "The serving zoo's float32 CNN and transformer at batches "
            f"{', '.join(map(str, SCALING_BATCHES))} and {' and '.join(map(str, SCALING_THREADS))} "
            "threads (both runtimes; onnxruntime with one inter-op thread). The chart above "
            "draws these ratios too.",
            "",
        ]
        lines += _scaling_table(scaling) + [""]
    if SERVING_HOTSPOTS in hotspots:
        lines += hotspot_lines(SERVING_HOTSPOTS, *hotspots[SERVING_HOTSPOTS], level="###")
    lines.append(SERVING_END)
    return "\n".join(lines)


def splice(report: str, block: str) -> str:
    """``report`` with its serving block replaced by ``block`` (appended if it has none)."""
    if SERVING_BEGIN in report and SERVING_END in report:
        head, rest = report.split(SERVING_BEGIN, 1)
        return head + block + rest.split(SERVING_END, 1)[1]
    return report.rstrip("\n") + "\n\n" + block + "\n"


# ---------------------------------------------------------------------------------- the chart

# 3x5 glyphs, one octal digit per row (bit 4 = left column)
_GLYPHS = dict(
    zip(
        "abcdefghijklmnopqrstuvwxyz0123456789_.-/():=@ ",
        "25755 65656 34443 65556 74647 74644 34553 55755 72227 11152 55655 44447 57755 65555 "
        "25552 65644 25563 65655 34216 72222 55557 55552 55775 55255 55222 71247 75557 26227 "
        "61247 61216 55711 74616 34757 71222 75757 75716 00007 00002 00700 11244 24442 21112 "
        "02020 07070 25365 00000".split(),
    )
)


def _text(img, x, y, s, color, scale=2):
    for ch in s.lower():
        rows = _GLYPHS.get(ch, _GLYPHS[" "])
        for r, digit in enumerate(rows):
            bits = int(digit, 8)
            for col in range(3):
                if bits & (4 >> col):
                    y0, x0 = y + r * scale, x + col * scale
                    img[y0 : y0 + scale, x0 : x0 + scale] = color
        x += 4 * scale
    return x


def _png(img: np.ndarray) -> bytes:
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[i].tobytes() for i in range(h))

    def chunk(kind, data):
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def chart(cases: list[Case], zoo_built: bool, sets: dict | None = None) -> bytes:
    """Horizontal bars on a log scale (0.1x .. 1000x): onyx/onnxruntime (blue) and
    reference/onyx (orange), one row per model, a heading row per set (``sets``: group ->
    title, by default the classic sets)."""
    rows: list[Case | str] = []
    for group, title in (sets or titles(zoo_built)).items():
        sel = [c for c in cases if c.group == group and ratio(c, "onyx", "onnxruntime")]
        rows += [title] + sel if sel else []
    label_w, plot_w, row_h, top = 300, 640, 22, 40  # pixels
    h, w = top + row_h * len(rows) + 30, label_w + plot_w + 40
    img = np.full((h, w, 3), 255, np.uint8)
    lo, hi = -1.0, 3.0  # log10 range

    def xpos(v):
        return label_w + int((min(max(math.log10(v), lo), hi) - lo) / (hi - lo) * plot_w)

    for v in (0.1, 1, 1.5, 3, 10, 30, 100, 1000):
        img[top - 5 : h - 25, xpos(v)] = (200, 200, 200) if v not in (1, 3, 30) else (120, 120, 120)
        _text(img, xpos(v) - 6, h - 20, f"{v:g}x", (80, 80, 80))
    x = _text(img, 10, 8, "onyx/onnxruntime", (40, 90, 200))
    _text(img, x + 20, 8, "reference/onyx", (230, 120, 20))
    for i, c in enumerate(rows):
        y = top + i * row_h
        if isinstance(c, str):  # a set's heading
            img[y + row_h - 3, 4 : w - 4] = (160, 160, 160)
            _text(img, 4, y + 6, c[:70], (100, 100, 100))
            continue
        _text(img, 8, y + 4, c.name[:36], (0, 0, 0))
        for j, (v, color) in enumerate(
            (
                (ratio(c, "onyx", "onnxruntime"), (40, 90, 200)),
                (ratio(c, "reference", "onyx"), (230, 120, 20)),
            )
        ):
            if v:
                x0, x1 = sorted((xpos(1), xpos(v)))
                img[y + 3 + j * 8 : y + 10 + j * 8, x0 : max(x1, x0 + 1)] = color
    return _png(img)


# ---------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, batch 1 only")
    ap.add_argument("--only", default="", help="regex on case names")
    ap.add_argument("--threads", type=int, default=2, help="threads for every runtime")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--reference-timeout", type=float, default=60.0, help="seconds per model")
    ap.add_argument("--no-light", action="store_true")
    ap.add_argument("--no-fixtures", action="store_true", help="leave out the dispatch set")
    ap.add_argument("--no-serving", action="store_true", help="leave out the serving zoo")
    ap.add_argument(
        "--serving-only",
        action="store_true",
        help="only the serving zoo, cold start and scaling; replaces their block in --out",
    )
    ap.add_argument("--cold-rounds", type=int, default=21, help="fresh processes per runtime")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    repeats, budget = (10, 0.3) if args.quick else (50, 2.0)
    pairs = QUICK_PAIRS if args.quick else PAIRS
    budgets = {"onyx": budget, "onnxruntime": budget, "reference": 2.0 if args.quick else 5.0}
    runtimes = ["onyx", "onnxruntime"] + ([] if args.no_reference else ["reference"])
    workdir = tempfile.mkdtemp(prefix="onyx_bench_")
    cases, zoo_built = [], False
    if not args.serving_only:
        cases, zoo_built = zoo_cases([1] if args.quick else [1, 8])
        if not zoo_built:
            print("benchmarks/models is not built (python scripts/make_zoo.py --bench): the zoo "
                  "set is the tiny fixtures", file=sys.stderr)  # fmt: skip
        elif not args.no_fixtures:
            cases += fixture_cases()
        if not args.no_light:
            cases += light_cases()
        cases += sklearn_cases(workdir)
    serving = args.serving_only or not args.no_serving
    if serving:
        cases += serving_cases() + scaling_cases()
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    # models whose reference run failed or took over a second: not run again at batch 8
    slow_reference = set()
    for i, case in enumerate(cases):
        mine = [rt for rt in runtimes if rt != "reference" or case.model not in slow_reference]
        if case.group in SERVING_SETS:  # onnxruntime is the comparison here
            mine = [rt for rt in mine if rt != "reference"]
        threads = case.threads or args.threads
        timeouts = {"reference": args.reference_timeout}
        measure(case, mine, threads, repeats, budgets, timeouts, pairs)
        ref = case.results.get("reference")
        if ref is not None and ref.get("latency", math.inf) > 1.0:
            slow_reference.add(case.model)
        outs = [case.results.get(rt, {}).pop("outputs", None) for rt in mine]
        if outs[0] is not None and outs[1] is not None:
            case.results["diff"] = max_diff(outs[0], outs[1])
        memory = case.group not in ("fixture", "scaling") and (
            case.group not in ("light", "serving") or not args.quick
        )
        if not args.no_memory and memory:
            for rt in ("onyx", "onnxruntime"):
                if "latency" in case.results.get(rt, {}):
                    case.results[rt]["peak_mb"] = peak_memory(case, rt, workdir, threads)
        print(
            f"[{i + 1}/{len(cases)} {time.perf_counter() - started:6.0f}s] {case.name:34s} "
            f"onyx {_ms(case, 'onyx'):>8s} ms  ort {_ms(case, 'onnxruntime'):>8s} ms  "
            f"ref {_ms(case, 'reference'):>9s} ms  "
            f"onyx/ort {_fmt(ratio(case, 'onyx', 'onnxruntime'))}  "
            f"ref/onyx {_fmt(ratio(case, 'reference', 'onyx'), 1)}  "
            f"q1-q3 {quartiles(case)} ({(case.results.get('paired') or {}).get('pairs', 0)} "
            "pairs)  "
            f"longest settle {case.results.get('settle', 0):.2f} s",
            flush=True,
        )
    cold = []
    if serving:
        for name, path, feeds in cold_start_models():
            rounds = 3 if args.quick else args.cold_rounds
            cold.append((name, cold_start(path, feeds, workdir, args.threads, rounds)))
            print(f"cold start {name}: {cold[-1][1]}", flush=True)
    hotspots = {}
    for title, group in (
        ("the zoo, batch 1", "zoo"),
        ("the tiny fixtures, batch 1", "fixture"),
        (SERVING_HOTSPOTS, "serving"),
    ):
        sel = [c for c in cases if c.group == group and c.batch == 1]
        total = sum(c.results.get("onyx", {}).get("latency", 0) for c in sel) * 1e3
        if sel and total:
            hotspots[title] = (*op_hotspots(sel, args.threads), total)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    serving_png = out.with_name(out.stem + "-serving.png")
    elapsed = time.perf_counter() - started
    block = ""
    if serving:
        serving_png.write_bytes(chart(cases, zoo_built, SERVING_SETS))
        block = serving_block(cases, cold, args, serving_png.name, elapsed, hotspots)
    if args.serving_only:
        out.write_text(splice(out.read_text() if out.exists() else "# Benchmarks\n", block))
    else:
        png.write_bytes(chart(cases, zoo_built))
        report = write_report(cases, args, hotspots, png.name, zoo_built, elapsed)
        out.write_text(splice(report, block) if block else report)
    print(f"wrote {out} and {png} in {elapsed / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
