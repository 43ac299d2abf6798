"""The fast paths of LeakyRelu, Sigmoid and InstanceNormalization (U-Net shapes and odd ones)
against the formulas they replace, bit for bit, and against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onyx.runtime.kernels import fused
from onyx.runtime.kernels.activation import leaky_relu, sigmoid
from onyx.runtime.kernels.normalization import instance_normalization
from onyx.runtime.kernels.sigmoids import SMALL_SIGMOID, sigmoid_into

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-30, 88.7, -88.7, -104.0]
SHAPES = [(), (1,), (7,), (3, 5, 33), (2, 4, 17, 9)]


def _inputs(shape, dtype, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * 40).astype(dtype)
    flat = x.reshape(-1)
    k = min(flat.size, len(SPECIAL))
    flat[:k] = SPECIAL[:k]
    return x


def _same(a, b):
    """Equal bits up to the NaN payload: values, NaN positions and signs of zeros."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a, b, equal_nan=True)
    assert np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0]))


def _onnxruntime(node, feeds, inits=()):
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()
    ]
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.5, 1.0, 1.5, 3.0, 0.0, -0.2, -2.0])
@pytest.mark.parametrize("shape", SHAPES)
def test_leaky_relu_matches_the_select(dtype, alpha, shape):
    x = _inputs(shape, dtype)
    u = x.astype(np.float32) if dtype == np.float16 else x
    with np.errstate(invalid="ignore"):
        expected = np.asarray(np.where(u >= 0, u, alpha * u)).astype(dtype)
        _same(leaky_relu(x, alpha=alpha), expected)


@pytest.mark.parametrize("alpha", [0.1, 0.01, 2.5])
def test_leaky_relu_matches_onnxruntime(alpha):
    x = _inputs((8, 64, 6, 7), np.float32)
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    _same(leaky_relu(x, alpha=alpha), _onnxruntime(node, {"x": x}))


def _sigmoid_reference(x):
    e = np.negative(x)
    with np.errstate(over="ignore"):
        e = np.exp(e)
    return np.reciprocal(e + 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [*SHAPES, (3, 100_003)])
def test_sigmoid_matches_negative_exp_reciprocal(dtype, shape):
    x = _inputs(shape, dtype, seed=1)
    _same(sigmoid(x), np.asarray(_sigmoid_reference(x)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("size", [1, 7, SMALL_SIGMOID, SMALL_SIGMOID + 1])
def test_small_sigmoid_is_the_passes_in_place(dtype, size):
    """A few elements' sigmoid on fresh arrays (sigmoid_into without ``out``, FusedGemm's
    activation of a small product) has the in-place passes' bits, overflow included."""
    x = _inputs((1, size), dtype, seed=3)
    with np.errstate(all="ignore"):
        in_place = sigmoid_into(x, x.copy())
        _same(sigmoid_into(x), in_place)
        _same(fused.ACTIVATIONS["Sigmoid"](x.copy(), None, None, None), in_place)


def test_sigmoid_matches_onnxruntime():
    x = _inputs((8, 32, 13, 16), np.float32, seed=2)
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    # (onnxruntime's approximation differs in the last bits, also below 1e-7 near 0)
    np.testing.assert_allclose(sigmoid(x), _onnxruntime(node, {"x": x}), rtol=1e-6, atol=1e-6)


def _instance_norm_reference(x, scale, bias, epsilon):
    """In float64: the exact statistics of the float32 data."""
    d = x.astype(np.float64)
    axes = tuple(range(2, x.ndim))
    d = d - d.mean(axis=axes, keepdims=True)
    d /= np.sqrt((d * d).mean(axis=axes, keepdims=True) + epsilon)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return d * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize(
    "shape", [(2, 4, 4099), (2, 4, 131072), (3, 64, 17, 19), (1, 1, 1), (8, 3, 5, 5)]
)
@pytest.mark.parametrize("zero_bias", [True, False])
def test_instance_normalization(shape, zero_bias):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)
    channels = shape[1]
    scale = rng.standard_normal(channels).astype(np.float32)
    bias = np.zeros(channels, np.float32)
    if not zero_bias:
        bias = rng.standard_normal(channels).astype(np.float32)
    y = instance_normalization(x, scale, bias, epsilon=1e-5)
    assert y.dtype == np.float32 and y.shape == x.shape
    reference = _instance_norm_reference(x, scale, bias, 1e-5)
    np.testing.assert_allclose(y, reference, rtol=1e-5, atol=2e-6)
    if x[0, 0].size == 1:
        return  # (onnxruntime's variance of one element is not 0: E[x^2] - E[x]^2 cancels)
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    inits = [
        helper.make_tensor("s", TensorProto.FLOAT, [channels], scale),
        helper.make_tensor("b", TensorProto.FLOAT, [channels], bias),
    ]
    np.testing.assert_allclose(y, _onnxruntime(node, {"x": x}, inits), rtol=1e-5, atol=1e-5)
