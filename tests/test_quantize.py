"""onyx.quantize: every quantized fixture runs in onnxruntime and in onyx with matching outputs,
stays close to the float model, and is at least as accurate as onnxruntime's quantizer."""

from __future__ import annotations

import importlib
import json
import math
import os

import numpy as np
import pytest

import onyx
from onyx.errors import InvalidArgument, NotImplementedOp
from onyx.quantization import params, weight_only

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

HERE = os.path.dirname(__file__)
MODELS = os.path.join(HERE, "models")
MANIFEST = json.load(open(os.path.join(MODELS, "manifest.json")))
from onyx.quantization import calibration as cal  # noqa: E402

make_inputs = importlib.import_module("onyx.debug.compare").make_inputs
TINY_CNN = os.path.join(os.path.dirname(onyx.__file__), "examples", "tiny_cnn.onnx")
ZOO = ["mobilenet_torchscript_op17", "resnet_torchscript_op17", "unet_dynamo_op18",
       "bert_torchscript_op17", "gpt_dynamo_op18", "lstm_torchscript_op17"]  # fmt: skip


def feeds(name: str, n: int, seed: int) -> list[dict]:
    """Inputs drawn from the ranges the manifest gives (tokens, images in [-1, 1] ...)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = {}
        for iname, dtype, shape, (lo, hi) in MANIFEST[name]["inputs"]:
            shape = [1 if isinstance(d, str) else d for d in shape]
            if dtype.startswith("int"):
                f[iname] = rng.integers(lo, hi, size=shape).astype(dtype)
            else:
                f[iname] = rng.uniform(lo, hi, size=shape).astype(dtype)
        out.append(f)
    return out


def ort_session(model, tmp_path, name="q.onnx"):
    path = str(tmp_path / name)
    onyx.save(model, path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so)


def output_step(model, name: str) -> tuple[float, bool]:
    """The quantization step of the DequantizeLinear nearest upstream of a graph output, and
    whether that DequantizeLinear writes the output itself."""
    producers = {v.name: n for n in model.graph for v in n.outputs}
    frontier, seen = [name], set()
    while frontier:
        v = frontier.pop(0)
        node = producers.get(v)
        if node is None or v in seen:
            continue
        seen.add(v)
        if node.op_type == "DequantizeLinear" and node.inputs[0].producer is not None:
            return float(np.max(node.inputs[1].const_value.numpy())), v == name
        frontier += [i.name for i in node.inputs if i is not None]
    return 0.0, False


def check_runs_in_both(model, samples, tmp_path, skip_onyx_missing=False):
    sess = ort_session(model, tmp_path)
    names = [o.name for o in sess.get_outputs()]
    try:
        mine = onyx.InferenceSession(model)
    except NotImplementedOp:
        if skip_onyx_missing:
            return [sess.run(names, f) for f in samples]
        raise
    outs = []
    for f in samples:
        theirs = sess.run(names, f)
        ours = mine.run(names, f)
        for n, a, b in zip(names, theirs, ours):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            assert_quantized_parity(a, b, output_step(model, n), n)
        outs.append(theirs)
    return outs


def assert_quantized_parity(a, b, found: tuple[float, bool], where: str):
    """onyx's parity rule for quantized models (tests/test_real_models.py): at most 0.5% of the
    elements more than one quantization step apart, none more than 4 (integer kernels round
    ties, and float ops between Q and DQ sum in another order, one step; it propagates)."""
    step, direct = found
    if not direct:  # the output is float: the step of an 8-bit range over it
        step = float(np.ptp(a)) / 255 if a.size else 0.0
    diff = np.abs(a - b)
    bound = max(1e-4, step) * (1 + 1e-6) + 1e-3 * np.abs(a)
    assert np.count_nonzero(diff > bound) <= 0.005 * diff.size, (where, diff.max(), step)
    assert diff.max() <= 4 * step + 1e-4, (where, diff.max(), step)


def float_outputs(name, samples):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(os.path.join(MODELS, name + ".onnx"), so)
    return [s.run(None, f) for f in samples]


def cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- arithmetic --------------------------------------------------------------------------------


def test_scale_zero_point_includes_zero_and_saturates():
    s, z = params.scale_zero_point(0.5, 2.0, "uint8")  # range widened to [0, 2]
    assert z == 0 and math.isclose(float(s), 2 / 255, rel_tol=1e-6)
    s, z = params.scale_zero_point(-1.0, 3.0, "uint8")
    assert z == round(1 / (4 / 255))
    q = params.quantize_array(np.array([-1.0, 0.0, 3.0, 10.0], np.float32), s, z, "uint8")
    assert q.tolist() == [0, int(z), 255, 255]
    s, z = params.scale_zero_point(-2.0, 1.0, "int8", symmetric=True)
    assert z == 0 and math.isclose(float(s), 2 / 127, rel_tol=1e-6)


def test_per_channel_weights_symmetric():
    w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
    q, s, z = params.quantize_weight(w, "int8", 0, True)
    assert s.shape == (2,) and (z == 0).all()
    assert np.abs(q).max() == 127
    np.testing.assert_allclose(q * s[:, None], w, atol=float(s.max()) / 2)


def test_histogram_grows_without_losing_counts():
    r = cal.Range()
    r.add(np.array([0.1, 0.2], np.float32), histogram=True)
    r.add(np.array([5.0, -9.0], np.float32), histogram=True)
    assert r.hist.sum() == 4 and r.edge >= 9.0
    assert (r.lo, r.hi) == (-9.0, 5.0)


def test_entropy_and_percentile_clip_outliers():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000).astype(np.float32)
    x[0] = 60.0  # one outlier: minmax keeps it, the histogram methods clip it
    r = cal.Range()
    r.add(x, histogram=True)
    assert r.limits("minmax")[1] == 60.0
    assert 2.0 < r.limits("entropy")[1] < 20.0
    assert 3.0 < r.limits("percentile", 99.99)[1] < 6.0


def test_int4_blocks_reconstruct():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 6)).astype(np.float32)  # K not a multiple of the block
    for symmetric in (True, False):
        codes, scale, zp = weight_only.blockwise(w, 16, symmetric)
        assert codes.shape == (6, 3, 16) and codes.max() <= 15
        z = 8 if zp is None else zp[..., None]
        back = ((codes.astype(np.float32) - z) * scale[..., None]).reshape(6, -1)[:, :40].T
        assert np.abs(back - w).max() <= scale.max() / 2 + 1e-6
    packed = weight_only.pack_nibbles(np.array([[1, 2, 3]], np.uint8))
    assert packed.tolist() == [[0x21, 0x03]]


# -- the zoo -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ZOO)
def test_static_qdq_runs_in_both_and_stays_close(name, tmp_path):
    held = feeds(name, 3, 1)
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="static",
                      calibration=feeds(name, 4, 0), progress=False)  # fmt: skip
    ops = {n.op_type for n in q.graph}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    outs = check_runs_in_both(q, held, tmp_path)
    for got, want in zip(outs, float_outputs(name, held)):
        assert cosine(got[0], want[0]) > 0.98


@pytest.mark.parametrize("name", ZOO)
def test_dynamic_runs_in_both_and_stays_close(name, tmp_path):
    held = feeds(name, 2, 1)
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="dynamic")
    ops = {n.op_type for n in q.graph}
    assert ops & {"MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM"}
    # onyx's DynamicQuantizeLSTM kernel comes with the contrib-ops work; onnxruntime runs it now
    outs = check_runs_in_both(q, held, tmp_path, skip_onyx_missing="lstm" in name)
    for got, want in zip(outs, float_outputs(name, held)):
        assert cosine(got[0], want[0]) > 0.99


@pytest.mark.parametrize("name", ["resnet_torchscript_op17", "bert_torchscript_op17"])
def test_qoperator_format_runs_in_both(name, tmp_path):
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="static", format="qoperator",
                      calibration=feeds(name, 2, 0), progress=False)  # fmt: skip
    ops = {n.op_type for n in q.graph}
    assert ops & {"QLinearConv", "QLinearMatMul", "QGemm"}
    check_runs_in_both(q, feeds(name, 2, 1), tmp_path)


def test_dynamic_qoperator_is_fused(tmp_path):
    name = "bert_torchscript_op17"
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="dynamic", format="qoperator")
    ops = [n.op_type for n in q.graph]
    assert "DynamicQuantizeMatMul" in ops and "MatMulInteger" not in ops
    held = feeds(name, 2, 1)
    for got, want in zip(check_runs_in_both(q, held, tmp_path), float_outputs(name, held)):
        assert cosine(got[0], want[0]) > 0.99


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_methods(method, tmp_path):
    name = "mobilenet_torchscript_op17"
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), calibration=feeds(name, 3, 0),
                      method=method, progress=False)  # fmt: skip
    held = feeds(name, 2, 1)
    for got, want in zip(check_runs_in_both(q, held, tmp_path), float_outputs(name, held)):
        assert cosine(got[0], want[0]) > 0.98


def test_tiny_cnn_int8_activations_and_exclusions(tmp_path):
    samples = [make_inputs(TINY_CNN, seed=i) for i in range(3)]
    m = onyx.load(TINY_CNN)
    first_conv = next(n.name for n in onyx.quantization.preprocess(m).graph if n.op_type == "Conv")
    q = onyx.quantize(m, calibration=samples, activation_type="int8",
                      nodes_to_exclude=[first_conv], progress=False)  # fmt: skip
    convs = [n for n in q.graph if n.op_type == "Conv"]
    assert convs[0].name == first_conv and convs[0].inputs[1].producer is None  # left in float
    zps = [n.inputs[2].const_value.numpy() for n in q.graph if n.op_type == "QuantizeLinear"]
    assert zps and all(z.dtype == np.int8 for z in zps)
    check_runs_in_both(q, samples, tmp_path)


@pytest.mark.parametrize("form", ["matmulnbits", "qdq"])
@pytest.mark.parametrize("weight_type", ["int4", "uint4"])
def test_weight_only_int4(form, weight_type, tmp_path):
    name = "gpt_dynamo_op18"
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="weight_only",
                      weight_type=weight_type, block_size=32, weight_only_form=form)  # fmt: skip
    ops = {n.op_type for n in q.graph}
    assert ("MatMulNBits" in ops) == (form == "matmulnbits")
    held = feeds(name, 2, 1)
    sess = ort_session(q, tmp_path)
    for f, want in zip(held, float_outputs(name, held)):
        got = sess.run(None, f)[0]
        assert cosine(got, want[0]) > 0.99
    size = len(onyx.dumps(q))
    assert size < 0.6 * os.path.getsize(os.path.join(MODELS, name + ".onnx"))
    try:
        mine = onyx.InferenceSession(q)
    except NotImplementedOp:  # MatMulNBits comes with the transformer kernels
        return
    # onnxruntime's optimizer turns DQ(int4) -> MatMul into its MatMulNBits, which sums in
    # another order (1e-2 off at gpt's logits): compare with its graph as written
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(tmp_path / "q.onnx"), so)
    for f in held:
        np.testing.assert_allclose(
            mine.run(None, f)[0], plain.run(None, f)[0], atol=1e-4, rtol=1e-3
        )


def test_bad_arguments():
    with pytest.raises(InvalidArgument, match="mode"):
        onyx.quantize(TINY_CNN, mode="fast")
    with pytest.raises(InvalidArgument, match="calibration"):
        onyx.quantize(TINY_CNN, mode="static")
    with pytest.raises(InvalidArgument, match="cannot be quantized statically"):
        onyx.quantize(TINY_CNN, calibration=[{}], op_types=["Erf"])
    with pytest.raises(InvalidArgument, match="int4"):
        onyx.quantize(TINY_CNN, mode="weight_only", weight_type="int8")


# -- accuracy against onnxruntime's quantizer ----------------------------------------------------

VERSUS = [("mobilenet_torchscript_op17", "static"), ("resnet_torchscript_op17", "static"),
          ("mobilenet_torchscript_op17", "dynamic"), ("resnet_torchscript_op17", "dynamic"),
          ("bert_torchscript_op17", "static"), ("gpt_dynamo_op18", "static"),
          ("bert_torchscript_op17", "dynamic"), ("gpt_dynamo_op18", "dynamic"),
          ("lstm_torchscript_op17", "static"), ("lstm_torchscript_op17", "dynamic")]  # fmt: skip


def test_error_ratio_against_onnxruntime_quantizer():
    """Geometric mean of onyx's error / onnxruntime's error (same model, calibration data
    and settings, all run by onnxruntime) <= 1 per family; benchmarks/bench_quantize.py
    prints the table."""
    from onyx.quantization.versus import versus

    ratios: dict[str, list[float]] = {}
    for name, mode in VERSUS:
        v = versus(os.path.join(MODELS, name + ".onnx"), mode, feeds(name, 4, 0), feeds(name, 4, 1))
        family = {"mobilenet": "cnn", "resnet": "cnn", "lstm": "rnn"}.get(
            name.split("_")[0], "transformer"
        )
        ratios.setdefault(family, []).append(v.ratio)
    for family, rs in ratios.items():
        geomean = math.exp(np.mean(np.log(rs)))
        assert geomean <= 1.0, (family, rs)


def _matmul_model(opset: int):
    from onyx import ir

    x = ir.Value("x", ir.TensorType(ir.DataType.FLOAT, ir.Shape((2, 4))))
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
    wv = ir.Value("w", ir.TensorType(ir.DataType.FLOAT, ir.Shape((4, 3))), ir.Tensor(w, name="w"))
    node = ir.Node("MatMul", [x, wv], ["y"], name="mm")
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, ir.Shape((2, 3)))
    g = ir.Graph([x], [node.outputs[0]], [node], [wv], name="g")
    return ir.Model(g, {"": opset})


def test_old_opsets_are_not_silently_upgraded(tmp_path):
    samples = [{"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}]
    with pytest.warns(UserWarning, match="per tensor"):
        q = onyx.quantize(_matmul_model(12), calibration=samples, progress=False)
    assert q.opset("") == 12
    assert all(n.attr("axis") is None for n in q.graph if n.op_type == "DequantizeLinear")
    check_runs_in_both(q, samples, tmp_path)
    with pytest.raises(InvalidArgument, match="opset 10"):
        onyx.quantize(_matmul_model(9), calibration=samples, progress=False)
    with pytest.raises(InvalidArgument, match="matmulnbits"):
        onyx.quantize(_matmul_model(17), mode="weight_only", weight_type="int4",
                      weight_only_form="qdq")  # fmt: skip
