"""Audio front-end and 1-D signal ops that onyx's optimizer makes (optimizer/audio.py)."""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from ..registry import op
from .derived import derived, prepared


def _index(start, end, axis: int, ndim: int) -> tuple:
    """The index of Slice(x, start, end, axis) with step 1: Python's slice clamps as ONNX's
    Slice does (a negative bound counts from the end, then both are clamped to [0, dim])."""
    index = [slice(None)] * ndim
    index[axis] = slice(start.item(), end.item())
    return tuple(index)


def _indices(ndim: int, re_starts, re_ends, im_starts, im_ends, axes) -> tuple:
    axis = axes.item()
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a rank-{ndim} input")
    axis %= ndim
    return _index(re_starts, re_ends, axis, ndim), _index(im_starts, im_ends, axis, ndim)


@op("SpectralMagnitude", since=1, domain="ai.onyx")
def spectral_magnitude(x, re_starts, re_ends, im_starts, im_ends, axes, eps):
    """Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps)), re and im Slices of x along axes[0]
    (step 1): an STFT's magnitude from its real and imaginary halves, its function body's
    operations in its order on the same dtype (the same bits), in one step and one buffer."""
    bounds = (re_starts, re_ends, im_starts, im_ends, axes)
    # kept per constant bounds (derived.py); the entry holds them, so their ids stay theirs
    key = ("magnitude", x.ndim, *map(id, bounds[1:]))
    kept = derived(re_starts, key, lambda: (bounds, *_indices(x.ndim, *bounds)))
    if not all(map(operator.is_, kept[0], bounds)):
        kept = (bounds, *_indices(x.ndim, *bounds))
    re, im = x[kept[1]], x[kept[2]]
    if re.shape != im.shape or x.dtype != eps.dtype:  # (broadcasts, promotions: as the chain)
        return np.sqrt(np.add(np.add(re * re, im * im), eps))
    y = np.multiply(re, re)
    square = np.multiply(im, im)
    np.add(y, square, y)
    np.add(y, eps, y)
    return np.sqrt(y, y)


# --- a 1-D conv and the MaxPool after it ---------------------------------------------------------

#: The conv attributes ConvMaxPool and FusedConvMaxPool keep under their own names.
CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
FUSED_ATTRS = ("activation", "activation_params")
#: MaxPool's attributes, kept as "pool_" + name.
POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order",
              "strides")  # fmt: skip


def _bound_pooled(conv_fn: Callable, names: tuple) -> Callable:
    """make(attributes) for a conv followed by a 1-D MaxPool: the conv kernel ``conv_fn``
    with its attributes, then MaxPool's 1-D passes (pool.py) on its result: the two steps'
    kernels in one step."""

    def make(attrs: dict) -> Callable:
        from .pool import _max_pool_1d  # (pool.py is a sibling: imported on first use)

        conv_attrs = {k: attrs[k] for k in names}
        pool = [attrs["pool_" + k] for k in ("kernel_shape", "auto_pad", "pads", "strides",
                                             "dilations", "ceil_mode")]  # fmt: skip

        def call(X, W, B=None):
            y = conv_fn(X, W, B, **conv_attrs)
            if y.ndim != 3:
                raise ValueError(f"a 1-D MaxPool takes a rank-3 input, got rank {y.ndim}")
            return _max_pool_1d(y, *pool)

        return call

    return make


def _conv(X, W, B=None, **attrs):
    from .conv import conv

    return conv(X, W, B, **attrs)


def _fused_conv(X, W, B=None, **attrs):
    from .fused import fused_conv

    return fused_conv(X, W, B, None, **attrs)


@op("ConvMaxPool", since=1, domain="ai.onyx", threads="pool")
@prepared(_bound_pooled(_conv, CONV_ATTRS))
def conv_max_pool(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1,
                  kernel_shape=None, pads=None, strides=None, pool_auto_pad="NOTSET",
                  pool_ceil_mode=0, pool_dilations=None, pool_kernel_shape=None, pool_pads=None,
                  pool_storage_order=0, pool_strides=None):  # fmt: skip
    """MaxPool(Conv(X, W, B)) of a 1-D conv (optimizer/audio.py): the two nodes' kernels in
    one step, the same bits (its function body is the pair)."""
    attrs = dict(locals())
    return conv_max_pool.prepare({k: attrs[k] for k in attrs if k not in ("X", "W", "B")})(X, W, B)


@op("FusedConvMaxPool", since=1, domain="ai.onyx", threads="pool")
@prepared(_bound_pooled(_fused_conv, CONV_ATTRS + FUSED_ATTRS))
def fused_conv_max_pool(X, W, B=None, *, activation="", activation_params=None,
                        auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                        strides=None, pool_auto_pad="NOTSET", pool_ceil_mode=0,
                        pool_dilations=None, pool_kernel_shape=None, pool_pads=None,
                        pool_storage_order=0, pool_strides=None):  # fmt: skip
    """MaxPool(FusedConv(X, W, B)) of a 1-D conv, as :func:`conv_max_pool`."""
    attrs = dict(locals())
    return fused_conv_max_pool.prepare({k: attrs[k] for k in attrs if k not in ("X", "W", "B")})(
        X, W, B
    )
