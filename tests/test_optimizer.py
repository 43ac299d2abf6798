"""The graph optimizer: every pass on a small model, checked numerically with optimization on
and off and against onnxruntime (which runs the original model, and loads the optimized one)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def make(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def w(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check(model_bytes, feeds, level="all", expect=(), absent=(), tol=1e-5, disabled=()):
    """Run original and optimized: same results in onyx (on/off) and onnxruntime; the
    optimized graph has the ``expect`` op types and none of the ``absent`` ones."""
    model = onyx.loads(model_bytes)
    before = len(model.graph)
    optimized = onyx.optimize(model, level, disabled)
    assert len(model.graph) == before  # the caller's model is left alone
    ops = [n.op_type for n in optimized.graph]
    for op in expect:
        assert op in ops, f"{op} not in {ops}"
    for op in absent:
        assert op not in ops, f"{op} still in {ops}"
    off = onyx.SessionOptions()
    off.graph_optimization_level = 0
    ref = onyx.InferenceSession(model_bytes, off).run(None, feeds)
    got = onyx.InferenceSession(optimized).run(None, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    reloaded = ort.InferenceSession(onyx.dumps(optimized), so, providers=["CPUExecutionProvider"])
    again = reloaded.run(None, feeds)
    for r, g, e, a in zip(ref, got, expected, again):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
    return optimized


# ------------------------------------------------------------------------------------- basic


def test_constant_folding_identity_cse_dead_code():
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(w(4))),
        helper.make_node("Mul", ["c", "c"], ["c2"]),  # constant: folded
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Add", ["xi", "c2"], ["a1"]),
        helper.make_node("Add", ["xi", "c2"], ["a2"]),  # same as a1: merged
        helper.make_node("Mul", ["a1", "a2"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),  # dead
    ]
    m = make(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], [("never_used", w(3))])
    opt = check(m, {"x": w(2, 4)}, level="basic", absent=["Identity", "Constant", "Neg"])
    assert [n.op_type for n in opt.graph] == ["Add", "Mul"]
    assert "never_used" not in opt.graph.initializers


def test_shape_folding_dynamic_batch():
    # Reshape(x, Concat(Shape(x)[0], 4, 2)) with x [N, 8]: the target becomes [-1, 4, 2]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Shape", ["x"], ["s2"]),
        helper.make_node("Slice", ["s2", "one", "two"], ["d1"]),  # [8]: static
        helper.make_node("Div", ["d1", "two_c"], ["half"]),
        helper.make_node("Concat", ["n1", "half", "two_c"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        ("zero", np.array(0, np.int64)),
        ("axes", np.array([0], np.int64)),
        ("one", np.array([1], np.int64)),
        ("two", np.array([2], np.int64)),
        ("two_c", np.array([2], np.int64)),
    ]
    m = make(nodes, [("x", F, ["N", 8])], [("y", F, ["N", 4, 2])], inits)
    opt = check(m, {"x": w(3, 8)}, level="basic", absent=["Shape", "Concat", "Gather"])
    assert [n.op_type for n in opt.graph] == ["Reshape"]


def test_shape_folding_through_a_gathered_shape():
    # onnxruntime's transpose optimizer writes Shape(Transpose(x)) as Gather(Shape(x), perm):
    # Gather(Gather(Shape(x), [1, 0]), 1) is x's static dim 0, though dim 1 is not
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "perm"], ["st"], axis=0),  # [N, 8]
        helper.make_node("Gather", ["st", "one"], ["d"], axis=0),  # 8
        helper.make_node("Unsqueeze", ["d", "axes"], ["d1"]),
        helper.make_node("Concat", ["minus_one", "d1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        ("perm", np.array([1, 0], np.int64)),
        ("one", np.array(1, np.int64)),
        ("axes", np.array([0], np.int64)),
        ("minus_one", np.array([-1], np.int64)),
    ]
    m = make(nodes, [("x", F, [8, "N"])], [("y", F, ["M", 8])], inits)
    opt = check(m, {"x": w(8, 3)}, level="basic", absent=["Shape", "Concat", "Gather"])
    assert [n.op_type for n in opt.graph] == ["Reshape"]


def test_shape_folding_walks_no_graph_without_a_shape_or_reshape(monkeypatch):
    """Each of ShapeFolding's folds starts at a Shape, Size or Reshape: a graph with none of
    them is not walked (its Gathers and Slices are not looked at), in any round; one with a
    Shape still is, and its dims folded (test_shape_folding_through_a_gathered_shape too)."""
    from onyx.optimizer import fold

    looked = []
    picked = vars(fold)["_picked_dims"]
    monkeypatch.setattr(
        fold, "_picked_dims", lambda ctx, n: looked.append(n.op_type) or picked(ctx, n)
    )
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    m = make(nodes, [("x", F, [2, 4])], [("y", F, [2, 2])], [("idx", np.array([0, 2], np.int64))])
    check(m, {"x": w(2, 4)}, level="basic")
    assert looked == []
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["d"], axis=0),
        helper.make_node("Cast", ["d"], ["f"], to=F),
        helper.make_node("Add", ["x", "f"], ["y"]),
    ]
    m = make(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], [("one", np.array(1, np.int64))])
    opt = check(m, {"x": w(2, 4)}, level="basic", absent=["Shape", "Gather"])
    assert "Gather" in looked and [n.op_type for n in opt.graph] == ["Add"]


def test_cse_tells_minus_zero_from_zero_in_attributes():
    # -0.0 == 0.0 in Python, but LeakyRelu with alpha -0.0 gives +0.0 for negative x
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.0),
        helper.make_node("LeakyRelu", ["x"], ["b"], alpha=-0.0),
        helper.make_node("LeakyRelu", ["x"], ["c"], alpha=-0.0),
        helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=0),
    ]
    m = make(nodes, [("x", F, [2])], [("y", F, None)])
    optimized = onyx.optimize(onyx.loads(m), "basic")
    assert [n.op_type for n in optimized.graph].count("LeakyRelu") == 2  # b and c are twins
    (y,) = onyx.InferenceSession(m).run(None, {"x": np.full(2, -1.0, np.float32)})
    np.testing.assert_array_equal(np.signbit(y), [True, True, False, False, False, False])


def test_noops_cast_dropout_transpose_reshape():
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=F),
        helper.make_node("Dropout", ["c"], ["d"]),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 1]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    m = make(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], [("shape", np.array([3, 4]))])
    opt = check(m, {"x": w(3, 4)}, level="basic")
    assert [n.op_type for n in opt.graph] == ["Relu"]


def test_graph_output_names_survive():
    # y is an Identity of a computed value: the value takes the name y
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Identity", ["n"], ["y"])]
    m = make(nodes, [("x", F, [2])], [("y", F, [2])])
    opt = check(m, {"x": w(2)})
    assert [v.name for v in opt.graph.outputs] == ["y"] and len(opt.graph) == 1
    # an Identity from a graph input to an output must stay (no node to take the name)
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    opt = check(make(nodes, [("x", F, [2])], [("y", F, [2])]), {"x": w(2)})
    assert len(opt.graph) == 1


def test_subgraph_captures_are_kept():
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["c2", "x"], ["o"])],
        "then",
        [],
        [helper.make_tensor_value_info("o", F, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["o2"])],
        "else",
        [],
        [helper.make_tensor_value_info("o2", F, [2])],
    )
    nodes = [
        helper.make_node("Add", ["c", "c"], ["c2"]),  # folded; the subgraph reads it
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    m = make(
        nodes,
        [("x", F, [2]), ("cond", TensorProto.BOOL, [])],
        [("y", F, [2])],
        [("c", w(2))],
    )
    for cond in (True, False):
        check(m, {"x": w(2), "cond": np.array(cond)}, absent=["Add"])


def test_overridable_initializers_are_not_folded():
    graph = helper.make_graph(
        [helper.make_node("Add", ["b", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("b", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "b")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = onyx.InferenceSession(m.SerializeToString())
    np.testing.assert_array_equal(sess.run(None, {"b": np.full(2, 3, np.float32)})[0], [6, 6])


# ---------------------------------------------------------------------------------- conv fusions


def _conv_model(tail, extra_inits=(), outputs=(("y", ["N", 4, 6, 6]),), extra_inputs=()):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), *tail]
    inits = [("W", w(4, 3, 3, 3)), ("B", w(4)), *extra_inits]
    inputs = [("x", F, ["N", 3, 6, 6]), *extra_inputs]
    return make(nodes, inputs, [(n, F, s) for n, s in outputs], inits)


def test_conv_batchnorm_add_mul_folding():
    tail = [
        helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["bn"]),
        helper.make_node("Mul", ["bn", "k"], ["mu"]),
        helper.make_node("Add", ["mu", "d"], ["y"]),
    ]
    var = np.abs(w(4)) + 0.1
    extra = [("s", w(4)), ("b", w(4)), ("mean", w(4)), ("var", var)]
    extra += [("k", w(4, 1, 1)), ("d", w(1, 4, 1, 1))]
    opt = check(_conv_model(tail, extra), {"x": w(2, 3, 6, 6)}, expect=["Conv"], tol=1e-4)
    assert [n.op_type for n in opt.graph] == ["Conv"]


@pytest.mark.parametrize("order", ["mul_add", "add_mul"])
def test_batchnorm_scale_and_shift_folding(order):
    """BatchNormalization (no conv before it: after a Relu here) -> Mul / Add by per-channel
    constants: one BatchNormalization; a scalar constant folds too, a per-pixel one does not,
    nor one read twice."""
    first, second = ("Mul", "Add") if order == "mul_add" else ("Add", "Mul")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("BatchNormalization", ["r", "s", "b", "mean", "var"], ["bn"]),
        helper.make_node(first, ["bn", "k"], ["t"]),
        helper.make_node(second, ["d", "t"], ["u"]),
        helper.make_node("Mul", ["u", "half"], ["v"]),
        helper.make_node("Add", ["v", "pixel"], ["y"]),
    ]
    var = np.abs(w(4)) + 0.1
    inits = [("s", w(4)), ("b", w(4)), ("mean", w(4)), ("var", var), ("k", w(4, 1, 1)),
             ("d", w(1, 4, 1, 1)), ("half", np.array(0.5, np.float32)), ("pixel", w(6, 6))]  # fmt: skip
    model = make(nodes, [("x", F, ["N", 4, 6, 6])], [("y", F, ["N", 4, 6, 6])], inits)
    opt = check(model, {"x": w(2, 4, 6, 6)}, tol=1e-5)
    assert [n.op_type for n in opt.graph] == ["Relu", "BatchNormalization", "Add"]
    twice = make(
        [*nodes[:3], helper.make_node("Add", ["t", "bn"], ["y"])],
        [("x", F, ["N", 4, 6, 6])], [("y", F, ["N", 4, 6, 6])], inits[:5],
    )  # fmt: skip
    opt = check(twice, {"x": w(2, 4, 6, 6)})
    assert [n.op_type for n in opt.graph] == ["Relu", "BatchNormalization", "Mul" if first ==
            "Mul" else "Add", "Add"]  # fmt: skip


@pytest.mark.parametrize(
    "act",
    [
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
        helper.make_node("Tanh", ["c"], ["y"]),
        helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2),
        helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
        helper.make_node("Clip", ["c", "", "hi"], ["y"]),
    ],
    ids=lambda n: n.op_type + str(len(n.input)),
)
def test_conv_activation_fusion(act):
    extra = [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.5, np.float32))]
    opt = check(
        _conv_model([act], extra), {"x": w(2, 3, 6, 6)}, expect=["FusedConv"], absent=["Conv"]
    )
    assert len(opt.graph) == 1


def test_conv_add_relu_fusion_and_disabled():
    tail = [helper.make_node("Add", ["c", "z"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    m = _conv_model(tail, extra_inputs=[("z", F, ["N", 4, 6, 6])])
    feeds = {"x": w(2, 3, 6, 6), "z": w(2, 4, 6, 6)}
    opt = check(m, feeds, expect=["FusedConv"], absent=["Add", "Relu"])
    assert len(opt.graph.nodes[0].inputs) == 4
    check(m, feeds, disabled=["ConvActivationFusion"], absent=["FusedConv"])
    check(m, feeds, level="basic", absent=["FusedConv"])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 40, 9, 7), (1, 8, 5, 5)])  # native conv; numpy conv
def test_conv_hard_swish_fusion_same_bits(shape, bias):
    """Conv -> HardSwish becomes ai.onyx ConvHardSwish, a model-local function: the same bits
    as the two ops in onyx, and onnxruntime runs the saved function (and onnx's checker takes
    it)."""
    N, C, H, W = shape
    inits = [("W", w(24, C, 3, 3)), ("B", w(24))] if bias else [("W", w(24, C, 3, 3))]
    conv = helper.make_node("Conv", ["x", "W", "B" if bias else ""], ["c"], pads=[1, 0, 1, 2],
                            strides=[1, 2])  # fmt: skip
    m = make([conv, helper.make_node("HardSwish", ["c"], ["y"])], [("x", F, list(shape))],
             [("y", F, None)], inits, opset=18)  # fmt: skip
    feeds = {"x": w(*shape, scale=4)}
    # against onnxruntime: the conv sums 9 * C products of inputs scaled by 4 (values near 40),
    # and numpy's im2col order rounds differently from onnxruntime's by about 1e-5 there
    # (ONYX_NATIVE=0); the fused and unfused onyx runs are compared bit for bit below
    opt = check(m, feeds, expect=["ConvHardSwish"], absent=["Conv", "HardSwish"], tol=1e-4)
    onnx.checker.check_model(onnx.load_from_string(onyx.dumps(opt)), full_check=True)
    off = onyx.SessionOptions()
    off.disabled_optimizers = ["ConvHardSwishFusion"]
    apart = onyx.InferenceSession(m, off).run(None, feeds)[0]
    np.testing.assert_array_equal(onyx.InferenceSession(opt).run(None, feeds)[0], apart)


def test_conv_hard_swish_fusion_leaves_a_shared_conv():
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"]),
        helper.make_node("HardSwish", ["c"], ["h"]),
        helper.make_node("Add", ["h", "c"], ["y"]),  # the conv's output is read twice
    ]
    m = make(nodes, [("x", F, [1, 3, 6, 6])], [("y", F, None)], [("W", w(4, 3, 1, 1))], opset=18)
    check(m, {"x": w(1, 3, 6, 6)}, expect=["Conv", "HardSwish"], absent=["ConvHardSwish"])


def test_fused_nodes_of_unnamed_convs_get_unique_names():
    # fused nodes are named from their conv: unnamed convs once all became "_hardswish" /
    # "_fused", and onnxruntime refuses a saved model with two nodes of one name
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c1"], ["h1"]),
        helper.make_node("Conv", ["h1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c2"], ["h2"]),
        helper.make_node("Conv", ["h2", "W2"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "W2"], ["c4"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c4"], ["y"]),
    ]
    inits = [("W1", w(4, 3, 3, 3)), ("W2", w(4, 4, 3, 3))]
    m = make(nodes, [("x", F, [1, 3, 6, 6])], [("y", F, None)], inits, opset=18)
    opt = check(m, {"x": w(1, 3, 6, 6)}, expect=["ConvHardSwish", "FusedConv"])
    names = [n.name for n in opt.graph]
    assert len(set(names)) == len(names), names


# ---------------------------------------------------------------------------------- gemm fusions


def test_matmul_add_to_gemm_and_activation():
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    m = make(nodes, [("x", F, ["N", 5])], [("y", F, ["N", 3])], [("W", w(5, 3)), ("b", w(3))])
    check(m, {"x": w(4, 5)}, expect=["FusedGemm"], absent=["MatMul", "Add"])
    check(m, {"x": w(4, 5)}, disabled=["GemmActivationFusion"], expect=["Gemm"])


def test_matmul_add_rank3_is_not_gemm():
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    m = make(nodes, [("x", F, [2, 4, 5])], [("y", F, [2, 4, 3])], [("W", w(5, 3)), ("b", w(3))])
    check(m, {"x": w(2, 4, 5)}, absent=["Gemm"])


# --------------------------------------------------------------------------- transformer fusions


@pytest.mark.parametrize("order", ["x*(1+erf)*0.5", "x*((1+erf)*0.5)", "(x*0.5)*(1+erf)"])
def test_gelu_fusion(order):
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["s"]),
        helper.make_node("Erf", ["s"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
    ]
    if order == "x*(1+erf)*0.5":
        nodes += [
            helper.make_node("Mul", ["x", "p"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"]),
        ]
    elif order == "x*((1+erf)*0.5)":
        nodes += [
            helper.make_node("Mul", ["p", "half"], ["m"]),
            helper.make_node("Mul", ["x", "m"], ["y"]),
        ]
    else:
        nodes += [
            helper.make_node("Mul", ["x", "half"], ["m"]),
            helper.make_node("Mul", ["m", "p"], ["y"]),
        ]
    inits = [
        ("sqrt2", np.array(math.sqrt(2), np.float32)),
        ("one", np.array(1, np.float32)),
        ("half", np.array(0.5, np.float32)),
    ]
    m = make(nodes, [("x", F, [3, 8])], [("y", F, [3, 8])], inits)
    opt = check(m, {"x": w(3, 8, scale=2)}, expect=["Gelu"], absent=["Erf"])
    assert len(opt.graph) == 1 and opt.graph.nodes[0].domain == "com.microsoft"


def test_layer_norm_fusion():
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    inits = [
        ("two", np.array(2, np.float32)),
        ("eps", np.array(1e-5, np.float32)),
        ("gamma", w(8)),
        ("beta", w(8)),
    ]
    m = make(nodes, [("x", F, ["N", 4, 8])], [("y", F, ["N", 4, 8])], inits)
    opt = check(m, {"x": w(2, 4, 8)}, expect=["LayerNormalization"], tol=1e-4)
    assert len(opt.graph) == 1


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_fast_gelu_and_bias_fusion(cube):
    """GPT-2's tanh GELU as the dynamo (Pow) and TorchScript (Mul chain) exporters write it, after
    a MatMul + bias: one FastGelu(x, bias)."""
    k, c = math.sqrt(2 / math.pi), 0.044715
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["h"]),
    ]
    if cube == "pow":
        nodes.append(helper.make_node("Pow", ["h", "three"], ["h3"]))
    else:
        nodes += [
            helper.make_node("Mul", ["h", "h"], ["h2"]),
            helper.make_node("Mul", ["h", "h2"], ["h3"]),
        ]
    nodes += [
        helper.make_node("Mul", ["c", "h3"], ["ch3"]),
        helper.make_node("Add", ["h", "ch3"], ["inner"]),
        helper.make_node("Mul", ["k", "inner"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["p"]),
        helper.make_node("Mul", ["half", "p"], ["hp"]),
        helper.make_node("Mul", ["h", "hp"], ["y"]),
    ]
    inits = [
        ("W", w(8, 16)),
        ("b", w(16)),
        ("three", np.array(3, np.float32)),
        ("c", np.array(c, np.float32)),
        ("k", np.array(k, np.float32)),
        ("one", np.array(1, np.float32)),
        ("half", np.array(0.5, np.float32)),
    ]
    m = make(nodes, [("x", F, ["N", 5, 8])], [("y", F, ["N", 5, 16])], inits)
    opt = check(m, {"x": w(2, 5, 8, scale=2)}, expect=["FastGelu"], absent=["Tanh", "Add"])
    assert [n.op_type for n in opt.graph] == ["MatMul", "FastGelu"]
    assert len(opt.graph.nodes[1].inputs) == 2  # the bias moved into FastGelu
    opt = check(m, {"x": w(2, 5, 8)}, disabled=["BiasGeluFusion"], expect=["FastGelu", "MatMulAdd"])
    check(m, {"x": w(2, 5, 8)}, disabled=["FastGeluFusion"], expect=["Tanh"], absent=["FastGelu"])


def test_onnx_gelu_tanh_and_erf_bias():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["h"]),
        helper.make_node("Gelu", ["h"], ["g"], approximate="tanh"),
        helper.make_node("Add", ["g", "b"], ["h2"]),
        helper.make_node("Gelu", ["h2"], ["y"]),
    ]
    m = make(nodes, [("x", F, [3, 16])], [("y", F, [3, 16])], [("b", w(16))], opset=20)
    opt = check(m, {"x": w(3, 16, scale=2)})
    assert [n.op_type for n in opt.graph] == ["FastGelu", "BiasGelu"]


def test_qdq_data_movement():
    """Q/DQ pairs around Reshape, Transpose and Split (as QDQ quantizers write them) go: the
    movement ops run on the uint8 tensor, the results stay exact."""
    qdq = ["s", "zp"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *qdq], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", *qdq], ["d0"]),
        helper.make_node("Reshape", ["d0", "shape"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", *qdq], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", *qdq], ["d1"]),
        helper.make_node("Transpose", ["d1"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("QuantizeLinear", ["t", *qdq], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", *qdq], ["d2"]),
        helper.make_node("Split", ["d2"], ["a", "b"], axis=3, num_outputs=2),
        helper.make_node("QuantizeLinear", ["a", *qdq], ["qa"]),
        helper.make_node("QuantizeLinear", ["b", *qdq], ["qb"]),
        helper.make_node("DequantizeLinear", ["qa", *qdq], ["ya"]),
        helper.make_node("DequantizeLinear", ["qb", *qdq], ["yb"]),
    ]
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("zp", np.array(128, np.uint8)),
        ("shape", np.array([0, 4, 2, 6], np.int64)),
    ]
    outs = [("ya", F, [2, 2, 4, 3]), ("yb", F, [2, 2, 4, 3])]
    m = make(nodes, [("x", F, [2, 4, 12])], outs, inits, opset=18)
    opt = check(m, {"x": w(2, 4, 12, scale=3)}, tol=0)
    ops = [n.op_type for n in opt.graph]
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 2, ops
    check(m, {"x": w(2, 4, 12)}, disabled=["QDQDataMovement"], tol=0)
    # another scale after the Reshape: a real requantization, which moves after the Reshape
    # on the bytes (a table, with LookupTableFusion; kept as written without it)
    other = [("s2", np.array(0.07, np.float32))]
    nodes[3] = helper.make_node("QuantizeLinear", ["r", "s2", "zp"], ["q1"])
    m = make(nodes, [("x", F, [2, 4, 12])], outs, inits + other, opset=18)
    opt = check(m, {"x": w(2, 4, 12, scale=3)}, tol=0)
    ops = [n.op_type for n in opt.graph]
    assert ops[:3] == ["QuantizeLinear", "Reshape", "TableLookup"], ops
    opt = check(m, {"x": w(2, 4, 12, scale=3)}, tol=0, disabled=["LookupTableFusion"])
    assert [n.op_type for n in opt.graph].count("QuantizeLinear") == 2


@pytest.mark.parametrize("third", ["same", "other scale"])
def test_qdq_data_movement_of_several_readers(third):
    """A DQ read by several movement ops, each requantized at its parameters (an attention's
    q / k / v Gathers of its packed projection): all move, the DQ and every Q go, the
    results exact. A reader that requantizes at other parameters (a QOperator attention's
    q / k / v) moves too, its DQ -> Q after the Gather on the bytes then one table; without
    LookupTableFusion, which makes that table, nothing moves."""
    qdq = ["s", "zp"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *qdq], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", *qdq], ["d0"]),
    ]
    outs = []
    for k in range(3):
        nodes.append(helper.make_node("Gather", ["d0", f"i{k}"], [f"g{k}"], axis=0))
        scale = "s2" if (k == 2 and third == "other scale") else "s"
        nodes.append(helper.make_node("QuantizeLinear", [f"g{k}", scale, "zp"], [f"q{k + 1}"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"q{k + 1}", *qdq], [f"y{k}"]))
        outs.append((f"y{k}", F, None))
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("s2", np.array(0.07, np.float32)),
        ("zp", np.array(128, np.uint8)),
        *((f"i{k}", np.array(k, np.int64)) for k in range(3)),
    ]
    m = make(nodes, [("x", F, [3, 4, 6])], outs, inits, opset=18)
    opt = check(m, {"x": w(3, 4, 6, scale=3)}, tol=0)
    ops = [n.op_type for n in opt.graph]
    if third == "same":
        assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 3, ops
    else:
        assert ops.count("QuantizeLinear") == 1 and ops.count("TableLookup") == 1, ops
        assert ops.count("DequantizeLinear") == 2 and ops.count("Gather") == 3, ops
        opt = check(m, {"x": w(3, 4, 6, scale=3)}, tol=0, disabled=["LookupTableFusion"])
        assert [n.op_type for n in opt.graph].count("QuantizeLinear") == 4


@pytest.mark.parametrize("same", [True, False])
def test_qdq_data_movement_through_a_chain(same):
    """DQ -> Expand -> Reshape -> Reshape -> Q at DQ's parameters (an attention mask's
    broadcast, as a QDQ BERT has it): the chain runs on the bytes, the DQ and the Q go, the
    results exact; a Q at other parameters keeps them, after the chain (one table)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", "s", "zp"], ["d0"]),
        helper.make_node("Expand", ["d0", "shape"], ["e"]),
        helper.make_node("Reshape", ["e", "flat"], ["r0"]),
        helper.make_node("Reshape", ["r0", "back"], ["r1"]),
        helper.make_node("QuantizeLinear", ["r1", "s" if same else "s2", "zp"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s", "zp"], ["y"]),
    ]
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("s2", np.array(0.07, np.float32)),
        ("zp", np.array(128, np.uint8)),
        ("shape", np.array([1, 4, 1, 16], np.int64)),
        ("flat", np.array([4, 1, 16], np.int64)),
        ("back", np.array([1, 4, 1, 16], np.int64)),
    ]
    m = make(nodes, [("x", F, [1, 1, 1, 16])], [("y", F, [1, 4, 1, 16])], inits, opset=18)
    opt = check(m, {"x": w(1, 1, 1, 16, scale=3)}, tol=0)
    ops = [n.op_type for n in opt.graph]
    assert ops[:4] == ["QuantizeLinear", "Expand", "Reshape", "Reshape"], ops
    assert ops[4:] == ["DequantizeLinear" if same else "TableLookup"], ops  # (its DQ: the table's)


