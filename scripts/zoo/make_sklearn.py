"""scikit-learn pipelines through skl2onnx: ColumnTransformer over strings and numbers.

Runs in a venv with scikit-learn and skl2onnx (the project's test extra has both).
"""

from __future__ import annotations

import numpy as np
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler
from sklearn.svm import SVC
from stage import stage

RNG = np.random.default_rng(0)
N = 120
CITIES = np.array(["paris", "rome", "oslo", "lima", "kyiv"], dtype=object)
WORDS = ["red apple", "green pear", "ripe red cherry", "old green apple", "sweet pear jam"]


def _frame(n: int):
    num = RNG.normal(size=(n, 3)).astype(np.float32)
    num[RNG.random((n, 3)) < 0.1] = np.nan
    city = CITIES[RNG.integers(0, len(CITIES), n)].reshape(-1, 1)
    text = np.array([WORDS[i] for i in RNG.integers(0, len(WORDS), n)], dtype=object).reshape(-1, 1)
    return num, city, text


def _columns(onehot: bool = True) -> ColumnTransformer:
    cat = OneHotEncoder(handle_unknown="ignore") if onehot else OrdinalEncoder()
    return ColumnTransformer([
        ("num", Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]), [0, 1, 2]),
        ("cat", cat, [3]),
    ])  # fmt: skip


def main() -> None:
    num, city, text = _frame(N)
    y = (np.nan_to_num(num[:, 0]) + (city[:, 0] == "oslo") > 0.3).astype(np.int64)
    y_reg = np.nan_to_num(num[:, 1]) * 2 + (city[:, 0] == "rome")
    # one input per column, as skl2onnx converts a DataFrame's ColumnTransformer
    types = [(f"x{i}", FloatTensorType([None, 1])) for i in range(3)]
    types.append(("city", StringTensorType([None, 1])))
    feeds_num, feeds_city, feeds_text = _frame(16)
    feeds = {f"x{i}": feeds_num[:, i : i + 1] for i in range(3)}
    feeds["city"] = feeds_city
    opts = {"zipmap": False}

    models = {
        "coltrans_onehot_logreg": (Pipeline([("cols", _columns()), ("clf", LogisticRegression())]), y),
        "coltrans_ordinal_forest": (
            Pipeline([("cols", _columns(False)), ("clf", RandomForestClassifier(8, max_depth=4,
                                                                                 random_state=0))]), y),
        "coltrans_onehot_gbr": (
            Pipeline([("cols", _columns()), ("reg", GradientBoostingRegressor(n_estimators=10,
                                                                               random_state=0))]), y_reg),
        "coltrans_onehot_svc": (Pipeline([("cols", _columns()), ("clf", SVC(probability=True,
                                                                             random_state=0))]), y),
    }  # fmt: skip
    X = np.concatenate([num.astype(object), city], axis=1)
    for name, (pipe, target) in models.items():
        pipe.fit(X, target)
        onx = _convert_split(pipe, types, opts)
        stage("skl2onnx", name, onx, feeds, notes="ColumnTransformer, float + string inputs")
    # lowercase=False: skl2onnx's StringNormalizer asks for the en_US locale, which minimal
    # systems lack (onnxruntime then fails to load the model)
    text_pipe = Pipeline([("tfidf", TfidfVectorizer(lowercase=False)), ("reg", Ridge())])
    text_pipe.fit(text[:, 0], y_reg)
    onx = to_onnx(text_pipe, initial_types=[("text", StringTensorType([None, 1]))],
                  target_opset=17)  # fmt: skip
    stage("skl2onnx", "tfidf_ridge", onx, {"text": feeds_text}, notes="strings, TfIdfVectorizer")


def _convert_split(pipe, types, opts):
    """The pipeline with columns 0-2 fed as inputs x0-x2 and 3 as 'city'."""
    cols = pipe.steps[0][1]
    names = {"num": ["x0", "x1", "x2"], "cat": ["city"]}
    cols.transformers_ = [(n, t, names.get(n, c)) for n, t, c in cols.transformers_]
    options = {id(pipe.steps[-1][1]): opts} if hasattr(pipe.steps[-1][1], "predict_proba") else None
    return to_onnx(pipe, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3},
                   options=options)  # fmt: skip


if __name__ == "__main__":
    main()
