"""serde/wire_reader.py: a plain model read without protobuf, exactly as the Reader reads it
(issue 23, cold start)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx.errors import FormatError
from onyx.proto import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    OperatorSetIdProto,
    StringStringEntryProto,
    TensorProto,
    TensorShapeProto,
    TypeProto,
    ValueInfoProto,
)
from onyx.serde import dumps, wire_reader
from onyx.serde.proto_load import load_model
from onyx.serde.wire import encode_varint

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "onyx" / "examples" / "tiny_cnn.onnx"


def _model_files() -> list[Path]:
    files = [TINY, *sorted((ROOT / "tests").rglob("*.onnx"))]
    serving = ROOT / "benchmarks" / "models" / "serving"  # (generated, when present)
    return files + sorted(serving.glob("*.onnx"))


# -- the schema ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "prefix", "field_prefix"),
    [
        (ModelProto, "M_", None),
        (OperatorSetIdProto, "OPSET_", None),
        (StringStringEntryProto, "ENTRY_", None),
        (GraphProto, "G_", None),
        (NodeProto, "N_", None),
        (AttributeProto, "A_", None),
        (ValueInfoProto, "VI_", None),
        (TypeProto, "TYPE_", None),
        (TypeProto.Tensor, "TT_", None),
        (TypeProto.Sequence, "SEQ_", None),
        (TypeProto.Map, "MAP_", None),
        (TensorShapeProto, "SHAPE_", None),
        (TensorShapeProto.Dimension, "DIM_", "dim_"),
        (TensorProto, "T_", None),
    ],
)
def test_field_numbers_are_the_schemas(message, prefix, field_prefix):
    consts = {k: v for k, v in vars(wire_reader).items() if k.startswith(prefix) and k.isupper()}
    assert consts
    fields = message.DESCRIPTOR.fields_by_name
    for const, number in consts.items():
        name = (field_prefix or "") + const[len(prefix) :].lower()
        assert fields[name].number == number, const


def test_attribute_value_fields_are_the_schemas():
    from onyx.serde.reader import ATTR_FIELD

    enum = AttributeProto.AttributeType
    fields = AttributeProto.DESCRIPTOR.fields_by_name
    for code, number in wire_reader.ATTR_VALUE.items():
        kind = onyx.ir.AttrType(code)
        assert enum.Value(kind.name) == code
        assert fields[ATTR_FIELD[kind]].number == number


# -- exactness -------------------------------------------------------------------------------


def _structure(m) -> tuple:
    """Everything the IR holds of ``m``, Values and nodes by their place: subgraphs whole, and
    each Value's uses in their order (the optimizer walks them so)."""
    ids, node_ids = {}, {}

    def number(g):  # (nodes in order, each node's subgraphs after it: as both readers go)
        for n in g:
            node_ids[id(n)] = len(node_ids)
            for sub in n.subgraphs():
                number(sub)

    def vid(v):
        return None if v is None else ids.setdefault(id(v), len(ids))

    def plain(x):  # (extras may hold Values: compared by their place in the graph)
        if isinstance(x, onyx.ir.Value):
            return ("value", vid(x))
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        return x

    def value(v):
        uses = [(node_ids.get(id(n)), i) for n, i in v.iter_uses()]
        return (vid(v), v.name, v.type, v.doc_string, v.metadata_props, plain(v.extras), uses)

    def attr_value(v):
        if isinstance(v, onyx.ir.Tensor):
            return (v.name, v.dtype, v.shape, v.numpy().tobytes())
        if isinstance(v, float):  # (by its bits: NaN too)
            return ("float", struct.pack("<d", v))
        if isinstance(v, onyx.ir.Graph):
            return graph(v)
        if isinstance(v, list):
            return [attr_value(x) for x in v]
        return v

    def graph(g):
        nodes = [
            (
                n.op_type,
                n.domain,
                n.name,
                n.doc_string,
                n.extras,
                [vid(v) for v in n.inputs],
                [value(v) for v in n.outputs],
                [
                    (a.name, a.type, attr_value(a.value), a.doc_string, a.extras)
                    for a in n.attributes.values()
                ],
            )
            for n in g
        ]
        inits = [
            (k, value(v), v.const_value.dtype, v.const_value.shape, v.const_value.numpy().tobytes())
            for k, v in g.initializers.items()
        ]
        return (
            [value(v) for v in g.inputs],
            inits,
            nodes,
            [value(v) for v in g.outputs],
            [value(v) for v in g.value_info],
            (g.name, g.doc_string, g.metadata_props, plain(g.extras)),
        )

    number(m.graph)
    return (
        graph(m.graph),
        (m.ir_version, m.opset_imports, m.producer_name, m.producer_version, m.domain),
        (m.model_version, m.doc_string, m.metadata_props, m.extras, list(m.functions)),
    )


