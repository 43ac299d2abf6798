"""1-D float32 convs (Conv, FusedConv on (N, C, L)) on the native direct kernel
(native/conv1d.c): audio front-ends, byte and signal classifiers.

Their shapes are unlike an image's: few input channels over long signals, strides up to a
kernel's length (an STFT as a conv: 258 output channels over 5 frames, stride 64, 256 taps),
so the 2-D implicit GEMM (the conv as one of height 1) packed its columns with gathers and
idled most of its 48-pixel tiles. conv.py's native_conv_f32 asks :func:`native_conv1d` first.
"""

from __future__ import annotations

import numpy as np

from .. import native
from .derived import derived


def native_conv1d(
    X: np.ndarray,
    W: np.ndarray,
    B,
    group: int,
    attrs: tuple,
    z=None,
    activation: int = 0,
    alpha: float = 0.0,
    beta: float = 0.0,
) -> np.ndarray | None:
    """activation(conv(X, W) + B + z) for a float32 X (N, C, L), or None where the native
    kernel does not take it (then the caller's other paths run). attrs: native_conv_f32's
    (auto_pad, pads, strides, dilations, kernel_shape); the set-up is kept per constant W."""
    run = conv1d_runner(X.shape, W, group, attrs, activation, alpha, beta)
    return None if run is None else run(X, B, z)


def conv1d_runner(x_shape: tuple, W, group: int, attrs: tuple, activation=0, alpha=0.0, beta=0.0):
    """native_conv1d's kernel set up for inputs of ``x_shape`` (kept per constant W; a bound
    step holds it: registry.binds), called as ``run(X, B, z)``; or None."""
    if not native.conv1d_ok():
        return None
    key = ("conv1d", x_shape, group, attrs, activation, alpha, beta, native.thread_setting())
    return derived(W, key, lambda: _setup(x_shape, W, group, attrs, activation, alpha, beta))


#: A conv node's geometry attributes, in conv_key's order (native_conv_f32's ``attrs``).
_GEOMETRY = ("auto_pad", "pads", "strides", "dilations", "kernel_shape")


def node_conv1d_runner(x_shape: tuple, W, attrs: dict, activation=0, alpha=0.0, beta=0.0):
    """conv1d_runner for a conv node's attributes (its group and geometry): a bound step's
    set-up (registry.binds)."""
    from .conv import conv_key  # (conv.py imports this module)

    geometry = conv_key(*(attrs[k] for k in _GEOMETRY))
    return conv1d_runner(x_shape, W, attrs["group"], geometry, activation, alpha, beta)


def _setup(x_shape, W: np.ndarray, group: int, attrs: tuple, activation, alpha, beta):
    """The kernel set up for this input shape, or None: channel counts that do not match (the
    caller's path raises the error), a kernel_shape other than the weights', negative pads, or
    a depthwise conv (one input channel a group: depthwise.c's planes run it faster)."""
    if activation > native.CONV_ACTIVATIONS["HardSigmoid"]:
        return None  # (conv1d.c applies the clamps; Sigmoid, Tanh: conv_f32.c's, height 1)
    N, C, _ = x_shape
    M = W.shape[0]
    if W.ndim != 3 or group < 1 or C % group or M % group or W.shape[1] * group != C:
        return None
    if group > 1 and W.shape[1] == 1 or attrs[4] and tuple(attrs[4]) != W.shape[2:]:
        return None
    from .conv import _conv_geometry  # (conv.py imports this module)

    geo = _conv_geometry(x_shape, W.shape, *attrs)
    if min(geo["pads"]) < 0:
        return None
    return native.Conv1d(
        x_shape,
        W,
        group,
        geo["out_shape"][0],
        geo["strides"][0],
        geo["dilations"][0],
        geo["pads"][0],
        activation,
        alpha,
        beta,
    )
