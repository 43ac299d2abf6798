"""What validation (onyx.validation.validate, run first by every InferenceSession) costs at
session creation: the bundled example and every model in tests/models.

    python benchmarks/bench_validate.py [--repeat 5]

Prints per model the median seconds of validate alone and of creating a session, and the
share of creation that validation takes.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import median_time  # noqa: E402

import onyx  # noqa: E402
from onyx.validation import validate  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def models() -> list[str]:
    paths = [os.path.join(ROOT, "onyx", "examples", "tiny_cnn.onnx")]
    return paths + sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*.onnx")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'model':34} {'nodes':>6} {'validate ms':>12} {'session ms':>11} {'share':>6}")
    shares = []
    for path in models():
        model = onyx.load(path)
        n = sum(1 for _ in model.graph.all_nodes())
        t_val = median_time(lambda m=model: validate(m), args.repeat)
        t_sess = median_time(lambda p=path: onyx.InferenceSession(p), args.repeat)
        shares.append(t_val / t_sess)
        name = os.path.basename(path)
        print(f"{name:34} {n:6d} {t_val * 1e3:12.2f} {t_sess * 1e3:11.2f} {t_val / t_sess:6.1%}")
    print(f"median share of session creation: {statistics.median(shares):.1%}")


if __name__ == "__main__":
    main()
