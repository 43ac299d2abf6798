"""LightGBM and XGBoost through onnxmltools (classifiers, regressors, ranker-like objectives).

Runs in its own venv (build.sh: lightgbm, xgboost-cpu, onnxmltools, scikit-learn).
"""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from onnxmltools import convert_lightgbm, convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType
from stage import stage

RNG = np.random.default_rng(5)


def _data(n: int, classes: int):
    X = RNG.standard_normal((n, 6)).astype(np.float32)
    score = X[:, 0] * 1.5 - X[:, 1] + 0.5 * X[:, 2] * X[:, 3]
    if classes == 0:
        return X, score.astype(np.float32)
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return X, np.digitize(score, edges).astype(np.int64)


def main() -> None:
    types = [("X", FloatTensorType([None, 6]))]
    feeds = {"X": RNG.standard_normal((20, 6)).astype(np.float32)}
    models = {}
    for classes, tag in ((2, "binary"), (3, "multiclass"), (0, "regression")):
        X, y = _data(300, classes)
        common = {"n_estimators": 12, "random_state": 0}
        if classes:
            models[f"lightgbm_{tag}"] = (
                lgb.LGBMClassifier(num_leaves=8, verbose=-1, **common),
                X,
                y,
            )
            models[f"xgboost_{tag}"] = (xgb.XGBClassifier(max_depth=3, **common), X, y)
        else:
            models[f"lightgbm_{tag}"] = (
                lgb.LGBMRegressor(num_leaves=8, verbose=-1, **common),
                X,
                y,
            )
            models[f"xgboost_{tag}"] = (xgb.XGBRegressor(max_depth=3, **common), X, y)
    for name, (model, X, y) in models.items():
        model.fit(X, y)
        is_lgb = name.startswith("lightgbm")
        convert = convert_lightgbm if is_lgb else convert_xgboost
        kwargs = {"zipmap": False} if is_lgb else {}
        onx = convert(model, initial_types=types, target_opset=15, **kwargs)
        pred = model.predict(feeds["X"])
        fw = None
        if "regression" in name:  # float outputs compare; labels are checked by the runtime
            fw = [pred.reshape(-1, 1).astype(np.float32)]
        stage("onnxmltools", name, onx, feeds, framework=fw)


if __name__ == "__main__":
    main()
