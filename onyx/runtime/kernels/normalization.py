"""Normalizations: InstanceNormalization, LayerNormalization, GroupNormalization,
RMSNormalization, LRN, LpNormalization, MeanVarianceNormalization (BatchNormalization, every
version, is batch_norm.py's: a transformer's LayerNormalization need not read and run it).

Statistics are computed in float32 at least (float64 stays float64); results are cast back to
the input's type. Where the spec splits the computation into a "stage one" governed by
stash_type and a "stage two" (scale and bias), the kernels do the same.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import to_numpy
from .. import native
from ..registry import binds, op
from .low_floats import compute_dtype  # (not conv.py: it imports the conv modules)

# ----------------------------------------------------------------------------- per channel


def _per_channel(v: np.ndarray, x: np.ndarray, dtype) -> np.ndarray:
    """A (C,) parameter shaped to broadcast over x (N, C, ...); a (C, D1, ...) one (spatial=0) as is."""
    v = v.astype(dtype, copy=False)
    if v.size == x.shape[1] and v.ndim <= 1:
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))
    return v.reshape((1,) + x.shape[1:])


# ----------------------------------------------------------------------------- Instance / Group


_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))


def _mean(x: np.ndarray, axes: tuple[int, ...], count: int) -> np.ndarray:
    """x.mean(axes, keepdims=True), bit for bit, without its Python overhead (float32/64)."""
    if x.dtype not in _F32_F64:
        return x.mean(axis=axes, keepdims=True)
    total = np.add.reduce(x, axis=axes, keepdims=True)
    return np.true_divide(total, count, out=total)


def _standardize(x: np.ndarray, axes, epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(normalized, mean, inverse std dev) of x over axes, computed in x's dtype."""
    count = 1
    for a in axes:
        count *= x.shape[a]
    mean = _mean(x, axes, count)
    d = x - mean
    var = _mean(np.square(d), axes, count)
    var += x.dtype.type(epsilon)
    inv_std = np.sqrt(var, out=var)
    np.divide(1, inv_std, out=inv_std)
    d *= inv_std  # d is ours: normalize in place
    return d, mean, inv_std


#: Elements normalized per block of instances (or groups): each block is read from memory once
#: and stays in cache through its statistics, its centering and its scaling (1 MB blocks
#: measured faster than smaller ones: fewer numpy calls for the 4096-pixel U-Net instances).
_NORM_BLOCK = 1 << 18


