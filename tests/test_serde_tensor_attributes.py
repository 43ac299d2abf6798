"""TENSOR attributes read by the reader's plain path (a name, a type and a tensor of dims,
element type and raw bytes: a Constant's value as exporters write it) and by the general path
give the same attribute, and the model saves back to the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.serde import reader, wire_reader
from onyx.serde.proto_load import load_model


def _constant_model(value: TensorProto, **attr_fields) -> bytes:
    node = helper.make_node("Constant", [], ["c"], value=value)
    for field, v in attr_fields.items():
        setattr(node.attribute[0], field, v)
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", 1, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _unnamed(arr: np.ndarray) -> TensorProto:
    t = numpy_helper.from_array(arr)
    t.ClearField("name")
    return t


CASES = {
    "unnamed": _unnamed(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "unnamed scalar": _unnamed(np.array(7, dtype=np.int64)),
    "named": numpy_helper.from_array(np.arange(3, dtype=np.int32), name="w"),
    "typed data": helper.make_tensor("t", TensorProto.FLOAT, [2], [1.5, 2.5]),
    "empty": _unnamed(np.zeros((0, 2), dtype=np.float32)),
}


def _read(data: bytes, plain: bool, monkeypatch, wire: bool = False) -> tuple:
    """What the Reader (the protobuf path; ``plain``: its plain case allowed) or ``wire``:
    serde/wire_reader.py (where it follows the model) makes of a Constant's value."""
    if not plain:
        monkeypatch.setattr(reader, "_plain_tensor_attribute", lambda a: None)
    m = (wire and wire_reader.read_model(data)) or load_model(data, "<bytes>", None, False)
    a = m.graph.nodes[0].attributes["value"]
    t = a.value
    fields = (a.name, a.type, a.doc_string, a.extras, t.name, t.dtype, t.shape, t.extras)
    saved = onyx.serde.dumps(m)
    monkeypatch.undo()
    return fields, t.numpy().tobytes(), saved


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("doc", ["", "with a doc string"])
def test_plain_and_general_paths_agree(case, doc, monkeypatch):
    data = _constant_model(CASES[case], **({"doc_string": doc} if doc else {}))
    assert _read(data, True, monkeypatch) == _read(data, False, monkeypatch)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("doc", ["", "with a doc string"])
def test_the_wire_path_agrees(case, doc, monkeypatch):
    data = _constant_model(CASES[case], **({"doc_string": doc} if doc else {}))
    assert _read(data, True, monkeypatch, wire=True) == _read(data, True, monkeypatch)


def test_the_plain_path_takes_an_exporters_constant(monkeypatch):
    taken = []
    plain = reader._plain_tensor_attribute  # noqa: SLF001
    monkeypatch.setattr(
        reader, "_plain_tensor_attribute", lambda a: taken.append(plain(a)) or taken[-1]
    )
    model = load_model(_constant_model(CASES["unnamed"]), "<bytes>", None, False)
    value = model.graph.nodes[0].attributes["value"]
    assert len(taken) == 1 and taken[0] is value
    np.testing.assert_array_equal(value.value.numpy(), np.arange(6).reshape(2, 3))
