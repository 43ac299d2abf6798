"""float32 ConvTranspose, 1-D and 2-D (convtranspose.c): a GEMM into columns per block of
output channels, scattered into the output planes."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _addr,
    _check_sizes,
    _even_cuts,
    _filled,
    _run,
    _ways,
    abi,
    cached_bias,
    range_of,
)


@abi("convt_f32")
class _ConvTF32(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "w", "bias", "y")] + [
        (name, _I64)
        for name in "N C H W M OH OW kh kw sh sw dh dw top left group chans blocks rows".split()
    ]


def conv_transpose_ok() -> bool:
    """Whether :class:`FloatConvTranspose` runs here (the library built)."""
    return core.lib is not None and bool(core.lib.convt_f32_range)


#: Rows (channel, tap) of columns a part computes at least: fewer, and splitting the output
#: channels between threads costs more in the tile's edges than it gains.
_LEAST_ROWS = 24

#: Floats of columns a part computes before it scatters them (they stay in L2): a large image's
#: channels are split into more blocks.
_COLUMN_FLOATS = 1 << 16


def _blocks(N: int, group: int, Mg: int, taps: int, pixels: int, ways: int) -> int:
    """Blocks of output channels per group: enough that every thread has parts (two each),
    while a block keeps _LEAST_ROWS rows of columns, and few enough channels per block that
    its columns stay about _COLUMN_FLOATS."""
    blocks = 1
    while (
        N * group * blocks < 2 * ways
        and blocks < Mg
        and -(-Mg // (2 * blocks)) * taps >= _LEAST_ROWS
    ):
        blocks *= 2
    most = max(1, _COLUMN_FLOATS // (taps * pixels))  # channels per block
    return max(blocks, -(-Mg // most))


def pack_conv_transpose(w: np.ndarray, group: int, chans: int) -> tuple[np.ndarray, int]:
    """Weights (C, Mg, kh, kw) as the kernel's panels, (group, blocks, rows / tile, C / group,
    tile) with rows = chans * kh * kw rounded up to the tile (zero rows past them), and rows."""
    tr = core.lib.convt_f32_tile
    C, Mg = w.shape[:2]
    Cg, taps = C // group, math.prod(w.shape[2:])
    blocks = -(-Mg // chans)
    rows = -(-chans * taps // tr) * tr
    wt = np.zeros((group, blocks * chans * taps, Cg), np.float32)  # rows (m, a, b) by c
    wt[:, : Mg * taps] = w.reshape(group, Cg, Mg * taps).transpose(0, 2, 1)
    wt = wt.reshape(group, blocks, chans * taps, Cg)
    panels = np.zeros((group, blocks, rows, Cg), np.float32)
    panels[:, :, : chans * taps] = wt
    panels = panels.reshape(group, blocks, rows // tr, tr, Cg).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(panels), rows


class FloatConvTranspose:
    """A 2-D float32 ConvTranspose set up for one input shape: x (N, C, H, W), weights
    (C, M / group, kh, kw); begin: the top and left pads (>= 0; outputs past the full output
    are the bias alone), out_shape (OH, OW)."""

    __slots__ = ("shape", "task", "cuts", "ways", "packed", "bias")

    def __init__(self, x_shape, w: np.ndarray, group: int, out_shape, strides, dilations, begin):
        N, C, H, W = x_shape
        kernel, Mg = w.shape[2:], w.shape[1]
        M, taps = Mg * group, math.prod(kernel)
        values = (*x_shape, M, *out_shape, *kernel, *strides, *dilations, *begin, group)
        _check_sizes("ConvTranspose", *values)
        work = N * C * Mg * taps * H * W
        ways = _ways(work, N * M)
        blocks = _blocks(N, group, Mg, taps, H * W, ways)
        chans = -(-Mg // blocks)
        blocks = -(-Mg // chans)
        self.packed, rows = pack_conv_transpose(w, group, chans)
        self.bias = (None, None, None)
        self.shape = (N, M, *out_shape)
        self.task = _ConvTF32(None, _addr(self.packed), None, None, *values, chans, blocks, rows)
        parts = N * group * blocks
        self.ways = min(ways, parts)
        self.cuts = _even_cuts(parts, self.ways)

    def __call__(self, x: np.ndarray, bias=None) -> np.ndarray:
        """conv_transpose(x) + bias [M]; x C-contiguous float32."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if bias is not None:
            entry = cached_bias(self, bias, self.task.M, "ConvTranspose")  # (alive: a local)
            task.bias = entry[2]
        _run(core.lib.convt_f32_range, task, self.cuts, self.ways, "ConvTranspose")
        return y


def bind(lib, isa: int) -> None:
    rows = _I64()
    lib.onyx_convt_f32_tile.argtypes = [_P]
    lib.onyx_convt_f32_tile.restype = None
    lib.onyx_convt_f32_tile(ctypes.byref(rows))
    lib.convt_f32_tile = rows.value
    lib.convt_f32_range = range_of(lib, "convt_f32")


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
