"""Paths for models served a row or a clip at a time (issue 23), each against the general path
it replaces (bit for bit where the operations are the same) and onnxruntime: a forest's one
native call, ZipMap's rows, the generated runner's loads, the bound linear / scaler /
normalizer / SVM / LSTM calls, a Gemm of tiny weights, the session's sampled pace."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import concurrency, native
from onyx.runtime.kernels.ml import linear, preprocess, svm

ML = "ai.onnx.ml"
F = TensorProto.FLOAT
needs_native = pytest.mark.skipif(not native.available(), reason="native library not built")


def _ml_model(op: str, outputs, n_features: int, opset_ml: int = 3, **attrs) -> bytes:
    outs = [helper.make_tensor_value_info(name, t, None) for name, t in outputs]
    graph = helper.make_graph(
        [helper.make_node(op, ["X"], [o.name for o in outs], domain=ML, **attrs)],
        "g",
        [helper.make_tensor_value_info("X", F, [None, n_features])],
        outs,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, opset_ml)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _same(got, want) -> None:
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


def _forest(rng, features: int, trees: int, depth: int, double_weights: bool) -> dict:
    """TreeEnsembleRegressor attributes of full random trees (two targets), every split
    kind the one-call path takes and NaN rules on some nodes."""
    inner = 2**depth - 1
    cols = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes", "true",
                            "false", "tracks")}  # fmt: skip
    target = {k: [] for k in ("treeids", "nodeids", "ids", "weights")}
    for t in range(trees):
        for i in range(2 * inner + 1):
            leaf = i >= inner
            row = (t, i, 0 if leaf else int(rng.integers(features)),
                   0.0 if leaf else float(rng.standard_normal()),
                   "LEAF" if leaf else str(rng.choice(["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE",
                                                       "BRANCH_GT"])),
                   0 if leaf else 2 * i + 1, 0 if leaf else 2 * i + 2, int(rng.integers(2)))  # fmt: skip
            for key, value in zip(cols, row):
                cols[key].append(value)
            if leaf:
                for k in range(2):
                    for key, value in zip(target, (t, i, k, float(rng.standard_normal()))):
                        target[key].append(value)
    attrs = dict(
        n_targets=2,
        nodes_treeids=cols["treeids"],
        nodes_nodeids=cols["nodeids"],
        nodes_featureids=cols["featureids"],
        nodes_values=cols["values"],
        nodes_modes=cols["modes"],
        nodes_truenodeids=cols["true"],
        nodes_falsenodeids=cols["false"],
        nodes_missing_value_tracks_true=cols["tracks"],
        target_treeids=target["treeids"],
        target_nodeids=target["nodeids"],
        target_ids=target["ids"],
    )
    if double_weights:  # (double thresholds of float32 values: a float32 row still compares
        # in float32, and sums float64 weights)
        weights = np.array(target["weights"], np.float64)
        attrs["target_weights_as_tensor"] = numpy_helper.from_array(weights, "w")
        values = np.array(cols["values"], np.float32).astype(np.float64)
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(values, "v")
        del attrs["nodes_values"]
    else:
        attrs["target_weights"] = target["weights"]
    return attrs


@needs_native
@pytest.mark.parametrize("rows", [1, 3, 9])
@pytest.mark.parametrize("trees", [1, 13])
@pytest.mark.parametrize("double_weights", [False, True])
def test_forest_of_a_few_rows_is_one_native_call_with_the_numpy_bits(
    rows, trees, double_weights, monkeypatch
):
    """trees.c's onyx_forest_scores (a row walking 8 trees at once, weights added tree after
    tree) against the numpy walk: float32 and float64 weights, NaN features, a partial block
    of trees."""
    rng = np.random.default_rng(rows * 31 + trees)
    attrs = _forest(rng, 5, trees, 3, double_weights)
    model = _ml_model("TreeEnsembleRegressor", [("Y", F)], 5, **attrs)
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    x[0, ::2] = np.nan
    calls, run = [], native.ForestSums.__call__
    monkeypatch.setattr(native.ForestSums, "__call__", lambda t, x: calls.append(1) or run(t, x))
    got = onyx.InferenceSession(model).run(None, {"X": x})
    assert calls
    with native.disabled():
        want = onyx.InferenceSession(model).run(None, {"X": x})
    _same(got, want)
    if not double_weights:  # (onnxruntime takes double attributes with double rows only)
        expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got[0], expected.run(None, {"X": x})[0], rtol=1e-5, atol=1e-5)


def _zip_map_model(labels, strings: bool) -> bytes:
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(
            TensorProto.STRING if strings else TensorProto.INT64,
            helper.make_tensor_type_proto(F, []),
        )
    )
    key = "classlabels_strings" if strings else "classlabels_int64s"
    graph = helper.make_graph(
        [helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, **{key: labels})],
        "g",
        [helper.make_tensor_value_info("X", F, [None, len(labels)])],
        [helper.make_value_info("Z", seq)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


@pytest.mark.parametrize(
    "labels, strings",
    [([0, 1, 2], False), (["a", "b", "a"], True), (list(range(70)), False), ([7], False)],
)
def test_zip_map_rows_are_the_dicts_of_zip_and_the_callers_own(labels, strings):
    """One dict display per row (up to 64 labels; dict(zip) beyond), repeated labels as
    dict(zip) keeps them; the caller gets a plain list of fresh dicts, uncopied."""
    x = np.random.default_rng(len(labels)).random((4, len(labels))).astype(np.float32)
    want = [dict(zip(labels, row)) for row in x.tolist()]
    got = preprocess.zip_map(x, **{"classlabels_strings" if strings else "classlabels_int64s":
                                   labels})  # fmt: skip
    assert got == want and [list(g) for g in got] == [list(w) for w in want]
    sess = onyx.InferenceSession(_zip_map_model(labels, strings))
    first = sess.run(None, {"X": x})[0]
    assert type(first) is list and first == want
    first[0][labels[0]] = -1.0  # the caller's own: the next run is not touched
    second = sess.run(None, {"X": x})[0]
    assert second == want and second[0] is not first[0]
    expected = ort.InferenceSession(
        _zip_map_model(labels, strings), providers=["CPUExecutionProvider"]
    ).run(None, {"X": x})[0]
    assert [list(r) for r in second] == [list(r) for r in expected]
    for mine, theirs in zip(second, expected):
        np.testing.assert_allclose(list(mine.values()), list(theirs.values()), rtol=1e-6)


def test_generated_runner_loads_inputs_and_their_initializer_defaults():
    """The runner reads its inputs directly: an input with an initializer takes it where the
    feed leaves it out (None), and a plan called with fewer inputs pads them with None."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("bias", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
        [numpy_helper.from_array(np.array([10.0, 20.0], np.float32), "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [11.0, 22.0])
    np.testing.assert_array_equal(
        sess.run(None, {"x": x, "bias": np.ones(2, np.float32)})[0], [2.0, 3.0]
    )
    np.testing.assert_array_equal(sess.plan.run([x], None)[0], [11.0, 22.0])


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("strings", [False, True])
def test_bound_linear_classifier_answers_as_the_kernel(transform, strings):
    rng = np.random.default_rng(5)
    labels = (
        dict(classlabels_strings=["a", "b", "c"]) if strings else dict(classlabels_ints=[4, 5, 6])
    )
    attrs = dict(
        coefficients=rng.standard_normal(3 * 7).astype(np.float32).tolist(),
        intercepts=[0.5, -0.25, 0.0],
        post_transform=transform,
        multi_class=1,
        **labels,
    )
    label_type = TensorProto.STRING if strings else TensorProto.INT64
    model = _ml_model("LinearClassifier", [("label", label_type), ("p", F)], 7, opset_ml=1,
                      **attrs)  # fmt: skip
    for rows in (1, 5):
        x = rng.standard_normal((rows, 7)).astype(np.float32)
        got = onyx.InferenceSession(model).run(None, {"X": x})
        with native.disabled():  # numpy's steps: the kernel's bits
            _same(onyx.InferenceSession(model).run(None, {"X": x}),
                  linear.linear_classifier(x, **attrs))  # fmt: skip
        # trees.c's sums in feature order (BLAS's in its own): labels exact, scores close
        kernel = linear.linear_classifier(x, **attrs)
        np.testing.assert_array_equal(got[0], kernel[0])
        np.testing.assert_allclose(got[1], kernel[1], rtol=1e-6, atol=1e-6)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_bound_scaler_and_normalizer_keep_the_formulas_bits(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 4)) * 5).astype(dtype)
    scale, offset = [0.5, 2.0, -1.0, 3.0], [1.0, 0.0, -2.0, 0.25]
    call = preprocess.bound_scaler(dict(scale=scale, offset=offset))
    want = (x.astype(np.float32) - np.float32(offset)) * np.float32(scale)
    _same([call(x)], [want])
    _same([preprocess.bound_scaler(dict(scale=[2.0], offset=None))(x)],
          [x.astype(np.float32) * np.float32(2.0)])  # fmt: skip
    xf = x.astype(np.float32)
    xf[1] = 0.0  # a zero divisor leaves the row as it is
    divisors = {
        "MAX": xf.max(axis=-1, keepdims=True),
        "L1": np.abs(xf).sum(axis=-1, keepdims=True),
        "L2": np.sqrt((xf * xf).sum(axis=-1, keepdims=True)),
    }
    for norm, divisor in divisors.items():
        want = np.divide(xf, divisor, out=xf.copy(), where=divisor != 0)
        _same([preprocess.normalizer(xf, norm=norm)], [want])
        # (rows without a zero divisor: the plain division)
        _same([preprocess.normalizer(xf[::2], norm=norm)], [want[::2]])


