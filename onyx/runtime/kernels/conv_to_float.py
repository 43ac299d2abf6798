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

import math
import operator

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from .conv_geometry import CONV_ATTRIBUTES, _conv_geometry
from .derived import derived, frozen, value_key
from .quantized_conv import conv_integer, implicit_integer_conv, integer_depthwise_runner
from .spatial import windows

_F32 = np.dtype(np.float32)


def _bind_to_float(with_bias: bool):
    """registry.binds for ConvIntegerToFloat (``with_bias``) / ConvIntegerScaled."""

    def make(inputs, attrs, constant):
        kernel = conv_integer_to_float if with_bias else conv_integer_scaled
        return _bound_to_float(inputs, attrs, constant, kernel)

    return make


def _bound_to_float(inputs, attrs: dict, constant, kernel):
    """The path _to_float takes for inputs of this signature (constant weights, weight zero
    point and bias; x's zero point and the scale are the call's: a dynamically quantized x's
    change from call to call), found once: its look-ups by the objects' identities, and a
    depthwise conv's native set-up, which it made anew at every call (x's zero point was part
    of it), cost a small conv's call more than its kernel. The same operations, so the same
    bits; None (the kernel as written) for anything but float32 scales and biases."""
    x, w, x_zero_point, w_zero_point, scale = inputs[:5]
    bias = inputs[5] if len(inputs) > 5 else None
    if scale is None or x.ndim != 4 or w.ndim != 4 or scale.dtype != _F32 or scale.ndim > 4:
        return None
    if x_zero_point is not None and x_zero_point.size != 1:
        return None
    if bias is not None and bias.dtype != _F32:
        return None
    N, M = x.shape[0], w.shape[0]
    at = tuple(attrs[k] for k in CONV_ATTRIBUTES)
    if _one_pixel_ok(x, w, x_zero_point, w_zero_point, at):
        y_shape = (N, M, 1, 1)
        wc = _centered_one_pixel(w, w_zero_point)
        epilogue = _epilogue(y_shape, scale, bias)

        def one_pixel(x, w, x_zero_point, w_zero_point, scale, bias=None):
            acc = _one_pixel_product(x, wc, x_zero_point)
            return epilogue(acc.astype(np.float32).reshape(y_shape), scale)

        return native.under_setting(one_pixel, kernel, attrs)
    small = _small_conv(x, w, x_zero_point, w_zero_point, at)
    if small is not None:
        wc, columns, y_shape = small
        epilogue = _epilogue(y_shape, scale, bias)

        def float_gemm(x, w, x_zero_point, w_zero_point, scale, bias=None):
            xc = x.astype(np.float32)
            if x_zero_point is not None:
                xc -= np.float32(x_zero_point.reshape(-1)[0])
            return epilogue(np.matmul(wc, columns(xc)).reshape(y_shape), scale)

        return native.under_setting(float_gemm, kernel, attrs)
    conv_attrs = dict(zip(CONV_ATTRIBUTES, at))
    if (
        scale.size == 1
        and (bias is None or bias.shape in ((M, 1, 1), (1, M, 1, 1)))
        and x.flags.c_contiguous
    ):
        conv = implicit_integer_conv(x, w, x_zero_point, w_zero_point, conv_attrs)
        if conv is not None:
            b = None if bias is None else np.ascontiguousarray(bias).reshape(-1)

            def implicit(x, w, x_zero_point, w_zero_point, scale, *rest):
                if not x.flags.c_contiguous:  # (as _to_float: the general path)
                    return kernel(x, w, x_zero_point, w_zero_point, scale, *rest, **attrs)
                s = np.ascontiguousarray(scale, _F32).reshape(1)
                return conv.to_float(x, s, b, _zero_point(x_zero_point))

            return native.under_setting(implicit, kernel, attrs)
    run = integer_depthwise_runner(x, w, x_zero_point, w_zero_point, conv_attrs)
    if run is None:
        return None
    epilogue = _epilogue(tuple(run.shape), scale, bias)

    def depthwise(x, w, x_zero_point, w_zero_point, scale, bias=None):
        return epilogue(run(x, _zero_point(x_zero_point)).astype(np.float32), scale)

    return native.under_setting(depthwise, kernel, attrs)


