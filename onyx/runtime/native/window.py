"""2-D max and average pooling (window.c), pool.py's values to the bit."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_ELEMENTS,
    _addr,
    _check_sizes,
    _element_cuts,
    _run,
    _ways,
    abi,
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
    pads (top, left, bottom, right); pool.py's values to the bit (window.c). None without the
    library."""
    if core.lib is None or x.dtype != np.float32 or x.ndim != 4 or not x.flags.c_contiguous:
        return None
    N, C, H, W = x.shape
    _check_sizes("pooling", *out_shape, *kernel, *strides, *dilations, *pads)
    y = np.empty((N, C, *out_shape), np.float32)
    planes = N * C
    if planes == 0 or y.size == 0:
        return y
    work = y.size * math.prod(kernel)
    ways = _ways(work, planes, _PARALLEL_ELEMENTS)
    task = _Pool2d(
        _addr(x),
        _addr(y),
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
    _run(core.lib.pool2d_f32_range, task, _element_cuts(planes, 1, ways), ways, "pooling")
    return y


def bind(lib, isa: int) -> None:
    lib.pool2d_f32_range = range_of(lib, "pool2d_f32")