@pytest.mark.parametrize("also_read", [False, True])
def test_quantize_moves_before_where(also_read):
    """Where(mask, DQ -> Mul, -10000) -> Q (a causal attention's masked scores before the
    quantized softmax): the Q moves onto both branches, the Where picks bytes, and
    DQ -> Mul -> Q is one table; the results exact. A Where read by another node stays."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", "s", "zp"], ["d0"]),
        helper.make_node("Mul", ["d0", "k"], ["m"]),
        helper.make_node("Where", ["c", "m", "fill"], ["wh"]),
        helper.make_node("QuantizeLinear", ["wh", "s2", "zp2"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s2", "zp2"], ["y"]),
    ]
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("zp", np.array(128, np.uint8)),
        ("k", np.array(0.25, np.float32)),
        ("fill", np.array(-10000.0, np.float32)),
        ("s2", np.array(39.2, np.float32)),
        ("zp2", np.array(255, np.uint8)),
    ]
    outs = [("y", F, [2, 4, 4])] + ([("wh", F, [2, 4, 4])] if also_read else [])
    ins = [("x", F, [2, 4, 4]), ("c", TensorProto.BOOL, [4, 4])]
    m = make(nodes, ins, outs, inits, opset=18)
    mask = np.tril(np.ones((4, 4), bool))
    opt = check(m, {"x": w(2, 4, 4, scale=3), "c": mask}, tol=0)
    ops = [n.op_type for n in opt.graph]
    if also_read:
        assert "Mul" in ops or ops.count("QuantizeLinear") >= 2, ops
        assert opt.graph.outputs[1].producer.op_type == "Where"
        return
    assert ops == ["QuantizeLinear", "TableLookup", "Where", "DequantizeLinear"], ops


@pytest.mark.parametrize("zp_type", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4])
@pytest.mark.parametrize("moved", ["Where", "Gather", "Gather, requantized"])
def test_qdq_data_movement_keeps_to_byte_types(moved, zp_type):
    """A Q or DQ of float8 or int4 (opset 21) stays where it is: Where (16) takes no such
    type, nor do Gather (13) and Expand, so the moved graph was a model onnx's checker and
    onnxruntime refuse (and no table would come of it: LookupTableFusion takes int8 and
    uint8 bytes)."""
    zp = helper.make_tensor("zp", zp_type, [], [0])
    if moved == "Where":
        nodes = [
            helper.make_node("Where", ["c", "x", "fill"], ["wh"]),
            helper.make_node("QuantizeLinear", ["wh", "s", "zp"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"]),
        ]
        inits = [("fill", np.array(-100.0, np.float32)), ("s", np.array(0.5, np.float32))]
        ins = [("c", TensorProto.BOOL, [4]), ("x", F, [4])]
        feeds = {"c": np.array([1, 0, 1, 0], bool), "x": np.array([1.25, 2, -3.75, 9], np.float32)}
        outs = [("y", F, [4])]
    else:
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q0"]),
            helper.make_node("DequantizeLinear", ["q0", "s", "zp"], ["d0"]),
            helper.make_node("Gather", ["d0", "i"], ["g"]),
            helper.make_node("QuantizeLinear", ["g", "s2", "zp"], ["q1"]),
            helper.make_node("DequantizeLinear", ["q1", "s2", "zp"], ["y"]),
        ]
        s2 = 0.25 if moved.endswith("requantized") else 0.5
        inits = [("s", np.array(0.5, np.float32)), ("s2", np.array(s2, np.float32)),
                 ("i", np.array([2, 0], np.int64))]  # fmt: skip
        ins, outs = [("x", F, [3, 4])], [("y", F, [2, 4])]
        feeds = {"x": w(3, 4, scale=3)}
    m = onnx.load_from_string(make(nodes, ins, outs, inits, opset=21))
    m.ir_version = 10
    m.graph.initializer.append(zp)
    onnx.checker.check_model(m, full_check=True)
    m = m.SerializeToString()
    opt = check(m, feeds, tol=0)
    onnx.checker.check_model(onnx.load_from_string(onyx.dumps(opt)), full_check=True)


@pytest.mark.parametrize("chain", [False, True])
def test_qdq_data_movement_leaves_a_q_inside_a_subgraph(chain):
    """DQ -> Reshape [-> Expand] whose only reader is a QuantizeLinear inside an If branch
    (it reads the outer value): the movement took that Q as the chain's end and removed it
    from the outer graph, and the session's creation failed with a raw ValueError ("... is
    not in graph 'g'"). A Q of another graph ends no chain: nothing moves."""
    q_then = [
        helper.make_node("QuantizeLinear", ["e" if chain else "r", "s", "zp"], ["tq"]),
        helper.make_node("DequantizeLinear", ["tq", "s", "zp"], ["ty"]),
    ]
    then_branch = helper.make_graph(q_then, "t", [], [helper.make_tensor_value_info("ty", F, None)])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ey"])], "e", [],
        [helper.make_tensor_value_info("ey", F, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", "s", "zp"], ["d0"]),
        helper.make_node("Reshape", ["d0", "shape"], ["r"]),
        *([helper.make_node("Expand", ["r", "shape"], ["e"])] if chain else []),
        helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("zp", np.array(128, np.uint8)),
        ("shape", np.array([3, 4], np.int64)),
    ]
    m = make(nodes, [("x", F, [3, 4]), ("c", TensorProto.BOOL, [])], [("y", F, None)], inits)
    check(m, {"x": w(3, 4, scale=3), "c": np.array(True)}, tol=0)


@pytest.mark.parametrize("mode", ["reflect", "constant", "edge"])
def test_qdq_pad_moves_and_shape_reads_the_quantized_tensor(mode):
    """DQ -> Pad -> Q at one scale: the Pad runs on the uint8 tensor (a constant 0 pads with the
    zero point); a Shape reading the DQ reads its input, so the DQ's one reader is the Pad."""
    qdq = ["s", "zp"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *qdq], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", *qdq], ["d0"]),
        helper.make_node("Shape", ["d0"], ["shape"]),
        helper.make_node("Pad", ["d0", "pads"], ["p"], mode=mode),
        helper.make_node("QuantizeLinear", ["p", *qdq], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", *qdq], ["y"]),
    ]
    inits = [
        ("s", np.array(0.05, np.float32)),
        ("zp", np.array(100, np.uint8)),
        ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
    ]
    outs = [("y", F, [1, 2, 6, 6]), ("shape", TensorProto.INT64, [4])]
    m = make(nodes, [("x", F, [1, 2, 4, 4])], outs, inits, opset=18)
    opt = check(m, {"x": w(1, 2, 4, 4, scale=3)}, tol=0)
    ops = [n.op_type for n in opt.graph]
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1, ops


def test_matmul_scale_fusion():
    """Attention scores: Q @ K^T then * 1/sqrt(d) (GPT), or sqrt of it on each side (PyTorch's
    MultiheadAttention): one FusedMatMul(alpha)."""
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Mul", ["s", "c"], ["y"]),
        helper.make_node("Mul", ["q", "r"], ["q2"]),
        helper.make_node("Div", ["k", "d"], ["k2"]),
        helper.make_node("MatMul", ["q2", "k2"], ["z"]),
    ]
    inits = [
        ("c", np.array(0.125, np.float32)),
        ("r", np.array([0.35], np.float32)),
        ("d", np.array(2.5, np.float32)),
    ]
    shapes = [("q", F, ["N", 2, 5, 4]), ("k", F, ["N", 2, 4, 5])]
    outs = [("y", F, ["N", 2, 5, 5]), ("z", F, ["N", 2, 5, 5])]
    m = make(nodes, shapes, outs, inits)
    feeds = {"q": w(3, 2, 5, 4), "k": w(3, 2, 4, 5)}
    opt = check(m, feeds, expect=["FusedMatMul"], absent=["MatMul", "Mul", "Div"])
    assert sorted(round(n.attr("alpha"), 5) for n in opt.graph) == [0.125, 0.14]
    check(m, feeds, disabled=["MatMulScaleFusion"], expect=["MatMul"], absent=["FusedMatMul"])


