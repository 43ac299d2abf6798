"""optimizer/movement.py: data-movement chains made one node, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

ort = pytest.importorskip("onnxruntime")


def _model(nodes, x_shape, inits=(), opset=17) -> bytes:
    graph = helper.make_graph(
        nodes,
        "movement",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]
    ).SerializeToString()


def _check(model: bytes, x: np.ndarray) -> list[str]:
    """The optimized graph's op types; its output is onnxruntime's exactly."""
    got = onyx.InferenceSession(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.array_equal(got, want)
    return [n.op_type for n in onyx.optimize(onyx.load(model)).graph]


def _unflatten(ends: int, x_shape) -> bytes:
    """PyTorch's unflatten of the last axis: Reshape(x, Concat(Shape(x)[0:ends], [3, -1]))."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "ends"], ["lead"]),
        helper.make_node("Concat", ["lead", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [("zero", np.array([0])), ("ends", np.array([ends])), ("tail", np.array([3, -1]))]
    return _model(nodes, x_shape, inits)


@pytest.mark.parametrize("batch", [1, 5])
def test_reshape_of_own_leading_dims_becomes_a_constant_shape(batch):
    x = np.random.default_rng(batch).standard_normal((7, batch, 12)).astype(np.float32)
    assert _check(_unflatten(2, [7, "N", 12]), x) == ["Reshape", "Relu"]


def test_reshape_own_shape_needs_the_slice_within_rank():
    """ends past x's rank takes every dim: the 0s would then be wrong, so it stays."""
    x = np.random.default_rng(0).standard_normal((7, 2, 12)).astype(np.float32)
    ops = _check(_unflatten(2, None), x)  # (rank unknown: left alone)
    assert "Shape" in ops


def _unsqueeze_transpose_squeeze(perm, squeeze_axes, opset=17) -> bytes:
    nodes = [
        helper.make_node("Unsqueeze", ["x", "u"], ["a"]),
        helper.make_node("Transpose", ["a"], ["b"], perm=perm),
        helper.make_node("Squeeze", ["b", "s"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inits = [("u", np.array([0])), ("s", np.array(squeeze_axes))]
    return _model(nodes, ["S", "N", 3, 8], inits, opset)


@pytest.mark.parametrize(
    "perm, squeeze, expect",
    [
        ([3, 1, 2, 0, 4], [3], ["Transpose", "Relu"]),  # PyTorch's q/k/v split
        ([0, 1, 2, 3, 4], [-5], ["Relu"]),  # (the identity: no node left)
        ([1, 0, 2, 3, 4], [1], ["Relu"]),
        ([1, 2, 0, 3, 4], [1], None),  # squeezes another axis (of size 1): stays
    ],
)
def test_unsqueeze_transpose_squeeze_becomes_one_transpose(perm, squeeze, expect):
    x = np.random.default_rng(1).standard_normal((5, 1, 3, 8)).astype(np.float32)
    ops = _check(_unsqueeze_transpose_squeeze(perm, squeeze), x)
    if expect is None:
        assert "Unsqueeze" in ops and "Squeeze" in ops
    else:
        assert ops == expect
