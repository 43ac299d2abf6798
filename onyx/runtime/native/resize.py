"""Bilinear and whole-factor nearest Resize (resize.c, AVX-512)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_ELEMENTS,
    WorkSplit,
    _addr,
    _check_sizes,
    _even_cuts,
    _run,
    _ways,
    abi,
    bound_task,
    bound_typed_call,
    range_of,
)


@abi("bilinear")
class _Bilinear(ctypes.Structure):
    _fields_ = (
        [("x", _P), ("y", _P)]
        + [(n, _I64) for n in ("H", "W", "OH", "OW")]
        + [(n, _P) for n in ("y_lo", "y_hi", "x_lo", "x_hi", "wy_lo", "wy_hi", "wx_lo", "wx_hi")]
    )


@abi("repeat2d")
class _Repeat2d(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P)] + [(n, _I64) for n in ("H", "W", "kh", "kw")]


def bilinear_ok() -> bool:
    """Whether :func:`bilinear_f32` runs here (the library built, AVX-512)."""
    return core.lib is not None and bool(core.lib.bilinear_range)


def bilinear_f32(planes: np.ndarray, y_taps, x_taps) -> np.ndarray:
    """Bilinear resize of contiguous float32 planes (n, H, W) with per-axis tables (lo, hi:
    contiguous int32; w_lo, w_hi: contiguous float32; resample.py's _bilinear_table, onnxruntime's
    formula): (n, OH, OW)."""
    n, H, W = planes.shape
    OH, OW = len(y_taps[0]), len(x_taps[0])
    y = np.empty((n, OH, OW), np.float32)
    tables = [
        y_taps[0],
        y_taps[1],
        x_taps[0],
        x_taps[1],
        y_taps[2],
        y_taps[3],
        x_taps[2],
        x_taps[3],
    ]
    t = _Bilinear(_addr(planes), _addr(y), H, W, OH, OW, *(_addr(a) for a in tables))
    ways = _ways(n * OH * OW * 4, n, _PARALLEL_ELEMENTS * 4)
    _run(core.lib.bilinear_range, t, _even_cuts(n, ways), ways, "Resize")
    return y


def repeat2d_4byte(planes: np.ndarray, kh: int, kw: int) -> np.ndarray | None:
    """Every element of contiguous planes (n, H, W) of 4-byte items repeated kh x kw times
    (nearest upsampling by whole factors): (n, H kh, W kw); None without the kernel."""
    if core.lib is None or not core.lib.repeat2d_range or planes.dtype.itemsize != 4:
        return None
    n, H, W = planes.shape
    y = np.empty((n, H * kh, W * kw), planes.dtype)
    t = _Repeat2d(_addr(planes), _addr(y), H, W, kh, kw)
    ways = _ways(y.size, n, _PARALLEL_ELEMENTS * 4)
    _run(core.lib.repeat2d_range, t, _even_cuts(n, ways), ways)
    return y


def bound_bilinear_f32(shape, y_taps, x_taps):
    """``call(X)`` = bilinear_f32 of X's planes for a float32 X of ``shape`` (..., H, W), any
    layout, resized on its last two axes, as an (..., OH, OW) array (registry.binds: Resize
    of constant scales or sizes): the task made once with the tables' addresses, so that a
    call is one native call (a U-Net's 16x16 -> 32x32 upsampling is a few microseconds of
    work, about what the table arguments' conversions took per call)."""
    *lead, H, W = shape
    n, OH, OW = math.prod(lead), len(y_taps[0]), len(x_taps[0])
    _check_sizes("Resize", n, H, W, OH, OW)
    tables = (*y_taps[:2], *x_taps[:2], *y_taps[2:4], *x_taps[2:4])
    tables = tuple(np.ascontiguousarray(a) for a in tables)  # (resample.py's: already so)
    template = _Bilinear(None, None, H, W, OH, OW, *(_addr(a) for a in tables))
    split = WorkSplit(n * OH * OW * 4, n, _PARALLEL_ELEMENTS * 4, lambda w: _even_cuts(n, w))
    run = bound_task(template, core.lib.bilinear_range, split, ("x", "y"), "Resize")
    return bound_typed_call(run, (*lead, OH, OW), np.dtype(np.float32), tables, "Resize")


def bound_repeat2d_4byte(shape, dtype, kh: int, kw: int):
    """``call(X)`` = repeat2d_4byte of X's planes for an X of ``shape`` (..., H, W) and a
    4-byte ``dtype``, any layout, as an (..., H kh, W kw) array; None without the kernel."""
    if core.lib is None or not core.lib.repeat2d_range or np.dtype(dtype).itemsize != 4:
        return None
    *lead, H, W = shape
    n = math.prod(lead)
    _check_sizes("Resize", n, H, W, kh, kw)
    template = _Repeat2d(None, None, H, W, kh, kw)
    size = n * H * kh * W * kw
    split = WorkSplit(size, n, _PARALLEL_ELEMENTS * 4, lambda w: _even_cuts(n, w))
    run = bound_task(template, core.lib.repeat2d_range, split, ("x", "y"), "Resize")
    return bound_typed_call(run, (*lead, H * kh, W * kw), np.dtype(dtype), (), "Resize")


def bind(lib, isa: int) -> None:
    avx512 = bool(isa & core.ISA_AVX512)
    lib.bilinear_range = range_of(lib, "bilinear_f32") if avx512 else None
    lib.repeat2d_range = range_of(lib, "repeat2d_u32") if avx512 else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
