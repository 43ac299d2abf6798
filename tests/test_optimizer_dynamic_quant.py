"""MatMulIntegerToFloatFusion (onyx/optimizer/dynamic_quant.py): a dynamically quantized MatMul's
MatMulInteger -> Cast -> Mul [-> Add] becomes com.microsoft MatMulIntegerToFloat, and with a
DynamicQuantizeLinear read by it alone DynamicQuantizeMatMul; outputs keep every bit, in onyx
(numpy and native) and against onnxruntime running the unfused model."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

import onyx
from onyx import ir

HERE = os.path.dirname(__file__)
MODELS = os.path.join(HERE, "models")
RNG = np.random.default_rng(0)


def _session(model, level: str) -> onyx.InferenceSession:
    so = onyx.SessionOptions()
    so.graph_optimization_level = getattr(onyx.GraphOptimizationLevel, level)
    return onyx.InferenceSession(model, so)


def _tokens(model: ir.Model) -> dict:
    feeds = {}
    for v in model.graph.inputs:
        shape = [d if isinstance(d, int) else 6 for d in v.shape]
        feeds[v.name] = RNG.integers(0, 50, size=shape).astype(np.int64)
    return feeds


@pytest.mark.parametrize("name", ["bert_torchscript_op17", "gpt_dynamo_op18"])
def test_dynamic_transformers_fuse_to_the_bit(name, monkeypatch):
    q = onyx.quantize(os.path.join(MODELS, name + ".onnx"), mode="dynamic")
    stats: dict = {}
    fused = Counter(n.op_type for n in onyx.optimize(q, stats=stats).graph)
    assert stats.get("MatMulIntegerToFloatFusion", 0) >= 4
    assert fused["MatMulInteger"] == 0
    assert fused["DynamicQuantizeMatMul"] + fused["MatMulIntegerToFloat"] >= 4
    feeds = _tokens(q)
    want = _session(q, "ORT_DISABLE_ALL").run(None, feeds)
    for native in ("1", "0"):
        monkeypatch.setenv("ONYX_NATIVE", native)
        got = _session(q, "ORT_ENABLE_EXTENDED").run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def _chain(
    bias: bool, cast_to: int = ir.DataType.FLOAT, scale_is_output: bool = False, relu: bool = False
):
    """x -> DynamicQuantizeLinear -> MatMulInteger(W) -> Cast -> Mul(x_scale * w_scale) [+ b]
    [-> Relu]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = RNG.integers(-127, 128, size=(16, 8)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.zeros(8, np.int8), "wz"),
             numpy_helper.from_array(RNG.uniform(0.01, 0.02, 8).astype(np.float32), "ws"),
             numpy_helper.from_array(RNG.uniform(-1, 1, 8).astype(np.float32), "b")]  # fmt: skip
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=int(cast_to)),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Mul", ["accf", "s"], ["y0"]),
    ]
    if bias:
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y"]))
    out = "y" if bias else "y0"
    if relu:
        nodes.append(helper.make_node("Relu", [out], ["r"]))
        out = "r"
    elem = TensorProto.DOUBLE if cast_to == ir.DataType.DOUBLE else TensorProto.FLOAT
    outputs = [helper.make_tensor_value_info(out, elem, [3, 8])]
    if scale_is_output:
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [8]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                              [3, 16])], outputs, inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.checker.check_model(model) or model.SerializeToString()


@pytest.mark.parametrize("bias", [False, True])
def test_chain_fuses_and_matches_onnxruntime(bias):
    ort = pytest.importorskip("onnxruntime")
    model = _chain(bias)
    ops = [n.op_type for n in onyx.optimize(onyx.loads(model)).graph]
    assert ops == ["DynamicQuantizeMatMul"]
    x = RNG.uniform(-3, 2, size=(3, 16)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so).run(None, {"x": x})[0]
    got = _session(model, "ORT_ENABLE_EXTENDED").run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_chain_left_alone_when_it_cannot_fuse():
    double = [n.op_type for n in onyx.optimize(onyx.loads(_chain(True, ir.DataType.DOUBLE))).graph]
    assert "MatMulInteger" in double  # a Cast to double: not MatMulIntegerToFloat's float
    shared = onyx.optimize(onyx.loads(_chain(True, scale_is_output=True)))
    assert "MatMulInteger" in [n.op_type for n in shared.graph]  # the scale is an output


