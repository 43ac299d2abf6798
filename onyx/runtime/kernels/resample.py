"""Resampling: Resize (10, 11, 13, 18, 19), Upsample (1, 7, 9), GridSample (16, 20), AffineGrid,
Col2Im, CenterCropPad.

Resize is separable: along each resized axis every output index reads a few taps of the input
(1 for nearest, 2 or 4 for linear / cubic, more with antialiasing) with weights, so an axis costs
one gather and a weighted sum per tap. Bilinear float32 resizing of a 2-D image (or of the two
spatial axes of a 4-D tensor) instead follows onnxruntime's arithmetic to the bit (see _bilinear).
GridSample gathers the 2**r (linear) or 4**r (cubic) neighbours of every sampling point at once.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from .. import native
from ..registry import binds, op
from .derived import frozen
from .low_floats import compute_dtype
from .spatial import pad_spatial

# ----------------------------------------------------------------------------- Resize: coordinates


def _original_coords(
    mode: str,
    out_len: int,
    in_len: int,
    scale: float,
    roi_start: float,
    roi_end: float,
    length: float | None = None,
) -> np.ndarray:
    """x_original for every output index along one axis, per coordinate_transformation_mode.

    Computed in float32 as onnxruntime does, so that exact halves and integers (which decide
    nearest rounding) come out exact: 2 / 0.4f is 5, not 4.99999992.
    ``length`` is the resized length: the output size when sizes are given, else (None)
    in_len * scale, which is fractional when scales are given, as in the spec's definitions
    (onnxruntime uses the integer output length there; the node suite follows the spec).
    """
    f = np.float32
    x = np.arange(out_len, dtype=f)
    scale, n_in = f(scale), f(in_len)
    width = n_in * scale  # the spec's output_width, fractional when computed from a scale
    length = width if length is None else f(length)
    half = f(0.5)
    if mode == "half_pixel":
        return (x + half) / scale - half
    if mode == "half_pixel_symmetric":
        offset = n_in / f(2) * (f(1) - f(out_len) / width)
        # onnxruntime adds the terms in double (its 0.5 literals are doubles), then rounds
        d = np.float64
        return (d(offset) + (x.astype(d) + 0.5) / d(scale) - 0.5).astype(f)
    if mode == "pytorch_half_pixel":
        return (x + half) / scale - half if length > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (n_in - f(1)) / (length - f(1)) if length > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":  # Resize-11's; onnxruntime still accepts it at 13+
        return (x + half) / scale
    if mode == "tf_crop_and_resize":
        start, end = f(roi_start), f(roi_end)
        if length > 1:
            return start * (n_in - f(1)) + x * (end - start) * (n_in - f(1)) / (length - f(1))
        return np.full_like(x, half * (start + end) * (n_in - f(1)))
    raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")


_NEAREST = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _nearest_legacy(x: np.ndarray, scale: float) -> np.ndarray:
    # Resize-10 and Upsample had no nearest_mode: onnxruntime truncates when upsampling and takes
    # the ceiling when downsampling.
    return np.ceil(x) if scale < 1 else np.floor(x)


# ----------------------------------------------------------------------------- Resize: filters


def _linear_filter(d: np.ndarray, a: float) -> np.ndarray:
    return np.maximum(0.0, 1.0 - np.abs(d))


def _cubic_filter(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient a."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


_FILTERS = {"linear": (_linear_filter, 1), "cubic": (_cubic_filter, 2)}


def _taps(x, in_len, scale, mode, cubic_coeff_a, exclude_outside, antialias):
    """(indices, weights), both (out_len, T): the input taps of each output index along one axis."""
    kernel, support = _FILTERS[mode]
    # Antialiasing stretches the filter by 1 / scale when downsampling, so more taps contribute.
    stretch = scale if antialias and scale < 1 else 1.0
    reach = math.ceil(support / stretch)
    base = np.floor(x).astype(np.int64)
    idx = base[:, None] + np.arange(1 - reach, reach + 1)
    w = kernel((idx - x[:, None]) * stretch, cubic_coeff_a)
    if exclude_outside:  # taps outside the input get no weight (else they repeat the edge)
        w = np.where((idx >= 0) & (idx < in_len), w, 0.0)
    total = w.sum(axis=1, keepdims=True)
    w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), w


def _resample_axis(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Gather idx (out, T) along axis and combine the taps with weights w (None: a single tap)."""
    moved = np.moveaxis(x, axis, -1)
    if w is None:
        y = moved[..., idx[:, 0]]
    else:
        y = moved[..., idx[:, 0]] * w[:, 0]
        for t in range(1, idx.shape[1]):
            y += moved[..., idx[:, t]] * w[:, t]
    return np.moveaxis(y, -1, axis)


