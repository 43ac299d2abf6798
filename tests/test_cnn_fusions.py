"""The classic-CNN fusions (optimizer/cnn.py) and the pooling fast paths the light models take
(issue 23): against onnxruntime, bit for bit against the unfused onyx run, numpy path too."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.native import _core

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _model(nodes, x_shape, inits, opset):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]
    ).SerializeToString()


def _bn_params(c):
    return [
        ("s", RNG.standard_normal(c).astype(np.float32)),
        ("b", RNG.standard_normal(c).astype(np.float32)),
        ("m", RNG.standard_normal(c).astype(np.float32)),
        ("v", RNG.uniform(0.1, 2, c).astype(np.float32)),
    ]


def _ops(model_bytes) -> list[str]:
    return [n.op_type for n in onyx.optimize(onyx.loads(model_bytes)).graph]


def _run(model_bytes, feeds, disabled=()):
    so = onyx.SessionOptions()
    so.disabled_optimizers = list(disabled)
    return onyx.InferenceSession(model_bytes, so).run(None, feeds)[0]


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize("opset", [9, 15])
@pytest.mark.parametrize("shape", [(1, 24, 7, 9), (2, 5, 3, 3), (3, 4, 6)])
def test_batch_norm_relu_fusion_same_bits(monkeypatch, shape, opset, numpy_path):
    """Concat -> BatchNormalization -> Relu (DenseNet's pre-activation): the BN and Relu become
    ai.onyx BatchNormRelu, the unfused pair's bits (native and numpy), onnxruntime's values,
    and the saved model (a model-local function) runs in onnxruntime."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    c = shape[1]
    half = (shape[0], c // 2) + shape[2:]
    nodes = [
        helper.make_node("Concat", ["x", "x2"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    x2 = RNG.standard_normal((shape[0], c - c // 2) + shape[2:]).astype(np.float32)
    m = _model(nodes, half, [("x2", x2), *_bn_params(c)], opset)
    assert "BatchNormRelu" in _ops(m) and "Relu" not in _ops(m)
    feeds = {"x": RNG.standard_normal(half).astype(np.float32)}
    feeds["x"].reshape(-1)[:2] = [np.nan, -0.0]
    got = _run(m, feeds)
    apart = _run(m, feeds, ["BatchNormReluFusion"])
    np.testing.assert_array_equal(got.view(np.uint32), apart.view(np.uint32))
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    saved = onyx.dumps(onyx.optimize(onyx.loads(m)))
    onnx.checker.check_model(onnx.load_from_string(saved), full_check=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    again = ort.InferenceSession(saved, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(again[0], want, rtol=1e-5, atol=1e-5)


def test_batch_norm_relu_fusion_leaves_a_shared_or_conv_batch_norm():
    """A BN whose output something else reads stays; one after a Conv folds into the conv."""
    shared = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Add", ["r", "n"], ["y"]),
    ]
    ops = _ops(_model(shared, (1, 4, 5, 5), _bn_params(4), 13))
    assert "BatchNormRelu" not in ops and "Relu" in ops
    conv = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    w = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32)
    ops = _ops(_model(conv, (1, 4, 5, 5), [("w", w), *_bn_params(4)], 13))
    assert ops == ["FusedConv"]


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("kernel,stride,pads", [(3, 2, [0, 0, 0, 0]), (2, 2, [0, 0, 0, 0]),
                                                (3, 1, [1, 1, 1, 1]), (3, 2, [0, 0, 1, 1])])  # fmt: skip
def test_max_pool_planes_with_and_without_nan(monkeypatch, kernel, stride, pads):
    """window.c's plain vector max on planes without a NaN, the NaN-aware one on a plane with
    one: the numpy kernel's values either way (a NaN in a window pools to NaN, where
    onnxruntime's may not), and onnxruntime's on the planes without one."""
    x = RNG.standard_normal((1, 6, 19, 23)).astype(np.float32)
    x[0, 2, 5, 7] = np.nan
    x[0, 4, 0, 0] = np.nan
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[kernel] * 2,
                            strides=[stride] * 2, pads=pads)  # fmt: skip
    m = _model([node], x.shape, [], 9)
    got = onyx.InferenceSession(m).run(None, {"x": x})[0]
    other = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got[0, [0, 1, 3, 5]], other[0, [0, 1, 3, 5]])
    monkeypatch.setattr(_core, "lib", None)
    np.testing.assert_array_equal(got, onyx.InferenceSession(m).run(None, {"x": x})[0])
    assert np.isnan(got[0, 2]).any() and not np.isnan(got[0, [0, 1, 3, 5]]).any()


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("kernel,stride,pads", [(2, 2, [0, 0, 0, 0]), (2, 1, [0, 0, 0, 0]),
                                                (3, 2, [1, 1, 1, 1]), (3, 1, [1, 1, 1, 1])])  # fmt: skip
def test_average_pool_same_bits_as_numpy(monkeypatch, kernel, stride, pads):
    """window.c's average (a reciprocal's product where every count is a power of two, else
    the division) gives the numpy kernel's bits, subnormal and huge sums included."""
    x = RNG.standard_normal((2, 5, 21, 37)).astype(np.float32)
    x[0, 1] *= np.float32(1e-39)  # subnormal windows
    x[1, 2] *= np.float32(1e37)  # sums near float32's limit
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[kernel] * 2,
                            strides=[stride] * 2, pads=pads)  # fmt: skip
    m = _model([node], x.shape, [], 11)
    got = onyx.InferenceSession(m).run(None, {"x": x})[0]
    monkeypatch.setattr(_core, "lib", None)
    want = onyx.InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
