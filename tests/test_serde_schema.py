"""onyx.proto matches ONNX's wire schema field for field (onnx is the oracle)."""

from __future__ import annotations

import onnx
import pytest

import onyx.proto as P

MESSAGES = [name for name in P.__all__]


def _facts(desc):
    """(name, number, type, repeated, packed, message/enum short name) of every field, nested too."""
    out = {}
    for f in desc.fields:
        ref = f.message_type or f.enum_type
        out[f.name] = (
            f.number,
            f.type,
            f.is_repeated,
            f.is_packed,
            ref.name if ref else None,
            f.containing_oneof.name if f.containing_oneof else None,
        )
    nested = {n.name: _facts(n) for n in desc.nested_types}
    enums = {e.name: [(v.name, v.number) for v in e.values] for e in desc.enum_types}
    return out, nested, enums


@pytest.mark.parametrize("name", MESSAGES)
def test_message_matches_onnx(name):
    ours = getattr(P, name).DESCRIPTOR
    theirs = getattr(onnx, name).DESCRIPTOR
    assert _facts(ours) == _facts(theirs)


def test_every_onnx_message_is_present():
    files = [onnx.ModelProto.DESCRIPTOR.file, onnx.SequenceProto.DESCRIPTOR.file]
    names = {n for f in files for n in f.message_types_by_name}
    assert names <= set(MESSAGES)


def test_own_package_coexists_with_onnx():
    assert P.ModelProto.DESCRIPTOR.full_name == "onyx.proto.ModelProto"
    model = onnx.helper.make_model(
        onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [], [])
    )
    data = model.SerializeToString()
    assert P.ModelProto.FromString(data).SerializeToString() == data