@pytest.mark.parametrize("bias", [False, True])
def test_relu_fuses_into_the_epilogue_and_matches_onnxruntime(bias, monkeypatch):
    """DynamicQuantizeMatMul -> Relu: one ai.onyx DynamicQuantizeMatMulRelu, its bits those of
    onnxruntime's unfused chain (native epilogue and numpy path); the saved model's function
    body runs in onnxruntime too (the bias omitted or not)."""
    ort = pytest.importorskip("onnxruntime")
    model = _chain(bias, relu=True)
    optimized = onyx.optimize(onyx.loads(model))
    assert [n.op_type for n in optimized.graph] == ["DynamicQuantizeMatMulRelu"]
    x = RNG.uniform(-3, 2, size=(3, 16)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so).run(None, {"x": x})[0]
    assert (want == 0).any() and (want > 0).any()
    for native in ("1", "0"):
        monkeypatch.setenv("ONYX_NATIVE", native)
        got = _session(model, "ORT_ENABLE_EXTENDED").run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
    saved = ort.InferenceSession(onyx.dumps(optimized), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(saved.run(None, {"x": x})[0], want)


def test_dynamic_matmul_relu_keeps_the_relu_bits():
    """The epilogue's max keeps a -0 (a zero sum times a negative scale) and Relu's zeros,
    as Relu(DynamicQuantizeMatMul) does; a NaN goes to the numpy path, as unfused."""
    from onyx.runtime.kernels import contrib
    from onyx.runtime.kernels.activation import relu

    b = RNG.integers(-127, 128, size=(32, 24)).astype(np.int8)
    b[:, 0] = 0  # (column 0 sums to zero: times its negative scale, -0)
    b.flags.writeable = False
    scale = RNG.uniform(-0.02, 0.02, 24).astype(np.float32)
    scale[0] = -0.01
    scale.flags.writeable = False
    zero_point = np.zeros(24, np.int8)
    zero_point.flags.writeable = False
    x = RNG.uniform(-2, 2, size=(5, 32)).astype(np.float32)
    with_nan = np.where(np.arange(32) == 3, np.nan, x).astype(np.float32)
    for a, minus_zeros in ((x, True), (with_nan, False)):
        want = relu(contrib.dynamic_quantize_matmul(a, b, scale, zero_point))
        got = contrib.dynamic_quantize_matmul_relu(a, b, scale, zero_point)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        assert np.signbit(got[:, 0]).all() == minus_zeros


def _three_products(a, b, bb, bs, bz, c, x, trans_b) -> list:
    from onyx.runtime.kernels import contrib

    zp7, zp9 = np.array(7, np.uint8), np.array(9, np.uint8)
    return [
        contrib.q_gemm(a, np.float32(0.02), zp7, b, bs, bz, c, np.float32(0.3), zp9,
                       transB=trans_b),
        contrib.matmul_integer_to_float(a, bb, np.float32(0.02), bs, zp7, bz,
                                        c.astype(np.float32)),
        contrib.dynamic_quantize_matmul(x, bb, bs, bz),
    ]  # fmt: skip


@pytest.mark.parametrize("trans_b", [0, 1])
def test_small_products_through_float_blas_keep_the_int32_bits(trans_b, monkeypatch):
    """QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul take a small A with a constant B
    through float32 BLAS (contrib._small_product): the same bits as the int8 GEMM path."""
    from onyx.runtime.kernels import contrib

    rng = np.random.default_rng(4)
    for k in (1, 96, 517, 600):  # (600: beyond the exact bound with |B| = 127, not taken)
        a = rng.integers(0, 256, (5, k)).astype(np.uint8)
        b = rng.integers(-127, 128, (24, k) if trans_b else (k, 24)).astype(np.int8)
        b[0, 0] = -127
        bb = b.T.copy() if trans_b else b.copy()
        b.flags.writeable = bb.flags.writeable = False  # (constants, as a session hands them)
        bz, bs = np.zeros(24, np.int8), rng.uniform(0.001, 0.01, 24).astype(np.float32)
        c = rng.integers(-(10**6), 10**6, 24).astype(np.int32)
        x = rng.uniform(-4, 3, (2, 5, k)).astype(np.float32)
        fast = _three_products(a, b, bb, bs, bz, c, x, trans_b)
        with monkeypatch.context() as m:
            m.setattr(contrib, "_small_product", lambda *args: None)
            slow = _three_products(a, b, bb, bs, bz, c, x, trans_b)
        for got, want in zip(fast, slow):
            np.testing.assert_array_equal(got, want)


def _conv_chain(bias: bool, group: int = 1, w_type=np.uint8, kernel=3, strides=1, dilations=1):
    """x -> DynamicQuantizeLinear -> ConvInteger(W) -> Cast -> Mul(x_scale * w_scale) [+ b]:
    onnxruntime's dynamic quantizer's Conv (uint8 weights, zero point near 128)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    C, M = 4, 8
    info = np.iinfo(w_type)
    w = RNG.integers(info.min, info.max + 1, size=(M, C // group, kernel, kernel)).astype(w_type)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(127 if w_type == np.uint8 else 3, w_type), "wz"),
             numpy_helper.from_array(np.array(0.013, np.float32), "ws"),
             numpy_helper.from_array(RNG.uniform(-1, 1, (M, 1, 1)).astype(np.float32), "b")]  # fmt: skip
    pads = [kernel // 2] * 4
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node(
            "ConvInteger",
            ["xq", "w", "xz", "wz"],
            ["acc"],
            pads=pads,
            group=group,
            strides=[strides] * 2,
            dilations=[dilations] * 2,
        ),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "s"], ["y0"]),
    ]
    if bias:
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y"]))
    out = "y" if bias else "y0"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 9, 7])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", M, "H", "W"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.checker.check_model(model) or model.SerializeToString()


@pytest.mark.parametrize(
    "bias, group, w_type, kernel",
    [
        (True, 1, np.uint8, 3),  # the implicit GEMM, its float epilogue
        (False, 1, np.uint8, 3),  # ConvIntegerScaled
        (True, 1, np.int8, 1),
        (True, 2, np.uint8, 3),  # grouped: ConvInteger's kernel, then the scale and bias
        (True, 4, np.uint8, 3),  # depthwise
        (False, 4, np.uint8, 3),  # depthwise, ConvIntegerScaled
        (True, 1, np.uint8, 1),  # pointwise, uint8 weights: float32 BLAS (exact sums)
    ],
)
def test_conv_chain_fuses_to_the_bit(bias, group, w_type, kernel, tmp_path, monkeypatch):
    """ConvIntegerToFloatFusion: one ai.onyx node, the unfused graph's bits (native and
    numpy), and the saved model (a model-local function) runs in onnxruntime to them too."""
    ort = pytest.importorskip("onnxruntime")
    model = _conv_chain(bias, group, w_type, kernel)
    optimized = onyx.optimize(onyx.loads(model))
    ops = [n.op_type for n in optimized.graph]
    assert ops == [
        "DynamicQuantizeLinear",
        "Mul",
        "ConvIntegerToFloat" if bias else "ConvIntegerScaled",
    ]
    # inputs of other zero points (DynamicQuantizeLinear's, per call), the kept set-up's too
    xs = [RNG.uniform(lo, hi, size=(2, 4, 9, 7)).astype(np.float32) for lo, hi in
          ((-3, 2), (-0.5, 4), (-3, 2), (0, 1))]  # fmt: skip
    unfused = _session(model, "ORT_DISABLE_ALL")
    wants = [unfused.run(None, {"x": x})[0] for x in xs]
    for native in ("1", "0"):
        monkeypatch.setenv("ONYX_NATIVE", native)
        fused = _session(model, "ORT_ENABLE_EXTENDED")
        for x, want in zip(xs, wants):
            assert fused.run(None, {"x": x})[0].tobytes() == want.tobytes()
    x, want = xs[0], wants[0]
    path = tmp_path / "fused.onnx"
    onyx.save(optimized, path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


@pytest.mark.parametrize("strides, dilations", [(2, 1), (1, 2), (2, 2)])
def test_small_strided_and_dilated_convs_keep_the_bits(strides, dilations):
    """A small conv's float32 GEMM of its windows' columns (kernels/conv_to_float.py), strided
    or dilated, padded: the unfused graph's bits, x's zero point changing from run to run."""
    model = _conv_chain(True, 1, np.uint8, 3, strides, dilations)
    unfused = _session(model, "ORT_DISABLE_ALL")
    fused = _session(model, "ORT_ENABLE_EXTENDED")
    for lo, hi in ((-3, 2), (-0.5, 4), (0, 1)):
        x = RNG.uniform(lo, hi, size=(2, 4, 9, 7)).astype(np.float32)
        want = unfused.run(None, {"x": x})[0]
        assert fused.run(None, {"x": x})[0].tobytes() == want.tobytes()


@pytest.mark.parametrize("group, kernel", [(4, 3), (1, 1), (1, 3)])
def test_conv_chain_sets_up_once_per_shape(group, kernel, monkeypatch):
    """A bound ConvIntegerToFloat (kernels/conv_to_float.py) makes its set-up in the first
    run only, though x's zero point changes from run to run (a depthwise conv's native set-up
    was made anew at every call, twice), and keeps the unfused graph's bits."""
    from onyx.runtime import native
    from onyx.runtime.kernels import conv_to_float, quantized_conv

    if kernel != 1 and not native.available():  # (the numpy path sets nothing up)
        pytest.skip("the native library is not loaded")
    made = Counter()
    for module, name in ((native, "IntPlaneConv"), (quantized_conv, "implicit_integer_conv")):
        original = getattr(module, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            made[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    monkeypatch.setattr(
        conv_to_float, "implicit_integer_conv", quantized_conv.implicit_integer_conv
    )
    model = _conv_chain(True, group, np.uint8, kernel)
    unfused = _session(model, "ORT_DISABLE_ALL")
    fused = _session(model, "ORT_ENABLE_EXTENDED")
    xs = [RNG.uniform(lo, hi, size=(1, 4, 9, 7)).astype(np.float32) for lo, hi in
          ((-3, 2), (-0.5, 4), (0, 1), (-2, -1))]  # fmt: skip
    wants = [unfused.run(None, {"x": x})[0] for x in xs]
    for k, (x, want) in enumerate(zip(xs, wants)):
        assert fused.run(None, {"x": x})[0].tobytes() == want.tobytes()
        if k == 0:
            made.clear()  # (the first run's set-ups)
    assert not made, made


def _flattened_product(dynamic: bool, restore: list[int]) -> bytes:
    """x [S, N, 16] -> Reshape [-1, 16] -> a product by a constant [16, 8] (the dynamically
    quantized chain, or a float MatMul) + bias -> Reshape ``restore``: nn.Linear inside
    PyTorch's nn.MultiheadAttention."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array([-1, 16], np.int64), "rows"),
        numpy_helper.from_array(np.array(restore, np.int64), "back"),
        numpy_helper.from_array(RNG.uniform(-1, 1, 8).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["flat"])]
    if dynamic:
        w = RNG.integers(-127, 128, size=(16, 8)).astype(np.int8)
        inits += [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.zeros(8, np.int8), "wz"),
            numpy_helper.from_array(RNG.uniform(0.01, 0.02, 8).astype(np.float32), "ws"),
        ]
        nodes += [
            helper.make_node("DynamicQuantizeLinear", ["flat"], ["xq", "xs", "xz"]),
            helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
            helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["xs", "ws"], ["s"]),
            helper.make_node("Mul", ["accf", "s"], ["y0"]),
        ]
    else:
        inits.append(numpy_helper.from_array(RNG.uniform(-1, 1, (16, 8)).astype(np.float32), "w"))
        nodes.append(helper.make_node("MatMul", ["flat", "w"], ["y0"]))
    nodes += [
        helper.make_node("Add", ["y0", "b"], ["y1"]),
        helper.make_node("Reshape", ["y1", "back"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, "N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("dynamic", [True, False])
def test_flattened_product_runs_on_the_unflattened_input(dynamic, monkeypatch):
    """Reshape to rows -> product -> Reshape back: the product reads x itself, to the bit (the
    rows and their order are the same), in onyx's paths and in onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    model = _flattened_product(dynamic, [5, -1, 8])
    optimized = onyx.optimize(onyx.loads(model))
    ops = [n.op_type for n in optimized.graph]
    assert ops == ["DynamicQuantizeMatMul" if dynamic else "MatMulAdd"], ops
    x = RNG.uniform(-3, 2, size=(5, 3, 16)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so).run(None, {"x": x})[0]
    for native in ("1", "0"):
        monkeypatch.setenv("ONYX_NATIVE", native)
        got = _session(model, "ORT_ENABLE_EXTENDED").run(None, {"x": x})[0]
        assert got.shape == (5, 3, 8)
        if dynamic:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    saved = ort.InferenceSession(onyx.dumps(optimized), so, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("restore", [[-1, 5, 8], [5, 3, 8], [5, -1, 2, 4]])
def test_flattened_product_left_alone_when_the_reshape_does_not_restore(restore):
    """A second Reshape that does not give back x's leading dims (another order, a dim fixed
    where x's is dynamic, another rank): both Reshapes stay."""
    ops = [n.op_type for n in onyx.optimize(onyx.loads(_flattened_product(True, restore))).graph]
    assert ops.count("Reshape") == 2, ops


@pytest.mark.parametrize("relu", [False, True])
def test_bound_dynamic_matmul_matches_the_kernel(relu):
    """The bound step (registry.binds) of DynamicQuantizeMatMul[Relu] gives the kernel's bits
    run after run, a NaN in A included (the kernel's numpy paths), on 3-D A."""
    from onyx.runtime.kernels import contrib

    model = _flattened_product(True, [5, -1, 8])  # (3-D A after FlattenedMatMulFusion)
    if relu:
        model = _chain(True, relu=True)
    session = _session(model, "ORT_ENABLE_EXTENDED")
    (node,) = list(session.plan.graph)
    assert node.op_type == ("DynamicQuantizeMatMulRelu" if relu else "DynamicQuantizeMatMul")
    kernel = contrib.dynamic_quantize_matmul_relu if relu else contrib.dynamic_quantize_matmul
    weights = [session.plan.graph.initializers[v.name].const_value.numpy() for v in node.inputs[1:]]
    shape = (3, 16) if relu else (5, 3, 16)
    for i in range(3):
        x = RNG.uniform(-3, 2, size=shape).astype(np.float32)
        if i == 2:
            x.flat[7] = np.nan
        got = session.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, kernel(x, *weights))


def test_flattened_product_passes_over_a_reshape_before_opset_5():
    """A Reshape before opset 5 holds its shape as an attribute (one input): the pass leaves
    it alone instead of reading a target input it does not have."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(RNG.uniform(-1, 1, (16, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Reshape", ["x"], ["flat"], shape=[-1, 16]),
        helper.make_node("MatMul", ["flat", "w"], ["y0"]),
        helper.make_node("Reshape", ["y0"], ["y"], shape=[5, -1, 8]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 4)])
    model.ir_version = 3
    ops = [n.op_type for n in onyx.optimize(onyx.loads(model.SerializeToString())).graph]
    assert ops == ["Reshape", "MatMul", "Reshape"], ops


def test_dynamic_matmul_of_rows_another_length_than_b_is_not_native():
    """A's rows shorter than B's: not the native call (it would read past A's rows), the
    numpy path, which reports the mismatch."""
    from onyx.runtime.kernels import contrib

    b = RNG.integers(-127, 128, size=(16, 8)).astype(np.int8)
    scale = np.full(8, 0.01, np.float32)
    b.flags.writeable = scale.flags.writeable = False
    a = RNG.uniform(-1, 1, (3, 12)).astype(np.float32)
    with pytest.raises(ValueError):
        contrib.dynamic_quantize_matmul(a, b, scale)


@pytest.mark.parametrize(
    "kernel, strides, dilations, pads",
    [((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 2), (0, 1)), ((1, 3), (2, 2), (2, 1), (2, 0))],
)  # fmt: skip
def test_window_sums_match_the_taps_one_by_one(kernel, strides, dilations, pads):
    """integer_conv.window_sums (the split weights' rank-1 term: each output pixel's window
    sum of x - x_zp, padding adding 0) against every tap summed one by one."""
    from onyx.runtime.kernels.integer_conv import window_sums

    x = RNG.integers(0, 256, size=(2, 5, 11, 9)).astype(np.uint8)
    zx, (kh, kw), (sh, sw), (dh, dw), (top, left) = 77, kernel, strides, dilations, pads
    H, W = x.shape[2:]
    Hp, Wp = H + 2 * top, W + 2 * left
    oh, ow = (Hp - (kh - 1) * dh - 1) // sh + 1, (Wp - (kw - 1) * dw - 1) // sw + 1
    geo = {"out_shape": (oh, ow), "strides": strides, "dilations": dilations}
    got = window_sums(x, zx, kernel, geo, (2, Hp, Wp, 8), (top, left), slice(0, H), slice(0, W))
    plane = np.zeros((2, Hp, Wp), np.int64)
    plane[:, top : top + H, left : left + W] = x.astype(np.int64).sum(1) - 5 * zx
    want = np.zeros((2, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    want[:, i, j] += plane[:, i * sh + a * dh, j * sw + b * dw]
    np.testing.assert_array_equal(got, want.reshape(-1))


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("size", [6, 32])  # (a small conv's float32 GEMM; the implicit GEMM)
def test_bound_conv_to_float_takes_any_layout(with_bias, size):
    """A bound ConvIntegerToFloat / ConvIntegerScaled set up on a contiguous x and called with
    x strided (the signature is shapes and types only) answers as the kernel as written."""
    from onyx.runtime import native
    from onyx.runtime.kernels import conv_to_float as ctf

    if size == 32 and not native.int8_gemm_ok(16 * 9):  # (no implicit GEMM: nothing binds)
        pytest.skip("the native int8 GEMM is not here")
    kernel = ctf.conv_integer_to_float if with_bias else ctf.conv_integer_scaled
    x = RNG.integers(0, 256, size=(1, 16, size, 2 * size)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(16, 16, 3, 3)).astype(np.uint8)
    wz, xz, scale = np.array(131, np.uint8), np.array(77, np.uint8), np.array(0.01, np.float32)
    bias = RNG.uniform(-1, 1, (16, 1, 1)).astype(np.float32)
    for a in (w, wz, bias):
        a.flags.writeable = False
    attrs = {"auto_pad": "NOTSET", "dilations": [1, 1], "group": 1, "kernel_shape": [3, 3],
             "pads": [1, 1, 1, 1], "strides": [1, 1]}  # fmt: skip
    inputs = (np.ascontiguousarray(x[..., ::2]), w, xz, wz, scale) + ((bias,) if with_bias else ())
    constant = (False, True, False, True, False, True)[: len(inputs)]
    call = kernel.bind(inputs, attrs, constant)  # (registry.binds' make)
    assert call is not None
    for xs in (x[..., ::2], np.ascontiguousarray(x[..., ::2])):
        args = (xs, *inputs[1:])
        np.testing.assert_array_equal(call(*args), kernel(*args, **attrs))
