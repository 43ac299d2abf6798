"""The QDQ fusion (onyx/optimizer/qdq.py, onnxruntime's QDQSelectorActionTransformer): QDQ node
units become QLinearConv / QLinearMatMul / com.microsoft QLinear* / QGemm / integer MaxPool.

Models: small float models quantized here by onnxruntime.quantization (QuantFormat.QDQ), the
committed QDQ fixtures (tests/models/*_quant_qdq.onnx) and hand-written units the pass must
leave alone. The oracle is onnxruntime running the ORIGINAL QDQ model with its default
optimizations, which fuse the same units: onyx's optimized model must give the same outputs
(bit for bit, but where a documented onyx kernel rounds differently from onnxruntime's); the
optimized model, saved, must pass onnx's checker and run in onnxruntime to the same results.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import onyx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.zoo import zoo_models  # noqa: E402

PASS = "QDQSelectorActionTransformer"
F = TensorProto.FLOAT
RNG = np.random.default_rng(0)
QDQ_FIXTURES = {m.name: m for m in zoo_models() if m.quantization == "qdq"}


# ------------------------------------------------------------------------------------ helpers


def _ort(model: str | bytes, optimized: bool = True, **kw) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for key, value in kw.items():
        setattr(so, key, value)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _optimized(model: str | bytes) -> tuple[onyx.ir.Model, dict]:
    """The model optimized without the lookup tables, which would take in some of the fused
    ops (tests/test_optimizer_lookup.py shows they change no bit), and without the layout
    pass, which renames the convs it keeps channels-last (tests/test_nhwc_quantized.py)."""
    source = onyx.load(model) if isinstance(model, str) else onyx.loads(model)
    stats: dict = {}
    disabled = ["LookupTableFusion", "NhwcTransformer"]
    return onyx.optimize(source, stats=stats, disabled=disabled), stats


def _fused_ops(op_types) -> Counter:
    """The quantized ops among ``op_types``."""
    return Counter(op for op in op_types if op.startswith(("QLinear", "QGemm")))


def _dequantized_max_pools(model: onyx.ir.Model) -> int:
    """MaxPools still reading a DequantizeLinear (not fused onto the 8-bit tensor)."""
    pools = [n for n in model.graph if n.op_type == "MaxPool"]
    return sum(_is_output_of(n.inputs[0], "DequantizeLinear") for n in pools)


def _is_output_of(v, op_type: str) -> bool:
    return v.producer is not None and v.producer.op_type == op_type


def _saved_and_checked(optimized, tmp_path: Path) -> str:
    """``onyx.save`` the optimized model; onnx's checker accepts it. Its path."""
    path = str(tmp_path / "optimized.onnx")
    onyx.save(optimized, path)
    onnx.checker.check_model(onnx.load(path))
    return path


def _output_steps(path: str) -> dict[str, float]:
    """Graph output -> the scale of the DequantizeLinear making it (one quantization step)."""
    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    steps = {}
    for output in model.graph.output:
        node = producers.get(output.name)
        if node is not None and node.op_type == "DequantizeLinear" and node.input[1] in inits:
            steps[output.name] = float(inits[node.input[1]].reshape(-1)[0])
    return steps


def _max_steps(got: list, expected: list, names: list, steps: dict) -> float:
    """The largest difference over all outputs, in quantization steps of each output
    (rounded: a step's float32 multiples are not exact)."""
    worst = 0.0
    for name, g, e in zip(names, got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        diff = np.abs(np.asarray(g, np.float64) - e)
        worst = max(worst, float(diff.max(initial=0.0)) / steps.get(name, 1.0))
    return round(worst, 3)


class _Reader(CalibrationDataReader):
    """Calibration feeds for onnxruntime.quantization."""

    def __init__(self, feeds: list[dict]):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def _quantize(model: onnx.ModelProto, feeds: list[dict], tmp_path: Path, **options) -> str:
    """``model`` quantized to QDQ format by onnxruntime.quantization; the new model's path."""
    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, str(source))
    quantize_static(
        str(source), str(target), _Reader(feeds), quant_format=QuantFormat.QDQ, **options
    )
    return str(target)


