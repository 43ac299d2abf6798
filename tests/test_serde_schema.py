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


def test_the_compiled_schema_is_onyx_pb2s_and_builds_the_same_classes():
    """onyx/proto/__init__.py makes the classes from _file.py (without onyx_pb2's imports):
    the schema must be onyx_pb2's, and onyx_pb2 must end up with the very same classes."""
    from onyx.proto import _file, onyx_pb2

    assert _file.SERIALIZED == onyx_pb2.DESCRIPTOR.serialized_pb
    for name in MESSAGES:
        assert getattr(P, name) is getattr(onyx_pb2, name)
    assert P.TensorProto.Segment is onyx_pb2.TensorProto.Segment
    assert P.TypeProto.Tensor.__qualname__ == "TypeProto.Tensor"


@pytest.mark.parametrize("implementation", ["upb", "python"])
def test_messages_round_trip_under_each_protobuf_implementation(implementation):
    import os
    import subprocess
    import sys

    code = (
        "import pickle, sys\n"
        "import onyx.proto as P\n"
        "m = P.ModelProto(ir_version=9)\n"
        "m.graph.node.add(op_type='Relu', input=['x'], output=['y'])\n"
        "t = m.graph.initializer.add(name='w', data_type=P.TensorProto.FLOAT, dims=[1])\n"
        "t.segment.begin = 1\n"
        "back = P.ModelProto.FromString(m.SerializeToString())\n"
        "print('descriptor_pool' in str(sorted(sys.modules)))\n"
        "assert back == m and pickle.loads(pickle.dumps(back)) == m\n"
        "seg = pickle.loads(pickle.dumps(back.graph.initializer[0].segment))\n"
        "assert type(seg) is P.TensorProto.Segment and seg.begin == 1\n"
    )
    env = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    # upb: the classes are made without protobuf's pure-Python machinery
    assert out.stdout.split()[0] == ("False" if implementation == "upb" else "True")
