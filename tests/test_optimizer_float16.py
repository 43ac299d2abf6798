"""Float16 models compute in float32 in a session (onyx/optimizer/float16.py), as onnxruntime's
CPU provider does: parity with onnxruntime within float16's precision (native and numpy paths),
rounding only where a value leaves the float32 region, float16 arithmetic when the pass is
disabled, and written models left alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.ir.dtypes import DataType
from onyx.optimizer import optimize
from onyx.runtime import native

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _w(name: str, *shape: int, scale: float = 0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float16), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def cnn(keep_io_types: bool):
    """Conv/BN-free ResNet-ish block, depthwise conv, pooling and a Gemm head."""
    io = F32 if keep_io_types else F16
    nodes = [
        helper.make_node("Conv", ["x16", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y16"], transB=1),
    ]
    inits = [_w("w1", 8, 3, 3, 3), _w("b1", 8), _w("wd", 8, 1, 3, 3), _w("wg", 5, 8), _w("bg", 5)]
    inits += [
        numpy_helper.from_array(np.array(v, np.float16), n) for n, v in (("lo", 0), ("hi", 6))
    ]
    nodes, x, y = _io(nodes, keep_io_types, "x16", "y16")
    return _model(nodes, [helper.make_tensor_value_info(x, io, ["N", 3, 12, 12])],
                  [helper.make_tensor_value_info(y, io, ["N", 5])], inits)  # fmt: skip


def _io(nodes, keep_io_types: bool, x16: str, y16: str):
    """With keep_io_types the graph reads and writes float32 through Casts (what converters
    make); otherwise its inputs and outputs are float16."""
    if not keep_io_types:
        for n in nodes:
            n.input[:] = ["x" if i == x16 else i for i in n.input]
            n.output[:] = ["y" if o == y16 else o for o in n.output]
        return nodes, "x", "y"
    cast_in = helper.make_node("Cast", ["x"], [x16], to=F16)
    cast_out = helper.make_node("Cast", [y16], ["y"], to=F32)
    return [cast_in, *nodes, cast_out], "x", "y"


def attention(keep_io_types: bool):
    """One self-attention block: projections, Reshape/Transpose heads, Softmax, LayerNorm."""
    io = F32 if keep_io_types else F16
    i64 = TensorProto.INT64
    shape_heads = numpy_helper.from_array(np.array([0, 0, 2, 8], np.int64), "heads")
    shape_back = numpy_helper.from_array(np.array([0, 0, 16], np.int64), "back")
    nodes = [
        helper.make_node("MatMul", ["x16", "wq"], ["q"]),
        helper.make_node("MatMul", ["x16", "wk"], ["k"]),
        helper.make_node("Reshape", ["q", "heads"], ["qh"]),
        helper.make_node("Reshape", ["k", "heads"], ["kh"]),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("Transpose", ["x16"], ["xt"], perm=[0, 1, 2]),
        helper.make_node("Reshape", ["xt", "heads"], ["vh"]),
        helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["probs", "vt"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "back"], ["merged"]),
        helper.make_node("Add", ["merged", "x16"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y16"], axis=-1),
    ]
    inits = [_w("wq", 16, 16), _w("wk", 16, 16), _w("gamma", 16, scale=1.0), _w("beta", 16)]
    inits += [numpy_helper.from_array(np.array(0.35, np.float16), "scale"), shape_heads, shape_back]
    del i64
    nodes, x, y = _io(nodes, keep_io_types, "x16", "y16")
    return _model(nodes, [helper.make_tensor_value_info(x, io, ["N", 6, 16])],
                  [helper.make_tensor_value_info(y, io, ["N", 6, 16])], inits)  # fmt: skip


def conv1d(keep_io_types: bool):
    """A 1-channel signal through Conv1d, ReLU and MaxPool, then a mean."""
    io = F32 if keep_io_types else F16
    nodes = [
        helper.make_node("Conv", ["x16", "w", "b"], ["c"], strides=[2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[4], strides=[4]),
        helper.make_node("ReduceMean", ["p"], ["y16"], axes=[2], keepdims=0),
    ]
    nodes, x, y = _io(nodes, keep_io_types, "x16", "y16")
    return _model(nodes, [helper.make_tensor_value_info(x, io, ["N", 1, 400])],
                  [helper.make_tensor_value_info(y, io, ["N", 6])],
                  [_w("w", 6, 1, 9), _w("b", 6)], opset=17)  # fmt: skip


MODELS = {"cnn": (cnn, (2, 3, 12, 12)), "attention": (attention, (2, 6, 16)),
          "conv1d": (conv1d, (1, 1, 400))}  # fmt: skip


def _feeds(model, shape):
    dtype = np.float32 if model.graph.input[0].type.tensor_type.elem_type == F32 else np.float16
    return {"x": np.random.default_rng(3).uniform(-1, 1, shape).astype(dtype)}


def _one_step(reference: np.ndarray) -> float:
    """float16's spacing at the output's largest magnitude: onnxruntime rounds inside the
    region too (before the data movement and LayerNormalization it keeps in float16), so an
    element's error is its inputs' rounding carried through, at the tensor's scale."""
    return float(np.spacing(np.float16(np.abs(reference).max())))


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["f32-io", "f16-io"])
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("numpy_path", [False, True], ids=["native", "numpy"])
def test_float16_model_matches_onnxruntime_within_one_step(name, keep_io_types, numpy_path):
    build, shape = MODELS[name]
    data = build(keep_io_types).SerializeToString()
    feeds = _feeds(build(keep_io_types), shape)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    if numpy_path:
        with native.disabled():
            got = onyx.InferenceSession(data).run(None, feeds)[0]
    else:
        got = onyx.InferenceSession(data).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= _one_step(want)).all(), f"max error {err.max()}"


