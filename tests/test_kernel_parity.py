"""Bit-level parity with onnxruntime where the spec leaves summation / rounding order open.

AveragePool window sums, 2-D bilinear Resize, and the com.microsoft quantized element-wise and
pooling ops are compared bit for bit against onnxruntime on small models; the quantized convs
(ConvInteger, QLinearConv) likewise, since their fast float paths must stay exact.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper

MS = "com.microsoft"


def _model(node, inputs, outputs, inits=(), opset=19):
    graph = helper.make_graph([node], "parity", inputs, outputs, initializer=list(inits))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    )
    model.ir_version = 10
    return model


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _same(model, feeds):
    want = _ort(model, feeds)
    got = run_onnx(model, feeds)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


def _vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _data(rng, shape, grid):
    if grid:  # exact multiples of a quantization scale, as after a QDQ pair
        return (rng.integers(-128, 128, shape) * np.float32(0.0173)).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- AveragePool

POOLS = [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 2], strides=[1, 2]),
    dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2], ceil_mode=1),
    dict(kernel_shape=[7, 7], strides=[1, 1]),
    dict(kernel_shape=[2, 4], strides=[2, 1], pads=[0, 1, 1, 2]),
    dict(kernel_shape=[3, 3], strides=[1, 3]),
    dict(kernel_shape=[3, 3], strides=[4, 2], auto_pad="SAME_UPPER"),
]


POOLS_3D = [
    dict(kernel_shape=[2, 3, 2], strides=[2, 3, 2]),
    dict(kernel_shape=[3, 3, 3], strides=[1, 2, 1], pads=[1, 0, 1, 1, 2, 0]),
    dict(kernel_shape=[2, 2, 3], strides=[1, 1, 3]),
]


def _wide_range(rng, shape):
    """Magnitudes over many octaves, so that any change of summation order shows."""
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape))).astype(np.float32)


@pytest.mark.parametrize("opset", [11, 17, 19, 22])  # MLAS kernel before 19, generic after
@pytest.mark.parametrize("data", ["random", "grid", "wide"])
@pytest.mark.parametrize(
    "attrs", POOLS + POOLS_3D, ids=lambda a: "x".join(map(str, a["kernel_shape"]))
)
def test_average_pool(attrs, data, opset):
    rng = np.random.default_rng(0)
    shape = (2, 3, 13, 11) if len(attrs["kernel_shape"]) == 2 else (1, 2, 7, 9, 8)
    x = _wide_range(rng, shape) if data == "wide" else _data(rng, shape, data == "grid")
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    model = _model(node, [_vi("x", TensorProto.FLOAT)], [_vi("y", TensorProto.FLOAT)], opset=opset)
    _same(model, {"x": x})