def test_transpose_cancellation():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t2"], ["t3"], perm=[2, 0, 1]),
        helper.make_node("Transpose", ["t3"], ["y"], perm=[1, 0, 2]),
    ]
    m = make(nodes, [("x", F, [2, 3, 4])], [("y", F, [3, 2, 4])])
    opt = check(m, {"x": w(2, 3, 4)})
    assert [n.op_type for n in opt.graph] == ["Transpose"]


# ---------------------------------------------------------------------------------- the session


def test_session_options(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    m = make(nodes, [("x", F, [1, 3, 4, 4])], [("y", F, [1, 2, 2, 2])], [("W", w(2, 3, 3, 3))])
    feeds = {"x": w(1, 3, 4, 4)}
    path = tmp_path / "opt.onnx"
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(path)
    y = onyx.InferenceSession(m, so).run(None, feeds)[0]
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert [n.op_type for n in saved.graph.node] == ["FusedConv"]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-6)
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(path)
    so.disabled_optimizers = ["ConvActivationFusion"]
    onyx.InferenceSession(m, so)
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Conv", "Relu"]
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.disabled_optimizers = []
    onyx.InferenceSession(m, so)
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Conv", "Relu"]


LIGHT_ALEXNET = onnx.__file__.rsplit("/", 1)[0] + "/backend/test/data/light/light_bvlc_alexnet.onnx"


