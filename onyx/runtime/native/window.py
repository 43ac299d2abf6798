"""2-D max and average pooling (window.c): pool.py's values, to the bit but for the sign of a
max pool's zero (a tie of -0 and +0)."""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_ELEMENTS,
    BYTES,
    WorkSplit,
    _check_sizes,
    _element_cuts,
    _filled,
    _run,
    _ways,
    abi,
    bound_task,
    bound_typed_call,
    range_of,
)


@abi("pool2d")
class _Pool2d(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P)] + [
        (name, _I64)
        for name in (
            "H W OH OW kh kw sh sw dh dw top left bottom right average include_pad by_columns"
        ).split()
    ]


def pool2d_f32(
    x: np.ndarray,
    kernel,
    strides,
    dilations,
    pads,
    out_shape,
    *,
    average: bool,
    include_pad: bool = False,
    by_columns: bool = False,
):
    """MaxPool / AveragePool of C-contiguous float32 x (N, C, H, W) to (N, C, *out_shape):
    pads (top, left, bottom, right); pool.py's values (window.c). None without the library."""
    if core.lib is None or x.dtype != np.float32 or x.ndim != 4 or not x.flags.c_contiguous:
        return None
    kind = (average, include_pad, by_columns)
    return _pooled(core.lib.pool2d_f32_range, x, kernel, strides, dilations, pads, out_shape, kind)


def max_pool2d_8bit(x: np.ndarray, kernel, strides, pads, out_shape):
    """MaxPool of C-contiguous 8-bit x (N, C, H, W) to (N, C, *out_shape), dilations 1: pads
    (top, left, bottom, right) (window.c: a max of integers, pool.py's values). None without
    the library."""
    if core.lib is None or x.dtype not in BYTES or x.ndim != 4 or not x.flags.c_contiguous:
        return None
    fn = core.lib.max_pool2d_s8_range if x.dtype == np.int8 else core.lib.max_pool2d_u8_range
    return _pooled(fn, x, kernel, strides, (1, 1), pads, out_shape, (False, False, False))


def _pooled(range_fn, x, kernel, strides, dilations, pads, out_shape, kind: tuple) -> np.ndarray:
    """y (N, C, *out_shape) of x's type, its planes pooled by ``range_fn`` (a window.c range
    kernel) on the task of this geometry and ``kind`` (average, include_pad, by_columns)."""
    N, C = x.shape[:2]
    y = np.empty((N, C, *out_shape), x.dtype)
    if N * C == 0 or y.size == 0:
        return y
    setup = (x.shape, *map(tuple, (kernel, strides, dilations, pads, out_shape)))
    task, cuts, ways = _pool_task(*setup, *kind, core.thread_setting())
    _run(range_fn, _filled(task, x, y), cuts, ways, "pooling")
    return y


@functools.lru_cache(maxsize=1024)
def _pool_task(x_shape, kernel, strides, dilations, pads, out_shape, average, include_pad,
               by_columns, threads):  # fmt: skip
    """The task (its x and y unset), cuts and threads of one pool's geometry: made once, as
    a small pool's call took as long to set them up as to run (threads: the setting's key)."""
    N, C, H, W = x_shape
    _check_sizes("pooling", *out_shape, *kernel, *strides, *dilations, *pads)
    planes = N * C
    ways = _ways(planes * math.prod(out_shape) * math.prod(kernel), planes, _PARALLEL_ELEMENTS)
    task = _Pool2d(
        None,
        None,
        H,
        W,
        *out_shape,
        *kernel,
        *strides,
        *dilations,
        *pads,
        int(average),
        int(include_pad),
        int(by_columns),
    )
    return task, _element_cuts(planes, 1, ways), ways


def bound_pool2d(x_shape, dtype, kernel, strides, dilations, pads, out_shape, kind=(False,) * 3):
    """``call(X)`` = pool2d_f32 (float32) or max_pool2d_8bit (int8, uint8: no average, dilations
    1) of an X of ``x_shape`` (N, C, H, W) and ``dtype``, any layout, as (N, C, *out_shape)
    (registry.binds: a pooling node's static shape): the task and its work split made once, so
    that a call is one native call (a serving U-Net's 16x16 MaxPool spent most of its call
    looking its set-up up). ``kind``: (average, include_pad, by_columns). None where the
    library or the kernel is not there, or where there is nothing to pool."""
    dtype = np.dtype(dtype)
    if core.lib is None or len(x_shape) != 4 or len(out_shape) != 2:
        return None
    if dtype == np.float32:
        fn = core.lib.pool2d_f32_range
    elif dtype in BYTES and not any(kind) and tuple(dilations) == (1, 1):
        fn = core.lib.max_pool2d_s8_range if dtype == np.int8 else core.lib.max_pool2d_u8_range
    else:
        return None
    N, C, H, W = x_shape
    planes = N * C
    if planes * math.prod(out_shape) == 0:
        return None  # (_pooled's early return: no call)
    _check_sizes("pooling", *x_shape, *out_shape, *kernel, *strides, *dilations, *pads)
    template = _Pool2d(None, None, H, W, *out_shape, *kernel, *strides, *dilations, *pads,
                       *map(int, kind))  # fmt: skip
    work = planes * math.prod(out_shape) * math.prod(kernel)
    split = WorkSplit(work, planes, _PARALLEL_ELEMENTS, lambda w: _element_cuts(planes, 1, w))
    run = bound_task(template, fn, split, ("x", "y"), "pooling")
    return bound_typed_call(run, (N, C, *out_shape), np.dtype(dtype), (), "pooling")


def bind(lib, isa: int) -> None:
    lib.pool2d_f32_range = range_of(lib, "pool2d_f32")
    lib.max_pool2d_u8_range = range_of(lib, "max_pool2d_u8")
    lib.max_pool2d_s8_range = range_of(lib, "max_pool2d_s8")


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
