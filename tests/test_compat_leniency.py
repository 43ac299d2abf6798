"""onnxruntime's leniencies (docs/compatibility.md) and the quantization tool's contrib ops
(DynamicQuantizeLSTM, QLinearWhere), each against onnxruntime, and onyx.check reporting each
leniency."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

import onyx.checker
from onyx.runtime.session import InferenceSession, SessionOptions

MS = "com.microsoft"
RNG = np.random.default_rng(20)


def _model(nodes, inputs, outputs, inits=(), opset=17, ms=False):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid(MS, 1)] if ms else [])
    return h.make_model(graph, opset_imports=opsets, ir_version=9)


def _vi(name, dtype=TensorProto.FLOAT, shape=None):
    return h.make_tensor_value_info(name, dtype, shape)


def _both(model: onnx.ModelProto, feeds: dict, threads: int = 0):
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    expected = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    options = SessionOptions()
    options.intra_op_num_threads = threads
    return expected, InferenceSession(data, options).run(None, feeds)


def _rules(model: onnx.ModelProto) -> set[str]:
    return {p.rule for p in onyx.checker.problems(model.SerializeToString(), full=True)}


def _assert_close(expected, actual, atol=1e-5, rtol=1e-5):
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)


# -- leniencies ---------------------------------------------------------------------------------


def test_negative_dim_is_dynamic():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", shape=[-1, 3])],
                   [_vi("y", shape=[-1, 3])])  # fmt: skip
    feeds = {"x": RNG.normal(size=(4, 3)).astype(np.float32)}
    _assert_close(*_both(model, feeds))
    assert "negative-dim" in _rules(model)


def test_nodes_out_of_topological_order_are_sorted():
    # an fp16 converter appends its Casts at the end of the node list
    nodes = [
        h.make_node("Relu", ["t"], ["u"]),
        h.make_node("Cast", ["u"], ["y"], to=TensorProto.FLOAT16),
        h.make_node("Cast", ["x"], ["t"], to=TensorProto.FLOAT),
    ]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT16, [2, 3])],
                   [_vi("y", TensorProto.FLOAT16, [2, 3])])  # fmt: skip
    feeds = {"x": RNG.normal(size=(2, 3)).astype(np.float16)}
    _assert_close(*_both(model, feeds))
    assert "topological-order" in _rules(model)


def test_out_of_order_model_object_is_not_changed():
    nodes = [h.make_node("Relu", ["t"], ["y"]), h.make_node("Neg", ["x"], ["t"])]
    model = _model(nodes, [_vi("x", shape=[2])], [_vi("y", shape=[2])])
    ir_model = onyx.serde.loads(model.SerializeToString())
    before = [n.op_type for n in ir_model.graph.nodes]
    y = InferenceSession(ir_model).run(None, {"x": np.array([1.0, -2.0], np.float32)})[0]
    np.testing.assert_array_equal(y, [0.0, 2.0])
    assert [n.op_type for n in ir_model.graph.nodes] == before


def test_subgraph_nodes_out_of_order_are_sorted():
    branch = h.make_graph(
        [h.make_node("Neg", ["t"], ["out"]), h.make_node("Relu", ["x"], ["t"])],
        "then", [], [_vi("out", shape=[2])],
    )  # fmt: skip
    other = h.make_graph([h.make_node("Identity", ["x"], ["out2"])], "else", [],
                         [_vi("out2", shape=[2])])  # fmt: skip
    node = h.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)
    model = _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", shape=[2])], [_vi("y")])
    feeds = {"c": np.array(True), "x": np.array([1.0, -2.0], np.float32)}
    # onnxruntime sorts only the main graph (it rejects this model); onyx sorts subgraphs too
    # rather than fail inside the plan
    (y,) = InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_array_equal(y, [-1.0, 0.0])


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_rank2_signal_is_real(onesided):
    inits = [nh.from_array(np.array(4, np.int64), "step"),
             nh.from_array(np.hanning(16).astype(np.float32), "window")]  # fmt: skip
    node = h.make_node("STFT", ["x", "step", "window"], ["y"], onesided=onesided)
    model = _model([node], [_vi("x", shape=[2, 64])], [_vi("y")], inits)
    feeds = {"x": RNG.normal(size=(2, 64)).astype(np.float32)}
    _assert_close(*_both(model, feeds), atol=1e-4, rtol=1e-4)
    assert "inference" in _rules(model)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.5, 1.5), (1, 1, 3, 0.6)])
@pytest.mark.parametrize("opset", [11, 17])
def test_resize_tf_half_pixel_for_nn(mode, scales, opset):
    inits = [nh.from_array(np.array(scales, np.float32), "scales"),
             nh.from_array(np.zeros(0, np.float32), "roi")]  # fmt: skip
    node = h.make_node("Resize", ["x", "roi", "scales"], ["y"], mode=mode,
                       coordinate_transformation_mode="tf_half_pixel_for_nn")  # fmt: skip
    model = _model([node], [_vi("x", shape=[1, 2, 5, 7])], [_vi("y")], inits, opset=opset)
    feeds = {"x": RNG.normal(size=(1, 2, 5, 7)).astype(np.float32)}
    _assert_close(*_both(model, feeds))
    assert ("removed-attribute-value" in _rules(model)) == (opset >= 13)


# -- DynamicQuantizeLSTM --------------------------------------------------------------------------


def _lstm(direction, peephole, lens, hidden=16, n_in=8):
    dirs = 2 if direction == "bidirectional" else 1
    inits = [nh.from_array(RNG.normal(0, 0.4, (dirs, 4 * hidden, n_in)).astype(np.float32), "W"),
             nh.from_array(RNG.normal(0, 0.4, (dirs, 4 * hidden, hidden)).astype(np.float32), "R"),
             nh.from_array(RNG.normal(0, 0.2, (dirs, 8 * hidden)).astype(np.float32), "B")]  # fmt: skip
    names = ["x", "W", "R", "B", "lens" if lens else "", "", ""]
    if peephole:
        inits.append(nh.from_array(RNG.normal(0, 0.2, (dirs, 3 * hidden)).astype(np.float32), "P"))
        names.append("P")
    inputs = [_vi("x", shape=[5, 3, n_in])] + (
        [_vi("lens", TensorProto.INT32, [3])] if lens else []
    )
    node = h.make_node("LSTM", names, ["y", "y_h", "y_c"], hidden_size=hidden, direction=direction)
    return _model([node], inputs, [_vi("y"), _vi("y_h"), _vi("y_c")], inits)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize(
    "direction, peephole, lens",
    [("forward", False, False), ("bidirectional", False, False), ("reverse", True, False),
     ("forward", False, True), ("bidirectional", True, True)],
)  # fmt: skip
def test_dynamic_quantize_lstm(tmp_path, direction, peephole, lens, per_channel):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(_lstm(direction, peephole, lens), tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8,
                     per_channel=per_channel)  # fmt: skip
    model = onnx.load(tmp_path / "q.onnx")
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    feeds = {"x": RNG.normal(size=(5, 3, 8)).astype(np.float32)}
    if lens:
        feeds["lens"] = np.array([5, 2, 4], np.int32)
    for threads in (1, 2):
        expected, actual = _both(model, feeds, threads)
        # the same states quantized together as onnxruntime: float rounding only; with
        # sequence_lens, within the drift of a quantization step
        _assert_close(expected, actual, atol=1e-2 if lens else 1e-6, rtol=0)


# -- QLinearWhere ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("same_params", [False, True])
def test_qlinear_where(dtype, same_params):
    info = np.iinfo(dtype)
    zp = np.array(3 if dtype == np.uint8 else -2, dtype)
    params = {"xs": 0.05, "ys": 0.02, "zs": 0.03} if not same_params else dict.fromkeys(
        ("xs", "ys", "zs"), 0.04)  # fmt: skip
    inits = [nh.from_array(np.array(v, np.float32), k) for k, v in params.items()]
    inits += [nh.from_array(zp, k) for k in ("xz", "yz", "zz")]
    node = h.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], ["z"],
                       domain=MS)  # fmt: skip
    qtype = h.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [_vi("c", TensorProto.BOOL, [3, 4]), _vi("x", qtype, [3, 4]), _vi("y", qtype, [4])]
    model = _model([node], inputs, [_vi("z", qtype)], inits, ms=True)
    feeds = {
        "c": RNG.random((3, 4)) < 0.5,
        "x": RNG.integers(info.min, info.max + 1, (3, 4)).astype(dtype),
        "y": RNG.integers(info.min, info.max + 1, (4,)).astype(dtype),
    }
    expected, actual = _both(model, feeds)
    np.testing.assert_array_equal(actual[0], expected[0])
    assert actual[0].dtype == expected[0].dtype


# -- found by the zoo's probes --------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 1, 3)])
def test_cast_numbers_to_strings_any_rank(shape):
    values = np.array([np.nan, np.inf, -np.inf, 1e20, -0.0, 1e-7, 123456789.0, 1 / 7, 2.5])
    x = values[: int(np.prod(shape))].reshape(shape).astype(np.float32)
    node = h.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)
    model = _model([node], [_vi("x", shape=list(shape))], [_vi("y", TensorProto.STRING)])
    expected, actual = _both(model, {"x": x})
    assert actual[0].shape == expected[0].shape
    np.testing.assert_array_equal(actual[0], expected[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64, np.int32, np.int64])
def test_reduce_log_sum_exp_integers(dtype):
    x = RNG.integers(0, 50, (2, 3, 4)).astype(dtype)
    qtype = h.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [nh.from_array(np.array([0, 2], np.int64), "axes")]
    node = h.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=1)
    model = _model([node], [_vi("x", qtype, [2, 3, 4])], [_vi("y", qtype)], inits, opset=18)
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        pytest.skip("onnxruntime has no kernel for this type")
    expected, actual = _both(model, {"x": x})
    np.testing.assert_array_equal(actual[0], expected[0])
