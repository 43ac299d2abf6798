"""The lookup-table fusion (onyx/optimizer/lookup.py): elementwise chains reading one byte
tensor become one ai.onyx TableLookup.

The oracle is the same model run as written: the fused model must give the same outputs to
the bit, for every value a byte can take. Saved, the optimized model must pass onnx's checker
and run in onnxruntime (which runs TableLookup's function body) to the same results. The
native lookup kernel is checked against numpy's take.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.zoo import zoo_models  # noqa: E402

PASS = "LookupTableFusion"
U8, I8, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT


def _model(nodes, x_type, y_type, inits: dict, opset=17, shape=(2, 3, 4, 5)) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", x_type, list(shape))],
        [helper.make_tensor_value_info("y", y_type, list(shape))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _all_bytes(dtype, shape=(2, 3, 4, 5)) -> np.ndarray:
    """Every byte value, repeated to fill ``shape``."""
    n = int(np.prod(shape))
    return np.resize(np.arange(256, dtype=np.uint8).view(dtype), n).reshape(shape)


def _sessions(model: bytes):
    fused = onyx.InferenceSession(model)
    so = onyx.SessionOptions()
    so.disabled_optimizers = [PASS]
    return fused, onyx.InferenceSession(model, so)


def _lookups(model: bytes) -> int:
    stats: dict = {}
    onyx.optimize(onyx.loads(model), stats=stats)
    return stats.get(PASS, 0)


def _q(name, scale, zp, dtype=np.uint8) -> dict:
    return {f"{name}_s": np.float32(scale), f"{name}_z": np.asarray(zp, dtype)}


def _hard_swish_qoperator(x_type=U8):
    """MobileNet's quantized hard-swish: x * HardSigmoid(x) through QLinearMul."""
    dt = np.uint8 if x_type == U8 else np.int8
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("HardSigmoid", ["xf"], ["hs"], alpha=1 / 6, beta=0.5),
        helper.make_node("QuantizeLinear", ["hs", "h_s", "h_z"], ["hq"]),
        helper.make_node(
            "QLinearMul",
            ["x", "x_s", "x_z", "hq", "h_s", "h_z", "y_s", "y_z"],
            ["y"],
            domain="com.microsoft",
        ),
    ]
    inits = {**_q("x", 0.05, 3, dt), **_q("h", 1 / 255, 0, dt), **_q("y", 0.04, 1, dt)}
    return _model(nodes, x_type, x_type, inits)


def _gelu_qdq():
    """A QDQ BERT's GELU on a uint8 tensor, to a float output: Erf, Div, Add, Mul."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("Div", ["xf", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["xf", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    inits = {**_q("x", 0.03, 128), "sqrt2": np.float32(1.4142135), "one": np.float32(1),
             "half": np.float32(0.5)}  # fmt: skip
    return _model(nodes, U8, F, inits)


def _relu_compare():
    """int8 -> bool: x dequantized, then Greater than a constant (a 1-element rank-1 one)."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("Relu", ["xf"], ["r"]),
        helper.make_node("Greater", ["r", "t"], ["y"]),
    ]
    inits = {**_q("x", 0.1, -5, np.int8), "t": np.array([1.5], np.float32)}
    return _model(nodes, I8, TensorProto.BOOL, inits)