def test_every_model_file_reads_as_the_protobuf_path_reads_it(monkeypatch):
    read = 0
    for path in _model_files():
        data = path.read_bytes()
        model = wire_reader.read_model(data)
        if model is None:
            continue
        read += 1
        ref = load_model(data, str(path), str(path.parent), False)
        assert dumps(model) == dumps(ref), path  # (unedited: the graph's bytes as they came)
        assert _structure(model) == _structure(ref), path
        assert dumps(model) == dumps(ref), path
    assert read >= 10  # (tiny_cnn, the torchscript exports, the optimum models, ...)


def test_plain_cnn_is_read_without_protobuf():
    assert wire_reader.read_model(TINY.read_bytes()) is not None


# -- declining -------------------------------------------------------------------------------


def _tiny() -> ModelProto:
    mp = ModelProto()
    mp.ParseFromString(TINY.read_bytes())
    return mp


def _branch(name: str, nodes, outputs) -> GraphProto:
    """A subgraph of ``nodes`` (NodeProtos) whose outputs are the names ``outputs``."""
    return GraphProto(name=name, node=nodes, output=[ValueInfoProto(name=o) for o in outputs])


def _if(cond: str, out: str, then_reads: str, else_reads: str) -> NodeProto:
    """An If node whose branches read ``then_reads`` / ``else_reads`` (outer names)."""
    then = _branch("then", [NodeProto(op_type="Identity", input=[then_reads], output=["t"])], ["t"])
    other = _branch("else", [NodeProto(op_type="Relu", input=[else_reads], output=["e"])], ["e"])
    return NodeProto(
        op_type="If",
        input=[cond],
        output=[out],
        attribute=[
            AttributeProto(name="then_branch", type=5, g=then),
            AttributeProto(name="else_branch", type=5, g=other),
        ],
    )


def _add_if(mp, node: NodeProto, at: int | None = None) -> None:
    mp.graph.initializer.add(name="cond", data_type=9, dims=[], raw_data=b"\x01")
    if at is None:
        mp.graph.node.append(node)
    else:
        mp.graph.node.insert(at, node)


#: float32 bit patterns: signaling NaNs of both signs, a quiet one, denormals, 1.5, inf.
_SNANS = np.array(
    [0x7F800001, 0xFF826215, 0x7FC00000, 0x7FA00000, 1, 0x80000001, 0x3FC00000, 0x7F800000],
    np.uint32,
).view("<f4")


#: float64 bit patterns: signaling NaNs of both signs, a quiet one, a denormal, 1.5.
_SNANS64 = np.array(
    [0x7FF0000000000001, 0xFFF4000000000000, 0x7FF8000000000000, 1, 0x3FF8000000000000],
    np.uint64,
).view("<f8")


def _packed_floats(name: str, values: np.ndarray, field: int = 4, dtype: int = 1) -> TensorProto:
    """A tensor whose typed field holds ``values``' bytes as they are (a Python float list
    would have made every signaling NaN quiet on its way)."""
    tp = TensorProto(name=name, data_type=dtype, dims=[len(values)])
    tp.MergeFromString(_field(field, values.tobytes()))
    return tp


def _changed(edit) -> bytes:
    mp = _tiny()
    edit(mp)
    return mp.SerializeToString()