def _check_against_onnxruntime(path: str, feeds_list: list[dict], tmp_path: Path, max_steps=0.0):
    """Optimize the QDQ model at ``path``: saved, onnxruntime runs it to the same outputs as
    the original; onyx runs it to those within ``max_steps`` quantization steps (0 where its
    kernels round as onnxruntime's); with the pass disabled onyx still runs the model (as
    written: onnxruntime without optimizations is its oracle). The optimized model."""
    optimized, stats = _optimized(path)
    saved = _saved_and_checked(optimized, tmp_path)
    reference, original = _ort(path), _ort(path, optimized=False)
    names = [o.name for o in reference.get_outputs()]
    steps = _output_steps(path)
    ours, theirs = onyx.InferenceSession(optimized), _ort(saved, optimized=False)
    disabled = onyx.SessionOptions()
    disabled.disabled_optimizers = [PASS]
    unfused = onyx.InferenceSession(path, disabled)
    for feeds in feeds_list:
        expected = reference.run(None, feeds)
        assert _max_steps(ours.run(None, feeds), expected, names, steps) <= max_steps
        assert _max_steps(theirs.run(None, feeds), expected, names, steps) == 0
        as_written = original.run(None, feeds)
        assert _max_steps(unfused.run(None, feeds), as_written, names, steps) <= 1
    assert stats.get(PASS, 0) > 0
    return optimized


# ------------------------------------------------------------------ models quantized here


def _cnn() -> onnx.ModelProto:
    """Conv+Relu, MaxPool, Conv+Relu, residual Add, 1x1 Conv, GlobalAveragePool, Flatten, Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r2", "p1"], ["s"]),
        helper.make_node("Conv", ["s", "w3", "b3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = {
        "w1": _w(8, 3, 3, 3),
        "b1": _w(8),
        "w2": _w(8, 8, 3, 3, scale=0.2),
        "b2": _w(8),
        "w3": _w(16, 8, 1, 1),
        "b3": _w(16),
        "wf": _w(10, 16),
        "bf": _w(10),
    }
    return _model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 10])], inits)


def _attention() -> onnx.ModelProto:
    """Projections, softmax(q @ k^T * c) @ v (a MatMul of two activations), output projection."""
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "c"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("MatMul", ["o", "wo"], ["o2"]),
        helper.make_node("Add", ["o2", "bo"], ["y"]),
    ]
    inits = {n: _w(8, 8) for n in ("wq", "wk", "wv", "wo")}
    inits.update(c=np.array(0.35, np.float32), bo=_w(8))
    return _model(nodes, [("x", ["N", 6, 8])], [("y", ["N", 6, 8])], inits)


def _w(*shape, scale=0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits: dict, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(shape, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize(
    "per_channel,activations",
    [(False, "uint8"), (True, "uint8"), (True, "int8")],
    ids=["per_tensor-u8", "per_channel-u8", "per_channel-s8"],
)
def test_cnn(tmp_path, per_channel, activations):
    act = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
    path = _quantize(
        _cnn(),
        _feeds((2, 3, 8, 8), 4, seed=1),
        tmp_path,
        per_channel=per_channel,
        activation_type=act,
        weight_type=QuantType.QInt8,
    )
    optimized = _check_against_onnxruntime(path, _feeds((3, 3, 8, 8), 2, seed=2), tmp_path)
    ops = [n.op_type for n in optimized.graph]
    fused = _fused_ops(ops)
    assert fused["QLinearConv"] == 3 and "Conv" not in ops, ops
    assert fused["QLinearAdd"] == fused["QLinearGlobalAveragePool"] == fused["QGemm"] == 1
    assert "MaxPool" in ops and _dequantized_max_pools(optimized) == 0
    assert "Gemm" not in ops and "Add" not in ops
    if activations == "uint8":  # (which int8 units onnxruntime fuses depends on the CPU)
        expected = _fused_ops(n.op_type for n in _ort_extended_graph(path, tmp_path).graph.node)
        assert fused == expected


@pytest.mark.parametrize(
    "per_channel",
    [False, True],
    ids=["per_tensor", "per_channel"],
)
def test_attention(tmp_path, per_channel):
    path = _quantize(
        _attention(),
        _feeds((2, 6, 8), 4, seed=3),
        tmp_path,
        per_channel=per_channel,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    # onyx's QLinearSoftmax rounds some probabilities one step away from onnxruntime's
    # (171 for 170 / 255): the attention output moves by up to 3 steps
    feeds = _feeds((3, 6, 8), 2, seed=4)
    optimized = _check_against_onnxruntime(path, feeds, tmp_path, max_steps=3)
    ops = [n.op_type for n in optimized.graph]
    fused = _fused_ops(ops)
    assert fused["QLinearMatMul"] == 6 and "MatMul" not in ops, ops  # q @ k^T and p @ v too
    assert fused["QLinearAdd"] == fused["QLinearMul"] == fused["QLinearSoftmax"] == 1
    expected = _fused_ops(n.op_type for n in _ort_extended_graph(path, tmp_path).graph.node)
    assert fused == expected


def _ort_extended_graph(path: str, tmp_path: Path) -> onnx.ModelProto:
    """The graph onnxruntime's extended level makes of the model (its QDQ fusions)."""
    target = str(tmp_path / "ort_extended.onnx")
    level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    _ort(path, graph_optimization_level=level, optimized_model_filepath=target)
    return onnx.load(target)


