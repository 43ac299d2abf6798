"""Values <-> the .pb files of ONNX test data.

TensorProto <-> numpy array, SequenceProto <-> list, MapProto <-> dict, OptionalProto <-> the
value or None.
"""

from __future__ import annotations

import os

import numpy as np
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from ..errors import FormatError, InvalidArgument
from ..ir.dtypes import DataType, from_numpy
from ..ir.tensor import SparseTensor, Tensor
from ..proto import MapProto, OptionalProto, SequenceProto, SparseTensorProto, TensorProto
from .external import ExternalResolver
from .tensors import check_raw_size, tensor_from_proto, tensor_to_proto

# SequenceProto/OptionalProto elem_type values
_TENSOR, _SPARSE, _SEQUENCE, _MAP, _OPTIONAL = 1, 2, 3, 4, 5
_KINDS = {
    "tensor": TensorProto,
    "sequence": SequenceProto,
    "map": MapProto,
    "optional": OptionalProto,
    "sparse_tensor": SparseTensorProto,
}


def from_array(array, name: str | None = None) -> Tensor:
    """An ir.Tensor holding ``array`` (numpy array, or anything np.asarray takes)."""
    return Tensor(np.asarray(array), name=name or "")


def to_array(tensor, base_dir: str | None = None):
    """A numpy array from an ir.Tensor, a TensorProto (onyx's or onnx's) or its bytes.

    SequenceProto, MapProto and OptionalProto give a list, a dict and a value-or-None.
    ``base_dir`` resolves external data.
    """
    if isinstance(tensor, Tensor):
        return tensor.numpy()
    if isinstance(tensor, SparseTensor):
        return tensor.to_dense()
    if isinstance(tensor, bytes | bytearray | memoryview):
        return _to_value(_parse_any(bytes(tensor), None, "<bytes>"), base_dir, "<bytes>")
    if hasattr(tensor, "SerializeToString") and hasattr(tensor, "DESCRIPTOR"):
        cls = _KINDS.get(_kind_of(tensor.DESCRIPTOR.name))
        if cls is None:
            raise InvalidArgument(f"to_array cannot convert a {tensor.DESCRIPTOR.name}")
        msg = tensor if isinstance(tensor, cls) else cls.FromString(tensor.SerializeToString())
        return _to_value(msg, base_dir, "tensor")
    raise InvalidArgument(f"to_array cannot convert {type(tensor).__name__}")


def _kind_of(message_name: str) -> str:
    return {
        "TensorProto": "tensor",
        "SequenceProto": "sequence",
        "MapProto": "map",
        "OptionalProto": "optional",
        "SparseTensorProto": "sparse_tensor",
    }.get(message_name, "")


def load_tensor(f, kind: str | None = None):
    """Read a .pb file (path, file object or bytes) into a numpy array, list, dict or None.

    ``kind`` ("tensor", "sequence", "map", "optional") says which message the file holds;
    without it the message is recognised from its contents.
    """
    if isinstance(f, bytes | bytearray | memoryview):
        data, where, base = bytes(f), "<bytes>", None
    elif hasattr(f, "read"):
        data, where, base = f.read(), getattr(f, "name", "<file>"), None
    else:
        where = os.fspath(f)
        with open(where, "rb") as fh:
            data = fh.read()
        base = os.path.dirname(os.path.abspath(where))
    if kind is not None and kind not in _KINDS:
        raise InvalidArgument(f"kind must be one of {sorted(_KINDS)}, not {kind!r}")
    return _to_value(_parse_any(data, kind, str(where)), base, str(where))


def save_tensor(value, f=None, name: str | None = None, kind: str | None = None):
    """Write a value as a .pb file (path or file object) or return its bytes when ``f`` is None.

    numpy arrays / ir.Tensors become TensorProto, lists SequenceProto, dicts MapProto, None an
    empty OptionalProto; ``kind="optional"`` wraps any value in an OptionalProto.
    """
    msg = _to_proto(value, name or "", optional=(kind == "optional"))
    data = msg.SerializeToString()
    if f is None:
        return data
    if hasattr(f, "write"):
        f.write(data)
    else:
        from .saving import _atomic_write

        _atomic_write(os.path.abspath(os.fspath(f)), [data])
    return None


# ---------------------------------------------------------------------------------- reading


def _parse_any(data: bytes, kind: str | None, where: str):
    candidates = [_KINDS[kind]] if kind else [TensorProto, SequenceProto, MapProto, OptionalProto]
    for cls in candidates:
        msg = cls()
        try:
            msg.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError):
            continue
        if kind or _plausible(msg):
            return msg
    raise FormatError(f"{where}: not a TensorProto, SequenceProto, MapProto or OptionalProto")