CHAINS = {
    "hard_swish_uint8": (_hard_swish_qoperator, np.uint8),
    "hard_swish_int8": (lambda: _hard_swish_qoperator(I8), np.int8),
    "gelu_to_float": (_gelu_qdq, np.uint8),
    "int8_to_bool": (_relu_compare, np.int8),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_becomes_one_lookup_with_the_same_results(name, tmp_path):
    make, dtype = CHAINS[name]
    model = make()
    assert _lookups(model) == 1
    optimized = onyx.optimize(onyx.loads(model))
    assert [n.op_type for n in optimized.graph] == ["TableLookup"]
    x = _all_bytes(dtype)
    fused, as_written = _sessions(model)
    got, want = fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # saved, it is valid ONNX that onnxruntime runs (the function body) to the same bits
    path = tmp_path / "optimized.onnx"
    onyx.save(optimized, path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_values_read_elsewhere_stay():
    """A chain value read by a non-elementwise op is computed for it; the lookup takes the
    chain's end."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("Sigmoid", ["xf"], ["s"]),
        helper.make_node("Mul", ["s", "two"], ["y"]),
        helper.make_node("ReduceSum", ["xf"], ["total"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", U8, [4, 8])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("total", F, None)],
        [numpy_helper.from_array(v, k) for k, v in {**_q("x", 0.1, 7), "two": np.float32(2)}.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = model.SerializeToString()
    optimized = onyx.optimize(onyx.loads(data))
    assert sorted(n.op_type for n in optimized.graph) == ["DequantizeLinear", "ReduceSum",
                                                          "TableLookup"]  # fmt: skip
    x = _all_bytes(np.uint8, (4, 8))
    fused, as_written = _sessions(data)
    for got, want in zip(fused.run(None, {"x": x}), as_written.run(None, {"x": x})):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "why",
    ["two_axes_constant", "second_tensor", "one_node", "broadcasting_constant"],
)
def test_chains_that_do_not_qualify_stay(why):
    scale = np.float32(0.1)
    second = []
    if why == "two_axes_constant":  # values along two axes: not a function of byte and channel
        scale = np.linspace(0.1, 1, 12, dtype=np.float32).reshape(1, 3, 4, 1)
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"])]
    if why != "one_node":
        other = "z" if why == "second_tensor" else "c"
        nodes.append(helper.make_node("Mul", ["xf", other], ["y"]))
    else:
        nodes[0].output[0] = "y"
    inits = {"x_s": np.float32(0.1), "x_z": np.uint8(3), "c": scale}
    if why == "broadcasting_constant":  # rank 5 > the tensor's 4: the result would grow
        inits["c"] = np.ones((1, 1, 1, 1, 1), np.float32)
    inputs = [helper.make_tensor_value_info("x", U8, [2, 3, 4, 5])]
    if why == "second_tensor":
        second = [helper.make_tensor_value_info("z", F, [2, 3, 4, 5])]
    graph = helper.make_graph(nodes, "g", inputs + second,
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert _lookups(model.SerializeToString()) == 0


def _group_norm_affine(x_type, const_shape, shape=(2, 3, 4, 5), to_float=False):
    """A quantized GroupNorm's per-channel scale and bias, QLinearMul -> QLinearAdd with
    constants of ``const_shape``, then a SiLU table-able tail (to uint8 or float)."""
    dt = np.uint8 if x_type == U8 else np.int8
    rng = np.random.default_rng(0)
    w = rng.integers(0, 256, const_shape).astype(np.uint8).view(dt)
    b = rng.integers(0, 256, const_shape).astype(np.uint8).view(dt)
    nodes = [
        helper.make_node("QLinearMul", ["x", "x_s", "x_z", "w", "w_s", "w_z", "m_s", "m_z"],
                         ["m"], domain="com.microsoft"),
        helper.make_node("QLinearAdd", ["m", "m_s", "m_z", "b", "b_s", "b_z", "a_s", "a_z"],
                         ["a"], domain="com.microsoft"),
        helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["af"]),
        helper.make_node("Sigmoid", ["af"], ["sg"]),
        helper.make_node("Mul", ["af", "sg"], ["y" if to_float else "sf"]),
    ]  # fmt: skip
    if not to_float:
        nodes.append(helper.make_node("QuantizeLinear", ["sf", "y_s", "y_z"], ["y"]))
    inits = {**_q("x", 0.05, 7, dt), **_q("w", 0.01, 3, dt), **_q("m", 0.03, 5, dt),
             **_q("b", 0.02, 9, dt), **_q("a", 0.04, 11, dt), **_q("y", 0.02, 2, dt),
             "w": w, "b": b}  # fmt: skip
    return _model(nodes, x_type, F if to_float else x_type, inits, shape=shape)


@pytest.mark.parametrize(
    "x_type, const_shape, shape, to_float",
    [
        (U8, (3, 1, 1), (2, 3, 4, 5), False),  # NCHW channels, as unet's GroupNorms
        (U8, (3, 1, 1), (2, 3, 4, 5), True),  # a float result
        (I8, (1, 3, 1, 1), (2, 3, 4, 5), False),  # int8: the table in value order
        (U8, (5,), (2, 3, 4, 5), False),  # the last axis: values spread on the one before
    ],
)
def test_per_channel_chain_becomes_one_channel_lookup(x_type, const_shape, shape, to_float,
                                                      tmp_path):  # fmt: skip
    model = _group_norm_affine(x_type, const_shape, shape, to_float)
    optimized = onyx.optimize(onyx.loads(model))
    assert [n.op_type for n in optimized.graph] == ["ChannelTableLookup"]
    x = _all_bytes(np.uint8 if x_type == U8 else np.int8, shape)
    fused, as_written = _sessions(model)
    got, want = fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], want)  # (the kept set-up)
    path = tmp_path / "optimized.onnx"  # the function body runs in onnxruntime to the same bits
    onyx.save(optimized, path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_channel_constant_on_a_size_one_axis_stays():
    """A per-channel constant where the tensor's axis is 1 broadcasts the result: that node
    stays (the rest, on its full-sized result, becomes a lookup), to the same results."""
    shape = (2, 1, 4, 5)
    model = _group_norm_affine(U8, (3, 1, 1), shape)
    optimized = onyx.optimize(onyx.loads(model))
    assert [n.op_type for n in optimized.graph] == ["QLinearMul", "ChannelTableLookup"]
    x = _all_bytes(np.uint8, shape)
    fused, as_written = _sessions(model)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0])


def _pre_activation(x_type, relu: bool):
    """A pre-activation ResNet's quantized block entry: DQ -> BatchNormalization [-> Relu] ->
    Q, the normalization's four (C,) parameters constants (Q's zero point the type's minimum
    after a Relu: ReluQuantFusion takes the Relu, as the quantizer's models have it)."""
    dt = np.uint8 if x_type == U8 else np.int8
    rng = np.random.default_rng(1)
    bn = {"g": rng.uniform(0.5, 2, 3), "b": rng.uniform(-1, 1, 3), "m": rng.uniform(-1, 1, 3),
          "v": rng.uniform(0.1, 2, 3)}  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("BatchNormalization", ["xf", "g", "b", "m", "v"], ["n"]),
        *([helper.make_node("Relu", ["n"], ["r"])] if relu else []),
        helper.make_node("QuantizeLinear", ["r" if relu else "n", "y_s", "y_z"], ["y"]),
    ]
    inits = {**_q("x", 0.05, 7, dt), **_q("y", 0.03, np.iinfo(dt).min if relu else 5, dt),
             **{k: v.astype(np.float32) for k, v in bn.items()}}  # fmt: skip
    return _model(nodes, x_type, x_type, inits)


@pytest.mark.parametrize("x_type", [U8, I8])
@pytest.mark.parametrize("relu", [True, False])
def test_batch_norm_chain_becomes_one_channel_lookup(x_type, relu, tmp_path):
    """An inference BatchNormalization of constant (C,) parameters is an affine map per
    channel (axis 1): DQ -> BatchNormalization [-> Relu] -> Q is one ChannelTableLookup, to
    the same bits, here and in onnxruntime (the function body)."""
    model = _pre_activation(x_type, relu)
    optimized = onyx.optimize(onyx.loads(model))
    assert [n.op_type for n in optimized.graph] == ["ChannelTableLookup"]
    x = _all_bytes(np.uint8 if x_type == U8 else np.int8)
    fused, as_written = _sessions(model)
    want = as_written.run(None, {"x": x})[0]
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], want)
    path = tmp_path / "optimized.onnx"
    onyx.save(optimized, path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_batch_norm_of_a_varying_parameter_stays():
    """A BatchNormalization whose mean is no constant is no function of the byte alone."""
    model = onnx.load_from_string(_pre_activation(U8, False))
    m = next(t for t in model.graph.initializer if t.name == "m")
    model.graph.initializer.remove(m)
    model.graph.input.append(helper.make_tensor_value_info("m", F, [3]))
    assert "BatchNormalization" in [n.op_type for n in onyx.optimize(onyx.loads(
        model.SerializeToString())).graph]  # fmt: skip


@pytest.mark.parametrize("bias", ["zeros", "not zeros", "other output scale"])
def test_a_quantized_add_of_zeros_goes(bias):
    """QLinearAdd(x, a constant of zero points, at x's output parameters) gives each byte
    back (a quantized BERT's packed q / k / v projection has an all-zero bias): its readers
    read x. A bias that is not all zeros, or another output scale, keeps it."""
    b = np.full(5, 0, np.uint8)
    if bias == "not zeros":
        b[2] = 1
    nodes = [
        helper.make_node("QLinearAdd", ["x", "x_s", "x_z", "b", "b_s", "b_z", "y_s", "y_z"],
                         ["a"], domain="com.microsoft"),
        helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0, 2, 3]),  # (no chain of its)
    ]  # fmt: skip
    y_scale = 0.06 if bias == "other output scale" else 0.05
    inits = {**_q("x", 0.05, 7), **_q("b", 1.0, 0), **_q("y", y_scale, 7), "b": b}
    model = onnx.load_from_string(_model(nodes, U8, U8, inits))
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 3
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 2
    model = model.SerializeToString()
    ops = [n.op_type for n in onyx.optimize(onyx.loads(model)).graph]
    assert ("QLinearAdd" in ops) == (bias != "zeros"), ops
    x = _all_bytes(np.uint8)
    fused, as_written = _sessions(model)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0])


