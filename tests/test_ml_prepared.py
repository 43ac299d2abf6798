"""ai.onnx.ml kernels bound to their nodes (kernels/derived.py: prepared): a session runs the
node's compiled form, which must answer as the kernel called with the attributes does,
errors included."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
from onyx.runtime.kernels.ml import linear, preprocess, svm
from onyx.runtime.plan import PreparedCall

ML = "ai.onnx.ml"
LABEL_SCORES = (TensorProto.INT64, TensorProto.FLOAT)


def _session(op: str, x: np.ndarray, outputs=(TensorProto.FLOAT,), **attrs):
    elem = helper.np_dtype_to_tensor_dtype(x.dtype) if x.dtype != object else TensorProto.STRING
    outs = [f"y{i}" for i in range(len(outputs))]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], outs, domain=ML, **attrs)],
        "g",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, outputs)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    assert isinstance(sess.plan.steps[0].fn, PreparedCall)
    return sess


def _same(got: list, want) -> None:
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert np.asarray(g).dtype == np.asarray(w).dtype


@pytest.mark.parametrize(
    "x, attrs",
    [
        (np.array([[1, 3, 5, 7]], np.int64), dict(cats_int64s=[5, 1, 2])),
        (np.array([[1.0, 3.7, -0.5]], np.float64), dict(cats_int64s=[3, 1, 0])),
        (np.array([[2, 2, 9]], np.int32), dict(cats_int64s=[2, 9, 2])),  # repeated category
        (np.array([["5", "1"]], dtype=object), dict(cats_int64s=[5, 1])),
        (np.array([["a", "c"]], dtype=object), dict(cats_strings=["a", "b", "c"])),
    ],
)
def test_one_hot_encoder(x, attrs):
    sess = _session("OneHotEncoder", x, **attrs)
    _same(sess.run(None, {"x": x}), preprocess.one_hot_encoder(x, **attrs))


def test_one_hot_encoder_unknown_category_with_zeros_0():
    x = np.array([[1, 4]], np.int64)
    sess = _session("OneHotEncoder", x, cats_int64s=[1, 2], zeros=0)
    with pytest.raises(onyx.RuntimeFailure, match="not among the categories"):
        sess.run(None, {"x": x})
    ok = np.array([[2, 1]], np.int64)
    _same(sess.run(None, {"x": ok}), preprocess.one_hot_encoder(ok, cats_int64s=[1, 2], zeros=0))


@pytest.mark.parametrize("classes", [2, 3])
def test_linear_classifier_and_regressor(classes):
    rng = np.random.default_rng(classes)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    rows = 1 if classes == 2 else classes
    attrs = dict(
        coefficients=rng.standard_normal(rows * 5).tolist(),
        intercepts=rng.standard_normal(rows).tolist(),
        classlabels_ints=list(range(classes)),
        post_transform="LOGISTIC",
    )
    sess = _session("LinearClassifier", x, LABEL_SCORES, **attrs)
    _same(sess.run(None, {"x": x}), linear.linear_classifier(x, **attrs))
    reg = dict(coefficients=attrs["coefficients"][:5], intercepts=[0.5])
    sess = _session("LinearRegressor", x, **reg)
    _same(sess.run(None, {"x": x}), linear.linear_regressor(x, **reg))


def test_svm_classifier_few_rows():
    rng = np.random.default_rng(0)
    k, per, f = 3, 4, 5
    attrs = dict(
        classlabels_ints=list(range(k)),
        coefficients=rng.standard_normal((k - 1) * k * per).tolist(),
        support_vectors=rng.standard_normal(k * per * f).tolist(),
        vectors_per_class=[per] * k,
        rho=rng.standard_normal(3).tolist(),
        prob_a=(-rng.uniform(1, 3, 3)).tolist(),
        prob_b=rng.standard_normal(3).tolist(),
        kernel_type="RBF",
        kernel_params=[0.2, 0.0, 3.0],
    )
    # (as a model stores them: FLOATS are float32)
    for k in ("coefficients", "support_vectors", "rho", "prob_a", "prob_b", "kernel_params"):
        attrs[k] = np.float32(attrs[k]).tolist()
    for rows in (1, 3, 4, 9):
        x = rng.standard_normal((rows, f)).astype(np.float32)
        sess = _session("SVMClassifier", x, LABEL_SCORES, **attrs)
        _same(sess.run(None, {"x": x}), svm.svm_classifier(x, **attrs))


def test_svm_coupling_rows_from_lists_match_the_array_form():
    model = svm._Classifier(  # noqa: SLF001
        classlabels_ints=[0, 1, 2, 3], classlabels_strings=None, rho=[0.0] * 6,
        prob_a=[-1.0] * 6, prob_b=[0.0] * 6, coefficients=[1.0] * 12,
        support_vectors=[0.0] * 4, vectors_per_class=[1, 1, 1, 1], post_transform="NONE",
        kernel_params=None, kernel_type="LINEAR",
    )  # fmt: skip
    pairwise = np.random.default_rng(1).uniform(0.01, 0.99, (3, 6))
    r = np.zeros((3, 4, 4))
    for p, (i, j) in enumerate(model.pairs):
        r[:, i, j], r[:, j, i] = pairwise[:, p], 1.0 - pairwise[:, p]
    want = svm._pairwise_coupling(r)  # noqa: SLF001  (rows <= _SCALAR_ROWS: libsvm's order)
    got = np.array([model._coupled(row) for row in pairwise.tolist()])  # noqa: SLF001
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "attrs", [dict(scale=[2.0, 0.5], offset=[1.0, -1.0]), dict(scale=[3.0]), {}]
)
def test_scaler(attrs):
    x = np.array([[1.0, 2.0], [3.5, -4.0]], np.float64)
    sess = _session("Scaler", x, **attrs)
    _same(sess.run(None, {"x": x}), preprocess.scaler(x, **attrs))


def test_zip_map_of_no_rows():
    """A batch of 0 rows (a filter that kept none) gives no maps, as onnxruntime does."""
    assert preprocess.zip_map(np.zeros((0, 3), np.float32), classlabels_int64s=[0, 1, 2]) == []


def _libsvm_coupling(r: list, add_up) -> list:
    """libsvm's multiclass_probability transliterated loop for loop; add_up sums a list."""
    k = len(r)
    q = [[0.0] * k for _ in range(k)]
    for t in range(k):
        q[t][t] = add_up([r[j][t] * r[j][t] for j in range(k) if j != t])
        for j in range(k):
            if j != t:
                q[t][j] = -r[j][t] * r[t][j]
    p = [1.0 / k] * k
    for _ in range(max(100, k)):
        qp = [add_up([q[t][j] * p[j] for j in range(k)]) for t in range(k)]
        pqp = add_up([p[t] * qp[t] for t in range(k)])
        if max(abs(qp[t] - pqp) for t in range(k)) < 0.005 / k:
            break
        for t in range(k):
            diff = (-qp[t] + pqp) / q[t][t]
            p[t] += diff
            pqp = (pqp + diff * (diff * q[t][t] + 2 * qp[t])) / (1 + diff) / (1 + diff)
            for j in range(k):
                qp[j] = (qp[j] + diff * q[t][j]) / (1 + diff)
                p[j] /= 1 + diff
    return p


