"""PyTorch-exported transformers on the native paths: Attention (opset 23) over 4-D heads
(attention.c), RMSNormalization, the decomposed RMSNorm's fusion and a constant causal mask
become the kernel's causal frontier. Each against the numpy oracle and onnxruntime; under
ONYX_NATIVE=0 (CI) the same tests check the numpy paths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import attention as att_kernels

F = TensorProto.FLOAT
RNG = np.random.default_rng(23)
MODELS = Path(__file__).parent / "models"


def _oracle(q, k, v, scale, causal):
    """softmax(scale q k^T [causal]) v in float64, GQA by repeating k, v heads."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    s = scale * q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    if causal:
        s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "shape",  # (batch, q heads, kv heads, q rows, keys, head size)
    [(2, 4, 4, 16, 16, 64), (1, 4, 2, 5, 9, 16), (3, 2, 2, 7, 7, 12), (1, 2, 1, 1, 4, 32)],
)
def test_heads_attention_matches_oracle(shape, causal):
    b, hq, hkv, s, t, d = shape
    q = RNG.standard_normal((b, s, hq, d), np.float32).transpose(0, 2, 1, 3)  # (strided heads)
    k = RNG.standard_normal((b, hkv, t, d), np.float32)
    v = RNG.standard_normal((b, hkv, t, d), np.float32)
    y = native.heads_attention(q, k, v, 0.3, causal)
    if not native.gqa_ok():
        assert y is None
        return
    np.testing.assert_allclose(y, _oracle(q, k, v, 0.3, causal), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias_shape", [(2, 1, 1, 9), (2, 4, 1, 9), (1, 1, 1, 9)])
def test_heads_attention_key_bias(bias_shape):
    """A padding mask per key (per entry, per query head or shared) added to the scores."""
    q = RNG.standard_normal((2, 4, 5, 16), np.float32)
    k, v = RNG.standard_normal((2, 2, 2, 9, 16), np.float32)
    bias = np.where(RNG.random(bias_shape) < 0.3, -1e4, 0).astype(np.float32)
    bias[..., 0] = 0
    y = native.heads_attention(q, k, v, 0.25, False, bias)
    if not native.gqa_ok():
        assert y is None
        return
    group = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    s = 0.25 * q.astype(np.float64) @ np.swapaxes(group[0], -1, -2) + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ group[1]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def _masked_block(mask_shape) -> bytes:
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Add", ["ss", "m"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "masked",
        [helper.make_tensor_value_info(n, F, ["B", 2, 6, 8]) for n in "qkv"]
        + [helper.make_tensor_value_info("m", F, None)],  # (a shape inference lost)
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array(0.35, np.float32), "scale")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    "mask_shape", [(3, 1, 1, 6), (3, 2, 1, 6), (3, 1, 6, 6), (6,), (3, 1, 6, 1)]
)
def test_masked_heads_attention(mask_shape):
    """Below opset 23 a float mask of any shape: MaskedHeadsAttention (the native kernel for a
    mask per key, numpy's broadcast otherwise) as the unfused graph and onnxruntime."""
    m = _masked_block(mask_shape)
    opt = onyx.optimize(onyx.loads(m))
    assert [n.op_type for n in opt.graph] == ["MaskedHeadsAttention"]
    feeds = {n: RNG.standard_normal((3, 2, 6, 8), np.float32) for n in "qkv"}
    feeds["m"] = np.where(RNG.random(mask_shape) < 0.3, -1e4, 0).astype(np.float32)
    if mask_shape[-1] == 1:  # (whole query rows at float32's minimum: a uniform softmax)
        feeds["m"][:, :, ::2] = np.finfo(np.float32).min
    else:
        feeds["m"][..., 0] = 0
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(
        onyx.InferenceSession(m).run(None, feeds)[0], ref, rtol=1e-5, atol=1e-5
    )
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, feeds)[0], ref, rtol=1e-5, atol=1e-5)