# ----------------------------------------------------------------------------- Resize: the op


def _present(v):
    return v is not None and v.size > 0


def _round_half_up(v: float) -> int:
    return int(math.floor(v + 0.5))


def _targets(shape, axes, scales, sizes, roi, keep_aspect_ratio_policy, coordinate_mode):
    """Per resized axis: (output length, scale, roi start, roi end, resized length or None)."""
    n = len(axes)
    roi = roi.astype(np.float64).reshape(-1) if _present(roi) else None
    starts = roi[:n] if roi is not None and roi.size == 2 * n else [0.0] * n
    ends = roi[n:] if roi is not None and roi.size == 2 * n else [1.0] * n
    if coordinate_mode != "tf_crop_and_resize":
        starts, ends = [0.0] * n, [1.0] * n
    in_lens = [shape[a] for a in axes]
    if _present(sizes):
        sizes = [int(s) for s in sizes.reshape(-1)]
        if keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            common = pick(s / i for s, i in zip(sizes, in_lens))
            sizes = [_round_half_up(common * i) for i in in_lens]
            return list(zip(sizes, [common] * n, starts, ends, [None] * n))
        scales = [s / i for s, i in zip(sizes, in_lens)]
        return list(zip(sizes, scales, starts, ends, sizes))
    scales = [float(s) for s in scales.astype(np.float64).reshape(-1)]
    # Output length: floor(in * (roi_end - roi_start) * scale), per the spec, in float32 like
    # onnxruntime (10 * 0.7f is 7, not 6.99999988).
    f32 = np.float32
    outs = [
        int(np.floor(f32(i) * f32(e - s) * f32(sc)))
        for i, sc, s, e in zip(in_lens, scales, starts, ends)
    ]
    return list(zip(outs, scales, starts, ends, [None] * n))


def _resize(X, roi, scales, sizes, **attrs):
    return _resize_path(X.shape, X.dtype, roi, scales, sizes, **attrs)(X)


def _resize_path(
    shape,
    dtype,
    roi,
    scales,
    sizes,
    *,
    axes=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    antialias=0,
    keep_aspect_ratio_policy="stretch",
    legacy_nearest=False,
    _bound=False,
):
    """Resize of an X of ``shape`` and ``dtype`` as ``run(X)``: the output lengths, the path
    and its tables worked out from the shape and the constant operands alone (a bound step
    keeps it: registry.binds; ``_bound``: its native task made once too, _native_path)."""
    r = len(shape)
    axes = [a % r for a in axes] if axes else list(range(r))
    plan = _targets(
        shape, axes, scales, sizes, roi, keep_aspect_ratio_policy, coordinate_transformation_mode
    )
    empty = 0 in shape or any(p[0] == 0 for p in plan)  # (the general path's empty result)
    if not empty and mode == "nearest" and coordinate_transformation_mode != "tf_crop_and_resize":
        rounding = "legacy" if legacy_nearest else nearest_mode
        tables = {
            axis: _nearest_table(coordinate_transformation_mode, rounding, shape[axis], *p)
            for axis, p in zip(axes, plan)
        }
        fast = _bound_nearest(shape, dtype, tables) if _bound else None
        return fast or (lambda X: _nearest(X, tables))
    if not empty and mode == "linear" and not antialias and dtype in _BILINEAR_TYPES:
        targets = dict(zip(axes, plan))
        pair = _bilinear_axes(shape, targets)
        if pair is not None:
            ctm = coordinate_transformation_mode
            fast = _bound_bilinear(shape, dtype, pair, targets, ctm) if _bound else None
            return fast or (lambda X: _bilinear(X, pair, targets, ctm, extrapolation_value))
    general = (mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a)
    general += (exclude_outside, extrapolation_value, antialias, legacy_nearest)
    return lambda X: _resize_general(X, axes, plan, *general)


