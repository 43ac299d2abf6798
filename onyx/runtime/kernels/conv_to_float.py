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

import numpy as np

from ..registry import ONYX_DOMAIN, op
from .conv import conv_integer, implicit_integer_conv

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


_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _to_float(x, w, x_zero_point, w_zero_point, scale, bias, attrs: tuple):
    attrs = dict(zip(_ATTRIBUTES, attrs))
    M = w.shape[0] if w.ndim else 0
    if (
        scale.dtype == _F32
        and scale.size == 1
        and scale.ndim <= x.ndim
        and (bias is None or (bias.dtype == _F32 and bias.shape in ((M, 1, 1), (1, M, 1, 1))))
        and x.ndim == 4
        and x.flags.c_contiguous
    ):  # (one scale, one bias per channel: nothing broadcasts)
        conv = implicit_integer_conv(x, w, x_zero_point, w_zero_point, attrs)
        if conv is not None:
            s = np.ascontiguousarray(scale, _F32).reshape(1)
            b = None if bias is None else np.ascontiguousarray(bias).reshape(-1)
            return conv.to_float(x, s, b)
    y = conv_integer(x, w, x_zero_point, w_zero_point, **attrs).astype(np.float32)
    y = np.multiply(y, scale, out=_in_place(y, scale))
    return y if bias is None else np.add(y, bias, out=_in_place(y, bias))


def _in_place(y: np.ndarray, other: np.ndarray) -> np.ndarray | None:
    """y when y op other has y's shape and type (so it can be written in place), else None."""
    same = np.broadcast_shapes(y.shape, other.shape) == y.shape
    return y if same and np.result_type(y, other) == y.dtype else None