#: The most multiply-adds of a conv taken by float32 BLAS (where that and the implicit int8
#: GEMM cross on one thread, measured on 1x1 convs of 16 to 96 channels).
_SMALL_CONV_MACS = 1 << 20


def _small_conv(x, w, x_zero_point, w_zero_point, attrs: tuple):
    """(w - w_zero_point as float32 (M, K), once per weight; xc -> the columns (N, K, pixels)
    of the centered float32 x; the output's shape) for a small 2-D conv of one group whose
    sums float32 holds exactly, or None. There every product and partial sum of
    (x - x_zp) (w - w_zp) is an integer below 2**24 (K * 255 * max|w - w_zp|), so float32
    BLAS gives the int32 sums to the bit in any order, in one GEMM: a 1x1 conv (stride 1, no
    padding) reads the NCHW planes as they are, others their windows' columns (the padding
    is 0, x's zero point centered). The implicit int8 GEMM's NHWC copy, window sums and
    transpose back took such a conv four times as long."""
    group = attrs[2]
    if group != 1 or x.dtype not in _BYTES or w.dtype not in _BYTES or w.shape[1] != x.shape[1]:
        return None
    if x_zero_point is not None and x_zero_point.dtype != x.dtype:
        return None
    M, C = w.shape[:2]
    if w_zero_point is not None and (
        w_zero_point.size not in (1, M) or w_zero_point.dtype != w.dtype
    ):
        return None
    try:
        named = {k: v for k, v in zip(CONV_ATTRIBUTES, attrs) if k != "group"}
        geo = _conv_geometry(x.shape, w.shape, **named)
    except ValueError:  # (the kernel as written raises it)
        return None
    N, pixels, K = x.shape[0], math.prod(geo["out_shape"]), w[0].size
    if N * M * K * pixels > _SMALL_CONV_MACS or min(geo["pads"]) < 0 or not pixels:
        return None
    columns = _columns(x.shape, w.shape, geo)

    def centered() -> tuple[np.ndarray, float]:
        wz = 0.0 if w_zero_point is None else w_zero_point.astype(np.float32).reshape(-1, 1)
        c = w.reshape(M, K).astype(np.float32) - wz
        return frozen(c), float(np.max(np.abs(c), initial=0.0))

    wc, bound = derived(w, ("small conv f32", value_key(w_zero_point)), centered)
    if K * 255 * bound >= 2**24:
        return None
    return wc, columns, (N, M, *geo["out_shape"])


def _columns(x_shape, w_shape, geo: dict):
    """xc (N, C, H, W) -> its im2col columns (N, C * kh * kw, pixels), in w's order."""
    N, C, H, W = x_shape
    kh, kw = w_shape[2:]
    (oh, ow), (sh, sw), (dh, dw) = geo["out_shape"], geo["strides"], geo["dilations"]
    top, left, bottom, right = geo["pads"]
    rows = (N, C * kh * kw, oh * ow)
    if (kh, kw, sh, sw, top, left, bottom, right) == (1, 1, 1, 1, 0, 0, 0, 0):
        return lambda xc: xc.reshape(rows)  # (the planes as they are)
    padded = (N, C, H + top + bottom, W + left + right)

    def columns(xc):
        if top or left or bottom or right:
            xp = np.zeros(padded, np.float32)
            xp[:, :, top : top + H, left : left + W] = xc
        else:
            xp = xc
        view = windows(xp, (oh, ow), (kh, kw), (sh, sw), (dh, dw))  # (N, C, oh, ow, kh, kw)
        return view.transpose(0, 1, 4, 5, 2, 3).reshape(rows)

    return columns


def _zero_point(z) -> int:
    return 0 if z is None else int(z.reshape(-1)[0])


