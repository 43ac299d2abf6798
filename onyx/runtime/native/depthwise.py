"""Convs by output planes (depthwise.c): depthwise convs, float32 and integer (16 channels
per vector on AVX-512, one plane at a time elsewhere), and the few-input-channel stem conv
(AVX-512)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    _addr,
    _check_sizes,
    _cpu_count,
    _even_cuts,
    _filled,
    _run,
    _threads,
    _ways,
    abi,
    address,
    bias_entry,
    range_of,
)

#: The same for the depthwise conv, whose multiply-adds are about 8x slower (float lanes,
#: one product per lane).
_DEPTHWISE_MACS = _PARALLEL_MACS // 8


@abi("dw_geometry")
class _DwGeometry(ctypes.Structure):
    _fields_ = [
        (name, _I64)
        for name in (
            "C",
            "H",
            "W",
            "mult",
            "OH",
            "OW",
            "kh",
            "kw",
            "sh",
            "sw",
            "dh",
            "dw",
            "top",
            "left",
            "M",
            "act",
        )
    ] + [("alpha", ctypes.c_float), ("beta", ctypes.c_float), ("band", _I64), ("shuffle", _I64)]


@abi("dw_output")
class _DwOutput(ctypes.Structure):
    _fields_ = [
        ("bias", _P),
        ("y32", _P),
        ("y8", _P),
        ("scale", _P),
        ("zero_point", ctypes.c_int32),
        ("lo", ctypes.c_int32),
        ("hi", ctypes.c_int32),
        ("table", _P),
    ]


@abi("float_conv_task")
class _FloatConvTask(ctypes.Structure):
    _fields_ = [("fn", _P), ("x", _P), ("w", _P), ("bias", _P), ("y", _P), ("g", _P)]


@abi("int_conv_task")
class _IntConvTask(ctypes.Structure):
    _fields_ = [
        ("fn", _P),
        ("x", _P),
        ("wc", _P),
        ("g", _P),
        ("o", _P),
        ("x_signed", ctypes.c_int32),
        ("x_zp", ctypes.c_int32),
    ]


def depthwise_ok(x: np.ndarray, w: np.ndarray, begin) -> bool:
    """Whether the native depthwise conv takes this 2-D conv (group == C; C-contiguous x)."""
    return (
        core.lib is not None
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
    activation: (code, alpha, beta) as FloatConv's, applied by the AVX-512 kernels (the
    portable depthwise kernel takes none); packed: hand fn the weights as :func:`lane_blocks`
    (the AVX-512 depthwise kernel's order). The geometry and the work split are made once (a MobileNet's
    depthwise conv on a 7x7 image takes about as long as building them in Python did)."""

    __slots__ = ("cuts", "g", "shape", "task", "w", "ways")

    def __init__(
        self,
        fn,
        lanes: int,
        x_shape,
        w,
        out_shape,
        strides,
        dilations,
        begin,
        activation=(0, 0.0, 0.0),
        banded: bool = False,
        packed: bool = False,
        shuffle: int = 0,
    ):
        (N, C, H, W), M = x_shape, w.shape[0]
        _check_sizes("conv", *x_shape, *w.shape, *out_shape, *strides, *dilations, *begin)
        self.w = np.ascontiguousarray(w, np.float32)
        if packed:
            self.w = lane_blocks(self.w.reshape(M, -1))
        self.g = _DwGeometry(
            C, H, W, M // C, *out_shape, *w.shape[2:], *strides, *dilations, *begin, M, *activation
        )
        self.g.shuffle = shuffle
        self.shape = (N, M, *out_shape)
        planes = _dw_parts(self.g, N, -(-M // lanes)) if banded else N * -(-M // lanes)
        self.ways = _ways(math.prod(self.shape) * w[0].size, planes, _DEPTHWISE_MACS)
        self.cuts = _even_cuts(planes, self.ways)
        self.task = _FloatConvTask(fn, None, _addr(self.w), None, None, ctypes.addressof(self.g))

    def __call__(self, x: np.ndarray, bias=None) -> np.ndarray:
        """x C-contiguous float32 of the set-up's shape."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if bias is not None:  # (depthwise.c reads bias[m] for every channel m: bias_entry)
            _, bias, task.bias = bias_entry(bias, self.shape[1], "depthwise conv")
        _run(core.lib.float_conv_range, task, self.cuts, self.ways, "depthwise conv")
        return y


def depthwise_setup(
    x_shape, w, out_shape, strides, dilations, begin, activation=None, shuffle: int = 0
) -> PlaneConv | None:
    """Depthwise 2-D conv (w: (M, 1, kh, kw), M a multiple of C) set up for x_shape: a
    PlaneConv. With an ``activation`` ((code, alpha, beta), CONV_ACTIVATIONS) where the
    AVX-512 kernel runs (``depthwise_activates()``), else None. shuffle > 1: x's channels
    are read as a channel shuffle of that many groups leaves them (ShuffleNet's Reshape ->
    Transpose -> Reshape: channel i * shuffle + j is x's j * (C / shuffle) + i), C a multiple
    of it."""
    if activation is not None and activation[0] and not depthwise_activates():
        return None
    if shuffle > 1 and x_shape[1] % shuffle:
        raise InvalidArgument(
            f"onyx native depthwise conv: {x_shape[1]} channels in {shuffle} shuffle groups"
        )
    return PlaneConv(
        core.lib.depthwise_f32,
        core.lib.depthwise_lanes,
        x_shape,
        w,
        out_shape,
        strides,
        dilations,
        begin,
        activation or (0, 0.0, 0.0),
        banded=core.lib.depthwise_lanes == 16,
        packed=core.lib.depthwise_lanes == 16,
        shuffle=shuffle,
    )


@abi("stem_pool")
class _StemPool(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "w", "bias", "y", "g", "pool")] + [("band", _I64)]


#: Bytes of a stem-pool part's conv rows (16 channels), kept in L2 while they are pooled.
_STEM_POOL_BYTES = 192 << 10


class StemPool:
    """An activated stem conv (:func:`stem_setup`'s) and a 2-D MaxPool over its output in one
    native call (depthwise.c's onyx_stem_pool_f32_range): bands of pooled rows, each pooling
    the conv rows it computed while they are in cache, so the conv's output is never written
    whole. The stem's and window.c's values, to the bit. pool: (kernel, strides, dilations,
    pads (top, left, bottom, right), out_shape) of the pool over the conv's output."""

    __slots__ = ("cuts", "keep", "shape", "task", "ways")

    def __init__(self, stem: ActivatedStem, pool: tuple):
        from .window import _Pool2d

        kernel, strides, dilations, pads, out_shape = pool
        N, M, OH, OW = stem.shape
        _check_sizes("conv max pool", *kernel, *strides, *dilations, *pads, *out_shape)
        pool2d = _Pool2d(None, None, OH, OW, *out_shape, *kernel, *strides, *dilations, *pads,
                         0, 0, 0)  # fmt: skip
        band = out_shape[0]  # (pooled rows a part: its conv rows' 16 planes fit the budget)
        while band > 1 and 64 * OW * ((band - 1) * strides[0] + kernel[0]) > _STEM_POOL_BYTES:
            band = -(-band // 2)
        blocks, threads = -(-M // 16), _threads.get() or _cpu_count()
        while band > 1 and N * blocks * -(-out_shape[0] // band) < 2 * threads:
            band = -(-band // 2)
        parts = N * blocks * -(-out_shape[0] // band)
        self.shape = (N, M, *out_shape)
        self.ways = _ways(N * M * OH * OW * stem.w[0].size, parts, _DEPTHWISE_MACS)
        self.cuts = _even_cuts(parts, self.ways)
        self.keep = (stem, pool2d)  # (the task points into both)
        self.task = _StemPool(None, _addr(stem.w), None, None, ctypes.addressof(stem.g),
                              ctypes.addressof(pool2d), band)  # fmt: skip

    def __call__(self, x: np.ndarray, bias=None) -> np.ndarray:
        """x C-contiguous float32 of the stem's input shape."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if bias is not None:
            _, bias, task.bias = bias_entry(bias, self.shape[1], "conv max pool")
        _run(core.lib.stem_pool_range, task, self.cuts, self.ways, "conv max pool")
        return y


def stem_pool_setup(stem, pool: tuple) -> StemPool | None:
    """A :class:`StemPool` of ``stem`` (an ActivatedStem, else None) and ``pool`` where its
    every band has a window row in the conv's output, else None."""
    if not isinstance(stem, ActivatedStem) or not core.lib.stem_pool_range:
        return None
    kernel, strides, dilations, pads, out_shape = pool
    OH = stem.shape[2]
    if len(kernel) != 2 or pads[0] >= kernel[0] or (out_shape[0] - 1) * strides[0] - pads[0] >= OH:
        return None
    return StemPool(stem, pool)


def lane_blocks(w: np.ndarray) -> np.ndarray:
    """Depthwise weights (M, K) as (blocks of 16 channels, K, 16), the lanes past M zero: the
    AVX-512 kernels' order, where each tap's 16 weights are one vector (they had been
    gathered from M rows for every part of every call)."""
    M, K = w.shape
    blocks = np.zeros((-(-M // 16) * 16, K), w.dtype)
    blocks[:M] = w
    return np.ascontiguousarray(blocks.reshape(-1, 16, K).transpose(0, 2, 1))


#: Bytes of padded 16-lane input rows that an AVX-512 depthwise part fills and reads: its
#: band of output rows is cut to fit L2: a whole block of 16 channels as one part would
#: fill and read back its padded input from L3, on one thread when the layer has 16
#: channels (a MobileNet's first block).
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
    return core.lib is not None and core.lib.depthwise_lanes == 16


def _int_output(out: _DwOutput, keep: list, M: int, bias, scale, y_zero_point, table):
    """Points out at the int32 bias [M] and, with ``scale``, at the requantization to
    y_zero_point's type (and the 256-byte ``table`` by bit pattern: an activation's), the
    arrays appended to keep; the output's type (int32 sums without scale)."""
    if bias is not None:
        keep.append(np.ascontiguousarray(bias, np.int32))
        out.bias = _addr(keep[-1])
    if scale is None:
        return np.dtype(np.int32)
    dtype = np.dtype(y_zero_point.dtype)
    keep.append(np.ascontiguousarray(np.broadcast_to(scale, (M,)), np.float32))
    out.scale = _addr(keep[-1])
    out.lo, out.hi = core.int_range(dtype)
    out.zero_point = int(y_zero_point.reshape(-1)[0])
    if table is not None:
        keep.append(np.ascontiguousarray(table).view(np.uint8))
        out.table = _addr(keep[-1])
    return dtype


class IntPlaneConv:
    """Depthwise 2-D conv of bytes x (N, C, H, W) minus x_zero_point with wc (M, kh, kw: the
    weights minus their zero points, int16) (+ int32 bias [M]): exact int32 sums, or with
    ``scale`` ([M] float32) requantized to y_zero_point's type as :func:`int8_gemm` does. Set
    up once per input shape and constants, as PlaneConv (the geometry, the output's constants
    and the work split took a 7x7 layer's Python longer than its kernel)."""

    __slots__ = ("cuts", "dtype", "g", "keep", "out", "shape", "task", "ways")

    def __init__(
        self,
        x_shape,
        x_dtype,
        x_zero_point: int,
        wc: np.ndarray,
        bias,
        out_shape,
        strides,
        dilations,
        begin,
        *,
        scale=None,
        y_zero_point=None,
        table=None,
    ):
        (N, C, H, W), M = x_shape, wc.shape[0]
        _check_sizes("conv", *x_shape, *wc.shape, *out_shape, *strides, *dilations, *begin)
        self.g = _DwGeometry(
            C, H, W, M // C, *out_shape, *wc.shape[1:], *strides, *dilations, *begin, M
        )
        self.shape = (N, M, *out_shape)
        taps = np.ascontiguousarray(wc, np.int16)
        if core.lib.depthwise_lanes == 16:
            taps = lane_blocks(taps.reshape(M, -1))
        self.out, self.keep = _DwOutput(), [taps]
        self.dtype = _int_output(self.out, self.keep, M, bias, scale, y_zero_point, table)
        blocks = -(-M // core.lib.depthwise_lanes)
        planes = _dw_parts(self.g, N, blocks) if core.lib.depthwise_lanes == 16 else N * blocks
        self.ways = _ways(math.prod(self.shape) * wc[0].size, planes, _DEPTHWISE_MACS)
        self.cuts = _even_cuts(planes, self.ways)
        self.task = _IntConvTask(
            core.lib.depthwise_i8,
            None,
            _addr(self.keep[0]),
            ctypes.addressof(self.g),
            None,
            int(x_dtype == np.int8),
            int(x_zero_point),
        )

    def __call__(self, x: np.ndarray, x_zero_point: int | None = None) -> np.ndarray:
        """x C-contiguous bytes of the set-up's shape and type; ``x_zero_point``: this call's
        (a dynamically quantized x's changes from call to call), the set-up's if None."""
        y = np.empty(self.shape, self.dtype)
        out = _DwOutput.from_buffer_copy(self.out)  # (calls may come from several threads)
        if self.dtype.itemsize == 1:
            out.y8 = _addr(y)
        else:
            out.y32 = _addr(y)
        task = _IntConvTask.from_buffer_copy(self.task)
        task.x, task.o = _addr(x), ctypes.addressof(out)
        if x_zero_point is not None:
            task.x_zp = x_zero_point  # (ctypes refuses a value past int32: a byte's fits)
        _run(core.lib.int_conv_range, task, self.cuts, self.ways, "depthwise conv")
        return y

    def bound(self):
        """``call(x)``: this conv of a C-contiguous x of the set-up's shape and type, with
        the set-up's zero point, as __call__ computes it in one frame (a bound step's: the
        part and the cuts' address looked up once)."""
        empty, shape, dtype, narrow = np.empty, self.shape, self.dtype, self.dtype.itemsize == 1
        out_copy, task_copy = _DwOutput.from_buffer_copy, _IntConvTask.from_buffer_copy
        template, out_template, cuts = self.task, self.out, self.cuts
        part = core.lib.int_conv_range
        cuts_at, parts, ways, byref, addressof = (
            _addr(cuts),
            len(cuts) - 1,
            self.ways,
            ctypes.byref,
            ctypes.addressof,
        )

        def call(x, _keep=(self, cuts)):
            y = empty(shape, dtype)
            out = out_copy(out_template)  # (calls may come from several threads)
            if narrow:
                out.y8 = _addr(y)
            else:
                out.y32 = _addr(y)
            task = task_copy(template)
            task.x, task.o = _addr(x), addressof(out)
            status = core.lib.onyx_parallel(part, byref(task), cuts_at, parts, ways)
            if status:
                core.check(status, "depthwise conv")
            return y

        return call


#: The direct conv takes convs whose windows have at most this many values (C * kh * kw;
#: _core's: callers read it without importing this family).
SMALL_CONV_K = core.SMALL_CONV_K


def conv_small_ok(x: np.ndarray, w: np.ndarray, begin) -> bool:
    """Whether :func:`conv_small_f32` takes this 2-D group-1 conv: few input channels."""
    return (
        core.lib is not None
        and bool(core.lib.conv_small)
        and x.ndim == 4
        and x.flags.c_contiguous
        and w.shape[0] >= 8  # (before w[0]: a weight of no output channels has none)
        and 0 < w[0].size <= SMALL_CONV_K
        and min(begin) >= 0
    )


def conv_small_f32(x, w, bias, out_shape, strides, dilations, begin) -> np.ndarray:
    """A group-1 conv whose windows are small: 16 output channels per AVX-512 vector (a
    network's stem); see PlaneConv."""
    conv = PlaneConv(
        core.lib.conv_small, 16, x.shape, w, out_shape, strides, dilations, begin, banded=True
    )
    return conv(x, bias)


class ActivatedStem(PlaneConv):
    """A stem conv (see conv_small_ok) with its activation applied as the kernel stores, set
    up once as FloatConv is and called as it is; with a residual z (FusedConv's, added before
    the activation) it declines: None, the caller's numpy path."""

    __slots__ = ()

    def __call__(self, x: np.ndarray, bias=None, z=None) -> np.ndarray | None:
        return super().__call__(x, bias) if z is None else None


def stem_setup(x_shape, w, geo: dict, begin, activation: tuple) -> ActivatedStem | None:
    """The direct stem conv with ``activation`` ((code, alpha, beta), CONV_ACTIVATIONS, code
    non-zero) for x_shape, where the kernel runs (AVX-512), else None. geo: the conv's
    geometry (out_shape, strides, dilations)."""
    if core.lib is None or not core.lib.conv_small or not activation[0]:
        return None
    if w[0].size > SMALL_CONV_K or w.shape[0] < 8 or min(begin) < 0:
        return None  # (conv_small_ok's, on shapes)
    out_shape, strides, dilations = geo["out_shape"], geo["strides"], geo["dilations"]
    return ActivatedStem(
        core.lib.conv_small,
        16,
        x_shape,
        w,
        out_shape,
        strides,
        dilations,
        begin,
        activation,
        banded=True,
    )


def bind(lib, isa: int) -> None:
    lib.float_conv_range = range_of(lib, "float_conv")
    lib.int_conv_range = range_of(lib, "int_conv")
    if isa & core.ISA_AVX512:  # depthwise convs by blocks of 16 channels, and the small conv
        kernels = (
            lib.onyx_depthwise_f32_avx512,
            lib.onyx_depthwise_i8_avx512,
            lib.onyx_conv_small_f32_avx512,
            16,
        )
    else:
        kernels = (lib.onyx_depthwise_f32, lib.onyx_depthwise_i8, None, 1)
    lib.depthwise_f32, lib.depthwise_i8, lib.conv_small = (address(fn) for fn in kernels[:3])
    lib.depthwise_lanes = kernels[3]
    lib.stem_pool_range = range_of(lib, "stem_pool_f32") if isa & core.ISA_AVX512 else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
