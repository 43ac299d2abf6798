"""scikit-learn models converted with skl2onnx, run by onyx, checked against scikit-learn's own
predictions (labels exact, scores to 1e-5 relative) and against onnxruntime."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from conftest import run_onnx

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
ort = pytest.importorskip("onnxruntime")

from skl2onnx import to_onnx  # noqa: E402
from skl2onnx.common.data_types import (  # noqa: E402
    Int64TensorType,
    StringTensorType,
)
from sklearn import cluster, decomposition, ensemble, linear_model, neighbors, svm, tree  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    MinMaxScaler,
    Normalizer,
    OneHotEncoder,
    OrdinalEncoder,
    StandardScaler,
)

warnings.filterwarnings("ignore")

RTOL, ATOL = 1e-5, 1e-5


def onyx_run(onx, feeds):
    """Run with onyx; a model needing an ai.onnx kernel not written yet is an expected failure."""
    try:
        return run_onnx(onx, feeds)
    except Exception as e:
        missing = re.search(r"no kernel for (\S+)", str(e))
        if missing:
            pytest.xfail(f"needs {missing.group(1)} kernel")
        raise


def ort_run(onx, feeds):
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def close(actual, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol)


def check_classifier(model, x, options=None, initial_types=None, proba=True, vs_ort=True):
    feeds = {"X": x}
    onx = to_onnx(
        model,
        x[:1] if initial_types is None else None,
        initial_types=initial_types,
        options={"zipmap": False, **(options or {})},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    got = onyx_run(onx, feeds)
    np.testing.assert_array_equal(np.asarray(got[0]), model.predict(x))
    if proba:
        close(got[1], model.predict_proba(x))
    if vs_ort:
        want = ort_run(onx, feeds)
        np.testing.assert_array_equal(np.asarray(got[0]), want[0])
        close(got[1], want[1], 1e-4, 1e-5)
    return got


def check_regressor(model, x, expected=None, vs_ort=True, rtol=RTOL, atol=ATOL):
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(onx, {"X": x})
    expected = model.predict(x) if expected is None else expected
    close(np.asarray(got[0]).reshape(np.shape(expected)), expected, rtol, atol)
    if vs_ort:
        close(got[0], ort_run(onx, {"X": x})[0], 1e-4, 1e-5)
    return got


@pytest.fixture(scope="module")
def cls_data():
    x, y = make_classification(
        200, 6, n_informative=4, n_redundant=0, n_classes=3, random_state=0
    )  # fmt: skip
    return x.astype(np.float32), y


@pytest.fixture(scope="module")
def bin_data():
    x, y = make_classification(200, 5, n_informative=3, n_redundant=0, random_state=1)
    return x.astype(np.float32), y


@pytest.fixture(scope="module")
def reg_data():
    x, y = make_regression(200, 5, n_informative=4, noise=0.1, random_state=0)
    return x.astype(np.float32), y


TREE_CLASSIFIERS = {
    "decision_tree": lambda: tree.DecisionTreeClassifier(max_depth=6, random_state=0),
    "random_forest": lambda: ensemble.RandomForestClassifier(10, max_depth=5, random_state=0),
    "extra_trees": lambda: ensemble.ExtraTreesClassifier(10, max_depth=5, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingClassifier(
        n_estimators=10, max_depth=3, random_state=0
    ),
}


@pytest.mark.parametrize("name", list(TREE_CLASSIFIERS))
@pytest.mark.parametrize("binary", [False, True])
def test_tree_classifiers(name, binary, cls_data, bin_data):
    x, y = bin_data if binary else cls_data
    model = TREE_CLASSIFIERS[name]().fit(x, y)
    check_classifier(model, x)


def test_string_labels(bin_data):
    x, y = bin_data
    model = ensemble.RandomForestClassifier(5, max_depth=4, random_state=0)
    model.fit(x, np.array(["no", "yes"], dtype=object)[y])
    check_classifier(model, x)


TREE_REGRESSORS = {
    "decision_tree": lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0),
    "random_forest": lambda: ensemble.RandomForestRegressor(10, max_depth=5, random_state=0),
    "extra_trees": lambda: ensemble.ExtraTreesRegressor(10, max_depth=5, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingRegressor(
        n_estimators=10, max_depth=3, random_state=0
    ),
}


@pytest.mark.parametrize("name", list(TREE_REGRESSORS))
def test_tree_regressors(name, reg_data):
    x, y = reg_data
    model = TREE_REGRESSORS[name]().fit(x, y)
    check_regressor(model, x, rtol=1e-5, atol=1e-3)  # float32 thresholds and sums


def test_isolation_forest(reg_data):
    x, _ = reg_data
    model = ensemble.IsolationForest(n_estimators=10, random_state=0).fit(x)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(onx, {"X": x})
    np.testing.assert_array_equal(np.asarray(got[0]).reshape(-1), model.predict(x))
    close(np.asarray(got[1]).reshape(-1), model.decision_function(x), 1e-4, 1e-5)


@pytest.mark.parametrize("binary", [False, True])
def test_logistic_regression(binary, cls_data, bin_data):
    x, y = bin_data if binary else cls_data
    check_classifier(linear_model.LogisticRegression(max_iter=500).fit(x, y), x)


@pytest.mark.parametrize(
    "model",
    [linear_model.LinearRegression(), linear_model.Ridge(alpha=0.5)],
    ids=["linear", "ridge"],
)
def test_linear_regression(model, reg_data):
    x, y = reg_data
    check_regressor(model.fit(x, y), x, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly", "sigmoid"])
@pytest.mark.parametrize("binary", [False, True])
def test_svc_probabilities(kernel, binary, cls_data, bin_data):
    x, y = bin_data if binary else cls_data
    model = svm.SVC(kernel=kernel, probability=True, random_state=0, gamma=0.1).fit(x, y)
    # libsvm's coupling stops at a tolerance: compare probabilities loosely to scikit-learn.
    got = check_classifier(model, x, proba=False)
    close(got[1], model.predict_proba(x), 1e-3, 1e-3)


def test_svc_decision(cls_data):
    x, y = cls_data
    check_classifier(svm.SVC(random_state=0).fit(x, y), x, proba=False)


def test_svr_and_one_class_svm(reg_data):
    x, y = reg_data
    check_regressor(svm.SVR(C=10.0).fit(x, y), x, rtol=1e-4, atol=1e-3)
    model = svm.OneClassSVM(gamma=0.1).fit(x)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(onx, {"X": x})
    np.testing.assert_array_equal(np.asarray(got[0]).reshape(-1), model.predict(x))
    close(np.asarray(got[1]).reshape(-1), model.decision_function(x), 1e-4, 1e-4)


def test_knn(cls_data, reg_data):
    x, y = cls_data
    check_classifier(neighbors.KNeighborsClassifier(3).fit(x, y), x, proba=True)
    x, y = reg_data
    check_regressor(neighbors.KNeighborsRegressor(3).fit(x, y), x, rtol=1e-4, atol=1e-3)


def test_kmeans(cls_data):
    x, _ = cls_data
    model = cluster.KMeans(3, n_init=2, random_state=0).fit(x)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(onx, {"X": x})
    np.testing.assert_array_equal(np.asarray(got[0]), model.predict(x))
    close(got[1], model.transform(x), 1e-4, 1e-4)


def test_mlp(cls_data, reg_data):
    x, y = cls_data
    check_classifier(
        MLPClassifier(hidden_layer_sizes=(16,), max_iter=300, random_state=0).fit(x, y), x
    )
    x, y = reg_data
    model = MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=0).fit(x, y)
    check_regressor(model, x, rtol=1e-4, atol=1e-3)


def test_pca(reg_data):
    x, _ = reg_data
    model = decomposition.PCA(3).fit(x)
    check_regressor_like = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(check_regressor_like, {"X": x})
    close(got[0], model.transform(x), 1e-4, 1e-4)


def test_scaler_normalizer_imputer_pipeline(cls_data):
    x, y = cls_data
    x = x.copy()
    x[::9, 2] = np.nan
    model = make_pipeline(
        SimpleImputer(strategy="mean"),
        StandardScaler(),
        MinMaxScaler(),
        Normalizer(norm="l2"),
        linear_model.LogisticRegression(max_iter=500),
    ).fit(x, y)
    check_classifier(model, x)


def test_column_transformer_with_string_columns():
    rng = np.random.default_rng(0)
    n = 120
    colour = rng.choice(["red", "green", "blue"], n)
    size = rng.choice(["S", "M", "L", "XL"], n)
    x = np.stack([colour, size], axis=1).astype(object)
    y = ((colour == "red") ^ (size == "S")).astype(np.int64) + (size == "XL")
    pre = ColumnTransformer(
        [
            ("onehot", OneHotEncoder(handle_unknown="ignore"), [0]),
            ("ordinal", OrdinalEncoder(), [1]),
        ]
    )
    model = make_pipeline(pre, ensemble.RandomForestClassifier(8, max_depth=4, random_state=0))
    model.fit(x, y)
    check_classifier(model, x, initial_types=[("X", StringTensorType([None, 2]))])


def test_tfidf_text_classifier():
    docs = np.array(
        [
            "the cat sat on the mat",
            "dogs bark loudly at night",
            "a cat and a dog play",
            "the dog sat down",
            "birds fly high in the sky",
            "cats purr when happy",
            "the night sky is dark",
            "a bird sings",
        ],
        dtype=object,
    )
    y = np.array([0, 1, 0, 1, 2, 0, 2, 2])
    model = make_pipeline(TfidfVectorizer(), linear_model.LogisticRegression()).fit(docs, y)
    onx = to_onnx(
        model,
        initial_types=[("X", StringTensorType([None, 1]))],
        options={id(model.steps[-1][1]): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    feeds = {"X": docs.reshape(-1, 1)}
    got = onyx_run(onx, feeds)
    np.testing.assert_array_equal(np.asarray(got[0]), model.predict(docs))
    close(got[1], model.predict_proba(docs))


def test_zipmap_output(cls_data):
    x, y = cls_data
    model = linear_model.LogisticRegression(max_iter=500).fit(x, y)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    got = onyx_run(onx, {"X": x[:5]})
    want = ort_run(onx, {"X": x[:5]})
    assert [sorted(d) for d in got[1]] == [sorted(d) for d in want[1]]
    for g, w in zip(got[1], want[1]):
        close([g[k] for k in sorted(g)], [w[k] for k in sorted(w)], 1e-5, 1e-6)


def test_int64_input_tree(reg_data):
    x, y = reg_data
    xi = np.round(x * 3).astype(np.int64)
    model = tree.DecisionTreeRegressor(max_depth=4, random_state=0).fit(xi, y)
    onx = to_onnx(
        model,
        initial_types=[("X", Int64TensorType([None, xi.shape[1]]))],
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    got = onyx_run(onx, {"X": xi})
    close(np.asarray(got[0]).reshape(-1), model.predict(xi), 1e-5, 1e-3)