def _bind_resize(inputs, attrs, constant):
    """registry.binds for constant roi, scales and sizes: _resize_path once per shape."""
    X, roi, scales, sizes = (tuple(inputs) + (None,) * 3)[:4]
    run = _resize_path(X.shape, X.dtype, roi, scales, sizes, **attrs, _bound=True)
    return lambda X, *_: run(X)


def _bound_nearest(shape, dtype, tables: dict):
    """The native call of a bound nearest Resize that repeats each element of the last two
    axes (whole factors, 4-byte elements, the other axes kept): _nearest's path, its task
    made once (native.bound_repeat2d_4byte); else None."""
    r = len(shape)
    inner = [tables.get(r - 2, ("same",)), tables.get(r - 1, ("same",))]
    if r < 2 or inner[0][0] != "repeat" or inner[1][0] != "repeat":
        return None
    if any(tables[a][0] != "same" for a in tables if a < r - 2):
        return None
    if (np.dtype(dtype).itemsize, inner[1][1]) not in _WIDE:
        return None  # (the kernels _nearest takes for these)
    return native.bound_repeat2d_4byte(shape, dtype, inner[0][1], inner[1][1])


def _bound_bilinear(shape, dtype, pair, targets: dict, coordinate_mode: str):
    """The native call of a bound float32 bilinear Resize of the last two axes (no
    extrapolation): _bilinear's native path, its task made once (native.bound_bilinear_f32);
    else None."""
    r = len(shape)
    if np.dtype(dtype) != np.float32 or pair != (r - 2, r - 1) or not native.bilinear_ok():
        return None
    tables = []
    for axis in pair:
        target = targets.get(axis, (shape[axis], 1.0, 0.0, 1.0, None))
        tables.append(_bilinear_table(coordinate_mode, shape[axis], *target))
    if tables[0][4] is not None or tables[1][4] is not None:
        return None  # (tf_crop_and_resize: extrapolated cells)
    return native.bound_bilinear_f32(shape, tables[0], tables[1])


def _resize_general(
    X,
    axes,
    plan,
    mode,
    coordinate_mode,
    nearest_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    antialias,
    legacy_nearest,
):
    """Any mode, one axis at a time: a gather of the taps and their weighted sum per axis."""
    r = X.ndim
    nearest = mode == "nearest"
    y = X if nearest else X.astype(compute_dtype(X.dtype), copy=False)
    outside = None  # tf_crop_and_resize: outputs whose source lies outside the input on any axis
    # Shrinking axes first keeps the intermediate arrays small.
    for axis, (out_len, scale, start, end, length) in sorted(
        zip(axes, plan), key=lambda p: p[1][0] / max(X.shape[p[0]], 1)
    ):
        in_len = X.shape[axis]
        if out_len == in_len and scale == 1 and coordinate_mode != "tf_crop_and_resize":
            continue  # identity along this axis
        x = _original_coords(coordinate_mode, out_len, in_len, scale, start, end, length)
        x = x.astype(np.float64)
        if coordinate_mode == "tf_crop_and_resize":
            off = (x < 0) | (x > in_len - 1)
            shape = [1] * r
            shape[axis] = out_len
            off = off.reshape(shape)
            outside = off if outside is None else outside | off
        if nearest:
            rounded = _nearest_legacy(x, scale) if legacy_nearest else _NEAREST[nearest_mode](x)
            idx = np.clip(rounded.astype(np.int64), 0, in_len - 1)[:, None]
            y = _resample_axis(y, axis, idx, None)
        else:
            idx, w = _taps(x, in_len, scale, mode, cubic_coeff_a, exclude_outside, antialias)
            y = _resample_axis(y, axis, idx, w.astype(y.dtype))
    if outside is not None:
        y = np.where(outside, np.asarray(extrapolation_value).astype(y.dtype), y)
    if y.dtype != X.dtype:
        if X.dtype.kind in "iu":  # integer images: truncate (as onnxruntime casts) and saturate
            info = np.iinfo(X.dtype)
            y = np.clip(np.trunc(y), info.min, info.max)
        y = y.astype(X.dtype)
    return np.ascontiguousarray(y)