def test_svm_rbf_one_row_keeps_the_formulas_bits():
    """The in-place RBF kernel (-2 V' kept), the votes as one product and Platt scaling in
    place give the bits of the formulas they replace."""
    rng = np.random.default_rng(9)
    k, per_class, features = 4, 5, 6
    vectors = rng.standard_normal((k * per_class, features))
    model = svm._Classifier(  # noqa: SLF001 (as test_ml_prepared builds one)
        classlabels_ints=list(range(k)),
        classlabels_strings=None,
        rho=rng.standard_normal(6).tolist(),
        prob_a=(-rng.random(6) - 1).tolist(),
        prob_b=rng.standard_normal(6).tolist(),
        coefficients=rng.standard_normal((k - 1) * k * per_class).tolist(),
        support_vectors=vectors.reshape(-1).tolist(),
        vectors_per_class=[per_class] * k,
        post_transform="NONE",
        kernel_params=[0.3, 0.0, 3.0],
        kernel_type="RBF",
    )
    for rows in (1, 7):
        x = rng.standard_normal((rows, features))
        d = (x * x).sum(axis=1)[:, None] + (vectors * vectors).sum(axis=1)[None, :]
        kernel = np.exp(-0.3 * np.maximum(d - 2.0 * np.matmul(x, vectors.T), 0.0))
        np.testing.assert_array_equal(model.rbf_kernel(x), kernel)
        decisions = np.matmul(kernel, model.weights) + model.rho
        positive = decisions > 0
        votes = positive @ model.vote_i + (~positive) @ model.vote_j
        platt = np.clip(1.0 / (1.0 + np.exp(decisions * model.prob_a + model.prob_b)),
                        1e-7, 1 - 1e-7)  # fmt: skip
        np.testing.assert_array_equal(
            svm.sigmoid_probability(decisions, model.prob_a, model.prob_b), platt
        )
        label, probabilities = model(x)
        np.testing.assert_array_equal(label, model.labels[np.argmax(votes, axis=1)])
        with native.disabled():  # r built and coupled in numpy (or on Python floats)
            _same(model(x), (label, probabilities))