_EDITS = {
    "node overload": lambda mp: setattr(mp.graph.node[0], "overload", "x"),
    "node metadata": lambda mp: mp.graph.node[0].metadata_props.add(key="a", value="b"),
    "graph doc written empty": lambda mp: setattr(mp.graph, "doc_string", ""),
    "node domain written empty": lambda mp: setattr(mp.graph.node[0], "domain", ""),
    "model doc written empty": lambda mp: setattr(mp, "doc_string", ""),
    "an input used before its definition": lambda mp: mp.graph.node[0].input.append("later"),
    "an output defined twice": lambda mp: mp.graph.node[1].output.append(
        mp.graph.node[0].output[0]
    ),
    "value_info unlike the output": lambda mp: mp.graph.value_info.add().CopyFrom(
        ValueInfoProto(name=mp.graph.input[0].name, doc_string="other")
    ),
    "a dim's denotation": lambda mp: setattr(
        mp.graph.input[0].type.tensor_type.shape.dim[0], "denotation", "N"
    ),
    "a typed initializer": lambda mp: mp.graph.initializer.add(
        name="typed", data_type=1, dims=[2], float_data=[1.0, 2.0]
    ),
    "an attribute's doc": lambda mp: setattr(mp.graph.node[0].attribute[0], "doc_string", "d"),
    "model metadata": lambda mp: mp.metadata_props.add(key="k", value="v"),
    "graph metadata": lambda mp: mp.graph.metadata_props.add(key="k", value="v"),
    "input metadata": lambda mp: mp.graph.input[0].metadata_props.add(key="k", value="v"),
    "model version written 0": lambda mp: setattr(mp, "model_version", 0),
    "external data": lambda mp: setattr(mp.graph.initializer[0], "data_location", 1),
    "a sparse initializer": lambda mp: mp.graph.sparse_initializer.add(),
    "a function": lambda mp: mp.functions.add(name="f", domain="d"),
    "a subgraph": lambda mp: mp.graph.node[0].attribute.add(name="body", type=5, g=GraphProto()),
    "subgraphs reading outer names": lambda mp: _add_if(mp, _if("cond", "picked", "c1", "r2")),
    "a subgraph reading a name defined after its node": lambda mp: _add_if(
        mp, _if("cond", "picked", "image", "r2"), at=1
    ),
    "nested subgraphs": lambda mp: _add_if(
        mp,
        NodeProto(
            op_type="Loop",
            input=["", "cond"],
            output=["looped"],
            attribute=[
                AttributeProto(
                    name="body",
                    type=5,
                    g=_branch(
                        "body",
                        [
                            _if("cond", "inner", "image", "c1"),
                            NodeProto(op_type="Identity", input=["cond"], output=["again"]),
                        ],
                        ["again", "inner"],
                    ),
                )
            ],
        ),
    ),
    "a subgraph defining a name it read outside": lambda mp: _add_if(
        mp,
        NodeProto(
            op_type="If",
            input=["cond"],
            output=["picked"],
            attribute=[
                AttributeProto(
                    name="then_branch",
                    type=5,
                    g=_branch(
                        "then",
                        [
                            NodeProto(op_type="Relu", input=["c1"], output=["x"]),
                            NodeProto(op_type="Relu", input=["x"], output=["c1"]),
                        ],
                        ["c1"],
                    ),
                ),
                AttributeProto(name="else_branch", type=5, g=_branch("else", [], ["c1"])),
            ],
        ),
    ),
    "a tensor of no elements and no data": lambda mp: mp.graph.node[0].attribute.add(
        name="value", type=4, t=TensorProto(dims=[0, 4], data_type=1, name="nothing")
    ),
    "a long list": lambda mp: mp.graph.node[0].attribute.add(
        name="long", type=7, ints=list(range(600))
    ),
    "long lists": lambda mp: mp.graph.node[0].attribute.extend(
        [
            AttributeProto(name="f", type=6, floats=[i / 7 for i in range(599)] + [float("nan")]),
            AttributeProto(name="s", type=8, strings=[b"LEAF", b"BRANCH_LEQ"] * 300 + [b"\xff"]),
            AttributeProto(name="i", type=7, ints=[-(2**40), 2**63 - 1] + list(range(700))),
        ]
    ),
    "lists of a hundred": lambda mp: mp.graph.node[0].attribute.extend(
        [
            AttributeProto(name="f", type=6, floats=[i / 3 for i in range(100)]),
            AttributeProto(name="s", type=8, strings=[b"x" * 200, b"\xfe"] * 50),
            AttributeProto(name="i", type=7, ints=[-1, 300] * 50),
        ]
    ),
    "a sequence of maps": lambda mp: mp.graph.output.add().CopyFrom(
        ValueInfoProto(
            name="zipped",
            type=TypeProto(
                sequence_type=TypeProto.Sequence(
                    elem_type=TypeProto(
                        map_type=TypeProto.Map(
                            key_type=7,
                            value_type=TypeProto(tensor_type=TypeProto.Tensor(elem_type=1)),
                        )
                    )
                )
            ),
        )
    ),
    "an empty sequence type": lambda mp: mp.graph.output.add().CopyFrom(
        ValueInfoProto(name="s", type=TypeProto(sequence_type=TypeProto.Sequence()))
    ),
    "a map without a key type": lambda mp: mp.graph.output.add().CopyFrom(
        ValueInfoProto(name="m", type=TypeProto(map_type=TypeProto.Map()))
    ),
    "signaling NaNs in short and long float fields": lambda mp: mp.graph.initializer.extend(
        [
            _packed_floats("short", _SNANS[:3]),
            _packed_floats("long", np.tile(_SNANS, 5)),
            _packed_floats("long64", np.tile(_SNANS64, 5), field=10, dtype=11),
        ]
    ),
    "a typed Constant": lambda mp: mp.graph.node[0].attribute.add(
        name="value", type=4, t=TensorProto(dims=[1], data_type=1, float_data=[1.0])
    ),
    "a tensor's doc string": lambda mp: setattr(mp.graph.initializer[0], "doc_string", "w"),
    "a tensor's doc string written empty": lambda mp: setattr(
        mp.graph.initializer[0], "doc_string", ""
    ),
    "data_location written DEFAULT": lambda mp: setattr(
        mp.graph.initializer[0], "data_location", 0
    ),
    "a typed Constant's doc and location": lambda mp: mp.graph.node[0].attribute.add(
        name="value",
        type=4,
        t=TensorProto(dims=[2], data_type=7, int64_data=[-1, 300], doc_string="", data_location=0),
    ),
    "an empty raw initializer": lambda mp: mp.graph.initializer.add(
        name="empty", data_type=1, dims=[0, 3], raw_data=b""
    ),
    "a string initializer": lambda mp: mp.graph.initializer.add(
        name="s", data_type=8, dims=[1], string_data=[b"x"]
    ),
    "typed initializers": lambda mp: [
        mp.graph.initializer.add(name=f"t{d}", data_type=d, dims=[3], **{f: v})
        for d, f, v in [
            (1, "float_data", [1.5, float("nan"), -0.0]),
            (11, "double_data", [1.5, float("inf"), -2.0]),
            (7, "int64_data", [-1, 2**40, 0]),
            (6, "int32_data", [-5, 7, 2**31 - 1]),
            (3, "int32_data", [-5, 300, 1]),
            (2, "int32_data", [255, 256, -1]),
            (9, "int32_data", [0, 1, 2]),
            (12, "uint64_data", [1, 2**33, 3]),
            (13, "uint64_data", [1, 2**63, 3]),
        ]
    ],
}