def _epilogue(y_shape: tuple, scale, bias):
    """y -> y * scale [+ bias] (float32 y of y_shape, float32 scale and bias), as _to_float
    writes it (in place where the result has y's shape), its choices made for these shapes."""
    scaled_shape = np.broadcast_shapes(y_shape, scale.shape)
    scale_in_place = scaled_shape == y_shape
    if bias is None:
        return lambda y, scale: np.multiply(y, scale, out=y if scale_in_place else None)
    bias_in_place = np.broadcast_shapes(scaled_shape, bias.shape) == scaled_shape

    def run(y, scale):
        y = np.multiply(y, scale, out=y if scale_in_place else None)
        return np.add(y, bias, out=y if bias_in_place else None)

    return run


@binds(_bind_to_float(with_bias=True), constants=(1, 3, 5))
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


@binds(_bind_to_float(with_bias=False), constants=(1, 3))
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
            return conv.to_float(x, s, b, _zero_point(x_zero_point))
    attrs = dict(zip(CONV_ATTRIBUTES, attrs))
    y = conv_integer(x, w, x_zero_point, w_zero_point, **attrs).astype(np.float32)
    y = np.multiply(y, scale, out=_in_place(y, scale))
    return y if bias is None else np.add(y, bias, out=_in_place(y, bias))


def one_pixel_sums(x, w, x_zero_point, w_zero_point, attrs: tuple) -> np.ndarray | None:
    """The exact int32 sums of a 1x1 conv of a one-pixel x (N, C, 1, 1) (a squeeze-excite
    block's) as float64 (N, M), or None for other convs. One float64 product: every sum of
    at most 2**15 products of 9-bit values is exact there and fits int32 (|sum| < 2**31),
    and a float64 GEMV costs less than the implicit GEMM's set-up around such a small conv."""
    if not _one_pixel_ok(x, w, x_zero_point, w_zero_point, attrs):
        return None
    return _one_pixel_product(x, _centered_one_pixel(w, w_zero_point), x_zero_point)


def _one_pixel_ok(x, w, x_zero_point, w_zero_point, attrs: tuple) -> bool:
    """Whether one_pixel_sums takes the conv (on shapes, types and attributes only)."""
    auto_pad, _, group, _, pads, _ = attrs
    if x.ndim != 4 or x.shape[2:] != (1, 1) or w.ndim != 4 or w.shape[2:] != (1, 1):
        return False
    if group != 1 or auto_pad not in ("NOTSET", "VALID") or any(pads or ()):
        return False
    if w.shape[1] != x.shape[1] or w.shape[1] > 1 << 15 or x.dtype not in _BYTES:
        return False
    # (a zero point of the other 8-bit type: ConvInteger's own checks refuse it)
    if x_zero_point is not None and (x_zero_point.size != 1 or x_zero_point.dtype != x.dtype):
        return False
    if w.dtype not in _BYTES:
        return False
    return w_zero_point is None or (
        w_zero_point.size in (1, w.shape[0]) and w_zero_point.dtype == w.dtype
    )


def _centered_one_pixel(w, w_zero_point) -> np.ndarray:
    """(C, M): w - w_zero_point in float64, transposed for x @ it (once per weight)."""

    def centered() -> np.ndarray:
        wz = 0.0 if w_zero_point is None else w_zero_point.astype(np.float64).reshape(-1, 1)
        return frozen((w.reshape(w.shape[0], -1).astype(np.float64) - wz).T.copy())

    return derived(w, ("one pixel", value_key(w_zero_point)), centered)


def _one_pixel_product(x, wc: np.ndarray, x_zero_point) -> np.ndarray:
    zx = 0.0 if x_zero_point is None else float(x_zero_point.reshape(-1)[0])
    xc = x.reshape(x.shape[:2]).astype(np.float64)  # (not -1: a batch of 0 has no size)
    if zx:
        xc -= zx
    return xc @ wc


_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _implicit(x, w, x_zero_point, w_zero_point, attrs: tuple):
    """quantized_conv.py's implicit-GEMM set-up for this node and x's shape and type, or None.
    A node meets the same weights, weight zero point and attributes run after run (x's zero
    point varies: it is the call's), so the set-up is kept per weight, checked by the identity
    of the very objects it was made for (held, so no id is reused): its Python set-up and the
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
