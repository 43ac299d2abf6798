"""onyx.helper (onnx.helper's functions on onyx.ir) and the typed builder onyx.opset."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onyx
from onyx import helper as h
from onyx.ir import DataType as T


def _build(mod, fp):
    """The same model through onnx.helper (mod=oh) or onyx.helper (mod=h)."""
    then = mod.make_graph(
        [mod.make_node("Add", ["s", "one"], ["t_out"])],
        "then",
        [],
        [mod.make_tensor_value_info("t_out", fp, [2])],
    )
    other = mod.make_graph(
        [mod.make_node("Neg", ["s"], ["e_out"])],
        "else",
        [],
        [mod.make_tensor_value_info("e_out", fp, [2])],
    )
    nodes = [
        mod.make_node("Scale2", ["x"], ["s"], name="call", domain="local", k=3.0),
        mod.make_node("Greater", ["c", "zero"], ["cond"]),
        mod.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
        mod.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2),
        mod.make_node("Concat", ["b", "a"], ["z"], axis=0),
        mod.make_node("CastLike", ["z", "x"], ["w"], saturate=1),
    ]
    inits = [
        mod.make_tensor("one", fp, [2], [1.0, 1.0]),
        mod.make_tensor("zero", T.FLOAT, [], [0.0]),
        mod.make_tensor("names", T.STRING, [2], ["a", "b"]),
    ]
    g = mod.make_graph(
        nodes,
        "main",
        [mod.make_tensor_value_info("x", fp, [2]), mod.make_tensor_value_info("c", T.FLOAT, [])],
        [mod.make_tensor_value_info("y", fp, [2]), mod.make_tensor_value_info("w", fp, ["N"])],
        inits,
        value_info=[mod.make_tensor_value_info("s", fp, [2])],
    )
    fn = mod.make_function(
        "local",
        "Scale2",
        ["X"],
        ["Y"],
        [
            mod.make_node("Constant", [], ["K"], value_float=2.0),
            mod.make_node("CastLike", ["K", "X"], ["Kc"]),
            mod.make_node("Mul", ["X", "Kc"], ["Y"]),
        ],
        [mod.make_opsetid("", 21)],
        attributes=["k"],
    )
    return mod.make_model(
        g,
        opset_imports=[mod.make_opsetid("", 21), mod.make_opsetid("local", 1)],
        functions=[fn],
        producer_name="p",
        ir_version=10,
    )


@pytest.mark.parametrize("fp", [T.FLOAT, T.FLOAT16])
def test_helper_builds_what_onnx_helper_builds(fp):
    ours = _build(h, fp)
    theirs = _build(oh, int(fp))
    proto = onnx.load_from_string(onyx.dumps(ours))
    onnx.checker.check_model(proto, full_check=True)
    assert onnx.printer.to_text(proto) == onnx.printer.to_text(theirs)
    onyx.check(ours)
    x = np.array([1, 2], np.float32).astype(onyx.ir.to_numpy(fp))
    y, w = onyx.InferenceSession(onyx.dumps(ours)).run(None, {"x": x, "c": np.float32(1)})
    np.testing.assert_allclose(y, x * 2 + 1)
    np.testing.assert_allclose(w, [2, 1])


def test_subgraph_reads_outer_value_object():
    model = _build(h, T.FLOAT)
    g = model.graph
    s = g.nodes[0].outputs[0]
    then = g.nodes[2].attributes["then_branch"].value
    assert then.nodes[0].inputs[0] is s
    assert then.nodes[0].inputs[1] is g.initializers["one"]


def test_make_tensor_and_attribute_match_onnx():
    t = h.make_tensor("t", T.BFLOAT16, [2, 2], [1.0, 2.5, -3.0, 0.5])
    ref = oh.make_tensor("t", onnx.TensorProto.BFLOAT16, [2, 2], [1.0, 2.5, -3.0, 0.5])
    np.testing.assert_array_equal(
        onyx.to_array(t).astype(np.float32), onnx.numpy_helper.to_array(ref).astype(np.float32)
    )
    raw = h.make_tensor("r", T.INT32, [2], np.array([7, 9], np.int32).tobytes(), raw=True)
    assert onyx.to_array(raw).tolist() == [7, 9]
    assert h.make_attribute("a", [1, 2.5]).type == onyx.ir.AttrType.FLOATS
    assert h.make_attribute("e", [], attr_type=onyx.ir.AttrType.INTS).value == []
    with pytest.raises(onyx.OnyxError, match="empty list needs attr_type"):
        h.make_attribute("e", [])
    with pytest.raises(onyx.OnyxError, match="3 values for dims"):
        h.make_tensor("bad", T.FLOAT, [2], [1, 2, 3])
    m = h.make_model(h.make_graph([], "g", [], []))
    assert m.opset("") == onyx.defs.max_opset("") and m.ir_version == 14


# -- the typed builder -----------------------------------------------------------------------


def test_builder_infers_types_and_runs():
    op = onyx.opset(21)
    x = op.input("x", "float32", ["N", 3])
    h1 = op.Add(x, np.array([1, 2, 3], np.float32))
    assert str(h1.type) == "tensor(float)" and h1.shape.dims == ("N", 3)
    r = op.ReduceSum(op.Relu(h1), np.array([1]), keepdims=0)
    assert r.shape.dims == ("N",)
    a, b = op.Split(x, axis=1, num_outputs=2, _outputs=2)
    assert a.shape is not None and a.shape.dims[0] == "N"
    model = op.build([x], {"y": r})
    onnx.checker.check_model(onnx.load_from_string(onyx.dumps(model)), full_check=True)
    xv = np.array([[1, -5, 0], [-2, 0, 1]], np.float32)
    (y,) = onyx.InferenceSession(onyx.dumps(model)).run(None, {"x": xv})
    np.testing.assert_allclose(y, np.maximum(xv + [1, 2, 3], 0).sum(1))
    assert len(model.graph.nodes) == 5  # the unused Split is left out


def test_builder_errors_at_the_line_that_built_the_node():
    op = onyx.opset(17)
    x = op.input("x", "float32", [2, 3])
    cases = [
        (lambda: op.Add(x, np.array([1], np.int64)), "earlier T input is tensor\\(float\\)"),
        (lambda: op.Softmax(x, axs=1), "no attribute 'axs' \\(it has: axis\\)"),
        (lambda: op.Softmax(x, axis="a"), "'axis' takes INT"),
        (lambda: op.Gemm(x), "1 inputs given, it takes 2 to 3"),
        (lambda: op.MatMul(x, x), "MatMul"),
        (lambda: op.Gelu(x), "no operator 'Gelu' in ai.onnx opset 17"),
        (lambda: op.Cast(x), "required attribute"),
        (lambda: op.Abs(op.input("s", "string", [2])), "allows"),
    ]
    for make, message in cases:
        with pytest.raises(onyx.OnyxError, match=message) as info:
            make()
        assert "test_tools_helper.py" in str(info.value)  # the caller's file and line


def test_builder_refuses_outputs_needing_unlisted_inputs():
    op = onyx.opset(21)
    x = op.input("x", "float32", [2])
    y = op.input("y", "float32", [2])
    with pytest.raises(onyx.OnyxError, match="not among the inputs"):
        op.build([x], [op.Add(x, y)])
