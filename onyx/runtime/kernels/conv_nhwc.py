"""Quantized convs on channels-last (NHWC) activations: ai.onyx QLinearConvNhwc and
QLinearConvLookupNhwc, which the optimizer's NhwcTransformer (optimizer/nhwc.py) puts in
place of chains of QLinearConv / QLinearConvLookup.

The int8 implicit GEMM reads its input as NHWC bytes and writes its result as (pixels,
channels) rows: on NCHW activations every conv transposed its input and its output (most of
a small layer's time). Kept channels-last between convs, neither is needed: a 1x1 conv reads
its input in place and the GEMM's rows are the output. Depthwise convs take 16 channels per
vector straight from a pixel's run of bytes (gemm_i8.c's onyx_depthwise_nhwc_i8). Where
neither native path applies the NCHW kernel runs between two transposes (the same bytes).

x may also be the NCHW tensor seen through the Transpose that starts a chain (a view):
the implicit GEMM then reads it as NCHW, so the chain's entry costs no copy.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from .conv_geometry import CONV_ATTRIBUTES, _conv_geometry
from .derived import derived, value_key
from .quantized_conv import _implicit_gemm_conv, _qlinear_conv, requantization_scale

#: Most taps whose float32 sums of byte products stay exact integers (258 * 255 * 255 < 2**24).
EXACT_TAPS = 258


def _bind_qlinear_conv_nhwc(inputs, attrs, constant):
    """registry.binds for QLinearConvNhwc / QLinearConvLookupNhwc of constant parameters: the
    native runner _native_runner finds for a channels-last x, made once (the kernel's own
    look-ups of it took as long as a small layer's native call). An x of other strides (the
    NCHW tensor's view that starts a chain) goes to the kernel as written. None where no
    native path applies."""
    x, w = inputs[0], inputs[3]
    table = inputs[9] if len(inputs) > 9 else None
    kernel = qlinear_conv_nhwc if len(inputs) < 10 else qlinear_conv_lookup_nhwc
    if x.ndim != 4 or w.ndim != 4:
        return None
    bias = inputs[8] if len(inputs) > 8 else None
    params = (*inputs[1:3], *inputs[4:8], bias, table, *(attrs[k] for k in CONV_ATTRIBUTES))
    if any(p is not None and p.flags.writeable for p in params[:8]):
        return None  # (as the kernel keeps runners: for constants only)
    run = _native_runner(np.empty(x.shape, x.dtype).transpose(0, 3, 1, 2), w, params)
    if run is None:
        return None
    flat = getattr(run, "bound", None)
    if flat is not None:  # (the implicit GEMM's one call, without the runner's wrappers)
        return native.under_setting_contiguous(flat, kernel, attrs)

    def call(x, *rest):
        return run(x) if x.flags.c_contiguous else kernel(x, *rest, **attrs)

    return native.under_setting(call, kernel, attrs)


@binds(_bind_qlinear_conv_nhwc, constants=(1, 2, 3, 4, 5, 6, 7, 8))
@op("QLinearConvNhwc", since=1, domain=ONYX_DOMAIN, threads="pool")
def qlinear_conv_nhwc(
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """QLinearConv of x (N, H, W, C) to (N, OH, OW, M): the transposes around QLinearConv."""
    params = (x_scale, x_zero_point, w_scale, w_zero_point, y_scale, y_zero_point, B, None)
    attrs = (auto_pad, dilations, group, kernel_shape, pads, strides)
    return _qlinear_conv_nhwc(x, w, params + attrs)


@binds(_bind_qlinear_conv_nhwc, constants=(1, 2, 3, 4, 5, 6, 7, 8, 9))
@op("QLinearConvLookupNhwc", since=1, domain=ONYX_DOMAIN, threads="pool")
def qlinear_conv_lookup_nhwc(
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B,
    table,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """QLinearConvLookup (the activation's table applied in the conv) on NHWC tensors."""
    params = (x_scale, x_zero_point, w_scale, w_zero_point, y_scale, y_zero_point, B, table)
    attrs = (auto_pad, dilations, group, kernel_shape, pads, strides)
    return _qlinear_conv_nhwc(x, w, params + attrs)


def _qlinear_conv_nhwc(x, w, params: tuple):
    """params: QLinearConv's other inputs, the table (or None), then its attributes (as
    quantized_conv.py's _qlinear_conv). A node's runner is kept per weight and checked by the
    identity of its constants, as the NCHW kernel's."""
    if x.ndim != 4:
        raise ValueError(f"QLinearConvNhwc: x must be 4-D (N, H, W, C), got shape {x.shape}")
    nchw = x.transpose(0, 3, 1, 2)
    runners = derived(w, ("qlinear conv nhwc",), dict)
    key = (x.shape, x.dtype.char, nchw.flags.c_contiguous, *map(id, params[8:]))
    hit = runners.get(key)
    if hit is not None and all(map(operator.is_, hit[0], params)):
        return hit[1](x)
    run = _native_runner(nchw, w, params)
    if run is None:
        return _transposed(nchw, w, params)
    if all(p is None or not p.flags.writeable for p in params[:8]):  # constants only
        if len(runners) >= 4:  # (a model fed ever new shapes)
            runners.clear()
        runners[key] = (params, run)
    return run(x)


def _transposed(nchw: np.ndarray, w: np.ndarray, params: tuple) -> np.ndarray:
    """The NCHW kernel between two transposes: whatever the native paths do not take."""
    y = _qlinear_conv(np.ascontiguousarray(nchw), w, params)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


def _requantization(params: tuple, M: int):
    """onnxruntime's float32 multiplier x_scale * w_scale / y_scale, one per output channel,
    or None where the scales are not per tensor or per channel."""
    x_scale, _, w_scale, _, y_scale = params[:5]
    scale = requantization_scale(x_scale, w_scale, y_scale)
    if scale.shape == (M,):  # (per channel: as it is, np.broadcast_to's checks cost more)
        return scale
    return np.broadcast_to(scale, (M,)) if scale.size in (1, M) else None


def _native_runner(nchw: np.ndarray, w: np.ndarray, params: tuple):
    """x (NHWC) -> the conv's NHWC output on a native path, or None where none applies."""
    _, x_zp, _, w_zp, _, y_zp, bias, table = params[:8]
    attrs = dict(zip(CONV_ATTRIBUTES, params[8:]))
    if (
        not native.available()
        or w.ndim != 4
        or nchw.dtype not in native.BYTES
        or w.dtype not in native.BYTES
        or y_zp is None
        or y_zp.dtype not in native.BYTES
        or (x_zp is not None and x_zp.size != 1)
        or not nchw.size
    ):
        return None
    if table is not None and (table.shape != (256,) or table.dtype.itemsize != 1):
        return None  # (the NCHW kernel raises the error)
    scale = _requantization(params, w.shape[0])
    geo = _conv_geometry(nchw.shape, w.shape, **{k: v for k, v in attrs.items() if k != "group"})
    if scale is None or min(geo["out_shape"]) <= 0:
        return None
    zx = 0 if x_zp is None else int(x_zp.reshape(-1)[0])
    group, (M, Cg) = attrs["group"], w.shape[:2]
    if Cg == 1 and group == nchw.shape[1] == M:
        return _depthwise(nchw, w, zx, w_zp, bias, scale, y_zp, geo, table)
    if group != 1 or w.dtype != np.int8 or not native.int8_gemm_ok(w[0].size):
        return None
    if w_zp is not None and w_zp.any():
        return None
    layout = (not nchw.flags.c_contiguous, True)
    conv = _implicit_gemm_conv(nchw, w, zx, bias, scale, y_zp, geo, table, layout=layout)
    if conv.native is None:
        return None
    if layout[0]:  # (its NCHW path would read other strides as NCHW: a copy first)

        def run(x):
            return conv(x if x.flags.c_contiguous else np.ascontiguousarray(x))

        run.bound = conv.bound()  # (for a C-contiguous x: the bound step's call, or None)
        return run
    return lambda x: conv(x.transpose(0, 3, 1, 2))  # (the chain's entry: NCHW bytes)


def _depthwise(nchw, w, zx, w_zp, bias, scale, y_zp, geo, table):
    """The NHWC depthwise runner (native.NhwcDepthwise), or None."""
    kh, kw = w.shape[2:]
    begin = geo["pads"][:2]
    if kh * kw > EXACT_TAPS or min(begin) < 0 or native.NhwcDepthwise is None:
        return None  # (None: the depthwise family is off)
    if bias is not None and np.abs(bias.astype(np.int64)).max(initial=0) > 1 << 24:
        return None  # (the kernel adds the bias in float32, exactly up to 2**24)

    def make():
        wz = 0 if w_zp is None else w_zp.astype(np.int16).reshape(-1, 1, 1)
        wc = (w[:, 0].astype(np.int16) - wz).transpose(1, 2, 0).copy()  # (kh, kw, C)
        wc.flags.writeable = False
        return wc

    wc = derived(w, ("depthwise nhwc", value_key(w_zp)), make)
    N, C, H, W = nchw.shape
    geometry = (geo["out_shape"], geo["strides"], geo["dilations"], begin)
    conv = native.NhwcDepthwise(
        (N, H, W, C), nchw.dtype, zx, wc, bias, geometry, scale, y_zp, table
    )

    def run(x):
        return conv(x if x.flags.c_contiguous else np.ascontiguousarray(x))

    run.bound = conv.bound()  # (for a C-contiguous x: the bound step's call)
    return run
