"""The optimizer's share of session creation, pass by pass: for each model of a zoo, what a
warm session's optimization (onyx.optimize(..., for_session=True)) spends in each pass.

    python benchmarks/bench_passes.py [--zoo serving|realistic|DIR] [--only SUBSTRING]
        [--creations 10] [--top 8]

Per model: the optimization's CPU time (time.process_time, median over ``--creations`` after
two untimed ones, each on a freshly loaded and validated model, as a session optimizes it),
its pass runs per creation, then the passes taking most, each with its runs per creation and
its median time (the optimizer's own per-run timing, PassResult.seconds: wall time, so read
it on a quiet machine, or as shares). ShapeFolding's first run holds the shape inference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onyx import serde  # noqa: E402
from onyx.optimizer import optimize  # noqa: E402
from onyx.validation import validate  # noqa: E402

MODELS = ROOT / "benchmarks" / "models"


def _models(zoo: str, only: str | None) -> list[Path]:
    folder = {"serving": MODELS / "serving", "realistic": MODELS}.get(zoo, Path(zoo))
    return [p for p in sorted(folder.glob("*.onnx")) if only is None or only in p.name]


def _profile(path: Path, creations: int) -> tuple[list[float], dict, Counter]:
    """(CPU seconds per creation, pass -> seconds per creation, pass -> runs per creation)."""
    took, per_pass, runs = [], defaultdict(list), Counter()
    for i in range(creations + 2):
        model = serde.load(str(path))
        validate(model, "the model")
        results: list = []
        start = time.process_time()
        optimize(model, "all", in_place=True, for_session=True, results=results)
        spent = time.process_time() - start
        if i < 2:
            continue
        took.append(spent)
        seconds: Counter = Counter()
        for r in results:
            seconds[r.name] += r.seconds
        for name, s in seconds.items():
            per_pass[name].append(s)
        if i == 2:
            runs.update(r.name for r in results)
    return took, per_pass, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", default="serving", help="'serving', 'realistic' or a folder")
    ap.add_argument("--only", help="models whose file name contains this")
    ap.add_argument("--creations", type=int, default=10)
    ap.add_argument("--top", type=int, default=8, help="passes shown per model")
    args = ap.parse_args()
    for path in _models(args.zoo, args.only):
        took, per_pass, runs = _profile(path, args.creations)
        rows = sorted(((statistics.median(s), name) for name, s in per_pass.items()), reverse=True)
        print(
            f"{path.stem}: optimize {statistics.median(took) * 1e3:.2f} ms CPU, "
            f"{sum(runs.values())} pass runs"
        )
        for s, name in rows[: args.top]:
            print(f"  {name:34s} x{runs[name]:<2d} {s * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
