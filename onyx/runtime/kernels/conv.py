"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, CausalConvWithState.

Every convolution is an im2col (a strided *view* of the padded input, copied once into columns)
followed by one batched matmul per group; ConvTranspose is the mirror image (matmul, then col2im).
Python loops only ever run over kernel offsets or interpolation corners, never over pixels.

The spatial helpers here (attribute defaults, auto_pad, windowed views) are shared with pool.py.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from . import conv1d as _conv1d
from . import small_cnn as _small_cnn
from . import winograd as _winograd
from .conv_geometry import (  # noqa: F401  (the spatial helpers: their names here too)
    MAX_EXTENT,
    MAX_PADDED,
    MAX_TAPS,
    _conv_geometry,
    check_buffer,
    check_groups,
    check_window_attributes,
    check_windows,
    conv_key,
    conv_out_shape,
    conv_pads,
    effective_kernel,
    group_problem,
    same_pads,
    spatial_defaults,
)
from .derived import derived, frozen, scratch, value_key
from .low_floats import compute_dtype  # noqa: F401  (importable from here, as before)

# ----------------------------------------------------------------------------- spatial helpers


def pad_spatial(x: np.ndarray, begin, end, value=0) -> np.ndarray:
    """Pad the spatial axes (2:) of x; negative amounts crop."""
    if not any(begin) and not any(end):
        return x
    need = [s + b + e for s, b, e in zip(x.shape[2:], begin, end)]
    return padded(x, begin, need, x.dtype, value=value)


def padded(x: np.ndarray, begin, need, dtype, *, shift=None, value=0) -> np.ndarray:
    """x (N, C, *spatial) as dtype, minus shift, in a fresh (N, C, *need) buffer of value whose
    origin sits at -begin: what lies outside x is padding, what lies outside need is cropped.
    Returns x itself (or one converted copy) when nothing is to pad or crop.
    """
    spatial = x.shape[2:]
    if not any(begin) and list(need) == list(spatial):
        return _converted(x, dtype, shift)
    fill = np.zeros if value == 0 else lambda shape, dtype: np.full(shape, value, dtype)
    xp = fill(x.shape[:2] + tuple(need), dtype)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for s, b, nd in zip(spatial, begin, need):
        lo = max(0, -b)  # a negative begin crops
        hi = min(s, nd - b)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo + b, max(lo, hi) + b))
    _assign(xp[tuple(dst)], x[tuple(src)], shift)
    return xp


def _converted(x: np.ndarray, dtype, shift=None) -> np.ndarray:
    if shift is None:
        return x.astype(dtype, copy=False)
    return np.subtract(x, shift, dtype=dtype)


def _assign(dst: np.ndarray, src: np.ndarray, shift=None) -> None:
    """dst[...] = src - shift, converting in the same pass."""
    if shift is None:
        np.copyto(dst, src, casting="unsafe")
    else:
        np.subtract(src, shift, out=dst, dtype=dst.dtype, casting="unsafe")


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


# ----------------------------------------------------------------------------- forward convolution

#: Bytes of im2col columns built at once. Columns for a whole large batch would be tens of MB,
#: so images (or rows of one large image) go in chunks through one scratch buffer; but chunks
#: much smaller than an image make thin GEMMs that two BLAS threads split badly (a 224x224
#: ResNet layer in 2 MB chunks took 35% longer).
_COLS_BYTES = 8 << 20
#: Below this many output pixels per image, the images of a batch share one GEMM (columns
#: (K, N*P)): a (M, K) @ (K, P) product per image would repack the weights each time.
_FOLD_PIXELS = 256
#: Bytes of depthwise columns built at once (a few channels' taps; they stay in cache).
_DW_BYTES = 4 << 20


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.matmul(a, b, out=out)


def _add_channels(y: np.ndarray, b) -> np.ndarray:
    """y += b along axis 1 (channels), in place."""
    if b is not None:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


def _conv(
    x,
    w,
    *,
    group,
    pads,
    strides,
    dilations,
    out_shape,
    dtype,
    shift=None,
    bias=None,
    acc=None,
    matmul=_matmul,
) -> np.ndarray:
    """Core N-D grouped convolution: (x - shift) * w (+ bias), computed in dtype.

    x is the raw input (any dtype; converted and shifted in the one pass that pads it); w and
    bias are already in dtype. pads are [begins, ends]. acc is the result's dtype (default dtype).
    matmul(W, cols, out) does the products (the integer convs pass an exact one).
    """
    N, C = x.shape[:2]
    kernel = list(w.shape[2:])
    n = len(kernel)
    acc = np.dtype(acc or dtype)
    # Pad up to exactly what the last window reads (the end pad may leave a stride's remainder).
    eff = effective_kernel(kernel, dilations)
    need = [(o - 1) * s + e for o, s, e in zip(out_shape, strides, eff)]
    if all(k == 1 for k in kernel):
        return _conv_1x1(x, w, group, pads[:n], strides, out_shape, dtype, shift, bias, acc, matmul)
    if group == C and group > 1 and n <= 2:
        if dtype == acc == x.dtype == np.float32 and shift is None:
            y = _native_depthwise(x, w, bias, pads[:n], strides, dilations, out_shape)
            if y is not None:
                return y
        return _conv_depthwise(
            x, w, pads[:n], need, strides, dilations, out_shape, dtype, shift, bias, acc, matmul
        )
    if (
        group == 1
        and n == 2
        and dtype == acc == x.dtype == np.float32
        and shift is None
        and native.avx512()  # (the small conv's kernel is AVX-512's: elsewhere its family is
        and native.conv_small_ok(x, w, pads[:n])  # not imported to say no)
    ):
        return native.conv_small_f32(x, w, bias, out_shape, strides, dilations, pads[:n])
    xp = padded(x, pads[:n], need, dtype, shift=shift)
    view = windows(xp, out_shape, kernel, strides, dilations)  # (N, C, *out, *kernel)
    y = _im2col_gemm(view, w, group, out_shape, acc, matmul)
    return _add_channels(y, bias)


