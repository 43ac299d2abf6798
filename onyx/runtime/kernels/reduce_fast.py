"""Reduce{Mean,Max,Min,Sum} of float32 over the last axis alone, the case of 1-D conv and audio
classifiers' global pooling (a few thousand values, batch 1): the general path's bits with
fewer steps. There the general path's axis handling and numpy's wrappers cost more than the
reduction itself.

Each function returns None where it does not apply; reduction.py then runs the general path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import native

_F32 = np.dtype(np.float32)


def _last_axis(data, axes) -> bool:
    """Whether data is a non-empty float32 array of 2+ dimensions and axes names its last."""
    if type(data) is not np.ndarray or data.dtype != _F32 or data.ndim < 2 or not data.size:
        return False
    if type(axes) is np.ndarray:
        if axes.size != 1:
            return False
        axes = axes.reshape(-1).tolist()
    elif type(axes) not in (list, tuple) or len(axes) != 1:
        return False
    axis = int(axes[0])
    return axis == -1 or axis == data.ndim - 1


def _mean(data, axes, keepdims) -> np.ndarray | None:
    if not _last_axis(data, axes) or not data.flags.c_contiguous:
        return None  # (numpy's order: the general path, already lean)
    size = data.shape[-1]
    y = native.mean_rows_f32(data.reshape(-1, size))  # (None without the library)
    if y is None:
        return None
    return y.reshape(data.shape[:-1] + (1,) if keepdims else data.shape[:-1])


def _ufunc_reduce(ufunc: np.ufunc, dtype=None) -> Callable:
    def reduce_(data, axes, keepdims) -> np.ndarray | None:
        if not _last_axis(data, axes):
            return None
        return ufunc.reduce(data, axis=-1, dtype=dtype, keepdims=bool(keepdims))

    return reduce_


#: Reduce op -> its fast form (data, axes, keepdims) -> result or None
FAST: dict[str, Callable] = {
    "ReduceMean": _mean,
    "ReduceMax": _ufunc_reduce(np.maximum),
    "ReduceMin": _ufunc_reduce(np.minimum),
    "ReduceSum": _ufunc_reduce(np.add, _F32),
}
