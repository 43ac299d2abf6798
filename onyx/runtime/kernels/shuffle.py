"""Kernel of ShuffleNet's channel shuffle fused into the depthwise conv after it
(optimizer/shuffle.py): ai.onyx ChannelShuffleConv(X, shape, W, B) = FusedConv(Reshape(
Transpose(Reshape(X, shape), perm=[0, 2, 1, 3, 4]), X's shape), W, B).

A depthwise conv reads each input channel's plane on its own, so the shuffle needs no copy:
the native kernel (depthwise.c) reads channel i * g + j of the shuffled tensor from plane
j * (C / g) + i of X. The shuffle's copy (the second Reshape's: the Transpose is a view) and
two steps are gone.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, binds, op


def _shuffled(X: np.ndarray, shape, groups: int) -> np.ndarray:
    """The Reshape -> Transpose -> Reshape of the body, as numpy (a copy). ``groups`` (0:
    any): the shuffle's groups the fusion saw, which a fed ``shape`` must make too."""
    from .shape import _ints, _reshape

    x5 = _reshape(X, _ints(shape), 0)  # (the unfused Reshape's errors)
    if x5.ndim != 5:
        raise ValueError(f"ChannelShuffleConv: shape {list(shape)} is not 5-D")
    # (the reshaped dims, as the unfused graph's output check compares them: a fed shape
    # may write -1 or 0 at any index that resolves to the same dims)
    if groups and x5.shape != (X.shape[0], groups, X.shape[1] // groups, *X.shape[2:]):
        raise ValueError(
            f"ChannelShuffleConv: shape {_ints(shape)} reshapes X {list(X.shape)} to "
            f"{list(x5.shape)}, not the shuffle in {groups} groups of the model's shape "
            "initializer (a constant before IR 4, as the unfused graph's shapes were inferred)"
        )
    return np.ascontiguousarray(x5.transpose(0, 2, 1, 3, 4)).reshape(X.shape)


def shuffle_groups(x_shape, shape) -> int | None:
    """The groups g of the channel shuffle ``shape`` makes of x_shape (N, C, H, W): shape
    resolves to (N, g, C / g, H, W); else None."""
    if len(x_shape) != 4 or len(shape) != 5:
        return None
    N, C, H, W = x_shape
    dims = [int(d) for d in shape]
    dims = [x_shape[i] if d == 0 and i < 4 else d for i, d in enumerate(dims)]
    if dims[0] != N or dims[3:] != [H, W] or dims[1] < 1:
        return None
    g = dims[1]
    if dims[2] == -1 and C % g == 0 or dims[2] * g == C:
        return g
    return None


def _bind_channel_shuffle_conv(inputs, attrs, constant):
    """registry.binds for a float32 depthwise conv after the shuffle: the native depthwise
    conv set up once, reading X's planes in shuffled order. None elsewhere (the kernel as
    written: the shuffle's copy, then FusedConv)."""
    X, shape, W, B = (tuple(inputs) + (None,))[:4]
    if X.dtype != np.float32 or W.dtype != np.float32 or X.ndim != 4 or not X.size:
        return None
    g = shuffle_groups(X.shape, shape)
    C = X.shape[1]
    if (
        g is None
        or attrs["groups"] not in (0, g)
        or attrs["group"] != C
        or W.shape != (C, 1, *W.shape[2:])
        or W.ndim != 4
    ):
        return None
    from .conv import _depthwise_setup
    from .fused import native_activation

    applied = native_activation(attrs)
    if applied is None:
        return None
    code, lo, hi = applied
    if code and not native.depthwise_activates():
        return None
    geometry = tuple(attrs[k] for k in ("auto_pad", "pads", "strides", "dilations", "kernel_shape"))
    try:
        conv = _depthwise_setup(X.shape, W, geometry, (code, lo, hi) if code else None, g)
    except ValueError:
        return None  # (the kernel as written names the problem)
    if conv is None:
        return None
    contiguous = np.ascontiguousarray
    known = shape  # (an IR 3 model's initializers are inputs a caller may feed: read per call)

    def bound(X, shape, W, B=None):
        if shape is not known and shuffle_groups(X.shape, shape) != g:
            return channel_shuffle_conv(X, shape, W, B, **attrs)  # (refuses it, or computes)
        return conv(contiguous(X), B)

    return native.under_setting(bound, channel_shuffle_conv, attrs)


@binds(_bind_channel_shuffle_conv, constants=(2,))  # (shape and B: read per call)
@op("ChannelShuffleConv", since=1, domain=ONYX_DOMAIN, threads="pool")
def channel_shuffle_conv(
    X,
    shape,
    W,
    B=None,
    *,
    activation="",
    activation_params=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    groups=0,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """FusedConv(the channel shuffle of X by ``shape``, W, B) (optimizer/shuffle.py's
    ChannelShuffleConvFusion; ``groups``: the shuffle's, which a fed shape must make)."""
    from .fused import fused_conv

    return fused_conv(
        _shuffled(X, shape, groups),
        W,
        B,
        activation=activation,
        activation_params=activation_params,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
