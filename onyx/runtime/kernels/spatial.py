"""The numpy side of windowed ops (convs, pools, Resize's pads): the spatial axes padded or
cropped in one pass, the strided read-only view of every window, a global pool's rows. Apart from conv.py so that
the pools, the integer convs and Resize use them without importing the float conv (and the
conv modules it imports)."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided


def pad_spatial(x: np.ndarray, begin, end, value=0) -> np.ndarray:
    """Pad the spatial axes (2:) of x; negative amounts crop."""
    if not any(begin) and not any(end):
        return x
    need = [s + b + e for s, b, e in zip(x.shape[2:], begin, end)]
    return padded(x, begin, need, x.dtype, value=value)


def padded(x: np.ndarray, begin, need, dtype, *, shift=None, value=0) -> np.ndarray:
    """x (N, C, *spatial) as dtype, minus shift, in a fresh (N, C, *need) buffer of value whose
    origin sits at -begin: what lies outside x is padding, what lies outside need is cropped.
    Returns x itself (or one converted copy) when nothing is to pad or crop.
    """
    spatial = x.shape[2:]
    if not any(begin) and list(need) == list(spatial):
        return _converted(x, dtype, shift)
    fill = np.zeros if value == 0 else lambda shape, dtype: np.full(shape, value, dtype)
    xp = fill(x.shape[:2] + tuple(need), dtype)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for s, b, nd in zip(spatial, begin, need):
        lo = max(0, -b)  # a negative begin crops
        hi = min(s, nd - b)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo + b, max(lo, hi) + b))
    _assign(xp[tuple(dst)], x[tuple(src)], shift)
    return xp


def _converted(x: np.ndarray, dtype, shift=None) -> np.ndarray:
    if shift is None:
        return x.astype(dtype, copy=False)
    return np.subtract(x, shift, dtype=dtype)


def _assign(dst: np.ndarray, src: np.ndarray, shift=None) -> None:
    """dst[...] = src - shift, converting in the same pass."""
    if shift is None:
        np.copyto(dst, src, casting="unsafe")
    else:
        np.subtract(src, shift, out=dst, dtype=dst.dtype, casting="unsafe")


def windows(xp: np.ndarray, out_shape, kernel, strides, dilations) -> np.ndarray:
    """Read-only view (N, C, *out, *kernel) of xp: [n, c, o.., k..] = xp[n, c, o*s + k*d]."""
    st = xp.strides
    n = len(kernel)
    shape = xp.shape[:2] + tuple(out_shape) + tuple(kernel)
    steps = (
        st[:2]
        + tuple(st[2 + i] * strides[i] for i in range(n))
        + tuple(st[2 + i] * dilations[i] for i in range(n))
    )
    return as_strided(xp, shape, steps, writeable=False)


def channel_rows(x) -> np.ndarray:
    """x (N, C, spatial...) as C-contiguous (N * C, pixels) rows."""
    return np.ascontiguousarray(x).reshape(x.shape[0] * x.shape[1], math.prod(x.shape[2:]))


def pooled_shape(x) -> tuple[int, ...]:
    """The shape of a global pool of x (N, C, spatial...): (N, C, 1, ...)."""
    return x.shape[:2] + (1,) * (x.ndim - 2)