# -------------------------------------------------------------------------- the QDQ fixtures


class Expected(NamedTuple):
    """What a fixture gives against onnxruntime (its default optimizations, on the original)."""

    left_out: tuple[str, ...] = ()  # fused ops of onnxruntime's that this pass does not make
    max_steps: int = 0  # onyx's outputs vs onnxruntime's, in the outputs' quantization steps
    same_graph: bool = True  # onnxruntime runs our optimized graph to its own results exactly
    why: str = ""


FIXTURES = {
    "resnet_quant_qdq": Expected(),
    "mobilenet_quant_qdq": Expected(),
    "bert_quant_qdq": Expected(),
    "gpt_quant_qdq": Expected(
        ("QLinearWhere",),
        2,
        why="no QLinearWhere kernel (Where on the dequantized values gives the same); onyx's "
        "QLinearSoftmax rounds some probabilities one step off onnxruntime's (255 for 254 on "
        "a causal mask's one-hot first row), which propagates",
    ),
    "unet_quant_qdq": Expected(
        ("QLinearAveragePool",),
        6,
        same_graph=False,
        why="AveragePool left as written: QLinearAveragePool rounds window averages otherwise",
    ),
}


@pytest.mark.parametrize("name", sorted(QDQ_FIXTURES))
def test_fixture(name, tmp_path):
    """The pass fuses the units onnxruntime's extended level fuses (but those it leaves out);
    onyx's outputs are onnxruntime's (within the documented steps)."""
    model, expected = QDQ_FIXTURES[name], FIXTURES[name]
    path = str(model.path)
    optimized, stats = _optimized(path)
    ours = _fused_ops(n.op_type for n in optimized.graph)
    theirs = _fused_ops(n.op_type for n in _ort_extended_graph(path, tmp_path).graph.node)
    for op in expected.left_out:
        assert theirs.pop(op) > 0 and op not in ours
    assert ours == theirs and _dequantized_max_pools(optimized) == 0
    fused_max_pools = sum(n.op_type == "MaxPool" for n in optimized.graph)
    assert stats[PASS] == sum(ours.values()) + fused_max_pools

    saved = _saved_and_checked(optimized, tmp_path)
    reference, original = _ort(path), _ort(path, optimized=False)
    saved_in_ort = _ort(saved, optimized=False)
    session = onyx.InferenceSession(optimized)
    names = [o.name for o in reference.get_outputs()]
    steps = _output_steps(path)
    for batch in (1, 2):
        feeds = model.feeds(batch=batch, seed=batch)
        want = reference.run(None, feeds)
        got = session.run(None, feeds)
        assert _max_steps(got, want, names, steps) <= expected.max_steps
        in_ort = _max_steps(saved_in_ort.run(None, feeds), want, names, steps)
        assert in_ort == 0 or not expected.same_graph
        # and against the graph as written, test_real_models' bound for quantized models
        assert _max_steps(got, original.run(None, feeds), names, steps) <= 4