# ----------------------------------------------------------------------------- Resize: nearest
# Nearest resizing copies elements, so the output is built from index tables alone. The tables
# of the usual resizes have a shape that needs no gather: an integer upscale repeats every
# element k times (2x, F.interpolate(scale_factor=2)), an integer downscale is a strided slice.


@lru_cache(maxsize=256)
def _nearest_table(coordinate_mode, rounding, in_len, out_len, scale, start, end, length):
    """How one axis is resized: ("same",), ("repeat", k), ("slice", slice) or ("take", indices)."""
    x = _original_coords(coordinate_mode, out_len, in_len, scale, start, end, length)
    x = x.astype(np.float64)
    rounded = _nearest_legacy(x, scale) if rounding == "legacy" else _NEAREST[rounding](x)
    idx = np.clip(rounded.astype(np.int64), 0, in_len - 1)
    if out_len == in_len and np.array_equal(idx, np.arange(in_len)):
        return ("same",)
    k = out_len // in_len
    if k > 1 and out_len == k * in_len and np.array_equal(idx, np.arange(out_len) // k):
        return ("repeat", k)
    steps = np.diff(idx)
    if out_len == 1 or (steps[0] > 0 and (steps == steps[0]).all()):
        step = int(steps[0]) if out_len > 1 else 1
        return ("slice", slice(int(idx[0]), int(idx[0]) + step * (out_len - 1) + 1, step))
    return ("take", frozen(idx))


#: An element repeated k times along the last axis is one wider integer: its bits times
#: 1 + 2**b + 2**2b + ... (b the element's bits), for these (element size, k).
_WIDE = {
    (1, 2): np.uint16,
    (1, 4): np.uint32,
    (1, 8): np.uint64,
    (2, 2): np.uint32,
    (2, 4): np.uint64,
    (4, 2): np.uint64,
}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}

#: Input elements per block of the repeated innermost two axes, so that the copies stay in cache.
_NEAREST_BLOCK = 1 << 15


def _nearest(X: np.ndarray, tables: dict) -> np.ndarray:
    r = X.ndim
    inner = [tables.get(r - 2, ("same",)), tables.get(r - 1, ("same",))]
    if r >= 2 and inner[0][0] == inner[1][0] == "repeat" and X.dtype != object:
        if (X.dtype.itemsize, inner[1][1]) in _WIDE:
            y = _repeat_inner_two(np.ascontiguousarray(X), inner[0][1], inner[1][1])
            tables = {a: t for a, t in tables.items() if a < r - 2}
            X = y
    y = X
    # slices first (views: nothing is copied before the end), then gathers from the innermost
    # axis out, so that the element gathers of the last axis see the smallest array
    order = sorted(tables, key=lambda a: (tables[a][0] != "slice", -a))
    for axis in order:
        y = _nearest_axis(y, axis, tables[axis])
    return np.ascontiguousarray(y)


