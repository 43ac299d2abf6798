"""Set-ups of the small CNN kernels (native/small_cnn.c) for the conv and pool kernels: a
batch-1 serving CNN's layers (a U-Net at 32x32: convs of 8x8 to 32x32 pixels and 3 to 64
channels, 2x2 max pools) are a few microseconds of work each, where the general kernels'
tiles left lanes idle and their calls cost as much again."""

from __future__ import annotations

import functools

import numpy as np

from .. import native
from .derived import derived, frozen

#: Whether the small kernels are used where they apply (tests of the general kernels turn them
#: off, so that these still run the shapes they test).
ENABLED = True


def conv_setup(x_shape, W, group: int, geo: dict, begin, activation: int, alpha, beta):
    """The small conv (native.SmallConv) for this float32 weight, input shape and geometry
    (conv.py's), or None where it does not apply."""
    if not ENABLED or not native.small_conv_ok():
        return None
    out_shape, strides, dilations = geo["out_shape"], geo["strides"], geo["dilations"]
    if not native.small_conv_applies(x_shape, W.shape, group, out_shape, strides, dilations, begin):
        return None
    packed = derived(W, "small conv panels", lambda: frozen(native.pack_small_conv(W)))
    return native.SmallConv(
        x_shape, packed, W.shape[0], W.shape[2:], out_shape, dilations, begin,
        activation, alpha, beta,
    )  # fmt: skip


def max_pool_2x2(X, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode):
    """MaxPool of float32 (N, C, H, W) with a 2x2 window at stride 2 and no padding (a U-Net's
    downsampling) on native.MaxPool2x2, or None where that does not apply."""
    if not ENABLED or X.dtype != np.float32 or X.ndim != 4 or not native.small_conv_ok():
        return None
    if list(kernel_shape) != [2, 2] or list(strides or ()) != [2, 2] or any(pads or ()):
        return None
    if any(d != 1 for d in dilations or ()) or auto_pad not in ("NOTSET", "VALID"):
        return None
    H, W = X.shape[2:]
    if H < 2 or W < 2 or not X.size or ceil_mode and (H % 2 or W % 2):
        return None  # (ceil mode's last window of an odd side: pool.py's path)
    return _max_pool_2x2(X.shape, native.thread_setting())(np.ascontiguousarray(X))


@functools.lru_cache(maxsize=256)
def _max_pool_2x2(shape: tuple, threads: int) -> native.MaxPool2x2:
    """The set-up for an input shape (threads: the setting it was made under)."""
    return native.MaxPool2x2(shape)
