"""Long FLOATS attributes decoded from their wire bytes (serde/repeated.py) are the lists the
message's own conversion gives, in every layout; other layouts fall back."""

from __future__ import annotations

import struct

import numpy as np
from onnx import TensorProto, helper

from onyx import serde
from onyx.proto import AttributeProto
from onyx.serde import repeated
from onyx.serde.wire import encode_varint, len_prefix, tag

N = repeated.MIN_ELEMENTS + 3
VALUES = [float(np.float32(x)) for x in np.linspace(-3, 3, N)] + [-0.0, float("inf")]


def _same(got, want) -> bool:
    return got is not None and np.array_equal(np.array(got), np.array(want), equal_nan=True)


def test_unpacked_floats_as_the_message_gives_them():
    a = AttributeProto(name="w", type=AttributeProto.FLOATS)
    a.floats.extend(VALUES + [float("nan")])
    got = repeated.floats(a, 7, len(a.floats))
    assert _same(got, list(a.floats))
    assert all(type(x) is float for x in got)
    assert np.signbit(got[-3])  # (-0.0 keeps its sign)


def test_packed_floats():
    body = struct.pack(f"<{len(VALUES)}f", *VALUES)
    raw = tag(1, 2) + encode_varint(1) + b"w" + len_prefix(7, len(body)) + body
    a = AttributeProto.FromString(raw)
    assert len(a.floats) == len(VALUES)
    assert _same(repeated.floats(a, 7, len(a.floats)), list(a.floats))


class _Wire:
    """A message as its bytes (a parsed message writes its elements in one run again)."""

    def __init__(self, raw: bytes):
        self.raw = raw

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name)
        return self.raw


def test_interleaved_elements_read_again_in_one_run():
    half = len(VALUES) // 2
    first = b"".join(tag(7, 5) + struct.pack("<f", x) for x in VALUES[:half])
    rest = b"".join(tag(7, 5) + struct.pack("<f", x) for x in VALUES[half:])
    raw = first + tag(1, 2) + encode_varint(1) + b"w" + rest
    # not one run as written: the decoder declines (the caller converts element by element)
    assert repeated.floats(_Wire(raw), 7, len(VALUES)) is None
    a = AttributeProto.FromString(raw)
    assert _same(repeated.floats(a, 7, len(a.floats)), VALUES)


def test_other_layouts_decline():
    body = struct.pack(f"<{len(VALUES)}f", *VALUES)
    packed = len_prefix(7, len(body)) + body
    assert repeated.floats(_Wire(packed), 7, len(VALUES) + 1) is None  # (count disagrees)
    assert repeated.floats(_Wire(packed[:-4]), 7, len(VALUES)) is None  # (truncated)
    assert repeated.floats(_Wire(tag(1, 2) + encode_varint(1) + b"w"), 7, 1) is None


def test_a_model_reads_the_same_attribute():
    weights = np.random.default_rng(0).standard_normal(N).astype(np.float32).tolist()
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", coefficients=weights, targets=1
    )
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    )
    model = serde.loads(m.SerializeToString())
    got = list(model.graph)[0].attributes["coefficients"].value
    assert type(got) is list and got == weights
    assert serde.dumps(model) == serde.dumps(serde.loads(serde.dumps(model)))


INTS = [0, 1, 127, 128, 300, 16383, 16384, 2**31, -1, -(2**63), 2**63 - 1, 5] * 50


def test_unpacked_ints_as_the_message_gives_them():
    a = AttributeProto(name="w", type=AttributeProto.INTS)
    a.ints.extend(INTS)
    assert a.SerializeToString()[3] == 8 << 3  # (proto2: one record a tag and a varint)
    got = repeated.int_array(a, 8, len(a.ints))
    assert got.dtype == np.int64 and not got.flags.writeable
    assert got.tolist() == list(a.ints)


def test_packed_ints():
    body = b"".join(encode_varint(x & (2**64 - 1)) for x in INTS)
    raw = tag(1, 2) + encode_varint(1) + b"w" + len_prefix(8, len(body)) + body
    a = AttributeProto.FromString(raw)
    assert repeated.int_array(a, 8, len(a.ints)).tolist() == list(a.ints) == INTS


def test_ints_interleaved_or_short_decline():
    half = len(INTS) // 2
    first = b"".join(tag(8, 0) + encode_varint(x & (2**64 - 1)) for x in INTS[:half])
    rest = b"".join(tag(8, 0) + encode_varint(x & (2**64 - 1)) for x in INTS[half:])
    raw = first + tag(1, 2) + encode_varint(1) + b"w" + rest
    assert repeated.int_array(_Wire(raw), 8, len(INTS)) is None
    assert repeated.int_array(_Wire(first), 8, len(INTS)) is None  # (fewer records than said)
