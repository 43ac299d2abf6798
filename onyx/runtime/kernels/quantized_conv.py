"""The integer convolutions: ConvInteger, QLinearConv and ai.onyx QLinearConvLookup.

Exact integer sums of (x - x_zero_point) (w - w_zero_point): on the native int8 GEMM where it
applies (an implicit GEMM over the padded input for 2-D convs, a GEMV per channel for
depthwise ones, byte columns per group otherwise), zero points corrected and (QLinearConv)
requantized in its epilogue; else (the numpy path) conv.py's im2col core on integer-valued
floats whose sums stay exact (_chunked_matmul). Apart from conv.py so that a float model's session neither reads
nor runs this code; conv_nhwc.py and conv_to_float.py build on it.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, op
from .conv_geometry import CONV_ATTRIBUTES, _conv_geometry, check_groups, effective_kernel
from .derived import derived, scratch, value_key
from .spatial import padded, windows

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
            if kh == kw == 1 and Cp == C:  # (a pointwise conv's B is W^T, a view: packed as is)
                return native.pack(w_s.reshape(M, C).T, x.dtype)
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

    def bound(self):
        """``call(x)`` doing what this conv does for a C-contiguous x of the set-up's shape
        and type in one native call (a bound step's: registry.binds), or None where another
        path runs (no whole native call)."""
        if self.native is None:
            return None
        size = self.native.work_bytes
        work = None if size <= LARGE_WORK else lambda: scratch((size,), np.uint8)
        return self.native.into_new(self.shapes[1], self.out_dtype, work)

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
    # (the numpy path, where the native int8 kernels do not apply (no library, or shapes they
    # refuse): a quantized model's session otherwise never needs the float conv's module, nor
    # the conv modules it imports)
    from .conv import _conv

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
