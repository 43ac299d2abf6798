"""Scales and zero points: the arithmetic of linear quantization (QuantizeLinear's spec).

q = saturate(round_half_even(x / scale) + zero_point); x ~= (q - zero_point) * scale.
Ranges always include 0 so that 0 (padding, ReLU's floor) is exact. Symmetric weights use the
range [-127, 127] for int8 (not -128) so negating a weight never saturates, as onnxruntime does.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgument
from ..ir import DataType

#: name -> (DataType, numpy dtype, qmin, qmax)
QTYPES = {
    "uint8": (DataType.UINT8, np.uint8, 0, 255),
    "int8": (DataType.INT8, np.int8, -128, 127),
    "int4": (DataType.INT4, np.int8, -8, 7),
    "uint4": (DataType.UINT4, np.uint8, 0, 15),
}


def qtype(name) -> str:
    """Normalise a quantized type name ('int8', np.int8, 'QInt8' ...)."""
    key = np.dtype(name).name if not isinstance(name, str) else name.lower()
    key = key.removeprefix("q")
    if key not in QTYPES:
        raise InvalidArgument(f"unsupported quantized type {name!r} (one of {', '.join(QTYPES)})")
    return key


def qrange(name: str, symmetric: bool = False, reduce_range: bool = False) -> tuple[int, int]:
    _, _, lo, hi = QTYPES[name]
    if reduce_range:  # one bit less: avoids int16 overflow in some CPUs' u8*s8 dot products
        lo, hi = (lo // 2, hi // 2) if lo < 0 else (0, (hi + 1) // 2 - 1)
    if symmetric and lo < 0:
        lo = -hi
    return lo, hi


def scale_zero_point(
    rmin, rmax, name: str, symmetric: bool = False, reduce_range: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (of the quantized type) covering [rmin, rmax] (arrays
    for per-channel)."""
    rmin = np.minimum(np.asarray(rmin, np.float64), 0.0)
    rmax = np.maximum(np.asarray(rmax, np.float64), 0.0)
    lo, hi = qrange(name, symmetric, reduce_range)
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        scale = absmax * 2 / (hi - lo)
        zp = np.full(scale.shape, (lo + hi + 1) // 2 if lo >= 0 else 0, np.float64)
    else:
        scale = (rmax - rmin) / (hi - lo)
        safe = np.where(scale > 0, scale, 1.0)
        zp = np.clip(np.round(lo - rmin / safe), lo, hi)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return scale, zp.astype(QTYPES[name][1])


def quantize_array(
    x: np.ndarray, scale: np.ndarray, zp: np.ndarray, name: str, axis: int | None = None
) -> np.ndarray:
    lo, hi = QTYPES[name][2:]
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    q = np.rint(x.astype(np.float32) / scale) + zp.astype(np.float32)
    return np.clip(q, lo, hi).astype(QTYPES[name][1])


def quantize_weight(
    w: np.ndarray, name: str, axis: int | None, symmetric: bool, reduce_range: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, scale, zero_point) of a constant, per tensor (axis None) or per channel of ``axis``."""
    if axis is None:
        rmin, rmax = w.min(initial=0.0), w.max(initial=0.0)
    else:
        other = tuple(i for i in range(w.ndim) if i != axis)
        rmin, rmax = w.min(axis=other, initial=0.0), w.max(axis=other, initial=0.0)
    scale, zp = scale_zero_point(rmin, rmax, name, symmetric, reduce_range)
    return quantize_array(w, scale, zp, name, axis), scale, zp
