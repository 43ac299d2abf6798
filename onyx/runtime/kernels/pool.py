"""Pooling: AveragePool, MaxPool, GlobalAveragePool, GlobalMaxPool.

The rarer pools have modules of their own, so that a float CNN's session neither reads nor
runs their code: LpPool and GlobalLpPool in lp_pool.py, MaxUnpool in max_unpool.py, MaxRoiPool
and RoiAlign in roi_pool.py, com.microsoft QLinearAveragePool / QLinearGlobalAveragePool in
qlinear_pool.py.

Windowed pools read the padded input through strided slices, one vectorized pass per kernel
offset (a handful), never a loop over output pixels. Padding never enters a result: max pads
with the dtype's lowest value, sums pad with zeros and divide by a count that is itself pooled
from a mask of the cells that count.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from .. import native
from ..registry import binds, op
from . import small_cnn as _small_cnn
from .conv_geometry import (
    MAX_TAPS,
    check_window_attributes,
    check_windows,
    effective_kernel,
    same_pads,
    spatial_defaults,
)
from .low_floats import compute_dtype
from .spatial import channel_rows, pad_spatial, pooled_shape

# ----------------------------------------------------------------------------- geometry


def pool_geometry(in_shape, kernel, auto_pad, pads, strides, dilations, ceil_mode):
    """(pads [begins..., ends...], output spatial shape) of a pooling op, per the spec's formulas."""
    n = len(in_shape)
    eff = effective_kernel(kernel, dilations)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, in_shape)]
        return same_pads(auto_pad, total), out
    if auto_pad == "VALID":
        out = [(i - e) // s + 1 for i, e, s in zip(in_shape, eff, strides)]
        return [0] * (2 * n), out
    out = []
    for i in range(n):
        span = in_shape[i] + pads[i] + pads[n + i] - eff[i]
        o = -(-span // strides[i]) + 1 if ceil_mode else span // strides[i] + 1
        # In ceil mode a last window that would start inside the end padding is dropped.
        if ceil_mode and (o - 1) * strides[i] >= in_shape[i] + pads[i]:
            o -= 1
        out.append(o)
    return list(pads), out


def _offsets(kernel, dilations, strides, out_shape):
    """For each kernel offset: its flat number and the slices of the padded input it reads."""
    for j, kk in enumerate(np.ndindex(*kernel)):
        steps = zip(kk, dilations, out_shape, strides)
        yield (
            j,
            (slice(None), slice(None))
            + tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in steps),
        )


def _padded(x, pads, out_shape, kernel, strides, dilations, value):
    """x padded with value so that exactly the cells the windows read exist."""
    n = len(kernel)
    eff = effective_kernel(kernel, dilations)
    end = [
        (o - 1) * s + e - pads[i] - x.shape[2 + i]
        for i, (o, s, e) in enumerate(zip(out_shape, strides, eff))
    ]
    return pad_spatial(x, pads[:n], end, value)


def _taps(xp, axis, k, stride, dilation, out):
    """The k views of xp along axis that one kernel offset each reads (strided by stride)."""
    for j in range(k):
        sl = [slice(None)] * xp.ndim
        sl[axis] = slice(j * dilation, j * dilation + (out - 1) * stride + 1, stride)
        yield xp[tuple(sl)]


def _reduce_taps(views, ufunc) -> np.ndarray:
    """ufunc-fold of the views, left to right: ((v0 . v1) . v2) ..., into one fresh array."""
    views = iter(views)
    first = next(views)
    second = next(views, None)
    if second is None:
        return np.array(first)
    acc = ufunc(first, second)
    for v in views:
        ufunc(acc, v, out=acc)
    return acc


def _window_sum(xp, out_shape, kernel, strides, dilations, by_columns=False) -> np.ndarray:
    """The sum of each window, adding the kernel offsets one vectorized pass at a time.

    Float sums depend on the order, which the spec leaves open; onnxruntime is the tie-breaker.
    Row-major over the kernel offsets by default (onnxruntime's AveragePool-19 and later). With
    by_columns, each kernel column (offset along the last axis) is summed over its leading
    offsets first (row-major), then the column sums are added: onnxruntime's vectorized MLAS
    pooling kernel (AveragePool 7-18 with a last-axis stride of 1 or 2) adds
    (x00 + x10) + (x01 + x11) for a 2x2 window. Measured against onnxruntime 1.31.
    """
    if not by_columns or len(kernel) < 2:
        offsets = _offsets(kernel, dilations, strides, out_shape)
        return _reduce_taps((xp[sl] for _, sl in offsets), np.add)
    # Column sums for every input column at once (the leading offsets, row-major), then the
    # kernel's columns added left to right: the same additions in the same order, done in
    # two separable stages over whole planes.
    last = len(kernel) - 1
    lead_offsets = _offsets(kernel[:last], dilations[:last], strides[:last], out_shape[:last])
    columns = _reduce_taps((xp[sl + (slice(None),)] for _, sl in lead_offsets), np.add)
    axis = xp.ndim - 1
    return _reduce_taps(
        _taps(columns, axis, kernel[last], strides[last], dilations[last], out_shape[last]),
        np.add,
    )


def _window_max(x, pads, out_shape, kernel, strides, dilations) -> np.ndarray:
    """The max of each window, one spatial axis at a time (max is separable and exact), the
    first axis on whole rows so that most passes read contiguous memory. No padded copy: a
    kernel offset only updates the outputs whose cell it reads lies inside x (padding is the
    lowest value, which never wins).
    """
    y = x
    for i, (k, s, d, o) in enumerate(zip(kernel, strides, dilations, out_shape)):
        axis, size, begin = 2 + i, y.shape[2 + i], pads[i]
        spans = []  # (first output, end output, first input) of each kernel offset
        for j in _offsets_inside(k, s, d, o, size, begin):
            shift = j * d - begin  # output t reads input t * s + shift
            lo = max(0, -(shift // s))
            hi = min(o, (size - 1 - shift) // s + 1) if size - 1 - shift >= 0 else 0
            if hi > lo:
                spans.append((lo, hi, lo * s + shift))
        full = [sp for sp in spans if sp[0] == 0 and sp[1] == o]
        if full:  # an offset every window reads inside x starts the result
            spans.remove(full[0])
            res = np.array(_axis_slice(y, axis, full[0], s))
        else:
            res = np.full(y.shape[:axis] + (o,) + y.shape[axis + 1 :], _lowest(y.dtype), y.dtype)
        for lo, hi, start in spans:
            sl = (slice(None),) * axis + (slice(lo, hi),)
            np.maximum(res[sl], _axis_slice(y, axis, (lo, hi, start), s), out=res[sl])
        y = res
    return y


def _offsets_inside(k: int, s: int, d: int, o: int, size: int, begin: int):
    """The kernel offsets j < k (dilation d) that some output t < o (stride s) reads inside an
    input of ``size`` after ``begin`` padding: t * s + j * d - begin in [0, size). Bounded by
    the output and input sizes, not by k (an attribute: 2**63 - 1 in a fuzzed model)."""
    lo = max(0, -(-(begin - (o - 1) * s) // d))
    hi = min(k - 1, (begin + size - 1) // d)
    if hi - lo <= 4 * (o + size):  # (the usual windows: every offset in the range)
        return range(lo, hi + 1)
    t = np.arange(o, dtype=object)  # (Python ints: no overflow)
    firsts = np.maximum(0, -((t * s - begin) // d))
    lasts = np.minimum(k - 1, (begin + size - 1 - t * s) // d)
    spans = sorted((a, b) for a, b in zip(firsts, lasts) if a <= b)
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [j for a, b in merged for j in range(a, b + 1)]


def _axis_slice(y, axis, span, stride):
    lo, hi, start = span
    sl = (slice(None),) * axis + (slice(start, start + (hi - lo - 1) * stride + 1, stride),)
    return y[sl]


class _Pool:
    """The geometry of one pooling node over x, resolved from its attributes."""

    def __init__(
        self, x, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, op: str = "pooling"
    ):
        n = x.ndim - 2
        self.kernel = list(kernel_shape)
        self.strides, self.dilations, pads = spatial_defaults(n, strides, dilations, pads)
        check_window_attributes(op, n, self.kernel, self.strides, self.dilations, pads)
        self.pads, self.out = pool_geometry(
            x.shape[2:], self.kernel, auto_pad, pads, self.strides, self.dilations, ceil_mode
        )
        check_windows(
            op, x.shape[2:], self.kernel, self.strides, self.dilations, self.pads, self.out
        )
        taps = math.prod(x.shape[:2]) * math.prod(self.out) * math.prod(self.kernel)
        if taps > MAX_TAPS:
            raise ValueError(
                f"{op}: {taps} window taps (kernel_shape {self.kernel} over an "
                f"output of {self.out}): more than onyx takes (2**40)"
            )

    def pad(self, x, value):
        return _padded(x, self.pads, self.out, self.kernel, self.strides, self.dilations, value)

    def sum(self, xp, by_columns=False):
        return _window_sum(xp, self.out, self.kernel, self.strides, self.dilations, by_columns)

    def count(self, x, count_include_pad: bool) -> np.ndarray:
        """How many cells each window averages over: real ones, plus explicit pads if asked.

        Cells beyond the explicit pads (reached only in ceil mode) never count, as in onnxruntime.
        """
        n = len(self.kernel)
        eff = effective_kernel(self.kernel, self.dilations)
        need = [(o - 1) * s + e for o, s, e in zip(self.out, self.strides, eff)]
        begin, end = self.pads[:n], self.pads[n:]
        if count_include_pad:
            inside = all(nd <= i + b + e for nd, i, b, e in zip(need, x.shape[2:], begin, end))
        else:
            inside = not any(begin) and all(nd <= i for nd, i in zip(need, x.shape[2:]))
        if inside:  # every window lies in the cells that count
            return np.array(math.prod(self.kernel), dtype=np.float64)
        ones = np.ones((1, 1) + x.shape[2:], dtype=np.float64)
        if not count_include_pad:
            return self.sum(self.pad(ones, 0.0))
        mask = pad_spatial(ones, begin, end, 1.0)
        mask = pad_spatial(mask, [0] * n, [nd - m for nd, m in zip(need, mask.shape[2:])], 0.0)
        return self.sum(mask)


def _pool_of(shape, kernel, auto_pad, pads, strides, dilations, ceil_mode, op: str) -> _Pool:
    """_Pool's geometry for an input shape and attributes, worked out and checked once per
    node and shape (a small pool's call took as long doing that as pooling)."""
    return _pool_geometry(
        shape,
        tuple(kernel),
        auto_pad,
        tuple(pads or ()),
        tuple(strides or ()),
        tuple(dilations or ()),
        ceil_mode,
        op,
    )


@functools.lru_cache(maxsize=1024)
def _pool_geometry(shape, kernel, auto_pad, pads, strides, dilations, ceil_mode, op) -> _Pool:
    shell = np.broadcast_to(np.empty((), np.uint8), shape)  # (_Pool reads the shape only)
    return _Pool(
        shell,
        list(kernel),
        auto_pad,
        list(pads) or None,
        list(strides) or None,
        list(dilations) or None,
        ceil_mode,
        op,
    )


def _native_pool(x, pool: _Pool, **kind) -> np.ndarray | None:
    """A 2-D float32 pool on window.c (each window read once; the numpy path's bits), or
    None."""
    if x.dtype != np.float32 or x.ndim != 4 or not native.available():
        return None  # (no copy made for a library that is not there)
    x = np.ascontiguousarray(x)
    return native.pool2d_f32(
        x, pool.kernel, pool.strides, pool.dilations, pool.pads, pool.out, **kind
    )


def _native_max_8bit(x, pool: _Pool) -> np.ndarray | None:
    """A 2-D MaxPool of a quantized model's 8-bit x on window.c (dilations 1), or None."""
    if x.dtype.itemsize != 1 or x.dtype.kind not in "iu" or x.ndim != 4:
        return None
    if any(d != 1 for d in pool.dilations) or not native.available():
        return None
    x = np.ascontiguousarray(x)
    return native.max_pool2d_8bit(x, pool.kernel, pool.strides, pool.pads, pool.out)


# ----------------------------------------------------------------------------- AveragePool / LpPool


def _average_pool(
    X,
    kernel_shape,
    auto_pad,
    pads,
    strides,
    dilations,
    ceil_mode,
    count_include_pad,
    by_columns=False,
):
    ct = compute_dtype(X.dtype)
    pool = _pool_of(
        X.shape, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, "AveragePool"
    )
    y = _native_pool(
        X, pool, average=True, include_pad=bool(count_include_pad), by_columns=by_columns
    )
    if y is not None:
        return y
    total = pool.sum(pool.pad(X.astype(ct, copy=False), 0), by_columns)
    total += 0  # -0.0 sums to +0.0 as in a sum started at zero (onnxruntime's)
    total /= pool.count(X, bool(count_include_pad)).astype(ct)
    return total.astype(X.dtype, copy=False)


def _bound_pool(X, attrs: dict, op_name: str, kind: tuple):
    """A bound pooling step's call for X's shape and dtype (registry.binds): the geometry
    worked out and checked once, the native task made once (native.bound_pool2d), so that a
    run is one native call; None (the kernel as written) where the native 2-D pool does not
    run it."""
    if X.ndim != 4 or not native.available():
        return None
    if X.dtype != np.float32 and (X.dtype.itemsize != 1 or X.dtype.kind not in "iu"):
        return None
    return native.bound_pool2d(X.shape, X.dtype, *native_pool_spec(X.shape, attrs, op_name), kind)


#: a pool's geometry attributes, in _pool_of's order (ceil_mode apart)
GEOMETRY = ("kernel_shape", "auto_pad", "pads", "strides", "dilations")


def native_pool_spec(shape: tuple, attrs: dict, op: str) -> tuple:
    """(kernel, strides, dilations, pads, out), each a tuple, of a pool over ``shape`` with
    ``attrs`` (its attributes, defaults filled in) as the native pools take them: checked once
    (_pool_of), and hashable (a set-up's key)."""
    pool = _pool_of(shape, *(attrs[k] for k in GEOMETRY), attrs["ceil_mode"], op)
    return tuple(tuple(v) for v in (pool.kernel, pool.strides, pool.dilations, pool.pads, pool.out))


def _bind_average_pool(inputs, attrs, constant, by_columns: bool = False):
    """registry.binds: AveragePool's native 2-D float32 pool set up once per shape."""
    X = inputs[0]
    if X.dtype != np.float32:
        return None
    kind = (True, bool(attrs["count_include_pad"]), by_columns)
    return _bound_pool(X, attrs, "AveragePool", kind)


def _bind_average_pool_1(inputs, attrs, constant):
    strides = attrs["strides"]
    by_columns = (strides[-1] if strides else 1) <= 2
    return _bind_average_pool(inputs, attrs, constant, by_columns)


@binds(_bind_average_pool)
@op("AveragePool", since=19)
def average_pool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    count_include_pad=0,
    dilations=None,
    kernel_shape,
    pads=None,
    strides=None,
):
    return _average_pool(
        X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, count_include_pad
    )


@binds(_bind_average_pool_1)
@op("AveragePool", since=1)
def average_pool_1(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    count_include_pad=0,
    dilations=None,
    kernel_shape,
    pads=None,
    strides=None,
):
    # Same semantics; only the float summation order differs (onnxruntime's MLAS kernel, whose
    # vectorized form serves last-axis strides 1 and 2; wider strides add row-major).
    last_stride = strides[-1] if strides else 1
    return _average_pool(
        X,
        kernel_shape,
        auto_pad,
        pads,
        strides,
        dilations,
        ceil_mode,
        count_include_pad,
        by_columns=last_stride <= 2,
    )


# ----------------------------------------------------------------------------- MaxPool


def _lowest(dtype: np.dtype):
    if dtype.kind in "iub":
        return np.iinfo(dtype).min
    return -np.inf


def _flat_indices(out_coords, kernel_idx, pool: _Pool, x_shape, storage_order: int) -> np.ndarray:
    """Flat input indices (ignoring padding) of the chosen kernel offsets, as int64."""
    n = len(pool.kernel)
    spatial = x_shape[2:]
    kk = np.unravel_index(kernel_idx, pool.kernel)
    coords = [
        out_coords[i] * pool.strides[i] + kk[i] * pool.dilations[i] - pool.pads[i] for i in range(n)
    ]
    if storage_order == 1:  # column-major over the spatial axes
        flat, step = np.zeros_like(coords[0]), 1
        for i in range(n):
            flat = flat + coords[i] * step
            step *= spatial[i]
    else:
        flat = np.zeros_like(coords[0])
        for i in range(n):
            flat = flat * spatial[i] + coords[i]
    nc = np.arange(x_shape[0] * x_shape[1], dtype=np.int64).reshape(x_shape[:2] + (1,) * n)
    return nc * math.prod(spatial) + flat


def _tiled_max(X, kernel_shape, auto_pad, pads, strides, dilations) -> np.ndarray | None:
    """A 2-D MaxPool of 8-bit X (a quantized model's) whose windows tile the image exactly
    (kernel = strides, no pads or dilations, sizes divisible) as one reduction over a
    reshaped view, or None: _Pool's general set-up cost more than such a small pool."""
    if X.ndim != 4 or X.dtype.itemsize != 1 or auto_pad not in ("NOTSET", "VALID"):
        return None
    kh, kw = kernel_shape if len(kernel_shape) == 2 else (0, 0)
    N, C, H, W = X.shape
    if (
        not kh
        or not kw
        or list(strides or (1, 1)) != [kh, kw]
        or any(pads or ())
        or any(d != 1 for d in dilations or ())
        or H % kh
        or W % kw
    ):
        return None
    v = X.reshape(N, C, H // kh, kh, W // kw, kw)
    y = v[:, :, :, 0, :, 0].copy()
    for i, j in itertools.product(range(kh), range(kw)):  # (ndarray.max over the two window
        if i or j:  # axes of this view took 10x longer than the kh * kw - 1 maxima)
            np.maximum(y, v[:, :, :, i, :, j], out=y)
    return y


def _max_pool_1d(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode) -> np.ndarray:
    """A 1-D MaxPool (a signal's): _window_max's passes, their slices kept per input shape and
    attributes (working them out, and _Pool's checks, were most of a small call)."""
    o, first, rest = _max_plan_1d(
        X.shape,
        tuple(kernel_shape),
        auto_pad,
        tuple(pads or ()),
        tuple(strides or ()),
        tuple(dilations or ()),
        ceil_mode,
    )
    if first is None:
        y = np.full(X.shape[:2] + (o,), _lowest(X.dtype), X.dtype)
    elif rest and rest[0][0] == slice(0, o):  # two passes every window takes: one call
        y = np.maximum(X[..., first], X[..., rest[0][1]])
        rest = rest[1:]
    else:
        y = np.array(X[..., first])
    for out, read in rest:
        np.maximum(y[..., out], X[..., read], out=y[..., out])
    return y


@functools.lru_cache(maxsize=256)
def _max_plan_1d(shape, kernel, auto_pad, pads, strides, dilations, ceil_mode) -> tuple:
    """(output length, the input slice of a kernel offset every output reads inside x or None,
    [(output slice, input slice)] of the other offsets, a full one first), as _window_max
    works them out."""
    shell = np.broadcast_to(np.empty((), np.uint8), shape)  # (_Pool reads the shape only)
    pool = _Pool(
        shell,
        kernel,
        auto_pad,
        list(pads) or None,
        list(strides) or None,
        list(dilations) or None,
        ceil_mode,
        "MaxPool",
    )
    (k,), (s,), (d,), (o,) = pool.kernel, pool.strides, pool.dilations, pool.out
    size, begin = shape[2], pool.pads[0]
    spans = []
    for j in _offsets_inside(k, s, d, o, size, begin):
        shift = j * d - begin  # output t reads input t * s + shift
        lo = max(0, -(shift // s))
        hi = min(o, (size - 1 - shift) // s + 1) if size - 1 - shift >= 0 else 0
        if hi > lo:
            spans.append(
                (slice(lo, hi), slice(lo * s + shift, lo * s + shift + (hi - lo - 1) * s + 1, s))
            )
    full = [sp for sp in spans if sp[0] == slice(0, o)]
    if not full:
        return o, None, spans
    spans.remove(full[0])
    spans.sort(key=lambda sp: sp[0] != slice(0, o))  # (stable: the other full ones first)
    return o, full[0][1], spans


def max_pool_values(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode):
    """MaxPool's Y without its Indices (the MaxPool kernel's path for a node that does not
    want them; kernels/audio.py's fused conv + MaxPool pools its conv's output with it)."""
    if X.dtype.kind in "iu":
        y = _tiled_max(X, kernel_shape, auto_pad, pads, strides, dilations)
        if y is not None:
            return y
    if X.ndim == 3:
        return _max_pool_1d(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    # (2x2 / 2: kernels/small_cnn.py)
    y = _small_cnn.max_pool_2x2(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    if y is not None:
        return y
    pool = _pool_of(X.shape, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, "MaxPool")
    y = _native_pool(X, pool, average=False) if X.dtype == np.float32 else _native_max_8bit(X, pool)
    if y is not None:
        return y
    return _window_max(X, pool.pads, pool.out, pool.kernel, pool.strides, pool.dilations)


def _max_pool(ctx, X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, storage_order):
    if not (ctx.n_outputs > 1 and ctx.outputs_wanted[1]):
        return max_pool_values(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    pool = _pool_of(X.shape, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, "MaxPool")
    xp = pool.pad(X, _lowest(X.dtype))
    best = best_k = None
    for j, sl in _offsets(pool.kernel, pool.dilations, pool.strides, pool.out):
        v = xp[sl]
        if best is None:
            best = v.copy()
            best_k = np.zeros(v.shape, dtype=np.int64)
        else:
            better = v > best  # strictly greater: the first maximum in scan order wins
            np.copyto(best, v, where=better)
            best_k[better] = j
    out_coords = np.indices(pool.out, dtype=np.int64)
    out_coords = [c.reshape((1, 1) + c.shape) for c in out_coords]
    return best, _flat_indices(out_coords, best_k, pool, X.shape, storage_order)


def _bind_max_pool(ctx, inputs, attrs, constant):
    """registry.binds: a MaxPool whose Indices no one wants, on max_pool_values' native paths
    (float32, 8-bit) set up once per shape; None (the kernel as written) elsewhere."""
    if ctx.n_outputs > 1 and ctx.outputs_wanted[1]:
        return None
    return bound_max_values(inputs[0], attrs)


def bound_max_values(X: np.ndarray, attrs: dict):
    """``call(X)`` = max_pool_values(X, **attrs) for inputs of X's shape and dtype, its native
    set-up made once (attrs: MaxPool's, defaults filled in, storage_order aside); None where
    max_pool_values takes a numpy path (kernels/audio.py's 2-D conv + MaxPool binds it too)."""
    geometry = [attrs[k] for k in GEOMETRY]
    if X.dtype.kind in "iu" and _tiled_max(X, *geometry) is not None:
        return None  # (max_pool_values' first choice: its reshaped view)
    if X.dtype == np.float32 and X.ndim == 4:
        if _small_cnn.max_pool_2x2(X, *geometry, attrs["ceil_mode"]) is not None:
            return _bound_max_2x2(X.shape, geometry, attrs["ceil_mode"])
    return _bound_pool(X, attrs, "MaxPool", (False, False, False))


def _bound_max_2x2(shape: tuple, geometry: list, ceil_mode: int):
    """max_pool_values' 2x2 / 2 path (small_cnn's) with its set-up looked up once: under
    another thread setting, max_pool_values answers."""
    setup, contiguous = native.MaxPool2x2(shape), np.ascontiguousarray
    attrs = dict(zip(GEOMETRY, geometry), ceil_mode=ceil_mode)
    return native.under_setting(lambda X: setup(contiguous(X)), max_pool_values, attrs)


@binds(_bind_max_pool)
@op("MaxPool", since=1)
def max_pool(
    ctx,
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape,
    pads=None,
    storage_order=0,
    strides=None,
):
    return _max_pool(
        ctx, X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, storage_order
    )


# ----------------------------------------------------------------------------- Global pools


def _spatial_axes(x) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@op("GlobalAveragePool", since=1)
def global_average_pool(X):
    if X.dtype == np.float32 and X.ndim >= 3:
        return _mean_rows_f32(channel_rows(X)).reshape(pooled_shape(X))
    ct = compute_dtype(X.dtype)
    return X.astype(ct, copy=False).mean(axis=_spatial_axes(X), keepdims=True).astype(X.dtype)


def _mean_rows_f32(rows: np.ndarray) -> np.ndarray:
    """The mean of each float32 row in onnxruntime's order (the tie-breaker: the spec leaves it
    open): four running sums over the groups of four values, added (s0 + s2) + (s1 + s3), the
    last 0-3 values one by one, divided by the count. The native kernel's order, to the bit."""
    y = native.mean_rows_f32(rows)
    if y is not None:
        return y
    count, tail = rows.shape[1], rows.shape[1] % 4
    groups = rows[:, : count - tail].reshape(len(rows), count // 4, 4)
    s = np.add.reduce(groups, axis=1)  # (a reduction along a strided axis: in sequence)
    total = (s[:, 0] + s[:, 2]) + (s[:, 1] + s[:, 3])
    for j in range(count - tail, count):
        total += rows[:, j]
    return total / np.float32(count)


@op("GlobalMaxPool", since=1)
def global_max_pool(X):
    return X.max(axis=_spatial_axes(X), keepdims=True)
