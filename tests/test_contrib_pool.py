"""com.microsoft QLinearAveragePool / QLinearGlobalAveragePool against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper


def _model(op_type, x, attrs, zero_points=True, zp=(7, 5)):
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    names = ["x", "x_scale", "x_zero_point", "y_scale", "y_zero_point"]
    if not zero_points:
        names = ["x", "x_scale", "", "y_scale", ""]
    node = helper.make_node(op_type, names, ["y"], domain="com.microsoft", **attrs)
    inits = [
        helper.make_tensor("x_scale", TensorProto.FLOAT, [], [0.037]),
        helper.make_tensor("y_scale", TensorProto.FLOAT, [], [0.021]),
    ]
    if zero_points:
        inits += [
            helper.make_tensor("x_zero_point", elem, [], [zp[0]]),
            helper.make_tensor("y_zero_point", elem, [], [-zp[1] if x.dtype == np.int8 else zp[1]]),
        ]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def _compare(model, x, oracle=None):
    oracle = oracle or model
    sess = ort.InferenceSession(oracle.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = sess.run(None, {"x": x})
    (actual,) = run_onnx(model, {"x": x})
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    # Requantization rounds a float: allow one unit where ORT's integer path rounds differently.
    diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1
    assert (diff > 0).mean() < 0.02


def _input(dtype, shape, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3]),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1),
        dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
        dict(kernel_shape=[3], strides=[2], pads=[1, 0]),
    ],
)
def test_qlinear_average_pool(dtype, attrs):
    shape = [2, 3, 9] if len(attrs["kernel_shape"]) == 1 else [2, 3, 9, 8]
    x = _input(dtype, shape)
    _compare(_model("QLinearAveragePool", x, attrs), x)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_average_pool_channels_last(dtype):
    x = _input(dtype, [1, 7, 6, 4], seed=1)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], channels_last=1)
    _compare(_model("QLinearAveragePool", x, attrs), x)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(dtype, channels_last):
    x = _input(dtype, [2, 5, 6, 7], seed=2)
    _compare(_model("QLinearGlobalAveragePool", x, dict(channels_last=channels_last)), x)


def test_qlinear_average_pool_default_zero_points():
    x = _input(np.uint8, [1, 2, 6, 6], seed=3)
    attrs = dict(kernel_shape=[2, 2])
    # onnxruntime rejects omitted zero points at load time: compare with explicit zeros.
    omitted = _model("QLinearAveragePool", x, attrs, zero_points=False)
    _compare(omitted, x, oracle=_model("QLinearAveragePool", x, attrs, zp=(0, 0)))
