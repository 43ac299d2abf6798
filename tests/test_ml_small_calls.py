"""scikit-learn models at a few rows (issue 23): the ai.onnx.ml kernels' one short native call
(native/trees.py's SmallCall: each thread's own outputs) and the linear pipelines' chain as
one step (optimizer/linear_chain.py), each against onnxruntime, with the library and
without it."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

import onyx  # noqa: E402
from onyx.runtime import native  # noqa: E402
from onyx.runtime.native import trees  # noqa: E402

warnings.filterwarnings("ignore")

#: rows: one, a few, SmallCall's most, one past it (the general path)
ROWS = (1, 3, trees.SMALL_ROWS, trees.SMALL_ROWS + 1)


@pytest.fixture(scope="module")
def data():
    x, y = make_classification(300, 12, n_informative=6, n_classes=3, random_state=0)
    return x.astype(np.float32), y


def _convert(est, x, zipmap=False, strings=False):
    options = {id(est): {"zipmap": zipmap}} if not zipmap else None
    onx = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options)
    return onx.SerializeToString()


def _feeds(rows: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-3, 3, (rows, 12)).astype(np.float32)
    x[0, 1] = np.nan  # (a NaN feature: the trees' rule, NaN through the chain)
    return x


def _same_as_ort(model: bytes, x: np.ndarray, sess=None) -> None:
    got = (sess or onyx.InferenceSession(model)).run(None, {"X": x})
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: the same keys, of the same types
            assert [[(type(k), k) for k in row] for row in g] == [
                [(type(k), k) for k in row] for row in w
            ]
            g = np.array([list(r.values()) for r in g])
            w = np.array([list(r.values()) for r in w])
        else:
            assert g.dtype == w.dtype and g.shape == w.shape
        if np.asarray(w).dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


def _counting(monkeypatch) -> list:
    """SmallCall's calls, counted."""
    calls = [0]
    original = trees.SmallCall.__call__

    def counted(self, x):
        calls[0] += 1
        return original(self, x)

    monkeypatch.setattr(trees.SmallCall, "__call__", counted)
    return calls


def _estimators():
    return {
        "forest": RandomForestClassifier(20, max_depth=6, random_state=0),
        "boosting": GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0),
        "svc": SVC(probability=True, random_state=0),
    }


@pytest.mark.parametrize("name", ["forest", "boosting", "svc"])
@pytest.mark.parametrize("use_native", [True, False])
def test_classifiers_at_few_rows_match_onnxruntime(data, name, use_native, monkeypatch):
    x, y = data
    est = _estimators()[name].fit(x, y)
    model = _convert(est, x, zipmap=name == "forest")
    calls = _counting(monkeypatch)
    sess = onyx.InferenceSession(model)
    for rows in ROWS:
        if use_native:
            _same_as_ort(model, _feeds(rows), sess)
        else:
            with native.disabled():
                _same_as_ort(model, _feeds(rows), sess)
    small_rows = (1, 3) if name == "svc" else (1, 3, trees.SMALL_ROWS)  # (SVC: up to 16)
    if native.available() and use_native:
        assert calls[0] >= len(small_rows)
    else:
        assert calls[0] == 0


def test_string_labels_take_the_short_call(data, monkeypatch):
    x, y = data
    est = RandomForestClassifier(10, max_depth=5, random_state=0).fit(x, np.array(list("abc"))[y])
    model = _convert(est, x)
    calls = _counting(monkeypatch)
    for rows in (1, 5):
        _same_as_ort(model, _feeds(rows))
    assert calls[0] == (2 if native.available() else 0)


def test_threads_write_their_own_outputs(data):
    """Each thread's short calls write into outputs of its own: concurrent runs of one
    session on different rows answer as runs one at a time do."""
    x, y = data
    sess = onyx.InferenceSession(_convert(_estimators()["boosting"].fit(x, y), x))
    feeds = [_feeds(1 + i % 3, seed=i) for i in range(8)]
    want = [sess.run(None, {"X": f}) for f in feeds]
    bad = []

    def work(i):
        for _ in range(200):
            got = sess.run(None, {"X": feeds[i]})
            if not all(np.array_equal(g, w) for g, w in zip(got, want[i])):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


# -- LinearChainFusion ---------------------------------------------------------------------


def _pipelines():
    def logistic():
        return LogisticRegression(max_iter=500)

    return {
        "scaler_pca_logistic": (make_pipeline(StandardScaler(), PCA(6), logistic()), "LinearChainProjNorm"),
        "pca_logistic": (make_pipeline(PCA(5, whiten=False), logistic()), "LinearChainProjNorm"),
        "scaler_logistic": (make_pipeline(StandardScaler(), logistic()), "LinearChainNorm"),
        "logistic": (logistic(), "LinearChainNorm"),
    }  # fmt: skip


def _ops(sess) -> list[str]:
    return [s.node.op_type for s in sess.plan.steps]