def _left_to_right(values: list) -> float:
    total = 0.0
    for v in values:
        total += v
    return total


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_svm_coupling_adds_left_to_right_as_libsvm(monkeypatch, path):
    """Every coupling path (trees.c's; numpy's: a few rows from lists, more rows as arrays)
    gives libsvm's bits, which a compensated or pairwise sum (Python 3.12's sum(), numpy's
    sum) does not."""
    import math

    from onyx.runtime import native

    if path == "numpy":
        monkeypatch.setattr(native, "svm_coupling", lambda r: None)
    elif not native.available():
        pytest.skip("no native library")
    # a compensated built-in sum (Python >= 3.12) must not reach the coupling
    monkeypatch.setattr(svm, "sum", math.fsum, raising=False)
    k, rows = 12, 24
    pairwise = np.random.default_rng(3).uniform(0.001, 0.999, (rows, k * (k - 1) // 2))
    r = np.zeros((rows, k, k))
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    for p, (i, j) in enumerate(pairs):
        r[:, i, j], r[:, j, i] = pairwise[:, p], 1.0 - pairwise[:, p]
    want = np.array([_libsvm_coupling(row, _left_to_right) for row in r.tolist()])
    compensated = np.array([_libsvm_coupling(row, math.fsum) for row in r.tolist()])
    assert (compensated != want).any()  # the rows tell the orders apart
    for n in (1, 3):
        np.testing.assert_array_equal(svm._pairwise_coupling(r[:n]), want[:n])  # noqa: SLF001
    np.testing.assert_array_equal(svm._pairwise_coupling(r), want)  # noqa: SLF001
    if path == "native":  # the classifier's set-up one (r built in C from the pairs)
        first, second = (np.array([pair[side] for pair in pairs]) for side in (0, 1))
        coupling = native.coupling_pairs(first, second, k)
        for n in (1, 3, rows):
            np.testing.assert_array_equal(coupling(np.ascontiguousarray(pairwise[:n])), want[:n])


@pytest.mark.parametrize("labels", [3, preprocess._DISPLAY_LABELS + 2])  # noqa: SLF001
def test_bound_zip_map_gives_the_kernels_maps(labels):
    """The bound ZipMap (labels found once) gives the kernel's maps, for a few labels (one
    dict display a row) and many (dict(zip)), and refuses rows of another width."""
    call = preprocess._bound_zip_map(  # noqa: SLF001
        {"classlabels_int64s": list(range(labels)), "classlabels_strings": None}
    )
    x = np.random.default_rng(0).random((3, labels)).astype(np.float32)
    got, want = call(x), preprocess.zip_map(x, classlabels_int64s=list(range(labels)))
    assert got == want and list(got[0]) == list(range(labels))
    assert call(x[0]) == want[:1]  # (one row as a vector: a batch of one)
    strings = preprocess._bound_zip_map(  # noqa: SLF001
        {"classlabels_int64s": None, "classlabels_strings": [f"c{i}" for i in range(labels)]}
    )
    assert list(strings(x)[1]) == [f"c{i}" for i in range(labels)]
    with pytest.raises(ValueError, match="columns"):
        call(x[:, 1:])


def test_bound_zip_maps_keep_their_own_labels():
    """Bound ZipMaps share row builders for equal labels (kept by value and type): each map
    has its node's labels, of their own types, and every run's rows are new dicts."""
    x = np.array([[0.25, 0.75]], np.float32)
    ints = preprocess._bound_zip_map({"classlabels_int64s": [0, 1], "classlabels_strings": None})  # noqa: SLF001
    wide = preprocess._bound_zip_map(  # noqa: SLF001
        {"classlabels_int64s": [np.int64(0), np.int64(1)], "classlabels_strings": None}
    )
    other = preprocess._bound_zip_map({"classlabels_int64s": [5, 7], "classlabels_strings": None})  # noqa: SLF001
    assert [type(k) for k in ints(x)[0]] == [int, int]
    assert [type(k) for k in wide(x)[0]] == [np.int64, np.int64]
    assert other(x) == [{5: 0.25, 7: 0.75}]
    first = ints(x)
    first[0][0] = -1.0
    assert ints(x) == [{0: 0.25, 1: 0.75}] and ints(x)[0] is not ints(x)[0]