def _lstm_model(direction: str, rng) -> tuple[bytes, dict]:
    H, n_in, steps = 16, 8, 5
    W = rng.standard_normal((1, 4 * H, n_in)).astype(np.float32) * 0.3
    R = rng.standard_normal((1, 4 * H, H)).astype(np.float32) * 0.3
    B = rng.standard_normal((1, 8 * H)).astype(np.float32) * 0.1
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"],
                            hidden_size=H, direction=direction)  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", F, [steps, 1, n_in]),
         helper.make_tensor_value_info("h0", F, [1, 1, H]),
         helper.make_tensor_value_info("c0", F, [1, 1, H])],
        [helper.make_tensor_value_info(n, F, None) for n in ("Y", "Yh", "Yc")],
        [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (R, "R"), (B, "B"))],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    feeds = {
        "X": rng.standard_normal((steps, 1, n_in)).astype(np.float32),
        "h0": rng.standard_normal((1, 1, H)).astype(np.float32),
        "c0": rng.standard_normal((1, 1, H)).astype(np.float32),
    }
    return model.SerializeToString(), feeds


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_bound_lstm_final_states_are_the_last_steps(direction):
    """The bound LSTM's Y_h and Y_c (the time-ordered history's last step, or its first for a
    reverse direction; copies), against the numpy path and onnxruntime."""
    model, feeds = _lstm_model(direction, np.random.default_rng(1))
    got = onyx.InferenceSession(model).run(None, feeds)
    with native.disabled():
        numpy_path = onyx.InferenceSession(model).run(None, feeds)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, n, w in zip(got, numpy_path, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, n, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    last = 0 if direction == "reverse" else -1
    np.testing.assert_array_equal(got[1], got[0][last])
    assert not np.shares_memory(got[1], got[0])


def test_pace_measures_the_first_runs_then_one_in_eight():
    pace = concurrency.Pace()
    measured = [pace.measures() for _ in range(40)]
    first = concurrency.SAMPLE_EVERY
    assert all(measured[:first])
    assert [i + 1 for i, m in enumerate(measured) if m][first:] == [16, 24, 32, 40]


def test_a_one_off_slow_run_does_not_make_a_sessions_runs_long():
    """(the plan compiling its runner at a tiny model's second run took 8 ms of CPU: short
    runs then ran side by side, untimed, for a hundred runs)"""
    pace = concurrency.Pace()
    for seconds in (0.00003, 0.008, 0.00003):
        pace.add(seconds)
    assert pace.seconds < 0.0001  # (without the clip: 1 ms, a short run's pace for a hundred runs)
    for _ in range(8):  # (a lasting change shows)
        pace.add(0.008)
    assert pace.seconds > concurrency.SHORT_RUN_SECONDS


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("columns", [1, 2, 3, 7, 8])
@pytest.mark.parametrize("rows", [1, 16, 300])
def test_row_reductions_by_columns_keep_numpys_bits(dtype, columns, rows):
    """A classifier's few classes over many rows reduce column by column (numpy's reduce over
    a short axis paid its set-up per row): the bits of x.max and x.sum, NaN included."""
    from onyx.runtime.kernels.ml._common import row_max, row_sum

    rng = np.random.default_rng(columns * rows)
    x = rng.standard_normal((rows, columns)) * np.exp(rng.standard_normal((rows, columns)) * 4)
    x = x.astype(dtype)
    x[::11, 0] = np.nan
    np.testing.assert_array_equal(row_max(x), x.max(axis=-1, keepdims=True))
    np.testing.assert_array_equal(row_sum(x), x.sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_native_normalizer_and_bins_keep_numpys_bits(rows):
    """trees.c's Normalizer (numpy's pairwise sums reproduced) and BinsOneHot (the chain's
    ArgMax rules) give the numpy path's bits, NaN and infinite features included."""
    rng = np.random.default_rng(rows)
    for columns in (1, 3, 7, 8, 9, 17, 128):
        x = (rng.standard_normal((rows, columns)) * 50).astype(np.float32)
        x.reshape(-1)[:: max(2, columns)] = [np.nan, np.inf, -np.inf, 0.0][columns % 4]
        x[0] = 0.0
        for norm in ("MAX", "L1", "L2"):
            got = preprocess.normalizer(x, norm=norm)
            with native.disabled():
                want = preprocess.normalizer(x, norm=norm)
            assert got.tobytes() == want.tobytes()
    features = rng.standard_normal((rows, 6)).astype(np.float32)
    features.reshape(-1)[::5] = np.nan
    features.reshape(-1)[1::7] = np.inf
    edges = np.sort(rng.standard_normal((3, 4)), axis=1).astype(np.float32)
    ones = np.where(np.isfinite(features[:, :1]), 1.0, np.nan).astype(np.float32)
    args = (features, np.array([0, 2, 5]), edges, ones, np.array([2]), np.array([1, 3, 1]),
            np.array([-1, 15]))  # fmt: skip
    got = preprocess.bins_one_hot(*args, cats_int64s=[0, 1, 2, 3, 4])
    with native.disabled():
        want = preprocess.bins_one_hot(*args, cats_int64s=[0, 1, 2, 3, 4])
    chain = preprocess._bins_chain(  # noqa: SLF001 (the function body, one kernel a step)
        features[:, [0, 2, 5]], *args[2:], [0, 1, 2, 3, 4]
    )
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, chain)


def test_svm_few_rows_native_matches_onnxruntime_on_odd_features():
    """The one-call SVM path: labels and probabilities as onnxruntime's on rows with NaN and
    infinite features (an infinite feature: RBF kernel 0), and as the numpy path's."""
    rng = np.random.default_rng(3)
    k, per_class, features = 3, 4, 5
    attrs = dict(
        classlabels_ints=[0, 1, 2], vectors_per_class=[per_class] * k,
        support_vectors=rng.standard_normal(k * per_class * features).tolist(),
        coefficients=rng.standard_normal((k - 1) * k * per_class).tolist(),
        rho=rng.standard_normal(3).tolist(), prob_a=(-rng.random(3) - 1).tolist(),
        prob_b=rng.standard_normal(3).tolist(), kernel_type="RBF", kernel_params=[0.2, 0.0, 3.0],
    )  # fmt: skip
    model = _ml_model("SVMClassifier", [("label", TensorProto.INT64), ("p", F)], features,
                      opset_ml=1, **attrs)  # fmt: skip
    x = rng.standard_normal((4, features)).astype(np.float32)
    x[0, 1], x[1, 2], x[2, 0] = np.nan, np.inf, -np.inf
    got = onyx.InferenceSession(model).run(None, {"X": x})
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    with native.disabled():
        numpy_path = onyx.InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(got[0], numpy_path[0])
    np.testing.assert_allclose(got[1], numpy_path[1], rtol=1e-5, atol=1e-6)