@pytest.mark.parametrize("x_type", [U8, I8])
@pytest.mark.parametrize("op_type", ["QLinearLeakyRelu", "QLinearSigmoid"])
def test_one_quantized_activation_becomes_a_lookup(op_type, x_type):
    """A lone com.microsoft QLinearLeakyRelu / QLinearSigmoid (three numpy passes) is a table
    lookup too, to the same bits."""
    dt = np.uint8 if x_type == U8 else np.int8
    extra = {"alpha": 0.1} if op_type == "QLinearLeakyRelu" else {}
    nodes = [helper.make_node(op_type, ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                              domain="com.microsoft", **extra)]  # fmt: skip
    model = _model(nodes, x_type, x_type, {**_q("x", 0.05, 7, dt), **_q("y", 0.02, 2, dt)})
    assert [n.op_type for n in onyx.optimize(onyx.loads(model)).graph] == ["TableLookup"]
    x = _all_bytes(dt)
    fused, as_written = _sessions(model)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0])


def test_shape_of_a_chain_value_reads_the_root():
    """A Shape reading a value inside a chain (a quantized BERT's float bias add) reads the
    chain's root instead: that value is not tabulated for its shape alone."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("Add", ["xf", "one"], ["af"]),
        helper.make_node("QuantizeLinear", ["af", "y_s", "y_z"], ["y"]),
        helper.make_node("Shape", ["af"], ["shape"]),
    ]
    inits = {**_q("x", 0.05, 7), **_q("y", 0.02, 2), "one": np.array(1.5, np.float32)}
    shape = ["N", 3, 4, 5]  # (a Shape that does not fold)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", U8, shape)],
        [helper.make_tensor_value_info("y", U8, shape),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [4])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()
    optimized = onyx.optimize(onyx.loads(model))
    ops = [n.op_type for n in optimized.graph]
    assert ops.count("TableLookup") == 1 and "Add" not in ops  # (not one more for the Shape)
    x = _all_bytes(np.uint8)
    fused, as_written = _sessions(model)
    for got, want in zip(fused.run(None, {"x": x}), as_written.run(None, {"x": x})):
        np.testing.assert_array_equal(got, want)


QUANTIZED = sorted(m.name for m in zoo_models() if m.quantization in ("qdq", "qoperator"))


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_fixtures_give_the_same_bits(name):
    """The committed quantized models: the same outputs with and without the lookups."""
    m = {m.name: m for m in zoo_models()}[name]
    feeds = m.feeds(2)
    fused, as_written = _sessions(str(m.path))
    for got, want in zip(fused.run(None, feeds), as_written.run(None, feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "name, at_least",
    [
        ("mobilenet_quant_qoperator", 10),  # the hard-swishes
        ("mobilenet_quant_qdq", 10),
        ("bert_quant_qoperator", 6),  # the GELUs (com.microsoft roots: no inferred type), and
        # each attention's q / k / v requantizations (QDQDataMovement moved them past the split)
        ("gpt_quant_qdq", 2),
        ("resnet_quant_qdq", 6),  # DQ -> BatchNormalization -> Q before each block
        ("resnet_quant_qoperator", 5),
    ],
)
def test_quantized_fixtures_get_their_lookups(name, at_least):
    m = {m.name: m for m in zoo_models()}[name]
    assert _lookups(Path(m.path).read_bytes()) >= at_least


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("item", [np.uint8, np.bool_, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 300_000])  # tails; threads
def test_native_lookup_matches_take(item, x_type, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 256, n).astype(np.uint8).view(x_type)
    table = rng.integers(0, 2 if item is np.bool_ else 100, 256).astype(item)
    got = native.lookup8(x, table)
    np.testing.assert_array_equal(got, np.take(table, x.view(np.uint8)))


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("item", [np.uint8, np.float32, np.int64])
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "shape, axis", [((2, 3, 4, 5), 1), ((3, 70), 1), ((5, 2, 1), 0), ((2, 3, 4, 5), 3)]
)  # (the last axis: a lookup per byte)
def test_native_channel_lookup_matches_take(item, x_type, shape, axis):
    rng = np.random.default_rng(len(shape))
    x = rng.integers(0, 256, shape).astype(np.uint8).view(x_type)
    table = rng.integers(0, 100, (shape[axis], 256)).astype(item)
    got = native.lookup8_channels(x, table, axis)
    channel = np.arange(shape[axis]).reshape([-1] + [1] * (len(shape) - 1 - axis))
    np.testing.assert_array_equal(got, table[channel, x.view(np.uint8)])


# -- what a chain costs: each exit tabulated once, each chain once per process ----------------


def _two_roots():
    """x -> DQ -> Sigmoid -> Q -> DQ -> Tanh -> Q -> y: the byte value between the two is a
    root of its own, whose chain ends at the same exit as x's."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        helper.make_node("Sigmoid", ["xf"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "m_s", "m_z"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "m_s", "m_z"], ["mf"]),
        helper.make_node("Tanh", ["mf"], ["t"]),
        helper.make_node("QuantizeLinear", ["t", "y_s", "y_z"], ["y"]),
    ]
    inits = {**_q("x", 0.05, 128), **_q("m", 1 / 255, 0), **_q("y", 1 / 255, 0)}
    return _model(nodes, U8, U8, inits)