@pytest.mark.parametrize("how", ["optimize", "cli-all", "cli-portable", "session"])
def test_saved_ir3_model_lists_its_initializers_as_inputs(tmp_path, how):
    """Before IR 4 every initializer must be a graph input: an optimized IR 3 model (onnx's
    light AlexNet: its Conv + BatchNormalization pairs fold into new weights) is written with
    the new initializers listed, by onyx.optimize + save, the CLI and optimized_model_filepath,
    so onnx's checker takes the file; the session's own inputs stay as they were."""
    from onyx.tools.cli import main

    assert onnx.load(LIGHT_ALEXNET).ir_version == 3
    path = tmp_path / "opt.onnx"
    if how == "optimize":
        onyx.save(onyx.optimize(onyx.load(LIGHT_ALEXNET)), str(path))
    elif how.startswith("cli"):
        assert main(["optimize", LIGHT_ALEXNET, str(path), "--level", how[4:]]) == 0
    else:
        so = onyx.SessionOptions()
        so.optimized_model_filepath = str(path)
        sess = onyx.InferenceSession(LIGHT_ALEXNET, so)
        plain = onyx.InferenceSession(LIGHT_ALEXNET)
        assert len(sess.get_overridable_initializers()) == len(plain.get_overridable_initializers())
    saved = onnx.load(str(path))
    assert saved.ir_version == 3
    onnx.checker.check_model(saved, full_check=True)
    onyx.check(str(path))
    x = {"data_0": np.random.default_rng(0).uniform(0.5, 1.5, (1, 3, 224, 224)).astype(np.float32)}
    want = onyx.InferenceSession(LIGHT_ALEXNET).run(None, x)[0]
    np.testing.assert_allclose(onyx.InferenceSession(str(path)).run(None, x)[0], want, rtol=1e-5)


