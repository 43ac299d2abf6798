"""Lossless round-trips: load then save with no edits gives a message equal to the original."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx import ir

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _node_models():
    from onnx.backend.test.loader import load_model_tests

    return [(c.name, c.model) for c in load_model_tests(kind="node") if c.model is not None]


@pytest.fixture(scope="module")
def node_models():
    return _node_models()


@pytest.mark.parametrize("materialize", [False, True], ids=["lazy", "converted"])
def test_node_suite_round_trip(node_models, materialize):
    assert len(node_models) > 1000
    bad = []
    for name, proto in node_models:
        model = onyx.loads(proto.SerializeToString())
        if materialize:
            assert model.graph is not None
        back = onnx.ModelProto.FromString(onyx.dumps(model))
        if back != proto:
            bad.append(name)
    assert not bad, bad[:20]


@pytest.mark.parametrize("kind", ["simple", "pytorch-converted", "pytorch-operator", "light"])
def test_on_disk_models_round_trip(kind, tmp_path):
    paths = sorted(glob.glob(os.path.join(DATA, kind, "**", "*.onnx"), recursive=True))
    assert paths
    for path in paths:
        original = onnx.load(path)
        model = onyx.load(path)
        assert model.graph is not None  # convert every node
        out = tmp_path / "m.onnx"
        onyx.save(model, out)
        assert onnx.load(out) == original, path


def _with_unknown(msg, field: int = 1999, payload: bytes = b"kept") -> None:
    """Append an unknown length-delimited field to a message (onnx's class)."""
    extra = bytes([((field << 3) | 2) & 0x7F | 0x80, (field << 3 | 2) >> 7]) + bytes([len(payload)])
    msg.MergeFromString(extra + payload)


def _rich_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["x", "outer"], ["y"])],
        "body",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    nodes = [
        helper.make_node("Identity", ["a"], ["outer"], name="id", doc_string="d"),
        helper.make_node("Loop", ["", "cond", "outer"], ["r"], body=body, name="loop"),
        helper.make_node("Cast", ["a"], ["c"], to=TensorProto.FLOAT16, domain=""),
    ]
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    g = helper.make_graph(
        nodes,
        "main",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
        [w],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT16, ["N", 2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    helper.set_model_props(m, {"author": "me", "k": "v"})
    return m


def test_unknown_fields_survive_everywhere(tmp_path):
    m = _rich_model()
    _with_unknown(m)
    _with_unknown(m.graph)
    _with_unknown(m.graph.node[0])
    _with_unknown(m.graph.node[1].attribute[0])
    _with_unknown(m.graph.node[1].attribute[0].g.node[0])
    _with_unknown(m.graph.initializer[0])
    _with_unknown(m.graph.input[0])
    _with_unknown(m.graph.input[0].type)
    _with_unknown(m.opset_import[0])
    data = m.SerializeToString()
    for materialize in (False, True):
        model = onyx.loads(data)
        if materialize:
            assert model.graph is not None
        assert onnx.ModelProto.FromString(onyx.dumps(model)) == m


def test_edit_keeps_unknown_fields_and_applies_the_edit():
    m = _rich_model()
    _with_unknown(m.graph.node[0])
    model = onyx.loads(m.SerializeToString())
    g = model.graph
    ident = g.nodes[0]
    ident.name = "renamed"
    relu = ir.Node("Relu", [g.outputs[0]], ["z"])
    g.append(relu)
    g.outputs.append(relu.outputs[0])
    back = onnx.ModelProto.FromString(onyx.dumps(model))
    assert back.graph.node[0].name == "renamed"
    assert back.graph.node[-1].op_type == "Relu" and back.graph.output[-1].name == "z"
    expected = onnx.NodeProto()
    expected.CopyFrom(m.graph.node[0])
    expected.name = "renamed"
    assert back.graph.node[0] == expected


def test_outer_scope_values_are_shared():
    model = onyx.loads(_rich_model().SerializeToString())
    g = model.graph
    outer = g.nodes[0].outputs[0]
    body = g.nodes[1].attributes["body"].value
    assert body.nodes[0].inputs[1] is outer
    assert any(n is body.nodes[0] for n, _ in outer.uses())


def test_undefined_name_becomes_fresh_value():
    g = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"])], "g", [], [])
    model = onyx.loads(helper.make_model(g).SerializeToString())
    v = model.graph.nodes[0].inputs[0]
    assert v.name == "nowhere" and v.producer is None


def test_attribute_values_in_ir():
    model = onyx.loads(_rich_model().SerializeToString())
    g = model.graph
    assert g.nodes[2].attributes["to"].value == TensorProto.FLOAT16
    assert isinstance(g.nodes[1].attributes["body"].value, ir.Graph)
    assert g.inputs[0].type == ir.TensorType(ir.DataType.FLOAT, ("N", 2))
    assert model.metadata_props == {"author": "me", "k": "v"}
    np.testing.assert_array_equal(
        g.initializers["w"].const_value.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3)
    )


def test_new_model_from_ir_is_valid(tmp_path):
    x = ir.Value("x", ir.TensorType(ir.DataType.FLOAT, (2, 3)))
    w = ir.Value("w", const_value=ir.Tensor(np.ones((2, 3), np.float32), name="w"))
    add = ir.Node("Add", [x, w], 1)
    relu = ir.Node("Relu", [add.outputs[0]], ["y"])
    relu.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, (2, 3))
    g = ir.Graph([x], [relu.outputs[0]], [add, relu], [w], name="g")
    model = ir.Model(g, {"": 21})
    path = tmp_path / "new.onnx"
    onyx.save(model, path)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.node[0].output[0] == proto.graph.node[1].input[0] != ""


def test_file_objects_and_bytes(tmp_path):
    m = _rich_model()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with open(path, "rb") as f:
        model = onyx.load(f)
    buf = tmp_path / "out.onnx"
    with open(buf, "wb") as f:
        onyx.save(model, f)
    assert onnx.load(buf) == m
    assert onnx.ModelProto.FromString(onyx.dumps(onyx.load(path.read_bytes()))) == m
