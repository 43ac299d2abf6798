"""Reduce{Mean,Max,Min,Sum} of float32 over the last axis alone, the case of 1-D conv and audio
classifiers' global pooling (a few thousand values, batch 1): the general path's bits with
fewer steps. There the general path's axis handling, numpy's wrappers and the native row
mean's per-call set-up cost more than the reduction itself.

Each function returns None where it does not apply; reduction.py then runs the general path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from ..native import _core as core
from ..native._core import _PARALLEL_ELEMENTS, _addr, _element_cuts, _input_addr, _ways
from ..native.rows import _GlobalPool

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


#: (rows, size, thread setting) -> the native row mean's task template, cuts' address, parts,
#: threads and the cuts (held: the lru cache that made them may let them go)
_MEAN_SETUPS: dict[tuple, tuple] = {}


def _mean_setup(rows: int, size: int) -> tuple:
    ways = _ways(rows * size, rows, _PARALLEL_ELEMENTS)
    cuts = _element_cuts(rows, 1, ways)
    return _GlobalPool(None, None, size), _addr(cuts), len(cuts) - 1, ways, cuts


def _mean(data, axes, keepdims) -> np.ndarray | None:
    if not _last_axis(data, axes):
        return None
    lib = core.lib
    if lib is None or not data.flags.c_contiguous:
        return None  # (numpy's order: the general path, already lean)
    size = data.shape[-1]
    rows = data.size // size
    key = (rows, size, core.thread_setting())
    setup = _MEAN_SETUPS.get(key)
    if setup is None:
        if len(_MEAN_SETUPS) >= 64:  # (a bound: a model fed ever new shapes)
            _MEAN_SETUPS.clear()
        setup = _MEAN_SETUPS[key] = _mean_setup(rows, size)
    template, cuts_at, parts, ways, _cuts = setup
    y = np.empty(data.shape[:-1] + (1,) if keepdims else data.shape[:-1], _F32)
    task = _GlobalPool.from_buffer_copy(template)  # (calls may come from several threads)
    task.x, task.y = _input_addr(data), _addr(y)
    status = lib.onyx_parallel(lib.mean_rows_f32_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "ReduceMean")
    return y


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
