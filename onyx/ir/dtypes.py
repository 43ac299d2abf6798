"""ONNX element types (TensorProto.DataType) and their numpy counterparts.

One table holds every fact: enum value, ONNX name, numpy dtype, and the storage width in bits of
the packed wire form (sub-byte types pack several elements per byte).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .frozen import FrozenValue


class DataType(enum.IntEnum):
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
@dataclass(init=False, repr=False, eq=False)
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
    _info(D.BFLOAT16, ml_dtypes.bfloat16, 16, "bfloat16"),
    _info(D.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 8, "float8e4m3fn"),
    _info(D.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 8, "float8e4m3fnuz"),
    _info(D.FLOAT8E5M2, ml_dtypes.float8_e5m2, 8, "float8e5m2"),
    _info(D.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 8, "float8e5m2fnuz"),
    _info(D.UINT4, ml_dtypes.uint4, 4, "uint4"),
    _info(D.INT4, ml_dtypes.int4, 4, "int4"),
    _info(D.FLOAT4E2M1, ml_dtypes.float4_e2m1fn, 4, "float4e2m1"),
    _info(D.FLOAT8E8M0, ml_dtypes.float8_e8m0fnu, 8, "float8e8m0"),
    _info(D.UINT2, ml_dtypes.uint2, 2, "uint2"),
    _info(D.INT2, ml_dtypes.int2, 2, "int2"),
    _info(D.FLOAT6E2M3, ml_dtypes.float6_e2m3fn, 6, "float6e2m3"),
    _info(D.FLOAT6E3M2, ml_dtypes.float6_e3m2fn, 6, "float6e3m2"),
]

BY_ENUM: dict[int, DTypeInfo] = {i.dtype: i for i in _TABLE}
BY_NUMPY: dict[np.dtype, DTypeInfo] = {i.numpy: i for i in _TABLE if i.dtype != D.STRING}
BY_NAME: dict[str, DTypeInfo] = {i.type_name: i for i in _TABLE}

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
