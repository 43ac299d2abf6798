"""Small CNN layers at serving sizes (small_cnn.c): a direct float32 conv for images of up to a
few thousand pixels (unit stride, output as wide as the input or a little narrower; as
channel vectors, output
planes of up to CV_MAX_PIXELS at any stride: a 7x7 or 14x14 layer) and the 2x2 stride-2 max
pool.

Each is set up once per node and input shape (the task, the packed weights, the threads), and
a call is one ctypes call with the arrays' addresses: the C entry copies the task and runs
its parts, so no task is copied or cut in Python per call (a batch-1 U-Net layer's work is
a few microseconds, as long as that did)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_ELEMENTS,
    _addr,
    _check_sizes,
    _input_addr,
    _ways,
    abi,
    as_residual,
    cached_bias,
    output_array,
)


@abi("small_conv_f32")
class _SmallConvF32(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("x", "w", "bias", "z", "y")]
        + [(name, _I64) for name in "N C H W M OH kh kw dh dw top left nv act".split()]
        + [("alpha", ctypes.c_float), ("beta", ctypes.c_float)]
        + [(name, _I64) for name in ("up", "cv", "OW", "sh", "sw")]
    )


#: Output channels per register tile (small_cnn.c's SC_MR) and most taps (SC_TAPS).
PANEL, MAX_TAPS = 8, 49

#: Most pixels of an output plane the small conv takes (128 x 128): its strips read the
#: input's planes in place, as many as the layer has, each from L2 at best, where conv_f32.c
#: packs L2-sized blocks of columns first.
MAX_PIXELS = 16384

#: The same for a 1x1 conv (32 x 32): conv_f32.c reads a larger image's planes in place too,
#: in blocks of K (256 -> 64 channels at 56x56 took 8-17% longer here, 64 -> 256 at 64x64 27%).
MAX_PIXELS_1X1 = 1024

#: Most output channels and (input channel, tap) pairs: a tile's weights (taps x C x 8
#: floats) stay in L1, and its pixels' rows (C planes) in L2.
MAX_CHANNELS, MAX_K = 256, 2304

#: Output channels per channel-vector tile (small_cnn.c's CV_NR: one vector of 16), and the
#: most pixels of an output plane it takes. Up to 256 (a 14x14 or 16x16 layer) a plane of
#: pixel vectors leaves lanes idle in its last vector (49 pixels: 4 vectors for 3.06), and
#: conv_f32.c's wide strided tiles computed discarded pixels: channel tiles took 0.72-0.77 of
#: the time of 1x1 convs at 7x7, 0.88-0.92 at 14x14, 0.52-0.55 of a 3x3 stride-2 conv to 7x7
#: and 0.74-0.97 of 3x3 convs at 7x7-14x14 (CPU time, 1 thread); at 27x27 and up they gained
#: nothing (0.95-1.19).
CV_PANEL, CV_MAX_PIXELS = 16, 256


def small_conv_ok() -> bool:
    """Whether the small conv and max pool run here (the library built with AVX-512)."""
    return core.lib is not None and bool(core.lib.small_cnn_avx512)


def small_conv_applies(
    x_shape, w_shape, group: int, out_shape, strides, dilations, begin, cv: bool = False
):
    """Whether :class:`SmallConv` takes this 2-D conv: group 1, unit stride, an output as wide
    as the input ("same" padding across) or a little narrower (a "valid" conv after a Pad
    node), a small image and layer; with ``cv``, as channel
    vectors: an output plane of at most CV_MAX_PIXELS, any stride and padding, any number of
    output channels."""
    if len(x_shape) != 4 or group != 1 or min(begin) < 0:
        return False
    (N, C, H, W), (M, _, kh, kw) = x_shape, w_shape
    if cv:
        shaped = math.prod(out_shape) <= CV_MAX_PIXELS
    else:
        most = MAX_PIXELS if kh * kw > 1 else MAX_PIXELS_1X1
        unit = tuple(strides) == (1, 1)
        # (narrower, as after an explicit Pad: the tiles compute the W-wide plane, the
        # columns past the output's dropped, so at most half of them)
        wide = out_shape[1] == W or W // 2 <= out_shape[1] < W
        shaped = unit and wide and out_shape[0] * W <= most
    return (
        shaped
        and (cv or M <= MAX_CHANNELS)
        and kh * kw <= MAX_TAPS
        and C * kh * kw <= MAX_K
        and N * C * H * W > 0
        and dilations[0] >= 1
        and dilations[1] >= 1
    )


def pack_small_conv(w: np.ndarray, panel: int = PANEL) -> np.ndarray:
    """Weights (M, C, kh, kw) as small_cnn.c reads them: (panels, kh * kw, C, panel), zeros
    past M (panel: PANEL for pixel vectors, CV_PANEL for channel vectors)."""
    M, C = w.shape[:2]
    taps = math.prod(w.shape[2:])
    panels = -(-M // panel)
    wp = np.zeros((panels * panel, C, taps), np.float32)
    wp[:M] = w.reshape(M, C, taps)
    return np.ascontiguousarray(wp.reshape(panels, panel, C, taps).transpose(0, 3, 2, 1))


class SmallConv:
    """A float32 conv (small_cnn.c) set up for one input shape, with weights packed by
    :func:`pack_small_conv`; called as conv_f32.FloatConv is: (x, bias, z) -> y. With ``up``,
    a 2x2 stride-2 ConvTranspose run as the 1x1 conv of its M = 4 x channels rows (channel,
    row, column of the 2x2 block; its bias repeated so), each stored to its cell of the
    (N, M / 4, 2H, 2W) output."""

    #: (its call takes ``out``: a fused Concat's convs write their parts of its output)
    writes_out = True

    __slots__ = ("bias", "packed", "shape", "task", "task_at", "ways")

    def __init__(
        self,
        x_shape,
        packed: np.ndarray,
        M: int,
        kernel,
        out_shape,
        dilations,
        begin,
        activation: int = 0,
        alpha: float = 0.0,
        beta: float = 0.0,
        up: bool = False,
        cv: bool = False,
        strides=(1, 1),
    ):
        N, C, H, W = x_shape
        _check_sizes("small conv", *x_shape, M, *kernel, *out_shape, *dilations, *begin, *strides)
        P, K = math.prod(out_shape), C * math.prod(kernel)
        panel = CV_PANEL if cv else PANEL
        if packed.size != -(-M // panel) * panel * K:  # (the kernel reads this many)
            raise InvalidArgument(
                f"onyx native small conv: {packed.size} packed weights for {M} outputs of {K}"
            )
        nv = min(3, -(-P // 16))
        if cv:  # (blocks of at most 16 pixels, panels of 16 channels)
            parts = N * -(-P // 16) * -(-M // CV_PANEL)
        else:
            parts = N * -(-P // (16 * nv)) * -(-M // PANEL)
        self.ways = _ways(N * P * M * K, parts)
        self.shape = (N, M // 4, 2 * H, 2 * W) if up else (N, M, *out_shape)
        self.packed, self.bias = packed, (None, None, None)
        self.task = _SmallConvF32(
            None, _addr(packed), None, None, None, N, C, H, W, M, out_shape[0], *kernel,
            *dilations, *begin, nv, activation, alpha, beta, int(up), int(cv), out_shape[1],
            *strides,
        )  # fmt: skip
        self.task_at = ctypes.addressof(self.task)

    def __call__(self, x: np.ndarray, bias=None, z=None, out=None) -> np.ndarray:
        """activation(conv(x) + bias [M] + z (the output's shape)); x C-contiguous float32;
        written into ``out`` where given (core.output_array)."""
        y = output_array(self.shape, out, "small conv")
        b = None
        if bias is not None:
            entry = cached_bias(self, bias, self.task.M, "small conv")  # (alive: a local)
            b = entry[2]
        residual = None
        if z is not None:
            z = as_residual(z, y.shape)
            residual = _input_addr(z)  # (z, a local, keeps a converted copy alive)
        run = core.lib.onyx_small_conv_f32  # (looked up per call: tests count the calls)
        status = run(self.task_at, _input_addr(x), _addr(y), b, residual, self.ways)
        if status:
            core.check(status, "small conv")
        return y

    def bound(self):
        """``call(x, bias)``: __call__ of a C-contiguous x of the set-up's shape, without a
        residual, in one frame (a bound step's: registry.binds)."""
        empty, shape, f32, M = np.empty, self.shape, np.float32, self.task.M

        def call(x, bias=None):
            y = empty(shape, f32)
            entry = None if bias is None else cached_bias(self, bias, M, "small conv")
            b = None if entry is None else entry[2]  # (entry, a local: its copy stays alive)
            run = core.lib.onyx_small_conv_f32  # (looked up per call: tests count the calls)
            status = run(self.task_at, _input_addr(x), _addr(y), b, None, self.ways)
            if status:
                core.check(status, "small conv")
            return y

        return call


class MaxPool2x2:
    """The 2x2 stride-2 max pool of (N, C, H, W) float32 without padding (floor: a last odd
    row or column unread), set up for one input shape."""

    __slots__ = ("shape", "task", "task_at", "ways")

    def __init__(self, x_shape):
        N, C, H, W = x_shape
        _check_sizes("max pool", *x_shape)
        planes = N * C
        self.shape = (N, C, H // 2, W // 2)
        self.ways = _ways(planes * H * W, planes, _PARALLEL_ELEMENTS)
        self.task = _SmallConvF32(C=planes, H=H, W=W, OW=W // 2)
        self.task_at = ctypes.addressof(self.task)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.shape, np.float32)
        status = core.lib.onyx_max2x2_f32(self.task_at, _input_addr(x), _addr(y), self.ways)
        if status:
            core.check(status, "max pool")
        return y


def bind(lib, isa: int) -> None:
    lib.onyx_small_conv_f32.argtypes = [_P, _P, _P, _P, _P, _I64]
    lib.onyx_small_conv_f32.restype = ctypes.c_int
    lib.onyx_max2x2_f32.argtypes = [_P, _P, _P, _I64]
    lib.onyx_max2x2_f32.restype = ctypes.c_int
    lib.onyx_small_cnn_avx512.restype = ctypes.c_int
    lib.small_cnn_avx512 = bool(isa & core.ISA_AVX512) and bool(lib.onyx_small_cnn_avx512())


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
