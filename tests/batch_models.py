"""Models and data the batch-inference tests share: a scikit-learn pipeline with a string column,
the committed LightGBM classifier, and the bundled CNN, each with a seeded DataFrame-like table."""

from __future__ import annotations

import pathlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
LIGHTGBM = HERE / "models" / "batch" / "lightgbm_classifier.onnx"
CNN = HERE.parent / "onyx" / "examples" / "tiny_cnn.onnx"
CITIES = ["paris", "lyon", "nice", "lille"]


def table(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Columns for the scikit-learn pipeline: a string city and two numbers."""
    rng = np.random.default_rng(seed)
    return {
        "city": np.array(rng.choice(CITIES, n), dtype=object),
        "age": rng.uniform(18, 90, n).astype(np.float32),
        "income": rng.lognormal(10, 1, n).astype(np.float32),
    }


def sklearn_pipeline() -> bytes:
    """OneHot(city) + StandardScaler(age, income) -> LogisticRegression, converted by skl2onnx
    with one input per column (strings included), as users export tabular models."""
    import pandas as pd
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    data = table(400, seed=1)
    frame = pd.DataFrame(data)
    target = (data["age"] > 50).astype(int) + (data["city"] == "nice")
    pipe = Pipeline(
        [
            (
                "prep",
                ColumnTransformer(
                    [
                        ("city", OneHotEncoder(handle_unknown="ignore"), ["city"]),
                        ("num", StandardScaler(), ["age", "income"]),
                    ]
                ),
            ),
            ("clf", LogisticRegression(max_iter=500)),
        ]
    ).fit(frame, target)
    types = [
        ("city", StringTensorType([None, 1])),
        ("age", FloatTensorType([None, 1])),
        ("income", FloatTensorType([None, 1])),
    ]
    return convert_sklearn(pipe, initial_types=types, target_opset=17).SerializeToString()


def features(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 6)).astype(np.float32)


def images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(1, 28, 28)).astype(np.float32) for _ in range(n)]
