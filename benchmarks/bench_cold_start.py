"""Cold start in CPU time: fresh processes that import a runtime, create a session and run it
once, paired against another checkout of onyx (and onnxruntime), medians of many processes.

    python benchmarks/bench_cold_start.py [--against /path/to/other/checkout] [--ort]
        [--model tiny|PATH] [--rounds 20] [--cache] [--why [--top 12]]

run.py's cold-start table times the wall clock; on a loaded machine that mostly measures the
load, so this probe reads each phase's CPU time in the child's main thread (time.thread_time:
numpy's OpenBLAS starts its worker threads at import and they spin on the other core for a
tenth of a second or so, which process_time would add to whichever phase runs meanwhile) and the
whole process's (its rusage, interpreter start and numpy's import included, alike for all),
with the runtimes alternating process by process; then the first runtime against each other
one round by round (the medians of the rounds' differences and ratios: a round's processes
share the machine's load of the moment). ``--against`` runs the other checkout's
onyx with the interpreter of its ``.venv`` if it has one (its native library built there).
``--cache`` turns on onyx's optimized-model cache in a fresh folder for each checkout (the
untimed first round writes the entry: the timed ones are hits; in one folder, two checkouts'
entries of the model would replace each other's, and every process would miss).
``--why`` says where each phase's time went, per runtime: the CPU ms of each module imported
in it (its own, its imports' apart; importlib.import_module's too, which ``python -X
importtime`` does not see) and of the garbage collector's passes (its hooks cost a little:
read these apart from the plain run's figures). Each process then runs the session a second
time: the ``second`` column (the runner's generation and the first use of what the first,
checked run does not make), left out of the process and exit columns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "onyx" / "examples" / "tiny_cnn.onnx"

_CHILD = """
import resource, sys, time
clock = time.thread_time
sys.path.insert(0, {root!r})
import numpy as np
feeds = dict(np.load({feeds!r}))
{trace}
t0 = clock()
if {root!r} == "onnxruntime":
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.inter_op_num_threads = 1
else:
    import onyx as rt
    so = rt.SessionOptions()
so.intra_op_num_threads = 1
t1 = clock()
{mark_create}
sess = rt.InferenceSession({model!r}, so, providers=["CPUExecutionProvider"])
t2 = clock()
{mark_run}
sess.run(None, feeds)
t3 = clock()
usage = resource.getrusage(resource.RUSAGE_SELF)
{mark_second}
sess.run(None, feeds)
t4 = clock()
print(t1 - t0, t2 - t1, t3 - t2, usage.ru_utime + usage.ru_stime, t4 - t3)
{report}
"""

#: --why's hooks in the child: each module's own import time (importlib's loader, so that
#: importlib.import_module's imports count too) and each collector pass, by phase.
_TRACE = """
import gc, json, importlib._bootstrap as _bs
_phase, _own, _gc, _stack, _gc_at = ["import"], {}, {}, [], [0.0]
_load = _bs._load_unlocked
def _timed(spec):
    start = clock()
    _stack.append(0.0)
    try:
        return _load(spec)
    finally:
        took, inner = clock() - start, _stack.pop()
        if _stack:
            _stack[-1] += took
        _own[_phase[0] + " " + spec.name] = took - inner
_bs._load_unlocked = _timed
def _collected(what, info):
    if what == "start":
        _gc_at[0] = clock()
    else:
        _gc[_phase[0]] = _gc.get(_phase[0], 0.0) + clock() - _gc_at[0]