def test_pass_names_and_levels():
    from onyx.optimizer import passes

    basic, extended = passes("basic"), passes("extended")
    assert "ConstantFolding" in basic and "ConvBNFusion" not in basic
    assert set(basic) < set(extended) and set(extended) <= set(passes("all"))
    with pytest.raises(ValueError):
        onyx.optimize(onyx.loads(make([], [("x", F, [1])], [("x", F, [1])])), "fast")


# ---------------------------------------------------------------------------------- attention


def _attention_model(mask: str) -> bytes:
    """softmax(q @ k^T * 0.5 [mask]) @ v at opset 23; k^T a transpose of [N, T, heads, size]
    keys (as dynamo writes), the mask an added float, a non-constant boolean through
    Where(c, -inf, .), or a constant causal one with a finite fill."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "half"], ["s2"]),
    ]
    inputs = [("q", F, ["N", 2, 5, 4]), ("k", F, ["N", 5, 2, 4]), ("v", F, ["N", 2, 5, 3])]
    inits = [("half", np.array(0.5, np.float32))]
    scores = "s2"
    if mask == "add":
        nodes.append(helper.make_node("Add", ["s2", "m"], ["sm"]))
        inputs.append(("m", F, ["N", 1, 5, 5]))
        scores = "sm"
    elif mask in ("where", "causal"):
        nodes.append(helper.make_node("Where", ["c", "fill", "s2"], ["sm"]))
        if mask == "where":
            inputs.append(("c", TensorProto.BOOL, ["N", 1, 5, 5]))
            inits.append(("fill", np.array(-np.inf, np.float32)))
        else:
            inits.append(("c", np.triu(np.ones((5, 5), bool), 1)))
            inits.append(("fill", np.array(-10000.0, np.float32)))
        scores = "sm"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    return make(nodes, inputs, [("y", F, ["N", 2, 5, 3])], inits, opset=23)


@pytest.mark.parametrize("mask", ["none", "add", "where", "causal"])
def test_attention_fusion(mask):
    m = _attention_model(mask)
    feeds = {"q": w(3, 2, 5, 4, scale=2), "k": w(3, 5, 2, 4, scale=2), "v": w(3, 2, 5, 3)}
    if mask == "add":
        feeds["m"] = np.where(RNG.random((3, 1, 5, 5)) < 0.3, -1e9, 0).astype(np.float32)
    if mask == "where":
        feeds["c"] = RNG.random((3, 1, 5, 5)) < 0.4
        feeds["c"][..., 0] = False  # (no fully masked row: onnxruntime gives those NaN)
    opt = check(m, feeds, expect=["Attention"], absent=["Softmax", "MatMul", "FusedMatMul"])
    (att,) = [n for n in opt.graph if n.op_type == "Attention"]
    assert att.attr("scale") == 0.5
    check(m, feeds, disabled=["AttentionFusion"], expect=["Softmax"], absent=["Attention"])


@pytest.mark.parametrize("mask", ["none", "causal", "where"])
def test_attention_fusion_below_opset_23(mask):
    """Opset 13-22: the model-local ai.onyx HeadsAttention / CausalHeadsAttention (their
    bodies run in onnxruntime); a mask other than the constant causal one stays unfused."""
    m = onnx.load_from_string(_attention_model(mask))
    m.opset_import[0].version = 18
    feeds = {"q": w(3, 2, 5, 4), "k": w(3, 5, 2, 4), "v": w(3, 2, 5, 3)}
    if mask == "where":
        feeds["c"] = RNG.random((3, 1, 5, 5)) < 0.4
        feeds["c"][..., 0] = False
        check(m.SerializeToString(), feeds, expect=["Softmax"], absent=["HeadsAttention"])
        return
    fused = {"none": "HeadsAttention", "causal": "CausalHeadsAttention"}[mask]
    opt = check(m.SerializeToString(), feeds, expect=[fused], absent=["Softmax", "Attention"])
    assert [n.attr("scale") for n in opt.graph if n.op_type == fused] == [0.5]


def test_attention_fusion_needs_opset_13():
    m = onnx.load_from_string(_attention_model("none"))
    m.opset_import[0].version = 12
    feeds = {"q": w(1, 2, 5, 4), "k": w(1, 5, 2, 4), "v": w(1, 2, 5, 3)}
    check(m.SerializeToString(), feeds, expect=["Softmax"], absent=["HeadsAttention"])


def test_attention_fusion_real_model(tmp_path):
    """The dynamo GPT at opset 23: each layer's attention one Attention node; same outputs as
    unfused and as onnxruntime, which loads the saved model."""
    import json
    from pathlib import Path

    models = Path(__file__).parent / "models"
    entry = json.loads((models / "manifest.json").read_text())["gpt_dynamo_op23"]
    from benchmarks.zoo import make_feeds

    feeds = make_feeds(entry["inputs"], 2, seed=0)
    path = str(models / entry["file"])
    stats = {}
    opt = onyx.optimize(onyx.load(path), stats=stats)
    ops = [n.op_type for n in opt.graph]
    fused = ops.count("Attention") + ops.count("CausalPackedHeadsAttention")  # (packed: its QKV)
    assert stats["AttentionFusion"] == fused > 0 and "Softmax" not in ops
    off = onyx.SessionOptions()
    off.disabled_optimizers = ["AttentionFusion"]
    unfused = onyx.InferenceSession(path, off).run(None, feeds)
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    fused = onyx.InferenceSession(path, so).run(None, feeds)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    saved = ort.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"])
    again = saved.run(None, feeds)
    for f, u, r, a in zip(fused, unfused, ref, again):
        np.testing.assert_allclose(f, u, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(f, r, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------- fused-kernel numerics


def test_erf32_accuracy():
    """The float32 erf (Erf, Gelu, BiasGelu) against math.erf on a dense grid: below 1 ulp on
    average, a few ulps at worst, never beyond +-1; GELU from it to float32 precision."""
    from onyx.runtime.kernels.elementwise import erf
    from onyx.runtime.kernels.elementwise import erf_gelu as gelu

    x = np.concatenate([np.linspace(-5, 5, 400_001), [0.0, 1e-30, -1e-20]]).astype(np.float32)
    exact = np.array([math.erf(float(v)) for v in x])
    got = erf(x)
    assert got.dtype == np.float32 and np.all(np.abs(got) <= 1)
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32))
    assert ulps.mean() < 1 and ulps.max() <= 7, (ulps.mean(), ulps.max())
    assert np.isnan(erf(np.float32([np.nan]))[0]) and erf(np.float32([np.inf]))[0] == 1
    exact_gelu = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()])
    np.testing.assert_allclose(gelu(x), exact_gelu, rtol=2e-6, atol=2e-6)  # 1+erf cancels


def test_a_big_generated_weight_stays_a_computation_in_a_saved_model_but_folds_in_a_session(
    tmp_path,
):
    """ConstantOfShape of a 2 MB weight: onyx.optimize keeps it (a file would grow 2 MB); a
    session folds it, so that its conv takes a constant (onnx's light models make every weight
    this way, and each was made again on every run)."""
    shape = numpy_helper.from_array(np.array([512, 256, 2, 2], np.int64), "shape")
    fill = helper.make_tensor("fill", F, [1], [0.01])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"], value=fill),
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 256, 4, 4])],
                              [helper.make_tensor_value_info("y", F, None)], [shape])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    saved = onyx.optimize(onyx.loads(model.SerializeToString()))
    assert "ConstantOfShape" in [n.op_type for n in saved.graph]
    options = onyx.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "session.onnx")
    session = onyx.InferenceSession(model.SerializeToString(), options)
    ran = onyx.load(options.optimized_model_filepath)
    assert "ConstantOfShape" not in [n.op_type for n in ran.graph]
    x = RNG.standard_normal((1, 256, 4, 4)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_the_pipeline_lists_every_pass_once():
    """pipeline.py is the one list: a pass marked with graph_pass but not listed would never
    run, and names are what disabled_optimizers refers to."""
    import importlib
    import pkgutil

    import onyx.optimizer as optimizer
    from onyx.optimizer.core import Pass
    from onyx.optimizer.pipeline import PIPELINE

    marked = set()
    for info in pkgutil.iter_modules(optimizer.__path__):
        module = importlib.import_module(f"onyx.optimizer.{info.name}")
        marked |= {
            id(f) for f in vars(module).values() if isinstance(getattr(f, "graph_pass", None), Pass)
        }
    assert {id(p.fn) for p in PIPELINE} == marked
    names = [p.name for p in PIPELINE]
    assert len(set(names)) == len(names)
    assert optimizer.passes("basic") == [p.name for p in PIPELINE if p.level == 1]


def test_each_pass_run_has_a_result():
    g = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["a"]),
            helper.make_node("Neg", ["a"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = onyx.serde.loads(helper.make_model(g).SerializeToString())
    results = []
    onyx.optimize(model, "basic", results=results)
    by_name = {}
    for r in results:  # (the first run of each)
        by_name.setdefault(r.name, r)
    assert by_name["EliminateIdentity"].changed
    assert by_name["EliminateIdentity"].stats == {"IdentityElimination": 1}
    assert not by_name["ConstantFolding"].changed and by_name["ConstantFolding"].stats == {}


def test_constants_fold_to_their_own_tensor_kinds():
    """Constant nodes become initializers holding their tensors as they are (every element
    type, raw or typed fields, 0-d), results as onnxruntime's."""
    values = {
        "f16": np.array([[1.5, -2.25]], np.float16),
        "i64": np.array(7, np.int64),
        "b": np.array([True, False]),
        "f32": w(2),
    }
    nodes = [
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v, ""))
        for name, v in values.items()
    ]
    nodes.append(
        helper.make_node(
            "Constant", [], ["typed"], value=helper.make_tensor("", F, [2], [0.5, 4.0])
        )
    )
    nodes += [
        helper.make_node("Cast", ["f16"], ["f16f"], to=F),
        helper.make_node("Cast", ["i64"], ["i64f"], to=F),
        helper.make_node("Cast", ["b"], ["bf"], to=F),
        helper.make_node("Sum", ["x", "f16f", "i64f", "bf", "f32", "typed"], ["y"]),
    ]
    m = make(nodes, [("x", F, [1, 2])], [("y", F, [1, 2])])
    opt = check(m, {"x": w(1, 2)}, level="basic", absent=["Constant", "Cast"])
    assert [n.op_type for n in opt.graph] == ["Sum"]


