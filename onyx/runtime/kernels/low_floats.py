"""The float types numpy has no fast or exact loops for, and their upcast: the elementwise
kernels' helpers that linalg, reduction, cast and the contrib kernels share (a module of their
own: linalg's import took elementwise.py's ~150 kernels along for one function)."""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import when_ml_dtypes

#: Float types numpy has no fast or exact loops for: computed in float32, rounded back after
#: (ml_dtypes' join when that package is loaded: ir/dtypes.py imports it on first use).
LOW_FLOATS = {np.dtype(np.float16)}


def _low_ml_floats(ml_dtypes) -> None:
    LOW_FLOATS.update(
        np.dtype(t)
        for t in (
            ml_dtypes.bfloat16,
            ml_dtypes.float8_e4m3fn,
            ml_dtypes.float8_e4m3fnuz,
            ml_dtypes.float8_e5m2,
            ml_dtypes.float8_e5m2fnuz,
            ml_dtypes.float8_e8m0fnu,
            ml_dtypes.float4_e2m1fn,
            ml_dtypes.float6_e2m3fn,
            ml_dtypes.float6_e3m2fn,
        )
    )


when_ml_dtypes(_low_ml_floats)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype in LOW_FLOATS


def upcast(x: np.ndarray) -> np.ndarray:
    """x in a dtype numpy computes well: float32 for the 16/8/4-bit floats, else unchanged."""
    return x.astype(np.float32) if x.dtype in LOW_FLOATS else x


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays float64; every narrower float (float16, bfloat16, ...) computes in float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def type_range(dtype: np.dtype) -> tuple:
    """The lowest and highest values of a numpy integer or float type (+-inf for floats)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min, info.max
    return -np.inf, np.inf


def fits(shape: tuple, other: tuple) -> bool:
    """An array of shape ``other`` broadcasts to ``shape`` without growing it (so an in-place
    op on the ``shape`` array can take it); np.broadcast_shapes costs microseconds."""
    if other == shape or not other:
        return True
    n = len(other)
    if n > len(shape):
        return False
    return all(o == 1 or o == d for o, d in zip(other, shape[len(shape) - n :]))
