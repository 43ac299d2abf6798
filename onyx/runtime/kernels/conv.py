"""Conv: the float convolution, and the core the integer convolutions share.

Every convolution is an im2col (a strided *view* of the padded input, copied once into columns)
followed by one batched matmul per group. Python loops only ever run over kernel offsets, never
over pixels.

The rarer convolutions have modules of their own, so that a float CNN's session neither reads
nor runs their code: ConvInteger, QLinearConv and QLinearConvLookup in quantized_conv.py,
ConvTranspose in conv_transpose.py, DeformConv in deform_conv.py, CausalConvWithState in
causal_conv.py. The spatial helpers (attribute defaults and auto_pad in conv_geometry.py,
padding and windowed views in spatial.py) are shared with the pools and those.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import native
from ..registry import binds, op
from . import conv1d as _conv1d
from . import small_cnn as _small_cnn
from . import winograd as _winograd
from .conv_geometry import (  # noqa: F401  (the spatial helpers: their names here too)
    MAX_EXTENT,
    MAX_PADDED,
    MAX_TAPS,
    _conv_geometry,
    channel_group_problem,
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
from .derived import derived, frozen, scratch
from .low_floats import compute_dtype  # noqa: F401  (importable from here, as before)
from .spatial import _assign, _converted, pad_spatial, padded, windows  # noqa: F401  (and from here)

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
    if channel_group_problem(x_shape[1], W.shape, group, False):  # (a bound call skips the
        return None  # kernel's check; none of the set-ups below reads X's channel count)
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
    flat = call.bound() if call.__class__ is native.SmallConv else None  # (its one frame)
    run = lambda X, W, B=None: call(contiguous(X), B, None)  # noqa: E731
    return native.under_setting_flat(flat, run, conv, attrs)


# (marked here: the kernel above stays as it was written; W and B must be constants)
binds(_bind_conv, constants=(1, 2))(conv)