def test_a_big_constant_stays_a_node_in_a_model_to_write_as_before():
    big = np.ones(2**19, np.float32)  # 2 MiB: over fold.MAX_GROWN_BYTES
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big, "")),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    m = make(nodes, [("x", F, [2**19])], [("y", F, [2**19])])
    assert "Constant" in [n.op_type for n in onyx.optimize(onyx.loads(m)).graph]
    sess = onyx.InferenceSession(m)  # a session's model folds it, whatever its size
    assert "Constant" not in [s.node.op_type for s in sess.plan.steps]
    x = w(2**19)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_conv_weight_scaling_rounds_once_into_a_line_aligned_array(dtype):
    """Conv+BatchNormalization/Mul scale W in float64 and round once to W's type (as
    W.astype(float64) * s did), into an array the plan takes without copying it."""
    from onyx.optimizer.conv import _scaled
    from onyx.runtime.values import ALIGNMENT

    weights = w(48, 8, 3, 3).astype(dtype)
    s = RNG.standard_normal(48) * 3
    expected = (weights.astype(np.float64) * s.reshape(-1, 1, 1, 1)).astype(dtype)
    got = _scaled(weights, s)
    assert got.dtype == dtype and got.flags.c_contiguous and got.ctypes.data % ALIGNMENT == 0
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


