"""Bit-level parity with onnxruntime where the spec leaves summation / rounding order open.

AveragePool window sums, GlobalAveragePool's row sums, 2-D bilinear Resize, and the com.microsoft quantized element-wise and
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


@pytest.mark.parametrize("data", ["random", "wide"])
@pytest.mark.parametrize(
    "shape", [(2, 3, 13, 11), (1, 96, 7, 7), (2, 5, 3), (1, 4, 3, 5, 6), (2, 64, 32, 33)]
)
def test_global_average_pool(shape, data):
    rng = np.random.default_rng(0)
    x = _wide_range(rng, shape) if data == "wide" else _data(rng, shape, False)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    model = _model(node, [_vi("x", TensorProto.FLOAT)], [_vi("y", TensorProto.FLOAT)])
    _same(model, {"x": x})


# ----------------------------------------------------------------------------- com.microsoft QLinear*

QTYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _qdata(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _qparams(rng, dtype, name):
    zp = _qdata(rng, dtype, ()) // 2
    scale = np.float32(rng.uniform(0.002, 0.2))
    return [
        helper.make_tensor(f"{name}_s", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor(f"{name}_z", QTYPES[dtype], [], [int(zp)]),
    ]


def _q_node_model(op, dtype, operands, out_shape, scales=None, **attrs):
    """op(operand, scale, zero point, ..., y scale, y zero point), all parameters initializers.

    scales: {name: scale} overrides, e.g. ratios of 1/2 that put many results on exact ties.
    """
    rng = np.random.default_rng(1)
    inits, names, inputs = [], [], []
    for name in operands:
        inits += _qparams(rng, dtype, name)
        names += [name, f"{name}_s", f"{name}_z"]
        inputs.append(_vi(name, QTYPES[dtype]))
    inits += _qparams(rng, dtype, "y")
    names += ["y_s", "y_z"]
    for t in inits:
        if scales and t.name[:-2] in scales and t.name.endswith("_s"):
            t.float_data[0] = scales[t.name[:-2]]
    node = helper.make_node(op, names, ["y"], domain=MS, **attrs)
    return _model(node, inputs, [_vi("y", QTYPES[dtype], out_shape)], inits)


TIES = {
    "random": None,
    "ties": {"a": 0.1, "b": 0.3, "x": 0.1, "y": 0.2},
    "exact_ties": {"a": 0.25, "b": 0.75, "x": 0.25, "y": 0.5},
}


@pytest.mark.parametrize("scales", list(TIES))
@pytest.mark.parametrize("dtype", list(QTYPES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op, dtype, scales):
    rng = np.random.default_rng(2)
    a, b = _qdata(rng, dtype, (4, 3, 16, 17)), _qdata(rng, dtype, (3, 1, 17))
    model = _q_node_model(op, dtype, ["a", "b"], None, TIES[scales])
    _same(model, {"a": a, "b": b})
    # every pair of values once
    grid = np.arange(256).astype(np.int64) + np.iinfo(dtype).min
    a, b = np.broadcast_arrays(grid[:, None], grid[None, :])
    _same(model, {"a": a.astype(dtype), "b": b.astype(dtype)})


@pytest.mark.parametrize("dtype", list(QTYPES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "op,attrs",
    [
        ("QLinearSigmoid", {}),
        ("QLinearLeakyRelu", {"alpha": 0.1}),
        ("QLinearGlobalAveragePool", {}),
        ("QLinearGlobalAveragePool", {"channels_last": 1}),
        ("QLinearAveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("QLinearAveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1}),
        (
            "QLinearAveragePool",
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        ("QLinearAveragePool", {"kernel_shape": [2, 2], "channels_last": 1}),
    ],
)
@pytest.mark.parametrize("scales", list(TIES))
def test_qlinear_unary(op, attrs, dtype, scales):
    rng = np.random.default_rng(3)
    x = _qdata(rng, dtype, (2, 5, 12, 13))
    _same(_q_node_model(op, dtype, ["x"], None, TIES[scales], **attrs), {"x": x})


# ----------------------------------------------------------------------------- quantized convs

CONVS = [
    dict(shape=(2, 64, 9, 9), w=(32, 64, 3, 3), pads=[1, 1, 1, 1]),  # K = 576: chunked
    dict(shape=(1, 300, 6, 6), w=(16, 300, 3, 3), strides=[2, 2]),  # K = 2700
    dict(shape=(2, 8, 7, 7), w=(8, 1, 3, 3), group=8),  # depthwise
    dict(shape=(2, 16, 5, 5), w=(12, 4, 1, 1), group=4),  # grouped 1x1
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c["w"])))
@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_quantized_conv(op, case):
    rng = np.random.default_rng(4)
    case = dict(case)
    x = rng.integers(0, 256, case.pop("shape")).astype(np.uint8)
    w = rng.integers(-128, 128, case.pop("w")).astype(np.int8)
    xz = helper.make_tensor("xz", TensorProto.UINT8, [], [3])
    wz = helper.make_tensor("wz", TensorProto.INT8, [], [-2])
    W = helper.make_tensor("w", TensorProto.INT8, w.shape, w.reshape(-1).tolist())
    if op == "ConvInteger":
        node = helper.make_node(op, ["x", "w", "xz", "wz"], ["y"], **case)
        inits, out = [W, xz, wz], TensorProto.INT32
    else:
        sc = [
            helper.make_tensor(n, TensorProto.FLOAT, [], [v])
            for n, v in [("xs", 0.02), ("ws", 0.01), ("ys", 0.5)]
        ]
        yz = helper.make_tensor("yz", TensorProto.UINT8, [], [128])
        node = helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], **case)
        inits, out = [W, xz, wz, yz, *sc], TensorProto.UINT8
    model = _model(node, [_vi("x", TensorProto.UINT8)], [_vi("y", out)], inits)
    _same(model, {"x": x})
