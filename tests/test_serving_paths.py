"""Fast paths for models served a few rows at a time (issue 23), each against the general path
it replaces, bit for bit, and against onnxruntime: skl2onnx's pairwise-distance Scan (kNN),
TopK of a few among many."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime.kernels import control, indexing


def _distance_scan(
    x_first: bool, op: str = "ReduceSumSquare", identities: bool = True, features: int = 6
):
    """A Scan whose body is skl2onnx's cdist step: state X, scan input the rows of T."""
    f = TensorProto.FLOAT
    sub_in = ["next_in", "next"] if x_first else ["next", "next_in"]
    nodes = [
        helper.make_node("Identity", ["next_in"], ["next_out"]),
        helper.make_node("Sub", sub_in, ["diff"]),
        helper.make_node(op, ["diff"], ["reduced"], axes=[1], keepdims=0),
        helper.make_node("Identity", ["reduced"], ["scan_out"]),
    ]
    if not identities:  # the state comes out as itself (no Identity in between)
        nodes = nodes[1:3]
        nodes[1].output[0] = "scan_out"
    body = helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info("next_in", f, ["N", features]),
         helper.make_tensor_value_info("next", f, [features])],
        [helper.make_tensor_value_info("next_in" if not identities else "next_out", f,
                                       ["N", features]),
         helper.make_tensor_value_info("scan_out", f, ["N"])],
    )  # fmt: skip
    rows = np.random.default_rng(1).standard_normal((300, features)).astype(np.float32)
    scan = helper.make_node("Scan", ["X", "T"], ["X_out", "D"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan, helper.make_node("TopK", ["Dt", "K"], ["V", "I"], axis=1, largest=0)],
        "knn",
        [helper.make_tensor_value_info("X", f, ["N", features])],
        [helper.make_tensor_value_info("D", f, None), helper.make_tensor_value_info("V", f, None),
         helper.make_tensor_value_info("I", TensorProto.INT64, None)],
        [numpy_helper.from_array(rows, "T"), numpy_helper.from_array(np.array([5]), "K")],
    )  # fmt: skip
    graph.node.insert(1, helper.make_node("Transpose", ["D"], ["Dt"], perm=[1, 0]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString()


@pytest.mark.parametrize("x_first", [True, False])
@pytest.mark.parametrize("identities", [True, False])
@pytest.mark.parametrize(("rows", "features"), [(1, 6), (37, 6), (37, 20), (5, 130)])
def test_distance_scan_matches_the_loop(monkeypatch, x_first, identities, rows, features):
    model = _distance_scan(x_first, identities=identities, features=features)
    x = {"X": np.random.default_rng(rows).standard_normal((rows, features)).astype(np.float32)}
    taken = []
    real = control.distance_scan

    def spy(*args):
        result = real(*args)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(control, "distance_scan", spy)
    fast = onyx.InferenceSession(model).run(None, x)
    assert taken == [True]  # the fast path answered
    monkeypatch.setattr(control, "distance_scan", lambda *a: None)
    loop = onyx.InferenceSession(model).run(None, x)
    for a, b in zip(fast, loop):
        np.testing.assert_array_equal(a, b)
    rows_t = np.random.default_rng(1).standard_normal((300, features)).astype(np.float32)
    formula = ((x["X"][None] - rows_t[:, None]) ** 2).sum(-1)
    np.testing.assert_allclose(fast[0], formula, rtol=1e-5)
    if x_first and identities:  # skl2onnx's form (onnxruntime 1.2x differs from the formula
        # on the two variants: NaN for row - X, other rows for a body that returns its input)
        expected = ort.InferenceSession(model).run(None, x)
        np.testing.assert_allclose(fast[0], expected[0], rtol=1e-6)
        np.testing.assert_array_equal(fast[2], expected[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("features", [1, 7, 8, 9, 16, 20, 33, 128])
@pytest.mark.parametrize("x_first", [True, False])
def test_feature_major_distances_have_the_bits_of_numpys_row_sums(dtype, features, x_first):
    rng = np.random.default_rng(features)
    x = rng.uniform(-3, 3, (29, features)).astype(dtype)
    rows = rng.standard_normal((211, features)).astype(dtype)
    got = control.distances_feature_major(x, rows, x_first)
    for r in range(rows.shape[0]):  # one Scan iteration: Sub, then ReduceSumSquare's np.sum
        d = x - rows[r] if x_first else rows[r] - x
        np.testing.assert_array_equal(got[r], np.sum(d * d, axis=1, dtype=dtype))


def test_other_scan_bodies_take_the_loop():
    assert control.distance_body(None) is None
    model = _distance_scan(True, op="ReduceL1")  # absolute values, not squares
    x = {"X": np.ones((2, 6), np.float32)}
    got = onyx.InferenceSession(model).run(None, x)[0]
    assert got.shape == (300, 2)
    expected = ort.InferenceSession(model).run(None, x)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def _full_sort_top_k(x, k, axis, largest):
    n = x.shape[axis]
    if largest:
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    return np.take(order, np.arange(k), axis=axis)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("data", ["normal", "ties", "few ties", "nan", "int", "uint8"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_top_few_matches_the_full_sort(largest, data, axis):
    rng = np.random.default_rng(7)
    if data == "ties":  # ties across the cut: the full sort decides
        x = rng.integers(0, 6, size=(3, 200, 4)).astype(np.float32)
    elif data == "few ties":  # ties at the bound among the candidates (and -0.0 against 0.0)
        x = rng.integers(-40, 40, size=(3, 200, 4)).astype(np.float32)
        x[x == 0] = np.where(rng.random(np.count_nonzero(x == 0)) < 0.5, -0.0, 0.0)
    elif data == "int":  # the extremes of the type too (inverted, not negated, for largest)
        x = rng.integers(-(2**63), 2**63 - 1, size=(3, 200, 4), dtype=np.int64)
        x[0, :3, 0] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0]
    elif data == "uint8":
        x = rng.integers(0, 256, size=(3, 200, 4)).astype(np.uint8)
    else:
        x = rng.standard_normal((3, 200, 4)).astype(np.float32)
    if data == "nan":
        x[1, 17, 2] = np.nan
    axis_len = x.shape[axis]
    for k in (1, 3, axis_len // 8):
        values, indices = indexing.top_k(x, np.array([k]), axis=axis, largest=largest)
        want = _full_sort_top_k(x, k, axis, largest)
        np.testing.assert_array_equal(indices, want)
        np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis))


def test_top_few_declines_ambiguous_cuts():
    x = np.zeros((2, 100), np.float32)  # every key ties with the k-th
    assert indexing.top_few(x, 3, 1, 0) is None
    x[0, 5] = np.nan
    assert indexing.top_few(x, 3, 1, 1) is None
    y = np.arange(100, dtype=np.float32)[None]
    np.testing.assert_array_equal(indexing.top_few(y, 3, 1, 1), [[99, 98, 97]])


def test_tree_mode_codes():
    from onyx.runtime.kernels.ml import tree

    codes = tree.mode_codes(["BRANCH_LEQ", b"LEAF", np.str_("BRANCH_GT")])
    np.testing.assert_array_equal(codes, [tree.LEQ, tree.LEAF, tree.GT])
    assert codes.dtype == np.uint8
    with pytest.raises(ValueError, match="unknown node mode 'BRANCH_XYZ'"):
        tree.mode_codes([b"LEAF", b"BRANCH_XYZ"])


@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("activation", [None, "Relu"])
def test_float16_conv_computes_as_float32(group, activation):
    """A float16 Conv (and Conv + Relu, which the optimizer fuses) is the float32 conv of the
    same values rounded once to float16: the native paths serve it as they serve float32."""
    rng = np.random.default_rng(group)
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float16)
    w = (rng.standard_normal((8, 8 // group, 3, 3)) / 3).astype(np.float16)
    b = rng.standard_normal(8).astype(np.float16)

    def model(dtype):
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, pads=[1] * 4)]
        if activation:
            nodes.append(helper.make_node(activation, ["c"], ["y"]))
        else:
            nodes[0].output[0] = "y"
        graph = helper.make_graph(
            nodes, "conv", [helper.make_tensor_value_info("x", dtype, x.shape)],
            [helper.make_tensor_value_info("y", dtype, None)],
            [numpy_helper.from_array(w.astype(helper.tensor_dtype_to_np_dtype(dtype)), "w"),
             numpy_helper.from_array(b.astype(helper.tensor_dtype_to_np_dtype(dtype)), "b")],
        )  # fmt: skip
        opset = [helper.make_opsetid("", 17)]
        return helper.make_model(graph, opset_imports=opset, ir_version=9).SerializeToString()

    half = onyx.InferenceSession(model(TensorProto.FLOAT16)).run(None, {"x": x})[0]
    single = onyx.InferenceSession(model(TensorProto.FLOAT)).run(None, {"x": x.astype(np.float32)})[
        0
    ]
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, single.astype(np.float16))
    expected = ort.InferenceSession(model(TensorProto.FLOAT16)).run(None, {"x": x})[0]
    np.testing.assert_allclose(half.astype(np.float32), expected.astype(np.float32), atol=4e-3)
