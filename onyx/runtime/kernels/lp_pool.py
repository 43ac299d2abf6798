"""LpPool and GlobalLpPool: the p-norm of each window (pool.py's windows, summed)."""

from __future__ import annotations

import numpy as np

from ..registry import op
from .low_floats import compute_dtype
from .pool import _Pool, _spatial_axes


def _lp_pool(X, p, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode):
    ct = compute_dtype(X.dtype)
    pool = _Pool(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, "LpPool")
    powered = np.abs(X.astype(ct, copy=False)) ** ct.type(p)
    return (pool.sum(pool.pad(powered, 0)) ** ct.type(1.0 / p)).astype(X.dtype, copy=False)


@op("LpPool", since=1)
def lp_pool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape=None,
    p=2,
    pads=None,
    strides=None,
):
    # LpPool-1 had a float p and an optional kernel_shape; same computation.
    return _lp_pool(X, p, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)


@op("GlobalLpPool", since=1)
def global_lp_pool(X, *, p=2):
    ct = compute_dtype(X.dtype)
    total = (np.abs(X.astype(ct, copy=False)) ** ct.type(p)).sum(
        axis=_spatial_axes(X), keepdims=True
    )
    return (total ** ct.type(1.0 / p)).astype(X.dtype)