def _normalize_rows(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) * scale + bias, statistics per row of x (R, K, S).

    scale and bias are (R, K): per row and channel of the row (one channel per instance for
    InstanceNormalization, the group's channels for GroupNormalization). float32 / float64.
    """
    y = native.norm_rows_f32(x, scale, bias, epsilon)  # (one thread's pass a row)
    if y is not None:
        return y
    rows, channels, spatial = x.shape
    length = channels * spatial
    y = np.empty_like(x)
    step = max(1, _NORM_BLOCK // length)
    squares = np.empty((min(step, rows), channels, spatial), x.dtype)
    eps = x.dtype.type(epsilon)
    # zero biases (a GroupNormalization exported as InstanceNormalization) would only turn -0
    # into +0: one pass less
    shift = bool(bias.any())
    for r in range(0, rows, step):
        xb, yb = x[r : r + step], y[r : r + step]
        n = len(xb)
        mean = np.add.reduce(xb.reshape(n, length), axis=1)
        mean /= length
        np.subtract(xb, mean[:, None, None], out=yb)
        sq = np.square(yb, out=squares[:n])
        var = np.add.reduce(sq.reshape(n, length), axis=1)
        var /= length
        var += eps
        inv_std = np.sqrt(var, out=var)
        np.divide(1, inv_std, out=inv_std)
        yb *= (inv_std[:, None] * scale[r : r + n])[:, :, None]
        if shift:
            yb += bias[r : r + n, :, None]
    return y


def _per_row(v: np.ndarray, batch: int, groups: int, dtype) -> np.ndarray:
    """A per-channel parameter (C,) as (batch * groups, C // groups): one row per normalized row."""
    return np.tile(v.astype(dtype, copy=False).reshape(groups, -1), (batch, 1))


def _bind_instance_norm(inputs, attrs, constant):
    """registry.binds for float32 input and constant scale and B: the per-row parameters and
    the native rows' set-up made once."""
    x, scale, B = inputs[:3]
    if x.dtype != np.float32 or x.ndim < 2 or not x.size:
        return None
    N, C = x.shape[:2]
    rows = (N * C, 1, x.size // (N * C))
    s, b = (_per_row(v, N, C, x.dtype) for v in (scale, B))
    normalize = native.norm_rows_bound(rows, s, b, attrs["epsilon"])
    if normalize is None:
        return None
    shape, contiguous = x.shape, np.ascontiguousarray

    def call(input, *_):
        return normalize(contiguous(input).reshape(rows)).reshape(shape)

    return call


@binds(_bind_instance_norm, constants=(1, 2))
@op("InstanceNormalization", since=1)
def instance_normalization(input, scale, B, *, consumed_inputs=None, epsilon=1e-5):
    ct = compute_dtype(input.dtype)
    x = input.astype(ct, copy=False)
    if x.size:
        N, C = x.shape[:2]
        rows = np.ascontiguousarray(x).reshape(N * C, 1, -1)
        s, b = (_per_row(v, N, C, ct) for v in (scale, B))
        y = _normalize_rows(rows, s, b, epsilon).reshape(x.shape)
        return y.astype(input.dtype, copy=False)
    normalized, _, _ = _standardize(x, tuple(range(2, x.ndim)), epsilon)
    y = normalized * _per_channel(scale, x, ct) + _per_channel(B, x, ct)
    return y.astype(input.dtype, copy=False)


def _stash_dtype(stash_type: int, x_dtype: np.dtype) -> np.dtype:
    # float64 inputs keep float64 statistics, as onnxruntime's double kernels do.
    if x_dtype == np.float64:
        return x_dtype
    return _F32_F64[0] if stash_type == 1 else to_numpy(stash_type)


def _check_groups(X: np.ndarray, num_groups) -> None:
    """ValueError unless num_groups splits X's channels (numpy's reshape said it in its own
    words, and could not reshape an empty batch by -1 at all)."""
    C = X.shape[1] if X.ndim > 1 else None
    if C is None or num_groups < 1 or C % num_groups:
        raise ValueError(
            f"GroupNormalization: num_groups {num_groups} does not divide the "
            f"{C} channels of X {list(X.shape)}"
        )


def _group_standardize(X, num_groups, epsilon, stash_dtype) -> np.ndarray:
    N, C = X.shape[:2]
    per_group = C // num_groups * math.prod(X.shape[2:])  # (not -1: N may be 0)
    x = X.astype(stash_dtype, copy=False).reshape(N, num_groups, per_group)
    normalized, _, _ = _standardize(x, (2,), epsilon)
    return normalized.reshape(X.shape)


def _group_norm_rows(X, scale, bias, num_groups, epsilon, dtype) -> np.ndarray:
    """Group normalization of X in dtype (float32 / float64) with per-channel scale and bias."""
    N = X.shape[0]
    x = np.ascontiguousarray(X, dtype=dtype).reshape(N * num_groups, X.shape[1] // num_groups, -1)
    s, b = (_per_row(v, N, num_groups, dtype) for v in (scale, bias))
    return _normalize_rows(x, s, b, epsilon).reshape(X.shape)


@op("GroupNormalization", since=21)
def group_normalization(X, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    _check_groups(X, num_groups)
    stash = _stash_dtype(stash_type, X.dtype)
    if X.dtype == stash and X.dtype in _F32_F64 and X.size:
        return _group_norm_rows(X, scale, bias, num_groups, epsilon, X.dtype)
    normalized = _group_standardize(X, num_groups, epsilon, stash)
    normalized = normalized.astype(X.dtype, copy=False)
    return normalized * _per_channel(scale, X, X.dtype) + _per_channel(bias, X, X.dtype)


@op("GroupNormalization", since=18)
def group_normalization_18(X, scale, bias, *, epsilon=1e-5, num_groups):
    # Version 18 takes scale and bias per group: repeat them over each group's channels.
    _check_groups(X, num_groups)
    ct = compute_dtype(X.dtype)
    per_group = X.shape[1] // num_groups
    s = np.repeat(scale.astype(ct), per_group)
    b = np.repeat(bias.astype(ct), per_group)
    if X.size:
        return _group_norm_rows(X, s, b, num_groups, epsilon, ct).astype(X.dtype, copy=False)
    normalized = _group_standardize(X, num_groups, epsilon, ct)
    y = normalized * _per_channel(s, X, ct) + _per_channel(b, X, ct)
    return y.astype(X.dtype, copy=False)


# ----------------------------------------------------------------------------- Layer / RMS


def _trailing_axes(x: np.ndarray, axis: int) -> tuple[int, ...]:
    return tuple(range(axis % x.ndim, x.ndim))


def layer_norm_last(X, Scale, B, epsilon):
    """LayerNormalization of float32 X over its last axis: the native kernel's rows (norms.c),
    else the row sums by BLAS (matrix-vector products, faster than numpy's reductions over
    short rows) and the rest in place."""
    done = native.layer_norm_f32(np.ascontiguousarray(X), Scale, B, epsilon)
    if done is not None:
        return done
    n = X.shape[-1]
    mean = np.matmul(X, np.full(n, 1 / n, np.float32))[..., None]
    d = X - mean  # fresh: normalized, scaled and shifted in place
    var = np.einsum("...i,...i->...", d, d)[..., None]  # (one dot per row: no squared copy)
    var *= np.float32(1 / n)
    var += np.float32(epsilon)
    inv_std = np.sqrt(var, out=var)
    np.divide(1, inv_std, out=inv_std)
    d *= inv_std
    d *= Scale
    if B is not None:
        d += B
    return d, mean, inv_std


def _bind_layer_norm(inputs, attrs, constant):
    """registry.binds for layer_norm_last's native rows (float32 over the last axis, constant
    parameters): their set-up made once."""
    X, Scale, B = (tuple(inputs) + (None,))[:3]
    if X.dtype != np.float32:
        return None
    if not X.ndim or attrs["axis"] not in (-1, X.ndim - 1) or attrs["stash_type"] != 1:
        return None
    if Scale.dtype != np.float32 or Scale.shape != X.shape[-1:]:
        return None
    if B is not None and (B.dtype != np.float32 or B.shape != X.shape[-1:]):
        return None
    rows = native.layer_norm_bound(X.shape, Scale, B, attrs["epsilon"])
    if rows is None:
        return None
    contiguous = np.ascontiguousarray
    return lambda X, *_: rows(contiguous(X))


@binds(_bind_layer_norm, constants=(1, 2))
@op("LayerNormalization", since=17)
def layer_normalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    if (
        X.dtype == np.float32
        and X.ndim
        and axis in (-1, X.ndim - 1)
        and stash_type == 1
        and Scale.dtype == np.float32
        and Scale.shape == X.shape[-1:]
        and (B is None or (B.dtype == np.float32 and B.shape == X.shape[-1:]))
    ):
        return layer_norm_last(X, Scale, B, epsilon)
    stash = _stash_dtype(stash_type, X.dtype)
    normalized, mean, inv_std = _standardize(
        X.astype(stash, copy=False), _trailing_axes(X, axis), epsilon
    )
    y = normalized.astype(X.dtype, copy=False)  # a fresh array (normalized, or its cast)
    y = _apply(np.multiply, y, Scale.astype(X.dtype, copy=False))
    if B is not None:
        y = _apply(np.add, y, B.astype(X.dtype, copy=False))
    return y, mean, inv_std


def _apply(ufunc, y: np.ndarray, param: np.ndarray) -> np.ndarray:
    """ufunc(y, param), in place in y (a fresh array) when param has y's trailing shape."""
    if param.shape == y.shape[y.ndim - param.ndim :]:
        return ufunc(y, param, out=y)
    return ufunc(y, param)


@op("RMSNormalization", since=23)
def rms_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    if axis in (-1, X.ndim - 1) and scale.ndim == 1 and stash_type == 1:
        fast = native.rms_norm_f32(X, None, None, scale, epsilon)
        if fast is not None:  # (attention.c: one pass per row, as SimplifiedLayerNormalization)
            return fast[0]
    x = X.astype(_stash_dtype(stash_type, X.dtype), copy=False)
    ms = (x * x).mean(axis=_trailing_axes(X, axis), keepdims=True)
    normalized = x / np.sqrt(ms + x.dtype.type(epsilon))
    return normalized.astype(X.dtype, copy=False) * scale.astype(X.dtype, copy=False)


# ----------------------------------------------------------------------------- LRN / Lp / MVN


@op("LRN", since=1)
def lrn(X, *, alpha=1e-4, beta=0.75, bias=1.0, size):
    ct = compute_dtype(X.dtype)
    x = X.astype(ct, copy=False)
    C = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2  # floor / ceil of (size-1)/2
    sq = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    square_sum = np.zeros_like(x)
    for j in range(size):  # one pass per channel offset of the window
        square_sum += sq[:, j : j + C]
    y = x / (ct.type(bias) + ct.type(alpha / size) * square_sum) ** ct.type(beta)
    return y.astype(X.dtype, copy=False)


@op("LpNormalization", since=1)
def lp_normalization(input, *, axis=-1, p=2):
    ct = compute_dtype(input.dtype)
    x = input.astype(ct, copy=False)
    if p == 1:
        norm = np.abs(x).sum(axis=axis, keepdims=True)
    else:
        norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
    # A zero norm gives zeros, not NaN (spec, version 22; onnxruntime does the same).
    y = np.divide(x, norm, out=np.zeros_like(x), where=norm != 0)
    return y.astype(input.dtype, copy=False)


@op("MeanVarianceNormalization", since=9)
def mean_variance_normalization(X, *, axes=(0, 2, 3)):
    ct = compute_dtype(X.dtype)
    x = X.astype(ct, copy=False)
    axes = tuple(axes)
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    # The spec's function: (X - E[X]) / (sqrt(Var[X]) + 1e-9); the variance is taken as
    # E[(X - E[X])^2], which equals its E[X^2] - E[X]^2 without the cancellation.
    std = np.sqrt((d * d).mean(axis=axes, keepdims=True))
    return (d / (std + ct.type(1e-9))).astype(X.dtype, copy=False)
