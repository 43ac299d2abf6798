"""ConvTranspose: the mirror image of conv.py's convolution (a matmul, then col2im), on the
native kernel (convtranspose.c, or small_cnn.py's 2x2 upsampling) for float32 1-D and 2-D ones.
Python loops only ever run over kernel offsets, never over pixels."""

from __future__ import annotations

import math

import numpy as np

from .. import native
from ..registry import binds, op
from . import small_cnn as _small_cnn
from .conv import _add_channels, float32_weights
from .conv_geometry import check_buffer, check_groups, conv_key, effective_kernel, spatial_defaults
from .derived import derived
from .low_floats import compute_dtype
from .spatial import pad_spatial


def _transpose_geometry(
    in_shape, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad
):
    """(pads begins, output spatial shape) of a transposed convolution."""
    n = len(in_shape)
    eff = effective_kernel(kernel, dilations)
    full = [s * (i - 1) + op_ + e for s, i, op_, e in zip(strides, in_shape, output_padding, eff)]
    if output_shape:
        out = list(output_shape)[-n:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [i * s for i, s in zip(in_shape, strides)]
    else:
        return pads[:n], [f - pads[i] - pads[n + i] for i, f in enumerate(full)]
    # The spec's pads would be negative where the target exceeds the full output; like
    # onnxruntime, clamp them at 0: a larger output_shape is zero-extended at the end and SAME
    # yields min(full, in * stride).
    total = [max(0, f - o) for f, o in zip(full, out)]
    if not output_shape:
        out = [f - t for f, t in zip(full, total)]
    # SAME_UPPER puts the smaller half first; SAME_LOWER and NOTSET (with output_shape) the larger.
    begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    return begin, out


def _transpose_attrs(x_shape, w_shape, attrs: tuple) -> tuple:
    """(kernel, strides, dilations, begin pads, output spatial shape) of a ConvTranspose;
    attrs: (auto_pad, dilations, kernel_shape, output_padding, output_shape, pads, strides)."""
    auto_pad, dilations, kernel_shape, output_padding, output_shape, pads, strides = attrs
    in_shape = list(x_shape[2:])
    n = len(in_shape)
    kernel = list(kernel_shape) if kernel_shape else list(w_shape[2:])
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    output_padding = list(output_padding) if output_padding else [0] * n
    begin, out = _transpose_geometry(
        in_shape, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad
    )
    return kernel, strides, dilations, begin, out


def _native_conv_transpose(X, W, B, group: int, attrs: tuple) -> np.ndarray | None:
    """A float32 1-D / 2-D ConvTranspose on the native kernel (convtranspose.c), or None where
    it does not apply (then the numpy path runs, and reports bad shapes). The set-up is kept
    per constant weight, input shape and attributes."""
    if X.dtype != np.float32 or W.dtype != np.float32 or X.ndim not in (3, 4) or not X.size:
        return None
    call = conv_transpose_runner(X.shape, W, B, group, attrs)
    if call is None:
        return None
    y = call(np.ascontiguousarray(X), B)
    return y.reshape(y.shape[:2] + y.shape[3:]) if X.ndim == 3 else y


def conv_transpose_runner(x_shape, W, B, group: int, attrs: tuple):
    """_native_conv_transpose's set-up for a float32 W and inputs of ``x_shape`` (kept per
    constant weight, shape, attributes and thread setting), called as ``run(X, B)`` with a
    C-contiguous X; or None where the native kernel does not apply."""
    if not native.conv_transpose_ok():
        return None
    if B is not None and (B.ndim != 1 or B.shape[0] != W.shape[1] * group):
        return None
    key = ("f32 convT", x_shape, group, attrs, native.thread_setting())
    return derived(W, key, lambda: _conv_transpose_setup(x_shape, W, group, attrs))


def _conv_transpose_setup(x_shape, W, group: int, attrs: tuple):
    if W.ndim != len(x_shape) or W.shape[0] != x_shape[1] or x_shape[1] % group:
        return None  # (the numpy path names what is wrong)
    kernel, strides, dilations, begin, out = _transpose_attrs(x_shape, W.shape, attrs)
    if list(kernel) != list(W.shape[2:]) or min(begin) < 0 or min(out) < 1:
        return None
    check_buffer("ConvTranspose", "output", (x_shape[0], W.shape[1] * group, *out), 4)
    geometry = (kernel, strides, dilations, begin, out)
    serving = _small_cnn.conv_transpose_setup(x_shape, W, group, geometry)
    if serving is not None:  # (a U-Net's 2x2 upsampling: kernels/small_cnn.py)
        return serving
    w = np.ascontiguousarray(W, np.float32)
    if len(x_shape) == 3:  # a 1-D ConvTranspose is a 2-D one of height 1
        x_shape, w = (*x_shape[:2], 1, x_shape[2]), w[:, :, None]
        strides, dilations, begin, out = ([1, *v] for v in (strides, dilations, begin, out))
        begin[0] = 0
    return native.FloatConvTranspose(x_shape, w, group, out, strides, dilations, begin)


@op("ConvTranspose", since=1, threads="pool")
def conv_transpose(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    output_padding=None,
    output_shape=None,
    pads=None,
    strides=None,
):
    check_groups("ConvTranspose", X.shape, W.shape, group, transpose=True)
    attrs = conv_key(auto_pad, dilations, kernel_shape, output_padding, output_shape, pads, strides)
    y = _native_conv_transpose(X, W, B, group, attrs)
    if y is not None:
        return y
    if X.dtype == np.float16 and W.dtype == np.float16 and native.conv_transpose_ok():
        w32, b32 = float32_weights(W, B)  # (computes in float32, as the numpy path does)
        y = _native_conv_transpose(X.astype(np.float32), w32, b32, group, attrs)
        if y is not None:
            return y.astype(np.float16)
    ct = compute_dtype(X.dtype)
    x, w = X.astype(ct, copy=False), W.astype(ct, copy=False)
    N, C = x.shape[:2]
    in_shape = list(x.shape[2:])
    n = len(in_shape)
    kernel, strides, dilations, begin, out = _transpose_attrs(x.shape, w.shape, attrs)
    Cg, Mg = C // group, w.shape[1]
    M = Mg * group
    P = math.prod(in_shape)
    bias = None if B is None else B.astype(ct, copy=False)
    eff = effective_kernel(kernel, dilations)
    full = [(i - 1) * s + e for i, s, e in zip(in_shape, strides, eff)]  # (before cropping)
    size = np.dtype(ct).itemsize
    check_buffer("ConvTranspose", "output", (N, M, *out), size)
    check_buffer("ConvTranspose", "uncropped output", (N, M, *full), size)
    check_buffer("ConvTranspose", "columns", (N, M, *kernel, *in_shape), size)
    # Columns: for every input pixel, its contribution to each (output channel, kernel offset).
    wmat = w.reshape(group, Cg, -1).transpose(0, 2, 1)  # (G, Mg*K, Cg)
    cols = np.matmul(wmat, x.reshape(N, group, Cg, P))  # (N, G, Mg*K, P)
    cols = cols.reshape((N, M) + tuple(kernel) + tuple(in_shape))
    cropped = any(begin) or list(out) != full
    if list(strides) == kernel and dilations == [1] * n:
        # The windows tile the output without overlap (e.g. 2x2 stride 2): col2im assigns each
        # kernel offset's plane to its strided slice (no zeros, no adds), bias added on the way.
        y = np.empty((N, M, *full), dtype=ct)
        fused = bias is not None and not cropped
        for kk in np.ndindex(*kernel):
            sl = (slice(None), slice(None)) + tuple(slice(k, None, s) for k, s in zip(kk, strides))
            plane = cols[(slice(None), slice(None)) + kk]
            if fused:
                np.add(plane, bias.reshape((1, -1) + (1,) * n), out=y[sl])
            else:
                y[sl] = plane
        if fused:
            return y.astype(X.dtype, copy=False)
    else:
        # col2im: scatter-add each kernel offset's plane into the (uncropped) full output.
        y = np.zeros((N, M, *full), dtype=ct)
        for kk in np.ndindex(*kernel):
            sl = tuple(
                slice(k * d, k * d + (i - 1) * s + 1, s)
                for k, d, i, s in zip(kk, dilations, in_shape, strides)
            )
            y[(slice(None), slice(None)) + sl] += cols[(slice(None), slice(None)) + kk]
    if cropped:  # crop the pads (or zero-extend, for output_padding / a larger output_shape)
        y = pad_spatial(y, [-b for b in begin], [o + b - f for o, b, f in zip(out, begin, full)])
    return _add_channels(y, bias).astype(X.dtype, copy=False)


def _bind_conv_transpose(inputs, attrs, constant):
    """registry.binds for a float32 2-D ConvTranspose of constant weights: the native set-up
    _native_conv_transpose finds (small_cnn.py's 2x2 upsampling or convtranspose.c)."""
    X, W, B = (tuple(inputs) + (None,))[:3]
    if not all(constant[1:3]) or X.dtype != np.float32 or W.dtype != np.float32:
        return None
    if X.ndim != 4 or not X.size:
        return None
    names = ("auto_pad", "dilations", "kernel_shape", "output_padding", "output_shape")
    key = conv_key(*(attrs[k] for k in (*names, "pads", "strides")))
    call = conv_transpose_runner(X.shape, W, B, attrs["group"], key)
    if call is None:
        return None
    contiguous = np.ascontiguousarray
    return native.under_setting(lambda X, W, B=None: call(contiguous(X), B), conv_transpose, attrs)


# (marked here: the kernel above stays as it was written; W and B must be constants)
binds(_bind_conv_transpose, constants=(1, 2))(conv_transpose)
