"""Kernels over rows (rows.c) that a classifier's head runs: global average pooling (float32
and 8-bit) and softmax. The normalizations over rows are norms.py's: a small CNN's first run
had imported them to pool and take its softmax."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_BYTES,
    _PARALLEL_ELEMENTS,
    BYTES,
    _addr,
    _element_cuts,
    _input_addr,
    _run,
    _ways,
    abi,
    range_of,
)


@abi("softmax_rows")
class _SoftmaxRows(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("size", _I64)]


@abi("global_pool")
class _GlobalPool(ctypes.Structure):
    _fields_ = (
        [("x", _P), ("y", _P), ("size", _I64), ("scale", ctypes.c_float)]
        + [(name, ctypes.c_int32) for name in ("x_zp", "y_zp", "is_signed")]
        + [("columns", _I64)]
    )


#: (rows, size, thread setting) -> the row mean's task template, its cuts' address, parts,
#: threads and the cuts (held: the lru cache that made them may let them go). A small model's
#: global pooling runs once a call on a few thousand values: the set-up cost more than that.
_MEAN_SETUPS: dict[tuple, tuple] = {}


def _mean_setup(rows: int, size: int) -> tuple:
    ways = _ways(rows * size, rows, _PARALLEL_ELEMENTS)
    cuts = _element_cuts(rows, 1, ways)
    return _GlobalPool(None, None, size), _addr(cuts), len(cuts) - 1, ways, cuts


def mean_rows_f32(x: np.ndarray) -> np.ndarray | None:
    """The mean of each row of a C-contiguous float32 (rows, size) array, in onnxruntime's
    order of additions (rows.c); None without the library."""
    lib = core.lib
    if lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim != 2:
        return None
    rows, size = x.shape
    key = (rows, size, core.thread_setting())
    setup = _MEAN_SETUPS.get(key)
    if setup is None:
        if len(_MEAN_SETUPS) >= 64:  # (a bound: a model fed ever new shapes)
            _MEAN_SETUPS.clear()
        setup = _MEAN_SETUPS[key] = _mean_setup(rows, size)
    template, cuts_at, parts, ways, _cuts = setup
    y = np.empty(rows, np.float32)
    task = _GlobalPool.from_buffer_copy(template)  # (calls may come from several threads)
    task.x, task.y = _input_addr(x), _addr(y)  # (x only read: a feed's view is too)
    status = lib.onyx_parallel(lib.mean_rows_f32_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "row mean")
    return y


def softmax_rows_f32(x: np.ndarray) -> np.ndarray | None:
    """Softmax of float32 x over its last axis, one pass of rows.c a row (exp in 16 lanes:
    1e-7 relative from numpy's); None without the library or for empty rows."""
    if core.lib is None or x.dtype != np.float32 or not x.ndim or not x.shape[-1]:
        return None
    x = np.ascontiguousarray(x)
    n = x.shape[-1]
    rows = x.size // n
    y = np.empty_like(x)
    ways = _ways(x.size * 8, rows, _PARALLEL_ELEMENTS)  # (an exp is several operations)
    task = _SoftmaxRows(_addr(x), _addr(y), n)
    _run(core.lib.softmax_rows_f32_range, task, _element_cuts(rows, 1, ways), ways, "softmax")
    return y


def qmean_rows(x: np.ndarray, scale: float, x_zero_point: int, y_zero_point: int):
    """QLinearGlobalAveragePool's rows: the mean of each row of C-contiguous 8-bit (rows, size)
    x, requantized to x's type with multiplier ``scale`` (x_scale / (y_scale * size)) as
    onnxruntime does (rows.c); None without the library."""
    if core.lib is None or x.dtype not in BYTES or not x.flags.c_contiguous or x.ndim != 2:
        return None
    rows, size = x.shape
    y = np.empty(rows, x.dtype)
    return _qmean(core.lib.qmean_rows_range, x, y, rows, size, scale, x_zero_point, y_zero_point)


def qmean_columns(x: np.ndarray, scale: float, x_zero_point: int, y_zero_point: int):
    """qmean_rows of channels-last bytes: x C-contiguous 8-bit (images, size, columns), each
    image's columns pooled over its ``size`` pixels (rows.c), y (images, columns); None
    without the library."""
    if core.lib is None or x.dtype not in BYTES or not x.flags.c_contiguous or x.ndim != 3:
        return None
    images, size, columns = x.shape
    y = np.empty((images, columns), x.dtype)
    requantization = (scale, x_zero_point, y_zero_point)
    return _qmean(core.lib.qmean_columns_range, x, y, images, size, *requantization, columns)


def _qmean(range_fn, x, y, parts: int, size: int, scale, x_zp, y_zp, columns: int = 0):
    """qmean_rows' and qmean_columns' call: ``parts`` rows or images of x split over the
    pool (``columns``: 0 for rows), y filled and returned."""
    ways = _ways(x.size, parts, _PARALLEL_BYTES * 4)
    signed = int(x.dtype == np.int8)
    task = _GlobalPool(
        _input_addr(x), _addr(y), size, float(scale), int(x_zp), int(y_zp), signed, columns
    )
    _run(range_fn, task, _element_cuts(parts, 1, ways), ways)
    return y


def bind(lib, isa: int) -> None:
    for name in (
        "mean_rows_f32",
        "qmean_columns",
        "qmean_rows",
        "softmax_rows_f32",
    ):
        setattr(lib, f"{name}_range", range_of(lib, name))


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
