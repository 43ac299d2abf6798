"""Session creation in CPU time, per model of a zoo, paired against another checkout of onyx
(and onnxruntime): the figure run.py's tables call "create", read as CPU time so that a loaded
machine does not decide it.

    python benchmarks/bench_create.py [--against /path/to/other/checkout] [--ort]
        [--zoo serving|realistic|DIR] [--only SUBSTRING] [--rounds 5] [--creations 5] [--cache]

Each round starts one process per runtime (alternating) that imports it, creates a session of
every model once untimed (the first creation's one-time costs are bench_cold_start.py's), then
``--creations`` times, timed with time.process_time (each session freed after the next one
is made, outside the timing, as run.py does); the table gives the medians over all rounds.
``--against`` runs the other checkout's onyx with its ``.venv``'s interpreter;
``--cache`` turns on onyx's optimized-model cache (runtime/model_cache.py) in a fresh folder,
so the timed creations are hits.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "models"

_CHILD = """
import json, sys, time
clock = time.process_time
sys.path.insert(0, {root!r})
if {root!r} == "onnxruntime":
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.inter_op_num_threads = 1
else:
    import onyx as rt
    so = rt.SessionOptions()
so.intra_op_num_threads = 1
out = {{}}
for path in {models!r}:
    rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    took, made, last = [], None, None
    for _ in range({creations}):
        t = clock()
        made = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        took.append(clock() - t)
        last = made  # (the one before freed here, untimed: run.py's order)
    del made, last
    out[path] = took
print(json.dumps(out))
"""


def _models(zoo: str, only: str | None) -> list[str]:
    folder = {"serving": MODELS / "serving", "realistic": MODELS}.get(zoo, Path(zoo))
    paths = sorted(str(p) for p in folder.glob("*.onnx"))
    return [p for p in paths if only is None or only in Path(p).name]


def _one(python: str, root: str, models: list[str], creations: int) -> dict:
    code = _CHILD.format(root=root, models=models, creations=creations)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    )
    if out.returncode:
        raise SystemExit(f"{root}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", default="serving", help="'serving', 'realistic' or a folder")
    ap.add_argument("--only", help="models whose file name contains this")
    ap.add_argument("--against", help="another onyx checkout to pair with")
    ap.add_argument("--ort", action="store_true", help="pair with onnxruntime too")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--cache", action="store_true", help="onyx with its model cache (a fresh folder)"
    )
    ap.add_argument("--creations", type=int, default=5)
    args = ap.parse_args()
    if args.cache:  # (the children inherit it; the untimed first creation writes the entry)
        os.environ["ONYX_MODEL_CACHE"] = tempfile.mkdtemp(prefix="onyx-model-cache-")
    models = _models(args.zoo, args.only)
    runs = [("onyx", str(ROOT), sys.executable)]
    if args.against:
        other = Path(args.against).resolve()
        python = other / ".venv" / "bin" / "python"
        runs.append((str(other), str(other), str(python) if python.exists() else sys.executable))
    if args.ort:
        runs.append(("onnxruntime", "onnxruntime", sys.executable))
    samples: dict[str, dict[str, list]] = {label: {m: [] for m in models} for label, *_ in runs}
    for _ in range(args.rounds):
        for label, root, python in runs:
            for model, took in _one(python, root, models, args.creations).items():
                samples[label][model] += took
    labels = [label for label, *_ in runs]
    print(f"session creation, CPU ms, medians of {args.rounds} x {args.creations}")
    head = "".join(f" {label[-12:]:>12s}" for label in labels)
    ratios = "".join(f" {'/' + label[-10:]:>11s}" for label in labels[1:])
    print(f"{'model':36s}{head}{ratios}")
    logs: dict[str, list] = {label: [] for label in labels[1:]}
    for model in models:
        med = {label: statistics.median(samples[label][model]) * 1e3 for label in labels}
        cells = "".join(f" {med[label]:12.2f}" for label in labels)
        rs = "".join(f" {med['onyx'] / med[label]:11.2f}" for label in labels[1:])
        for label in labels[1:]:
            logs[label].append(math.log(med["onyx"] / med[label]))
        print(f"{Path(model).stem[:36]:36s}{cells}{rs}")
    if models:
        geo = "".join(f" {math.exp(statistics.mean(logs[label])):11.2f}" for label in labels[1:])
        print(f"{'geomean onyx/other':36s}{' ' * 13 * len(labels)}{geo}")


if __name__ == "__main__":
    main()
