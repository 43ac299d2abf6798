"""onnxruntime's com.microsoft QLinearAveragePool and QLinearGlobalAveragePool: pooling of
8-bit tensors, requantized as onnxruntime does."""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import native
from ..registry import op
from .spatial import channel_rows, pooled_shape


def _dequantize(x, scale, zero_point) -> np.ndarray:
    zp = np.float32(0) if zero_point is None else np.float32(zero_point.reshape(-1)[0])
    return (x.astype(np.float32) - zp) * np.float32(scale.reshape(-1)[0])


def _quantize(y, scale, zero_point, dtype) -> np.ndarray:
    zp = np.float32(0) if zero_point is None else np.float32(zero_point.reshape(-1)[0])
    # onnxruntime adds the zero point in float32 before rounding half to even (the tie-breaker:
    # it differs from rint-then-add on exact ties, which 8-bit grids hit often).
    q = np.rint(y / np.float32(scale.reshape(-1)[0]) + zp)
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def _to_channels_first(x, channels_last):
    return np.moveaxis(x, -1, 1) if channels_last else x


def _from_channels_first(y, channels_last):
    return np.moveaxis(y, 1, -1) if channels_last else y


@op("QLinearAveragePool", since=1, domain="com.microsoft")
def qlinear_average_pool(
    X,
    x_scale,
    x_zero_point=None,
    y_scale=None,
    y_zero_point=None,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    channels_last=0,
    count_include_pad=0,
    kernel_shape,
    pads=None,
    strides=None,
):
    # Dequantize -> AveragePool in float32 -> quantize, as the contrib op defines it.
    # (pool.py's windows: imported here, as QLinearGlobalAveragePool, a quantized CNN's head,
    # needs none of that module)
    from .pool import _average_pool

    x = _to_channels_first(_dequantize(X, x_scale, x_zero_point), channels_last)
    y = _average_pool(x, kernel_shape, auto_pad, pads, strides, None, ceil_mode, count_include_pad)
    dtype = X.dtype if y_zero_point is None else y_zero_point.dtype
    return np.ascontiguousarray(
        _from_channels_first(_quantize(y, y_scale, y_zero_point, dtype), channels_last)
    )


#: QLinearGlobalAveragePool's requantization of a node's constant parameters, by input shape
#: and type and the parameters' ids; each entry holds the parameter objects (no id reused).
_global_pools: dict = {}


def _keep_global_pool(X, channels_last, params: tuple, requantization: tuple) -> None:
    if all(p is None or (isinstance(p, np.ndarray) and not p.flags.writeable) for p in params):
        if len(_global_pools) >= 1024:  # (sessions come and go)
            _global_pools.clear()
        key = (X.shape, X.dtype.char, bool(channels_last), *map(id, params))
        _global_pools[key] = (params, requantization)


@op("QLinearGlobalAveragePool", since=1, domain="com.microsoft")
def qlinear_global_average_pool(
    X, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, channels_last=0
):
    """The exact integer sum of each channel, then onnxruntime's requantization (the
    tie-breaker: the contrib op names no order): (sum - count * x_zp) in float32 times
    x_scale / (y_scale * count), rounded half to even, clamped, plus y_zp."""
    params = (x_scale, x_zero_point, y_scale, y_zero_point)
    columns = _columns(X, channels_last)
    if columns is not None or not channels_last:  # (a node's constants: their multiplier
        key = (X.shape, X.dtype.char, bool(channels_last), *map(id, params))  # and zero
        hit = _global_pools.get(key)  # points; the count, so the multiplier, is the layout's)
        if hit is not None and all(map(operator.is_, hit[0], params)):
            y = _native_pool(X, columns, hit[1])
            if y is not None:
                return y.reshape(_pooled(X, channels_last))
    count = math.prod(X.shape[2:] if not channels_last else X.shape[1:-1])
    scale = np.float32(x_scale.reshape(-1)[0]) / (
        np.float32(y_scale.reshape(-1)[0]) * np.float32(count)
    )
    x_zp = 0 if x_zero_point is None else int(x_zero_point.reshape(-1)[0])
    y_zp = 0 if y_zero_point is None else int(y_zero_point.reshape(-1)[0])
    if columns is not None or not channels_last:
        y = _native_pool(X, columns, (scale, x_zp, y_zp))
        if y is not None:
            _keep_global_pool(X, channels_last, params, (scale, x_zp, y_zp))
            return y.reshape(_pooled(X, channels_last))
    if not channels_last:
        sums = channel_rows(X).sum(axis=1, dtype=np.int64)
    else:
        sums = X.reshape(X.shape[0], -1, X.shape[-1]).sum(axis=1, dtype=np.int64)
    info = np.iinfo(X.dtype)
    v = np.rint((sums - count * x_zp).astype(np.float32) * scale)
    y = (np.clip(v, info.min - y_zp, info.max - y_zp) + y_zp).astype(X.dtype)
    return y.reshape(_pooled(X, channels_last))


def _columns(X, channels_last) -> np.ndarray | None:
    """X's bytes as C-contiguous (N, pixels, C) where they lie channels-last already (an NCHW
    X that is a channels-last tensor's transposed view: the end of a quantized CNN's NHWC
    chain; or a contiguous channels_last X), else None."""
    if X.ndim < 3:
        return None
    if channels_last:
        nhwc = X
    elif X.strides[1] != X.itemsize:  # (not channels-last bytes: an NCHW tensor's rows)
        return None
    else:  # (transpose with a written order: moveaxis's checks cost a small pool 2 us)
        nhwc = X.transpose(_CHANNELS_LAST.get(X.ndim) or (0, *range(2, X.ndim), 1))
    if not nhwc.flags.c_contiguous:
        return None
    return nhwc.reshape(nhwc.shape[0], -1, nhwc.shape[-1])


_CHANNELS_LAST = {3: (0, 2, 1), 4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}


def _native_pool(X, columns, requantization: tuple) -> np.ndarray | None:
    """The native pooling's (N, C) or (N * C,) result: of the columns where given (no
    transposed copy), else of X's channel rows; None without the library."""
    if columns is not None:
        return native.qmean_columns(columns, *requantization)
    return native.qmean_rows(channel_rows(X), *requantization)


def _pooled(X, channels_last) -> tuple[int, ...]:
    """The pooled output's shape: (N, C, 1, ...), or (N, 1, ..., C) channels-last."""
    if channels_last:
        return X.shape[:1] + (1,) * (X.ndim - 2) + X.shape[-1:]
    return pooled_shape(X)
