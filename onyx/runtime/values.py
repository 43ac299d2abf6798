"""Conversions between IR constants (attribute values, initializers) and runtime values."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import AttrType, Tensor


def tensor_value(t: Tensor) -> np.ndarray:
    """A read-only numpy view of a constant, so no kernel or caller can change it in place."""
    arr = t.numpy()
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def sparse_value(sp: Any) -> np.ndarray:
    """A sparse constant densified (kernels take dense arrays), read-only like every constant."""
    arr = sp.to_dense()
    arr.flags.writeable = False
    return arr


def attr_value(kind: AttrType, value: Any, compile_graph) -> Any:
    """An attribute's value as kernels take it; graphs go through ``compile_graph``."""
    if kind == AttrType.TENSOR:
        return tensor_value(value)
    if kind == AttrType.TENSORS:
        return [tensor_value(t) for t in value]
    if kind == AttrType.SPARSE_TENSOR:
        return sparse_value(value)
    if kind == AttrType.SPARSE_TENSORS:
        return [sparse_value(v) for v in value]
    if kind == AttrType.GRAPH:
        return compile_graph(value)
    if kind == AttrType.GRAPHS:
        return [compile_graph(g) for g in value]
    if kind == AttrType.STRING:
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    if kind == AttrType.STRINGS:
        return [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in value]
    if kind in (AttrType.INTS, AttrType.FLOATS):
        return list(value)
    return value


def describe(value: Any) -> str:
    """A short description of a runtime value for error messages: dtype and shape."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
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
