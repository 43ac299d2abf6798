"""The exact int8 GEMM (gemm_i8.c, AVX512-VNNI): int32 accumulation of 8-bit products, as
onnxruntime's, for K up to 2**15 (beyond, int32 sums of 255 * 255 products could overflow and
the numpy path is used); its batched form (attention's products), its gathered form (the
implicit-GEMM integer conv) and the byte transposes around them."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _INT,
    _P,
    _PARALLEL_MACS,
    _addr,
    _even_cuts,
    _run,
    _threads,
    _ways,
    abi,
    range_of,
)

# (elementwise binds lib.lookup, which an implicit conv with a table calls)
from .elementwise import bind as _binds_lookup  # noqa: F401

#: Longest reduction the int32 accumulators hold exactly: K * 255 * 255 < 2**31.
MAX_K = 1 << 15


#: Columns per packed panel (gemm_i8.c's NR): threads split the work at panel boundaries.
PANEL = 32

#: The work worth a second thread in a quantized conv's implicit GEMM and the channels-last
#: depthwise conv, lower than a lone product's (_PARALLEL_MACS), as nhwc.py's float convs: a
#: CNN's small layers come one after another, so the pool's threads are still spinning from
#: the last one, and a layer left on one thread between two split ones reads the other
#: thread's half of its input out of that core's cache. A VNNI instruction does 4 byte
#: products a lane where the depthwise conv's int16 lanes do one: its threshold is lower.
CONV_MACS = _PARALLEL_MACS // 2
DEPTHWISE_MACS = _PARALLEL_MACS // 32


@abi("operand")
class _Operand(ctypes.Structure):
    _fields_ = [("a", _P), ("lda", _I64), ("rows", _P), ("quads", _P)]


@abi("epilogue")
class _Epilogue(ctypes.Structure):
    _fields_ = [
        ("row_off", _P),
        ("col_off", _P),
        ("row_f", _P),
        ("col_f", _P),
        ("c", _P),
        ("ldc", _I64),
        ("out8", _P),
        ("ldo", _I64),
        ("scale", _P),
        ("scale_rs", _I64),
        ("scale_cs", _I64),
        ("zero_point", ctypes.c_int32),
        ("lo", ctypes.c_int32),
        ("hi", ctypes.c_int32),
        ("outf", _P),
        ("ldf", _I64),
        ("bias", _P),
        ("relu", ctypes.c_int32),
    ]


@abi("gemm_task")
class _GemmTask(ctypes.Structure):
    _fields_ = [
        ("A", _P),
        ("packed", _P),
        ("e", _P),
        ("K", _I64),
        ("N", _I64),
        ("M", _I64),
        ("panels", _I64),
        ("flip", ctypes.c_int32),
        ("a_unsigned", ctypes.c_int32),
        ("by_rows", ctypes.c_int32),
    ]


@abi("gemm_call")
class _GemmCallTask(ctypes.Structure):
    _fields_ = [
        ("gemm", _GemmTask),
        ("e", _Epilogue),
        ("cuts", _P),
        ("parts", _I64),
        ("threads", _I64),
        ("out_kind", ctypes.c_int32),
    ]


@abi("batched_gemm")
class _BatchedGemm(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("a", "b", "y", "a_off", "b_off")]
        + [(name, _I64) for name in ("lda", "sk", "sn", "ldy", "M", "K", "N", "y_item")]
        + [("e", _Epilogue)]
        + [(name, ctypes.c_int32) for name in ("flip_a", "a_unsigned", "b_flip", "b_signed")]
        + [("za", ctypes.c_int32), ("zb", ctypes.c_int32)]
    )


@abi("implicit_conv")
class _ImplicitConvTask(ctypes.Structure):
    _fields_ = (
        [
            ("A", _Operand),
            ("e", _Epilogue),
            ("gemm", _GemmTask),
            ("cuts", _P),
            ("parts", _I64),
            ("threads", _I64),
        ]
        + [
            (name, _I64)
            for name in ("N", "C", "H", "W", "Hp", "Wp", "Cp", "r0", "c0", "pixels", "M")
        ]
        + [("zx", ctypes.c_int32), ("bare", ctypes.c_int32), ("lookup", _P), ("table", _P)]
        + [("in_nhwc", ctypes.c_int32), ("out_nhwc", ctypes.c_int32)]
    )


class Packed:
    """B (K x N bytes) in the GEMM's panel layout, as signed bytes (``signed``) or unsigned,
    with its column sums (of the packed values). Weights are packed once per session."""

    __slots__ = ("K", "N", "calls", "colsum", "data", "flipped", "signed")

    def __init__(self, b: np.ndarray, signed: bool, sums: bool = True):
        K, N = b.shape
        self.K, self.N, self.signed = K, N, signed
        self.flipped = (b.dtype == np.int8) != signed  # stored shifted by 128
        panels = -(-N // PANEL)
        self.data = np.empty(panels * -(-K // 4) * PANEL * 4, np.int8)
        self.colsum = np.empty(N, np.int32) if sums else None
        self.calls: dict = {}  # int8_gemm's set-ups with this B, by shape and parameters
        u = b.view(np.uint8)
        core.lib.onyx_pack_panels(
            _addr(u),
            u.strides[0],
            u.strides[1],
            K,
            N,
            int(self.flipped),
            int(signed),
            _addr(self.data),
            _addr(self.colsum),
        )


def pack(b: np.ndarray, a_dtype, a_zero_point=None) -> Packed:
    """B (2-D, int8 or uint8, any strides) packed for :func:`int8_gemm` with an A of a_dtype:
    as the other signedness than A where the two differ, else as int8 (A's bytes are then
    shifted as they are read). With B's column sums unless A's zero point (when known) makes
    them unneeded."""
    signed = _packs_signed(a_dtype, b.dtype)
    _, shift = _a_shift(a_dtype, signed)
    za = None if a_zero_point is None else np.asarray(a_zero_point, dtype=np.int64) - shift
    return Packed(b, signed, za is None or bool(za.any()))


# The kernel multiplies unsigned bytes (A) by signed ones (B). B is packed as the other
# signedness than A where the two differ, else as int8; a byte stored as the other type is
# shifted by 128 (an XOR of its top bit): a = a' + da, b = b' + db, with the shifts below.
def _packs_signed(a_dtype, b_dtype) -> bool:
    """Whether B is packed as signed bytes for an A of a_dtype."""
    return not (np.dtype(b_dtype) == np.uint8 and np.dtype(a_dtype) == np.int8)


def _a_shift(a_dtype, b_signed: bool) -> tuple[bool, int]:
    """(whether A's bytes are flipped as read, da) for a B packed as b_signed."""
    flip = (np.dtype(a_dtype) == np.int8) == b_signed
    return flip, ((-128 if np.dtype(a_dtype) == np.int8 else 128) if flip else 0)


def _b_shift(b_signed: bool, b_flipped: bool) -> int:
    """db for a B packed as b_signed, flipped or not."""
    return (128 if b_signed else -128) if b_flipped else 0


def int8_gemm_ok(k: int) -> bool:
    """Whether the native int8 GEMM can take a product with reduction length k."""
    return core.vnni and 0 < k <= MAX_K


def transpose_bytes(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """dst[...] = src.T for 2-D arrays of 1-byte elements of one type (numpy's transposing
    copy of bytes goes one element at a time); numpy's copy without the library or for rows
    that are not contiguous. Arrays of other shapes or types are an InvalidArgument."""
    if (
        src.ndim != 2
        or dst.shape != src.shape[::-1]
        or src.dtype.itemsize != 1
        or dst.dtype != src.dtype
    ):
        raise InvalidArgument(
            f"onyx native transpose_bytes: {src.dtype}{list(src.shape)} into "
            f"{dst.dtype}{list(dst.shape)} is no transpose of bytes"
        )
    (ss, one), (ds, dst_one) = src.strides, dst.strides
    if core.lib is None or one != 1 or dst_one != 1 or ss < src.shape[1] or ds < dst.shape[1]:
        dst[...] = src.T
        return dst
    status = core.lib.onyx_transpose_u8(_addr(src), *src.shape, ss, _addr(dst), ds)
    if status:
        core.check(status, "transpose_bytes")
    return dst


def transpose_words(src: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """dst[...] = src.T (dst: a new C-contiguous array when not given) for a 2-D array of
    4-byte elements (float32 / int32) in cache-sized blocks (numpy's transposing copy reads
    one element of each cache line it touches); numpy's copy without the library, or for an
    array that is not C-contiguous and aligned."""
    if src.ndim != 2:
        raise InvalidArgument(f"onyx native transpose_words: a {src.ndim}-D array is no matrix")
    if dst is None:
        dst = np.empty(src.shape[::-1], src.dtype)
    if dst.shape != src.shape[::-1] or dst.dtype != src.dtype:
        raise InvalidArgument(
            f"onyx native transpose_words: {src.dtype}{list(src.shape)} into "
            f"{dst.dtype}{list(dst.shape)} is no transpose"
        )
    flags, out = src.flags, dst.flags
    if (
        core.lib is None
        or src.dtype.itemsize != 4
        or not (flags.c_contiguous and flags.aligned and out.c_contiguous and out.aligned)
        or not src.size
    ):
        dst[...] = src.T
        return dst
    rows, cols = src.shape
    status = core.lib.onyx_transpose_u32(_addr(src), rows, cols, cols, _addr(dst), rows)
    if status:
        core.check(status, "transpose_words")
    return dst


def contiguous_bytes(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous array; a 4-D byte tensor seen through an NCHW <-> NHWC transpose
    (kernels/conv_nhwc.py's chains start and end with such views) is copied a plane at a time
    by the byte transpose (numpy's strided copy goes one element at a time)."""
    if x.flags.c_contiguous:
        return x
    if x.ndim == 4 and x.dtype.itemsize == 1 and core.lib is not None and x.size:
        N, A, B, C = x.shape
        out = np.empty(x.shape, x.dtype)
        nchw = x.transpose(0, 3, 1, 2)  # x NHWC over NCHW bytes
        if nchw.flags.c_contiguous:
            for n in range(N):
                transpose_bytes(nchw[n].reshape(C, A * B), out[n].reshape(A * B, C))
            return out
        nhwc = x.transpose(0, 2, 3, 1)  # x NCHW over NHWC bytes
        if nhwc.flags.c_contiguous:
            for n in range(N):
                transpose_bytes(nhwc[n].reshape(B * C, A), out[n].reshape(A, B * C))
            return out
    return np.ascontiguousarray(x)


def to_nhwc(x: np.ndarray, dst: np.ndarray) -> None:
    """dst[h, w, :C] = x[:, h, w] for one (C, H, W) image of bytes; dst is a (H, W, Cp) view
    of the same type whose rows and pixels may be strided (a padded buffer's interior); the
    library takes a contiguous x and such a view, numpy's copy anything else."""
    if x.ndim != 3 or dst.ndim != 3 or x.dtype.itemsize != 1 or dst.dtype != x.dtype:
        raise InvalidArgument(
            f"onyx native to_nhwc: {x.dtype}{list(x.shape)} into "
            f"{dst.dtype}{list(dst.shape)} is no (C, H, W) image of bytes into (H, W, Cp)"
        )
    C, H, W = x.shape
    if dst.shape[:2] != (H, W) or dst.shape[2] < C:
        raise InvalidArgument(
            f"onyx native to_nhwc: a {list(x.shape)} image does not fit {list(dst.shape)}"
        )
    row, pixel, one = dst.strides
    if (
        core.lib is None
        or not x.flags.c_contiguous
        or one != 1
        or pixel < dst.shape[2]
        or row < W * pixel
        or row % pixel
    ):
        dst[:, :, :C] = x.transpose(1, 2, 0)
        return
    status = core.lib.onyx_to_nhwc(_addr(x), C, H, W, _addr(dst), row // pixel, pixel)
    if status:
        core.check(status, "to_nhwc")


def _zero_point(z) -> int | np.ndarray:
    """A zero point as a Python int (one value, or per-row/column values all equal) or an
    int64 vector."""
    if isinstance(z, int):
        return z
    z = np.asarray(z).reshape(-1)
    if z.size == 1 or (z == z[0]).all():
        return int(z[0])
    return z.astype(np.int64)


def _any(z: int | np.ndarray) -> bool:
    """Whether a zero point of :func:`_zero_point` (less a shift) is nonzero anywhere: an
    int's truth without numpy's reduction, a few microseconds a call, several per set-up
    (a quantized CNN's first run makes one per conv)."""
    return bool(z) if type(z) is int else bool(z.any())


def row_sums(a: np.ndarray, flip: bool, signed: bool) -> np.ndarray:
    out = np.empty(a.shape[0], np.int32)
    core.lib.onyx_row_sums(
        _addr(a), a.strides[0], a.shape[0], a.shape[1], int(flip), int(signed), _addr(out)
    )
    return out


def int8_gemm(
    a: np.ndarray,
    b: Packed,
    a_zero_point=0,
    b_zero_point=0,
    *,
    row_bias: np.ndarray | None = None,
    col_bias: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    y_zero_point: np.ndarray | None = None,
    out: np.ndarray | None = None,
    gather: tuple[np.ndarray, np.ndarray, int] | None = None,
    float_out: bool = False,
) -> np.ndarray:
    """(A - a_zero_point) . (B - b_zero_point) [+ row_bias], exactly in int32; or, with
    ``scale``, requantized to y_zero_point's type (uint8 / int8): clamp(rint(acc * scale) +
    y_zero_point) as onnxruntime does.

    a: (M, K) int8 or uint8 with contiguous rows. a_zero_point: scalar or per row [M];
    b_zero_point: scalar or per column [N] (not both per row and per column). scale: scalar,
    per row (M, 1) or per column (N,), float32. row_bias: int32 [M], col_bias: int32 [N].
    out: where to write the (M, N) result (rows may be strided).

    gather = (rows, quads, K): A is not a matrix but read from the buffer a in place, row r's
    bytes k = 4q..4q+3 at byte offset rows[r] + quads[q] (int64 arrays; K a multiple of 4):
    an implicit-GEMM convolution. B's zero point must then be 0 (no row sums).

    float_out: the result is float32, float(acc) * scale (as numpy's cast, then product).

    What does not depend on A's data (the epilogue's corrections, the work split) is kept
    with b for the next call of the same shape and parameters: a node's weights meet the
    same ones on every run.
    """
    if gather is None and a.strides[1] != 1:  # (the kernel reads each row's bytes in a run)
        a = np.ascontiguousarray(a)
    M, K = a.shape if gather is None else (len(gather[0]), gather[2])
    params = (a_zero_point, b_zero_point, row_bias, col_bias, scale, y_zero_point)
    key = (a.dtype.char, M, K, gather is None, _threads.get(), float_out, *map(_value_key, params))
    call = b.calls.get(key)
    if call is None:
        call = _GemmCall(a, b, M, K, *params, gather is not None, float_out)
        if call.reusable:
            if len(b.calls) >= 8:  # (a model with ever new shapes)
                b.calls.clear()
            b.calls[key] = call
    if out is None:
        dtype = np.float32 if float_out else np.int32 if scale is None else y_zero_point.dtype
        out = np.empty((M, b.N), dtype)
    call(a, out, gather)
    return out


def int8_gemm_setup(
    a: np.ndarray,
    b: Packed,
    a_zero_point=0,
    b_zero_point=0,
    *,
    col_bias: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    y_zero_point: np.ndarray | None = None,
    float_out: bool = False,
):
    """:func:`int8_gemm`'s set-up for A's of a's shape and type, as ``run(a) -> result``
    for a caller to keep (a small product's call spent most of its time finding the kept
    set-up by its parameters' bytes), or None where the set-up depends on A's data (B's
    zero point not 0). The work split is the current thread count's."""
    M, K = a.shape
    call = _GemmCall(
        a,
        b,
        M,
        K,
        a_zero_point,
        b_zero_point,
        None,
        col_bias,
        scale,
        y_zero_point,
        False,
        float_out,
    )
    if not call.reusable:
        return None
    shape = (M, b.N)
    dtype = np.float32 if float_out else np.int32 if scale is None else y_zero_point.dtype
    whole = call.whole_call() or (lambda a, out: call(a, out, None))  # (one native call)

    def run(a: np.ndarray) -> np.ndarray:
        out = np.empty(shape, dtype)
        whole(a, out)
        return out

    return run


def _item_offsets(x: np.ndarray, batch: tuple) -> np.ndarray:
    """Byte offsets of the matrices of x broadcast to batch + x.shape[-2:], in C order."""
    x = np.broadcast_to(x, batch + x.shape[-2:])
    index = np.indices(batch, dtype=np.int64).reshape(len(batch), -1)
    return (index * np.array(x.strides[:-2], np.int64)[:, None]).sum(0)


class _Batched:
    """batched_int8_gemm's set-up for one pair of layouts (shapes, strides, types): the items'
    offsets, the task's sizes and signedness, the work split; a call fills in the data."""

    __slots__ = ("cuts", "da", "db", "keep", "shape", "task", "ways", "y_dtype")

    def __init__(self, a, b, y_dtype):
        (M, K), N = a.shape[-2:], b.shape[-1]
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        items = math.prod(batch)
        self.shape, self.y_dtype = batch + (M, N), np.dtype(y_dtype)
        b_signed = _packs_signed(a.dtype, b.dtype)  # (as pack() and _GemmCall choose)
        b_flip = (b.dtype == np.int8) != b_signed
        flip_a, self.da = _a_shift(a.dtype, b_signed)
        self.db = _b_shift(b_signed, b_flip)
        self.keep = (_item_offsets(a, batch), _item_offsets(b, batch))
        t = self.task = _BatchedGemm(
            None,
            None,
            None,
            *(_addr(o) for o in self.keep),
            a.strides[-2],
            b.strides[-2],
            b.strides[-1],
            N,
            M,
            K,
            N,
            M * N * self.y_dtype.itemsize,
        )
        t.e.ldo = t.e.ldc = N
        if self.y_dtype != np.int32:
            info = np.iinfo(self.y_dtype)
            t.e.lo, t.e.hi = info.min, info.max
        t.flip_a, t.a_unsigned, t.b_flip, t.b_signed = flip_a, b_signed, b_flip, b_signed
        self.ways = _ways(items * M * N * K, items)
        self.cuts = _even_cuts(items, self.ways)

    def __call__(self, a, b, za: int, zb: int, scale, y_zero_point) -> np.ndarray:
        y = np.empty(self.shape, self.y_dtype)
        t = _BatchedGemm.from_buffer_copy(self.task)
        t.a, t.b, t.y = _addr(a), _addr(b), _addr(y)
        t.za, t.zb = za - self.da, zb - self.db
        if scale is None:
            t.e.c = t.y
        else:
            s = np.asarray(scale, np.float32).reshape(-1)[:1].copy()
            t.e.out8, t.e.scale = t.y, _addr(s)
            t.e.zero_point = int(y_zero_point.reshape(-1)[0])
        _run(core.lib.batched_gemm_range, t, self.cuts, self.ways, "int8 GEMM")
        return y


_batched: dict = {}  # layouts -> _Batched


def batched_int8_gemm(
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: int = 0,
    b_zero_point: int = 0,
    scale=None,
    y_zero_point=None,
) -> np.ndarray:
    """(A_i - a_zero_point) . (B_i - b_zero_point) for every matrix of a (..., M, K) and b
    (..., K, N) (batch dimensions broadcast; both of data, as attention's products): exact
    int32, or with a one-value ``scale`` requantized to y_zero_point's type like
    :func:`int8_gemm`. One native call: each item packs its B in C, items go to threads;
    the set-up is kept per layout (a model meets the same ones every run)."""
    if a.strides[-1] != 1:
        a = np.ascontiguousarray(a)
    y_dtype = np.int32 if scale is None else y_zero_point.dtype
    key = (
        a.shape,
        a.strides,
        a.dtype.char,
        b.shape,
        b.strides,
        b.dtype.char,
        np.dtype(y_dtype).char,
        _threads.get(),
    )
    call = _batched.get(key)
    if call is None:
        if len(_batched) >= 64:  # (a model with ever new shapes)
            _batched.clear()
        call = _batched[key] = _Batched(a, b, y_dtype)
    return call(a, b, int(a_zero_point), int(b_zero_point), scale, y_zero_point)


def gathered_int8_gemm(
    a_dtype,
    b: Packed,
    M: int,
    K: int,
    a_zero_point: int = 0,
    *,
    col_bias=None,
    scale=None,
    y_zero_point=None,
    float_out: bool = False,
) -> _GemmCall:
    """:func:`int8_gemm`'s set-up for a gathered A of a_dtype (M x K; an implicit-GEMM conv),
    made once: ``call(buffer, out, (rows, quads, K))`` runs it. ``float_out``: float32
    results, their scale and bias given per call (``float_epilogue``)."""
    a = np.empty((0, K), a_dtype)  # (only its type matters: a gathered A needs no row sums)
    if float_out:
        scale = np.ones(1, np.float32)  # (a stand-in: the call's scale replaces it)
    return _GemmCall(
        a, b, M, K, a_zero_point, 0, None, col_bias, scale, y_zero_point, True, float_out, CONV_MACS
    )


def implicit_conv(
    gemm: _GemmCall,
    gather,
    x_shape,
    padded,
    corner,
    zero_point: int,
    bare: bool,
    table: np.ndarray | None = None,
    *,
    in_nhwc: bool = False,
    out_nhwc: bool = False,
):
    """A requantizing implicit-GEMM conv (kernels/quantized_conv.py's _ImplicitConv) in one native call:
    ``run(x, out)`` packs the contiguous image(s) x into a padded NHWC buffer (``padded`` (N,
    Hp, Wp, Cp), x's corner at ``corner``; zero-point filled unless ``bare``), runs the
    gathered GEMM into a (pixels x M) buffer (both the library's own), maps its bytes through
    ``table`` (256 bytes, by bit pattern: an activation's) and transposes it to out (N, M,
    pixels). ``in_nhwc`` / ``out_nhwc``: x is (N, H, W, C) / out is (N, pixels, M), the
    channels-last layout of a chain of quantized convs (kernels/conv_nhwc.py): then x is
    copied by rows (or read in place where it is the padded buffer already: ``bare``) and
    the GEMM writes out directly."""
    rows, quads, _ = gather
    N, C, H, W = x_shape
    c = _ImplicitConvTask()
    c.A = _Operand(None, 0, _addr(rows), _addr(quads))
    c.e, c.gemm = gemm.epilogue, gemm.task  # (copies)
    c.cuts, c.parts, c.threads = _addr(gemm.cuts), len(gemm.cuts) - 1, gemm.ways
    c.N, c.C, c.H, c.W = N, C, H, W
    c.Hp, c.Wp, c.Cp = padded[1:]
    c.r0, c.c0 = corner
    c.pixels, c.M = len(rows) // N, gemm.task.N
    c.zx, c.bare = zero_point, int(bare)
    if table is not None:
        table = np.ascontiguousarray(table).view(np.uint8)
        c.lookup, c.table = core.lib.lookup, _addr(table)
    c.in_nhwc, c.out_nhwc = int(in_nhwc), int(out_nhwc)
    keep = (gemm, rows, quads, table)  # what c points at

    task, call, check = ctypes.byref(c), core.lib.onyx_implicit_conv, core.check
    padded_bytes = math.prod(padded)

    def run(x, out, work=None, _keep=keep):
        """work: None (the library's own buffers) or a byte buffer of run.work_bytes."""
        if work is None:
            status = call(task, _addr(x), None, None, _addr(out))
        else:
            at = _addr(work)
            status = call(task, _addr(x), at, at + padded_bytes, _addr(out))
        if status:
            check(status, "integer conv")

    def into_new(shape: tuple, dtype, work=None):
        """``call(x) -> out``: run(x, a fresh out of ``shape`` and ``dtype``) in one frame (a
        bound step's; the caller checks the shape and type); ``work()`` gives its byte buffer
        of run.work_bytes at each call (None: the library's own buffers)."""
        empty = np.empty

        def call_new(x, _keep=keep):
            out = empty(shape, dtype)
            at = None if work is None else _addr(work())
            rows_at = None if at is None else at + padded_bytes
            status = call(task, _addr(x), at, rows_at, _addr(out))
            if status:
                check(status, "integer conv")
            return out

        return call_new

    run.work_bytes = padded_bytes + len(rows) * c.M  # the padded input, then the GEMM's result
    run.into_new = into_new
    return run


def __getattr__(name: str):
    """NhwcDepthwise, made when first asked for: it is the depthwise family's IntPlaneConv
    run by this family's kernel, and importing that family with this one cost a cold start
    that runs no depthwise conv (a transformer's products, a ResNet's convs) 0.4 ms."""
    if name != "NhwcDepthwise":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = _nhwc_depthwise()
    globals()[name] = cls
    return cls


def _nhwc_depthwise() -> type | None:
    """The NhwcDepthwise class, or None where the depthwise family is off (its structs
    disagree with the library): conv_nhwc.py then runs its NCHW kernel."""
    from . import depthwise

    if depthwise.__name__ in core.families_off:
        return None
    IntPlaneConv, _DwGeometry, _DwOutput = (
        depthwise.IntPlaneConv,
        depthwise._DwGeometry,  # noqa: SLF001
        depthwise._DwOutput,  # noqa: SLF001
    )
    _int_output, _IntConvTask = depthwise._int_output, depthwise._IntConvTask  # noqa: SLF001

    class NhwcDepthwise(IntPlaneConv):
        """The depthwise integer conv of channels-last bytes x (N, H, W, C) minus x_zero_point
        with wc ((kh, kw, C) int16: the weights minus their zero points) (+ int32 bias [C]),
        requantized with ``scale`` ([C] float32) to y_zero_point's type and mapped through
        ``table`` (256 bytes) if given, to a channels-last output (N, OH, OW, C)
        (gemm_i8.c's onyx_depthwise_nhwc_i8). Set up once per input shape and constants, and
        called as IntPlaneConv."""

        __slots__ = ()

        def __init__(
            self,
            x_shape,
            x_dtype,
            x_zero_point: int,
            wc,
            bias,
            geometry,
            scale,
            y_zero_point,
            table,
        ):
            (N, H, W, C), (out_shape, strides, dilations, begin) = x_shape, geometry
            kh, kw = wc.shape[:2]
            self.g = _DwGeometry(C, H, W, 1, *out_shape, kh, kw, *strides, *dilations, *begin, C)
            self.shape = (N, *out_shape, C)
            self.keep = [np.ascontiguousarray(wc.reshape(kh * kw, C), np.int16)]
            self.out = _DwOutput()
            self.dtype = _int_output(self.out, self.keep, C, bias, scale, y_zero_point, table)
            rows = N * out_shape[0]
            self.ways = _ways(math.prod(self.shape) * kh * kw, rows, DEPTHWISE_MACS)
            self.cuts = _even_cuts(rows, self.ways)
            self.task = _IntConvTask(
                core.lib.depthwise_nhwc_i8,
                None,
                _addr(self.keep[0]),
                ctypes.addressof(self.g),
                None,
                int(x_dtype == np.int8),
                int(x_zero_point),
            )

    NhwcDepthwise.__qualname__ = "NhwcDepthwise"
    return NhwcDepthwise


def _value_key(v):
    if v is None or isinstance(v, int):
        return v
    v = np.asarray(v)
    return v.dtype.char, v.shape, v.tobytes()


def _split(b: Packed, M: int, K: int, flip_a: bool, a_unsigned: bool, least: int = _PARALLEL_MACS):
    """(the GEMM task of an M-row A with b, its cuts, its threads): threads take blocks of
    rows (whole tiles) or of panels. Panels where they split evenly (or are many) or A has
    few rows: 5 panels on 2 threads gave one 3/5 of the work, and threads writing parts of
    the same output rows share their cache lines."""
    N = b.N
    panels = -(-N // PANEL)
    ways = _ways(M * N * K, max(panels, -(-M // 6)), least)
    by_panels = panels >= 2 * ways and (panels % ways == 0 or panels >= 8 * ways)
    by_rows = not (by_panels or M < 12 * ways)
    if by_rows:
        cuts = np.array([min(M, -(-M * i // ways // 6) * 6) for i in range(ways + 1)], np.int64)
    else:
        cuts = _even_cuts(panels, ways)
    task = _GemmTask(
        None, _addr(b.data), None, K, N, M, panels, int(flip_a), int(a_unsigned), int(by_rows)
    )
    return task, cuts, ways


class _GemmCall:
    """What one int8_gemm call sets up before the kernel runs: the epilogue's zero-point
    corrections, bias and requantization, and the work split between threads. ``reusable``
    when none of it depends on A's data (no row sums of A: B's zero point is 0)."""

    def __init__(
        self,
        a,
        b,
        M,
        K,
        a_zero_point,
        b_zero_point,
        row_bias,
        col_bias,
        scale,
        y_zero_point,
        gathered: bool,
        float_out: bool = False,
        least: int = _PARALLEL_MACS,
    ):
        N = b.N
        a_signed = not b.signed  # the kernel multiplies unsigned by signed bytes
        # (a - za) = a' - ZA with ZA = za - da, and (b - zb) = b' - ZB with ZB = zb - db
        flip_a, da = _a_shift(a.dtype, b.signed)
        db = _b_shift(b.signed, b.flipped)
        za = _zero_point(a_zero_point) - da
        zb = _zero_point(b_zero_point) - db
        self.reusable = not _any(zb)
        # S' - ZB_j rs'_r - ZA_r cs'_j + K ZA_r ZB_j. Int32 arithmetic wraps: the terms may
        # overflow, their sum (the exact result) does not.
        row_off = col_off = row_f = col_f = None
        if _any(za) and b.colsum is None:
            raise InvalidArgument(
                "B was packed without its column sums, which A's zero point needs"
            )
        if not self.reusable and gathered:
            raise InvalidArgument("a gathered A takes no B zero point")
        if type(za) is int:
            if za:
                col_off = K * za * zb - za * b.colsum.astype(np.int64)
            elif type(zb) is not int:  # (a scalar K * 0 * zb adds nothing)
                col_off = K * za * zb
            if not self.reusable:
                rs = row_sums(a, flip_a, a_signed).astype(np.int64)
                if type(zb) is int:
                    row_off = -zb * rs
                else:
                    row_f, col_f = rs, -zb
        else:
            if type(zb) is not int:
                raise InvalidArgument("per-row and per-column zero points together")
            rs = row_sums(a, flip_a, a_signed).astype(np.int64) if zb else 0
            row_off = K * za * zb - zb * rs
            row_f, col_f = -za, b.colsum
        if row_bias is not None:
            row_off = row_bias.astype(np.int64) + (0 if row_off is None else row_off)
        if col_bias is not None:
            col_off = col_bias.astype(np.int64) + (0 if col_off is None else col_off)
        e = self.epilogue = _Epilogue()
        self.keep = []  # the arrays the epilogue points at
        for field, arr, size in (
            ("row_off", row_off, M),
            ("col_off", col_off, N),
            ("row_f", row_f, M),
            ("col_f", col_f, N),
        ):
            if arr is not None:
                arr = np.asarray(arr)
                if arr.shape != (size,):  # (np.broadcast_to's checks: microseconds a call)
                    arr = np.broadcast_to(arr, (size,))
                arr = arr.astype(np.int32)  # (wraps: see above)
                self.keep.append(arr)
                setattr(e, field, _addr(arr))
        if float_out and scale is None:
            raise InvalidArgument("a float result needs its scale")
        self.requantize = scale is not None and not float_out
        self.float_out = float_out
        if scale is not None:
            s = np.ascontiguousarray(scale, dtype=np.float32)
            self.keep.append(s)
            e.scale = _addr(s)
            e.scale_rs = 1 if s.ndim == 2 and s.shape[0] == M and M > 1 else 0
            e.scale_cs = 1 if s.size > 1 and not e.scale_rs else 0
        if self.requantize:
            e.lo, e.hi = core.int_range(y_zero_point.dtype)
            e.zero_point = int(y_zero_point.reshape(-1)[0])
        self.packed = b  # (the task holds only its address: a B made for this call lives on)
        # (a gathered A's other zero points, per call: see _col_off_for)
        self._da, self._col_bias, self._offsets = da, col_bias, {}
        self.task, self.cuts, self.ways = _split(b, M, K, flip_a, not a_signed, least)

    def whole_call(self):
        """``run(a, out)``: the call for A's rows (unit column stride) and a C-contiguous
        ``out`` as one native call (onyx_gemm_call: the task and epilogue copied there), for
        a set-up kept by its caller; None without that entry point."""
        entry = getattr(core.lib, "gemm_call", None)
        if entry is None or len(self.cuts) < 2:  # (no rows: no parts, which the entry refuses)
            return None
        t = _GemmCallTask()
        t.gemm, t.e = self.task, self.epilogue  # (copies; their arrays held by self)
        cuts = np.ascontiguousarray(self.cuts, np.int64)
        t.cuts, t.parts, t.threads = _addr(cuts), len(cuts) - 1, self.ways
        t.out_kind = 2 if self.float_out else 1 if self.requantize else 0
        address, unit, held = ctypes.addressof(t), 1 if t.out_kind == 1 else 4, (self, cuts)

        def run(a: np.ndarray, out: np.ndarray, _held=held, K=self.task.K) -> None:
            if a.strides[0] < K:  # (a broadcast row, rows in reverse: the entry reads rows of
                self(a, out, None)  # at least K bytes; the per-call path takes any stride)
                return
            status = entry(address, _addr(a), a.strides[0], _addr(out), out.strides[0] // unit)
            if status:
                core.check(status, "int8 GEMM")

        run.task = t  # (the struct lives as long as the call)
        return run

    def _col_off_for(self, a_zero_point: int) -> np.ndarray:
        """The column offsets of a gathered A with another scalar zero point than the set-up's
        (B's is 0): col_bias - ZA colsum, wrapping to int32 as the set-up's (kept per value:
        a dynamically quantized input's zero point changes from call to call)."""
        hit = self._offsets.get(a_zero_point)
        if hit is None:
            if self.packed.colsum is None or self.epilogue.row_off or self.epilogue.col_f:
                raise InvalidArgument("a per-call A zero point needs B's column sums and no rows")
            off = -(a_zero_point - self._da) * self.packed.colsum.astype(np.int64)
            if self._col_bias is not None:
                off += self._col_bias.astype(np.int64)
            hit = off.astype(np.int32)  # (wraps: see __init__)
            if len(self._offsets) >= 256:
                self._offsets.clear()
            self._offsets[a_zero_point] = hit
        return hit

    def __call__(
        self,
        a: np.ndarray,
        out: np.ndarray,
        gather,
        rank1=None,
        float_epilogue=None,
        a_zero_point: int | None = None,
    ) -> None:
        """``rank1``: (row_f [M], col_f [N]) int32, added as row_f[r] * col_f[j] to the sums
        (kernels/integer_conv.py's window sums; only where the set-up has none of its own).
        ``float_epilogue``: (scale, bias or None), float32 contiguous, one value or one per
        column: a float result's float(acc) * scale [+ bias], for a set-up with float_out.
        ``a_zero_point``: a gathered A's scalar zero point for this call (the set-up's else)."""
        e = _Epilogue.from_buffer_copy(self.epilogue)
        if a_zero_point is not None:
            e.col_off = _addr(self._col_off_for(a_zero_point))
        if float_epilogue is not None:
            scale, bias = float_epilogue
            _check_float_epilogue(self, scale, bias)
            e.scale, e.scale_rs, e.scale_cs = _addr(scale), 0, int(scale.size > 1)
            e.bias = _addr(bias)
        if rank1 is not None:
            row_f, col_f = rank1
            _check_rank1(self, row_f, col_f)
            e.row_f, e.col_f = _addr(row_f), _addr(col_f)
        if self.float_out:
            e.outf, e.ldf = _addr(out), out.strides[0] // 4
        elif self.requantize:
            e.out8, e.ldo = _addr(out), out.strides[0]
        else:
            e.c, e.ldc = _addr(out), out.strides[0] // 4
        if gather is None:
            operand = _Operand(_addr(a), a.strides[0], None, None)
        else:
            operand = _Operand(_addr(a), 0, _addr(gather[0]), _addr(gather[1]))
        task = _GemmTask.from_buffer_copy(self.task)
        task.A, task.e = ctypes.addressof(operand), ctypes.addressof(e)
        _run(core.lib.gemm_range, task, self.cuts, self.ways)


def _refuse(what: str) -> None:
    raise InvalidArgument(f"onyx native int8 GEMM: {what}")


def _check_float_epilogue(call: _GemmCall, scale: np.ndarray, bias) -> None:
    """The kernel reads one scale or N of them, and N biases, as float32: anything else is
    refused (not an assert: ``python -O`` would let it through to C)."""
    n = call.task.N
    if not call.float_out:
        _refuse("a float epilogue for a set-up without a float result")
    if scale.dtype != np.float32 or scale.size not in (1, n) or not scale.flags.c_contiguous:
        _refuse(f"a scale of {scale.size} {scale.dtype} values for {n} columns")
    if bias is not None and (
        bias.dtype != np.float32 or bias.size != n or not bias.flags.c_contiguous
    ):
        _refuse(f"a bias of {bias.size} {bias.dtype} values for {n} columns")


def _check_rank1(call: _GemmCall, row_f: np.ndarray, col_f: np.ndarray) -> None:
    """The kernel reads M int32 row factors and N column factors."""
    m, n = call.task.M, call.task.N
    if call.epilogue.row_f:
        _refuse("rank-1 terms for a set-up that has its own")
    for name, f, size in (("row", row_f, m), ("column", col_f, n)):
        if f.dtype != np.int32 or f.shape != (size,) or not f.flags.c_contiguous:
            _refuse(f"{name} factors {f.dtype}{list(f.shape)} where {size} int32 are read")


@abi("dynamic_matmul")
class _DynamicMatMulTask(ctypes.Structure):
    _fields_ = [
        ("colsum", _P),
        ("zb_neg", _P),
        ("b_scale", _P),
        ("b_scales", _I64),
        ("gemm", _GemmTask),
        ("e", _Epilogue),
        ("cuts", _P),
        ("parts", _I64),
        ("threads", _I64),
        ("with_rows", ctypes.c_int32),
    ]


#: onyx_dynamic_matmul's status for an input it leaves to the numpy kernel (a NaN, an infinity).
_DYNAMIC_FALLBACK = 4


class DynamicMatMul:
    """DynamicQuantizeMatMul with a constant B in one native call (gemm_i8.c's
    onyx_dynamic_matmul): A quantized as DynamicQuantizeLinear does, the int8 GEMM, and
    float(acc) * (a_scale * b_scale) [+ bias] in its epilogue, to the numpy kernel's bits.
    Made once per weight and parameters; the task of each row count is kept. ``relu``: the
    epilogue applies max(v, 0) last (DynamicQuantizeMatMulRelu)."""

    def __init__(self, b: np.ndarray, b_scale, b_zero_point, bias, relu: bool = False):
        K, N = b.shape
        self.K, self.N = K, N
        self.packed = pack(b, np.uint8)  # (with column sums: A's zero point is data)
        db = _b_shift(self.packed.signed, self.packed.flipped)
        zb = np.zeros(N, np.int64) if b_zero_point is None else np.asarray(b_zero_point)
        self.zb_neg = np.ascontiguousarray(
            -(np.broadcast_to(zb.astype(np.int64), (N,)) - db), np.int32
        )
        self.b_scale = np.ascontiguousarray(np.asarray(b_scale, np.float32).reshape(-1))
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        self.relu = relu
        self.tasks: dict = {}

    def _task(self, M: int) -> tuple:
        flip_a, _ = _a_shift(np.uint8, self.packed.signed)
        gemm, cuts, ways = _split(self.packed, M, self.K, flip_a, True)
        e = _Epilogue()
        e.ldf, e.bias = self.N, _addr(self.bias)
        e.scale_cs, e.relu = int(self.b_scale.size > 1), int(self.relu)
        t = _DynamicMatMulTask(
            _addr(self.packed.colsum),
            _addr(self.zb_neg),
            _addr(self.b_scale),
            self.b_scale.size,
            gemm,
            e,
            _addr(cuts),
            len(cuts) - 1,
            ways,
            int(bool(self.zb_neg.any())),
        )
        return ctypes.byref(t), (t, cuts)  # (the task, read only: threads share it)

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        """x: (M, K) contiguous float32 -> (M, N) float32, or None (a NaN or an infinity in x:
        the numpy kernel's paths decide those)."""
        key = (x.shape[0], _threads.get())
        hit = self.tasks.get(key)
        if hit is None:
            if len(self.tasks) >= 16:  # (a model fed ever new shapes)
                self.tasks.clear()
            hit = self.tasks[key] = self._task(x.shape[0])
        y = np.empty((x.shape[0], self.N), np.float32)
        status = core.lib.onyx_dynamic_matmul(hit[0], _addr(x), _addr(y))
        if status:
            if status == _DYNAMIC_FALLBACK:
                return None
            core.check(status, "dynamic quantized matmul")
        return y


def dynamic_quantize(x: np.ndarray) -> tuple | None:
    """DynamicQuantizeLinear of contiguous float32 x (at least one value) in one native call
    (gemm_i8.c's onyx_dynamic_quantize, the arithmetic DynamicMatMul uses): (y uint8, scale
    float32 0-d, zero point uint8 0-d) to the numpy kernel's bits; None without the VNNI
    library or for an x with a NaN or an infinity (the numpy kernel decides those)."""
    call = _dynamic_quantize
    if call is None:
        return None
    y = np.empty(x.shape, np.uint8)
    scale, zero_point = np.empty((), np.float32), np.empty((), np.uint8)
    status = call(_addr(x), x.size, _addr(y), _addr(scale), _addr(zero_point))
    if status:
        if status == _DYNAMIC_FALLBACK:
            return None
        core.check(status, "DynamicQuantizeLinear")
    return y, scale, zero_point


_dynamic_quantize = None  # (bound with the library)


def bind(lib, isa: int) -> None:
    lib.onyx_pack_panels.restype = None
    lib.onyx_pack_panels.argtypes = [_P, _I64, _I64, _I64, _I64, _INT, _INT, _P, _P]
    lib.onyx_row_sums.restype = None
    lib.onyx_row_sums.argtypes = [_P, _I64, _I64, _I64, _INT, _INT, _P]
    lib.onyx_transpose_u8.restype = _INT
    lib.onyx_transpose_u8.argtypes = [_P, _I64, _I64, _I64, _P, _I64]
    lib.onyx_transpose_u32.restype = _INT
    lib.onyx_transpose_u32.argtypes = [_P, _I64, _I64, _I64, _P, _I64]
    lib.onyx_to_nhwc.restype = _INT
    lib.onyx_to_nhwc.argtypes = [_P, _I64, _I64, _I64, _P, _I64, _I64]
    lib.depthwise_nhwc_i8 = core.address(lib.onyx_depthwise_nhwc_i8)
    vnni = bool(isa & core.ISA_VNNI)
    lib.gemm_range = range_of(lib, "gemm") if vnni else None
    lib.batched_gemm_range = range_of(lib, "batched_gemm") if vnni else None
    lib.gemm_call = None
    if vnni:
        lib.gemm_call = lib.onyx_gemm_call
        lib.gemm_call.restype = _INT
        lib.gemm_call.argtypes = [_P, _P, _I64, _P, _I64]
        lib.onyx_dynamic_matmul.restype = _INT
        lib.onyx_dynamic_matmul.argtypes = [_P, _P, _P]
        lib.onyx_implicit_conv.restype = _INT
        lib.onyx_implicit_conv.argtypes = [_P, _P, _P, _P, _P]
        lib.onyx_dynamic_quantize.restype = _INT
        lib.onyx_dynamic_quantize.argtypes = [_P, _I64, _P, _P, _P]
    global _dynamic_quantize
    _dynamic_quantize = lib.onyx_dynamic_quantize if vnni else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