def _nearest_axis(y: np.ndarray, axis: int, table) -> np.ndarray:
    kind = table[0]
    if kind == "same":
        return y
    if kind == "slice":
        return y[(slice(None),) * axis + (table[1],)]
    if kind == "take":
        return np.take(y, table[1], axis=axis)
    k = table[1]  # repeat
    if axis < y.ndim - 1:  # whole rows (planes) repeated: a broadcast copy, contiguous inside
        out = np.empty(y.shape[:axis] + (y.shape[axis], k) + y.shape[axis + 1 :], y.dtype)
        out[...] = np.expand_dims(y, axis + 1)
        return out.reshape(y.shape[:axis] + (-1,) + y.shape[axis + 1 :])
    return np.take(y, np.arange(y.shape[-1] * k) // k, axis=-1)


def _repeat_inner_two(X: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """Every element of the last two axes repeated kh x kw times (kw packs into a wide integer)."""
    *lead, h, w = X.shape
    y = native.repeat2d_4byte(X.reshape(-1, h, w), kh, kw)  # (the pool's threads, no passes)
    if y is not None:
        return y.reshape(*lead, h * kh, w * kw)
    wide = _WIDE[X.dtype.itemsize, kw]
    bits = 8 * X.dtype.itemsize
    factor = wide(sum(1 << (bits * j) for j in range(kw)))
    src = X.view(_UINT[X.dtype.itemsize]).reshape(-1, h, w)
    out = np.empty((src.shape[0], h, kh, w * kw), X.dtype)
    dst = out.view(wide)  # (planes, h, kh, w): one wide integer per run of kw equal outputs
    step = max(1, _NEAREST_BLOCK // (h * w))
    for b in range(0, src.shape[0], step):
        block = dst[b : b + step]
        np.multiply(src[b : b + step], factor, out=block[:, :, 0], dtype=wide)
        block[:, :, 1:] = block[:, :, :1]  # the other kh - 1 output rows of each input row
    return out.reshape(*lead, h * kh, w * kw)


# ----------------------------------------------------------------------------- Resize: bilinear
# onnxruntime resizes a 2-D image, or the two spatial axes of an NCHW / NHWC tensor, with one
# formula (also when only one of the two axes changes), evaluated in float32: per axis the
# coordinate is clamped into the input, its taps are lo = trunc(x) and hi = min(lo + 1, n - 1)
# with weights |x - hi| for lo and |x - lo| for hi (0.5 each where lo == hi), and
#     y = (wy_lo*wx_lo) X[lo, lo] + (wy_lo*wx_hi) X[lo, hi] + (wy_hi*wx_lo) X[hi, lo]
#         + (wy_hi*wx_hi) X[hi, hi]
# summed left to right. Doing the same makes float32 results bit-identical (U-Net decoders).
# 8-bit images go through the same float32 formula, truncated back to their type.
#
# Per block of planes, the columns are gathered first (X[:, lo] and X[:, hi] of every output
# column, at the input's height: element gathers on the smaller array), then the rows of the
# four terms (copies of whole rows), each multiplied by its weights over the whole block.
# Keeping the four terms separate is what the bit-exact summation order needs; strided
# slices instead of the row gathers (2x: odd and even output rows) measured no faster, as
# numpy then loops over one short row at a time.

_BILINEAR_TYPES = tuple(np.dtype(t) for t in (np.float32, np.uint8, np.int8, np.int32))

#: Output elements computed per block of planes: large blocks (fewer numpy calls) measured
#: faster than cache-sized ones at the U-Net's 128x128 planes.
_BILINEAR_BLOCK = 1 << 18


def _bilinear_axes(shape, targets: dict) -> tuple[int, int] | None:
    """The two axes onnxruntime's bilinear kernel resizes, or None for other layouts."""
    changed = {
        a
        for a, (out_len, scale, start, end, _) in targets.items()
        if out_len != shape[a] or scale != 1 or (start, end) != (0, 1)
    }
    if not changed:
        return None  # nothing to resize
    if len(shape) == 2:
        return 0, 1
    if len(shape) == 4:
        for pair in ((2, 3), (1, 2)):  # NCHW, then NHWC
            if changed <= set(pair):
                return pair
    return None


@lru_cache(maxsize=256)
def _bilinear_table(coordinate_mode, in_len, out_len, scale, start, end, length):
    """(lo, hi, weight of lo, weight of hi, outside or None) along one axis."""
    x = _original_coords(coordinate_mode, out_len, in_len, scale, start, end, length)
    clamped = np.clip(x, np.float32(0), np.float32(in_len - 1))
    lo = clamped.astype(np.int32)  # x >= 0: truncation is floor (int32: the native kernel's)
    hi = np.minimum(lo + 1, np.int32(in_len - 1))
    w_lo = np.abs(clamped - hi.astype(np.float32))
    w_hi = np.abs(clamped - lo.astype(np.float32))
    edge = lo == hi
    w_lo[edge] = w_hi[edge] = 0.5
    outside = None
    if coordinate_mode == "tf_crop_and_resize":  # onnxruntime compares float32 coordinates
        outside = frozen((x < 0) | (x > in_len - 1))
    return frozen(lo), frozen(hi), frozen(w_lo), frozen(w_hi), outside


def _bilinear(X, pair, targets, coordinate_mode, extrapolation_value) -> np.ndarray:
    tables = []
    for axis in pair:
        in_len = X.shape[axis]
        out_len, scale, start, end, length = targets.get(axis, (in_len, 1.0, 0.0, 1.0, None))
        tables.append(_bilinear_table(coordinate_mode, in_len, out_len, scale, start, end, length))
    (y_lo, y_hi, wy_lo, wy_hi, y_out), (x_lo, x_hi, wx_lo, wx_hi, x_out) = tables
    height, width = X.shape[pair[0]], X.shape[pair[1]]
    out_h, out_w = len(y_lo), len(x_lo)
    moved = np.moveaxis(X, pair, (-2, -1))
    planes = np.ascontiguousarray(moved, dtype=np.float32).reshape(-1, height, width)
    n = planes.shape[0]
    exact = X.dtype == np.float32  # else each block is computed in float32, then truncated
    if exact and y_out is None and x_out is None and native.bilinear_ok():  # the same bits
        y = native.bilinear_f32(planes, tables[0], tables[1])
        y = y.reshape(moved.shape[:-2] + (out_h, out_w))
        return np.ascontiguousarray(np.moveaxis(y, (-2, -1), pair))
    y = np.empty((n, out_h, out_w), X.dtype)
    # the four terms in onnxruntime's order: (rows, column-gathered array, weights)
    weights = [np.multiply.outer(wy, wx) for wy in (wy_lo, wy_hi) for wx in (wx_lo, wx_hi)]
    step = max(1, _BILINEAR_BLOCK // (out_h * out_w))
    m = min(step, n)
    cols = np.empty((2, m, height, out_w), np.float32)
    rows = np.empty((m, out_h, out_w), np.float32)
    block_out = None if exact else np.empty((m, out_h, out_w), np.float32)
    for b in range(0, n, step):
        src = planes[b : b + step]
        k = len(src)
        lo_c, hi_c = cols[:, :k]
        np.take(src, x_lo, axis=2, out=lo_c, mode="clip")  # indices are in range: no checks
        np.take(src, x_hi, axis=2, out=hi_c, mode="clip")
        dst = y[b : b + step] if exact else block_out[:k]
        terms = [(c, r) for r in (y_lo, y_hi) for c in (lo_c, hi_c)]
        for t, ((c, r), w) in enumerate(zip(terms, weights)):
            if t == 0:
                np.take(c, r, axis=1, out=dst, mode="clip")
                dst *= w
            else:
                np.take(c, r, axis=1, out=rows[:k], mode="clip")
                rows[:k] *= w
                dst += rows[:k]
        if not exact:  # onnxruntime casts the float result: truncation (in range by convexity)
            info = np.iinfo(X.dtype)
            np.clip(dst, info.min, info.max, out=dst)
            y[b : b + step] = dst
    if y_out is not None:
        y[:, y_out[:, None] | x_out[None, :]] = np.asarray(extrapolation_value).astype(y.dtype)
    y = y.reshape(moved.shape[:-2] + (out_h, out_w))
    return np.ascontiguousarray(np.moveaxis(y, (-2, -1), pair))


@binds(_bind_resize, constants=(1, 2, 3))
@op("Resize", since=18)
def resize(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    return _resize(
        X,
        roi,
        scales,
        sizes,
        antialias=antialias,
        axes=axes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
        mode=mode,
        nearest_mode=nearest_mode,
    )


@binds(_bind_resize, constants=(1, 2, 3))
@op("Resize", since=11)
def resize_11(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    return _resize(
        X,
        roi,
        scales,
        sizes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        mode=mode,
        nearest_mode=nearest_mode,
    )


def _legacy_resize(X, scales, mode):
    # Resize-10 / Upsample: asymmetric coordinates, onnxruntime's legacy nearest rounding.
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return _resize(
        X,
        None,
        np.asarray(scales, dtype=np.float32),
        None,
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        legacy_nearest=True,
    )


@op("Resize", since=10)
def resize_10(X, scales, *, mode="nearest"):
    return _legacy_resize(X, scales, mode)


@op("Upsample", since=9)
def upsample_9(X, scales, *, mode="nearest"):
    return _legacy_resize(X, scales, mode)


@op("Upsample", since=7)
def upsample_7(X, *, mode="nearest", scales):
    return _legacy_resize(X, scales, mode)


@op("Upsample", since=1)
def upsample_1(X, *, height_scale, mode="nearest", width_scale):
    return _legacy_resize(X, [1.0, 1.0, height_scale, width_scale], mode)


# ----------------------------------------------------------------------------- GridSample


def _reflect(x: np.ndarray, low2: float, high2: float) -> np.ndarray:
    """Reflect coordinates into [low2 / 2, high2 / 2] (bounds given doubled, as they may be halves)."""
    if low2 == high2:
        return np.zeros_like(x)
    lo, span = low2 / 2, (high2 - low2) / 2
    d = np.abs(x - lo)
    flips = np.floor(d / span)
    extra = d - flips * span
    return np.where(flips % 2 == 0, lo + extra, lo + span - extra)


def _bound(x: np.ndarray, size: int, padding_mode: str, align_corners: int) -> np.ndarray:
    """Apply border / reflection padding to coordinates (zeros leaves them as they are)."""
    if padding_mode == "border":
        return np.clip(x, 0, size - 1)
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return np.clip(x, 0, size - 1)
    return x


def _grid_taps(x, size, mode, padding_mode, align_corners):
    """(indices, weights, valid) of each sampling coordinate along one axis, shapes (..., T)."""
    if mode == "nearest":
        x = _bound(x, size, padding_mode, align_corners)
        idx = np.rint(x)[..., None]  # halfway points go to the even index
        w = np.ones_like(idx)
    elif mode == "linear":
        x = _bound(x, size, padding_mode, align_corners)
        base = np.floor(x)
        idx = base[..., None] + np.array([0.0, 1.0])
        frac = (x - base)[..., None]
        w = np.concatenate([1 - frac, frac], axis=-1)
    else:  # cubic: the 4 taps are bounded one by one (the point itself is not), as in PyTorch
        base = np.floor(x)
        idx = base[..., None] + np.array([-1.0, 0.0, 1.0, 2.0])
        w = _cubic_filter(idx - x[..., None], -0.75)
        if padding_mode != "zeros":
            idx = _bound(idx, size, padding_mode, align_corners)
    valid = (idx >= 0) & (idx <= size - 1)
    return np.clip(idx, 0, size - 1).astype(np.int64), w, valid


def _grid_sample(X, grid, mode, padding_mode, align_corners):
    r = X.ndim - 2
    if grid.ndim != X.ndim or grid.shape[0] != X.shape[0] or grid.shape[-1] != r:
        raise ValueError(
            f"GridSample: grid is {list(grid.shape)}; for X {list(X.shape)} it must be "
            f"[{X.shape[0]}, <{r} output sizes>, {r}]"
        )
    ct = compute_dtype(X.dtype)
    x = X.astype(ct, copy=False)
    N, C = x.shape[:2]
    spatial = x.shape[2:]
    r = len(spatial)
    out_shape = grid.shape[1:-1]
    g = grid.astype(np.float64).reshape(N, -1, r)
    taps = []
    for d in range(r):  # grid's last axis lists coordinates innermost (x = width) first
        size = spatial[d]
        coord = g[:, :, r - 1 - d]
        if align_corners:
            coord = (coord + 1) / 2 * (size - 1)
        else:
            coord = ((coord + 1) * size - 1) / 2
        taps.append(_grid_taps(coord, size, mode, padding_mode, align_corners))
    flat_x = x.reshape(N, C, -1)
    y = np.zeros((N, C, g.shape[1]), dtype=ct)
    for combo in itertools.product(*(range(t[0].shape[-1]) for t in taps)):
        flat = np.zeros(g.shape[:2], dtype=np.int64)
        weight = np.ones(g.shape[:2])
        for d, t in enumerate(combo):
            idx, w, valid = taps[d]
            flat = flat * spatial[d] + idx[..., t]
            # out-of-range taps read zeros (only possible with padding_mode zeros)
            weight = weight * np.where(valid[..., t], w[..., t], 0.0)
        y += np.take_along_axis(flat_x, flat[:, None, :], axis=2) * weight[:, None, :].astype(ct)
    return y.reshape((N, C) + tuple(out_shape)).astype(X.dtype, copy=False)


@op("GridSample", since=20)
def grid_sample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return _grid_sample(X, grid, mode, padding_mode, align_corners)


_MODES_16 = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}


@op("GridSample", since=16)
def grid_sample_16(X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    return _grid_sample(X, grid, _MODES_16[mode], padding_mode, align_corners)


# ----------------------------------------------------------------------------- AffineGrid


def _base_coords(n: int, align_corners: int) -> np.ndarray:
    """n evenly spaced positions in [-1, 1]: pixel centers (align_corners) or cell midpoints.

    The spec leaves a single position open: onnxruntime puts it at 1 with align_corners, and at
    0 without.
    """
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.ones(n)
    return (np.arange(n) * 2.0 + 1.0) / n - 1.0


@op("AffineGrid", since=20)
def affine_grid(theta, size, *, align_corners=0):
    dims = [int(s) for s in size.reshape(-1)]
    spatial = dims[2:]
    r = len(spatial)
    if r not in (2, 3) or theta.shape != (dims[0], r, r + 1):
        raise ValueError(
            f"AffineGrid: size {dims} needs theta of shape [N, 2, 3] (size [N, C, H, W]) or "
            f"[N, 3, 4] (size [N, C, D, H, W]) with N = size[0]; theta is {list(theta.shape)}"
        )
    ct = compute_dtype(theta.dtype)
    axes = [_base_coords(n, align_corners) for n in spatial]  # (D,) H, W
    mesh = np.meshgrid(*axes, indexing="ij")
    # homogeneous positions, innermost coordinate (x) first: [x, y, (z,) 1]
    base = np.stack([*reversed(mesh), np.ones(spatial)], axis=-1).reshape(-1, r + 1)
    grid = np.matmul(base.astype(ct), theta.astype(ct).transpose(0, 2, 1))  # (N, P, r)
    return grid.reshape((dims[0], *spatial, r)).astype(theta.dtype, copy=False)


# ----------------------------------------------------------------------------- Col2Im


@op("Col2Im", since=18)
def col2im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = [int(v) for v in image_shape]
    block = [int(v) for v in block_shape]
    n = len(image)
    strides = list(strides) if strides else [1] * n
    dilations = list(dilations) if dilations else [1] * n
    pads = list(pads) if pads else [0] * (2 * n)
    N = input.shape[0]
    K = math.prod(block)
    blocks = [
        (image[i] + pads[i] + pads[n + i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(n)
    ]
    if (
        input.ndim != 3
        or len(block) != n
        or K < 1
        or input.shape[1] % K
        or input.shape[2] != math.prod(blocks)
        or min(blocks) < 0
    ):
        raise ValueError(
            f"Col2Im: input {list(input.shape)} must be [N, C * {K}, {math.prod(blocks)}]: "
            f"block_shape {block} gives {K} values a block, and image_shape {image} (with the "
            f"pads, dilations and strides) {blocks} = {math.prod(blocks)} blocks"
        )
    C = input.shape[1] // K
    cols = input.reshape((N, C, K, *blocks))
    padded = [image[i] + pads[i] + pads[n + i] for i in range(n)]
    y = np.zeros((N, C, *padded), dtype=input.dtype)
    for j, kk in enumerate(np.ndindex(*block)):  # scatter-add one kernel offset at a time
        sl = tuple(
            slice(k * d, k * d + (b - 1) * s + 1, s)
            for k, d, b, s in zip(kk, dilations, blocks, strides)
        )
        y[(slice(None), slice(None)) + sl] += cols[:, :, j]
    return np.ascontiguousarray(pad_spatial(y, [-p for p in pads[:n]], [-p for p in pads[n:]]))


# ----------------------------------------------------------------------------- CenterCropPad


@op("CenterCropPad", since=18)
def center_crop_pad(input_data, shape, *, axes=None):
    r = input_data.ndim
    axes = [a % r for a in axes] if axes else list(range(r))
    target = list(input_data.shape)
    for a, s in zip(axes, shape.reshape(-1)):
        target[a] = int(s)
    src, dst = [], []
    for have, want in zip(input_data.shape, target):
        if have >= want:  # crop: the window starts rounded down
            start = (have - want) // 2
            src.append(slice(start, start + want))
            dst.append(slice(None))
        else:  # pad: the odd pixel goes to the end
            start = (want - have) // 2
            src.append(slice(None))
            dst.append(slice(start, start + have))
    y = np.zeros(target, dtype=input_data.dtype)
    y[tuple(dst)] = input_data[tuple(src)]
    return y
