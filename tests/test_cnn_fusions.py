"""The classic-CNN fusions (optimizer/cnn.py) and the pooling fast paths the light models take
(issue 23): against onnxruntime, bit for bit against the unfused onyx run, numpy path too."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels.activation import hard_sigmoid_mul
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


def agrees_with_onnxruntime(m: bytes, feeds: dict, got: np.ndarray, tol: float) -> None:
    """``got``, onyx's output of the model ``m``, is onnxruntime's within ``tol``, and so is
    onnxruntime's run of onyx's saved optimized model, which onnx's full check takes (the
    fused ops' model-local function bodies)."""
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    saved = onyx.dumps(onyx.optimize(onyx.loads(m)))
    onnx.checker.check_model(onnx.load_from_string(saved), full_check=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    again = ort.InferenceSession(saved, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(again[0], want, rtol=tol, atol=tol)


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
    if opset >= 14:  # (as PyTorch's TorchScript exporter writes every BN)
        nodes[1].attribute.append(helper.make_attribute("training_mode", 0))
    x2 = RNG.standard_normal((shape[0], c - c // 2) + shape[2:]).astype(np.float32)
    m = _model(nodes, half, [("x2", x2), *_bn_params(c)], opset)
    assert "BatchNormRelu" in _ops(m) and "Relu" not in _ops(m)
    feeds = {"x": RNG.standard_normal(half).astype(np.float32)}
    feeds["x"].reshape(-1)[:2] = [np.nan, -0.0]
    got = _run(m, feeds)
    apart = _run(m, feeds, ["BatchNormReluFusion"])
    np.testing.assert_array_equal(got.view(np.uint32), apart.view(np.uint32))
    agrees_with_onnxruntime(m, feeds, got, 1e-5)


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


def _hard_swish_nodes(alpha, beta, swapped=False):
    """PyTorch's hardswish export: x * HardSigmoid(x)."""
    hs = helper.make_node("HardSigmoid", ["x"], ["h"], alpha=alpha, beta=beta)
    return [hs, helper.make_node("Mul", ["h", "x"] if swapped else ["x", "h"], ["y"])]


def _special_values(x: np.ndarray) -> np.ndarray:
    """x with NaN, infinities, zeros of both signs and the clamp's corners in it."""
    flat = x.reshape(-1)
    flat[:9] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3.0, -3.0, 1e38, -1e38]
    return x


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize(
    "shape,alpha,beta,swapped",
    [
        ((1, 16, 40, 40), 1 / 6, 0.5, False),  # (native: 1024 elements and more)
        ((1, 16, 40, 40), 0.2, 0.3, True),
        ((2, 7, 5, 3), -0.7, 0.25, False),  # (small: numpy's steps)
        ((3, 1100), 2.5, -0.125, True),
    ],
)
def test_hard_sigmoid_mul_fusion_same_bits(monkeypatch, shape, alpha, beta, swapped, numpy_path):
    """x * HardSigmoid(x) becomes ai.onyx HardSigmoidMul: the unfused pair's bits (NaN and
    infinities included, native and numpy), onnxruntime's values, and the saved model (a
    model-local function) runs in onnxruntime."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    m = _model(_hard_swish_nodes(alpha, beta, swapped), shape, [], 13)
    assert _ops(m) == ["HardSigmoidMul"]
    feeds = {"x": _special_values(RNG.standard_normal(shape).astype(np.float32) * 4)}
    got = _run(m, feeds)
    apart = _run(m, feeds, ["HardSigmoidMulFusion"])
    np.testing.assert_array_equal(got.view(np.uint32), apart.view(np.uint32))
    agrees_with_onnxruntime(m, feeds, got, 1e-6)


def test_hard_sigmoid_mul_fusion_leaves_other_pairs():
    """A HardSigmoid read elsewhere too, a Mul by another tensor, or a float16 pair stays."""
    shared = [
        helper.make_node("HardSigmoid", ["x"], ["h"]),
        helper.make_node("Mul", ["x", "h"], ["m"]),
        helper.make_node("Add", ["m", "h"], ["y"]),
    ]
    assert "HardSigmoidMul" not in _ops(_model(shared, (1, 4, 5, 5), [], 13))
    other = [
        helper.make_node("HardSigmoid", ["x"], ["h"]),
        helper.make_node("Mul", ["h", "w"], ["y"]),
    ]
    w = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    assert _ops(_model(other, (1, 4, 5, 5), [("w", w)], 13)) == ["HardSigmoid", "Mul"]
    half = helper.make_graph(
        _hard_swish_nodes(0.2, 0.5), "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
    )  # fmt: skip
    m = helper.make_model(half, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    assert "HardSigmoidMul" not in _ops(m)


@pytest.mark.parametrize("env", [{"ONYX_NATIVE_ISA": "avx2"}, {"ONYX_NATIVE": "0"}])
def test_hard_sigmoid_mul_in_other_processes(env):
    """The kernel at AVX2 and without the library gives this process's bits."""
    code = (
        "import sys, numpy as np\n"
        "from onyx.runtime.kernels.activation import hard_sigmoid_mul\n"
        "x = np.random.default_rng(3).standard_normal(5000).astype(np.float32) * 5\n"
        "x[:4] = [np.nan, np.inf, -np.inf, -0.0]\n"
        "y = hard_sigmoid_mul(x, alpha=0.1666666716337204, beta=0.5)\n"
        "sys.stdout.buffer.write(np.ascontiguousarray(y).tobytes())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    got = np.frombuffer(done.stdout, np.float32)
    x = np.random.default_rng(3).standard_normal(5000).astype(np.float32) * 5
    x[:4] = [np.nan, np.inf, -np.inf, -0.0]
    want = hard_sigmoid_mul(x, alpha=0.1666666716337204, beta=0.5)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(want[[0, 2]]).all() and want[1] == np.inf and np.signbit(want[3])


@pytest.mark.parametrize("numpy_path", [False, True])
def test_hard_sigmoid_mul_joins_a_channels_last_chain(monkeypatch, numpy_path):
    """A float MobileNetV3 block's hardswish as HardSigmoidMul stays inside the channels-last
    chain (no Transpose around it), with onnxruntime's values."""
    from onyx.optimizer import layout

    monkeypatch.setattr(layout, "_worthwhile", lambda: True)
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    w1 = RNG.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3
    dw = RNG.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3
    w2 = RNG.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"]),
        helper.make_node("Conv", ["c", "dw"], ["d"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("HardSigmoid", ["d"], ["h"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["d", "h"], ["m"]),
        helper.make_node("Conv", ["m", "w2"], ["y"]),
    ]
    m = _model(nodes, (1, 8, 12, 10), [("w1", w1), ("dw", dw), ("w2", w2)], 14)
    ops = _ops(m)
    assert ops.count("HardSigmoidMul") == 1 and "Conv" not in ops and ops.count("Transpose") == 2, (
        ops
    )
    x = RNG.standard_normal((1, 8, 12, 10)).astype(np.float32)
    got = _run(m, {"x": x})
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_resnet_exports_optimize_alike():
    """The TorchScript and dynamo exports of one pre-activation ResNet (tests/models) reach the
    same convs, BatchNormRelus and residual Adds after optimization: the TorchScript export's
    BNs carry training_mode=0, which once kept its BN -> Relu pairs unfused. Only the heads
    differ (GlobalAveragePool + Flatten against ReduceMean + Reshape)."""
    folder = os.path.join(os.path.dirname(__file__), "models")
    head = {"GlobalAveragePool", "Flatten", "ReduceMean", "Reshape"}
    counts = []
    for name in ("resnet_torchscript_op17", "resnet_dynamo_op18"):
        model = onyx.optimize(onyx.load(os.path.join(folder, name + ".onnx")))
        ops = [n.op_type for n in model.graph if n.op_type not in head]
        assert "BatchNormalization" not in ops and "Relu" not in ops, (name, ops)
        counts.append(sorted(ops))
    assert counts[0] == counts[1]


def _fire(x_shape, squeeze, expand, hw_pads=1, second="Relu"):
    """A SqueezeNet fire module: a 1x1 squeeze conv, then a 1x1 and a 3x3 expand conv of its
    output, each followed by ``second`` (Relu), concatenated on the channels."""
    c = x_shape[1]
    inits = [
        ("ws", RNG.standard_normal((squeeze, c, 1, 1)).astype(np.float32) * 0.3),
        ("bs", RNG.standard_normal(squeeze).astype(np.float32)),
        ("w1", RNG.standard_normal((expand, squeeze, 1, 1)).astype(np.float32) * 0.3),
        ("b1", RNG.standard_normal(expand).astype(np.float32)),
        ("w3", RNG.standard_normal((expand + 8, squeeze, 3, 3)).astype(np.float32) * 0.1),
        ("b3", RNG.standard_normal(expand + 8).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["s"]),
        helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"]),
        helper.make_node(second, ["e1"], ["e1r"]),
        helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], pads=[hw_pads] * 4),
        helper.make_node(second, ["e3"], ["e3r"]),
        helper.make_node("Concat", ["e1r", "e3r"], ["y"], axis=1),
    ]
    return _model(nodes, x_shape, inits, 13)


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize(
    "x_shape,squeeze,expand",
    [((1, 64, 55, 55), 16, 64), ((1, 128, 27, 27), 32, 128), ((1, 24, 13, 13), 48, 192),
     ((2, 16, 9, 11), 8, 16), ((1, 8, 5, 7), 4, 8)],
)  # fmt: skip
def test_conv_concat_fusion_same_bits(monkeypatch, x_shape, squeeze, expand, numpy_path):
    """SqueezeNet's fire module: the expand convs and their Concat become ai.onyx ConvConcat
    (each conv writing its channels of the output at batch 1), the unfused graph's bits
    (native and numpy), onnxruntime's values, and the saved model (a model-local function)
    runs in onnxruntime."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    m = _fire(x_shape, squeeze, expand)
    ops = _ops(m)
    assert "ConvConcat" in ops and "Concat" not in ops and ops.count("FusedConv") == 1
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    got = _run(m, feeds)
    apart = _run(m, feeds, ["ConvConcatFusion"])
    assert got.shape == (x_shape[0], 2 * expand + 8, *x_shape[2:])
    np.testing.assert_array_equal(got.view(np.uint32), apart.view(np.uint32))
    agrees_with_onnxruntime(m, feeds, got, 1e-4)


def test_conv_concat_fusion_leaves_other_concats():
    """Expand convs without an activation, of other output sizes, or whose output something
    else reads stay a Concat."""
    assert "ConvConcat" not in _ops(_fire((1, 8, 9, 9), 4, 8, second="Identity"))
    assert "ConvConcat" not in _ops(_fire((1, 8, 9, 9), 4, 8, hw_pads=0))  # (7x7 and 9x9)
    shared = onnx.load_from_string(_fire((1, 8, 9, 9), 4, 8))
    shared.graph.output.append(helper.make_tensor_value_info("e1r", F, None))
    assert "ConvConcat" not in _ops(shared.SerializeToString())


@pytest.mark.skipif(not native.avx512(), reason="the native convs run on AVX-512")
@pytest.mark.parametrize(
    "x_shape,m,k",
    [((1, 64, 55, 55), 16, 1), ((1, 16, 55, 55), 64, 3), ((1, 32, 27, 27), 128, 1),
     ((1, 64, 13, 13), 256, 3)],
)  # fmt: skip
def test_native_convs_write_into_a_given_output(x_shape, m, k):
    """The conv set-ups ConvConcat runs (conv_f32.c's, winograd.c's, small_cnn.c's) write into
    a channel range of a larger output what they return fresh, and refuse an output of
    another shape, type or layout."""
    from onyx.errors import OnyxError
    from onyx.runtime.kernels.conv import float_conv_runner

    w = RNG.standard_normal((m, x_shape[1], k, k)).astype(np.float32) * 0.1
    b = RNG.standard_normal(m).astype(np.float32)
    attrs = dict(group=1, auto_pad="NOTSET", pads=[k // 2] * 4, strides=[1, 1],
                 dilations=[1, 1], kernel_shape=[k, k])  # fmt: skip
    run = float_conv_runner(x_shape, w, attrs, native.CONV_ACTIVATIONS["Relu"], 0.0, 0.0)
    assert run.writes_out
    x = RNG.standard_normal(x_shape).astype(np.float32)
    fresh = run(x, b, None)
    y = np.full((1, m + 5, *x_shape[2:]), np.nan, np.float32)
    assert run(x, b, None, out=y[:, 3 : 3 + m]) is not None
    np.testing.assert_array_equal(y[:, 3 : 3 + m], fresh)
    assert np.isnan(y[:, :3]).all() and np.isnan(y[:, 3 + m :]).all()
    for bad in (y[:, 2 : 3 + m], y[:, 3 : 3 + m].astype(np.float64), y[..., :-1]):
        with pytest.raises(OnyxError, match="output of shape"):
            run(x, b, None, out=bad)
    y.flags.writeable = False
    with pytest.raises(OnyxError, match="output of shape"):
        run(x, b, None, out=y[:, 3 : 3 + m])


@pytest.mark.skipif(not native.avx512(), reason="the native convs run on AVX-512")
def test_fire_module_convs_bind_with_biases_listed_as_inputs():
    """An IR 3 model lists initializers as graph inputs (onnx's light SqueezeNet, its biases;
    its weights are made by ConstantOfShape): the plan holds them as values a caller may feed, and FusedConv's and ConvConcat's bound
    calls read them per call, so every conv step still binds (they ran unbound, the kernel's
    look-ups and checks every call)."""
    from onyx.runtime.plan import BoundCall

    m = onnx.load_from_string(_fire((1, 16, 15, 15), 8, 16))
    m.ir_version = 3
    m.graph.input.extend(
        helper.make_tensor_value_info(t.name, F, list(t.dims))
        for t in m.graph.initializer
        if t.name.startswith("b")
    )
    s = onyx.InferenceSession(m.SerializeToString())
    feeds = {"x": RNG.standard_normal((1, 16, 15, 15)).astype(np.float32)}
    got = s.run(None, feeds)[0]
    plan = s._plan  # noqa: SLF001  (its steps: bound or not)
    steps = [st.fn for st in plan.steps if isinstance(st.fn, BoundCall)]
    assert len(steps) == 2 and all(st.make is not None for st in steps)
    assert all(None not in st.calls.values() and st.calls for st in steps)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, want.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("width", [27, 33, 34, 35, 55, 65, 111])
def test_max_pool_3x3_stride_2_row_ends(monkeypatch, width):
    """window.c's 3x3 stride-2 max (SqueezeNet's down steps) at widths whose last block of
    16 outputs is whole (33, 34, 65: the window's third column block is read) or partial (it
    is not): the numpy kernel's values, with and without a NaN in the plane."""
    x = RNG.standard_normal((1, 3, 9, width)).astype(np.float32)
    x[0, 1, 4, width - 1] = np.nan
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    m = _model([node], x.shape, [], 9)
    got = onyx.InferenceSession(m).run(None, {"x": x})[0]
    monkeypatch.setattr(_core, "lib", None)
    np.testing.assert_array_equal(got, onyx.InferenceSession(m).run(None, {"x": x})[0])
