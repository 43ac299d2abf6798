"""Set-ups of the small CNN kernels (native/small_cnn.c) for the conv and pool kernels: a
batch-1 serving CNN's layers (a U-Net at 32x32: convs of 8x8 to 32x32 pixels and 3 to 64
channels, 2x2 max pools) are a few microseconds of work each, where the general kernels'
tiles left lanes idle and their calls cost as much again."""

from __future__ import annotations

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
