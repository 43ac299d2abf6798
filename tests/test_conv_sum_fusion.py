"""Residual blocks written Conv -> Sum(conv, shortcut) -> Relu (Caffe2's exports, onnx's light
ShuffleNet) fuse into FusedConv(X, W, B, Z) as Conv -> Add -> Relu does, with the same bits;
and inference keeps the dims an IR < 4 model's initializers give (they are constants there,
although every one is also listed as a graph input), which the fusion's shape check needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _w(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _residual_model(shape, group, kernel, sum_inputs=("c", "z"), ir_version=8) -> bytes:
    n, c, h, w = shape
    pad = kernel // 2
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], group=group, pads=[pad] * 4),
        helper.make_node("Sum", list(sum_inputs), ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(_w(c, c // group, kernel, kernel), "W"),
        numpy_helper.from_array(_w(c), "B"),
    ]
    inputs = [helper.make_tensor_value_info(v, F, list(shape)) for v in ("x", "z")]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    graph = helper.make_graph(nodes, "residual", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model.SerializeToString()


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph]


@pytest.mark.parametrize("numpy_only", [False, True])
@pytest.mark.parametrize(
    "shape,group,kernel",
    [((1, 16, 9, 9), 4, 1), ((2, 40, 9, 7), 1, 3), ((1, 8, 5, 5), 8, 3)],
    ids=["group-1x1", "dense-3x3", "depthwise-3x3"],
)
def test_conv_sum_relu_fuses_with_the_same_bits(shape, group, kernel, numpy_only, monkeypatch):
    if numpy_only:
        monkeypatch.setattr(native._core, "lib", None)  # noqa: SLF001 (the numpy kernels)
    m = _residual_model(shape, group, kernel)
    fused = onyx.optimize(onyx.loads(m))
    assert _ops(fused) == ["FusedConv"]
    assert [v.name for v in fused.graph.nodes[0].inputs][-1] == "z"
    feeds = {"x": _w(*shape, scale=2), "z": _w(*shape, scale=2)}
    off = onyx.SessionOptions()
    off.disabled_optimizers = ["ConvActivationFusion"]
    apart = onyx.InferenceSession(m, off).run(None, feeds)[0]
    got = onyx.InferenceSession(m).run(None, feeds)[0]
    np.testing.assert_array_equal(got, apart)
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_shortcut_first_in_the_sum_fuses_too():
    m = _residual_model((1, 8, 6, 6), 2, 1, sum_inputs=("z", "c"))
    assert _ops(onyx.optimize(onyx.loads(m))) == ["FusedConv"]


def test_a_three_input_sum_is_not_fused():
    m = _residual_model((1, 8, 6, 6), 2, 1, sum_inputs=("c", "z", "z"))
    ops = _ops(onyx.optimize(onyx.loads(m)))
    assert "Sum" in ops and "Conv" in ops and "FusedConv" not in ops


def test_a_broadcast_shortcut_is_not_fused():
    """Z of (1, C, 1, 1) would broadcast: FusedConv's Z is the output's shape."""
    n, c, h, w = 1, 8, 6, 6
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"]),
        helper.make_node("Sum", ["c", "z"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", F, [n, c, h, w]),
        helper.make_tensor_value_info("z", F, [1, c, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(_w(c, c, 1, 1), "W")],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ops = _ops(onyx.optimize(onyx.loads(m.SerializeToString())))
    assert "Sum" in ops and "FusedConv" not in ops


# ------------------------------------------------------------- inference: IR < 4 initializers


def _shuffle_model(ir_version: int) -> bytes:
    """A channel shuffle: Reshape -> Transpose -> Reshape to initializer shapes that are also
    graph inputs (as IR 3 required)."""
    nodes = [
        helper.make_node("Reshape", ["x", "s5"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "s4"], ["y"]),
    ]
    s5, s4 = np.array([1, 4, 2, 3, 3], np.int64), np.array([1, 8, 3, 3], np.int64)
    inputs = [
        helper.make_tensor_value_info("x", F, [1, 8, 3, 3]),
        helper.make_tensor_value_info("s5", TensorProto.INT64, [5]),
        helper.make_tensor_value_info("s4", TensorProto.INT64, [4]),
    ]
    graph = helper.make_graph(
        nodes, "shuffle", inputs, [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(s5, "s5"), numpy_helper.from_array(s4, "s4")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = ir_version
    return model.SerializeToString()


def _dims(model, name: str) -> tuple:
    value = next(v for v in model.graph.values() if v.name == name)
    return tuple(value.type.shape.dims)


def test_ir3_initializer_inputs_are_constants_to_inference():
    m = onyx.infer_shapes(onyx.loads(_shuffle_model(3)))
    assert _dims(m, "r") == (1, 4, 2, 3, 3)
    assert _dims(m, "t") == (1, 2, 4, 3, 3)
    assert _dims(m, "y") == (1, 8, 3, 3)


def test_ir4_initializer_inputs_stay_overridable_to_inference():
    """From IR 4 an initializer listed as an input is a default the caller may replace: its
    data says nothing certain about the shape."""
    m = onyx.infer_shapes(onyx.loads(_shuffle_model(8)))
    for name, rank in (("r", 5), ("y", 4)):
        dims = _dims(m, name)
        assert len(dims) == rank and all(isinstance(d, str) for d in dims)


@pytest.mark.skipif(not (LIGHT / "light_shufflenet.onnx").exists(), reason="onnx's light data")
def test_light_shufflenet_residual_sums_fuse():
    model = onyx.optimize(onyx.load(str(LIGHT / "light_shufflenet.onnx")))
    ops = _ops(model)
    assert "Sum" not in ops
    # (the stem's FusedConv + Relu and its MaxPool: one FusedConvMaxPool, tests/test_stem_pool.py)
    assert ops.count("FusedConv") + ops.count("FusedConvMaxPool") == 30