@pytest.mark.parametrize("what", sorted(set(_EDITS) - {"external data"}))
def test_what_it_reads_or_declines_loads_as_before(what):
    data = _changed(_EDITS[what])
    ref = load_model(data, "<bytes>", None, False)
    model = wire_reader.read_model(data) or onyx.load(data)  # (a process's first load)
    assert _structure(model) == _structure(ref)
    assert dumps(model) == dumps(ref)


@pytest.mark.parametrize(
    "what",
    [
        "node overload",
        "an input used before its definition",
        "an output defined twice",
        "value_info unlike the output",
        "a dim's denotation",
        "an attribute's doc",
        "external data",
        "a sparse initializer",
        "a function",
        "a subgraph defining a name it read outside",
        "a string initializer",
        "a map without a key type",
    ],
)
def test_what_it_does_not_follow_declines(what):
    assert wire_reader.read_model(_changed(_EDITS[what])) is None


@pytest.mark.parametrize(
    "what",
    [
        "node metadata",
        "node domain written empty",
        "graph doc written empty",
        "model doc written empty",
        "model version written 0",
        "model metadata",
        "graph metadata",
        "input metadata",
        "typed initializers",
        "a typed Constant",
        "signaling NaNs in short and long float fields",
        "a long list",
        "long lists",
        "lists of a hundred",
        "a sequence of maps",
        "an empty sequence type",
        "a tensor's doc string",
        "a tensor's doc string written empty",
        "data_location written DEFAULT",
        "a typed Constant's doc and location",
        "an empty raw initializer",
        "a subgraph",
        "subgraphs reading outer names",
        "a subgraph reading a name defined after its node",
        "nested subgraphs",
        "a tensor of no elements and no data",
    ],
)
def test_what_it_follows_is_read(what):
    assert wire_reader.read_model(_changed(_EDITS[what])) is not None


def _field(number: int, payload) -> bytes:
    """One field as protobuf encodes it: a varint for an int, else a LEN field."""
    if isinstance(payload, int):
        return encode_varint(number << 3) + encode_varint(payload)
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def _packed_model(attribute: bytes) -> bytes:
    """A model of one Identity node holding ``attribute`` (an AttributeProto's bytes), written
    by hand: protobuf's serializer writes proto2 lists unpacked only."""
    node = _field(1, b"x") + _field(2, b"y") + _field(4, b"Identity") + _field(5, attribute)
    vi = _field(1, b"x")
    graph = _field(1, node) + _field(2, b"g") + _field(11, vi) + _field(12, _field(1, b"y"))
    return _field(1, 8) + _field(7, graph) + _field(8, _field(2, 17))


_PACKED = {
    "packed ints": _field(1, b"a") + _field(8, b"".join(encode_varint(i) for i in range(600)))
    + _field(20, 7),
    "packed ints in two runs, and unpacked": _field(1, b"a") + _field(8, b"\x01\x02")
    + _field(8, 3) + _field(8, b"\x7f\xff\xff\xff\xff\xff\xff\xff\xff\x01") + _field(20, 7),
    "packed floats": _field(1, b"a")
    + _field(7, np.arange(700, dtype="<f4").tobytes())
    + _field(20, 6),
    "packed and unpacked floats": _field(1, b"a") + _field(7, np.ones(3, "<f4").tobytes())
    + b"".join(b"\x3d" + struct.pack("<f", i) for i in range(520)) + _field(20, 6),
}  # fmt: skip


@pytest.mark.parametrize("what", sorted(_PACKED))
def test_packed_lists_read_as_protobuf_reads_them(what):
    data = _packed_model(_PACKED[what])
    model = wire_reader.read_model(data)
    assert model is not None
    ref = load_model(data, "<bytes>", None, False)
    assert _structure(model) == _structure(ref)
    assert dumps(model) == dumps(ref)
    (a,) = next(iter(model.graph)).attributes.values()
    (b,) = next(iter(ref.graph)).attributes.values()
    assert (a.array is None) == (b.array is None)
    if a.array is not None:
        assert a.array.dtype == b.array.dtype and not a.array.flags.writeable