@pytest.mark.parametrize("name", list(_pipelines()))
@pytest.mark.parametrize("zipmap", [False, True])
def test_linear_chains_are_one_step_matching_onnxruntime(data, name, zipmap):
    x, y = data
    est, fused = _pipelines()[name]
    model = _convert(est.fit(x, y), x, zipmap=zipmap)
    sess = onyx.InferenceSession(model)
    assert fused in _ops(sess)
    assert not {"Scaler", "Sub", "MatMul", "LinearClassifier", "Normalizer"} & set(_ops(sess))
    for rows in ROWS + (200,):
        _same_as_ort(model, _feeds(rows), sess)
        with native.disabled():
            _same_as_ort(model, _feeds(rows), sess)


def test_linear_chain_saved_runs_elsewhere(data, tmp_path):
    """The optimized model keeps each variant's body in the ops skl2onnx wrote: onnx's full
    check passes and onnxruntime runs it to the original's answers."""
    x, y = data
    for name, (est, fused) in _pipelines().items():
        model = _convert(est.fit(x, y), x)
        path = tmp_path / f"{name}.onnx"
        onyx.save(onyx.optimize(onyx.load(model)), str(path))
        saved = onnx.load(str(path))
        onnx.checker.check_model(saved, full_check=True)
        assert [n.op_type for n in saved.graph.node] == [fused]
        xs = _feeds(7)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": xs})
        got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {"X": xs}
        )
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_linear_chain_leaves_shared_values(data):
    """A Scaler whose output another node also reads stays a step of its own."""
    from onnx import helper

    x, y = data
    model = onnx.load_from_string(
        _convert(make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), x)
    )
    scaled = model.graph.node[0].output[0]
    model.graph.node.append(helper.make_node("Identity", [scaled], ["scaled_too"]))
    model.graph.output.append(
        helper.make_tensor_value_info("scaled_too", onnx.TensorProto.FLOAT, None)
    )
    data_ = model.SerializeToString()
    sess = onyx.InferenceSession(data_)
    assert "Scaler" in _ops(sess) and "LinearChainNorm" in _ops(sess)
    _same_as_ort(data_, _feeds(3), sess)


# -- two classes: every vote for class 0 (skl2onnx's binary forests) -----------------------


@pytest.fixture(scope="module")
def binary_models():
    x, y = make_classification(300, 12, n_informative=6, n_classes=2, random_state=1)
    x = x.astype(np.float32)
    forest = _convert(RandomForestClassifier(15, max_depth=6, random_state=0).fit(x, y), x)
    boosting = _convert(GradientBoostingClassifier(n_estimators=10, random_state=0).fit(x, y), x)
    return {"forest": forest, "boosting": boosting}


def _with_transform(model: bytes, transform: str) -> bytes:
    m = onnx.load_from_string(model)
    for a in m.graph.node[0].attribute:
        if a.name == "post_transform":
            a.s = transform.encode()
    return m.SerializeToString()


@pytest.mark.parametrize(
    "name, transform",
    [
        ("forest", None),  # weights >= 0, NONE: [1 - s, s]
        ("forest", "LOGISTIC"),  # [1 - l(s), l(s)]
        ("boosting", None),  # signed weights, LOGISTIC and a base value: [l(-s), l(s)]
        ("boosting", "NONE"),  # [-s, s]
    ],
)
def test_binary_forests_match_onnxruntime(binary_models, name, transform, monkeypatch):
    model = binary_models[name]
    if transform is not None:
        model = _with_transform(model, transform)
    calls = _counting(monkeypatch)
    sess = onyx.InferenceSession(model)
    for rows in ROWS:
        _same_as_ort(model, _feeds(rows), sess)
        with native.disabled():
            _same_as_ort(model, _feeds(rows), sess)
    assert calls[0] == (3 if native.available() else 0)


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("transform", [None, "NONE"])
def test_binary_linear_chains_match_onnxruntime(scaled, transform):
    """A two-class LogisticRegression (one set of weights, LOGISTIC): the sign's rule and
    [1 - p, p] natively; NONE too. (PROBIT runs the separate kernels, where onyx
    leaves onnxruntime's layout: ml/linear.py's binary_scores.)"""
    x, y = make_classification(300, 12, n_informative=6, n_classes=2, random_state=2)
    x = x.astype(np.float32)
    est = make_pipeline(StandardScaler(), LogisticRegression()) if scaled else LogisticRegression()
    model = _convert(est.fit(x, y), x)
    if transform is not None:
        m = onnx.load_from_string(model)
        (node,) = [n for n in m.graph.node if n.op_type == "LinearClassifier"]
        node.attribute.remove(next(a for a in node.attribute if a.name == "post_transform"))
        node.attribute.append(onnx.helper.make_attribute("post_transform", transform))
        model = m.SerializeToString()
    sess = onyx.InferenceSession(model)
    if scaled:
        assert _ops(sess) == ["LinearChain"]
    for rows in ROWS + (200,):
        _same_as_ort(model, _feeds(rows), sess)
        with native.disabled():
            _same_as_ort(model, _feeds(rows), sess)