def _counting(monkeypatch, name: str) -> list:
    from onyx.optimizer import lookup

    calls: list = []
    real = getattr(lookup, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(lookup, name, counted)
    return calls


def test_an_exit_is_tabulated_once(monkeypatch):
    from onyx.optimizer import lookup

    monkeypatch.setattr(lookup, "TABLES", {})
    calls = _counting(monkeypatch, "_tabulate")
    model = _two_roots()
    assert _lookups(model) == 1
    assert len(calls) == 1  # (x's chain: the middle byte's chain ends at y too)


def test_a_chain_is_tabulated_once_per_process(monkeypatch):
    from onyx.optimizer import lookup

    monkeypatch.setattr(lookup, "TABLES", {})
    model = _hard_swish_qoperator()
    first = onyx.InferenceSession(model)
    calls = _counting(monkeypatch, "evaluate")
    again = onyx.InferenceSession(model)
    assert calls == []  # (the probe did not run again)
    x = _all_bytes(np.uint8)
    np.testing.assert_array_equal(again.run(None, {"x": x})[0], first.run(None, {"x": x})[0])


class _EmptiedBetween(dict):
    """TABLES as another thread creating a session leaves it: a key seen, then gone (that
    thread emptied the memo between the test and the read)."""

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        raise KeyError(key)


def test_the_table_memo_emptied_by_another_thread_meanwhile(monkeypatch):
    from onyx.optimizer import lookup

    monkeypatch.setattr(lookup, "TABLES", _EmptiedBetween())
    model = _hard_swish_qoperator()
    x = _all_bytes(np.uint8)
    monkeypatch.setattr(lookup, "TABLES", {})
    want = onyx.InferenceSession(model).run(None, {"x": x})[0]
    monkeypatch.setattr(lookup, "TABLES", _EmptiedBetween())
    np.testing.assert_array_equal(onyx.InferenceSession(model).run(None, {"x": x})[0], want)


def test_the_table_memo_keys_on_constants_attributes_and_native(monkeypatch):
    """A chain that differs in a constant, an attribute or the kernels that run the probe
    gets a table of its own."""
    from onyx.optimizer import lookup

    monkeypatch.setattr(lookup, "TABLES", {})
    x = _all_bytes(np.uint8)
    base = _hard_swish_qoperator()
    onyx.InferenceSession(base)
    other_scale = base.replace(np.float32(0.04).tobytes(), np.float32(0.03).tobytes())
    other_alpha = base.replace(np.float32(1 / 6).tobytes(), np.float32(1 / 5).tobytes())
    for model in (other_scale, other_alpha):
        assert model != base
        fused, as_written = _sessions(model)
        np.testing.assert_array_equal(
            fused.run(None, {"x": x})[0], as_written.run(None, {"x": x})[0]
        )
    assert len(lookup.TABLES) == 3
    if native.available():
        with native.disabled():
            calls = _counting(monkeypatch, "evaluate")
            onyx.InferenceSession(base)
        assert calls  # (tabulated again by numpy's kernels)
        assert len(lookup.TABLES) == 4


def test_the_table_memo_is_bounded(monkeypatch):
    """A chain whose constants hold more than MAX_KEY_BYTES is not kept; the memo empties
    when its tables and keys pass MAX_TABLE_BYTES."""
    from onyx.optimizer import lookup

    monkeypatch.setattr(lookup, "TABLES", {})
    monkeypatch.setattr(lookup, "MAX_KEY_BYTES", 4)  # (the chain reads 25 bytes of constants)
    base = _hard_swish_qoperator()
    onyx.InferenceSession(base)
    assert lookup.TABLES == {}
    monkeypatch.setattr(lookup, "MAX_KEY_BYTES", 1 << 20)
    monkeypatch.setattr(lookup, "MAX_TABLE_BYTES", 1200)  # (each entry: 256 + 25 bytes)
    sizes = []
    for scale in (0.01, 0.02, 0.03, 0.05, 0.06):  # (y's scale: a table of its own each)
        model = base.replace(np.float32(0.04).tobytes(), np.float32(scale).tobytes())
        onyx.InferenceSession(model)
        sizes.append(len(lookup.TABLES))
    assert sizes == [1, 2, 3, 4, 1]  # (the fifth would pass 1200 bytes: emptied first)