def _compute_nodes_in_float16(model) -> list[str]:
    """Nodes of the session's model that compute in float16 (a Cast to it rounds only)."""
    out = []
    for n in model.graph:
        if n.op_type == "Cast":
            continue
        if any(v is not None and v.dtype == DataType.FLOAT16 for v in (*n.inputs, *n.outputs)):
            out.append(n.op_type)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_session_model_computes_nothing_in_float16(name):
    m = onyx.load(MODELS[name][0](False).SerializeToString())
    session_model = optimize(m, "all", for_session=True)
    assert _compute_nodes_in_float16(session_model) == []
    casts = [n for n in session_model.graph if n.op_type == "Cast"]
    # float16 in: one exact Cast up; out: the one rounding, onto the graph output itself
    assert [DataType(n.attr("to")) for n in casts] == [DataType.FLOAT, DataType.FLOAT16]
    assert casts[-1].outputs[0] is session_model.graph.outputs[0]
    assert session_model.graph.outputs[0].dtype == DataType.FLOAT16
    assert all(
        v.const_value.dtype != DataType.FLOAT16 for v in session_model.graph.initializers.values()
    )


def test_written_model_and_disabled_pass_keep_float16():
    m = onyx.load(cnn(False).SerializeToString())
    assert _compute_nodes_in_float16(optimize(m, "all")) != []  # onyx optimize writes it
    assert _compute_nodes_in_float16(
        optimize(m, "all", ["InsertCastTransformer"], for_session=True)
    )


def test_disabled_pass_computes_in_float16_and_overflows():
    """x * x overflows float16 (65504): in float32 then rounded at the output it does too, but
    x * x / x comes back in float32 and not in float16."""
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Div", ["sq", "x"], ["y"]),
    ]
    data = _model(nodes, [helper.make_tensor_value_info("x", F16, [2])],
                  [helper.make_tensor_value_info("y", F16, [2])], []).SerializeToString()  # fmt: skip
    feeds = {"x": np.array([300, 2], np.float16)}
    np.testing.assert_array_equal(onyx.InferenceSession(data).run(None, feeds)[0], [300, 2])
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(want, [300, 2])
    fp16 = onyx.InferenceSession(data, disabled_optimizers=["InsertCastTransformer"])
    assert np.isinf(fp16.run(None, feeds)[0][0])


