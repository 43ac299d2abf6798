"""TensorProto <-> ir.Tensor: raw bytes, the typed fields, strings and sub-byte types.

A tensor read from a file remembers (in ``Tensor.extras``) which field held its data, the
protobuf fields the IR does not model and fields present with default values, so writing it
back produces an equal message.
"""

from __future__ import annotations

import math

import numpy as np
from google.protobuf.unknown_fields import UnknownFieldSet

from ..errors import FormatError
from ..ir.dtypes import BY_ENUM, SUB_BYTE, DataType, bit_width
from ..ir.tensor import ExternalData, Tensor, pack_sub_byte, unpack_sub_byte, wire_size
from ..proto import TensorProto
from .fields import set_fields, written_empty

D = DataType
#: Element types read for every tensor, as module constants: reading ``D.X`` goes through the
#: enum class's ``__getattr__`` hook (Python 3.11's EnumType defines one), some 0.25 us a read.
_STRING = D.STRING
_COMPLEX = (D.COMPLEX64, D.COMPLEX128)
EXTERNAL = TensorProto.EXTERNAL

# Which typed field holds each element type when raw_data is not used.
_BIT_PATTERN_16 = {D.FLOAT16, D.BFLOAT16}
_BIT_PATTERN_8 = {
    D.FLOAT8E4M3FN,
    D.FLOAT8E4M3FNUZ,
    D.FLOAT8E5M2,
    D.FLOAT8E5M2FNUZ,
    D.FLOAT8E8M0,
    D.FLOAT6E2M3,  # 6-bit types: one code per int32, unlike the packed 4- and 2-bit types
    D.FLOAT6E3M2,
}
_PACKED_IN_INT32 = frozenset(d for d in SUB_BYTE if 8 % bit_width(d) == 0)
TYPED_FIELD: dict[int, str] = {
    D.FLOAT: "float_data",
    D.COMPLEX64: "float_data",
    D.DOUBLE: "double_data",
    D.COMPLEX128: "double_data",
    D.INT64: "int64_data",
    D.UINT32: "uint64_data",
    D.UINT64: "uint64_data",
    D.STRING: "string_data",
}
for _dt in BY_ENUM:
    TYPED_FIELD.setdefault(_dt, "int32_data")
DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data")
DATA_FIELDS += ("double_data", "uint64_data")
_FIELD_DTYPE = {
    "float_data": np.float32,
    "double_data": np.float64,
    "int64_data": np.int64,
    "uint64_data": np.uint64,
    "int32_data": np.int32,
}
# Fields the IR models directly; anything else set goes to the residual.
_MODELED = frozenset(
    {"dims", "data_type", "name", "doc_string", "external_data", "data_location", "metadata_props"}
)
_PRESENCE = ("name", "doc_string", "data_type", "data_location")


def decode_strings(items) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, s in enumerate(items):
        try:
            out[i] = s.decode("utf-8")
        except UnicodeDecodeError:
            out[i] = s
    return out


def encode_strings(arr: np.ndarray) -> list[bytes]:
    return [s if isinstance(s, bytes) else str(s).encode("utf-8") for s in arr.reshape(-1)]


def _count(dtype: int, shape) -> int:
    n = math.prod(shape)
    return 2 * n if dtype in _COMPLEX else n


#: Typed fields of at most this many elements are sliced to a list for numpy (below).
SHORT_TYPED = 32


def _typed_array(values, dtype) -> np.ndarray:
    """A typed field's elements as an array of ``dtype``. A short field is sliced first (a
    list in one C call): numpy's conversion of the message's container has a fixed cost
    several times that of a few elements (a quantized model's scales and zero points, an
    sklearn model's indices); a long one numpy reads at once (20000 floats: 7 us, where the
    list alone took a millisecond)."""
    return np.array(values[:] if len(values) <= SHORT_TYPED else values, dtype=dtype)