gc.callbacks.append(_collected)
"""
_REPORT = "print(json.dumps({'modules': _own, 'gc': _gc}))"


def _feeds(model: str) -> dict:
    sys.path.insert(0, str(ROOT))
    import onyx

    rng = np.random.default_rng(0)
    sess = onyx.InferenceSession(model)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.type == "tensor(float)":
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:  # (token ids and the like: zeros of the input's type are valid)
            feeds[i.name] = np.zeros(shape, _NUMPY[i.type])
    return feeds


#: onnxruntime's type names of the inputs fed zeros.
_NUMPY = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float16)": np.float16}
_NUMPY["tensor(double)"] = np.float64


def _one(
    python: str, root: str, model: str, feeds: str, cache: str | None, why: bool = False
) -> list:
    """[import, create, first run, whole process, its exit, second run] CPU seconds of one
    fresh process (the exit: what the interpreter's shutdown took after the first answer; the
    process and its exit less the second run, made after the first answer's figures), and
    with ``why`` its hooks' record last; ``cache``: the model cache's folder, if any."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    hooks = {
        "trace": _TRACE if why else "",
        "mark_create": "_phase[0] = 'create'" if why else "",
        "mark_run": "_phase[0] = 'run'" if why else "",
        "mark_second": "_phase[0] = 'second'" if why else "",
        "report": _REPORT if why else "",
    }
    code = _CHILD.format(root=root, feeds=feeds, model=model, **hooks)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if cache:
        env["ONYX_MODEL_CACHE"] = cache
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    )
    if out.returncode:
        raise SystemExit(f"{root}: {out.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = out.stdout.splitlines()
    *phases, before_exit, second = map(float, lines[0].split())
    whole -= second  # (the process as one that exits after its first answer)
    record = [json.loads(lines[1])] if why else []
    return [*phases, whole, whole - before_exit, second, *record]


def _why(rows: list, top: int = 12) -> list[str]:
    """--why's lines for one runtime: per phase, the collector's and the imports' medians,
    then the modules imported at creation and at the first run, costliest first."""
    n = len(rows)
    lines = []
    for phase in ("import", "create", "run", "second"):
        gc_ms = statistics.median([r["gc"].get(phase, 0.0) for r in rows]) * 1e3
        own: dict[str, list] = {}
        for r in rows:
            for key, took in r["modules"].items():
                if key.startswith(phase + " "):
                    own.setdefault(key[len(phase) + 1 :], []).append(took)
        medians = {m: statistics.median(v + [0.0] * (n - len(v))) * 1e3 for m, v in own.items()}
        total = sum(medians.values())
        lines.append(
            f"  {phase:6s}: gc {gc_ms:5.2f} ms; {len(medians)} modules imported, {total:5.2f} ms"
        )
        if phase != "import":
            costly = sorted(medians.items(), key=lambda kv: -kv[1])[:top]
            lines += [f"      {ms:5.2f} {m}" for m, ms in costly if ms >= 0.01]
    return lines


def _paired(samples: dict) -> list[str]:
    """The first runtime against each other one, process by process: the medians of the
    rounds' differences (CPU ms) and ratios of import + create + first run (the main
    thread's) and of the CPU to the first answer (the process less its exit: its other
    threads included).
    On a loaded machine a round's processes share its load: these move less than medians."""
    (first, mine), *others = samples.items()
    if not others:
        return []
    lines = [f"paired with {first[-40:]}, process by process (medians of the rounds'):"]
    for root, theirs in others:
        work = [sum(a[:3]) - sum(b[:3]) for a, b in zip(mine, theirs)]
        work_ratio = [sum(a[:3]) / sum(b[:3]) for a, b in zip(mine, theirs)]
        answer = [(a[3] - a[4]) - (b[3] - b[4]) for a, b in zip(mine, theirs)]
        ratio = [(a[3] - a[4]) / (b[3] - b[4]) for a, b in zip(mine, theirs)]
        lines.append(
            f"  minus {root[-40:]}: import + create + first {statistics.median(work) * 1e3:+.1f}"
            f" ms (ratio {statistics.median(work_ratio):.3f}), to the first answer"
            f" {statistics.median(answer) * 1e3:+.1f} ms (ratio {statistics.median(ratio):.3f})"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="'tiny' (onyx/examples) or a model path")
    ap.add_argument("--against", help="another onyx checkout to pair with")
    ap.add_argument("--ort", action="store_true", help="pair with onnxruntime too")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument(
        "--cache", action="store_true", help="onyx with its model cache (a fresh folder)"
    )
    ap.add_argument(
        "--why", action="store_true", help="each phase's imports and collector passes too"
    )
    ap.add_argument("--top", type=int, default=12, help="--why's modules shown per phase")
    args = ap.parse_args()
    caches = tempfile.mkdtemp(prefix="onyx-model-cache-") if args.cache else None
    model = str(TINY if args.model == "tiny" else Path(args.model).resolve())
    runs = [(str(ROOT), sys.executable)]
    if args.against:
        other = Path(args.against).resolve()
        python = other / ".venv" / "bin" / "python"
        runs.append((str(other), str(python) if python.exists() else sys.executable))
    if args.ort:
        runs.append(("onnxruntime", sys.executable))
    with tempfile.TemporaryDirectory() as tmp:
        feeds = os.path.join(tmp, "feeds.npz")
        np.savez(feeds, **_feeds(model))
        samples: dict[str, list] = {root: [] for root, _ in runs}
        for r in range(args.rounds + 1):  # (round 0 writes the bytecode caches: untimed)
            for i, (root, python) in enumerate(runs):
                cache = caches and os.path.join(caches, str(i))
                sample = _one(python, root, model, feeds, cache, args.why)
                if r:
                    samples[root].append(sample)
    print(f"{Path(model).name}: CPU ms, medians of {args.rounds} fresh processes")
    print(
        f"{'runtime':40s} {'import':>7s} {'create':>7s} {'first':>7s} {'process':>8s} {'exit':>6s}"
        f" {'second':>7s}"
    )
    for root, rows in samples.items():
        med = [statistics.median(col) * 1e3 for col in zip(*(r[:6] for r in rows))]
        cells = f"{med[0]:7.1f} {med[1]:7.1f} {med[2]:7.1f} {med[3]:8.1f} {med[4]:6.1f}"
        cells += f" {med[5]:7.1f}"
        print(f"{root[-40:]:40s} {cells}")
    print("\n".join(_paired(samples)))
    if args.why:
        for root, rows in samples.items():
            print(f"\n{root}: where the phases went (CPU ms, medians)")
            print("\n".join(_why([r[6] for r in rows], args.top)))


if __name__ == "__main__":
    main()