def test_a_long_attribute_read_again_is_the_memos_and_reads_as_protobuf_reads_it(monkeypatch):
    """An attribute over MEMO_MAX_BYTES (a tree ensemble's lists) is decoded once per process
    (_BIG_ATTRS): read again, the model is still exactly the Reader's, its long lists the
    memo's read-only arrays."""
    data = _changed(_EDITS["long lists"]) + b""  # (bytes of its own: no earlier read's)
    wire_reader._BIG_ATTRS.clear()  # noqa: SLF001
    first = wire_reader.read_model(data)
    decoded = []
    real = wire_reader._Model.read_attribute  # noqa: SLF001
    monkeypatch.setattr(
        wire_reader._Model,  # noqa: SLF001
        "read_attribute",
        lambda self, a, b: decoded.append(b - a) or real(self, a, b),
    )
    again = wire_reader.read_model(bytes(bytearray(data)))
    assert again is not None and not [n for n in decoded if n > wire_reader.MEMO_MAX_BYTES]
    attrs = next(iter(again.graph)).attributes
    old = next(iter(first.graph)).attributes
    for name in ("f", "s", "i"):  # (before reading a value: that makes it a list)
        assert attrs[name].array is old[name].array is not None
        assert not attrs[name].array.flags.writeable
    ref = load_model(data, "<bytes>", None, False)
    assert _structure(again) == _structure(ref) == _structure(first)
    assert dumps(again) == dumps(ref)


def test_a_weight_is_copied_once_to_a_cache_line_and_planned_as_it_is():
    """A raw initializer of ALIGNED_MIN_BYTES or more is read into a buffer on a cache line:
    the plan's constant is that very buffer (no second copy), the data the file's."""
    from onyx.runtime import values
    from onyx.runtime.plan import Compiler, Plan

    assert wire_reader.ALIGNED_MIN_BYTES == values.ALIGN_MIN_BYTES
    assert wire_reader.ALIGNMENT == values.ALIGNMENT
    w = np.arange(64 * 40, dtype=np.float32).reshape(64, 40)
    tp = TensorProto(name="w", data_type=1, dims=[64, 40], raw_data=w.tobytes())
    mp = _tiny()
    mp.graph.initializer.append(tp)
    data = mp.SerializeToString()
    model = wire_reader.read_model(data)
    t = model.graph.initializers["w"].const_value
    raw = t.raw_bytes()
    assert bytes(raw) == w.tobytes() and raw.readonly
    arr = t.numpy()
    assert arr.ctypes.data % values.ALIGNMENT == 0 and not arr.flags.writeable
    assert np.array_equal(arr, w)
    plan = Plan(model.graph, Compiler(model), dict(model.opset_imports))
    const = plan.template[plan.slot_of[id(model.graph.initializers["w"])]]
    assert np.shares_memory(const, arr)
    assert dumps(model) == dumps(load_model(data, "<bytes>", None, False))


def test_a_model_with_an_aligned_weight_still_copies_and_pickles():
    """A weight read into its aligned buffer is a memoryview, which neither copy nor pickle
    takes: a model read here (even from bytes, as most small ones now are) must deepcopy and
    pickle as it did when its weights were bytes, the copy's data equal and its own."""
    import copy
    import pickle

    w = np.arange(64 * 40, dtype=np.float32).reshape(64, 40)
    mp = _tiny()
    mp.graph.initializer.append(
        TensorProto(name="w", data_type=1, dims=[64, 40], raw_data=w.tobytes())
    )
    model = wire_reader.read_model(mp.SerializeToString())
    assert type(model.graph.initializers["w"].const_value.raw_bytes()) is memoryview
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert np.array_equal(clone.graph.initializers["w"].const_value.numpy(), w)
        assert dumps(clone) == dumps(model)


def test_packed_varints_are_decoded_once_and_each_read_gets_its_own(monkeypatch):
    """A packed varint run (a typed int64 tensor's, a k-NN's indices) is decoded once per
    process (_VARINT_RUNS); each read gets a copy, so an edit of one model's stays its own."""
    values = np.array([-3, 300, 2**40, 5] * 10, np.int64)
    tp = TensorProto(name="k", data_type=7, dims=[40])
    tp.MergeFromString(_field(7, b"".join(encode_varint(int(v) % 2**64) for v in values)))
    mp = _tiny()
    mp.graph.initializer.append(tp)
    data = mp.SerializeToString()
    wire_reader._VARINT_RUNS.clear()  # noqa: SLF001
    first = wire_reader.read_model(data).graph.initializers["k"].const_value.numpy()
    decoded = []
    real = wire_reader._decode_packed_varints  # noqa: SLF001
    monkeypatch.setattr(
        wire_reader, "_decode_packed_varints", lambda raw: decoded.append(raw) or real(raw)
    )
    first[0] = 7
    again = wire_reader.read_model(data).graph.initializers["k"].const_value.numpy()
    assert not decoded and np.array_equal(again, values) and again.dtype == np.int64
    ref = load_model(data, "<bytes>", None, False).graph.initializers["k"].const_value.numpy()
    assert np.array_equal(again, ref)


