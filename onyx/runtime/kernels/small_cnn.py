"""Set-ups of the small CNN kernels (native/small_cnn.c) for the conv and pool kernels: a
batch-1 serving CNN's layers (a U-Net at 32x32: convs of 8x8 to 32x32 pixels and 3 to 64
channels, 2x2 max pools) are a few microseconds of work each, where the general kernels'
tiles left lanes idle and their calls cost as much again; and the 7x7 and 14x14 layers of
ImageNet CNNs (output planes of at most 256 pixels), as channel vectors."""

from __future__ import annotations

import functools

import numpy as np

from .. import native
from .derived import derived, frozen

#: Whether the small kernels are used where they apply (tests of the general kernels turn them
#: off, so that these still run the shapes they test).
ENABLED = True

#: Whether a small plane's conv (native.small_cnn.CV_MAX_PIXELS) takes channel vectors.
CHANNEL_VECTORS = True


def conv_setup(x_shape, W, group: int, geo: dict, begin, activation: int, alpha, beta):
    """The small conv (native.SmallConv) for this float32 weight, input shape and geometry
    (conv.py's), or None where it does not apply."""
    if not ENABLED or not native.small_conv_ok():
        return None
    out_shape, strides, dilations = geo["out_shape"], geo["strides"], geo["dilations"]
    where = (x_shape, W.shape, group, out_shape, strides, dilations, begin)
    stem = W[0].size <= native.SMALL_CONV_K and W.shape[2:] != (1, 1)  # (native.stem_setup's)
    cv = CHANNEL_VECTORS and not stem and native.small_conv_applies(*where, cv=True)
    pixels = native.small_conv_applies(*where)
    if cv and pixels and whole_rows(W.shape, out_shape):
        cv = False
    if not cv and not pixels:
        return None
    if cv:
        key = "small conv channel panels"
        packed = derived(W, key, lambda: frozen(native.pack_small_conv(W, native.CV_PANEL)))
    else:
        packed = derived(W, "small conv panels", lambda: frozen(native.pack_small_conv(W)))
    return native.SmallConv(
        x_shape, packed, W.shape[0], W.shape[2:], out_shape, dilations, begin,
        activation, alpha, beta, cv=cv, strides=strides,
    )  # fmt: skip


def whole_rows(w_shape, out_shape) -> bool:
    """Whether pixel vectors beat channel vectors on a small plane the pixel tiles take (unit
    stride, "same" width): a kernel wider than 1x1 (channel vectors pack its (tap, channel)
    rows per block of 16 pixels; a 1x1 they read in place) over rows of whole vectors (a
    16-wide plane: no lane idle in any vector). A U-Net's 16x16 layers took 0.78-0.96 of the
    channel tiles' time this way (3x3, 16-64 -> 16-48 channels; CPU time, 1 thread), where
    13x13 and 14x14 planes, whose rows leave lanes idle, took 1.0-1.07 (kept channel vectors)."""
    return w_shape[2] * w_shape[3] > 1 and out_shape[1] % 16 == 0


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


def conv_transpose_setup(x_shape, W, group: int, geometry: tuple):
    """A float32 ConvTranspose with a 2x2 kernel at stride 2 and no padding (a U-Net's
    upsampling) as native.SmallConv's 1x1 conv of 4 x channels rows, called as
    FloatConvTranspose is: (x, bias) -> y; or None where that does not apply. geometry:
    conv_transpose.py's (kernel, strides, dilations, begin pads, output shape)."""
    kernel, strides, dilations, begin, out = geometry
    if not ENABLED or len(x_shape) != 4 or group != 1 or not native.small_conv_ok():
        return None
    N, C, H, Wd = x_shape
    if list(kernel) != [2, 2] or list(strides) != [2, 2] or list(dilations) != [1, 1]:
        return None
    if any(begin) or list(out) != [2 * H, 2 * Wd] or Wd % 8 or W.shape[1] > native.MAX_CHANNELS:
        return None
    if H * Wd > native.MAX_PIXELS or C > native.small_cnn.MAX_K:
        return None
    M = 4 * W.shape[1]  # rows (channel, a, b): w[c, m, a, b] as a 1x1 conv's (m, a, b; c)
    packed = derived(
        W,
        "small convT panels",
        lambda: frozen(native.pack_small_conv(W.transpose(1, 2, 3, 0).reshape(M, C, 1, 1))),
    )
    conv = native.SmallConv(x_shape, packed, M, (1, 1), (H, Wd), (1, 1), (0, 0), up=True)
    return _Upsampling(conv)


class _Upsampling:
    """(x, bias) -> y of a ConvTranspose on its SmallConv: the bias repeated for each of an
    output channel's 4 rows (once per bias object: a constant's is the same every call)."""

    __slots__ = ("bias", "conv")

    def __init__(self, conv: native.SmallConv):
        self.conv, self.bias = conv, (None, None)

    def __call__(self, x: np.ndarray, bias=None) -> np.ndarray:
        if bias is not None:
            entry = self.bias
            if bias is not entry[0]:
                entry = self.bias = (bias, np.repeat(np.asarray(bias, np.float32), 4))
            bias = entry[1]
        return self.conv(x, bias)
