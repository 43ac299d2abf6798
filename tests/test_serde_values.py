"""Tensors of every element type, and the .pb files of test data (onnx is the oracle)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onyx
from onyx.ir.dtypes import BY_ENUM, DataType
from onyx.proto import TensorProto as OurTensorProto
from onyx.serde.tensors import tensor_from_proto, tensor_to_proto

_TYPES = sorted(BY_ENUM)


def _sample(dt: int) -> np.ndarray:
    info = BY_ENUM[dt]
    if dt == DataType.STRING:
        return np.array(["a", "bé", "", "zz"], dtype=object).reshape(2, 2)
    rng = np.random.default_rng(dt)
    if info.numpy.kind == "c":
        vals = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    elif info.numpy.kind == "b":
        vals = rng.integers(0, 2, 6)
    else:
        vals = rng.integers(-2 if info.numpy.kind != "u" else 0, 3, 6)
        if dt in (DataType.FLOAT8E8M0,):
            vals = np.abs(vals) + 1
    return np.asarray(vals).astype(info.numpy).reshape(2, 3)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object:
        return a.shape == b.shape and list(a.flat) == list(b.flat)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dt", _TYPES, ids=[BY_ENUM[d].dtype.name for d in _TYPES])
@pytest.mark.parametrize("raw", [False, True], ids=["typed_field", "raw_data"])
def test_every_element_type(dt, raw):
    arr = _sample(dt)
    if raw and dt == DataType.STRING:
        pytest.skip("strings have no raw form")
    if raw:
        proto = helper.make_tensor("t", dt, arr.shape, numpy_helper.from_array(arr).raw_data, True)
    else:
        vals = arr.reshape(-1).tolist() if dt == DataType.STRING else arr
        proto = helper.make_tensor("t", dt, arr.shape, vals)
    data = proto.SerializeToString()
    ours = onyx.to_array(data)
    assert _same(ours, numpy_helper.to_array(proto))
    t = tensor_from_proto(OurTensorProto.FromString(data))
    back = tensor_to_proto(t)
    assert onnx.TensorProto.FromString(back.SerializeToString()) == proto  # same field, same bytes
    # a new tensor from numpy goes out as raw_data (string_data for strings) that onnx reads back
    fresh = tensor_to_proto(onyx.from_array(ours, name="n"))
    assert _same(
        numpy_helper.to_array(onnx.TensorProto.FromString(fresh.SerializeToString())), ours
    )


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, ml_dtypes.bfloat16])
def test_raw_data_decodes_to_the_canonical_dtype(dtype):
    """A weight read from raw_data has numpy's own dtype object, so np.asarray(w, dtype) is w
    itself: an equal '<f4' copy made it a new view per call, and kernels' caches keyed by the
    weight's object (packed LSTM and conv weights) missed on every run."""
    arr = np.arange(6).astype(dtype).reshape(2, 3)
    proto = numpy_helper.from_array(arr, "w")
    ours = tensor_from_proto(OurTensorProto.FromString(proto.SerializeToString())).numpy()
    assert ours.dtype is np.dtype(dtype)
    assert np.asarray(ours, dtype) is ours
    np.testing.assert_array_equal(ours, arr)


def test_non_utf8_strings_survive():
    proto = onnx.TensorProto(name="s", data_type=onnx.TensorProto.STRING, dims=[2])
    proto.string_data.extend([b"\xff\xfe", b"ok"])
    arr = onyx.to_array(proto)
    assert list(arr) == [b"\xff\xfe", "ok"]
    back = tensor_to_proto(tensor_from_proto(OurTensorProto.FromString(proto.SerializeToString())))
    assert back.SerializeToString() == proto.SerializeToString()


def test_to_array_accepts_ir_and_onnx_tensors():
    arr = np.arange(6, dtype=np.float16).reshape(2, 3)
    assert _same(onyx.to_array(numpy_helper.from_array(arr)), arr)
    assert _same(onyx.to_array(onyx.from_array(arr, "x")), arr)
    assert onyx.from_array(arr, "x").name == "x"
    bf = np.array([1.5, -2], dtype=ml_dtypes.bfloat16)
    assert _same(onyx.to_array(numpy_helper.from_array(bf)), bf)