def _im2col_gemm(view, w, group, out_shape, acc, matmul) -> np.ndarray:
    """GEMMs of the weights (G, Mg, Cg*K) with the columns of the windows view
    (N, C, *out, *kernel), copied into (N, G, Cg*K, P) a chunk of images at a time."""
    N, C = view.shape[:2]
    n = len(out_shape)
    M, P = w.shape[0], math.prod(out_shape)
    Cg, Mg = C // group, M // group
    CgK = Cg * math.prod(w.shape[2:])
    wm = w.reshape(group, Mg, CgK)
    view = view.reshape((N, group, Cg) + view.shape[2:])
    kernel_axes = tuple(range(3 + n, 3 + 2 * n))
    out_axes = tuple(range(3, 3 + n))
    per_image = CgK * group * P * view.itemsize
    if N > 1 and P < _FOLD_PIXELS and N * per_image <= 2 * _COLS_BYTES:
        # One GEMM for the batch: columns (G, Cg*K, N*P), then (G, Mg, N, P) -> (N, G, Mg, P).
        cols = np.ascontiguousarray(view.transpose((1, 2) + kernel_axes + (0,) + out_axes))
        yg = np.empty((group, Mg, N * P), dtype=acc)
        matmul(wm, cols.reshape(group, CgK, N * P), yg)
        y = np.ascontiguousarray(yg.reshape(group, Mg, N, P).transpose(2, 0, 1, 3))
        return y.reshape((N, M, *out_shape))
    order = (0, 1, 2) + kernel_axes + out_axes
    y = np.empty((N, group, Mg, P), dtype=acc)
    if per_image > _COLS_BYTES:  # one image at a time, a block of output rows at a time
        rows = max(1, out_shape[0] * _COLS_BYTES // per_image)
        rest = P // out_shape[0]
        buf = scratch(
            (group, Cg) + view.shape[3 + n :] + (rows,) + view.shape[4 : 3 + n], view.dtype
        )
        for i in range(N):
            for r0 in range(0, out_shape[0], rows):
                r1 = min(r0 + rows, out_shape[0])
                b = buf[(slice(None),) * (2 + n) + (slice(0, r1 - r0),)]
                np.copyto(b, view[i, :, :, r0:r1].transpose(tuple(a - 1 for a in order[1:])))
                matmul(wm, b.reshape(group, CgK, -1), y[i, :, :, r0 * rest : r1 * rest])
        return y.reshape((N, M, *out_shape))
    chunk = max(1, min(N, _COLS_BYTES // max(per_image, 1)))
    buf = scratch((chunk,) + tuple(view.shape[i] for i in order[1:]), view.dtype)
    for n0 in range(0, N, chunk):
        b = buf[: min(chunk, N - n0)]
        np.copyto(b, view[n0 : n0 + len(b)].transpose(order))
        matmul(wm, b.reshape(len(b), group, CgK, P), y[n0 : n0 + len(b)])
    return y.reshape((N, M, *out_shape))


def _conv_1x1(x, w, group, begin, strides, out_shape, dtype, shift, bias, acc, matmul):
    """A 1x1 convolution is a plain GEMM on the (strided, if need be) input pixels."""
    N, C = x.shape[:2]
    M, P = w.shape[0], math.prod(out_shape)
    Cg, Mg = C // group, M // group
    need = [(o - 1) * s + 1 for o, s in zip(out_shape, strides)]
    if any(begin) or any(nd > s for nd, s in zip(need, x.shape[2:])):
        x, shift = padded(x, begin, need, dtype, shift=shift), None  # bias-only border pixels
    sl = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_shape, strides))
    xs = x[(slice(None), slice(None)) + sl]
    wm = w.reshape(group, Mg, Cg)
    if N > 1 and P < _FOLD_PIXELS:  # one GEMM for the batch (a free transpose when P == 1)
        cols = _converted(xs, dtype, shift).reshape(N, group, Cg, P).transpose(1, 2, 0, 3)
        yg = np.empty((group, Mg, N * P), dtype=acc)
        matmul(wm, cols.reshape(group, Cg, N * P), yg)
        y = np.ascontiguousarray(yg.reshape(group, Mg, N, P).transpose(2, 0, 1, 3))
    else:
        cols = _converted(xs, dtype, shift).reshape(N, group, Cg, P)
        y = np.empty((N, group, Mg, P), dtype=acc)
        matmul(wm, cols, y)
    return _add_channels(y.reshape((N, M, *out_shape)), bias)


def _native_depthwise(x, w, bias, begin, strides, dilations, out_shape, activation=None):
    """A float32 depthwise 1-D / 2-D conv on the native kernel (depthwise.c), or None; with an
    activation ((code, alpha, beta): FloatConv's) applied as it stores, where it can."""
    final_shape = (x.shape[0], w.shape[0], *out_shape)
    if len(out_shape) == 1:  # a 1-D conv is a 2-D one of height 1
        x, w, out_shape = x[:, :, None], w[:, :, None], [1, *out_shape]
        begin, strides, dilations = [0, *begin], [1, *strides], [1, *dilations]
    if not native.depthwise_ok(x, w, begin):
        return None
    y = native.depthwise_f32(x, w, bias, out_shape, strides, dilations, begin, activation)
    return None if y is None else y.reshape(final_shape)


def _conv_depthwise(
    x, w, begin, need, strides, dilations, out_shape, dtype, shift, bias, acc, matmul
):
    """Depthwise 1-D / 2-D convolution (group == C, M = C * multiplier), on "full-width" rows.

    The padded input is split into stride phases (xp[r0::s0, r1::s1]), so that every kernel tap
    reads one phase at a fixed offset with unit stride. Flattened, a tap is then one contiguous
    run of O0 * Wq pixels (Wq: the phase's width): output pixel (i, j) sits at i * Wq + j, and
    the columns j >= O1 are wrap-around garbage, dropped at the end. The columns (N, C, K, L)
    are copied with long inner loops, and one batched GEMV per channel sums the taps.
    """
    final_shape = (x.shape[0], w.shape[0], *out_shape)
    if len(out_shape) == 1:  # a 1-D conv is a 2-D one of height 1
        out_shape, need, begin = [1, *out_shape], [1, *need], [0, *begin]
        strides, dilations = [1, *strides], [1, *dilations]
        x, w = x[:, :, None], w[:, :, None]
    N, C = x.shape[:2]
    M = w.shape[0]
    kernel = w.shape[2:]
    K = math.prod(kernel)
    (O0, O1), (s0, s1), (d0, d1) = out_shape, strides, dilations
    Hq, Wq = -(-need[0] // s0), -(-need[1] // s1)
    taps = [divmod(a * d0, s0) + divmod(b * d1, s1) for a, b in np.ndindex(*kernel)]
    tail = max(t[2] for t in taps)  # the last row of the last tap reads this far past the phase
    L = O0 * Wq
    xph = np.zeros((N, C, s0, s1, Hq * Wq + tail), dtype=dtype)
    grid = xph[..., : Hq * Wq].reshape(N, C, s0, s1, Hq, Wq)
    for r0, r1 in np.ndindex(s0, s1):  # scatter x into the phases (one pass when unstrided)
        src, dst = [slice(None)] * 2, [slice(None)] * 2
        for r, s, b, nd, size in zip((r0, r1), (s0, s1), begin, need, x.shape[2:]):
            first = (r - b) % s  # first input index whose padded position is in phase r
            stop = min(size, nd - b)
            src.append(slice(first, max(first, stop), s))
            dst.append(
                slice((first + b - r) // s, (first + b - r) // s + len(range(first, stop, s)))
            )
        _assign(grid[:, :, r0, r1][tuple(dst)], x[tuple(src)], shift)
    mult = M // C
    wk = w.reshape(C, mult, K)
    y = np.empty((N, C, mult, O0, O1), dtype=acc)
    # Columns a block of (images, channels) at a time, in one reused cache-sized buffer.
    per_channel = K * L * xph.itemsize
    cb = max(1, min(C, _DW_BYTES // per_channel))
    nb = max(1, min(N, _DW_BYTES // (per_channel * C))) if cb == C else 1
    cols = scratch((nb, cb, K, L), dtype)
    yfull = np.empty((nb, cb, mult, L), dtype=acc)
    st = xph.strides
    # One phase (unstrided): the taps form a (k0, k1) grid of offsets, a single view.
    grid_view = as_strided(
        xph,
        (N, C) + tuple(kernel) + (L,),
        st[:2] + (d0 * Wq * st[-1], d1 * st[-1], st[-1]),
        writeable=False,
    )
    for n0 in range(0, N, nb):
        for c0 in range(0, C, cb):
            blk = (slice(n0, min(n0 + nb, N)), slice(c0, min(c0 + cb, C)))
            c = cols[: blk[0].stop - n0, : blk[1].stop - c0]
            if s0 == s1 == 1:
                np.copyto(c.reshape(c.shape[:2] + tuple(kernel) + (L,)), grid_view[blk])
            else:
                for j, (q0, r0, q1, r1) in enumerate(taps):
                    start = q0 * Wq + q1
                    np.copyto(c[:, :, j], xph[blk + (r0, r1, slice(start, start + L))])
            yf = yfull[: c.shape[0], : c.shape[1]]
            matmul(wk[blk[1]], c, yf)
            full = yf.reshape(yf.shape[:3] + (O0, Wq))[..., :O1]
            if bias is None:
                np.copyto(y[blk], full)
            else:
                b = bias.reshape(C, mult, 1, 1)[blk[1]]
                np.add(full, b, out=y[blk])
    return y.reshape(final_shape)


def _float_conv(
    x_shape, W, group: int, attrs: tuple, activation: int, alpha: float, beta: float
) -> native.FloatConv | None:
    """The native conv set up for this weight, input shape and attributes, or None where it
    does not apply: depthwise and stem convs have their own kernels."""
    if not W.size:  # (no channels in or out: numpy's empty or zero result; the set-ups read W[0])
        return None
    geo = _conv_geometry(x_shape, W.shape, *attrs)
    begin = geo["pads"][: len(x_shape) - 2]
    if group > 1 and W.shape[1] == 1 or min(geo["pads"]) < 0:
        return None
    fewer = _winograd.conv_setup(x_shape, W, group, geo, begin, activation, alpha, beta)
    if fewer is not None:  # (a 3x3 unit-stride conv: kernels/winograd.py)
        return fewer
    serving = _small_cnn.conv_setup(x_shape, W, group, geo, begin, activation, alpha, beta)
    if serving is not None:  # (a small image's layer: kernels/small_cnn.py)
        return serving
    small = W[0].size <= native.SMALL_CONV_K and W.shape[0] >= 8  # (native.conv_small_ok's)
    if group == 1 and len(x_shape) == 4 and small and W.shape[2:] != (1, 1):  # a stem: the
        stem = native.stem_setup(x_shape, W, geo, begin, (activation, alpha, beta))
        if stem is not None or not activation:  # direct kernel (AVX-512; a 1x1 goes to BLAS)
            return stem
    if len(x_shape) == 3:  # a 1-D conv is a 2-D one of height 1 (whichever kernel runs it:
        x_shape, W, geo, begin = _lifted(x_shape, W, geo, begin)  # the caller drops the axis)
    out_shape, strides, dilations = geo["out_shape"], geo["strides"], geo["dilations"]
    if x_shape[0] * math.prod(out_shape) < 16:  # a GEMV (an SE block's 1x1 on one pixel): the
        return _conv_gemv(x_shape, W, group, geo, activation, alpha, beta)  # tile would idle
    if not native.conv_f32_ok():  # (asked last: a conv the kernels above take does not
        return None  # import the implicit GEMM's family)
    packed = derived(W, ("f32 panels", group), lambda: frozen(native.pack_conv_f32(W, group)))
    return native.FloatConv(
        x_shape,
        packed,
        W.shape[0],
        W.shape[2:],
        out_shape,
        strides,
        dilations,
        begin,
        activation,
        alpha,
        beta,
    )


def _lifted(x_shape, W, geo: dict, begin):
    """A 1-D conv's shapes and geometry as a 2-D conv's of height 1."""
    lift = {k: [1, *geo[k]] for k in ("out_shape", "strides", "dilations")}
    lift["pads"] = [0, geo["pads"][0], 0, geo["pads"][1]]
    return (*x_shape[:2], 1, x_shape[2]), W[:, :, None], lift, [0, *begin]


def _conv_gemv(x_shape, W, group: int, geo: dict, activation: int, alpha: float, beta: float):
    """A conv of a few output pixels in all (batch x pixels <= GEMV_ROWS: an SE block's 1x1 on
    one pixel, a 1-D conv over a few frames of audio) as the native GEMV over its im2col rows,
    called as FloatConv is (x, bias, z); or None (numpy's im2col and BLAS then). The implicit
    GEMM's tiles of 48 pixels would be mostly idle there."""
    N, M, K = x_shape[0], W.shape[0], W[0].size
    out_shape, kernel = geo["out_shape"], W.shape[2:]
    rows = N * math.prod(out_shape)
    if group != 1 or rows > native.GEMV_ROWS or not native.gemv_ok():
        return None
    gemv = native.FloatGemv(
        W.reshape(M, K), True, rows, activation=activation, act_alpha=alpha, act_beta=beta
    )
    y_shape = (N, M, *out_shape)
    gather = (
        None
        if math.prod(x_shape[2:]) == 1 and rows == N and not any(geo["pads"])
        else (_im2col_index(x_shape, kernel, geo))
    )
    size = math.prod(x_shape)

    def im2col(x: np.ndarray) -> np.ndarray:
        if gather is None:  # one pixel in, one out: the image is the row
            return x.reshape(N, -1)
        flat = np.empty(size + 1, np.float32)  # (the last slot: what padding reads)
        flat[:size] = x.reshape(-1)
        flat[size] = 0
        return flat.take(gather)

    def call(x, bias, z):
        if z is not None:  # (N, M, P) -> the GEMV's (N * P, M)
            z = np.broadcast_to(z, y_shape).reshape(N, M, -1).transpose(0, 2, 1).reshape(rows, M)
        y = gemv(im2col(x), bias, z)
        if rows == N:
            return y.reshape(y_shape)
        return np.ascontiguousarray(y.reshape(N, -1, M).transpose(0, 2, 1)).reshape(y_shape)

    return call


def _im2col_index(x_shape, kernel, geo: dict) -> np.ndarray:
    """(rows, K) positions in the flattened input of each output pixel's window (row n * P + p:
    channel-major, as the weights), the input's size where the window reads padding."""
    n, size = len(kernel), math.prod(x_shape)
    strides, dilations = geo["strides"], geo["dilations"]
    eff = effective_kernel(kernel, dilations)
    need = [(o - 1) * s + e for o, s, e in zip(geo["out_shape"], strides, eff)]
    where = np.arange(size, dtype=np.intp).reshape(x_shape)
    where = padded(where, geo["pads"][:n], need, np.intp, value=size)
    view = windows(where, geo["out_shape"], kernel, strides, dilations)  # (N, C, *out, *kernel)
    return np.ascontiguousarray(np.moveaxis(view, 1, 1 + n)).reshape(
        -1, x_shape[1] * math.prod(kernel)
    )


def native_conv_f32(
    X,
    W,
    B,
    group: int,
    attrs: tuple,
    *,
    z=None,
    activation: int = 0,
    alpha: float = 0.0,
    beta: float = 0.0,
) -> np.ndarray | None:
    """A float32 1-D / 2-D conv on the native implicit GEMM (conv_f32.c), with FusedConv's
    residual z and activation (native.CONV_ACTIVATIONS) applied as it stores; or None where
    it does not apply (then the caller runs its numpy path). attrs: (auto_pad, pads, strides,
    dilations, kernel_shape), hashable; the set-up is kept per constant weight (derived.py)."""
    if X.dtype != np.float32 or W.dtype != np.float32 or X.ndim not in (3, 4) or not X.size:
        return None  # (an empty batch: numpy's empty result)
    if X.ndim == 3:  # (a 1-D conv: the direct kernel, conv1d.py, where it applies)
        y = _conv1d.native_conv1d(X, W, B, group, attrs, z, activation, alpha, beta)
        if y is not None:
            return y
    if z is None and group == X.shape[1] > 1 and W.shape[1] == 1:  # (with or without an
        return _activated_depthwise(X, W, B, attrs, (activation, alpha, beta))  # activation)
    if not native.avx512():  # (each of _float_conv's kernels asks its own family)
        return None
    key = ("f32 conv", X.shape, group, attrs, activation, alpha, beta, native.thread_setting())
    call = derived(W, key, lambda: _float_conv(X.shape, W, group, attrs, activation, alpha, beta))
    if call is None:
        return None
    if X.ndim == 3 and z is not None and np.ndim(z):  # (the residual gets the height axis too)
        z = np.expand_dims(z, -2)
    y = call(np.ascontiguousarray(X), B, z)
    if X.ndim == 3:  # (1-D: the set-up ran a 2-D conv of height 1)
        y = y.reshape(y.shape[:2] + y.shape[3:])
    return y


def _activated_depthwise(X, W, B, attrs: tuple, activation: tuple) -> np.ndarray | None:
    """A float32 depthwise conv whose activation the native kernel applies as it stores (a
    MobileNet block's), or None. It is set up once per weight and shape, as FloatConv is."""
    if X.ndim != 4:
        key = ("dw geometry", X.shape, attrs)
        geo = derived(W, key, lambda: _conv_geometry(X.shape, W.shape, *attrs))
        bias = None if B is None else B.astype(np.float32, copy=False)
        x, pads = np.ascontiguousarray(X), geo["pads"][:1]
        return _native_depthwise(
            x, W, bias, pads, geo["strides"], geo["dilations"], geo["out_shape"], activation
        )
    key = ("dw conv", X.shape, attrs, activation, native.thread_setting())
    run = derived(W, key, lambda: _depthwise_setup(X.shape, W, attrs, activation))
    return None if run is None else run(np.ascontiguousarray(X), B)


def _depthwise_setup(
    x_shape, W, attrs: tuple, activation: tuple | None, shuffle: int = 0
) -> native.PlaneConv | None:
    """The native depthwise conv set up for x_shape (attrs: auto_pad, pads, strides,
    dilations, kernel_shape; shuffle: native.depthwise_setup's), or None."""
    geo = _conv_geometry(x_shape, W.shape, *attrs)
    begin = geo["pads"][:2]
    if W.shape[1] != 1 or W.shape[0] % x_shape[1] or min(begin) < 0 or not native.available():
        return None  # (native.depthwise_ok's, on shapes)
    return native.depthwise_setup(
        x_shape, W, geo["out_shape"], geo["strides"], geo["dilations"], begin, activation,
        shuffle,
    )  # fmt: skip


def float32_weights(W: np.ndarray, B: np.ndarray | None) -> tuple:
    """A float16 conv's weights in float32, W converted once per constant W."""
    w32 = derived(W, "float32", lambda: frozen(W.astype(np.float32)))
    return w32, None if B is None else B.astype(np.float32)


@op("Conv", since=1, threads="pool")
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
    if group != 1 or X.shape[1] != W.shape[1]:  # (inline: a small conv's every call)
        check_groups("Conv", X.shape, W.shape, group)
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    y = native_conv_f32(X, W, B, group, attrs)
    if y is not None:
        return y
    if X.dtype == np.float16 and W.dtype == np.float16:
        # float16 computes in float32 (compute_dtype): as float32 does, native paths included,
        # with the weights converted once per constant W (the numpy path took 30 ms of a
        # MobileNet's 75)
        w32, b32 = float32_weights(W, B)
        y = conv(
            X.astype(np.float32),
            w32,
            b32,
            auto_pad=auto_pad,
            dilations=dilations,
            group=group,
            kernel_shape=kernel_shape,
            pads=pads,
            strides=strides,
        )
        return y.astype(np.float16)
    ct = compute_dtype(X.dtype)
    geo = _conv_geometry(X.shape, W.shape, auto_pad, pads, strides, dilations, kernel_shape)
    bias = None if B is None else B.astype(ct, copy=False)
    y = _conv(X, W.astype(ct, copy=False), group=group, dtype=ct, bias=bias, **geo)
    return y.astype(X.dtype, copy=False)


_F32_EXACT = 2**24  # integers below this are exact in float32, and so are their sums


def _chunked_matmul(chunk: int):
    """An exact matmul of integer-valued float32 arrays: float32 BLAS over K-chunks whose sums
    of |products| stay below 2**24 (so every partial sum is exact whatever BLAS's order), the
    chunk results added in the float64 out. Twice as fast as one float64 matmul (numpy's integer
    matmul has no BLAS at all).
    """

    def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        K = a.shape[-1]
        if K <= chunk:
            return np.matmul(a, b, out=out)
        out[...] = np.matmul(a[..., :chunk], b[..., :chunk, :])
        for k in range(chunk, K, chunk):
            out += np.matmul(a[..., k : k + chunk], b[..., k : k + chunk, :])
        return out

    return matmul


def _centered_bound(dtype: np.dtype, zero_point: np.ndarray) -> float:
    """The largest |v - zero_point| over all values v of an integer dtype."""
    info = np.iinfo(dtype)
    return max(float(info.max - zero_point.min()), float(zero_point.max() - info.min))


def _centered_weights(w: np.ndarray, w_zero_point) -> tuple[np.ndarray, float]:
    """w - w_zero_point (one per output channel, or none) in float32, and a bound on its
    magnitude: from the data for constant weights (computed once, see derived.py), else from
    the type."""

    def make():
        if w_zero_point is None:
            wf = w.astype(np.float32)
        else:
            wz = w_zero_point.astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
            wf = np.subtract(w, wz, dtype=np.float32)
        wf.flags.writeable = False
        zp = np.zeros(1) if w_zero_point is None else w_zero_point.astype(np.float64)
        bound = _centered_bound(w.dtype, zp)
        if not w.flags.writeable:  # a constant: the tighter bound of its data is worth a pass
            bound = min(bound, max(float(np.abs(wf).max(initial=0.0)), 1.0))
        return wf, bound

    return derived(w, ("centered", value_key(w_zero_point)), make)


def _native_integer_conv(x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, attrs):
    """The integer conv on the native kernels (see _integer_conv_runner), or None."""
    run = _integer_conv_runner(x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, attrs)
    return None if run is None else run(x)


def _integer_conv_runner(
    x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, attrs, table=None
):
    """x -> the integer conv of x (an input like this one) on the native int8 GEMM (gemm_i8.c),
    zero points corrected and (with ``scale``) requantized in the GEMM's epilogue; None where
    it does not apply (then the float32-BLAS path runs). 2-D convs with int8 weights run as an
    implicit GEMM; the others pack the raw bytes' columns (padded with x's zero point, so
    padding contributes nothing) per image and group and multiply the weights' rows by them.
    ``table`` (256 bytes, by bit pattern): an activation the 8-bit result is mapped through."""
    run = _integer_conv_runner_of(
        x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, attrs, table
    )
    if run is None or table is None or getattr(run, "applies_table", False):
        return run
    return lambda x: _lookup(run(x), table)


def implicit_integer_conv(x, w, x_zero_point, w_zero_point, attrs: dict) -> _ImplicitConv | None:
    """ConvInteger's implicit-GEMM set-up for x (conv_to_float.py's fast path: the GEMM's
    epilogue scales and biases its sums), or None where that path does not apply."""
    run = _integer_conv_runner_of(x, w, x_zero_point, w_zero_point, None, None, None, attrs, None)
    return run if isinstance(run, _ImplicitConv) else None


def integer_depthwise_runner(x, w, x_zero_point, w_zero_point, attrs: dict):
    """ConvInteger's native set-up for a 2-D depthwise conv of inputs like x, as
    _integer_conv_runner_of finds it, called ``run(x, zx)`` with each call's x zero point (a
    dynamically quantized x's changes from call to call); None for other convs."""
    group = attrs["group"]
    if x.ndim != 4 or w.ndim != 4 or w.shape[1] != 1 or group <= 1 or not x.size:
        return None
    if x.shape[1] != group:  # (W's groups do not cover x: the kernel's error)
        return None
    if x.dtype not in native.BYTES or w.dtype not in native.BYTES:
        return None
    if x_zero_point is not None and x_zero_point.size != 1:
        return None
    geo = _conv_geometry(x.shape, w.shape, **{k: v for k, v in attrs.items() if k != "group"})
    if math.prod(geo["out_shape"]) == 0:
        return None
    return _native_integer_depthwise(x, w, x_zero_point, w_zero_point, None, None, None, geo)


def _one_row_attrs(attrs: dict) -> dict:
    """A 1-D conv's attributes for the 2-D conv of a one-row image (the row axis adds nothing)."""
    pads = attrs.get("pads")
    lifted = dict(attrs)
    for name in ("dilations", "kernel_shape", "strides"):
        if attrs.get(name) is not None:
            lifted[name] = [1, *attrs[name]]
    if pads is not None:
        lifted["pads"] = [0, pads[0], 0, pads[1]]
    return lifted


def _one_row_result(y):
    """The (N, M, 1, L) result of a lifted 1-D conv as (N, M, L) (a lookup-applied one too)."""
    return y[:, :, 0, :]


def _lookup(y: np.ndarray, table: np.ndarray) -> np.ndarray:
    """table[y] for bytes y, by bit pattern (as ai.onyx TableLookup)."""
    out = native.lookup8(y, table)
    return np.take(table, y.view(np.uint8)) if out is None else out


def _integer_conv_runner_of(
    x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, attrs, table
):
    if x.ndim == 3 and w.ndim == 3:  # 1-D: the 2-D conv of a one-row image, its fast paths
        run = _integer_conv_runner_of(
            x[:, :, None, :],
            w[:, :, None, :],
            x_zero_point,
            w_zero_point,
            bias,
            scale,
            y_zero_point,
            _one_row_attrs(attrs),
            table,
        )
        if run is None:
            return None

        def lifted(x):
            return _one_row_result(run(x[:, :, None, :]))

        # (the 2-D runner may have applied the table itself: say so, or it is applied twice)
        lifted.applies_table = getattr(run, "applies_table", False)
        return lifted
    group = attrs["group"]
    M, Cg = w.shape[:2]
    K = Cg * math.prod(w.shape[2:])
    if (
        not x.size  # (an empty batch: numpy's empty result)
        or x.ndim != w.ndim
        or x.shape[1] != Cg * group  # (W's groups do not cover x: the numpy path's error)
        or x.dtype not in native.BYTES
        or w.dtype not in native.BYTES
        or (x_zero_point is not None and x_zero_point.size != 1)
        or (y_zero_point is not None and y_zero_point.dtype not in native.BYTES)
    ):
        return None
    geo = _conv_geometry(x.shape, w.shape, **{k: v for k, v in attrs.items() if k != "group"})
    if x.size == 0 or math.prod(geo["out_shape"]) == 0:
        return None  # an empty batch or image: the numpy path returns the empty output
    if Cg == 1 and group > 1:  # depthwise: a GEMV per channel, no GEMM to speak of
        return _native_integer_depthwise(
            x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, geo, table
        )
    if not native.int8_gemm_ok(K):
        return None
    zx = 0 if x_zero_point is None else int(x_zero_point.reshape(-1)[0])
    wz = 0 if w_zero_point is None else w_zero_point.reshape(-1)
    if len(geo["out_shape"]) == 2 and group == 1 and w.dtype == np.int8 and not np.any(wz):
        return _implicit_gemm_conv(
            x, w, zx, bias, scale, y_zero_point, geo, table
        )  # (else: row sums)
    if len(geo["out_shape"]) == 2 and group == 1 and scale is None and np.size(wz) in (1, M):
        from .integer_conv import channel_terms  # (integer convs only: not at a cold start)

        c = channel_terms(w, w_zero_point)  # (ConvInteger: dynamic quantization's weights)
        return _implicit_gemm_conv(x, w, zx, bias, None, None, geo, channel_terms=c)
    return lambda x: _grouped_int8_conv(x, w, wz, zx, bias, scale, y_zero_point, group, geo)


def _grouped_int8_conv(x, w, wz, zx, bias, scale, y_zero_point, group, geo):
    """An integer conv as int8 GEMMs of each group's weights with its byte columns, per image."""
    M, K = w.shape[0], w[0].size
    N, out_shape = x.shape[0], geo["out_shape"]
    P, Mg = math.prod(out_shape), M // group
    wm = w.reshape(M, K)
    y = np.empty((N, M, P), np.int32 if scale is None else y_zero_point.dtype)
    per_row = lambda v, r: v if np.size(v) <= 1 else v[r]  # noqa: E731
    scale = None if scale is None else scale.reshape(-1, 1)
    cols_of = _byte_columns(x, w, zx, group, geo)
    for i in range(N):
        cols = cols_of(i)
        for g in range(group):
            r = slice(g * Mg, (g + 1) * Mg)
            za = per_row(wz, r)
            packed = native.pack(cols[g], w.dtype, za)
            native.int8_gemm(
                wm[r],
                packed,
                za,
                zx,
                out=y[i, r],
                y_zero_point=y_zero_point,
                row_bias=None if bias is None else bias[r],
                scale=None if scale is None else per_row(scale, r),
            )
    return y.reshape((N, M, *out_shape))


def _native_integer_depthwise(
    x, w, x_zero_point, w_zero_point, bias, scale, y_zero_point, geo, table=None
):
    """x -> a 2-D depthwise integer conv on the native kernel (depthwise.c), set up for inputs
    of x's shape and type, or None: int32 sums of (x - x_zp) (w - w_zp), requantized with
    ``scale``. The centered weights (int16, (M, kh, kw)) are made once per session."""
    n = len(geo["out_shape"])
    begin = geo["pads"][:n]
    if n != 2 or not native.depthwise_ok(np.ascontiguousarray(x[:0]), w, begin):
        return None
    if math.prod(w.shape[2:]) * 255 * 255 >= 2**31:  # (the sums must fit in int32)
        return None

    def make():
        wz = 0 if w_zero_point is None else w_zero_point.astype(np.int16).reshape(-1, 1, 1)
        wc = w[:, 0].astype(np.int16) - wz
        wc.flags.writeable = False
        return wc

    wc = derived(w, ("depthwise", value_key(w_zero_point)), make)
    zx = 0 if x_zero_point is None else int(x_zero_point.reshape(-1)[0])
    geometry = (geo["out_shape"], geo["strides"], geo["dilations"], begin)
    conv = native.IntPlaneConv(
        x.shape,
        x.dtype,
        zx,
        wc,
        bias,
        *geometry,
        scale=scale,
        y_zero_point=y_zero_point,
        table=table,
    )

    def run(x, zx=None):  # (zx: this call's x zero point, the set-up's if None)
        return conv(x if x.flags.c_contiguous else np.ascontiguousarray(x), zx)

    run.applies_table = scale is not None  # (the table maps the requantized bytes)
    run.shape = conv.shape
    return run


def _byte_columns(x, w, zx, group, geo):
    """image index -> that image's im2col columns (group, Cg * kernel, pixels) of raw bytes,
    padded with the zero point (a 1x1 unpadded unstrided conv's pixels as they are)."""
    out_shape, strides, dilations, pads = (
        geo[k] for k in ("out_shape", "strides", "dilations", "pads")
    )
    kernel = list(w.shape[2:])
    n = len(kernel)
    K, P = math.prod(w.shape[1:]), math.prod(out_shape)
    if all(k == 1 for k in kernel) and not any(pads) and all(s == 1 for s in strides):
        return lambda i: x[i].reshape(group, K, P)
    eff = effective_kernel(kernel, dilations)
    need = [(o - 1) * s + e for o, s, e in zip(out_shape, strides, eff)]
    xp = padded(x, pads[:n], need, x.dtype, value=zx)
    view = windows(xp, out_shape, kernel, strides, dilations)  # (N, C, *out, *kernel)
    order = (0,) + tuple(range(1 + n, 1 + 2 * n)) + tuple(range(1, 1 + n))
    buf = scratch((group, K, P), x.dtype)

    def cols_of(i):
        np.copyto(
            buf.reshape((x.shape[1],) + tuple(kernel) + tuple(out_shape)), view[i].transpose(order)
        )
        return buf

    return cols_of


def _implicit_gemm_conv(
    x, w, zx, bias, scale, y_zp, geo, table=None, channel_terms=None, layout=(False, False)
) -> _ImplicitConv:
    """A 2-D integer conv as an implicit GEMM (see _ImplicitConv), set up once per node, input
    shape and parameters: a node meets the same ones run after run. ``channel_terms``: c_m of
    integer_conv.py's split weights (then the result is int32). ``layout``: whether x and the
    output are channels-last (conv_nhwc.py; x is then the NCHW shape's view)."""
    geometry = tuple(tuple(geo[k]) for k in ("out_shape", "strides", "dilations", "pads"))
    key = (
        x.shape,
        x.dtype.char,
        zx,
        geometry,
        value_key(bias),
        value_key(scale),
        value_key(y_zp),
        value_key(table),
        value_key(channel_terms),
        layout,
    )
    convs = derived(w, ("implicit",), dict)  # (a dict per weight: a few shapes kept)
    conv = convs.get(key)
    if conv is None:
        conv = _ImplicitConv(x, w, zx, bias, scale, y_zp, geo, table, channel_terms, layout)
        if len(convs) >= 4:  # (a model fed ever new shapes)
            convs.clear()
        convs[key] = conv
    return conv


#: Bytes of an implicit conv's work buffers above which a per-thread buffer is reused (below,
#: malloc's own reuse is as cheap and needs no Python).
LARGE_WORK = 1 << 17


class _ImplicitConv:
    """A 2-D integer conv as an implicit GEMM: rows are output pixels, read in place from the
    padded input in NHWC layout (channels padded to a multiple of 4), where each tap's
    channels are a contiguous run of bytes; no columns are built. The weights, (kh, kw, C, M)
    packed once per session, are the GEMM's B; the result (pixels, M) is transposed to NCHW.
    Needs int8 weights with zero points of 0: anything else needs each window's sum. With
    ``table``, the 8-bit result is mapped through it (an activation's lookup)."""

    applies_table = True

    def __init__(
        self,
        x,
        w,
        zx,
        bias,
        scale,
        y_zero_point,
        geo,
        table=None,
        channel_terms=None,
        layout=(False, False),
    ):
        N, C, H, W = x.shape
        M, _, kh, kw = w.shape
        (oh, ow), (sh, sw), (dh, dw), pads = (
            geo[k] for k in ("out_shape", "strides", "dilations", "pads")
        )
        self.channel_terms, self.kernel, self.geo = channel_terms, (kh, kw), geo
        Cp = -(-C // 4) * 4
        Hp, Wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        # room for the whole image where its last rows or columns go unread (a strided 1x1
        # conv): then it is copied whole, in the one native call
        if pads[0] >= 0:
            Hp = max(Hp, pads[0] + H)
        if pads[1] >= 0:
            Wp = max(Wp, pads[1] + W)
        self.zx, self.M = zx, M
        self.out_dtype = np.dtype(np.int32 if scale is None else y_zero_point.dtype)
        self.padded = (N, Hp, Wp, Cp)
        top, left = pads[0], pads[1]
        self.rows_in = slice(max(0, -top), min(H, Hp - top))
        self.cols_in = slice(max(0, -left), min(W, Wp - left))
        self.at = (self.rows_in.start + top, self.cols_in.start + left)  # where x's corner lands
        self.whole = (
            self.rows_in.start,
            self.rows_in.stop,
            self.cols_in.start,
            self.cols_in.stop,
        ) == (0, H, 0, W)
        self.bare = self.whole and self.at == (0, 0) and Cp == C and (Hp, Wp) == (H, W)
        pixel = (np.arange(oh) * (sh * Wp))[:, None] + np.arange(ow) * sw
        rows = ((np.arange(N) * (Hp * Wp))[:, None] + pixel.reshape(-1)).reshape(-1) * Cp
        tap = (np.arange(kh) * (dh * Wp))[:, None] + np.arange(kw) * dw
        quads = (tap.reshape(-1, 1) * Cp + np.arange(0, Cp, 4)).reshape(-1)
        self.gather = (rows, quads, kh * kw * Cp)
        self.pixels = oh * ow
        self.table = table
        self.shapes = ((N * self.pixels, M), (N, oh, ow, M) if layout[1] else (N, M, oh, ow))

        def make():
            w_s = w
            if channel_terms is not None:  # split weights: int8
                from .integer_conv import shifted

                w_s = shifted(w)
            wt = np.zeros((kh, kw, Cp, M), w_s.dtype)
            wt[:, :, :C] = w_s.transpose(2, 3, 1, 0)
            return native.pack(wt.reshape(-1, M), x.dtype)

        packed = self.packed = derived(w, ("implicit", Cp, x.dtype.char), make)
        self.float_gemm = None  # (to_float's, made on its first call)
        self.gemm = native.gathered_int8_gemm(
            x.dtype,
            packed,
            len(rows),
            kh * kw * Cp,
            zx,
            col_bias=bias,
            scale=scale,
            y_zero_point=y_zero_point,
        )
        self.native = None  # the whole conv in one native call: 8-bit outputs, whole images
        if self.out_dtype.itemsize == 1 and self.whole:
            self.native = native.implicit_conv(
                self.gemm,
                self.gather,
                x.shape,
                self.padded,
                self.at,
                zx,
                self.bare,
                table,
                in_nhwc=layout[0],
                out_nhwc=layout[1],
            )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.native is not None and x.flags.c_contiguous:
            out = np.empty(self.shapes[1], self.out_dtype)
            # its padded input and GEMM result: a per-thread buffer where they are large (the
            # C library's fresh buffers cost page faults), else the library's
            work = self.native.work_bytes
            self.native(x, out, scratch((work,), np.uint8) if work > LARGE_WORK else None)
            return out
        # padding reads as the zero point: adds nothing (a per-thread buffer: no page faults)
        out = self._unfused(x).reshape(self.shapes[1])
        return out if self.table is None else _lookup(out, self.table)

    def to_float(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, zx: int):
        """float32(conv) * scale [+ bias] (ai.onyx ConvIntegerToFloat) in the GEMM's epilogue,
        for an int32 conv (no requantization of its own) and x's zero point zx (this call's:
        a dynamically quantized x's changes): scale one value or one per output channel, bias
        one per output channel, float32 and contiguous."""
        if self.float_gemm is None:
            N = self.padded[0]
            self.float_gemm = native.gathered_int8_gemm(
                x.dtype, self.packed, N * self.pixels, self.gather[2], self.zx, float_out=True
            )
        return self._unfused(x, (scale, bias), zx).reshape(self.shapes[1])

    def _buffers(self, x_dtype, y_dtype) -> tuple[np.ndarray, np.ndarray]:
        """The padded input and the GEMM's (pixels, M) result: one per-thread scratch buffer
        (padding reads as the zero point: adds nothing), not fresh arrays, whose pages a
        large conv's call faulted in every time (most of a 1x1 conv's time at 56x56)."""
        xb = math.prod(self.padded) * np.dtype(x_dtype).itemsize
        start = -(-xb // 64) * 64
        yb = self.padded[0] * self.pixels * self.M * np.dtype(y_dtype).itemsize
        buf = scratch((start + yb,), np.uint8)
        xp = buf[:xb].view(x_dtype).reshape(self.padded)
        return xp, buf[start:].view(y_dtype).reshape(-1, self.M)

    def _unfused(self, x: np.ndarray, float_epilogue=None, zx=None) -> np.ndarray:
        N, C = x.shape[:2]
        if zx is None:
            zx = self.zx
        gemm, dtype = self.gemm, self.out_dtype
        if float_epilogue is not None:
            gemm, dtype = self.float_gemm, np.dtype(np.float32)
        xp, y = self._buffers(x.dtype, dtype)
        if not self.bare:
            xp.fill(zx)
        r0, c0 = self.at
        inner = xp[
            :,
            r0 : r0 + self.rows_in.stop - self.rows_in.start,
            c0 : c0 + self.cols_in.stop - self.cols_in.start,
        ]
        if x.flags.c_contiguous and self.whole:
            for i in range(N):
                native.to_nhwc(x[i], inner[i])
        else:  # (the input cropped by negative pads or a short output)
            inner[..., :C] = x[:, :, self.rows_in, self.cols_in].transpose(0, 2, 3, 1)
        rank1 = None
        if self.channel_terms is not None:  # split weights: + c_m S_p in the epilogue
            from .integer_conv import window_sums  # (split weights only: not at a cold start)

            where = (self.padded, self.at, self.rows_in, self.cols_in)
            sums = window_sums(x, zx, self.kernel, self.geo, *where, nhwc=xp)
            rank1 = (sums, self.channel_terms)
        gemm(xp, y, self.gather, rank1, float_epilogue, None if zx == self.zx else zx)
        y = y.reshape(N, self.pixels, self.M)
        # (a copy even where the transpose is one already: y is scratch; numpy's transposing
        # copy of 4-byte results was most of a pointwise ConvIntegerToFloat's time)
        transpose = native.transpose_bytes if y.itemsize == 1 else native.transpose_words
        out = np.empty((N, self.M, self.pixels), y.dtype)
        for i in range(N):
            transpose(y[i], out[i])
        return out


def _integer_conv(x, w, x_zero_point, w_zero_point, bias=None, **attrs):
    """Exact integer convolution of (x - x_zp) and (w - w_zp) (+ bias), as integer-valued floats,
    and a bound on its magnitude.

    The centered operands are small integers, exact in float32; the products go through float32
    BLAS in chunks of K small enough to stay exact (see _chunked_matmul), summed in float64 when
    there is more than one chunk. Depthwise convs sum a channel's taps in one GEMV, so a kernel
    too large for float32 takes float64. x is centered in the pass that pads it, so the padding
    is the zero point, as onnxruntime does.
    """
    group = attrs.pop("group")
    geo = _conv_geometry(x.shape, w.shape, **attrs)
    # Bounds from the element types, not the data (a pass less; the sums are exact either way,
    # only the chunk size depends on them).
    shift = np.float32(0 if x_zero_point is None else x_zero_point.reshape(-1)[0])
    x_bound = _centered_bound(x.dtype, np.asarray(shift))
    wf, w_bound = _centered_weights(w, w_zero_point)
    K = math.prod(w.shape[1:])
    bound = max(x_bound * w_bound, 1.0)
    chunk = max(int((_F32_EXACT - 1) // bound), 1)
    total = K * bound + (0 if bias is None else float(np.abs(bias).max(initial=0)))
    acc = np.float64 if total >= _F32_EXACT else np.float32  # exact sums (and bias)
    # Chunked float32 GEMMs when K is too long for float32; a depthwise conv sums all of a
    # channel's taps in one GEMV, so it computes in float64 then.
    depthwise = w.shape[1] == 1 and group > 1
    dtype = np.float32 if K > chunk and not depthwise else acc
    b = None if bias is None else bias.astype(acc)
    if dtype != wf.dtype:
        wf = derived(w, ("centered", value_key(w_zero_point), dtype), lambda: wf.astype(dtype))
    y = _conv(
        x,
        wf,
        group=group,
        dtype=dtype,
        shift=shift,
        bias=b,
        acc=acc,
        matmul=_chunked_matmul(chunk),
        **geo,
    )
    return y, total


@op("ConvInteger", since=10, threads="pool")
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
    check_groups("ConvInteger", x.shape, w.shape, group)
    attrs = {
        "auto_pad": auto_pad,
        "dilations": dilations,
        "group": group,
        "kernel_shape": kernel_shape,
        "pads": pads,
        "strides": strides,
    }
    y = _native_integer_conv(x, w, x_zero_point, w_zero_point, None, None, None, attrs)
    if y is not None:
        return y
    acc, bound = _integer_conv(x, w, x_zero_point, w_zero_point, **attrs)
    if bound >= 2**31:  # accumulation wraps in 32 bits, as the spec allows
        return acc.astype(np.int64).astype(np.int32)
    return acc.astype(np.int32)


@op("QLinearConv", since=10, threads="pool")
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
    params = (
        x_scale,
        x_zero_point,
        w_scale,
        w_zero_point,
        y_scale,
        y_zero_point,
        B,
        None,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    return _qlinear_conv(x, w, params)


@op("QLinearConvLookup", since=1, domain=ONYX_DOMAIN, threads="pool")
def qlinear_conv_lookup(
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
    """table[QLinearConv(...)]: the optimizer's QLinearConvLookupFusion of a QLinearConv and
    the ai.onyx TableLookup (an activation's) that alone reads it; the table (256 entries of
    the conv's 8-bit type, by bit pattern) is applied in the conv's native call."""
    params = (
        x_scale,
        x_zero_point,
        w_scale,
        w_zero_point,
        y_scale,
        y_zero_point,
        B,
        table,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    return _qlinear_conv(x, w, params)


#: The conv attributes in the integer conv kernels' order (their ``attrs`` tuples).
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def requantization_scale(x_scale, w_scale, y_scale) -> np.ndarray:
    """onnxruntime's float32 multiplier x_scale * w_scale / y_scale of a QLinearConv's int32
    sums (one value, or one per output channel)."""
    return (x_scale.astype(np.float32) * w_scale.astype(np.float32).reshape(-1)) / y_scale.astype(
        np.float32
    )


def _qlinear_conv(x, w, params: tuple):
    """QLinearConv (then ``table``, params[7], when given): params are its other inputs and
    its attributes, in the kernels' order."""
    # A node meets the same constants, attributes and input shape run after run: its native
    # runner is kept per weight, checked by the identity of the very objects it was made for
    # (held, so no id is reused), which skips a small conv's Python set-up (most of its time).
    runners = derived(w, ("qlinear conv",), dict)
    key = (x.shape, x.dtype.char, *map(id, params[8:]))
    hit = runners.get(key)
    if hit is not None and all(map(operator.is_, hit[0], params)):
        return hit[1](x)
    check_groups("QLinearConv", x.shape, w.shape, params[10])  # (once per runner made)
    x_scale, x_zero_point, w_scale, w_zero_point, y_scale, y_zero_point, B, table = params[:8]
    # Requantize in float32 like onnxruntime: acc * (x_scale * w_scale / y_scale), round half even.
    scale = requantization_scale(x_scale, w_scale, y_scale)
    attrs = dict(zip(CONV_ATTRIBUTES, params[8:]))
    if table is not None and (table.shape != (256,) or table.dtype.itemsize != 1):
        raise ValueError(
            f"QLinearConvLookup: table must hold 256 bytes, got {table.dtype}{list(table.shape)}"
        )
    if scale.size in (1, w.shape[0]):
        scale_m = np.broadcast_to(scale, (w.shape[0],))
        run = _integer_conv_runner(
            x, w, x_zero_point, w_zero_point, B, scale_m, y_zero_point, attrs, table
        )
        if run is not None:
            if all(p is None or not p.flags.writeable for p in params[:8]):  # constants only
                if len(runners) >= 4:  # (a model fed ever new shapes)
                    runners.clear()
                runners[key] = (params, run)
            return run(x)
    acc, _ = _integer_conv(x, w, x_zero_point, w_zero_point, B, **attrs)
    y = acc.astype(np.float32, copy=False)
    y *= scale.reshape((1, -1) + (1,) * (acc.ndim - 2))
    np.rint(y, out=y)
    y += np.float32(y_zero_point.reshape(-1)[0])
    info = np.iinfo(y_zero_point.dtype)
    y = np.clip(y, info.min, info.max, out=y).astype(y_zero_point.dtype)
    return y if table is None else np.take(table, y.view(np.uint8))


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


def _check_deform_inputs(x_shape, offset, mask, offset_group: int, K: int, out_shape) -> None:
    """ValueError unless offset_group splits X's channels and offset and mask have the shapes
    the spec gives them (numpy's reshape said it in its own words)."""
    N, C, n = x_shape[0], x_shape[1], len(x_shape) - 2
    if offset_group < 1 or C % offset_group:
        raise ValueError(
            f"DeformConv: offset_group {offset_group} does not divide the {C} channels of X"
        )
    for name, v, per in (
        ("offset", offset, offset_group * K * n),
        ("mask", mask, offset_group * K),
    ):
        want = (N, per, *out_shape)
        if v is not None and tuple(v.shape) != want:
            raise ValueError(f"DeformConv: {name} is {list(v.shape)}, expected {list(want)}")


def _deform_conv(
    X, W, offset, B, mask, *, dilations, group, kernel_shape, offset_group, pads, strides
):
    check_groups("DeformConv", X.shape, W.shape, group)
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
    _check_deform_inputs(x.shape, offset, mask, OG, K, out_shape)
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
    return _add_channels(y, B if B is None else B.astype(ct)).astype(X.dtype, copy=False)


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


# ----------------------------------------------------------------------------- bound steps
# (registry.binds: the float32 conv's set-up looked up once per input signature; each bound
# call answers as the kernel as written, which stays the reference and the fallback)

#: A conv node's attributes that make conv_key's geometry, in its order.
_NODE_GEOMETRY = ("auto_pad", "pads", "strides", "dilations", "kernel_shape")


def float_conv_runner(x_shape, W, node_attrs: dict, activation=0, alpha=0.0, beta=0.0):
    """native_conv_f32's set-up for a 2-D float32 conv node (its attributes: group and
    geometry) of a constant W and inputs of ``x_shape`` (the same derived entry the kernel
    finds), called as ``run(X, B, z)`` with a C-contiguous X; or None where native_conv_f32
    takes another path (depthwise, 1-D) or none. Made under the current thread setting: a
    caller checks it is still that one."""
    group = node_attrs["group"]
    attrs = conv_key(*(node_attrs[k] for k in _NODE_GEOMETRY))
    if len(x_shape) != 4 or not math.prod(x_shape) or W.dtype != np.float32 or W.ndim != 4:
        return None  # (bad shapes: the kernel as written names what is wrong)
    if group > 1 and W.shape[1] == 1 or not native.avx512():
        return None  # (a depthwise conv: _activated_depthwise's path, not bound)
    key = ("f32 conv", x_shape, group, attrs, activation, alpha, beta, native.thread_setting())
    return derived(W, key, lambda: _float_conv(x_shape, W, group, attrs, activation, alpha, beta))


def _bind_conv(inputs, attrs, constant):
    """registry.binds for a float32 2-D Conv of constant weights: native_conv_f32's call."""
    X, W, B = (tuple(inputs) + (None,))[:3]
    if not all(constant[1:3]) or X.dtype != np.float32 or X.ndim != 4:
        return None
    call = float_conv_runner(X.shape, W, attrs)
    if call is None:
        return None
    contiguous = np.ascontiguousarray
    return native.under_setting(lambda X, W, B=None: call(contiguous(X), B, None), conv, attrs)


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


# (marked here: the kernels above stay as they were written; W and B must be constants)
binds(_bind_conv, constants=(1, 2))(conv)
binds(_bind_conv_transpose, constants=(1, 2))(conv_transpose)
