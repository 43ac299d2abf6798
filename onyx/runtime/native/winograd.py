"""A float32 3x3 unit-stride conv by Winograd's F(2x2, 3x3) (winograd.c): 16 multiply-adds
per 2x2 output pixels and channel pair where a direct conv takes 36, with FusedConv's bias,
residual and activation applied as it stores."""

from __future__ import annotations

import ctypes

import numpy as np

from ...errors import InvalidArgument
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
    as_residual,
    cached_bias,
    output_array,
    range_of,
)


@abi("winograd_f32")
class _WinogradF32(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("x", "w", "bias", "z", "y")]
        + [(name, _I64) for name in "N C H W M OH OW top left TH TW act".split()]
        + [("alpha", ctypes.c_float), ("beta", ctypes.c_float)]
    )


#: F(2x2, 3x3)'s weight transform G (4 x 3): U = G g G' per (output, input) channel pair.
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])

#: (Which convs it takes: _core.winograd_applies and its limits, asked before this family is
#: imported.)


def winograd_ok() -> bool:
    """Whether the Winograd conv runs here (the library built with AVX-512, allowed)."""
    return core.lib is not None and bool(core.lib.winograd_range)


def pack_winograd(w: np.ndarray) -> np.ndarray:
    """Weights (M, C, 3, 3) as winograd.c reads them: U = G g G' (computed in float64) as
    (16, panels, C, 8), xi = 4 r + s the transform's cell (r, s), zeros past M."""
    mr = core.lib.winograd_tile[0]
    M, C = w.shape[:2]
    u = np.einsum("ra,mcab,sb->rsmc", _G, w.astype(np.float64), _G).reshape(16, M, C)
    panels = -(-M // mr)
    up = np.zeros((16, panels * mr, C), np.float32)
    up[:, :M] = u
    return np.ascontiguousarray(up.reshape(16, panels, mr, C).transpose(0, 1, 3, 2))


class WinogradConv:
    """A 3x3 unit-stride float32 conv (winograd.c) set up for one input shape, called as
    conv_f32.FloatConv is: (x, bias, z) -> activation(conv(x) + bias + z)."""

    #: (its call takes ``out``: a fused Concat's convs write their parts of its output)
    writes_out = True

    __slots__ = ("bias", "cuts", "packed", "shape", "task", "ways")

    def __init__(
        self, x_shape, packed, M: int, out_shape, begin, activation=0, alpha=0.0, beta=0.0
    ):
        (N, C, H, W), (OH, OW) = x_shape, out_shape
        _check_sizes("winograd conv", *x_shape, M, *out_shape, *begin)
        if packed.shape[:2] != (16, -(-M // core.lib.winograd_tile[0])) or packed.shape[2] != C:
            raise InvalidArgument(
                f"onyx native winograd conv: packed weights {packed.shape} for {C} -> {M} channels"
            )
        TH, TW = -(-OH // 2), -(-OW // 2)
        self.task = _WinogradF32(
            w=_addr(packed), N=N, C=C, H=H, W=W, M=M, OH=OH, OW=OW, top=begin[0],
            left=begin[1], TH=TH, TW=TW, act=activation, alpha=alpha, beta=beta,
        )  # fmt: skip
        blocks = -(-N * TH * TW // core.lib.winograd_tile[1])
        self.ways = _ways(N * OH * OW * M * C * 9, blocks)
        self.cuts = _even_cuts(blocks, self.ways)
        self.packed, self.shape, self.bias = packed, (N, M, OH, OW), (None, None, None)

    def __call__(self, x: np.ndarray, bias=None, z=None, out=None) -> np.ndarray:
        """activation(conv(x) + bias [M] + z (the output's shape)); x C-contiguous float32;
        written into ``out`` where given (core.output_array)."""
        y = output_array(self.shape, out, "winograd conv")
        task = _filled(self.task, x, y)
        if bias is not None:
            entry = cached_bias(self, bias, self.task.M, "winograd conv")  # (alive: a local)
            task.bias = entry[2]
        if z is not None:
            z = as_residual(z, y.shape)  # (a local: a converted copy stays alive)
            task.z = _addr(z)
        _run(core.lib.winograd_range, task, self.cuts, self.ways, "winograd conv")
        return y


def bind(lib, isa: int) -> None:
    tile = (_I64 * 2)()
    lib.onyx_winograd_f32_shape.argtypes = [_P]
    lib.onyx_winograd_f32_shape.restype = None
    lib.onyx_winograd_f32_shape(tile)
    lib.winograd_tile = tuple(tile)
    lib.winograd_range = range_of(lib, "winograd_f32") if isa & core.ISA_AVX512 else None


core.join(__name__, bind)