def _node_values():
    from onnx.backend.test.loader import load_model_tests

    seen = 0
    for case in load_model_tests(kind="node"):
        for inputs, outputs in case.data_sets or ():
            for v in list(inputs) + list(outputs):
                yield case.name, v
                seen += 1
    assert seen > 1000


def _onnx_proto(v):
    if isinstance(v, list):
        return numpy_helper.from_list(v), "sequence"
    if v is None:
        return numpy_helper.from_optional(None), "optional"
    return numpy_helper.from_array(np.asarray(v)), "tensor"


def _equal(a, b) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if a is None:
        return b is None
    a, b = np.asarray(a), np.asarray(b)
    return _same(a, b) if a.dtype != object else list(a.flat) == list(b.flat)


def test_pb_files_of_the_node_suite(tmp_path):
    """Every input/output value of onnx's node suite, written as onnx writes its .pb files."""
    checked = 0
    for name, value in _node_values():
        try:
            proto, kind = _onnx_proto(value)
        except Exception:  # a value onnx itself cannot write
            continue
        data = proto.SerializeToString()
        got = onyx.load_tensor(data, kind=kind)
        assert _equal(got, value), name
        if kind == "tensor":
            assert _equal(onyx.load_tensor(data), value), name  # recognised without a kind
        ours = onyx.save_tensor(got, kind="optional" if kind == "optional" else None)
        assert _equal(onyx.load_tensor(ours, kind=kind), value), name
        checked += 1
    assert checked > 1000


def test_sequence_map_optional_files(tmp_path):
    seq = [np.arange(3, dtype=np.int64), np.ones((2, 2), np.float32)]
    path = tmp_path / "seq.pb"
    onyx.save_tensor(seq, path, name="s")
    parsed = onnx.SequenceProto()
    parsed.ParseFromString(path.read_bytes())
    assert _equal(numpy_helper.to_list(parsed), seq)
    assert _equal(onyx.load_tensor(path), seq)

    mapping = {1: np.float32(1.5), 2: np.float32(2.5)}
    onnx_map = numpy_helper.from_dict({k: np.asarray(v) for k, v in mapping.items()})
    got = onyx.load_tensor(onnx_map.SerializeToString(), kind="map")
    assert list(got) == [1, 2] and float(got[2]) == 2.5
    again = onnx.MapProto.FromString(onyx.save_tensor(got))
    assert list(again.keys) == [1, 2]

    opt = helper.make_optional("o", onnx.OptionalProto.TENSOR, numpy_helper.from_array(np.ones(2)))
    assert _equal(onyx.load_tensor(opt.SerializeToString(), kind="optional"), np.ones(2))
    empty = onyx.save_tensor(None)
    assert onyx.load_tensor(empty, kind="optional") is None
    assert numpy_helper.to_optional(onnx.OptionalProto.FromString(empty)) is None


_TYPED_CASES = [
    (OurTensorProto.FLOAT, "float_data", [0.5, -0.0, float("nan")], np.float32),
    (OurTensorProto.DOUBLE, "double_data", [1e300, -2.5], np.float64),
    (OurTensorProto.INT64, "int64_data", [-(2**63), 2**63 - 1, 0], np.int64),
    (OurTensorProto.INT32, "int32_data", [-(2**31), 7], np.int32),
    (OurTensorProto.UINT8, "int32_data", [0, 128, 255], np.uint8),
    (OurTensorProto.INT8, "int32_data", [-128, 127], np.int8),
    (OurTensorProto.INT16, "int32_data", [-5, 300], np.int16),
    (OurTensorProto.UINT16, "int32_data", [65535, 1], np.uint16),
    (OurTensorProto.BOOL, "int32_data", [1, 0, 1], np.bool_),
    (OurTensorProto.UINT32, "uint64_data", [4294967295, 3], np.uint32),
    (OurTensorProto.UINT64, "uint64_data", [2**64 - 1], np.uint64),
]


