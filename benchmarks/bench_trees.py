"""Tree-ensemble speed: onyx vs onnxruntime on scikit-learn forests converted with skl2onnx.

python benchmarks/bench_trees.py                    # 100k rows x 300 trees of depth 8
python benchmarks/bench_trees.py --rows 20000 --trees 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    import onnxruntime as ort
    from conftest import run_onnx
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--trees", type=int, default=300)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()

    x, y = make_classification(
        n_samples=max(args.rows, 5000), n_features=args.features, n_informative=10,
        n_classes=3, random_state=0,
    )  # fmt: skip
    x = x.astype(np.float32)
    train = slice(0, 5000)
    models = {
        "RandomForestClassifier": RandomForestClassifier(
            n_estimators=args.trees, max_depth=args.depth, n_jobs=-1, random_state=0
        ),
        "GradientBoostingRegressor": GradientBoostingRegressor(
            n_estimators=args.trees, max_depth=args.depth, random_state=0
        ),
    }
    batch = x[: args.rows]
    print(f"{args.rows} rows x {args.trees} trees, depth {args.depth}, {args.features} features")
    for name, model in models.items():
        model.fit(x[train], y[train])
        onx = to_onnx(model, x[:1], options={"zipmap": False} if "Class" in name else None)
        sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {onx.graph.input[0].name: batch}
        expected = sess.run(None, feeds)
        actual = run_onnx(onx, feeds)
        for e, a in zip(expected, actual):
            np.testing.assert_allclose(np.asarray(a), e, rtol=1e-4, atol=1e-4)
        t_ort = best_of(lambda s=sess, f=feeds: s.run(None, f), args.repeat)
        t_onyx = best_of(lambda m=onx, f=feeds: run_onnx(m, f), args.repeat)
        print(
            f"{name:28s} onnxruntime {t_ort * 1e3:8.1f} ms   onyx {t_onyx * 1e3:8.1f} ms   "
            f"ratio {t_onyx / t_ort:5.2f}x"
        )


if __name__ == "__main__":
    main()