def decode_typed(values, dtype: DataType, shape, what: str) -> np.ndarray:
    """Elements from a typed field (float_data, int32_data, ...) as the element type's array."""
    if dtype == _STRING:
        arr = decode_strings(list(values))
        expected = _count(dtype, shape)
    else:
        field = TYPED_FIELD[dtype]
        arr = _typed_array(values, _FIELD_DTYPE[field])
        if dtype in _PACKED_IN_INT32:  # packed bytes, one per int32
            expected = -(-math.prod(shape) * bit_width(dtype) // 8)
            if arr.size != expected:
                raise FormatError(_size_message(what, arr.size, "values", dtype, shape, expected))
            count = math.prod(shape)
            return unpack_sub_byte(arr.astype(np.uint8).tobytes(), dtype, count).reshape(shape)
        expected = _count(dtype, shape)
        np_dtype = BY_ENUM[dtype].numpy
        if dtype in _BIT_PATTERN_16:
            arr = arr.astype(np.uint16).view(np_dtype)
        elif dtype in _BIT_PATTERN_8:
            arr = arr.astype(np.uint8).view(np_dtype)
        elif dtype in _COMPLEX:
            arr = arr.view(np_dtype) if arr.size % 2 == 0 else arr
        elif arr.dtype != np_dtype:
            arr = arr.astype(np_dtype)
    if _count(dtype, shape) != (arr.size * (2 if arr.dtype.kind == "c" else 1)):
        raise FormatError(_size_message(what, arr.size, "values", dtype, shape, expected))
    return arr.reshape(shape)


def encode_typed(arr: np.ndarray, dtype: DataType) -> np.ndarray | list:
    """The inverse of decode_typed: what goes into the typed field."""
    if dtype == D.STRING:
        return encode_strings(arr)
    flat = np.ascontiguousarray(arr).reshape(-1)
    if dtype in _PACKED_IN_INT32:
        return np.frombuffer(pack_sub_byte(flat, dtype), dtype=np.uint8).astype(np.int32)
    if dtype in _BIT_PATTERN_16:
        return flat.view(np.uint16).astype(np.int32)
    if dtype in _BIT_PATTERN_8:
        return flat.view(np.uint8).astype(np.int32)
    if dtype in (D.COMPLEX64, D.COMPLEX128):
        return flat.view(np.float32 if dtype == D.COMPLEX64 else np.float64)
    return flat.astype(_FIELD_DTYPE[TYPED_FIELD[dtype]])


def _size_message(what, got, unit, dtype, shape, expected) -> str:
    name = getattr(dtype, "name", dtype)
    return f"{what}: data has {got} {unit}, {name}{list(shape)} needs {expected}"


def check_raw_size(raw_len: int, dtype: DataType, shape, what: str) -> None:
    if dtype == D.STRING or dtype not in BY_ENUM:
        return
    expected = wire_size(dtype, shape)
    if raw_len != expected:
        raise FormatError(_size_message(what, raw_len, "bytes", dtype, shape, expected))


# -------------------------------------------------------------------------------- reading

_TENSOR_FIELD = TensorProto.DESCRIPTOR.fields_by_name
_DIMS, _DATA_TYPE, _NAME, _RAW = (
    _TENSOR_FIELD[f] for f in ("dims", "data_type", "name", "raw_data")
)
#: Bytes per element of the types whose raw form is whole bytes (strings have none).
_ITEM_BYTES = {d: bit_width(d) // 8 for d in BY_ENUM if bit_width(d) % 8 == 0 and d != D.STRING}
_BY_VALUE = {int(d): d for d in D}


def plain_raw_tensor(tp, unnamed: bool = False) -> Tensor | None:
    """The tensor of a message that holds dims, a known element type, a name and raw bytes of
    the right size and nothing else (no field written empty, no unknown field), or None.
    ``unnamed``: the name may also be absent (a Constant node's value, as exporters write it).

    That is nearly every initializer, and reading it this way skips the general path's
    bookkeeping; anything else (and every error) is left to ``tensor_from_proto``."""
    fields = tp.ListFields()  # (descriptor, value) in field number order, one call
    dims = ()  # (no dims: a scalar)
    if fields and fields[0][0] is _DIMS:
        dims = tuple(fields[0][1])
        if min(dims) < 0:
            return None
        fields = fields[1:]
    if len(fields) == 3:
        (f_type, dtype), (f_name, name), (f_raw, raw) = fields
        if f_name is not _NAME or not name:
            return None
    elif len(fields) == 2 and unnamed:
        (f_type, dtype), (f_raw, raw) = fields
        name = ""
    else:
        return None
    if f_type is not _DATA_TYPE or f_raw is not _RAW:
        return None
    dtype = _BY_VALUE.get(dtype)
    size = _ITEM_BYTES.get(dtype)
    if size is None or len(raw) != math.prod(dims) * size or not raw or len(UnknownFieldSet(tp)):
        return None
    return Tensor.from_raw(raw, dtype, dims, name)


_TYPED_DATA = {
    f: _TENSOR_FIELD[f] for f in ("float_data", "int32_data", "int64_data", "double_data")
}
_TYPED_DATA["uint64_data"] = _TENSOR_FIELD["uint64_data"]
#: The numeric element types a typed field holds one value per element of (no bit patterns,
#: no complex pairs, no packing), by value -> (the DataType, its field's descriptor, the
#: field's numpy dtype, the element type's where it differs, else None): decode_typed's
#: conversion of these, without its questions about the other types.
_PLAIN_TYPED = {
    int(d): (
        d,
        _TYPED_DATA[TYPED_FIELD[d]],
        np.dtype(_FIELD_DTYPE[TYPED_FIELD[d]]),
        None if np.dtype(_FIELD_DTYPE[TYPED_FIELD[d]]) == BY_ENUM[d].numpy else BY_ENUM[d].numpy,
    )
    for d in (D.FLOAT, D.DOUBLE, D.INT64, D.INT32, D.INT16, D.INT8, D.UINT64, D.UINT32)
    + (D.UINT16, D.UINT8, D.BOOL)
}


def plain_typed_tensor(tp) -> Tensor | None:
    """The tensor of a message that holds dims, a numeric element type, a name and its typed
    field with one value per element, and nothing else (no field written empty, no unknown
    field), or None: what ``tensor_from_proto`` makes of it, without the general path's
    bookkeeping. Quantized models write their scales and zero points so, a hundred or more."""
    fields = tp.ListFields()  # (descriptor, value) in field number order, one call
    dims = ()
    if fields and fields[0][0] is _DIMS:
        dims = tuple(fields[0][1])
        if min(dims) < 0:
            return None
        fields = fields[1:]
    if len(fields) != 3:
        return None
    (f_type, dtype), (f_a, a), (f_b, b) = fields
    if f_a is _NAME:  # (field numbers: float 4, int32 5, int64 7, name 8, double 10, uint64 11)
        name, f_values, values = a, f_b, b
    elif f_b is _NAME:
        name, f_values, values = b, f_a, a
    else:
        return None
    known = _PLAIN_TYPED.get(dtype)
    if f_type is not _DATA_TYPE or known is None or f_values is not known[1] or not name:
        return None
    if len(values) != math.prod(dims) or len(UnknownFieldSet(tp)):
        return None  # (the general path reports a wrong count)
    dtype, _, field_dtype, element = known
    arr = _typed_array(values, field_dtype)
    if element is not None:
        arr = arr.astype(element)
    t = Tensor(arr.reshape(dims), name=name, dtype=dtype)
    t.extras = {"storage": "typed"}
    return t


def tensor_from_proto(tp, what: str = "tensor", raw=None, externals=None) -> Tensor:
    """An ir.Tensor from a TensorProto.

    ``raw``: the raw_data bytes when the caller took them out of the message (big tensors read
    zero-copy). ``externals``: resolves external data (an ExternalResolver) or None to leave it
    unread.
    """
    fields = set_fields(tp)
    dtype = fields.get("data_type", 0)
    dims = tuple(fields.get("dims", ()))
    name = fields.get("name", "")
    extras: dict = {}
    try:
        dtype = DataType(dtype)
    except ValueError:
        raise FormatError(f"{what}: unknown element type {dtype}") from None
    if any(d < 0 for d in dims):
        raise FormatError(f"{what}: negative dims {list(dims)}")
    if fields.get("data_location") == EXTERNAL:
        if dtype == D.STRING:  # external data holds raw bytes, which strings have none of
            raise FormatError(f"{what}: a {dtype.name} tensor cannot be stored as external data")
        ext = ExternalData([(e.key, e.value) for e in fields.get("external_data", ())])
        if externals is not None:
            t = externals.tensor(ext, dtype, dims, name, what)
        else:
            t = Tensor.from_loader(_not_loaded(what), dtype, dims, name)
        t.external = ext
        storage = "external"
    elif raw is not None or "raw_data" in fields:
        if raw is None:
            raw = fields["raw_data"]
        if dtype == D.STRING:
            raise FormatError(f"{what}: a STRING tensor cannot use raw_data")
        check_raw_size(len(raw), dtype, dims, what)
        t = Tensor.from_raw(raw, dtype, dims, name)
        storage = "raw"
    else:
        field = TYPED_FIELD.get(dtype)
        values = fields.get(field, ()) if field else ()
        if dtype == D.UNDEFINED:
            t = Tensor(name=name, dtype=dtype)
            t.shape = dims
        else:
            t = Tensor(decode_typed(values, dtype, dims, what), name=name, dtype=dtype)
        storage = "typed"
    if storage != "raw":
        extras["storage"] = storage
    t.doc_string = fields.get("doc_string", "")
    props = fields.get("metadata_props")
    if props:
        t.metadata_props = {e.key: e.value for e in props}
        extras["props"] = [e.SerializeToString() for e in props]
    present = written_empty(fields, _PRESENCE)
    if present:
        extras["present"] = present
    residual = _residual(tp, storage, fields)
    if residual is not None:
        extras["residual"] = residual
    if extras:
        t.extras = extras
    return t


def _not_loaded(what: str):
    def load():
        raise FormatError(f"{what}: external data was not loaded (load_external_data=False)")

    return load


def _residual(tp, storage: str, fields: dict) -> bytes | None:
    """Serialized fields of ``tp`` the IR does not hold (unknown fields, segment, stray data);
    ``fields``: its set fields by name."""
    n_data = sum(1 for f in DATA_FIELDS if f in fields)
    expect = 0 if storage == "external" else (1 if storage == "raw" else min(n_data, 1))
    if "segment" not in fields and n_data <= expect and not len(UnknownFieldSet(tp)):
        return None
    rest = TensorProto()
    rest.CopyFrom(tp)
    for fd, _ in rest.ListFields():
        if fd.name in _MODELED:
            rest.ClearField(fd.name)
    if storage == "raw":
        rest.ClearField("raw_data")
    elif storage == "typed":
        rest.ClearField(TYPED_FIELD.get(tp.data_type, "int32_data"))
    return rest.SerializeToString() or None


# -------------------------------------------------------------------------------- writing


def tensor_to_proto(t: Tensor, tp=None, name: str | None = None, placement=None):
    """Fill (or make) a TensorProto from an ir.Tensor.

    ``placement(t, tp)`` may take the data elsewhere (external file, streamed big bytes): it
    returns True when it filled the data fields itself.
    """
    from .text import set_text  # (writing only: a session that reads a model never needs it)

    if tp is None:
        tp = TensorProto()
    extras = t.extras or {}
    residual = extras.get("residual")
    if residual:
        tp.MergeFromString(residual)
    tp.dims.extend(t.shape)
    if t.dtype:
        tp.data_type = t.dtype
    name = t.name if name is None else name
    if name:
        set_text(tp, "name", name)
    if t.doc_string:
        set_text(tp, "doc_string", t.doc_string)
    for f in extras.get("present", ()):
        if not getattr(tp, f):
            setattr(tp, f, getattr(tp, f))
    write_props(tp.metadata_props, t.metadata_props, extras.get("props"))
    if placement is not None and placement(t, tp):
        return tp
    storage = extras.get("storage", "raw")
    if (
        storage == "external"
        and t.external is not None
        and not t.is_loaded()
        and not t.has_raw_bytes()
    ):
        # data never read (load_external_data=False): keep the reference as it is
        write_external_ref(tp, t.external)
        return tp
    if t.dtype == D.STRING or storage == "typed":
        if t.dtype != D.UNDEFINED:
            getattr(tp, TYPED_FIELD[t.dtype]).extend(encode_typed(t.numpy(), t.dtype))
        return tp
    tp.raw_data = bytes(t.raw_bytes())
    return tp


def write_external_ref(tp, ext: ExternalData) -> None:
    from .text import set_text

    for k, v in ext.entries:
        e = tp.external_data.add()
        set_text(e, "key", k)
        set_text(e, "value", v)
    tp.data_location = EXTERNAL


def write_props(field, props: dict, original: list[bytes] | None) -> None:
    """Write a metadata_props dict; the original entries come back verbatim if it is unchanged."""
    from .text import set_text

    if original is not None:
        entries = [field.add() for _ in original]
        for e, b in zip(entries, original):
            e.ParseFromString(b)
        if {e.key: e.value for e in entries} == props:
            return
        del field[:]
    for k, v in props.items():
        e = field.add()
        set_text(e, "key", k)
        set_text(e, "value", v)
