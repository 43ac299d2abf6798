"""Reductions (Reduce*), ArgMax / ArgMin, CumSum / CumProd.

Reduce* take `axes` as an attribute up to opset 17 (ReduceSum: 12) and as an optional input after,
together with `noop_with_empty_axes`. Every reduction is a (pre, reduce, post) triple so the no-op
case can still apply the element-wise parts ("ReduceSumSquare acts as a vanilla Square").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import native
from ..registry import binds, op
from . import reduce_fast
from .elementwise import is_float, upcast


def _identity(x):
    return x


def _log_sum_exp(x: np.ndarray, axes, keepdims: bool) -> np.ndarray:
    if x.dtype.kind in "iu":  # (x - max) would wrap around for unsigned integers
        x = x.astype(np.float64)
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keepdims))
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # all -inf (or inf) slices: no shift, let exp decide
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axes)


def _extreme(fn: Callable, empty: Callable[[np.dtype], object]) -> Callable:
    """np.max / np.min with the spec's value for an empty set: -inf / +inf, or the type's limits."""

    def reduce_(x, axes, keepdims):
        if x.size == 0:
            return fn(x, axis=axes, keepdims=keepdims, initial=empty(x.dtype))
        return fn(x, axis=axes, keepdims=keepdims)

    return reduce_


def _lowest(dt: np.dtype):
    if dt == np.bool_:
        return False
    return -np.inf if is_float(dt) else np.iinfo(dt).min


def _highest(dt: np.dtype):
    if dt == np.bool_:
        return True
    return np.inf if is_float(dt) else np.iinfo(dt).max


class Reduction:
    """A reduction as reduce(pre(x), axes, keepdims), then post. (A plain class: a dataclass
    compiles its methods when the module is imported, ~0.7 ms of a cold start.)"""

    __slots__ = ("reduce", "pre", "post")

    def __init__(self, reduce: Callable, pre: Callable = _identity, post: Callable = _identity):
        self.reduce = reduce  # (x, axes, keepdims) -> array
        self.pre = pre
        self.post = post


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))


def _mean(x, axes, keepdims):
    if x.size == 0:  # the spec leaves it undefined; onnxruntime gives 0 (not 0/0)
        return np.sum(x, axis=axes, keepdims=keepdims)
    trailing = axes[0] > 0 and axes == tuple(range(axes[0], x.ndim))
    if trailing and x.dtype == np.float32 and x.flags.c_contiguous:
        # each (leading index) row's mean on the native kernel, as GlobalAveragePool (an SE
        # block's mean over H, W: short rows, where numpy's reduction costs most); numpy's
        # pairwise order and onnxruntime's differ from it and from each other in the last bits
        # (the spec leaves the order open)
        rows = x.reshape(math.prod(x.shape[: axes[0]]), -1)
        y = native.mean_rows_f32(rows) if rows.shape[1] else None
        if y is not None:
            shape = x.shape[: axes[0]] + (1,) * len(axes) if keepdims else x.shape[: axes[0]]
            return y.reshape(shape)
    if x.dtype in _F32_F64:
        # what np.mean does (sum in x's dtype, then divide by the count), minus its overhead
        total = np.add.reduce(x, axis=axes, keepdims=keepdims)
        count = 1
        for a in axes:
            count *= x.shape[a]
        return np.true_divide(total, count, out=total) if total.ndim else total / count
    return np.mean(x, axis=axes, keepdims=keepdims)


_REDUCTIONS: dict[str, Reduction] = {
    "ReduceSum": Reduction(_sum),
    "ReduceSumSquare": Reduction(_sum, pre=lambda x: x * x),
    "ReduceL1": Reduction(_sum, pre=np.abs),
    "ReduceL2": Reduction(_sum, pre=lambda x: x * x, post=np.sqrt),
    "ReduceLogSum": Reduction(_sum, post=np.log),
    "ReduceLogSumExp": Reduction(_log_sum_exp),
    "ReduceMean": Reduction(_mean),
    "ReduceProd": Reduction(
        lambda x, axes, keepdims: np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    ),
    "ReduceMax": Reduction(_extreme(np.max, _lowest)),
    "ReduceMin": Reduction(_extreme(np.min, _highest)),
}


def _normalize_axes(axes, ndim: int) -> tuple[int, ...] | None:
    if axes is None:
        return None
    axes = axes.reshape(-1).tolist() if type(axes) is np.ndarray else [int(a) for a in axes]
    if not axes:
        return None
    return tuple(sorted({a + ndim if a < 0 else a for a in axes}))


def _reduce(r: Reduction, data, axes, keepdims: int, noop_with_empty_axes: int = 0):
    x = upcast(data)
    axes = _normalize_axes(axes, data.ndim)
    if axes is None and noop_with_empty_axes:
        out = np.asarray(r.post(r.pre(x)))
        return data.copy() if out is data else out.astype(data.dtype, copy=False)
    if axes is None:
        axes = tuple(range(data.ndim))
    out = r.post(r.reduce(r.pre(x), axes, bool(keepdims)))
    return np.asarray(out).astype(data.dtype, copy=False)


def _bound_mean(kernel: Callable, axes_input: bool):
    """registry.binds for ReduceMean of float32 with constant axes: _mean's path for the
    signature chosen once (the native row means over trailing axes, else numpy's sum and
    division: the same calls); None elsewhere."""

    def make(inputs, attrs, constant):
        data = inputs[0]
        axes = (inputs[1] if len(inputs) > 1 else None) if axes_input else attrs["axes"]
        if data.dtype != np.float32 or not data.size:
            return None
        axes = _normalize_axes(axes, data.ndim)
        if axes is None:
            return None
        keepdims = bool(attrs["keepdims"])
        if axes[0] > 0 and axes == tuple(range(axes[0], data.ndim)):  # (the row means)
            return _bound_row_means(kernel, data.shape, axes[0], keepdims, attrs)
        count = math.prod(data.shape[a] for a in axes)
        add, divide, asarray = np.add.reduce, np.true_divide, np.asarray

        def call(data, *_):
            total = add(data, axis=axes, keepdims=keepdims)
            return divide(total, count, out=total) if total.ndim else asarray(total / count)

        return call

    return make


def _bound_row_means(kernel, shape: tuple, first: int, keepdims: bool, attrs: dict):
    rows_shape = (math.prod(shape[:first]), -1)
    out = shape[:first] + (1,) * (len(shape) - first) if keepdims else shape[:first]
    mean_rows = native.mean_rows_f32

    def call(data, *rest):
        if data.flags.c_contiguous:
            y = mean_rows(data.reshape(rows_shape))
            if y is not None:
                return y.reshape(out)
        return kernel(data, *rest, **attrs)

    return call


def _register_reduction(name: str, r: Reduction, input_axes_since: int) -> None:
    fast = reduce_fast.FAST.get(name, lambda *_: None)  # (float32 over the last axis)

    def with_axes_attribute(data, *, axes=None, keepdims=1):
        y = fast(data, axes, keepdims)
        return _reduce(r, data, axes, keepdims) if y is None else y

    def with_axes_input(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        y = fast(data, axes, keepdims)
        return _reduce(r, data, axes, keepdims, noop_with_empty_axes) if y is None else y

    if name == "ReduceMean":
        binds(_bound_mean(with_axes_attribute, axes_input=False))(with_axes_attribute)
        binds(_bound_mean(with_axes_input, axes_input=True), constants=(1,))(with_axes_input)
    op(name, since=1)(with_axes_attribute)
    op(name, since=input_axes_since)(with_axes_input)


for _name, _r in _REDUCTIONS.items():
    _register_reduction(_name, _r, 13 if _name == "ReduceSum" else 18)


# ---------------------------------------------------------------------------------------------
# ArgMax / ArgMin (select_last_index from opset 12; one kernel serves all versions)


def _arg(fn: Callable, data, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
    x = upcast(data)
    axis = axis + x.ndim if axis < 0 else axis
    keep = bool(keepdims)  # (numpy's keepdims: expand_dims cost more than a small argmax)
    if select_last_index:
        idx = x.shape[axis] - 1 - fn(np.flip(x, axis=axis), axis=axis, keepdims=keep)
    else:
        idx = fn(x, axis=axis, keepdims=keep)
    return np.asarray(idx).astype(np.int64, copy=False)


@op("ArgMax", since=1)
def arg_max(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(np.argmax, data, axis, keepdims, select_last_index)


@op("ArgMin", since=1)
def arg_min(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(np.argmin, data, axis, keepdims, select_last_index)


# ---------------------------------------------------------------------------------------------
# CumSum / CumProd


def _cumulative(fn: Callable, identity: int, x, axis, exclusive: int, reverse: int) -> np.ndarray:
    axis = int(np.asarray(axis).ravel()[0])
    axis = axis + x.ndim if axis < 0 else axis
    xc = upcast(x)
    if reverse:
        xc = np.flip(xc, axis)
    out = fn(xc, axis=axis, dtype=xc.dtype)
    if exclusive and out.shape[axis]:
        # shift by one along the axis, the identity in front
        head = np.full_like(np.take(out, [0], axis=axis), identity)
        out = np.concatenate([head, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis)
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out).astype(x.dtype, copy=False)


@op("CumSum", since=11)
def cum_sum(x, axis, *, exclusive=0, reverse=0):
    return _cumulative(np.cumsum, 0, x, axis, exclusive, reverse)


@op("CumProd", since=26)
def cum_prod(x, axis, *, exclusive=0, reverse=0):
    return _cumulative(np.cumprod, 1, x, axis, exclusive, reverse)