def test_a_constants_raw_tensor_read_again_is_the_memos_own_bytes_in_a_tensor_of_its_own(
    monkeypatch,
):
    """A small TENSOR attribute of raw bytes (a Constant's) is decoded once per process
    (_ATTRS): read again, each model gets a Tensor of its own, equal to the Reader's."""
    value = TensorProto(name="c", data_type=1, dims=[2], raw_data=np.ones(2, "<f4").tobytes())
    mp = _tiny()
    mp.graph.node[0].attribute.add(name="value", type=4, t=value)
    data = mp.SerializeToString()
    wire_reader._ATTRS.clear()  # noqa: SLF001
    first = next(iter(wire_reader.read_model(data).graph)).attributes["value"].value
    decoded = []
    real = wire_reader._Model.read_attribute  # noqa: SLF001
    monkeypatch.setattr(
        wire_reader._Model,  # noqa: SLF001
        "read_attribute",
        lambda self, a, b: decoded.append(b - a) or real(self, a, b),
    )
    model = wire_reader.read_model(data)
    assert dumps(model) == dumps(load_model(data, "<bytes>", None, False))
    again = next(iter(model.graph)).attributes["value"].value
    assert not decoded and again is not first
    assert (again.name, again.dtype, again.shape) == (first.name, first.dtype, first.shape)
    assert np.array_equal(again.numpy(), np.ones(2, np.float32))


def test_a_node_read_again_makes_its_attributes_from_the_memo(monkeypatch):
    """A node whose attributes are all plain keeps them by its bytes (_NODE_ATTRS): read
    again, none is looked up one by one, and each model's lists are its own."""
    data = TINY.read_bytes()
    wire_reader._NODE_ATTRS.clear()  # noqa: SLF001
    first = wire_reader.read_model(data)
    looked = []
    real = wire_reader._Model.attribute  # noqa: SLF001
    monkeypatch.setattr(
        wire_reader._Model,  # noqa: SLF001
        "attribute",
        lambda self, a, b: looked.append(b - a) or real(self, a, b),
    )
    again = wire_reader.read_model(data)
    assert dumps(again) == dumps(load_model(data, "<bytes>", None, False))
    assert not looked and _structure(again) == _structure(first)
    lists = [
        (a, b)
        for n, m in zip(first.graph, again.graph, strict=True)
        for a, b in zip(n.attributes.values(), m.attributes.values(), strict=True)
        if isinstance(a.value, list)
    ]
    assert lists and all(a is not b and a.value is not b.value for a, b in lists)


def test_unknown_fields_and_repeated_singulars_decline():
    data = TINY.read_bytes()
    assert wire_reader.read_model(data + b"\xf8\x07\x01") is None  # field 127, a varint
    assert wire_reader.read_model(data + b"\x12\x01x") is None  # producer_name written twice
    assert wire_reader.read_model(data + b"\x0b\x0c") is None  # a group
    # ir_version sent as a LEN field: protobuf keeps it as an unknown field
    assert wire_reader.read_model(data + b"\x0a\x00") is None


def _error(data) -> str:
    try:
        onyx.load(data)
    except FormatError as e:
        return str(e)
    raise AssertionError("no error")


def _protobuf_error(data) -> str:
    try:
        load_model(data, "<bytes>", None, False)
    except FormatError as e:
        return str(e)
    raise AssertionError("no error")