def test_fixture_with_the_pass_disabled_runs_as_written():
    model = QDQ_FIXTURES["resnet_quant_qdq"]
    options = onyx.SessionOptions()
    options.disabled_optimizers = [PASS]
    session = onyx.InferenceSession(str(model.path), options)
    feeds = model.feeds(batch=2, seed=0)
    expected = _ort(str(model.path), optimized=False).run(None, feeds)
    steps = _output_steps(str(model.path))
    assert _max_steps(session.run(None, feeds), expected, ["logits"], steps) <= 1
    optimized = onyx.optimize(onyx.load(str(model.path)), disabled=[PASS])
    ops = [n.op_type for n in optimized.graph]
    assert "Conv" in ops and not any(op.startswith("QLinear") for op in ops)


# ----------------------------------------------------------------------- hand-written units


def _qdq_conv(
    *,
    x_scale=(0.05,),
    w_zero_points=None,
    bias_scale=None,
    extra_reader=False,
    relu_zero_point=None,
    opset=17,
) -> bytes:
    """x -> Q -> DQ -> Conv(DQ(w int8 per channel), DQ(int32 bias)) -> [Relu ->] Q -> DQ -> y.

    ``x_scale`` with several values quantizes x per channel (axis 1); ``w_zero_points`` makes
    the weight uint8 with those per-channel zero points; ``bias_scale`` overrides the bias's
    (x_scale * w_scale); ``extra_reader`` adds a second reader of Conv's output;
    ``relu_zero_point`` puts a Relu before the output Q, whose zero point it sets.
    """
    channels = 4
    w_scale = np.array([0.02, 0.03, 0.01, 0.04], np.float32)
    xs = np.array(x_scale, np.float32).reshape(-1 if len(x_scale) > 1 else ())
    if w_zero_points is None:
        w = RNG.integers(-100, 100, (channels, 3, 3, 3)).astype(np.int8)
        w_zp = np.zeros(channels, np.int8)
    else:
        w = RNG.integers(0, 255, (channels, 3, 3, 3)).astype(np.uint8)
        w_zp = np.array(w_zero_points, np.uint8)
    b_scale = (np.float32(xs.reshape(-1)[0]) * w_scale) if bias_scale is None else bias_scale
    y_zp = np.uint8(128 if relu_zero_point is None else relu_zero_point)
    inits = {
        "xs": xs,
        "xz": np.full(xs.shape, 128, np.uint8),
        "w": w,
        "ws": w_scale,
        "wz": w_zp,
        "b": RNG.integers(-500, 500, channels).astype(np.int32),
        "bs": np.asarray(b_scale, np.float32),
        "ys": np.array(0.1, np.float32),
        "yz": np.array(y_zp),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], axis=1),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], axis=1),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
    ]
    conv_out = "c"
    if relu_zero_point is not None:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        conv_out = "r"
    nodes += [
        helper.make_node("QuantizeLinear", [conv_out, "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    outputs = [("y", F, ["N", channels, 5, 5])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["other"]))
        outputs.append(("other", F, ["N", channels, 5, 5]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["N", 3, 5, 5])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _conv_feeds() -> dict:
    return {"x": (RNG.standard_normal((2, 3, 5, 5)) * 3).astype(np.float32)}


def test_conv_unit_fuses_and_matches_onnxruntime(tmp_path):
    model = _qdq_conv()
    optimized, stats = _optimized(model)
    ops = [n.op_type for n in optimized.graph]
    assert stats[PASS] == 1 and "QLinearConv" in ops and "Conv" not in ops
    assert ops.count("DequantizeLinear") == 1  # the output's; the inputs' DQs went with Conv
    saved = _saved_and_checked(optimized, tmp_path)
    feeds = _conv_feeds()
    expected = _ort(model).run(None, feeds)
    np.testing.assert_array_equal(onyx.InferenceSession(optimized).run(None, feeds)[0], expected[0])
    np.testing.assert_array_equal(_ort(saved, optimized=False).run(None, feeds)[0], expected[0])


@pytest.mark.parametrize(
    "why,variant",
    [
        ("per-channel activation scale", dict(x_scale=(0.05, 0.04, 0.06))),
        ("Conv output with a second reader", dict(extra_reader=True)),
        ("bias not at x_scale * w_scale", dict(bias_scale=np.full(4, 0.001, np.float32))),
        ("a filter zero point per channel", dict(w_zero_points=(120, 128, 130, 127))),
        ("Relu not made redundant by Q", dict(relu_zero_point=10)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_units_that_do_not_qualify_stay(why, variant):
    model = _qdq_conv(**variant)
    optimized, stats = _optimized(model)
    ops = [n.op_type for n in optimized.graph]
    assert PASS not in stats and "QLinearConv" not in ops, why
    assert "Conv" in ops or "FusedConv" in ops  # (Conv + Relu: the float fusion's)
    feeds = _conv_feeds()
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    expected = onyx.InferenceSession(model, off).run(None, feeds)
    for got, want in zip(onyx.InferenceSession(optimized).run(None, feeds), expected):
        np.testing.assert_array_equal(got, want)


def test_redundant_relu_goes_with_the_unit():
    """Q(Relu(v)) = Q(v) when Q's zero point is 0 (uint8): the Relu is fused away."""
    model = _qdq_conv(relu_zero_point=0)
    optimized, stats = _optimized(model)
    ops = [n.op_type for n in optimized.graph]
    assert stats[PASS] == 1 and "Relu" not in ops and "QLinearConv" in ops
    feeds = _conv_feeds()
    expected = _ort(model).run(None, feeds)[0]
    np.testing.assert_array_equal(onyx.InferenceSession(optimized).run(None, feeds)[0], expected)


def test_max_pool_needs_the_same_quantization():
    """DQ -> MaxPool -> Q runs on the integers only at one scale and zero point."""

    def model(out_scale: float) -> bytes:
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
            helper.make_node("MaxPool", ["xd"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["pq"]),
            helper.make_node("DequantizeLinear", ["pq", "s2", "z"], ["y"]),
        ]
        inits = {
            "s": np.array(0.1, np.float32),
            "s2": np.array(out_scale, np.float32),
            "z": np.array(3, np.uint8),
        }
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", F, [1, 2, 4, 4])],
            [helper.make_tensor_value_info("y", F, [1, 2, 3, 3])],
            [numpy_helper.from_array(a, n) for n, a in inits.items()],
        )
        opsets = [helper.make_opsetid("", 17)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()

    feeds = {"x": RNG.standard_normal((1, 2, 4, 4)).astype(np.float32) * 5}
    for scale, fused in ((0.1, True), (0.2, False)):
        m = model(scale)
        optimized, stats = _optimized(m)
        pool = next(n for n in optimized.graph if n.op_type == "MaxPool")
        assert (pool.inputs[0].name == "xq") == fused and (PASS in stats) == fused
        got = onyx.InferenceSession(optimized).run(None, feeds)[0]
        np.testing.assert_array_equal(got, _ort(m, optimized=False).run(None, feeds)[0])


@pytest.mark.parametrize("mode", ["reflect", "edge", "constant"])
@pytest.mark.parametrize("byte", [np.uint8, np.int8])
def test_requantizing_pad_moves_to_the_bytes(mode, byte, tmp_path):
    """DQ -> Pad (reflect / edge) -> Q at another scale => Pad on the bytes, then one
    requantization table; the same bits as the graph as written, in onyx and (saved, the
    table's function body) in onnxruntime. A constant pad of 0 moves too (QDQDataMovement:
    it pads the bytes with DQ's zero point, which dequantizes to 0)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("Pad", ["xd", "pads"], ["p"], mode=mode),
        helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "s2", "z2"], ["y"]),
    ]
    inits = {"s": np.array(0.1, np.float32), "s2": np.array(0.07, np.float32),
             "z": np.array(3, byte), "z2": np.array(-2 if byte is np.int8 else 9, byte),
             "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}  # fmt: skip
    model = _model(nodes, [("x", [1, 2, 4, 5])], [("y", None)], inits).SerializeToString()
    optimized = onyx.optimize(onyx.loads(model))
    ops = [n.op_type for n in optimized.graph]
    assert ops == ["QuantizeLinear", "Pad", "TableLookup"], ops  # (DQ -> Q -> DQ: one table)
    feeds = {"x": RNG.standard_normal((1, 2, 4, 5)).astype(np.float32) * 20}
    want = _ort(model, optimized=False).run(None, feeds)[0]
    np.testing.assert_array_equal(onyx.InferenceSession(optimized).run(None, feeds)[0], want)
    path = tmp_path / "optimized.onnx"
    onyx.save(optimized, path)
    np.testing.assert_array_equal(_ort(str(path), optimized=False).run(None, feeds)[0], want)


def _qdq_gemm(alpha: float, bias: bool) -> bytes:
    """x -> Q -> DQ -> Gemm(DQ(int8 weight per row, transB), [DQ(int32 bias)]) -> y, float."""
    a_scale, b_scale = np.float32(0.05), np.array([0.01, 0.02, 0.03], np.float32)
    inits = {
        "as": np.array(a_scale),
        "az": np.array(128, np.uint8),
        "b": RNG.integers(-100, 100, (3, 8)).astype(np.int8),
        "bs": b_scale,
        "bz": np.zeros(3, np.int8),
        "c": RNG.integers(-300, 300, 3).astype(np.int32),
        "cs": a_scale * b_scale,
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
        helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
    ]
    gemm_inputs = ["xd", "bd"]
    if bias:
        nodes.append(helper.make_node("DequantizeLinear", ["c", "cs"], ["cd"], axis=0))
        gemm_inputs.append("cd")
    nodes.append(helper.make_node("Gemm", gemm_inputs, ["y"], transB=1, alpha=alpha))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 8])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return m.SerializeToString()


@pytest.mark.parametrize(
    "alpha,bias,fused", [(1.0, True, True), (0.5, False, True), (0.5, True, False)]
)
def test_gemm_without_q_gives_float(alpha, bias, fused):
    """DQ(a), DQ(b) [, DQ(bias)] -> Gemm with no Q after it: QGemm with a float output (as
    onnxruntime fuses a classifier's last Gemm). QGemm adds C inside alpha's product, so a
    bias goes only with alpha 1 (onnxruntime leaves the last case as written too)."""
    model = _qdq_gemm(alpha, bias)
    optimized, stats = _optimized(model)
    gemms = [n for n in optimized.graph if n.op_type == "QGemm"]
    assert len(gemms) == fused and (PASS in stats) == fused
    if fused:
        assert len(gemms[0].inputs) == 6 + bias and gemms[0].attr("alpha", 1.0) == alpha
    feeds = {"x": RNG.standard_normal((2, 8)).astype(np.float32)}
    expected = _ort(model).run(None, feeds)[0]
    got = onyx.InferenceSession(optimized).run(None, feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- pass machinery


def test_runs_first_among_fusions_and_keeps_quantized_weights():
    """Registered ahead of the other fusions (a FusedConv would hide a unit), and
    ConstantFolding keeps a fused unit's DQ(weight) only when the pass will run."""
    from onyx.optimizer import passes

    extended = passes("extended")
    fusions = [p for p in extended if p not in passes("basic")]
    assert fusions[0] == PASS
    model = _qdq_conv()
    for level, disabled in (("basic", ()), ("all", [PASS])):
        stats: dict = {}
        optimized = onyx.optimize(onyx.loads(model), level, disabled, stats=stats)
        ops = [n.op_type for n in optimized.graph]
        assert stats["ConstantFolding"] == 2 and "Conv" in ops  # weight and bias folded
        assert ops.count("DequantizeLinear") == 2  # (x's and the output's)


# ------------------------------------------------------------------------ ReluQuantFusion


def _relu_then_q(zero_point: int, dtype) -> bytes:
    """x -> BatchNormalization -> Relu -> Q (zero point given) -> DQ: a QOperator model's
    float step between two quantized ops."""
    c = 4
    inits = [
        numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), n)
        for n in ("gamma", "beta", "mean")
    ] + [
        numpy_helper.from_array(RNG.random(c).astype(np.float32) + 0.5, "var"),
        numpy_helper.from_array(np.array(0.02, np.float32), "s"),
        numpy_helper.from_array(np.array(zero_point, dtype), "zp"),
    ]
    nodes = [
        helper.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["b"]),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "relu_q",
        [helper.make_tensor_value_info("x", F, [2, c, 5, 5])],
        [helper.make_tensor_value_info("y", F, [2, c, 5, 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    "zero_point, dtype, removed",
    [(0, np.uint8, True), (-128, np.int8, True), (3, np.uint8, False), (0, np.int8, False)],
)
def test_relu_before_a_q_at_its_lowest_zero_point_goes(zero_point, dtype, removed):
    model = _relu_then_q(zero_point, dtype)
    optimized, stats = _optimized(model)  # (a Relu left may go into BatchNormReluFusion's)
    assert stats.get("ReluQuantFusion", 0) == int(removed)
    assert not removed or "Relu" not in {n.op_type for n in optimized.graph}
    x = (3 * RNG.standard_normal((2, 4, 5, 5))).astype(np.float32)
    (got,) = onyx.InferenceSession(model).run(None, {"x": x})
    (want,) = _ort(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["relu output in the graph's", "second reader", "per channel"])
def test_relu_before_a_q_stays_when_not_redundant(case):
    """A Relu -> Q (uint8, zero point 0) whose Relu output something else sees, or whose Q is
    per channel, keeps its Relu."""
    c = 3
    per_channel = case == "per channel"
    shape = (c,) if per_channel else ()
    inits = [
        numpy_helper.from_array(np.full(shape, 0.02, np.float32), "s"),
        numpy_helper.from_array(np.zeros(shape, np.uint8), "zp"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "zp"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1),
    ]
    outputs = ["y"] + (["r"] if case == "relu output in the graph's" else [])
    if case == "second reader":
        nodes.append(helper.make_node("Neg", ["r"], ["z"]))
        outputs.append("z")
    graph = helper.make_graph(
        nodes,
        "relu_q",
        [helper.make_tensor_value_info("x", F, [2, c, 4, 4])],
        [helper.make_tensor_value_info(n, F, [2, c, 4, 4]) for n in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = model.SerializeToString()
    optimized, stats = _optimized(model)
    assert "ReluQuantFusion" not in stats
    assert "Relu" in {n.op_type for n in optimized.graph}
    x = (3 * RNG.standard_normal((2, c, 4, 4))).astype(np.float32)
    got = onyx.InferenceSession(model).run(None, {"x": x})
    want = _ort(model).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
