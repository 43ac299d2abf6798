"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, CausalConvWithState.

Every convolution is an im2col (a strided *view* of the padded input, copied once into columns)
followed by one batched matmul per group; ConvTranspose is the mirror image (matmul, then col2im).
Python loops only ever run over kernel offsets or interpolation corners, never over pixels.

The spatial helpers here (attribute defaults, auto_pad, windowed views) are shared with pool.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..registry import op

# ----------------------------------------------------------------------------- spatial helpers


def spatial_defaults(n: int, strides, dilations, pads) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations (ones) and pads (zeros, 2n long) with the spec's defaults filled in."""
    return (
        list(strides) if strides else [1] * n,
        list(dilations) if dilations else [1] * n,
        list(pads) if pads else [0] * (2 * n),
    )


def effective_kernel(kernel, dilations) -> list[int]:
    """Extent of a dilated kernel: (k - 1) * d + 1."""
    return [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]


def same_pads(auto_pad: str, total: list[int]) -> list[int]:
    """Split total paddings per SAME_UPPER (extra at the end) or SAME_LOWER (extra at the start)."""
    if auto_pad == "SAME_UPPER":
        begin = [t // 2 for t in total]
    else:
        begin = [t - t // 2 for t in total]
    return begin + [t - b for t, b in zip(total, begin)]


def conv_pads(auto_pad: str, in_shape, kernel, strides, dilations, pads) -> list[int]:
    """Explicit [begins..., ends...] pads of a forward convolution for any auto_pad mode."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        eff = effective_kernel(kernel, dilations)
        out = [-(-i // s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, in_shape)]
        return same_pads(auto_pad, total)
    if auto_pad == "VALID":
        return [0] * (2 * len(in_shape))
    return list(pads)


def conv_out_shape(in_shape, kernel, strides, dilations, pads) -> list[int]:
    n = len(in_shape)
    eff = effective_kernel(kernel, dilations)
    return [(in_shape[i] + pads[i] + pads[n + i] - eff[i]) // strides[i] + 1 for i in range(n)]


def pad_spatial(x: np.ndarray, begin, end, value=0) -> np.ndarray:
    """Pad the spatial axes (2:) of x; negative amounts crop."""
    if not any(begin) and not any(end):
        return x
    crop = tuple(
        slice(max(0, -b), x.shape[2 + i] - max(0, -e)) for i, (b, e) in enumerate(zip(begin, end))
    )
    x = x[(slice(None), slice(None)) + crop]
    widths = [(0, 0), (0, 0)] + [(max(0, b), max(0, e)) for b, e in zip(begin, end)]
    if not any(w for pair in widths for w in pair):
        return x
    return np.pad(x, widths, constant_values=value)


def windows(xp: np.ndarray, out_shape, kernel, strides, dilations) -> np.ndarray:
    """Read-only view (N, C, *out, *kernel) of xp: [n, c, o.., k..] = xp[n, c, o*s + k*d]."""
    st = xp.strides
    n = len(kernel)
    shape = xp.shape[:2] + tuple(out_shape) + tuple(kernel)
    steps = (
        st[:2]
        + tuple(st[2 + i] * strides[i] for i in range(n))
        + tuple(st[2 + i] * dilations[i] for i in range(n))
    )
    return as_strided(xp, shape, steps, writeable=False)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays float64; every narrower float (float16, bfloat16, ...) computes in float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


# ----------------------------------------------------------------------------- forward convolution


def _conv(x, w, *, group, pads, strides, dilations, out_shape, matmul=np.matmul) -> np.ndarray:
    """Core N-D grouped convolution of float arrays (same dtype); no bias. pads are [begins, ends].

    matmul(W (G, Mg, K), cols (N, G, K, P)) does the products (the integer convs pass an exact one).
    """
    N, C = x.shape[:2]
    M = w.shape[0]
    kernel = list(w.shape[2:])
    n = len(kernel)
    P = math.prod(out_shape)
    Cg, Mg = C // group, M // group
    # Pad up to exactly what the last window reads (the end pad may leave a stride's remainder).
    need = [
        (o - 1) * s + e for o, s, e in zip(out_shape, strides, effective_kernel(kernel, dilations))
    ]
    end = [nd - pads[i] - x.shape[2 + i] for i, nd in enumerate(need)]
    xp = pad_spatial(x, pads[:n], end)

    if all(k == 1 for k in kernel):  # 1x1: a strided slice then a plain matmul
        sl = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_shape, strides))
        cols = xp[(slice(None), slice(None)) + sl].reshape(N, group, Cg, P)
        y = matmul(w.reshape(group, Mg, Cg), cols)
        return y.reshape((N, M, *out_shape))

    view = windows(xp, out_shape, kernel, strides, dilations)  # (N, C, *out, *kernel)
    if Cg == 1 and group > 1:  # depthwise: one multiply-add pass per kernel offset
        mult = M // C
        wk = w.reshape(C, mult, -1)
        y = np.zeros((N, C, mult, *out_shape), dtype=x.dtype)
        bshape = (1, C, mult) + (1,) * n
        for j, kk in enumerate(np.ndindex(*kernel)):
            y += view[(Ellipsis, *kk)][:, :, None] * wk[:, :, j].reshape(bshape)
        return y.reshape((N, M, *out_shape))

    # im2col: (N, G, Cg, *kernel, *out) contiguous -> (N, G, Cg*K, P); W (G, Mg, Cg*K)
    view = view.reshape((N, group, Cg) + view.shape[2:])
    order = (0, 1, 2) + tuple(range(3 + n, 3 + 2 * n)) + tuple(range(3, 3 + n))
    cols = np.ascontiguousarray(view.transpose(order)).reshape(N, group, -1, P)
    y = matmul(w.reshape(group, Mg, -1), cols)
    return y.reshape((N, M, *out_shape))


def _conv_geometry(x, w, auto_pad, pads, strides, dilations, kernel_shape):
    n = x.ndim - 2
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    pads = conv_pads(auto_pad, x.shape[2:], kernel, strides, dilations, pads)
    out_shape = conv_out_shape(x.shape[2:], kernel, strides, dilations, pads)
    return dict(pads=pads, strides=strides, dilations=dilations, out_shape=out_shape)


def _add_bias(y: np.ndarray, b) -> np.ndarray:
    if b is not None:
        y += b.astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@op("Conv", since=1)
def conv(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    ct = compute_dtype(X.dtype)
    geo = _conv_geometry(X, W, auto_pad, pads, strides, dilations, kernel_shape)
    y = _conv(X.astype(ct, copy=False), W.astype(ct, copy=False), group=group, **geo)
    return _add_bias(y, B).astype(X.dtype, copy=False)


_F32_EXACT = 2**24  # integers below this are exact in float32, and so are their sums


def _chunked_matmul(chunk: int):
    """An exact matmul of integer-valued float32 arrays: float32 BLAS over K-chunks whose sums
    of |products| stay below 2**24 (so every partial sum is exact whatever BLAS's order), the
    chunk results added in float64. Twice as fast as one float64 matmul (numpy's integer matmul
    has no BLAS at all).
    """

    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        K = a.shape[-1]
        if K <= chunk:
            return np.matmul(a, b)
        acc = np.matmul(a[..., :chunk], b[..., :chunk, :]).astype(np.float64)
        for k in range(chunk, K, chunk):
            acc += np.matmul(a[..., k : k + chunk], b[..., k : k + chunk, :])
        return acc

    return matmul


def _integer_conv(x, w, x_zero_point, w_zero_point, **attrs) -> np.ndarray:
    """Exact integer convolution of (x - x_zp) and (w - w_zp), as int64.

    The centered operands are small integers, exact in float32; the products go through float32
    BLAS in chunks of K small enough to stay exact (see _chunked_matmul). Depthwise convs sum
    one kernel offset at a time in the array's dtype, so a kernel too large for float32 takes
    float64. Subtracting the zero point before padding pads with the zero point, as onnxruntime
    does.
    """
    xf = x.astype(np.float32)
    wf = w.astype(np.float32)
    if x_zero_point is not None:
        xf -= np.float32(x_zero_point.reshape(-1)[0])
    if w_zero_point is not None:
        wf -= w_zero_point.astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
    group = attrs.pop("group")
    geo = _conv_geometry(x, w, **attrs)
    bound = max(float(np.abs(xf).max(initial=0)) * float(np.abs(wf).max(initial=0)), 1.0)
    chunk = max(int((_F32_EXACT - 1) // bound), 1)
    depthwise = w.shape[1] == 1 and group > 1
    if depthwise and math.prod(w.shape[2:]) > chunk:
        xf, wf = xf.astype(np.float64), wf.astype(np.float64)  # exact up to 2**53
        return _conv(xf, wf, group=group, **geo).astype(np.int64)
    return _conv(xf, wf, group=group, matmul=_chunked_matmul(chunk), **geo).astype(np.int64)


@op("ConvInteger", since=10)
def conv_integer(
    x,
    w,
    x_zero_point=None,
    w_zero_point=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    acc = _integer_conv(
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    return acc.astype(np.int32)  # accumulation wraps in 32 bits, as the spec allows


@op("QLinearConv", since=10)
def qlinear_conv(
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
    acc = _integer_conv(
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    if B is not None:
        acc += B.astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    # Requantize in float32 like onnxruntime: acc * (x_scale * w_scale / y_scale), round half even.
    scale = (x_scale.astype(np.float32) * w_scale.astype(np.float32).reshape(-1)) / y_scale.astype(
        np.float32
    )
    scale = scale.reshape((1, -1) + (1,) * (acc.ndim - 2))
    y = np.rint(acc.astype(np.float32) * scale) + np.float32(y_zero_point.reshape(-1)[0])
    info = np.iinfo(y_zero_point.dtype)
    return np.clip(y, info.min, info.max).astype(y_zero_point.dtype)


# ----------------------------------------------------------------------------- ConvTranspose


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


@op("ConvTranspose", since=1)
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
    ct = compute_dtype(X.dtype)
    x, w = X.astype(ct, copy=False), W.astype(ct, copy=False)
    N, C = x.shape[:2]
    in_shape = list(x.shape[2:])
    n = len(in_shape)
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    output_padding = list(output_padding) if output_padding else [0] * n
    begin, out = _transpose_geometry(
        in_shape, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad
    )
    Cg, Mg = C // group, w.shape[1]
    M = Mg * group
    P = math.prod(in_shape)
    # Columns: for every input pixel, its contribution to each (output channel, kernel offset).
    wmat = w.reshape(group, Cg, -1).transpose(0, 2, 1)  # (G, Mg*K, Cg)
    cols = np.matmul(wmat, x.reshape(N, group, Cg, P))  # (N, G, Mg*K, P)
    cols = cols.reshape((N, M, -1) + tuple(in_shape))
    # col2im: scatter-add each kernel offset's plane into the (uncropped) full output.
    full = [
        (i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_shape, strides, kernel, dilations)
    ]
    y = np.zeros((N, M, *full), dtype=ct)
    for j, kk in enumerate(np.ndindex(*kernel)):
        sl = tuple(
            slice(k * d, k * d + (i - 1) * s + 1, s)
            for k, d, i, s in zip(kk, dilations, in_shape, strides)
        )
        y[(slice(None), slice(None)) + sl] += cols[:, :, j]
    # Crop the pads (or zero-extend, for output_padding / a larger output_shape).
    y = pad_spatial(y, [-b for b in begin], [o + b - f for o, b, f in zip(out, begin, full)])
    y = np.ascontiguousarray(y)
    return _add_bias(y, B).astype(X.dtype, copy=False)


# ----------------------------------------------------------------------------- DeformConv


def _sample_multilinear(xg: np.ndarray, pos: list[np.ndarray]) -> np.ndarray:
    """Multilinear samples of xg (N, OG, Cog, *spatial) at positions pos[i] (N, OG, Q) per axis.

    Corners outside the input contribute zero. Returns (N, OG, Cog, Q).
    """
    N, OG, Cog = xg.shape[:3]
    spatial = xg.shape[3:]
    flat_x = xg.reshape(N, OG, Cog, -1)
    base = [np.floor(p) for p in pos]
    frac = [p - b for p, b in zip(pos, base)]
    base = [b.astype(np.int64) for b in base]
    out = np.zeros((N, OG, Cog, pos[0].shape[-1]), dtype=xg.dtype)
    for corner in itertools.product((0, 1), repeat=len(spatial)):
        weight = np.ones_like(pos[0])
        valid = np.ones(pos[0].shape, dtype=bool)
        flat = np.zeros(pos[0].shape, dtype=np.int64)
        for i, bit in enumerate(corner):
            idx = base[i] + bit
            weight = weight * (frac[i] if bit else 1 - frac[i])
            valid &= (idx >= 0) & (idx < spatial[i])
            flat = flat * spatial[i] + np.clip(idx, 0, spatial[i] - 1)
        vals = np.take_along_axis(flat_x, flat[:, :, None, :], axis=3)
        out += vals * (weight * valid)[:, :, None, :]
    return out


def _deform_conv(
    X, W, offset, B, mask, *, dilations, group, kernel_shape, offset_group, pads, strides
):
    ct = compute_dtype(X.dtype)
    x, w = X.astype(ct, copy=False), W.astype(ct, copy=False)
    N, C = x.shape[:2]
    in_shape = list(x.shape[2:])
    n = len(in_shape)
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    out_shape = conv_out_shape(in_shape, kernel, strides, dilations, pads)
    K, P = math.prod(kernel), math.prod(out_shape)
    OG = offset_group
    off = offset.astype(ct, copy=False).reshape(N, OG, K, n, P)
    # Regular sampling grid (K, P) per axis, then shifted by the learned offsets.
    k_idx = np.indices(kernel).reshape(n, K)
    o_idx = np.indices(out_shape).reshape(n, P)
    pos = [
        (o_idx[i] * strides[i] - pads[i])[None, :]
        + (k_idx[i] * dilations[i])[:, None]
        + off[:, :, :, i]
        for i in range(n)
    ]
    cols = _sample_multilinear(
        x.reshape(N, OG, C // OG, *in_shape), [p.reshape(N, OG, K * P) for p in pos]
    )
    if mask is not None:
        cols *= mask.astype(ct, copy=False).reshape(N, OG, 1, K * P)
    cols = cols.reshape(N, group, -1, P)  # (N, G, Cg*K, P): channel-major then kernel offset
    M = w.shape[0]
    y = np.matmul(w.reshape(group, M // group, -1), cols).reshape((N, M, *out_shape))
    return _add_bias(y, B).astype(X.dtype, copy=False)


@op("DeformConv", since=19)
def deform_conv(
    X,
    W,
    offset,
    B=None,
    mask=None,
    *,
    dilations=None,
    group=1,
    kernel_shape=None,
    offset_group=1,
    pads=None,
    strides=None,
):
    return _deform_conv(
        X,
        W,
        offset,
        B,
        mask,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        offset_group=offset_group,
        pads=pads,
        strides=strides,
    )


# ----------------------------------------------------------------------------- CausalConvWithState


def _silu(y: np.ndarray) -> np.ndarray:
    return y / (1 + np.exp(-y))


_ACTIVATIONS = {"none": lambda y: y, "silu": _silu, "swish": _silu}


@op("CausalConvWithState", since=27)
def causal_conv_with_state(input, weight, bias=None, past_state=None, *, activation="none"):
    ct = compute_dtype(input.dtype)
    x = input.astype(ct, copy=False)
    B, C, L = x.shape
    k = weight.shape[-1]
    if past_state is None:
        past = np.zeros((B, C, k - 1), dtype=ct)
    else:
        past = past_state.astype(ct, copy=False)
    seq = np.concatenate([past, x], axis=2)  # (B, C, k - 1 + L)
    wk = weight.astype(ct, copy=False).reshape(C, k)
    y = np.zeros((B, C, L), dtype=ct)
    for j in range(k):  # depthwise: one pass per tap
        y += seq[:, :, j : j + L] * wk[:, j : j + 1]
    if bias is not None:
        y += bias.astype(ct, copy=False)[:, None]
    y = _ACTIVATIONS[activation](y)
    present = seq[:, :, seq.shape[2] - (k - 1) :]
    return y.astype(input.dtype, copy=False), np.ascontiguousarray(present).astype(input.dtype)