def _plausible(msg) -> bool:
    if len(UnknownFieldSet(msg)):
        return False
    if isinstance(msg, TensorProto):
        if msg.data_type not in DataType._value2member_map_ or msg.data_type == 0:
            return False
        if msg.HasField("raw_data") and msg.data_type != DataType.STRING:
            try:
                check_raw_size(len(msg.raw_data), DataType(msg.data_type), tuple(msg.dims), "")
            except FormatError:
                return False
        return not msg.HasField("segment")
    if isinstance(msg, SequenceProto):
        return msg.HasField("elem_type") or not msg.ListFields() or msg.HasField("name")
    if isinstance(msg, MapProto):
        return msg.HasField("key_type")
    return True


def _to_value(msg, base_dir: str | None, where: str):
    if isinstance(msg, TensorProto):
        externals = ExternalResolver(base_dir, where) if base_dir else None
        try:
            return tensor_from_proto(msg, f"tensor {msg.name!r}", externals=externals).numpy()
        except FormatError as e:
            raise FormatError(f"{where}: {e}") from None
    if isinstance(msg, SparseTensorProto):
        values = tensor_from_proto(msg.values, "sparse values")
        indices = tensor_from_proto(msg.indices, "sparse indices")
        return SparseTensor(values, indices, tuple(msg.dims)).to_dense()
    if isinstance(msg, SequenceProto):
        field = {
            _TENSOR: "tensor_values",
            _SPARSE: "sparse_tensor_values",
            _SEQUENCE: "sequence_values",
            _MAP: "map_values",
            _OPTIONAL: "optional_values",
        }.get(msg.elem_type)
        if field is None:
            return []
        return [_to_value(v, base_dir, where) for v in getattr(msg, field)]
    if isinstance(msg, MapProto):
        if msg.key_type == DataType.STRING:
            keys = [k.decode("utf-8") for k in msg.string_keys]
        else:
            keys = [int(k) for k in msg.keys]
        values = _to_value(msg.values, base_dir, where) if msg.HasField("values") else []
        if len(keys) != len(values):
            raise FormatError(f"{where}: map has {len(keys)} keys and {len(values)} values")
        return dict(zip(keys, values))
    if isinstance(msg, OptionalProto):
        field = {
            _TENSOR: "tensor_value",
            _SPARSE: "sparse_tensor_value",
            _SEQUENCE: "sequence_value",
            _MAP: "map_value",
            _OPTIONAL: "optional_value",
        }.get(msg.elem_type)
        if field is None or not msg.HasField(field):
            return None
        return _to_value(getattr(msg, field), base_dir, where)
    raise InvalidArgument(f"cannot convert {type(msg).__name__}")


# ---------------------------------------------------------------------------------- writing


def _to_proto(value, name: str, optional: bool = False):
    if optional:
        msg = OptionalProto(name=name)
        if value is None:
            msg.elem_type = 0
            return msg
        inner = _to_proto(value, "")
        kind, field = _elem_field(inner, single=True)
        msg.elem_type = kind
        getattr(msg, field).CopyFrom(inner)
        return msg
    if value is None:
        return OptionalProto(name=name, elem_type=0)
    if isinstance(value, list | tuple):
        msg = SequenceProto(name=name)
        items = [_to_proto(v, "") for v in value]
        kind = _elem_field(items[0], single=False)[0] if items else _TENSOR
        msg.elem_type = kind
        for item in items:
            k, field = _elem_field(item, single=False)
            if k != kind:
                raise InvalidArgument("a sequence's elements must all be of one kind")
            getattr(msg, field).add().CopyFrom(item)
        return msg
    if isinstance(value, dict):
        msg = MapProto(name=name)
        keys = list(value)
        if keys and isinstance(keys[0], str | bytes):
            msg.key_type = DataType.STRING
            msg.string_keys.extend([k.encode("utf-8") if isinstance(k, str) else k for k in keys])
        else:
            key_dtype = np.asarray(keys).dtype if keys else np.dtype(np.int64)
            msg.key_type = from_numpy(key_dtype) if keys else DataType.INT64
            msg.keys.extend([int(k) for k in keys])
        msg.values.CopyFrom(_to_proto([value[k] for k in keys], ""))
        return msg
    if isinstance(value, SparseTensor):
        msg = SparseTensorProto()
        tensor_to_proto(value.values, msg.values)
        tensor_to_proto(value.indices, msg.indices)
        msg.dims.extend(value.dims)
        return msg
    t = value if isinstance(value, Tensor) else Tensor(np.asarray(value))
    return tensor_to_proto(t, TensorProto(), name or t.name)


def _elem_field(msg, single: bool) -> tuple[int, str]:
    suffix = "_value" if single else "_values"
    if isinstance(msg, TensorProto):
        return _TENSOR, "tensor" + suffix
    if isinstance(msg, SparseTensorProto):
        return _SPARSE, "sparse_tensor" + suffix
    if isinstance(msg, SequenceProto):
        return _SEQUENCE, "sequence" + suffix
    if isinstance(msg, MapProto):
        return _MAP, "map" + suffix
    return _OPTIONAL, "optional" + suffix