def test_nonzero_reads_the_float32_value_and_intermediates_fetch_as_float32():
    """NonZero computes in float32 as in onnxruntime: 1e-4 squared is not zero there (it is in
    float16). An intermediate fetched by name is its float32 value."""
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("NonZero", ["sq"], ["nz"]),
        helper.make_node("Add", ["sq", "x"], ["y"]),
    ]
    graph = _model(nodes, [helper.make_tensor_value_info("x", F16, [3])],
                   [helper.make_tensor_value_info("y", F16, [3]),
                    helper.make_tensor_value_info("nz", TensorProto.INT64, [1, None])], [])  # fmt: skip
    data = graph.SerializeToString()
    feeds = {"x": np.array([1e-4, 0, 3], np.float16)}
    sess = onyx.InferenceSession(data)
    y, nz = sess.run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(nz, want[1])
    np.testing.assert_array_equal(nz, [[0, 2]])  # 1e-8, 0 in float16
    np.testing.assert_array_equal(y, want[0])
    (sq,) = sess.run(["sq"], feeds)
    assert sq.dtype == np.float32 and sq[0] > 0


def test_value_leaving_the_region_is_rounded():
    """A node outside the table (here an If, which holds a subgraph) reads the float16
    rounding of a float32-computed value: 1e-8 is 0 in float16."""
    branch = helper.make_graph([helper.make_node("Identity", ["sq"], ["out"])], "b", [],
                               [helper.make_tensor_value_info("out", F16, [2])])  # fmt: skip
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("If", ["cond"], ["picked"], then_branch=branch, else_branch=branch),
        helper.make_node("Mul", ["picked", "big"], ["y"]),
    ]
    big = numpy_helper.from_array(np.array(1e4, np.float16), "big")
    cond = numpy_helper.from_array(np.array(True), "cond")
    data = _model(nodes, [helper.make_tensor_value_info("x", F16, [2])],
                  [helper.make_tensor_value_info("y", F16, [2])], [big, cond]).SerializeToString()  # fmt: skip
    y = onyx.InferenceSession(data).run(None, {"x": np.array([1e-4, 1], np.float16)})[0]
    np.testing.assert_array_equal(y, [0, 1e4])


def test_cast_from_integers_to_float16_feeding_the_region_rounds_nothing():
    """onnxruntime turns Cast(int64 -> float16) -> Add into Cast(int64 -> float) -> Add (its
    duplicate-Cast removal): 2049 is not rounded to 2048 before the Add. So does onyx."""
    nodes = [
        helper.make_node("Cast", ["i"], ["h"], to=F16),
        helper.make_node("Add", ["h", "x"], ["y"]),
    ]
    data = _model(nodes, [helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
                          helper.make_tensor_value_info("x", F16, [2])],
                  [helper.make_tensor_value_info("y", F16, [2])], []).SerializeToString()  # fmt: skip
    feeds = {"i": np.array([2049, 3], np.int64), "x": np.array([0.5, 0.25], np.float16)}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = onyx.InferenceSession(data).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, [2050, 3.25])  # 2049.5 rounded once, at the end


def _zoo_fp16() -> list[str]:
    import json
    from pathlib import Path

    manifest = Path(__file__).parent / "models" / "zoo" / "manifest.json"
    if not manifest.exists():
        return []
    return sorted(k for k, v in json.loads(manifest.read_text()).items() if v["kind"] == "fp16")