def test_overlapping_folding_scopes_on_two_threads_restore_the_warning_filters():
    """Constant folding silences warnings for a whole pass (fold._Silenced); two sessions
    created at once on two threads overlap their scopes (one enters, the other enters, the
    first leaves, then the second). Python's warning filters are one process-wide list: each
    scope restoring the list it found left the first scope's "ignore" installed for good,
    every later warning of the process unseen."""
    import threading
    import warnings

    from onyx.optimizer.fold import _Silenced

    before = list(warnings.filters)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with _Silenced() as s:
            s.enter()
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def second():
        a_in.wait(5)
        with _Silenced() as s:
            s.enter()
            b_in.set()
            a_out.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert list(warnings.filters) == before


def test_a_conv_with_a_scalar_weight_is_left_to_the_kernel():
    """(fuzz seed 85: a Conv swapped in with a scalar constant for W made the Conv+Add fusion
    index W's shape: a raw IndexError from optimize)"""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("w", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("b", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    optimized = onyx.optimize(onyx.loads(model.SerializeToString()))
    assert [n.op_type for n in optimized.graph.nodes] == ["Conv", "Add"]
    with pytest.raises(onyx.OnyxError):
        onyx.InferenceSession(model.SerializeToString()).run(
            None, {"x": np.ones((1, 1, 4, 4), np.float32)}
        )
