"""ai.onyx ConvIntegerToFloat and ConvIntegerScaled: a dynamically quantized Conv's ConvInteger
-> Cast -> Mul [-> Add] (optimizer/dynamic_quant.py's ConvIntegerToFloatFusion) in one kernel.

onnxruntime's dynamic quantizer writes each Conv as DynamicQuantizeLinear -> ConvInteger ->
Cast(float) -> Mul(x_scale * w_scale) -> Add(bias): three passes over the conv's result after
it. Here the int32 sums go through the implicit GEMM's float epilogue, float32(acc) * scale,
then + bias, a product then a sum in float32 as the three nodes compute them (the same bits),
and the result is transposed to NCHW once. Elsewhere (grouped and depthwise convs, 1-D) the
three steps run after ConvInteger's kernel.
"""

from __future__ import annotations

import operator

import numpy as np

from ..registry import ONYX_DOMAIN, op
from .conv import CONV_ATTRIBUTES, conv_integer, implicit_integer_conv
from .derived import derived, frozen, value_key

_F32 = np.dtype(np.float32)


@op("ConvIntegerToFloat", since=1, domain=ONYX_DOMAIN, threads="pool")
def conv_integer_to_float(
    x,
    w,
    x_zero_point,
    w_zero_point,
    scale,
    bias,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Add(Mul(Cast(ConvInteger(x, w, x_zero_point, w_zero_point), float), scale), bias)."""
    attrs = (auto_pad, dilations, group, kernel_shape, pads, strides)
    return _to_float(x, w, x_zero_point, w_zero_point, scale, bias, attrs)


@op("ConvIntegerScaled", since=1, domain=ONYX_DOMAIN, threads="pool")
def conv_integer_scaled(
    x,
    w,
    x_zero_point,
    w_zero_point,
    scale,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Mul(Cast(ConvInteger(x, w, x_zero_point, w_zero_point), float), scale)."""
    attrs = (auto_pad, dilations, group, kernel_shape, pads, strides)
    return _to_float(x, w, x_zero_point, w_zero_point, scale, None, attrs)


def _to_float(x, w, x_zero_point, w_zero_point, scale, bias, attrs: tuple):
    M = w.shape[0] if w.ndim else 0
    acc = one_pixel_sums(x, w, x_zero_point, w_zero_point, attrs)
    if acc is not None:  # (the cast, product and sum of the general path below: same bits)
        y = acc.astype(np.float32).reshape(x.shape[0], M, 1, 1)
        y = np.multiply(y, scale, out=_in_place(y, scale))
        return y if bias is None else np.add(y, bias, out=_in_place(y, bias))
    if (
        scale.dtype == _F32
        and scale.size == 1
        and scale.ndim <= x.ndim
        and (bias is None or (bias.dtype == _F32 and bias.shape in ((M, 1, 1), (1, M, 1, 1))))
        and x.ndim == 4
        and x.flags.c_contiguous
        and (x_zero_point is None or x_zero_point.size == 1)
    ):  # (one scale, one bias per channel: nothing broadcasts)
        conv = _implicit(x, w, x_zero_point, w_zero_point, attrs)
        if conv is not None:
            s = np.ascontiguousarray(scale, _F32).reshape(1)
            b = None if bias is None else np.ascontiguousarray(bias).reshape(-1)
            zx = 0 if x_zero_point is None else int(x_zero_point.reshape(-1)[0])
            return conv.to_float(x, s, b, zx)
    attrs = dict(zip(CONV_ATTRIBUTES, attrs))
    y = conv_integer(x, w, x_zero_point, w_zero_point, **attrs).astype(np.float32)
    y = np.multiply(y, scale, out=_in_place(y, scale))
    return y if bias is None else np.add(y, bias, out=_in_place(y, bias))


def one_pixel_sums(x, w, x_zero_point, w_zero_point, attrs: tuple) -> np.ndarray | None:
    """The exact int32 sums of a 1x1 conv of a one-pixel x (N, C, 1, 1) (a squeeze-excite
    block's) as float64 (N, M), or None for other convs. One float64 product: every sum of
    at most 2**15 products of 9-bit values is exact there and fits int32 (|sum| < 2**31),
    and a float64 GEMV costs less than the implicit GEMM's set-up around such a small conv."""
    auto_pad, _, group, _, pads, _ = attrs
    if x.ndim != 4 or x.shape[2:] != (1, 1) or w.ndim != 4 or w.shape[2:] != (1, 1):
        return None
    if group != 1 or auto_pad not in ("NOTSET", "VALID") or any(pads or ()):
        return None
    if w.shape[1] != x.shape[1] or w.shape[1] > 1 << 15 or x.dtype not in _BYTES:
        return None
    # (a zero point of the other 8-bit type: ConvInteger's own checks refuse it)
    if x_zero_point is not None and (x_zero_point.size != 1 or x_zero_point.dtype != x.dtype):
        return None
    if w.dtype not in _BYTES:
        return None
    if w_zero_point is not None and (
        w_zero_point.size not in (1, w.shape[0]) or w_zero_point.dtype != w.dtype
    ):
        return None

    def centered() -> np.ndarray:  # (C, M): w - w_zero_point, transposed for x @ it
        wz = 0.0 if w_zero_point is None else w_zero_point.astype(np.float64).reshape(-1, 1)
        return frozen((w.reshape(w.shape[0], -1).astype(np.float64) - wz).T.copy())

    wc = derived(w, ("one pixel", value_key(w_zero_point)), centered)
    zx = 0.0 if x_zero_point is None else float(x_zero_point.reshape(-1)[0])
    xc = x.reshape(x.shape[:2]).astype(np.float64)  # (not -1: a batch of 0 has no size)
    if zx:
        xc -= zx
    return xc @ wc


_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _implicit(x, w, x_zero_point, w_zero_point, attrs: tuple):
    """conv.py's implicit-GEMM set-up for this node and x's shape and type, or None. A node
    meets the same weights, weight zero point and attributes run after run (x's zero point
    varies: it is the call's), so the set-up is kept per weight, checked by the identity of
    the very objects it was made for (held, so no id is reused): its Python set-up and the
    look-up by value cost more than a small conv."""
    runners = derived(w, ("to float",), dict)
    key = (x.shape, x.dtype.char, id(w_zero_point), *map(id, attrs))
    hit = runners.get(key)
    if hit is not None and hit[0] is w_zero_point and all(map(operator.is_, hit[1], attrs)):
        return hit[2]
    conv = implicit_integer_conv(
        x, w, x_zero_point, w_zero_point, dict(zip(CONV_ATTRIBUTES, attrs))
    )
    if conv is not None and (w_zero_point is None or not w_zero_point.flags.writeable):
        if len(runners) >= 4:  # (a model fed ever new shapes)
            runners.clear()
        runners[key] = (w_zero_point, attrs, conv)
    return conv


def _in_place(y: np.ndarray, other: np.ndarray) -> np.ndarray | None:
    """y when y op other has y's shape and type (so it can be written in place), else None."""
    same = np.broadcast_shapes(y.shape, other.shape) == y.shape
    return y if same and np.result_type(y, other) == y.dtype else None