def test_heads_attention_declines():
    """More query rows than keys, mismatched head sizes or float64: the numpy path's."""
    q = np.zeros((1, 2, 5, 16), np.float32)
    assert native.heads_attention(q, q[:, :, :3], q[:, :, :3], 1.0, False) is None
    assert native.heads_attention(q, q[..., :8], q[..., :8], 1.0, False) is None
    assert native.heads_attention(q.astype(np.float64), q, q, 1.0, False) is None


def _attention_node_model(causal: int, q_heads=4, kv_heads=4) -> bytes:
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=causal)
    g = helper.make_graph(
        [node],
        "a",
        [
            helper.make_tensor_value_info("q", F, ["B", q_heads, "S", 32]),
            helper.make_tensor_value_info("k", F, ["B", kv_heads, "T", 32]),
            helper.make_tensor_value_info("v", F, ["B", kv_heads, "T", 32]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    return m.SerializeToString()


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_op_4d_matches_onnxruntime(causal):
    m = _attention_node_model(causal)
    feeds = {
        "q": RNG.standard_normal((2, 4, 24, 32), np.float32),
        "k": RNG.standard_normal((2, 4, 24, 32), np.float32),
        "v": RNG.standard_normal((2, 4, 24, 32), np.float32),
    }
    got = onyx.InferenceSession(m).run(None, feeds)[0]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    y = att_kernels._attention(*feeds.values(), is_causal=causal)[0]  # the general numpy path
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-5)


def test_rms_normalization_native_matches_formula():
    x = RNG.standard_normal((3, 7, 48), np.float32)
    scale = RNG.standard_normal(48, np.float32)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-6)
    g = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", F, [3, 7, 48])],
        [helper.make_tensor_value_info("y", F, [3, 7, 48])],
        [numpy_helper.from_array(scale, "s")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString()
    got = onyx.InferenceSession(m).run(None, {"x": x})[0]
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _rms_chain_model(divide: bool, gamma: bool) -> bytes:
    """PyTorch's RMSNorm as dynamo writes it at opset 18 (Reciprocal and Mul, or Div)."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["p"]),
        helper.make_node("ReduceMean", ["p", "axes"], ["m"], keepdims=1),
        helper.make_node("Add", ["m", "eps"], ["a"]),
        helper.make_node("Sqrt", ["a"], ["r"]),
    ]
    if divide:
        nodes.append(helper.make_node("Div", ["x", "r"], ["n"]))
    else:
        nodes += [
            helper.make_node("Reciprocal", ["r"], ["inv"]),
            helper.make_node("Mul", ["x", "inv"], ["n"]),
        ]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array([-1], np.int64), "axes"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
    ]
    out = "n"
    if gamma:
        nodes.append(helper.make_node("Mul", ["n", "g"], ["y"]))
        inits.append(numpy_helper.from_array(RNG.standard_normal(40, np.float32), "g"))
        out = "y"
    g = helper.make_graph(
        nodes,
        "rms",
        [helper.make_tensor_value_info("x", F, ["B", 6, 40])],
        [helper.make_tensor_value_info(out, F, ["B", 6, 40])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("divide,gamma", [(False, True), (True, False)])
def test_rms_norm_fusion(divide, gamma):
    m = _rms_chain_model(divide, gamma)
    stats = {}
    opt = onyx.optimize(onyx.loads(m), stats=stats)
    assert [n.op_type for n in opt.graph] == ["SimplifiedLayerNormalization"]
    assert stats["RMSNormFusion"] == 1
    x = {"x": RNG.standard_normal((2, 6, 40), np.float32)}
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(onyx.InferenceSession(m).run(None, x)[0], ref, rtol=1e-5, atol=1e-6)
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, x)[0], ref, rtol=1e-5, atol=1e-6)


def test_rms_norm_fusion_leaves_other_axes():
    m = onnx.load_from_string(_rms_chain_model(False, True))
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    opt = onyx.optimize(onyx.loads(m.SerializeToString()))
    assert "SimplifiedLayerNormalization" not in [n.op_type for n in opt.graph]


def _rotary_model(opset: int, cos_shape=(6, 8)) -> bytes:
    """PyTorch's rotary embedding by halves as exported: x * cos + cat(-x2, x1) * sin."""
    split = {"num_outputs": 2} if opset >= 18 else {}
    nodes = [
        helper.make_node("Mul", ["x", "cos"], ["a"]),
        helper.make_node("Split", ["x"], ["x1", "x2"], axis=-1, **split),
        helper.make_node("Neg", ["x2"], ["n"]),
        helper.make_node("Concat", ["n", "x1"], ["c"], axis=-1),
        helper.make_node("Mul", ["c", "sin"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    tables = [
        numpy_helper.from_array(RNG.standard_normal(cos_shape, np.float32), name)
        for name in ("cos", "sin")
    ]
    g = helper.make_graph(
        nodes,
        "rot",
        [helper.make_tensor_value_info("x", F, ["B", 3, 6, 8])],
        [helper.make_tensor_value_info("y", F, ["B", 3, 6, 8])],
        tables,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize("opset,cos_shape", [(18, (6, 8)), (13, (1, 1, 6, 8))])
def test_rotate_half_fusion_bits(opset, cos_shape):
    """One RotateHalf node with the chain's bits (onyx unfused and onnxruntime), and the saved
    model's function body runs in onnxruntime."""
    m = _rotary_model(opset, cos_shape)
    stats = {}
    opt = onyx.optimize(onyx.loads(m), stats=stats)
    assert [n.op_type for n in opt.graph] == ["RotateHalf"] and stats["RotateHalfFusion"] == 1
    x = {"x": RNG.standard_normal((2, 3, 6, 8), np.float32)}
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    unfused = onyx.InferenceSession(m, off).run(None, x)[0]
    got = onyx.InferenceSession(m).run(None, x)[0]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, unfused)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, x)[0], ref, rtol=1e-6, atol=1e-6)


def test_rotate_half_fusion_needs_tables_of_the_last_axes():
    m = _rotary_model(18, (8,))  # (a per-feature table, not [S, D]: left alone)
    opt = onyx.optimize(onyx.loads(m))
    assert "RotateHalf" not in [n.op_type for n in opt.graph]


def test_rotate_half_kernel_numpy_and_native_agree():
    from onyx.runtime.kernels.attention import rotate_half

    x = RNG.standard_normal((2, 4, 5, 16), np.float32)[:, ::2]  # (not contiguous)
    cos, sin = RNG.standard_normal((2, 5, 16), np.float32)
    h = 8
    want = x * cos + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin
    np.testing.assert_array_equal(rotate_half(x, cos, sin), want)


def _silu_model(gated: bool) -> bytes:
    nodes = [
        helper.make_node("Sigmoid", ["g"], ["s"]),
        helper.make_node("Mul", ["g", "s"], ["silu"]),
    ]
    if gated:
        nodes.append(helper.make_node("Mul", ["silu", "u"], ["y"]))
    g = helper.make_graph(
        nodes,
        "silu",
        [helper.make_tensor_value_info(n, F, ["B", 40]) for n in ("g", "u")[: 1 + gated]],
        [helper.make_tensor_value_info("y" if gated else "silu", F, ["B", 40])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("gated", [True, False])
def test_silu_fusion(gated):
    m = _silu_model(gated)
    opt = onyx.optimize(onyx.loads(m))
    assert [n.op_type for n in opt.graph] == ["SiluMul" if gated else "Silu"]
    feeds = {
        "g": RNG.standard_normal((3, 40), np.float32) * 30,
        "u": RNG.standard_normal((3, 40), np.float32),
    }
    feeds["g"][0, :3] = [100.0, -100.0, 0.0]  # (e^-g past float32's range: a zero, not NaN)
    if not gated:
        del feeds["u"]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = onyx.InferenceSession(m).run(None, feeds)[0]
    g64 = feeds["g"].astype(np.float64)
    exact = g64 / (1 + np.exp(-g64)) * (feeds["u"] if gated else 1)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-7)
    # (onnxruntime's sigmoid is a few 1e-8 off: times |g| up to 100)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, feeds)[0], ref, rtol=1e-6, atol=1e-6)


def test_silu_fusion_broadcast_gate():
    """A gate of another shape (broadcast) is not SiluMul's: Silu, then the Mul."""
    m = onnx.load_from_string(_silu_model(True))
    m.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 1
    opt = onyx.optimize(onyx.loads(m.SerializeToString()))
    assert [n.op_type for n in opt.graph] == ["Silu", "Mul"]


def _pre_norm_block(norm: str, sum_out: bool) -> bytes:
    """s = x + skip; y = s + Norm(s) @ w: a pre-norm layer's residual, the sum read twice."""
    d = 32
    params = {
        "gamma": RNG.standard_normal(d, np.float32),
        "w": RNG.standard_normal((d, d), np.float32),
    }
    if norm == "LayerNormalization":
        params["beta"] = RNG.standard_normal(d, np.float32)
    norm_inputs = ["s", "gamma"] + (["beta"] if "beta" in params else [])
    nodes = [
        helper.make_node("Add", ["x", "skip"], ["s"]),
        helper.make_node(norm, norm_inputs, ["n"], epsilon=1e-5),
        helper.make_node("MatMul", ["n", "w"], ["m"]),
        helper.make_node("Add", ["s", "m"], ["y"]),
    ]
    outputs = ["y", "s"] if sum_out else ["y"]
    g = helper.make_graph(
        nodes,
        "pre",
        [helper.make_tensor_value_info(n, F, ["B", 5, d]) for n in ("x", "skip")],
        [helper.make_tensor_value_info(n, F, ["B", 5, d]) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    opset = 23 if norm == "RMSNormalization" else 17
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize("sum_out", [False, True])
@pytest.mark.parametrize("norm", ["LayerNormalization", "RMSNormalization"])
def test_skip_norm_fusion_pre_norm(norm, sum_out):
    """The residual sum read on by the next Add (and as a graph output): the fused op's sum
    output serves them; onnxruntime runs the saved model."""
    m = _pre_norm_block(norm, sum_out)
    opt = onyx.optimize(onyx.loads(m))
    fused = {"LayerNormalization": "SkipLayerNormalization"}.get(
        norm, "SkipSimplifiedLayerNormalization"
    )
    assert [n.op_type for n in opt.graph] == [fused, "MatMul", "Add"]
    feeds = {k: RNG.standard_normal((2, 5, 32), np.float32) for k in ("x", "skip")}
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    want = onyx.InferenceSession(m, off).run(None, feeds)
    got = onyx.InferenceSession(m).run(None, feeds)
    again = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    assert len(got) == len(want) == 1 + sum_out
    for g, w, a in zip(got, want, again):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)


def _packed_block(
    opset: int, causal: bool, heads: int = 2, width: int = 32, rotary: bool = False
) -> bytes:
    """q, k, v cut from one [B, S, 3W] projection into heads (q, k rotated by halves),
    attended, merged back."""
    split = {"num_outputs": 3} if opset >= 18 else {}
    nodes = [helper.make_node("Split", ["qkv"], ["q3", "k3", "v3"], axis=2, **split)]
    two = {"num_outputs": 2} if opset >= 18 else {}
    for t in "qkv":
        nodes.append(helper.make_node("Reshape", [f"{t}3", "heads"], [f"{t}r"]))
        perm = [0, 2, 3, 1] if t == "k" and not rotary else [0, 2, 1, 3]  # (k^T: dynamo's)
        nodes.append(helper.make_node("Transpose", [f"{t}r"], [f"{t}h"], perm=perm))
        if rotary and t != "v":
            nodes += [
                helper.make_node("Mul", [f"{t}h", "cos"], [f"{t}a"]),
                helper.make_node("Split", [f"{t}h"], [f"{t}1", f"{t}2"], axis=-1, **two),
                helper.make_node("Neg", [f"{t}2"], [f"{t}n"]),
                helper.make_node("Concat", [f"{t}n", f"{t}1"], [f"{t}c"], axis=-1),
                helper.make_node("Mul", [f"{t}c", "sin"], [f"{t}b"]),
                helper.make_node("Add", [f"{t}a", f"{t}b"], [f"{t}h_rot"]),
            ]
    if rotary:
        nodes.append(helper.make_node("Transpose", ["kh_rot"], ["kh_t"], perm=[0, 1, 3, 2]))
    q, k = ("qh_rot", "kh_t") if rotary else ("qh", "kh")
    nodes += [
        helper.make_node("MatMul", [q, k], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
    ]
    scores = "ss"
    inits = {
        "heads": np.array([-1, 7, heads, width // heads], np.int64),
        "merged": np.array([0, 0, width], np.int64),
        "scale": np.array(0.3, np.float32),
    }
    if rotary:
        angles = np.outer(np.arange(7), RNG.random(width // heads // 2)).astype(np.float32)
        inits["cos"] = np.tile(np.cos(angles), 2)
        inits["sin"] = np.tile(np.sin(angles), 2)
    if causal:
        inits["mask"] = np.triu(np.full((7, 7), np.finfo(np.float32).min, np.float32), 1)
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        scores = "sm"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merged"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "packed",
        [helper.make_tensor_value_info("qkv", F, ["B", 7, 3 * width])],
        [helper.make_tensor_value_info("y", F, ["B", 7, width])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize(
    "opset,causal,rotary",
    [(18, True, False), (17, False, False), (23, True, False), (23, False, False)]
    + [(23, True, True), (18, False, True)],
)
def test_packed_attention_fusion(opset, causal, rotary):
    """One node on the projection (the views, the split, the rotations and the merge gone),
    the unfused model's values, onnxruntime's, and onnxruntime runs the saved model."""
    m = _packed_block(opset, causal, rotary=rotary)
    opt = onyx.optimize(onyx.loads(m))
    want_op = ("Causal" if causal else "") + "Packed" + ("Rotary" if rotary else "")
    want_op += "HeadsAttention"
    assert [n.op_type for n in opt.graph] == [want_op]
    (node,) = opt.graph
    assert node.attr("num_heads") == 2 and abs(node.attr("scale") - 0.3) < 1e-7
    feeds = {"qkv": RNG.standard_normal((3, 7, 96), np.float32)}
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    want = onyx.InferenceSession(m, off).run(None, feeds)[0]
    got = onyx.InferenceSession(m).run(None, feeds)[0]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    for x in (got, ref, saved.run(None, feeds)[0]):
        np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)


def test_packed_attention_fusion_needs_the_merge():
    """A block whose heads are not merged back (its 4-D output read as is): HeadsAttention."""
    m = onnx.load_from_string(_packed_block(18, False))
    del m.graph.node[-2:]
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("o", F, None))
    opt = onyx.optimize(onyx.loads(m.SerializeToString()))
    assert "PackedHeadsAttention" not in [n.op_type for n in opt.graph]
    assert "HeadsAttention" in [n.op_type for n in opt.graph]


def _flattened_transpose_model(tail=(5, 4)) -> bytes:
    """k.transpose(-2, -1) of x [B, H, 4, 5] as the dynamo export writes it."""
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "start", "end"], ["lead"]),
        helper.make_node("Reshape", ["x", "flat"], ["f"]),
        helper.make_node("Transpose", ["f"], ["ft"], perm=[0, 2, 1]),
        helper.make_node("Concat", ["lead", "d1", "d2"], ["target"], axis=0),
        helper.make_node("Reshape", ["ft", "target"], ["y"]),
    ]
    consts = {
        "start": [np.iinfo(np.int64).min],
        "end": [-2],
        "flat": [-1, 4, 5],
        "d1": [tail[0]],
        "d2": [tail[1]],
    }
    g = helper.make_graph(
        nodes,
        "ft",
        [helper.make_tensor_value_info("x", F, ["B", 3, 4, 5])],
        [helper.make_tensor_value_info("y", F, None)],
        [helper.make_tensor(k, i64, [len(v)], v) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_flattened_transpose_fusion():
    m = _flattened_transpose_model()
    opt = onyx.optimize(onyx.loads(m))
    assert [n.op_type for n in opt.graph] == ["Transpose"]
    x = {"x": RNG.standard_normal((2, 3, 4, 5), np.float32)}
    np.testing.assert_array_equal(
        onyx.InferenceSession(m).run(None, x)[0], np.swapaxes(x["x"], 2, 3)
    )
    # (unflattened to [.., 4, 5] again: a reshape, not a transpose; left alone)
    opt = onyx.optimize(onyx.loads(_flattened_transpose_model((4, 5))))
    assert "Transpose" in [n.op_type for n in opt.graph] and len(opt.graph) > 1


@pytest.mark.parametrize("name", ["bert_torchscript_op17", "bert_dynamo_op18"])
def test_zoo_bert_padding_mask(name):
    """The BERT exports' padded batches: each layer's attention one MaskedHeadsAttention, as
    onnxruntime."""
    path, feeds = _zoo_feeds(name)
    feeds["attention_mask"][1, 3:] = 0
    opt = onyx.optimize(onyx.load(path))
    assert [n.op_type for n in opt.graph].count("MaskedHeadsAttention") == 2
    got = onyx.InferenceSession(path).run(None, feeds)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


def _mha_block(seq=6, width=16, heads=2) -> bytes:
    """PyTorch's nn.MultiheadAttention as torchscript exports it (sequence-first, q, k, v cut
    from one projection by Reshape, Transpose, Gather), its output back to [S * B, D]."""
    size = width // heads
    nodes = [
        helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2]),
        helper.make_node("MatMul", ["xs", "w"], ["p"]),
        helper.make_node("Add", ["p", "b"], ["qkv"]),
        helper.make_node("Reshape", ["qkv", "split_shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[2, 0, 1, 3]),
    ]
    for i, name in enumerate("qkv"):
        nodes += [
            helper.make_node("Gather", ["t", f"i{i}"], [f"{name}g"], axis=0),
            helper.make_node("Reshape", [f"{name}g", "flat"], [f"{name}f"]),
            helper.make_node("Transpose", [f"{name}f"], [f"{name}t"], perm=[1, 0, 2]),
            helper.make_node("Reshape", [f"{name}t", "heads"], [f"{name}h"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["kh"], ["kT"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qh", "kT"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["pr"], axis=-1),
        helper.make_node("MatMul", ["pr", "vh"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[2, 0, 1, 3]),
        helper.make_node("Reshape", ["ot", "rows"], ["y"]),
    ]
    inits = {
        "w": RNG.standard_normal((width, 3 * width), np.float32) * 0.3,
        "b": RNG.standard_normal(3 * width, np.float32),
        "split_shape": np.array([0, 0, 3, width], np.int64),
        "flat": np.array([seq, -1, size], np.int64),
        "heads": np.array([-1, heads, seq, size], np.int64),
        "rows": np.array([-1, width], np.int64),
        "scale": np.array(size**-0.5, np.float32),
    }
    inits.update({f"i{i}": np.array(i, np.int64) for i in range(3)})
    g = helper.make_graph(
        nodes,
        "mha",
        [helper.make_tensor_value_info("x", F, ["B", seq, width])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_time_major_attention_fusion():
    """nn.MultiheadAttention's sixteen movement and attention nodes: one on the projection,
    as the unfused graph and onnxruntime (which runs the saved model too)."""
    m = _mha_block()
    opt = onyx.optimize(onyx.loads(m))
    ops = [n.op_type for n in opt.graph]
    assert "TimeMajorPackedHeadsAttention" in ops and len(ops) <= 4, ops
    feeds = {"x": RNG.standard_normal((3, 6, 16), np.float32)}
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    want = onyx.InferenceSession(m, off).run(None, feeds)[0]
    got = onyx.InferenceSession(m).run(None, feeds)[0]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    saved = ort.InferenceSession(onyx.dumps(opt), providers=["CPUExecutionProvider"])
    for x in (got, ref, saved.run(None, feeds)[0]):
        np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)


def test_time_major_attention_bound_step_run_after_run():
    """The bound step (registry.binds: the native task made at the first run) gives the
    unfused graph's results on new values, batch sizes and sequence lengths."""
    m = _mha_block()
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    plain, fused = onyx.InferenceSession(m, off), onyx.InferenceSession(m)
    for batch in (3, 3, 1, 3):
        feeds = {"x": RNG.standard_normal((batch, 6, 16), np.float32)}
        np.testing.assert_allclose(
            fused.run(None, feeds)[0], plain.run(None, feeds)[0], rtol=1e-5, atol=1e-5
        )


def test_time_major_attention_fusion_needs_q_k_v_in_order():
    """k and v gathered the other way round: not the fused op's (its q, k, v thirds)."""
    m = onnx.load_from_string(_mha_block())
    for init in m.graph.initializer:
        if init.name in ("i1", "i2"):
            init.CopyFrom(
                numpy_helper.from_array(np.array(3 - int(init.name[1]), np.int64), init.name)
            )
    opt = onyx.optimize(onyx.loads(m.SerializeToString()))
    assert "TimeMajorPackedHeadsAttention" not in [n.op_type for n in opt.graph]


def test_time_major_attention_fusion_needs_the_output_transpose():
    """The attention's output also a graph output (no one Transpose reads it): left alone,
    where the pass read the missing Transpose's perm."""
    m = onnx.load_from_string(_mha_block())
    m.graph.output.append(helper.make_tensor_value_info("o", F, None))
    opt = onyx.optimize(onyx.loads(m.SerializeToString()))
    assert "TimeMajorPackedHeadsAttention" not in [n.op_type for n in opt.graph]


def _zoo_feeds(name: str):
    from benchmarks.zoo import make_feeds

    entry = json.loads((MODELS / "manifest.json").read_text())[name]
    return str(MODELS / entry["file"]), make_feeds(entry["inputs"], 2, seed=0)


ZOO_ATTENTION = {  # the op each layer's attention becomes
    "llama_dynamo_op18": "CausalPackedRotaryHeadsAttention",
    "llama_dynamo_op23": "CausalPackedRotaryHeadsAttention",
    "gpt_dynamo_op18": "CausalPackedHeadsAttention",
    "gpt_dynamo_op23": "CausalPackedHeadsAttention",
    "gpt_torchscript_op17": "CausalPackedHeadsAttention",
}


@pytest.mark.parametrize("name", sorted(ZOO_ATTENTION))
def test_zoo_transformers_match_onnxruntime(name, tmp_path):
    """The tiny exports of the zoo's transformers: onyx (fused, native) as onnxruntime, and
    the saved fused model in onnxruntime; each layer's attention one node on the causal
    frontier (no mask input), the op18 llama's norms fused."""
    path, feeds = _zoo_feeds(name)
    stats = {}
    opt = onyx.optimize(onyx.load(path), stats=stats)
    if name == "llama_dynamo_op18":
        assert stats.get("RMSNormFusion", 0) == 5
    assert stats.get("SkipLayerNormFusion", 0) == 4  # (each layer's two residual norms)
    if name.startswith("llama"):
        assert stats.get("RotateHalfFusion", 0) == 4 and stats.get("SiluFusion", 0) == 2
        assert "SiluMul" in [n.op_type for n in opt.graph]
    fused = [n for n in opt.graph if n.op_type == ZOO_ATTENTION[name]]
    assert len(fused) == 2 and "Softmax" not in [n.op_type for n in opt.graph]
    inputs = 3 if "Rotary" in ZOO_ATTENTION[name] else 1 if "Packed" in ZOO_ATTENTION[name] else 3
    assert all(len(n.inputs) == inputs for n in fused)  # (no mask: the causal frontier)
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    got = onyx.InferenceSession(path, so).run(None, feeds)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    saved = ort.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"])
    for g, r, a in zip(got, ref, saved.run(None, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)