@pytest.mark.parametrize(
    "broken",
    [
        lambda d: d[: len(d) // 2],  # truncated
        lambda d: d[:-3],
        lambda d: d + b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # bad varint
        lambda d: d + b"\x0f\x00",  # wire type 7
        lambda d: d + b"\x3a\x05\x0a\x03",  # a graph field running past the end
    ],
)
def test_broken_files_give_the_protobuf_paths_error(broken):
    data = broken(TINY.read_bytes())
    assert wire_reader.read_model(data) is None
    assert _error(data) == _protobuf_error(data)


def test_a_session_of_a_plain_model_imports_no_protobuf():
    code = f"""
import sys
import numpy as np
import onyx
so = onyx.SessionOptions()
so.intra_op_num_threads = 1
s = onyx.InferenceSession({str(TINY)!r}, so)
i = s.get_inputs()[0]
s.run(None, {{i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)}})
print(sorted(m for m in sys.modules if m.startswith(("google", "onyx.proto"))))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_a_model_it_declines_still_runs():
    data = _changed(_EDITS["node metadata"])
    s = onyx.InferenceSession(data)
    i = s.get_inputs()[0]
    x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
    assert s.run(None, {i.name: x})[0].shape


def test_external_mark_is_model_ios():
    from onyx.serde import model_io

    assert wire_reader._EXTERNAL_MARK == model_io._EXTERNAL_MARK  # noqa: SLF001


def test_short_typed_is_the_readers():
    from onyx.serde import tensors

    assert wire_reader.SHORT_TYPED == tensors.SHORT_TYPED


def test_typed_tensor_table_is_the_readers():
    from onyx.serde import tensors

    assert wire_reader._PLAIN_TYPED.keys() == tensors._PLAIN_TYPED.keys()  # noqa: SLF001
    for code, (field, _, field_dtype, element) in wire_reader._PLAIN_TYPED.items():  # noqa: SLF001
        _, descriptor, ref_dtype, ref_element = tensors._PLAIN_TYPED[code]  # noqa: SLF001
        assert (field, field_dtype, element) == (descriptor.number, ref_dtype, ref_element)


def test_once_protobuf_is_imported_small_models_are_still_read_here():
    """A process reads plain models without protobuf, again and again; once something
    imported it, a small model is still read here (read again, its nodes and attributes
    are memoized: cheaper than protobuf's C parse with the Reader), a bigger one goes
    protobuf's way (serde/model_io._load_model, wire_reader.WARM_MAX_ITEMS)."""
    code = f"""
import sys
import onyx
from onyx.serde import model_io, wire_reader
read = []
def counted(data, _real=model_io.read_model, **kw):
    model = _real(data, **kw)
    read.append(model is not None)
    return model
model_io.read_model = counted
loaded = []
for _ in range(2):
    onyx.load({str(TINY)!r})
    loaded.append("google.protobuf" in sys.modules)
import onyx.proto
onyx.load({str(TINY)!r})
wire_reader.WARM_MAX_ITEMS = 1
onyx.load({str(TINY)!r})
print(loaded, read)
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[False, False] [True, True, True, False]", out.stdout


def test_a_long_string_list_weighs_on_the_budget_not_on_a_small_graphs_bound(monkeypatch):
    """A tree ensemble's labels count against the import's budget (a Python loop a string),
    not against WARM_MAX_ITEMS, a bound on the graph's items: its model, read again, is the
    memo's (_BIG_ATTRS), and declining it after decoding the rest cost every read."""
    data = _changed(_EDITS["long lists"])  # (601 strings: 150 items; the graph has 8)
    monkeypatch.setattr(wire_reader, "items_left", 0)
    wire_reader._BIG_ATTRS.clear()  # noqa: SLF001  (decoded: the strings weigh)
    assert wire_reader.read_model(data, limited=True, max_items=100) is None
    wire_reader._BIG_ATTRS.clear()  # noqa: SLF001
    model = wire_reader.read_model(data, max_items=100)
    strings = next(iter(model.graph)).attributes["s"]
    assert strings.array is not None and strings.array.dtype == object  # (as the Reader's)


def test_a_model_declined_once_protobuf_is_imported_is_not_tried_again(monkeypatch):
    """Protobuf imported (as here: onnx is), a file wire_reader declined (a big graph) goes
    straight to protobuf the next time: finding its 129th item again cost up to 0.4 ms."""
    from onyx.serde import model_io

    assert "google.protobuf" in sys.modules
    monkeypatch.setattr(wire_reader, "WARM_MAX_ITEMS", 1)
    monkeypatch.setattr(model_io, "_DECLINED", set())
    tried = []
    real = model_io.read_model
    monkeypatch.setattr(model_io, "read_model", lambda d, **kw: tried.append(1) or real(d, **kw))
    first, again = onyx.load(TINY), onyx.load(TINY)
    assert tried == [1] and dumps(first) == dumps(again)


def test_once_protobuf_is_imported_a_graph_of_many_initializers_is_left_to_it(monkeypatch):
    """A quantized CNN's hundreds of scales and zero points cost more here than protobuf's
    parse, read again or not: a main graph of more than WARM_MAX_INITIALIZERS declines."""
    from onyx.serde import model_io

    data = TINY.read_bytes()
    inits = len(wire_reader.read_model(data).graph.initializers)
    assert wire_reader.read_model(data, max_items=1024, max_initializers=inits) is not None
    assert wire_reader.read_model(data, max_items=1024, max_initializers=inits - 1) is None
    monkeypatch.setattr(wire_reader, "WARM_MAX_INITIALIZERS", inits - 1)
    monkeypatch.setattr(model_io, "_DECLINED", set())
    assert model_io._read_here(data, limited=False) is None  # noqa: SLF001
    assert model_io._read_here(data, limited=True) is not None  # noqa: SLF001


def test_a_small_model_is_read_here_whatever_is_left_of_the_budget(monkeypatch):
    data = TINY.read_bytes()
    monkeypatch.setattr(wire_reader, "items_left", 0)
    assert wire_reader.read_model(data, limited=True, max_items=1) is None
    assert wire_reader.read_model(data, limited=True, max_items=1000) is not None
    assert wire_reader.items_left == 0


def test_big_graphs_are_left_to_protobuf(monkeypatch):
    data = TINY.read_bytes()
    monkeypatch.setattr(wire_reader, "items_left", 5)
    assert wire_reader.read_model(data, limited=True) is None
    assert wire_reader.read_model(data) is not None  # (unlimited: tests, the fuzzer)


# -- mutated bytes: the wire path declines or reads what protobuf reads, never raises ---------


def _mutated(data: bytes, rng) -> bytes:
    """``data`` with one to four seeded edits of one kind: a flipped bit, a byte set to a
    varint or tag edge, bytes dropped, the file cut, bytes inserted."""
    b, kind = bytearray(data), int(rng.integers(5))
    for _ in range(int(rng.integers(1, 5))):
        if not b:
            break
        at = int(rng.integers(len(b)))
        if kind == 0:
            b[at] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            b[at] = int(rng.choice([0x00, 0x7F, 0x80, 0xFF, 0x08, 0x0A, 0x12]))
        elif kind == 2:
            del b[at : at + int(rng.integers(1, 9))]
        elif kind == 3:
            del b[at:]
        else:
            b[at:at] = rng.integers(0, 256, int(rng.integers(1, 7)), dtype=np.uint8).tobytes()
    return bytes(b)


def test_mutated_models_decline_or_read_as_protobuf_reads_them():
    seeds = [p.read_bytes() for p in _model_files() if p.stat().st_size < 200_000]
    seeds = [d for d in seeds if wire_reader.read_model(d) is not None][:20]
    seeds += [_changed(_EDITS[e]) for e in ("long lists", "lists of a hundred", "a typed Constant")]
    seeds += [_changed(_EDITS[e]) for e in ("a sequence of maps", "nested subgraphs")]
    seeds += [
        _changed(_EDITS["a typed Constant's doc and location"]),
        _packed_model(_PACKED["packed ints"]),
    ]
    assert len(seeds) >= 10 and all(wire_reader.read_model(d) is not None for d in seeds)
    rng, read = np.random.default_rng(27), 0
    for case in range(600):
        data = _mutated(seeds[case % len(seeds)], rng)
        model = wire_reader.read_model(data)  # (any exception fails the test)
        if model is None:
            continue
        read += 1
        assert dumps(model) == dumps(load_model(data, "<bytes>", None, False)), case
    assert read > 0  # (some mutations stay well formed: names, floats, dims)


def test_both_paths_give_an_initializer_the_same_type_object():
    data = TINY.read_bytes()
    wire = wire_reader.read_model(data)
    theirs = load_model(data, "<bytes>", None, False)
    pairs = zip(wire.graph.initializers.values(), theirs.graph.initializers.values(), strict=True)
    assert all(a.type is b.type for a, b in pairs)


def test_the_external_data_module_imports_no_protobuf():
    """The runtime imports serde/external.py for its table of mapped files (kernels/mapped.py,
    a Gather's): that must not import protobuf for a model the wire path read."""
    code = "import sys, onyx.serde.external; print(sorted(m for m in sys.modules if 'google' in m))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_a_process_reads_models_without_protobuf_while_its_item_budget_lasts():
    """model_io's reads count against wire_reader.items_left: the model that would take it
    past the budget goes the protobuf way (its import is then paid, and worth it)."""
    code = f"""
import sys
import onyx
from onyx.serde import wire_reader
items = wire_reader._Model(open({str(TINY)!r}, "rb").read())
items.model()
wire_reader.items_left = items.items * 3 // 2
wire_reader.SMALL_ITEMS = 0  # (a small model is read here whatever is left)
seen = []
for _ in range(2):
    onyx.load({str(TINY)!r})
    seen.append("google.protobuf" in sys.modules)
print(seen, wire_reader.items_left == items.items * 3 // 2 - items.items)
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[False, True] True", out.stdout


@pytest.mark.parametrize(
    "name",
    [
        "skl2onnx_coltrans_ordinal_forest",  # (a tree ensemble's long lists)
        "onnxmltools_lightgbm_binary",  # (ZipMap: a sequence of maps)
        "torch-torchscript_loop_if_op17",  # (Loop and If bodies)
    ],
)
def test_a_session_of_a_tree_or_control_flow_model_imports_no_protobuf(name):
    path = ROOT / "tests" / "models" / "zoo" / f"{name}.onnx"
    code = f"""
import sys
import onyx
onyx.InferenceSession({str(path)!r})
print(sorted(m for m in sys.modules if m.startswith(("google", "onyx.proto"))))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
