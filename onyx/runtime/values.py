"""Conversions between IR constants (attribute values, initializers) and runtime values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import AttrType, Tensor

#: Constants start on a cache line: numpy's matmul skips BLAS for a misaligned operand (a float32
#: weight at an odd address multiplies many times slower), and SIMD loads prefer whole lines.
ALIGNMENT = 64
#: Smaller constants (scales, zero points, shape vectors: most of a quantized model's) are
#: copied only when misaligned for their element type: a line does not matter to them, and
#: copying thousands slowed a session's creation.
ALIGN_MIN_BYTES = 4096


def tensor_value(t: Tensor) -> np.ndarray:
    """A read-only numpy view of a constant, so no kernel or caller can change it in place.

    Zero-copy tensors view the model's bytes wherever protobuf put them; a misaligned one is
    copied once to an aligned buffer.
    """
    arr = t.numpy()
    if arr.dtype != object and arr.size and _misaligned(arr):
        arr = aligned_copy(arr)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _misaligned(arr: np.ndarray) -> bool:
    if not arr.flags.aligned:
        return True
    return arr.nbytes >= ALIGN_MIN_BYTES and arr.ctypes.data % ALIGNMENT != 0


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ALIGNMENT bytes."""
    dtype = np.dtype(dtype)
    # (math.prod: np.prod's Python wrapper cost a plan several us per weight it copies)
    nbytes = math.prod(shape) * dtype.itemsize
    buf = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -buf.ctypes.data % ALIGNMENT
    return buf[start : start + nbytes].view(dtype).reshape(shape)


def aligned_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of arr whose data starts at a multiple of ALIGNMENT bytes."""
    out = aligned_empty(arr.shape, arr.dtype)
    np.copyto(out, arr)
    return out


def sparse_value(sp: Any) -> np.ndarray:
    """A sparse constant densified (kernels take dense arrays), read-only like every constant."""
    arr = sp.to_dense()
    arr.flags.writeable = False
    return arr


_STR_ONLY = frozenset({str})
#: Attribute types whose values kernels take as they are. (Module constants, like the rest
#: below: reading ``AttrType.X`` goes through the enum class's ``__getattr__`` hook (Python
#: 3.11's EnumType defines one), some 0.25 us a read, and the plan converts every attribute.)
AS_IS = frozenset({AttrType.UNDEFINED, AttrType.FLOAT, AttrType.INT, AttrType.TYPE_PROTO})
_LISTS = frozenset({AttrType.INTS, AttrType.FLOATS})
_TENSOR, _TENSORS = AttrType.TENSOR, AttrType.TENSORS
_SPARSE, _SPARSES = AttrType.SPARSE_TENSOR, AttrType.SPARSE_TENSORS
_GRAPH, _GRAPHS = AttrType.GRAPH, AttrType.GRAPHS
_STRING, _STRINGS = AttrType.STRING, AttrType.STRINGS


def attr_value(kind: AttrType, value: Any, compile_graph) -> Any:
    """An attribute's value as kernels take it; graphs go through ``compile_graph``."""
    if kind in AS_IS:
        return value
    if kind in _LISTS:
        return list(value)
    if kind == _TENSOR:
        return tensor_value(value)
    if kind == _TENSORS:
        return [tensor_value(t) for t in value]
    if kind == _SPARSE:
        return sparse_value(value)
    if kind == _SPARSES:
        return [sparse_value(v) for v in value]
    if kind == _GRAPH:
        return compile_graph(value)
    if kind == _GRAPHS:
        return [compile_graph(g) for g in value]
    if kind == _STRING:
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    if kind == _STRINGS:
        if set(map(type, value)) <= _STR_ONLY:  # (the reader decoded them all: one C pass)
            return list(value)
        return [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in value]
    return value


#: dtype -> its name: numpy builds str(dtype) afresh each time (slowly), and a profiled run
#: describes every input and output of every node.
_DTYPE_NAMES: dict[np.dtype, str] = {}


def describe(value: Any) -> str:
    """A short description of a runtime value for error messages and profiles: dtype and
    shape."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        name = _DTYPE_NAMES.get(value.dtype)
        if name is None:
            name = _DTYPE_NAMES[value.dtype] = str(value.dtype)
        return f"{name}{list(value.shape)}"
    if isinstance(value, list):
        return (
            "seq["
            + ", ".join(describe(v) for v in value[:3])
            + (", ..." if len(value) > 3 else "")
            + "]"
        )
    if isinstance(value, dict):
        return f"map({len(value)} entries)"
    return type(value).__name__


class FreshList(list):
    """A kernel's result list whose items were made for this result alone (ZipMap's rows):
    the caller gets it as a plain list without each item copied (plan.as_array_result)."""

    __slots__ = ()
