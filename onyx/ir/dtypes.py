"""ONNX element types (TensorProto.DataType) and their numpy counterparts.

One table holds every fact: enum value, ONNX name, numpy dtype, and the storage width in bits of
the packed wire form (sub-byte types pack several elements per byte).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from .frozen import FrozenValue, IntEnumBody, int_enum, lazy_fields


@int_enum  # (an enum.IntEnum, made in half the time: frozen.int_enum)
class DataType(IntEnumBody):
    """ONNX element types (TensorProto.DataType values)."""

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28


# (a frozen value without dataclass's methods compiled at import: frozen.py)
@lazy_fields
class DTypeInfo(FrozenValue):
    """One element type's facts."""

    dtype: DataType
    numpy: np.dtype
    bits: int  # width of one element on the wire (raw_data); 0 for strings
    type_name: str  # as onnxruntime spells it in 'tensor(...)'

    def __init__(self, dtype: DataType, numpy: np.dtype, bits: int, type_name: str):
        self._set(dtype=dtype, numpy=numpy, bits=bits, type_name=type_name)


def _info(dt: DataType, np_dtype, bits: int, name: str) -> DTypeInfo:
    return DTypeInfo(dt, np.dtype(np_dtype), bits, name)


class _MLDTypeInfo(DTypeInfo):
    """An element type whose numpy form is ml_dtypes' (bfloat16, float8, int4, ...): the
    package is imported when a numpy form is first asked for (its import is a good part of a
    small model's cold start, and most models hold none of these types)."""

    @property
    def numpy(self) -> np.dtype:
        return _ml_numpy()[self.dtype]


_MLDTypeInfo.__qualname__ = "DTypeInfo"  # (its repr, as before)


def _ml(dt: DataType, attr: str, bits: int, name: str) -> DTypeInfo:
    info = _MLDTypeInfo.__new__(_MLDTypeInfo)
    info._set(dtype=dt, bits=bits, type_name=name)
    _ML_ATTRS[dt] = attr
    return info


#: DataType -> the name of its ml_dtypes type
_ML_ATTRS: dict[DataType, str] = {}

D = DataType
_TABLE = [
    _info(D.FLOAT, np.float32, 32, "float"),
    _info(D.UINT8, np.uint8, 8, "uint8"),
    _info(D.INT8, np.int8, 8, "int8"),
    _info(D.UINT16, np.uint16, 16, "uint16"),
    _info(D.INT16, np.int16, 16, "int16"),
    _info(D.INT32, np.int32, 32, "int32"),
    _info(D.INT64, np.int64, 64, "int64"),
    _info(D.STRING, object, 0, "string"),
    _info(D.BOOL, np.bool_, 8, "bool"),
    _info(D.FLOAT16, np.float16, 16, "float16"),
    _info(D.DOUBLE, np.float64, 64, "double"),
    _info(D.UINT32, np.uint32, 32, "uint32"),
    _info(D.UINT64, np.uint64, 64, "uint64"),
    _info(D.COMPLEX64, np.complex64, 64, "complex64"),
    _info(D.COMPLEX128, np.complex128, 128, "complex128"),
    _ml(D.BFLOAT16, "bfloat16", 16, "bfloat16"),
    _ml(D.FLOAT8E4M3FN, "float8_e4m3fn", 8, "float8e4m3fn"),
    _ml(D.FLOAT8E4M3FNUZ, "float8_e4m3fnuz", 8, "float8e4m3fnuz"),
    _ml(D.FLOAT8E5M2, "float8_e5m2", 8, "float8e5m2"),
    _ml(D.FLOAT8E5M2FNUZ, "float8_e5m2fnuz", 8, "float8e5m2fnuz"),
    _ml(D.UINT4, "uint4", 4, "uint4"),
    _ml(D.INT4, "int4", 4, "int4"),
    _ml(D.FLOAT4E2M1, "float4_e2m1fn", 4, "float4e2m1"),
    _ml(D.FLOAT8E8M0, "float8_e8m0fnu", 8, "float8e8m0"),
    _ml(D.UINT2, "uint2", 2, "uint2"),
    _ml(D.INT2, "int2", 2, "int2"),
    _ml(D.FLOAT6E2M3, "float6_e2m3fn", 6, "float6e2m3"),
    _ml(D.FLOAT6E3M2, "float6_e3m2fn", 6, "float6e3m2"),
]


class _ByNumpy(dict):
    """numpy dtype -> DTypeInfo; ml_dtypes' types join when the package is loaded (looking
    one up loads them: an array of such a dtype means the package is imported already)."""

    def __missing__(self, dtype):
        if _ml_types is None and "ml_dtypes" in sys.modules:
            _ml_numpy()
            return self[dtype]
        raise KeyError(dtype)


BY_ENUM: dict[int, DTypeInfo] = {i.dtype: i for i in _TABLE}
BY_NUMPY: dict[np.dtype, DTypeInfo] = _ByNumpy(
    (i.numpy, i) for i in _TABLE if i.dtype != D.STRING and i.dtype not in _ML_ATTRS
)
BY_NAME: dict[str, DTypeInfo] = {i.type_name: i for i in _TABLE}

_ml_types: dict[DataType, np.dtype] | None = None
_ml_hooks: list[Callable] = []


def _ml_numpy() -> dict[DataType, np.dtype]:
    """ml_dtypes' numpy dtypes by DataType, the package imported on the first call."""
    global _ml_types
    if _ml_types is None:
        import ml_dtypes

        types = {dt: np.dtype(getattr(ml_dtypes, attr)) for dt, attr in _ML_ATTRS.items()}
        for dt, t in types.items():
            BY_NUMPY[t] = BY_ENUM[dt]
        for hook in _ml_hooks:  # (first: the types are published with their tables complete)
            hook(ml_dtypes)
        _ml_types = types
    return _ml_types


def when_ml_dtypes(hook: Callable) -> None:
    """Call ``hook(ml_dtypes)`` once ml_dtypes' types are in use (now, if they are): for
    tables of its types kept elsewhere (an array of one of them only ever reaches onyx
    through this module's mapping, which loads them first)."""
    if _ml_types is not None or "ml_dtypes" in sys.modules:
        _ml_numpy()
        hook(sys.modules["ml_dtypes"])
    else:
        _ml_hooks.append(hook)


#: Element types stored several to a byte on the wire.
SUB_BYTE = frozenset(i.dtype for i in _TABLE if 0 < i.bits < 8)


def to_numpy(dtype: int) -> np.dtype:
    """numpy dtype of an ONNX element type (object for STRING)."""
    try:
        return BY_ENUM[dtype].numpy
    except KeyError:
        raise ValueError(f"unknown ONNX element type {dtype}") from None


def from_numpy(dtype) -> DataType:
    """ONNX element type of a numpy dtype; object and unicode/bytes dtypes map to STRING."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return D.STRING
    try:
        return BY_NUMPY[dtype].dtype
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no ONNX element type") from None


def type_name(dtype: int) -> str:
    """'float', 'int64', 'float8e4m3fn', ... as in onnxruntime's 'tensor(float)'; 'undefined'
    for element type 0 (a malformed model's types must still print in its error messages)."""
    entry = BY_ENUM.get(dtype)
    return entry.type_name if entry is not None else "undefined"


def bit_width(dtype: int) -> int:
    return BY_ENUM[dtype].bits
