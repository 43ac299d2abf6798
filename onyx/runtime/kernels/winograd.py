"""Float32 3x3 unit-stride convs by Winograd's F(2x2, 3x3) (native.WinogradConv): conv.py's
_float_conv tries it first. A direct conv runs at the multiply-add units' peak already; this
one does 16 multiply-adds per 2x2 output pixels where the direct conv does 36."""

from __future__ import annotations

from .. import native
from .derived import derived, frozen

#: Whether the Winograd conv is used where it applies (tests of the direct kernels turn it
#: off, so that these still run the shapes they test).
ENABLED = True


def conv_setup(x_shape, W, group: int, geo: dict, begin, activation: int, alpha, beta):
    """The Winograd conv for this float32 weight, input shape and geometry (conv.py's), or
    None where it does not apply."""
    if not ENABLED:
        return None
    out_shape, strides, dilations = geo["out_shape"], geo["strides"], geo["dilations"]
    # (the geometry first: winograd_ok imports the family, which a conv it does not take,
    # most of them, never needs)
    if not native.winograd_applies(x_shape, W.shape, group, out_shape, strides, dilations, begin):
        return None
    if not native.winograd_ok():
        return None
    packed = derived(W, "winograd f32", lambda: frozen(native.pack_winograd(W)))
    return native.WinogradConv(
        x_shape, packed, W.shape[0], out_shape, begin, activation, alpha, beta
    )
