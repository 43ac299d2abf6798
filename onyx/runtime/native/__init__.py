"""onyx's optional native kernels (kernels.c, conv_f32.c, gemv.c, rows.c, resize.c,
rnn.c, trees.c, window.c, on pool.c's threads), loaded with ctypes.

setup.py compiles them into ``_kernels`` (an optional extension: the install goes on without it
where there is no C compiler). onyx works the same without it, only slower: every caller keeps
its numpy path and asks whether the native one applies first (``int8_gemm_ok``,
``conv_f32_ok``, ``bilinear_ok``, ``recurrence_ok``, ...).

``ONYX_NATIVE=0`` in the environment turns the library off (the tests run both ways).

The int8 GEMM needs AVX512-VNNI (x86-64 from Intel Ice Lake / AMD Zen 4 on). It is exact:
int32 accumulation of 8-bit products, as onnxruntime's, for K up to 2**15 (beyond, int32
sums of 255 * 255 products could overflow and the numpy path is used).

The other kernels serve what numpy's BLAS does not: depthwise convs (float32 and integer;
16 channels per vector on AVX-512, one plane at a time elsewhere), the float32 implicit-GEMM
conv (conv_f32.c), the few-input-channel stem conv, HardSwish, byte lookups, QLinearAdd/Mul,
QuantizeLinear, global average pooling and layer normalization (rows.c), bilinear and nearest
Resize (resize.c), the LSTM / GRU recurrences (rnn.c), tree ensembles' descent (trees.c) and
2-D max / average pooling (window.c). All but the portable depthwise, elementwise, row, tree
and pooling kernels need AVX-512.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import importlib.machinery
import math
import os
from pathlib import Path

import numpy as np

from ...errors import InvalidArgument

__all__ = [
    "available",
    "batched_int8_gemm",
    "bilinear_f32",
    "bilinear_ok",
    "BYTES",
    "conv_f32_ok",
    "conv_small_f32",
    "conv_small_ok",
    "depthwise_activates",
    "depthwise_f32",
    "IntPlaneConv",
    "depthwise_ok",
    "FloatConv",
    "FloatGemv",
    "gathered_int8_gemm",
    "gemv_ok",
    "erf_f32",
    "gru_f32",
    "hard_sigmoid_f32",
    "hardswish_f32",
    "implicit_conv",
    "int8_gemm",
    "int8_gemm_ok",
    "lookup8",
    "lstm_f32",
    "norm_rows_f32",
    "pack",
    "pack_conv_f32",
    "Packed",
    "qlinear_binary",
    "quantize_f32",
    "recurrence_ok",
    "repeat2d_4byte",
    "thread_setting",
    "threads",
]

#: The GEMM's operand types (and its requantized outputs').
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
#: Longest reduction the int32 accumulators hold exactly: K * 255 * 255 < 2**31.
MAX_K = 1 << 15
#: Columns per packed panel (kernels.c's NR): threads split the work at panel boundaries.
PANEL = 32
#: A product of fewer multiply-adds runs on one thread: it takes the kernel a few microseconds,
#: about what handing work to the pool's threads costs (more when they have gone to sleep).
_PARALLEL_MACS = 1 << 20

#: The same for the depthwise conv, whose multiply-adds are about 8x slower (float lanes,
#: one product per lane).
_DEPTHWISE_MACS = _PARALLEL_MACS // 8

_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


class _Operand(ctypes.Structure):
    _fields_ = [("a", _P), ("lda", _I64), ("rows", _P), ("quads", _P)]


class _DwGeometry(ctypes.Structure):
    _fields_ = [(name, _I64) for name in ("C", "H", "W", "mult", "OH", "OW", "kh", "kw", "sh",
                                          "sw", "dh", "dw", "top", "left", "M", "act")] + [
        ("alpha", ctypes.c_float), ("beta", ctypes.c_float), ("band", _I64)]  # fmt: skip


class _DwOutput(ctypes.Structure):
    _fields_ = [("bias", _P), ("y32", _P), ("y8", _P), ("scale", _P),
                ("zero_point", ctypes.c_int32), ("lo", ctypes.c_int32), ("hi", ctypes.c_int32)]  # fmt: skip


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
    ]


class _GemmTask(ctypes.Structure):
    _fields_ = [("A", _P), ("packed", _P), ("e", _P), ("K", _I64), ("N", _I64), ("M", _I64),
                ("panels", _I64), ("flip", ctypes.c_int32), ("a_unsigned", ctypes.c_int32),
                ("by_rows", ctypes.c_int32)]  # fmt: skip


class _BatchedGemm(ctypes.Structure):  # kernels.c's batched_gemm
    _fields_ = (
        [(name, _P) for name in ("a", "b", "y", "a_off", "b_off")]
        + [(name, _I64) for name in ("lda", "sk", "sn", "ldy", "M", "K", "N", "y_item")]
        + [("e", _Epilogue)]
        + [(name, ctypes.c_int32) for name in ("flip_a", "a_unsigned", "b_flip", "b_signed")]
        + [("za", ctypes.c_int32), ("zb", ctypes.c_int32)]
    )


class _Bilinear(ctypes.Structure):  # resize.c's bilinear
    _fields_ = (
        [("x", _P), ("y", _P)]
        + [(n, _I64) for n in ("H", "W", "OH", "OW")]
        + [(n, _P) for n in ("y_lo", "y_hi", "x_lo", "x_hi", "wy_lo", "wy_hi", "wx_lo", "wx_hi")]
    )


class _Repeat2d(ctypes.Structure):  # resize.c's repeat2d
    _fields_ = [("x", _P), ("y", _P)] + [(n, _I64) for n in ("H", "W", "kh", "kw")]


class _Recurrence(ctypes.Structure):  # rnn.c's recurrence
    _fields_ = [(n, _P) for n in ("xs", "rt", "h0", "c0", "rbh", "ys", "cs")] + [
        (n, _I64) for n in ("steps", "dirs", "batch", "H", "reverse")
    ]


class _ImplicitConvTask(ctypes.Structure):
    _fields_ = [("A", _Operand), ("e", _Epilogue), ("gemm", _GemmTask), ("cuts", _P),
                ("parts", _I64), ("threads", _I64)] + [
        (name, _I64) for name in ("N", "C", "H", "W", "Hp", "Wp", "Cp", "r0", "c0", "pixels", "M")
    ] + [("zx", ctypes.c_int32), ("bare", ctypes.c_int32)]  # fmt: skip


class _FloatConvTask(ctypes.Structure):
    _fields_ = [("fn", _P), ("x", _P), ("w", _P), ("bias", _P), ("y", _P), ("g", _P)]


class _IntConvTask(ctypes.Structure):
    _fields_ = [("fn", _P), ("x", _P), ("wc", _P), ("g", _P), ("o", _P),
                ("x_signed", ctypes.c_int32), ("x_zp", ctypes.c_int32)]  # fmt: skip


class _LookupTask(ctypes.Structure):
    _fields_ = [("fn", _P), ("x", _P), ("table", _P), ("size", _I64), ("y", _P)]


class _QBinary(ctypes.Structure):
    _fields_ = [(name, ctypes.c_float) for name in ("za", "zb", "ka", "kb", "zy")] + [
        (name, ctypes.c_int32) for name in ("is_signed", "multiply", "lo", "hi")
    ]


class _QBinaryTask(ctypes.Structure):
    _fields_ = [("a", _P), ("b", _P), ("inner", _I64), ("mid", _I64), ("bn", _I64), ("p", _P),
                ("y", _P)]  # fmt: skip


class _NormRows(ctypes.Structure):  # rows.c's norm_rows
    _fields_ = [(name, _P) for name in ("x", "scale", "bias", "y")] + [
        ("channels", _I64),
        ("spatial", _I64),
        ("epsilon", ctypes.c_float),
    ]


class _LayerNorm(ctypes.Structure):  # rows.c's layer_norm
    _fields_ = [(name, _P) for name in ("x", "scale", "bias", "y", "mean", "inv_std")] + [
        ("size", _I64),
        ("epsilon", ctypes.c_float),
    ]


class _GlobalPool(ctypes.Structure):  # rows.c's global_pool
    _fields_ = [("x", _P), ("y", _P), ("size", _I64), ("scale", ctypes.c_float)] + [
        (name, ctypes.c_int32) for name in ("x_zp", "y_zp", "is_signed")
    ]


class _QuantizeTask(ctypes.Structure):
    _fields_ = [("x", _P), ("scale", ctypes.c_float), ("zero_point", ctypes.c_int32),
                ("is_signed", ctypes.c_int32), ("y", _P)]  # fmt: skip


class _BatchNorm(ctypes.Structure):  # rows.c's batch_norm
    _fields_ = [(name, _P) for name in ("x", "y", "mean", "mult", "bias")] + [
        ("channels", _I64), ("size", _I64)
    ]  # fmt: skip


class _Pool2d(ctypes.Structure):  # window.c's pool2d
    _fields_ = [("x", _P), ("y", _P)] + [
        (name, _I64)
        for name in ("H W OH OW kh kw sh sw dh dw top left bottom right average include_pad "
                     "by_columns").split()
    ]  # fmt: skip


class _ForestTask(ctypes.Structure):  # trees.c's forest_task
    _fields_ = [(name, _P) for name in ("x", "roots", "feature", "threshold", "child",
                                        "nan_outcome", "states")] + [
        (name, _I64) for name in ("nf", "trees", "depth", "is_double")
    ]  # fmt: skip


class _ForestSumTask(ctypes.Structure):  # trees.c's forest_sum_task
    _fields_ = [(name, _P) for name in ("states", "weights", "scores")] + [
        (name, _I64) for name in ("trees", "targets", "is_double")
    ]


class _UnaryTask(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P)]


class _GemvF32(ctypes.Structure):  # gemv.c's gemv_f32
    _fields_ = (
        [(name, _P) for name in ("x", "w", "c", "z", "y")]
        + [(name, _I64) for name in ("M", "K", "N", "trans")]
        + [("alpha", ctypes.c_float), ("beta", ctypes.c_float), ("act", ctypes.c_int32)]
        + [("act_alpha", ctypes.c_float), ("act_beta", ctypes.c_float)]
    )


class _ConvF32(ctypes.Structure):  # conv_f32.c's conv_f32
    _fields_ = (
        [(name, _P) for name in ("x", "w", "bias", "z", "y", "cols")]
        + [(name, _I64) for name in "N C H W M OH OW kh kw sh sw dh dw top left".split()]
        + [(name, _I64) for name in ("group", "kc", "strips", "per_part", "blocks")]
        + [("act", ctypes.c_int32), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]
    )


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_kernels{suffix}"
        if path.exists():
            return path
    return None


#: Why the library is or is not in use (status()).
_why = ""


def _load():
    global _why
    if os.environ.get("ONYX_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        _why = "off: ONYX_NATIVE=0"
        return None, False
    path = _library_path()
    if path is None:
        _why = "not built (no C compiler at install?): numpy kernels"
        return None, False
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:  # a build for another platform, a missing runtime library, ...
        _why = f"not loadable ({e}): numpy kernels"
        return None, False
    _why = "loaded"
    lib.onyx_caps.restype = _INT
    lib.onyx_caps.argtypes = []
    lib.onyx_pack_panels.restype = None
    lib.onyx_pack_panels.argtypes = [_P, _I64, _I64, _I64, _I64, _INT, _INT, _P, _P]
    lib.onyx_row_sums.restype = None
    lib.onyx_row_sums.argtypes = [_P, _I64, _I64, _I64, _INT, _INT, _P]
    lib.onyx_transpose_u8.restype = None
    lib.onyx_transpose_u8.argtypes = [_P, _I64, _I64, _I64, _P, _I64]
    lib.onyx_to_nhwc.restype = None
    lib.onyx_to_nhwc.argtypes = [_P, _I64, _I64, _I64, _P, _I64, _I64]
    # onyx_parallel(range, task, cuts, parts, threads) runs a kernel's parts on pool.c's threads
    lib.onyx_parallel.restype = _INT
    lib.onyx_parallel.argtypes = [_P, _P, _P, _I64, _I64]
    lib.onyx_pool_threads.restype = _INT
    lib.onyx_pool_threads.argtypes = []
    caps = lib.onyx_caps()
    vnni = bool(caps & 1)
    # (depthwise float, depthwise integer, small conv, channels per block of work)
    kernels = (lib.onyx_depthwise_f32, lib.onyx_depthwise_i8, None, 1)
    if caps & 2:  # AVX-512: depthwise convs by blocks of 16 channels, and the small conv
        kernels = (lib.onyx_depthwise_f32_avx512, lib.onyx_depthwise_i8_avx512,
                   lib.onyx_conv_small_f32_avx512, 16)  # fmt: skip
    address = lambda fn: fn and ctypes.cast(fn, _P).value  # noqa: E731
    # each kernel's part of a pool job: lib.<name>_range, the address onyx_parallel takes
    for name in (
        "float_conv",
        "int_conv",
        "hardswish",
        "erf",
        "hard_sigmoid",
        "lookup",
        "qbinary",
        "quantize",
        "dequantize",
        "mean_rows_f32",
        "qmean_rows",
        "layer_norm_f32",
        "norm_rows_f32",
        "batch_norm_f32",
        "pool2d_f32",
        "forest_descend",
        "forest_sum",
    ) + (("gemm", "batched_gemm") if vnni else ()):
        setattr(lib, f"{name}_range", address(getattr(lib, f"onyx_{name}_range")))
    lib.lookup = address(lib.onyx_lookup8_vbmi if caps & 4 else lib.onyx_lookup8)
    tile = (_I64 * 2)()
    lib.onyx_conv_f32_shape.argtypes = [_P]
    built = lib.onyx_conv_f32_shape(tile)
    built = built and caps & 2
    lib.conv_f32_range = address(lib.onyx_conv_f32_range) if built else None
    lib.conv_f32_pack_range = address(lib.onyx_conv_f32_pack_range) if built else None
    lib.conv_f32_tile = tuple(tile)
    lib.onyx_gemv_f32_block.restype = _I64
    lib.gemv_block = lib.onyx_gemv_f32_block() if caps & 2 else 0
    lib.gemv_range = address(lib.onyx_gemv_f32_range) if lib.gemv_block else None
    bilinear = lib.onyx_bilinear_built() and caps & 2
    lib.bilinear_range = address(lib.onyx_bilinear_f32_range) if bilinear else None
    lib.repeat2d_range = address(lib.onyx_repeat2d_u32_range) if bilinear else None
    rnn = lib.onyx_lstm_built() and caps & 2
    lib.lstm, lib.gru = (lib.onyx_lstm, lib.onyx_gru) if rnn else (None, None)
    for fn in (lib.lstm, lib.gru) if rnn else ():
        fn.restype, fn.argtypes = _INT, [_P, _P, _I64, _I64]
    lib.depthwise_f32, lib.depthwise_i8, lib.conv_small = (address(fn) for fn in kernels[:3])
    lib.depthwise_lanes = kernels[3]
    if vnni:
        lib.onyx_implicit_conv.restype = None
        lib.onyx_implicit_conv.argtypes = [_P, _P, _P, _P, _P]
    return lib, vnni


_lib, _vnni = _load()


def available() -> bool:
    """Whether the native library is loaded (any of its kernels)."""
    return _lib is not None


def status() -> str:
    """Whether the native library is in use, and why not where it is not."""
    return _why if _lib is not None or not _why.startswith("loaded") else "disabled"


def library():
    """The loaded library (ctypes.CDLL), or None: for tests that count its calls."""
    return _lib


@contextlib.contextmanager
def disabled():
    """Inside the block every kernel takes its numpy path, as with ONYX_NATIVE=0 (the
    differential tests compare the two in one process). Not thread-safe: for tests."""
    global _lib, _vnni
    saved = _lib, _vnni
    _lib, _vnni = None, False
    try:
        yield
    finally:
        _lib, _vnni = saved


# ----------------------------------------------------------------------------- threads

_threads: contextvars.ContextVar[int] = contextvars.ContextVar("onyx_native_threads", default=0)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        return os.cpu_count() or 1


@contextlib.contextmanager
def threads(n: int):
    """Run native kernels on at most ``n`` threads inside the block (0: every core)."""
    token = _threads.set(int(n))
    try:
        yield
    finally:
        _threads.reset(token)


def _check_sizes(what: str, *values) -> None:
    """InvalidArgument unless every size is an int in [0, 2**40]: ctypes would wrap a larger
    one silently into the kernel's int64 fields (checks.h then checks what it receives)."""
    for v in values:
        if not 0 <= int(v) <= 1 << 40:
            raise InvalidArgument(f"onyx native {what}: size {v} out of the range it takes")


