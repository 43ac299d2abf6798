"""Kernels of the channels-last ops the optimizer's layout pass emits (optimizer/layout.py):
ai.onyx NhwcFusedConv, NhwcConvHardSwish and NhwcGlobalAveragePool, model-local functions
whose bodies (Transpose, the NCHW op, Transpose back) other runtimes run.

Their tensors are (N, H, W, C). The native kernels (native/nhwc.c, AVX-512) read the input
through its strides (a chain's entry Transpose is a view of the NCHW tensor, never copied);
elsewhere the numpy path is the body itself: the NCHW kernel between two transposes.
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import native
from ..native import nhwc
from ..registry import ONYX_DOMAIN, op
from .conv_geometry import _conv_geometry, conv_key  # (not conv.py: it imports much)
from .derived import prepared


def activation_code(activation: str, params) -> tuple | None:
    """(code, alpha, beta) of a FusedConv activation as the native kernels take it, or None
    for one they do not apply (Sigmoid, Tanh)."""
    code = native.CONV_ACTIVATIONS.get(activation)
    if code is None or activation in ("Sigmoid", "Tanh"):  # (nhwc.c applies the clamps only)
        return None
    return (code, *native.activation_params(activation, params))


def _native_ok(X, W, group: int) -> bool:
    if X.dtype != np.float32 or W.dtype != np.float32 or X.ndim != 4 or W.ndim != 4:
        return False
    if not X.size or not nhwc.available():
        return False
    if group == 1:  # (W of one channel per filter over C > 1 channels is no conv of group 1:
        return W.shape[1] == X.shape[3]  # nhwc.NhwcConv, given no group, would run it depthwise)
    return group == X.shape[3] == W.shape[0] and W.shape[1] == 1


class _Bound:
    """A node's native conv for one input shape and strides, its W and B (constants: the
    set-up holds them packed, so it is kept for these very arrays)."""

    __slots__ = ("b", "conv", "copies", "plain", "setting", "shape", "strides", "w")

    def __init__(self, X, W, B, group: int, attrs: tuple, code: tuple):
        N, H, Wd, C = X.shape
        geo = _conv_geometry((N, C, H, Wd), W.shape, *attrs)
        self.conv, self.copies, self.plain = None, False, None
        if min(geo["pads"]) >= 0:
            self.conv = conv = nhwc.NhwcConv(X.shape, W, B, geo, code, group)
            x = conv.reads(X)
            conv.set_strides(x.strides)
            self.copies = x is not X  # (then every call copies X as this one did)
            self.plain = conv if conv.keeps else conv.plain  # (used only where not copies)
        self.w = weakref.ref(W)
        self.b = (lambda: None) if B is None else weakref.ref(B)
        self.shape, self.strides, self.setting = X.shape, X.strides, native.thread_setting()


def _conv_runner(activation: str, params, group: int, attrs: tuple):
    """fn(X, W, B=None, S=None, Z=None): the conv of a node with these attributes (S: per-image
    scales of X's channels (N, 1, 1, C), Z: a residual), its last set-up kept."""
    code = activation_code(activation, params)
    last: list = [None]

    def run(X, W, B=None, S=None, Z=None):
        bound = last[0]
        # (tested field by field, no key tuple: a small layer's kernel takes a few
        # microseconds, about what building the key tuple and the general checks cost)
        if (
            bound is None
            or bound.w() is not W
            or bound.b() is not B
            or X.shape != bound.shape
            or X.strides != bound.strides
            or _setting() != bound.setting
        ):
            constants = not W.flags.writeable and (B is None or not B.flags.writeable)
            if code is None or not constants or not _native_ok(X, W, group):
                return _body(X, W, B, S, Z, group, attrs, activation, params)
            bound = last[0] = _Bound(X, W, B, group, attrs, code)
        conv = bound.conv
        if conv is not None and S is None and Z is None and not bound.copies:
            return bound.plain(X)  # (the common call)
        if conv is None or not _extras_ok(conv, X, S, Z):
            return _body(X, W, B, S, Z, group, attrs, activation, params)
        return conv(conv.reads(X) if bound.copies else X, S, Z)

    def give_back() -> None:  # (conv_chain: a chain runs this layer now)
        bound = last[0]
        if bound is not None and bound.conv is not None:
            bound.conv.give_back()

    run.give_back = give_back
    run.last = last  # (conv_chain: a chain of the layers' signature takes their set-ups)
    return run


_setting = native.thread_setting


def _extras_ok(conv: nhwc.NhwcConv, X, S, Z) -> bool:
    """Whether the native conv takes this S and Z as they are (else the numpy path)."""
    if S is not None:
        N, C = X.shape[0], X.shape[3]
        if conv.task.kind != nhwc.POINTWISE or S.shape != (N, 1, 1, C):
            return False
        if S.dtype != np.float32 or not S.flags.c_contiguous:
            return False
    if Z is not None:
        if Z.shape != conv.shape or Z.dtype != np.float32 or not Z.flags.c_contiguous:
            return False
    return True


def nhwc_conv(X, W, B, group: int, attrs: tuple, activation: str, params) -> np.ndarray:
    """activation(Conv(X, W, B)) of X (N, H, W, C) as (N, OH, OW, M), once."""
    return _conv_runner(activation, params, group, attrs)(X, W, B)


def _body(X, W, B, S, Z, group: int, attrs: tuple, activation: str, params) -> np.ndarray:
    """The function's body: [X * S,] the NCHW conv [+ Z] between two transposes."""
    from .fused import fused_conv  # (with its imports, only where the native conv does not run)

    a_pad, pads, strides, dilations, kernel_shape = attrs
    if S is not None:
        X = X * S
    y = fused_conv(
        np.ascontiguousarray(X.transpose(0, 3, 1, 2)),
        W,
        B,
        None if Z is None else np.ascontiguousarray(Z.transpose(0, 3, 1, 2)),
        activation=activation,
        activation_params=params,
        auto_pad=a_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


def _prepared(activation: str | None, extras: str = ""):
    """The compiled form of a node's attributes: its runner, called with the node's inputs
    (X, [S], W, B, [Z] as ``extras`` says)."""

    def make(attrs: dict):
        act = attrs["activation"] if activation is None else activation
        params = attrs.get("activation_params")
        params = tuple(params) if params is not None else None
        geometry = conv_key(
            *(attrs[a] for a in ("auto_pad", "pads", "strides", "dilations", "kernel_shape"))
        )
        run = _conv_runner(act, params, attrs["group"], geometry)
        if extras == "S":
            fn = lambda X, S, W, B=None: run(X, W, B, S)  # noqa: E731
        elif extras == "Z":
            fn = lambda X, W, B, Z: run(X, W, B, None, Z)  # noqa: E731
        elif extras == "SZ":
            fn = lambda X, S, W, B, Z: run(X, W, B, S, Z)  # noqa: E731
        else:
            return run
        fn.give_back, fn.last = run.give_back, run.last
        return fn

    return make


@op("NhwcFusedConv", since=1, domain=ONYX_DOMAIN, threads="pool")
@prepared(_prepared(None))
def nhwc_fused_conv(
    X,
    W,
    B=None,
    *,
    activation="",
    activation_params=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Transpose(FusedConv(Transpose(X, NCHW), W, B), NHWC): com.microsoft FusedConv on a
    channels-last X (N, H, W, C), giving (N, OH, OW, M)."""
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    params = tuple(activation_params) if activation_params is not None else None
    return nhwc_conv(X, W, B, group, attrs, activation, params)


@op("NhwcConvHardSwish", since=1, domain=ONYX_DOMAIN, threads="pool")
@prepared(_prepared("HardSwish"))
def nhwc_conv_hard_swish(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """HardSwish(Conv(X, W, B)) (ConvHardSwish) on a channels-last X."""
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    return nhwc_conv(X, W, B, group, attrs, "HardSwish", None)


@op("NhwcFusedConvAdd", since=1, domain=ONYX_DOMAIN, threads="pool")
@prepared(_prepared(None, "Z"))
def nhwc_fused_conv_add(
    X,
    W,
    B,
    Z,
    *,
    activation="",
    activation_params=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """NhwcFusedConv with FusedConv's residual Z (channels-last, added before the activation):
    an inverted residual block's projection and its sum."""
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    params = tuple(activation_params) if activation_params is not None else None
    return _conv_runner(activation, params, group, attrs)(X, W, B, None, Z)


@op("NhwcScaledFusedConv", since=1, domain=ONYX_DOMAIN, threads="pool")
@prepared(_prepared(None, "S"))
def nhwc_scaled_fused_conv(
    X,
    S,
    W,
    B=None,
    *,
    activation="",
    activation_params=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """NhwcFusedConv of X * S, S (N, 1, 1, C): a squeeze-excite block's scale and the
    projection that reads it, one pass."""
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    params = tuple(activation_params) if activation_params is not None else None
    return _conv_runner(activation, params, group, attrs)(X, W, B, S)


@op("NhwcScaledFusedConvAdd", since=1, domain=ONYX_DOMAIN, threads="pool")
@prepared(_prepared(None, "SZ"))
def nhwc_scaled_fused_conv_add(
    X,
    S,
    W,
    B,
    Z,
    *,
    activation="",
    activation_params=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """NhwcScaledFusedConv with the residual Z."""
    attrs = conv_key(auto_pad, pads, strides, dilations, kernel_shape)
    params = tuple(activation_params) if activation_params is not None else None
    return _conv_runner(activation, params, group, attrs)(X, W, B, S, Z)


@op("NhwcGlobalAveragePool", since=1, domain=ONYX_DOMAIN, threads="pool")
def nhwc_global_average_pool(X):
    """ReduceMean(X, axes=[1, 2], keepdims=1): the mean of each image's pixels, (N, 1, 1, C)."""
    if X.dtype == np.float32 and X.ndim == 4 and X.size and nhwc.available():
        return nhwc.mean_pixels(X)
    return X.mean(axis=(1, 2), keepdims=True, dtype=np.float32 if X.dtype == np.float32 else None)