@pytest.mark.parametrize("numpy_path", [False, True], ids=["native", "numpy"])
@pytest.mark.parametrize("name", _zoo_fp16())
def test_exporter_zoo_float16_models_within_one_step_of_onnxruntime(name, numpy_path):
    """The exporter zoo's float16 conversions (converters' keep_io_types, blocked ops) against
    onnxruntime's stored outputs: within one float16 step of each output's magnitude (computing
    in float16 put them up to a whole step away)."""
    from test_exporter_zoo import MANIFEST, ZOO, _expected

    entry = MANIFEST[name]
    with np.load(ZOO / entry["data"], allow_pickle=True) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        expected = _expected(data)
    options = onyx.SessionOptions()
    options.intra_op_num_threads = 1
    if numpy_path:
        with native.disabled():
            actual = onyx.InferenceSession(str(ZOO / entry["file"]), options).run(None, feeds)
    else:
        actual = onyx.InferenceSession(str(ZOO / entry["file"]), options).run(None, feeds)
    for got, want in zip(actual, expected):
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
        assert err <= _one_step(want), f"{err} > one step {_one_step(want)}"


def test_embedding_table_stays_float16():
    """A Gather from a float16 table keeps the table (and its size): only the gathered rows
    are converted, as onnxruntime's float16 Gather does."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float16).reshape(6, 2), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"]),
             helper.make_node("Mul", ["rows", "rows"], ["y"])]  # fmt: skip
    m = onyx.load(_model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                         [helper.make_tensor_value_info("y", F16, [3, 2])], [table])
                  .SerializeToString())  # fmt: skip
    session_model = optimize(m, "all", for_session=True)
    assert [n.op_type for n in session_model.graph] == ["Gather", "Cast", "Mul", "Cast"]
    assert session_model.graph.initializers["table"].const_value.dtype == DataType.FLOAT16
    y = onyx.InferenceSession(m).run(None, {"ids": np.array([5, 0, 2])})[0]
    np.testing.assert_array_equal(y, [[100, 121], [0, 1], [16, 25]])


def test_weights_widen_bit_for_bit_as_astype():
    """A float16 weight's float32 values come from a table of every bit pattern: each one,
    NaN payloads, infinities and subnormals included, is astype's bits, and so is a weight
    of every pattern shaped as a conv's (the table path) and a small one (astype's)."""
    from onyx.optimizer.float16 import TABLE_MIN, widened

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for data in (every.reshape(256, 16, 4, 4), every[:100], every[::-1][: TABLE_MIN + 1]):
        got = widened(data)
        assert got.dtype == np.float32 and got.shape == data.shape
        assert np.array_equal(got.view(np.uint32), data.astype(np.float32).view(np.uint32))


def _cast_chain(nodes, out_type):
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", F32, ["N"])], [vi("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def _cast(src, dst, to):
    return helper.make_node("Cast", [src], [dst], to=to)


CAST_CHAINS = {
    # the model's own pair: onnxruntime runs both Casts (float16 kernels), 1e30 becomes inf
    "pair": ([_cast("x", "h", F16), _cast("h", "y", F32)], F32),
    "pair_then_relu": ([_cast("x", "h", F16), _cast("h", "c", F32), helper.make_node("Relu", ["c"], ["y"])], F32),
    "pair_then_add": ([_cast("x", "h", F16), _cast("h", "c", F32), helper.make_node("Add", ["c", "x"], ["y"])], F32),
    # a Cast to float16 feeding a node onnxruntime wraps in its own Casts: no rounding
    "relu_between": ([_cast("x", "h", F16), helper.make_node("Relu", ["h"], ["r"]), _cast("r", "y", F32)], F32),
    "add_between": ([_cast("x", "h", F16), helper.make_node("Add", ["h", "h"], ["r"]), _cast("r", "y", F32)], F32),
    "relu_out16": ([_cast("x", "h", F16), helper.make_node("Relu", ["h"], ["y"])], F16),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CAST_CHAINS))
def test_casts_round_where_onnxruntime_rounds(name):
    """The model's Cast(to=float16) -> Cast(to=float) pair rounds (the lowering made the second
    Cast read the first's float32 twin: 1e30 stayed 1e30 where onnxruntime gives inf)."""
    data = _cast_chain(*CAST_CHAINS[name])
    x = {"x": np.array([1e30, 1.0001, 3.0, -7e4], np.float32)}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = onyx.InferenceSession(data).run(None, x)[0]
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (got, want)