#: A kernel part's status bits (checks.h).
_NOMEM, _INVALID = 1, 2


def _run(part: int, task: ctypes.Structure, cuts, threads: int, what: str = "kernel") -> None:
    """The kernel's parts [cuts[i], cuts[i + 1]) of the task on the native thread pool
    (pool.c), ``part`` one of lib.<kernel>_range. A kernel that refused its arguments
    (checks.h: nothing touched) raises InvalidArgument, one that could not allocate its
    buffers MemoryError."""
    cuts = np.asarray(cuts, np.int64)  # (a set-up's kept cuts are used as they are)
    status = _lib.onyx_parallel(part, ctypes.byref(task), _addr(cuts), len(cuts) - 1, threads)
    if status & _INVALID:
        raise InvalidArgument(f"onyx native {what}: sizes out of the range it takes")
    if status:
        raise MemoryError(f"onyx native {what}: out of memory for its buffers")


def _even_cuts(parts: int, ways: int) -> np.ndarray:
    """Cuts of ``parts`` pieces of work into ``ways`` nearly equal runs."""
    return np.array([parts * i // ways for i in range(ways + 1)], np.int64)


@functools.lru_cache(maxsize=4096)
def _element_cuts(n: int, unit: int, ways: int) -> np.ndarray:
    """Cuts of n elements between ``ways`` threads at multiples of ``unit`` (the same for
    every call of a node: kept)."""
    return np.array([n * i // ways // unit * unit for i in range(ways)] + [n], np.int64)


def _filled(template: ctypes.Structure, x: np.ndarray, y: np.ndarray):
    """A copy of a set-up's task (calls may come from several threads) pointing at x and y."""
    task = type(template).from_buffer_copy(template)
    task.x, task.y = _addr(x), _addr(y)
    return task


def _ways(work: int, parts: int, least: int = _PARALLEL_MACS) -> int:
    """Threads for ``work`` multiply-adds in ``parts`` pieces, where ``least`` is worth one."""
    n = _threads.get() or _cpu_count()
    if work < least:
        return 1
    return max(1, min(n, parts, work // (least // 2)))


# ----------------------------------------------------------------------------- int8 GEMM


_c_char_from, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def _addr(a: np.ndarray | None) -> int | None:
    """The address of a's data (None for None). A writeable array's is taken through
    c_char.from_buffer in 0.3 us; a.ctypes.data builds a Python object per call (1-2 us, and a
    native call passes several)."""
    if a is None:
        return None
    try:
        return _addressof(_c_char_from(a))
    except (TypeError, ValueError, BufferError):  # read-only, empty or not contiguous
        return a.ctypes.data


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
        _lib.onyx_pack_panels(_addr(u), u.strides[0], u.strides[1], K, N,
                              int(self.flipped), int(signed), _addr(self.data),
                              _addr(self.colsum))  # fmt: skip


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
    return _vnni and 0 < k <= MAX_K


def transpose_bytes(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """dst[...] = src.T for 2-D arrays of 1-byte elements with contiguous rows (numpy's
    transposing copy of bytes goes one element at a time: 5-20x slower)."""
    assert src.strides[1] == dst.strides[1] == 1 and dst.shape == src.shape[::-1]
    _lib.onyx_transpose_u8(_addr(src), src.shape[0], src.shape[1], src.strides[0],
                           _addr(dst), dst.strides[0])  # fmt: skip
    return dst


def to_nhwc(x: np.ndarray, dst: np.ndarray) -> None:
    """dst[h, w, :C] = x[:, h, w] for one contiguous (C, H, W) image of bytes; dst is a
    (H, W, Cp) view whose rows and pixels may be strided (a padded buffer's interior)."""
    C, H, W = x.shape
    assert (
        x.flags.c_contiguous
        and dst.strides[2] == 1
        and dst.strides[0] == dst.strides[1] * (dst.strides[0] // dst.strides[1])
    )
    _lib.onyx_to_nhwc(_addr(x), C, H, W, _addr(dst), dst.strides[0] // dst.strides[1],
                      dst.strides[1])  # fmt: skip


def _zero_point(z) -> int | np.ndarray:
    """A zero point as a Python int (one value, or per-row/column values all equal) or an
    int64 vector."""
    if isinstance(z, int):
        return z
    z = np.asarray(z).reshape(-1)
    if z.size == 1 or (z == z[0]).all():
        return int(z[0])
    return z.astype(np.int64)


def row_sums(a: np.ndarray, flip: bool, signed: bool) -> np.ndarray:
    out = np.empty(a.shape[0], np.int32)
    _lib.onyx_row_sums(_addr(a), a.strides[0], a.shape[0], a.shape[1], int(flip),
                       int(signed), _addr(out))  # fmt: skip
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

    What does not depend on A's data (the epilogue's corrections, the work split) is kept
    with b for the next call of the same shape and parameters: a node's weights meet the
    same ones on every run.
    """
    if gather is None and a.strides[1] != 1:  # (the kernel reads each row's bytes in a run)
        a = np.ascontiguousarray(a)
    M, K = a.shape if gather is None else (len(gather[0]), gather[2])
    params = (a_zero_point, b_zero_point, row_bias, col_bias, scale, y_zero_point)
    key = (a.dtype.char, M, K, gather is None, _threads.get(), *map(_value_key, params))
    call = b.calls.get(key)
    if call is None:
        call = _GemmCall(a, b, M, K, *params, gather is not None)
        if call.reusable:
            if len(b.calls) >= 8:  # (a model with ever new shapes)
                b.calls.clear()
            b.calls[key] = call
    if out is None:
        out = np.empty((M, b.N), np.int32 if scale is None else y_zero_point.dtype)
    call(a, out, gather)
    return out


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
        t = self.task = _BatchedGemm(None, None, None, *(_addr(o) for o in self.keep),
                                     a.strides[-2], b.strides[-2], b.strides[-1], N, M, K, N,
                                     M * N * self.y_dtype.itemsize)  # fmt: skip
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
        _run(_lib.batched_gemm_range, t, self.cuts, self.ways, "int8 GEMM")
        return y


_batched: dict = {}  # layouts -> _Batched


def batched_int8_gemm(a: np.ndarray, b: np.ndarray, a_zero_point: int = 0,
                      b_zero_point: int = 0, scale=None, y_zero_point=None) -> np.ndarray:  # fmt: skip
    """(A_i - a_zero_point) . (B_i - b_zero_point) for every matrix of a (..., M, K) and b
    (..., K, N) (batch dimensions broadcast; both of data, as attention's products): exact
    int32, or with a one-value ``scale`` requantized to y_zero_point's type like
    :func:`int8_gemm`. One native call: each item packs its B in C, items go to threads;
    the set-up is kept per layout (a model meets the same ones every run)."""
    if a.strides[-1] != 1:
        a = np.ascontiguousarray(a)
    y_dtype = np.int32 if scale is None else y_zero_point.dtype
    key = (a.shape, a.strides, a.dtype.char, b.shape, b.strides, b.dtype.char,
           np.dtype(y_dtype).char, _threads.get())  # fmt: skip
    call = _batched.get(key)
    if call is None:
        if len(_batched) >= 64:  # (a model with ever new shapes)
            _batched.clear()
        call = _batched[key] = _Batched(a, b, y_dtype)
    return call(a, b, int(a_zero_point), int(b_zero_point), scale, y_zero_point)


def gathered_int8_gemm(a_dtype, b: Packed, M: int, K: int, a_zero_point: int = 0, *,
                       col_bias=None, scale=None, y_zero_point=None) -> _GemmCall:  # fmt: skip
    """:func:`int8_gemm`'s set-up for a gathered A of a_dtype (M x K; an implicit-GEMM conv),
    made once: ``call(buffer, out, (rows, quads, K))`` runs it."""
    a = np.empty((0, K), a_dtype)  # (only its type matters: a gathered A needs no row sums)
    return _GemmCall(a, b, M, K, a_zero_point, 0, None, col_bias, scale, y_zero_point, True)


def implicit_conv(gemm: _GemmCall, gather, x_shape, padded, corner, zero_point: int, bare: bool):
    """A requantizing implicit-GEMM conv (kernels/conv.py's _ImplicitConv) in one native call:
    ``run(x, xp, y, out)`` packs the contiguous image(s) x into the padded NHWC buffer xp
    (``padded`` (N, Hp, Wp, Cp), x's corner at ``corner``; zero-point filled unless ``bare``),
    runs the gathered GEMM into y (pixels x M) and transposes it to out (N, M, pixels)."""
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
    keep = (gemm, rows, quads)  # what c points at

    def run(x, xp, y, out, _keep=keep):
        _lib.onyx_implicit_conv(ctypes.byref(c), _addr(x), _addr(xp), _addr(y),
                                _addr(out))  # fmt: skip

    return run


def _value_key(v):
    if v is None or isinstance(v, int):
        return v
    v = np.asarray(v)
    return v.dtype.char, v.shape, v.tobytes()


class _GemmCall:
    """What one int8_gemm call sets up before the kernel runs: the epilogue's zero-point
    corrections, bias and requantization, and the work split between threads. ``reusable``
    when none of it depends on A's data (no row sums of A: B's zero point is 0)."""

    def __init__(self, a, b, M, K, a_zero_point, b_zero_point, row_bias, col_bias, scale,
                 y_zero_point, gathered: bool):  # fmt: skip
        N = b.N
        a_signed = not b.signed  # the kernel multiplies unsigned by signed bytes
        # (a - za) = a' - ZA with ZA = za - da, and (b - zb) = b' - ZB with ZB = zb - db
        flip_a, da = _a_shift(a.dtype, b.signed)
        db = _b_shift(b.signed, b.flipped)
        za = _zero_point(a_zero_point) - da
        zb = _zero_point(b_zero_point) - db
        self.reusable = not np.any(zb)
        # S' - ZB_j rs'_r - ZA_r cs'_j + K ZA_r ZB_j. Int32 arithmetic wraps: the terms may
        # overflow, their sum (the exact result) does not.
        row_off = col_off = row_f = col_f = None
        if np.any(za) and b.colsum is None:
            raise ValueError("B was packed without its column sums, which A's zero point needs")
        if np.any(zb) and gathered:
            raise ValueError("a gathered A takes no B zero point")
        if np.ndim(za) == 0:
            if za:
                col_off = K * za * zb - za * b.colsum.astype(np.int64)
            elif np.ndim(zb):  # (a scalar K * 0 * zb adds nothing)
                col_off = K * za * zb
            if np.any(zb):
                rs = row_sums(a, flip_a, a_signed).astype(np.int64)
                if np.ndim(zb) == 0:
                    row_off = -zb * rs
                else:
                    row_f, col_f = rs, -zb
        else:
            if np.ndim(zb):
                raise ValueError("per-row and per-column zero points together")
            rs = row_sums(a, flip_a, a_signed).astype(np.int64) if zb else 0
            row_off = K * za * zb - zb * rs
            row_f, col_f = -za, b.colsum
        if row_bias is not None:
            row_off = row_bias.astype(np.int64) + (0 if row_off is None else row_off)
        if col_bias is not None:
            col_off = col_bias.astype(np.int64) + (0 if col_off is None else col_off)
        e = self.epilogue = _Epilogue()
        self.keep = []  # the arrays the epilogue points at
        for field, arr, size in (("row_off", row_off, M), ("col_off", col_off, N),
                                 ("row_f", row_f, M), ("col_f", col_f, N)):  # fmt: skip
            if arr is not None:
                arr = np.broadcast_to(arr, (size,)).astype(np.int32)  # (wraps: see above)
                self.keep.append(arr)
                setattr(e, field, _addr(arr))
        self.requantize = scale is not None
        if self.requantize:
            info = np.iinfo(y_zero_point.dtype)
            s = np.ascontiguousarray(scale, dtype=np.float32)
            self.keep.append(s)
            e.scale = _addr(s)
            e.scale_rs = 1 if s.ndim == 2 and s.shape[0] == M and M > 1 else 0
            e.scale_cs = 1 if s.size > 1 and not e.scale_rs else 0
            e.zero_point, e.lo, e.hi = int(y_zero_point.reshape(-1)[0]), info.min, info.max
        panels = -(-N // PANEL)
        ways = self.ways = _ways(M * N * K, max(panels, -(-M // 6)))
        by_rows = not (panels >= 2 * ways or M < 12 * ways)  # threads take rows, or panels
        if by_rows:  # (in whole tiles)
            self.cuts = np.array([min(M, -(-M * i // ways // 6) * 6) for i in range(ways + 1)])
        else:
            self.cuts = _even_cuts(panels, ways)
        self.packed = b  # (the task holds only its address: a B made for this call lives on)
        self.task = _GemmTask(None, _addr(b.data), None, K, N, M, panels, int(flip_a),
                              int(not a_signed), int(by_rows))  # fmt: skip

    def __call__(self, a: np.ndarray, out: np.ndarray, gather) -> None:
        e = _Epilogue.from_buffer_copy(self.epilogue)
        if self.requantize:
            e.out8, e.ldo = _addr(out), out.strides[0]
        else:
            e.c, e.ldc = _addr(out), out.strides[0] // 4
        if gather is None:
            operand = _Operand(_addr(a), a.strides[0], None, None)
        else:
            operand = _Operand(_addr(a), 0, _addr(gather[0]), _addr(gather[1]))
        task = _GemmTask.from_buffer_copy(self.task)
        task.A, task.e = ctypes.addressof(operand), ctypes.addressof(e)
        _run(_lib.gemm_range, task, self.cuts, self.ways)


# ----------------------------------------------------------------------------- depthwise conv


def depthwise_ok(x: np.ndarray, w: np.ndarray, begin) -> bool:
    """Whether the native depthwise conv takes this 2-D conv (group == C; C-contiguous x)."""
    return (
        _lib is not None
        and x.ndim == 4
        and x.flags.c_contiguous
        and w.shape[1] == 1
        and w.shape[0] % x.shape[1] == 0
        and min(begin) >= 0
    )


class PlaneConv:
    """A 2-D float32 conv of x (N, C, H, W) with w (M, C / group, kh, kw) (+ bias [M]) by the
    plane kernel fn (depthwise or small) over blocks of ``lanes`` output channels, set up for
    one input shape; begin: the top and left pads (the end pads are implied by out_shape);
    activation: (code, alpha, beta) as FloatConv's, applied by the AVX-512 depthwise kernel
    (the others take none). The geometry and the work split are made once (a MobileNet's
    depthwise conv on a 7x7 image takes about as long as building them in Python did)."""

    __slots__ = ("cuts", "g", "shape", "task", "w", "ways")

    def __init__(self, fn, lanes: int, x_shape, w, out_shape, strides, dilations, begin,
                 activation=(0, 0.0, 0.0), banded: bool = False):  # fmt: skip
        (N, C, H, W), M = x_shape, w.shape[0]
        _check_sizes("conv", *x_shape, *w.shape, *out_shape, *strides, *dilations, *begin)
        self.w = np.ascontiguousarray(w, np.float32)
        self.g = _DwGeometry(C, H, W, M // C, *out_shape, *w.shape[2:], *strides, *dilations,
                             *begin, M, *activation)  # fmt: skip
        self.shape = (N, M, *out_shape)
        planes = _dw_parts(self.g, N, -(-M // lanes)) if banded else N * -(-M // lanes)
        self.ways = _ways(math.prod(self.shape) * w[0].size, planes, _DEPTHWISE_MACS)
        self.cuts = _even_cuts(planes, self.ways)
        self.task = _FloatConvTask(fn, None, _addr(self.w), None, None, ctypes.addressof(self.g))

    def __call__(self, x: np.ndarray, bias=None) -> np.ndarray:
        """x C-contiguous float32 of the set-up's shape."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if bias is not None:
            bias = np.ascontiguousarray(bias, np.float32)
            task.bias = _addr(bias)
        _run(_lib.float_conv_range, task, self.cuts, self.ways, "depthwise conv")
        return y


def depthwise_setup(x_shape, w, out_shape, strides, dilations, begin,
                    activation=None) -> PlaneConv | None:  # fmt: skip
    """Depthwise 2-D conv (w: (M, 1, kh, kw), M a multiple of C) set up for x_shape: a
    PlaneConv. With an ``activation`` ((code, alpha, beta), CONV_ACTIVATIONS) where the
    AVX-512 kernel runs (``depthwise_activates()``), else None."""
    if activation is not None and activation[0] and not depthwise_activates():
        return None
    return PlaneConv(_lib.depthwise_f32, _lib.depthwise_lanes, x_shape, w, out_shape, strides,
                     dilations, begin, activation or (0, 0.0, 0.0),
                     banded=_lib.depthwise_lanes == 16)  # fmt: skip


#: Bytes of padded 16-lane input rows that an AVX-512 depthwise part fills and reads: its
#: band of output rows is cut to fit L2. A block of 16 channels was one part, its whole
#: padded input (830 KB for 112x112) filled and read back from L3, on one thread when the
#: layer had 16 channels (a MobileNet's first block: 152 us, onnxruntime's 18).
_DW_BAND_BYTES = 192 << 10


def _dw_parts(g: _DwGeometry, N: int, blocks: int) -> int:
    """Sets g.band, the output rows per part of the AVX-512 depthwise kernels, and returns
    the parts (image, block of 16 channels, band): bands that fit _DW_BAND_BYTES, halved
    while the threads would get fewer than two parts each."""
    Wp = (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1
    reach, threads = (g.kh - 1) * g.dh + 1, _threads.get() or _cpu_count()
    band = g.OH
    while band > 1 and ((band - 1) * g.sh + reach) * Wp * 64 > _DW_BAND_BYTES:
        band = -(-band // 2)
    while band > 1 and N * blocks * -(-g.OH // band) < 2 * threads:
        band = -(-band // 2)
    g.band = band
    return N * blocks * -(-g.OH // band)


def depthwise_f32(x, w, bias, out_shape, strides, dilations, begin, activation=None):
    """Depthwise 2-D conv of x, once (see depthwise_setup), or None."""
    conv = depthwise_setup(x.shape, w, out_shape, strides, dilations, begin, activation)
    return None if conv is None else conv(x, bias)


def depthwise_activates() -> bool:
    """Whether the float depthwise kernel applies activations as it stores (AVX-512)."""
    return _lib is not None and _lib.depthwise_lanes == 16


class IntPlaneConv:
    """Depthwise 2-D conv of bytes x (N, C, H, W) minus x_zero_point with wc (M, kh, kw: the
    weights minus their zero points, int16) (+ int32 bias [M]): exact int32 sums, or with
    ``scale`` ([M] float32) requantized to y_zero_point's type as :func:`int8_gemm` does. Set
    up once per input shape and constants, as PlaneConv (the geometry, the output's constants
    and the work split took a 7x7 layer's Python longer than its kernel)."""

    __slots__ = ("cuts", "dtype", "g", "keep", "out", "shape", "task", "ways")

    def __init__(self, x_shape, x_dtype, x_zero_point: int, wc: np.ndarray, bias, out_shape,
                 strides, dilations, begin, *, scale=None, y_zero_point=None):  # fmt: skip
        (N, C, H, W), M = x_shape, wc.shape[0]
        _check_sizes("conv", *x_shape, *wc.shape, *out_shape, *strides, *dilations, *begin)
        self.g = _DwGeometry(C, H, W, M // C, *out_shape, *wc.shape[1:], *strides, *dilations,
                             *begin, M)  # fmt: skip
        self.shape = (N, M, *out_shape)
        self.out, self.keep = _DwOutput(), [np.ascontiguousarray(wc, np.int16)]
        if bias is not None:
            self.keep.append(np.ascontiguousarray(bias, np.int32))
            self.out.bias = _addr(self.keep[-1])
        self.dtype = np.dtype(np.int32 if scale is None else y_zero_point.dtype)
        if scale is not None:
            self.keep.append(np.ascontiguousarray(np.broadcast_to(scale, (M,)), np.float32))
            info = np.iinfo(self.dtype)
            self.out.scale = _addr(self.keep[-1])
            self.out.zero_point, self.out.lo = int(y_zero_point.reshape(-1)[0]), info.min
            self.out.hi = info.max
        blocks = -(-M // _lib.depthwise_lanes)
        planes = _dw_parts(self.g, N, blocks) if _lib.depthwise_lanes == 16 else N * blocks
        self.ways = _ways(math.prod(self.shape) * wc[0].size, planes, _DEPTHWISE_MACS)
        self.cuts = _even_cuts(planes, self.ways)
        self.task = _IntConvTask(_lib.depthwise_i8, None, _addr(self.keep[0]),
                                 ctypes.addressof(self.g), None, int(x_dtype == np.int8),
                                 int(x_zero_point))  # fmt: skip

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x C-contiguous bytes of the set-up's shape and type."""
        y = np.empty(self.shape, self.dtype)
        out = _DwOutput.from_buffer_copy(self.out)  # (calls may come from several threads)
        if self.dtype.itemsize == 1:
            out.y8 = _addr(y)
        else:
            out.y32 = _addr(y)
        task = _IntConvTask.from_buffer_copy(self.task)
        task.x, task.o = _addr(x), ctypes.addressof(out)
        _run(_lib.int_conv_range, task, self.cuts, self.ways, "depthwise conv")
        return y


# ----------------------------------------------------------------------------- stem conv

#: The direct conv takes convs whose windows have at most this many values (C * kh * kw):
#: beyond, an im2col GEMM's columns are worth building.
SMALL_CONV_K = 32


def conv_small_ok(x: np.ndarray, w: np.ndarray, begin) -> bool:
    """Whether :func:`conv_small_f32` takes this 2-D group-1 conv: few input channels."""
    return (
        _lib is not None
        and bool(_lib.conv_small)
        and x.ndim == 4
        and x.flags.c_contiguous
        and w[0].size <= SMALL_CONV_K
        and w.shape[0] >= 8
        and min(begin) >= 0
    )


def conv_small_f32(x, w, bias, out_shape, strides, dilations, begin) -> np.ndarray:
    """A group-1 conv whose windows are small: 16 output channels per AVX-512 vector (a
    network's stem); see PlaneConv."""
    conv = PlaneConv(_lib.conv_small, 16, x.shape, w, out_shape, strides, dilations, begin,
                     banded=True)  # fmt: skip
    return conv(x, bias)


# ----------------------------------------------------------------------------- float conv

#: FusedConv activations the float conv applies as it stores its tiles, by kernel code.
CONV_ACTIVATIONS = {
    "": 0,
    "Identity": 0,
    "Relu": 1,
    "LeakyRelu": 2,
    "Clip": 3,
    "HardSwish": 4,
    "HardSigmoid": 5,
}
#: Rows of im2col columns packed at a time (kc x 48 floats, read by every panel's tile from L1
#: or L2): 256 rather than 128 halves the round trips of the partial sums through memory, 2-3%
#: on ResNet's 3x3 layers though a strip's columns then outgrow a 32 KB L1.
_CONV_KC = 256


#: Strips (of 48 pixels) and panels (of 8 output channels) per part of the work: each block
#: of panels' weights is read once per block of strips, and their sums (48 x 8 x 16 floats)
#: stay in L2.
_CONV_STRIPS, _CONV_PANELS = 8, 16
#: Largest set of columns packed beforehand for parts that share them (FloatConv).
_CONV_COLS_BYTES = 8 << 20


def _conv_parts(strips: int, panels: int, group: int, ways: int) -> tuple[int, int]:
    """Strips per part and blocks of panels: _CONV_STRIPS x _CONV_PANELS, made smaller where
    that leaves fewer than 4 parts per thread (so that the threads finish together). Blocks
    of panels are split first, down to 4 panels: a part reads its panels' weights once for
    all its strips, and a deep layer's weights (9 MB for 512 -> 512 channels, 3x3) come from
    memory."""
    blocks = -(-panels // _CONV_PANELS)
    per_part = min(strips, _CONV_STRIPS)
    want = 4 * ways if ways > 1 else 1

    def parts() -> int:
        return group * -(-strips // per_part) * blocks

    while parts() < want and -(-panels // (2 * blocks)) >= 4:
        blocks *= 2
    while parts() < want and per_part > 1:
        per_part = max(1, per_part // 2)
    while parts() < want and blocks < panels:
        blocks = min(panels, 2 * blocks)
    return per_part, blocks


def conv_f32_ok() -> bool:
    """Whether the native float conv (:class:`FloatConv`) is built (it needs AVX-512)."""
    return _lib is not None and bool(_lib.conv_f32_range)


def pack_conv_f32(w: np.ndarray, group: int) -> np.ndarray:
    """Conv weights (M, C / group, kh, kw) in :func:`conv_f32`'s layout: per group, panels of
    MR output channels (zeros past the last), k-major: (group, panels, K, MR)."""
    mr = _lib.conv_f32_tile[0]
    M, K = w.shape[0], w[0].size
    Mg = M // group
    panels = -(-Mg // mr)
    wp = np.zeros((group, panels * mr, K), np.float32)
    wp[:, :Mg] = w.reshape(group, Mg, K)
    return np.ascontiguousarray(wp.reshape(group, panels, mr, K).transpose(0, 1, 3, 2))


class FloatConv:
    """A 2-D float32 conv (conv_f32.c) set up for one input shape: x (N, C, H, W) with
    weights packed by :func:`pack_conv_f32` (M output channels, kernel (kh, kw)); begin: the
    top and left pads (the end pads are implied by out_shape); the activation a code of
    CONV_ACTIVATIONS (alpha: LeakyRelu's slope or Clip's min, beta: Clip's max).

    What does not depend on the data (the task's sizes, the work split) is made here once:
    a small layer's conv takes a few microseconds, as long as setting it up in Python did."""

    __slots__ = ("bias", "cols", "cuts", "pack_cuts", "packed", "shape", "task", "ways")

    def __init__(self, x_shape, packed, M: int, kernel, out_shape, strides, dilations, begin,
                 activation: int = 0, alpha: float = 0.0, beta: float = 0.0):  # fmt: skip
        (N, C, H, W), group = x_shape, packed.shape[0]
        _check_sizes("float conv", *x_shape, M, *kernel, *out_shape, *strides, *dilations,
                     *begin)  # fmt: skip
        P, K, nr = out_shape[0] * out_shape[1], packed.shape[2], _lib.conv_f32_tile[1]
        strips, panels = -(-N * P // nr), packed.shape[1]
        self.ways = _ways(N * P * M * K, group * strips * panels)
        per_part, blocks = _conv_parts(strips, panels, group, self.ways)
        parts = group * -(-strips // per_part) * blocks
        self.cuts = _even_cuts(parts, self.ways)
        self.packed, self.shape, self.bias = packed, (N, M, *out_shape), (None, None, None)
        # Parts that split the output channels would each pack every strip's columns: they
        # are packed once beforehand instead (a deep layer's are small), except where a
        # 1x1 conv reads them in place.
        plain = (tuple(kernel) == (1, 1) and tuple(strides) == (1, 1) and not any(begin)
                 and tuple(out_shape) == (H, W))  # fmt: skip
        self.cols = group * strips * K * nr
        if blocks == 1 or plain or self.cols * 4 > _CONV_COLS_BYTES:
            self.cols = 0
        jobs = group * strips
        self.pack_cuts = _even_cuts(jobs, self.ways)
        self.task = _ConvF32(None, _addr(packed), None, None, None, None, N, C, H, W, M,
                             *out_shape, *kernel, *strides, *dilations, *begin, group, _CONV_KC,
                             strips, per_part, blocks, activation, alpha, beta)  # fmt: skip

    def __call__(self, x: np.ndarray, bias=None, z=None) -> np.ndarray:
        """activation(conv(x) + bias [M] + z (the output's shape)); x C-contiguous float32."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if bias is not None:
            entry = self.bias  # (a local reference keeps its array alive through the call)
            if bias is not entry[0]:  # a constant bias is the same object every call
                b = np.ascontiguousarray(bias, np.float32)
                entry = self.bias = (bias, b, _addr(b))
            task.bias = entry[2]
        if z is not None:
            z = np.ascontiguousarray(np.broadcast_to(z, y.shape), np.float32)
            task.z = _addr(z)
        if self.cols:
            cols = np.empty(self.cols, np.float32)
            task.cols = _addr(cols)
            _run(_lib.conv_f32_pack_range, task, self.pack_cuts, self.ways)
        _run(_lib.conv_f32_range, task, self.cuts, self.ways, "float conv")
        return y


# ----------------------------------------------------------------------------- float GEMV

#: Most rows of x the GEMV takes: beyond, the weights are worth packing for BLAS's GEMM.
GEMV_ROWS = 8
#: Weights (multiply-adds per row) worth a second thread: reading them is the GEMV's time.
_GEMV_PARALLEL = _PARALLEL_MACS // 4


def gemv_ok() -> bool:
    """Whether the native float GEMV (:class:`FloatGemv`) is built (it needs AVX-512)."""
    return _lib is not None and bool(_lib.gemv_range)


class FloatGemv:
    """y = act(alpha * x @ W' + beta * c + z) (gemv.c) for x of ``rows`` (at most GEMV_ROWS)
    rows of K float32 values: W' is w (K, N), or w (N, K) transposed when ``trans``. c is
    [N] (Gemm's C, a conv's bias), z the output's shape (FusedConv's residual), the activation
    a code of CONV_ACTIVATIONS (act_alpha, act_beta: its parameters, as FloatConv's).
    The work split is made here once, per weight and row count."""

    __slots__ = ("cuts", "shape", "task", "w", "ways")

    def __init__(self, w: np.ndarray, trans: bool, rows: int, *, alpha: float = 1.0,
                 beta: float = 1.0, activation: int = 0, act_alpha: float = 0.0,
                 act_beta: float = 0.0):  # fmt: skip
        self.w = np.ascontiguousarray(w, np.float32)
        N, K = self.w.shape if trans else self.w.shape[::-1]
        blocks = -(-N // _lib.gemv_block)
        self.ways = _ways(rows * N * K, blocks, _GEMV_PARALLEL)
        self.cuts = _even_cuts(blocks, self.ways)
        self.shape = (rows, N)
        self.task = _GemvF32(None, _addr(self.w), None, None, None, rows, K, N, int(trans),
                             alpha, beta, activation, act_alpha, act_beta)  # fmt: skip

    def __call__(self, x: np.ndarray, c=None, z=None) -> np.ndarray:
        """x (rows, K) C-contiguous float32; c [N] or None; z (rows, N) or None."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if c is not None:
            c = np.ascontiguousarray(c, np.float32)
            task.c = _addr(c)
        if z is not None:
            z = np.ascontiguousarray(np.broadcast_to(z, self.shape), np.float32)
            task.z = _addr(z)
        _run(_lib.gemv_range, task, self.cuts, self.ways)
        return y


def thread_setting() -> int:
    """The thread count set for native kernels here (0: every core): part of a set-up's key."""
    return _threads.get()


# ----------------------------------------------------------------------------- Resize


def bilinear_ok() -> bool:
    """Whether :func:`bilinear_f32` runs here (the library built, AVX-512)."""
    return _lib is not None and bool(_lib.bilinear_range)


def bilinear_f32(planes: np.ndarray, y_taps, x_taps) -> np.ndarray:
    """Bilinear resize of contiguous float32 planes (n, H, W) with per-axis tables (lo, hi:
    contiguous int32; w_lo, w_hi: contiguous float32; resample.py's _bilinear_table, onnxruntime's
    formula): (n, OH, OW)."""
    n, H, W = planes.shape
    OH, OW = len(y_taps[0]), len(x_taps[0])
    y = np.empty((n, OH, OW), np.float32)
    tables = [y_taps[0], y_taps[1], x_taps[0], x_taps[1], y_taps[2], y_taps[3], x_taps[2],
              x_taps[3]]  # fmt: skip
    t = _Bilinear(_addr(planes), _addr(y), H, W, OH, OW, *(_addr(a) for a in tables))
    ways = _ways(n * OH * OW * 4, n, _PARALLEL_ELEMENTS * 4)
    _run(_lib.bilinear_range, t, _even_cuts(n, ways), ways, "Resize")
    return y


def repeat2d_4byte(planes: np.ndarray, kh: int, kw: int) -> np.ndarray | None:
    """Every element of contiguous planes (n, H, W) of 4-byte items repeated kh x kw times
    (nearest upsampling by whole factors): (n, H kh, W kw); None without the kernel."""
    if _lib is None or not _lib.repeat2d_range or planes.dtype.itemsize != 4:
        return None
    n, H, W = planes.shape
    y = np.empty((n, H * kh, W * kw), planes.dtype)
    t = _Repeat2d(_addr(planes), _addr(y), H, W, kh, kw)
    ways = _ways(y.size, n, _PARALLEL_ELEMENTS * 4)
    _run(_lib.repeat2d_range, t, _even_cuts(n, ways), ways)
    return y


# ----------------------------------------------------------------------------- LSTM, GRU


def recurrence_ok(hidden: int, steps: int, batch: int) -> bool:
    """Whether :func:`lstm_f32` and :func:`gru_f32` (and their projection on conv_f32) run here:
    AVX-512, H a multiple of 16, steps x batch a 32-bit gather's stride apart."""
    return (_lib is not None and bool(_lib.lstm) and conv_f32_ok() and hidden % 16 == 0
            and 0 < steps * batch < 1 << 25)  # fmt: skip


def lstm_f32(xs: np.ndarray, rt: np.ndarray, h0: np.ndarray, c0: np.ndarray, reverse):
    """The common LSTM's recurrence (rnn.c): xs [dirs, 4, H, steps, batch] input projections
    (gates i, o, f, c; biases in), rt [dirs, H / 16, H, 4, 16] the recurrent weights, h0 and
    c0 [dirs, batch, H], reverse: per direction, whether it runs backwards in time. Every time
    step's H and C, [steps, dirs, batch, H] each."""
    return _recurrence(_lib.lstm, xs, rt, h0, c0, None, reverse)


def gru_f32(xs: np.ndarray, rt: np.ndarray, rbh: np.ndarray, h0: np.ndarray, reverse):
    """PyTorch's GRU's recurrence (linear_before_reset; rnn.c): xs [dirs, 3, H, steps, batch]
    (gates z, r, h; biases in but the candidate's recurrent one, rbh [dirs, H]), rt [dirs, H /
    16, H, 3, 16], h0 [dirs, batch, H], reverse as :func:`lstm_f32`'s; every time step's H,
    [steps, dirs, batch, H]."""
    return _recurrence(_lib.gru, xs, rt, h0, None, rbh, reverse)[0]


def _recurrence(fn, xs, rt, h0, c0, rbh, reverse):
    dirs, gates, H, steps, batch = xs.shape
    ys = np.empty((steps, dirs, batch, H), np.float32)
    cs = np.empty_like(ys) if c0 is not None else None
    keep = [None if a is None else np.ascontiguousarray(a, np.float32) for a in (h0, c0, rbh)]
    backwards = sum(1 << d for d, rev in enumerate(reverse) if rev)
    t = _Recurrence(_addr(xs), _addr(rt), *map(_addr, keep), _addr(ys), _addr(cs),
              steps, dirs, batch, H, backwards)  # fmt: skip
    parts = dirs * (H // 16)
    ways = _ways(gates * H * H * batch * dirs, parts, _PARALLEL_MACS // 4)
    cuts = _even_cuts(parts, ways)
    fn(ctypes.byref(t), _addr(cuts), len(cuts) - 1, ways)
    return ys, cs


# ----------------------------------------------------------------------------- elementwise

#: Elements below which an elementwise kernel stays on one thread.
_PARALLEL_ELEMENTS = 1 << 16
#: The same for QLinearAdd / QLinearMul / QuantizeLinear on AVX-512 (16K values take them
#: about 4 us, a transformer's (128, 256) activations 8).
_PARALLEL_BYTES = 1 << 14


class _ErfTask(ctypes.Structure):  # kernels.c's erf_task
    _fields_ = [("x", _P), ("y", _P), ("scale", ctypes.c_float), ("p", ctypes.c_float * 7),
                ("q", ctypes.c_float * 6), ("gelu", ctypes.c_int32)]  # fmt: skip


def erf_f32(x: np.ndarray, y: np.ndarray, scale, gelu: bool, p, q) -> bool:
    """erf(scale * x), or GELU's x * (0.5 + 0.5 * erf(scale * x)), of contiguous float32 x
    into y (x itself allowed) as elementwise.erf32 computes it, P (7) and Q (6) its float32
    coefficients; False (nothing done) without the library."""
    ok = (_lib is not None and x.dtype == y.dtype == np.float32 and x.flags.c_contiguous
          and y.flags.c_contiguous and x.size == y.size)  # fmt: skip
    if not ok:
        return False
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS // 8)  # (some 30 operations a value)
    task = _ErfTask(_addr(x), _addr(y), float(scale), (ctypes.c_float * 7)(*map(float, p)),
                    (ctypes.c_float * 6)(*map(float, q)), int(gelu))  # fmt: skip
    _run(_lib.erf_range, task, _element_cuts(n, 16, ways), ways)
    return True


class _HardSigmoidTask(ctypes.Structure):  # kernels.c's hard_sigmoid_task
    _fields_ = [("x", _P), ("y", _P), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


def hard_sigmoid_f32(x: np.ndarray, alpha: float, beta: float) -> np.ndarray | None:
    """HardSigmoid of a contiguous float32 array in one pass (clamp(x * alpha + beta, 0, 1),
    alpha and beta rounded to float32 as numpy rounds a Python float), or None without the
    library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    y = np.empty_like(x)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS)
    task = _HardSigmoidTask(_addr(x), _addr(y), float(alpha), float(beta))
    _run(_lib.hard_sigmoid_range, task, _element_cuts(n, 16, ways), ways)
    return y


def hardswish_f32(x: np.ndarray) -> np.ndarray | None:
    """HardSwish of a contiguous float32 array in one pass, or None without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    y = np.empty_like(x)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS)
    cuts = _element_cuts(n, 16, ways)
    _run(_lib.hardswish_range, _UnaryTask(_addr(x), _addr(y)), cuts, ways)
    return y


def lookup8(x: np.ndarray, table: np.ndarray) -> np.ndarray | None:
    """table[x] for a contiguous byte tensor x (int8 by its bit pattern: table[128:] holds the
    values of -128..-1) and a 256-entry table of 1, 2, 4 or 8-byte items; None without the
    library."""
    if _lib is None or x.dtype not in BYTES or not x.flags.c_contiguous:
        return None
    table = np.ascontiguousarray(table)
    if table.shape != (256,) or table.itemsize not in (1, 2, 4, 8):
        return None
    y = np.empty(x.shape, table.dtype)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS * 4)  # (a byte per element: 4x HardSwish's speed)
    cuts = _element_cuts(n, 64, ways)
    task = _LookupTask(_lib.lookup, _addr(x), _addr(table), table.itemsize, _addr(y))
    _run(_lib.lookup_range, task, cuts, ways)
    return y


@functools.lru_cache(maxsize=4096)
def _qbinary_params(za: float, zb: float, ka: float, kb: float, zy: float, dtype: np.dtype,
                    multiply: bool) -> _QBinary:  # fmt: skip
    """A node's QLinearAdd / QLinearMul constants as the kernel takes them (kept per node)."""
    info = np.iinfo(dtype)
    return _QBinary(za, zb, ka, kb, zy, int(dtype == np.int8), int(multiply), info.min, info.max)


def _walk(a_shape: tuple, b_shape: tuple) -> tuple[int, int] | None:
    """How b broadcasts over a as qbinary's kernel walks it: (inner, mid) when a reads as
    (outer, mid, inner) and b as (outer, 1, inner), b's outer index cycling (its leading
    axes of 1); None when b is larger than a along some axis, or broadcast along two runs
    of a's axes."""
    if len(b_shape) > len(a_shape):
        return None
    pairs = [(n, m) for n, m in zip(a_shape, (1,) * (len(a_shape) - len(b_shape)) + b_shape)
             if n != 1 or m != 1]  # fmt: skip
    if any(m not in (1, n) for n, m in pairs):
        return None
    # from the last axis: b's axes equal to a's (inner), then broadcast (mid), then equal
    # (outer), then broadcast (cycled)
    runs = [1, 1]
    phase = 0
    for n, m in reversed(pairs):
        state = 0 if m == n else 1  # (n == 1 == m cannot occur)
        while phase < 4 and state != phase % 2:
            phase += 1
        if phase == 4:
            return None
        if phase < 2:
            runs[phase] *= n
    return runs[0], runs[1]


def qlinear_binary(a: np.ndarray, b: np.ndarray, za, zb, ka, kb, zy, multiply: bool):
    """QLinearAdd (``ka`` (a - za) + ``kb`` (b - zb)) or QLinearMul (``ka`` (a - za)(b - zb)),
    requantized to a's type with zero point zy, in the float32 operations and order of the
    numpy kernels (contrib.py), to the bit; None where it does not apply: a and b contiguous
    bytes of one type, b as large as a or broadcast over it as _walk says (a bias, a mask, a
    channel's scale), either way round."""
    if (
        _lib is None
        or a.dtype != b.dtype
        or a.dtype not in BYTES
        or not (a.flags.c_contiguous and b.flags.c_contiguous)
    ):
        return None
    if b.size > a.size:  # (both operations commute: the smaller goes second)
        a, b, za, zb, ka, kb = b, a, zb, za, kb, ka
    walk = _walk(a.shape, b.shape)
    if walk is None:
        return None
    p = _qbinary_params(float(np.float32(za)), float(np.float32(zb)), float(ka), float(kb),
                        float(np.float32(zy)), a.dtype, bool(multiply))  # fmt: skip
    y = np.empty(a.shape, a.dtype)
    n = a.size
    ways = _ways(n, 64, _PARALLEL_BYTES)
    cuts = _element_cuts(n, 64, ways)
    task = _QBinaryTask(_addr(a), _addr(b), *walk, max(b.size, 1), ctypes.addressof(p), _addr(y))
    _run(_lib.qbinary_range, task, cuts, ways)
    return y


def mean_rows_f32(x: np.ndarray) -> np.ndarray | None:
    """The mean of each row of a C-contiguous float32 (rows, size) array, in onnxruntime's
    order of additions (rows.c); None without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim != 2:
        return None
    rows, size = x.shape
    y = np.empty(rows, np.float32)
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    task = _GlobalPool(_addr(x), _addr(y), size)
    _run(_lib.mean_rows_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y


def batch_norm_f32(x: np.ndarray, mean: np.ndarray, mult: np.ndarray, bias: np.ndarray):
    """Inference BatchNormalization of C-contiguous float32 x (N, C, ...): (x - mean) * mult +
    bias per channel, each step rounded (numpy's passes, to the bit); the parameters float32
    [C]. None without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim < 2:
        return None
    params = [np.ascontiguousarray(v, np.float32).reshape(-1) for v in (mean, mult, bias)]
    if any(v.size != x.shape[1] for v in params):
        return None
    y = np.empty_like(x)
    rows = x.shape[0] * x.shape[1]
    size = x.size // rows if rows else 0
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    task = _BatchNorm(_addr(x), _addr(y), *(_addr(v) for v in params), x.shape[1], size)
    _run(_lib.batch_norm_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y


def layer_norm_f32(x: np.ndarray, scale: np.ndarray, bias, epsilon: float):
    """LayerNormalization of C-contiguous float32 x over its last axis, with float32 scale and
    bias (or None) of its length: (y, mean, inv_std), the statistics shaped [..., 1]; None
    without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or not x.ndim:
        return None
    n = x.shape[-1]
    rows = x.size // n if n else 0
    y = np.empty_like(x)
    stats = np.empty((2,) + x.shape[:-1] + (1,), np.float32)
    scale = np.ascontiguousarray(scale, np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
    task = _LayerNorm(_addr(x), _addr(scale), None if bias is None else _addr(bias), _addr(y),
                      _addr(stats[0]), _addr(stats[1]), n, float(epsilon))  # fmt: skip
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    _run(_lib.layer_norm_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y, stats[0], stats[1]


def norm_rows_f32(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float):
    """Instance / group normalization of C-contiguous float32 x (rows, channels, spatial),
    statistics per row, scale and bias (rows, channels): the normalized rows, or None
    without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim != 3:
        return None
    rows, channels, spatial = x.shape
    y = np.empty_like(x)
    scale = np.ascontiguousarray(scale, np.float32)
    bias = np.ascontiguousarray(bias, np.float32)
    task = _NormRows(_addr(x), _addr(scale), _addr(bias), _addr(y), channels, spatial,
                     float(epsilon))  # fmt: skip
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    _run(_lib.norm_rows_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y


def qmean_rows(x: np.ndarray, scale: float, x_zero_point: int, y_zero_point: int):
    """QLinearGlobalAveragePool's rows: the mean of each row of C-contiguous 8-bit (rows, size)
    x, requantized to x's type with multiplier ``scale`` (x_scale / (y_scale * size)) as
    onnxruntime does (rows.c); None without the library."""
    if _lib is None or x.dtype not in BYTES or not x.flags.c_contiguous or x.ndim != 2:
        return None
    rows, size = x.shape
    y = np.empty(rows, x.dtype)
    ways = _ways(x.size, rows, _PARALLEL_BYTES * 4)
    task = _GlobalPool(_addr(x), _addr(y), size, float(scale), int(x_zero_point),
                       int(y_zero_point), int(x.dtype == np.int8))  # fmt: skip
    _run(_lib.qmean_rows_range, task, _element_cuts(rows, 1, ways), ways)
    return y


def dequantize_8(x: np.ndarray, scale, zero_point: int) -> np.ndarray | None:
    """DequantizeLinear of contiguous uint8 / int8 x per tensor to float32 in one pass, to the
    numpy kernel's bits (quantize.py); None without the library."""
    if _lib is None or x.dtype not in BYTES or not x.flags.c_contiguous:
        return None
    y = np.empty(x.shape, np.float32)
    return _per_tensor_pass(_lib.dequantize_range, x, y, scale, zero_point, x.dtype)


def quantize_f32(x: np.ndarray, scale, zero_point: int, dtype) -> np.ndarray | None:
    """QuantizeLinear of contiguous float32 x per tensor to uint8 / int8 in one pass, as the
    numpy kernel rounds (quantize.py); None without the library."""
    if _lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or dtype not in BYTES:
        return None
    y = np.empty(x.shape, dtype)
    return _per_tensor_pass(_lib.quantize_range, x, y, scale, zero_point, dtype)


def _per_tensor_pass(part, x, y, scale, zero_point: int, byte_type) -> np.ndarray:
    """y = the (de)quantization of x with one scale and zero point (quantize_task's kernels;
    ``byte_type``: the 8-bit side's type)."""
    ways = _ways(x.size, 64, _PARALLEL_BYTES)
    task = _QuantizeTask(_addr(x), float(scale), int(zero_point), int(byte_type == np.int8),
                         _addr(y))  # fmt: skip
    _run(part, task, _element_cuts(x.size, 64, ways), ways)
    return y


# ----------------------------------------------------------------------------- 2-D pooling


def pool2d_f32(x: np.ndarray, kernel, strides, dilations, pads, out_shape, *,
               average: bool, include_pad: bool = False, by_columns: bool = False):  # fmt: skip
    """MaxPool / AveragePool of C-contiguous float32 x (N, C, H, W) to (N, C, *out_shape):
    pads (top, left, bottom, right); pool.py's values to the bit (window.c). None without the
    library."""
    if _lib is None or x.dtype != np.float32 or x.ndim != 4 or not x.flags.c_contiguous:
        return None
    N, C, H, W = x.shape
    _check_sizes("pooling", *out_shape, *kernel, *strides, *dilations, *pads)
    y = np.empty((N, C, *out_shape), np.float32)
    planes = N * C
    if planes == 0 or y.size == 0:
        return y
    work = y.size * math.prod(kernel)
    ways = _ways(work, planes, _PARALLEL_ELEMENTS)
    task = _Pool2d(_addr(x), _addr(y), H, W, *out_shape, *kernel, *strides, *dilations, *pads,
                   int(average), int(include_pad), int(by_columns))  # fmt: skip
    _run(_lib.pool2d_f32_range, task, _element_cuts(planes, 1, ways), ways, "pooling")
    return y


# ----------------------------------------------------------------------------- tree ensembles

#: Tree steps worth a second thread (a step is a few dependent loads, some ten multiply-adds).
_PARALLEL_TREE_STEPS = _PARALLEL_MACS // 8
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def forest_descend(x: np.ndarray, tables, roots2: np.ndarray, depth: int, nan_rule: bool):
    """The state each row of x (rows, features; float32 or float64, C-contiguous) reaches in
    each tree, [rows, trees] int64: ml/tree.py's _FastTables (``tables``: int64 feature and
    child, threshold of x's type, nan_outcome) walked ``depth`` levels from the doubled roots;
    ``nan_rule``: NaN takes nan_outcome (else the false branch). None without the library."""
    if _lib is None or x.dtype not in _FLOATS or x.ndim != 2 or not x.flags.c_contiguous:
        return None
    rows, trees = x.shape[0], len(roots2)
    states = np.empty((rows, trees), np.int64)
    ways = _ways(rows * trees * depth, -(-rows // 8), _PARALLEL_TREE_STEPS)
    task = _ForestTask(_addr(x), _addr(roots2), _addr(tables.feature), _addr(tables.threshold),
                       _addr(tables.child), _addr(tables.nan_outcome) if nan_rule else None,
                       _addr(states), x.shape[1], trees, depth,
                       int(x.dtype == np.float64))  # fmt: skip
    _run(_lib.forest_descend_range, task, _element_cuts(rows, 8, ways), ways)
    return states


def forest_sum(states: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """scores[r] = the sum over trees t of weights[states[r, t]], added tree after tree in the
    weights' type (float32 or float64): numpy's running sum, to the bit. None without the
    library."""
    if _lib is None or weights.dtype not in _FLOATS or not weights.flags.c_contiguous:
        return None
    rows, trees = states.shape
    if trees == 0:
        return None
    scores = np.empty((rows, weights.shape[1]), weights.dtype)
    ways = _ways(rows * trees * weights.shape[1], rows, _PARALLEL_MACS)
    task = _ForestSumTask(_addr(states), _addr(weights), _addr(scores), trees, weights.shape[1],
                          int(weights.dtype == np.float64))  # fmt: skip
    _run(_lib.forest_sum_range, task, _element_cuts(rows, 1, ways), ways)
    return scores