@pytest.mark.parametrize("dtype,field,values,np_dtype", _TYPED_CASES)
@pytest.mark.parametrize("dims", [None, (1,), "all"])
def test_plain_typed_initializers_read_as_the_general_path_reads_them(
    dtype, field, values, np_dtype, dims
):
    """A quantized model's scales and zero points are typed-field tensors: the short path
    (serde/tensors.plain_typed_tensor) gives what tensor_from_proto gives (type, shape, bits,
    name, the field to write back) and declines everything else."""
    from onyx.serde.tensors import plain_typed_tensor

    Proto = OurTensorProto

    tp = Proto(name="t", data_type=dtype)
    getattr(tp, field).extend(values)
    if dims is not None:
        tp.dims.extend([len(values)] if dims == "all" else dims)
    if dims == (1,) and len(values) != 1 or dims is None and len(values) != 1:
        assert plain_typed_tensor(tp) is None  # (a wrong count: the general path says so)
        return
    fast, full = plain_typed_tensor(tp), tensor_from_proto(tp)
    assert fast is not None
    a, b = fast.numpy(), full.numpy()
    assert a.dtype == b.dtype == np_dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes() and fast.dtype == full.dtype
    assert (fast.name, fast.extras, fast.doc_string) == (full.name, full.extras, full.doc_string)
    for change in ("doc_string", "unnamed", "raw"):
        other = Proto()
        other.CopyFrom(tp)
        if change == "doc_string":
            other.doc_string = "d"
        elif change == "unnamed":
            other.ClearField("name")
        else:
            other.raw_data = b""
        assert plain_typed_tensor(other) is None


# -- creation's short paths (serde/tensors.py plain_typed_tensor, serde/reader.py) ---------------


@pytest.mark.parametrize("count", [0, 1, 3, 32, 33, 1000])
@pytest.mark.parametrize(
    "dt",
    [DataType.FLOAT, DataType.DOUBLE, DataType.INT64, DataType.INT32, DataType.INT8]
    + [DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64, DataType.BOOL],
)
def test_typed_field_short_path_is_the_general_path(dt, count):
    """A typed-field initializer read by the short path (a slice of a short field, the
    container of a long one) is what the general reader makes of it, bit for bit."""
    from onyx.serde.tensors import plain_typed_tensor

    arr = _sample(dt).reshape(-1)
    arr = np.resize(arr, count).astype(arr.dtype)
    tp = OurTensorProto()
    tp.ParseFromString(
        numpy_helper.from_array(arr, "w").SerializeToString()
        if dt == DataType.BOOL or count == 0
        else _typed(arr, dt).SerializeToString()
    )
    fast = plain_typed_tensor(tp)
    slow = tensor_from_proto(tp)
    if fast is None:  # (numpy_helper wrote raw bytes: not a typed field)
        assert tp.HasField("raw_data")
        return
    assert fast.dtype == slow.dtype and _same(fast.numpy(), slow.numpy())
    assert fast.extras == slow.extras


def _typed(arr: np.ndarray, dt: int) -> onnx.TensorProto:
    return helper.make_tensor("w", int(dt), arr.shape, arr.tolist())


def test_a_model_read_twice_shares_its_types():
    """Types are immutable and a function of their bytes: every read of a model gives its
    values the same type objects (the checker and inference key their memos on them)."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    a, b = onyx.load(data), onyx.load(data)
    assert a.graph.inputs[0].type is b.graph.inputs[0].type
    assert a.graph.inputs[0].type is a.graph.outputs[0].type


def test_a_node_with_its_domain_written_empty_round_trips():
    """skl2onnx writes every node's domain, '' included: the reader's plain path keeps the
    written-empty field, and the model saves to the bytes it was read from once edited."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    node = helper.make_node("Relu", ["x"], ["y"])
    node.domain = ""  # (present, empty)
    node.doc_string = ""
    g = helper.make_graph([node], "g", [x], [y])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = proto.SerializeToString()
    m = onyx.load(data)
    n = next(iter(m.graph))
    assert n.extras == {"present": ("domain", "doc_string")}
    m.graph.append(onyx.ir.Node("Identity", [n.outputs[0]], ["z"]))  # (written from the IR)
    again = onnx.ModelProto()
    again.ParseFromString(onyx.serde.dumps(m))
    assert len(again.graph.node) == 2
    assert again.graph.node[0].HasField("domain") and again.graph.node[0].HasField("doc_string")
