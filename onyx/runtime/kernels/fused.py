"""Kernels of the fused ops the graph optimizer emits: com.microsoft FusedConv and FusedGemm
(onnxruntime defines both, so an optimized model saved to disk stays loadable by it), and
ai.onyx TableLookup (a model-local function whose body, Cast + Gather, any runtime can run).

The activation runs in place on the convolution / GEMM result, which the kernel owns.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..fpstate import ignoring_fp_errors
from ..registry import ONYX_DOMAIN, binds, op
from .derived import derived
from .linalg import (
    bound_matmul,
    bound_product,
    constant_product_threads,
    few_rows_matmul,
    gemm,
    matmul,
    packed_gemm,
    packed_matmul,
)
from .sigmoids import SMALL_SIGMOID, hard_sigmoid_into, hard_swish, sigmoid_into

MS = "com.microsoft"

_conv_module = None


def _convs():
    """kernels/conv.py, imported when a fused conv is first bound or run: the products and
    tables of this module (a transformer's MatMulAdd, FusedGemm) never need it, nor the
    conv modules it imports (~1.5 ms of a cold start)."""
    global _conv_module
    if _conv_module is None:
        from . import conv

        _conv_module = conv
    return _conv_module


def _sigmoid(y, alpha, beta, gamma):
    with ignoring_fp_errors():  # (np.errstate builds its state anew: most of a small call)
        # (a few elements: fresh arrays, cheaper than passes in place; the same bits)
        return sigmoid_into(y, None if y.size <= SMALL_SIGMOID else y)


def _leaky_relu(y, alpha, beta, gamma):
    alpha = 0.01 if alpha is None else alpha
    y[y < 0] *= alpha
    return y


def _hard_sigmoid(y, alpha, beta, gamma):
    return hard_sigmoid_into(y, 0.2 if alpha is None else alpha, 0.5 if beta is None else beta, y)


def _clip(y, lo, hi, gamma):
    return np.clip(y, -np.inf if lo is None else lo, np.inf if hi is None else hi, out=y)


#: name -> fn(y, alpha, beta, gamma) writing into y (onnxruntime's MLAS activation set).
ACTIVATIONS = {
    "": lambda y, a, b, g: y,
    "Identity": lambda y, a, b, g: y,
    "Relu": lambda y, a, b, g: np.clip(y, 0, np.inf, out=y),  # clip: vectorized, maximum is not
    "Tanh": lambda y, a, b, g: np.tanh(y, out=y),
    "Sigmoid": _sigmoid,
    "LeakyRelu": _leaky_relu,
    "HardSigmoid": _hard_sigmoid,
    "Clip": _clip,
    # (not onnxruntime's: onyx's ConvHardSwish runs FusedConv's kernel with it)
    "HardSwish": lambda y, a, b, g: hard_swish(y),
}


def _owned(y: np.ndarray) -> np.ndarray:
    return y if y.flags.writeable and y.flags.c_contiguous else np.array(y)


def _activate(y: np.ndarray, activation: str, alpha=None, beta=None, gamma=None) -> np.ndarray:
    try:
        fn = ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(f"unsupported fused activation {activation!r}") from None
    return fn(y, alpha, beta, gamma)


#: FusedConv activations that commute with rounding to float16 (their bounds are float16 values)
_MONOTONE = ("", "Relu", "Clip")


def native_activation(attrs: dict) -> tuple | None:
    """(code, lo, hi) of a FusedConv node's activation as the native convs apply it as they
    store, or None for one they do not."""
    code = native.CONV_ACTIVATIONS.get(attrs["activation"])
    if code is None:
        return None
    params = list(attrs["activation_params"] or []) + [None] * 3
    return (code, *native.activation_params(attrs["activation"], params))


def _bind_fused_conv(inputs, attrs, constant):
    """registry.binds for a float32 FusedConv of constant weights: 1-D without Z, the direct
    kernel native_conv_f32 tries first (conv1d.py); 2-D, Z fed or not, native_conv_f32's
    set-up (conv.float_conv_runner); each found once. None elsewhere."""
    X, W, B, Z = (tuple(inputs) + (None, None))[:4]
    if (
        X.ndim not in (3, 4)
        or not X.size
        or _convs().group_problem(X.shape, W.shape, attrs["group"])
    ):
        return None  # (fused_conv's own path, which names the problem)
    applied = native_activation(attrs)
    if applied is None or X.dtype != np.float32 or W.dtype != np.float32:
        return None
    code, lo, hi = applied
    if X.ndim == 4:
        return _bound_conv2d(X.shape, W, attrs, code, lo, hi)
    if Z is not None or not constant[3]:
        return None
    from .conv1d import node_conv1d_runner

    run = node_conv1d_runner(X.shape, W, attrs, code, lo, hi)
    if run is None:
        return None
    return native.under_setting(lambda X, W, B=None, Z=None: run(X, B, None), fused_conv, attrs)


def _bound_conv2d(x_shape, W, attrs: dict, code: int, lo, hi):
    """A 2-D FusedConv's bound call: native_conv_f32's call, as fused_conv makes it."""
    convs = _convs()
    call = convs.float_conv_runner(x_shape, W, attrs, code, lo, hi)
    if call is None:
        return None
    contiguous = np.ascontiguousarray
    bound = lambda X, W, B=None, Z=None: call(contiguous(X), B, Z)  # noqa: E731
    flat = call.bound() if call.__class__ is native.SmallConv else None  # (its one frame)
    return native.under_setting_flat(flat, bound, fused_conv, attrs)


# (B and Z are read per call: an IR 3 model's biases, initializers listed as graph inputs, a
# caller may feed, so the plan holds them as no constants; Z: fed to a 2-D conv, constant to
# a 1-D one)
@binds(_bind_fused_conv, constants=(1,))
@op("FusedConv", since=1, domain=MS, threads="pool")
def fused_conv(
    X,
    W,
    B=None,
    Z=None,
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
    """activation(Conv(X, W, B) + Z)."""
    convs = _convs()
    if group != 1 or X.shape[1] != W.shape[1]:  # (inline: a small conv's every call)
        convs.check_groups("FusedConv", X.shape, W.shape, group)
    if X.dtype == np.float16 and W.dtype == np.float16 and Z is None and activation in _MONOTONE:
        # float16 computes in float32; an activation that commutes with rounding (a clamp)
        # applies before the one rounding to float16 as exactly as after it, and natively
        w32, b32 = convs.float32_weights(W, B)
        y = fused_conv(
            X.astype(np.float32),
            w32,
            b32,
            activation=activation,
            activation_params=activation_params,
            auto_pad=auto_pad,
            dilations=dilations,
            group=group,
            kernel_shape=kernel_shape,
            pads=pads,
            strides=strides,
        )
        return y.astype(np.float16)
    params = list(activation_params or []) + [None] * 3
    code = native.CONV_ACTIVATIONS.get(activation)
    if code is not None:  # the native conv applies Z and the activation as it stores
        lo, hi = native.activation_params(activation, params)
        attrs = convs.conv_key(auto_pad, pads, strides, dilations, kernel_shape)
        y = convs.native_conv_f32(
            X,
            W,
            B,
            group,
            attrs,
            z=Z,
            activation=code,
            alpha=lo,
            beta=hi,
        )
        if y is not None:
            return y
    y = convs.conv(
        X,
        W,
        B,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    y = _owned(y)
    if Z is not None:
        y += Z
    return _activate(y, activation, *params[:3])


@op("ConvHardSwish", since=1, domain=ONYX_DOMAIN, threads="pool")
def conv_hard_swish(
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
    """HardSwish(Conv(X, W, B)), the optimizer's ConvHardSwishFusion: FusedConv's kernel with
    HardSwish as its activation (the native conv applies it as it stores)."""
    return fused_conv(
        X,
        W,
        B,
        activation="HardSwish",
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )


def _bind_fused_gemm(inputs, attrs, constant):
    A, B, C = (tuple(inputs) + (None, None))[:3]
    activation = attrs["activation"]
    if attrs["transA"] or A.__class__ is not np.ndarray or activation not in ACTIVATIONS:
        return None
    product = (attrs["alpha"], attrs["beta"], attrs["transB"])
    if activation == "Relu":  # (fused_gemm's packed GEMM with the ReLU in its epilogue)
        call = bound_product(A, B, C, *product, relu=True)
        if call is not None:
            return lambda A, B, C=None: call(A)
    call = bound_product(A, B, C, *product)
    if call is None:
        return None
    act = ACTIVATIONS[activation]
    params = (attrs["activation_alpha"], attrs["activation_beta"], attrs["activation_gamma"])
    return lambda A, B, C=None: act(_owned(call(A)), *params)


@binds(_bind_fused_gemm, constants=(1, 2))
@op("FusedGemm", since=1, domain=MS, threads=constant_product_threads)
def fused_gemm(
    A,
    B,
    C=None,
    *,
    activation="",
    activation_alpha=None,
    activation_beta=None,
    activation_gamma=None,
    alpha=1.0,
    beta=1.0,
    transA=0,
    transB=0,
):
    """activation(alpha * A' B' + beta * C)."""
    if activation == "Relu" and not transA:  # the native GEMM's epilogue applies it
        y = packed_gemm(A, B, C, alpha, beta, transB, relu=True)
        if y is not None:
            return y
    y = _owned(gemm(A, B, C, alpha=alpha, beta=beta, transA=transA, transB=transB))
    return _activate(y, activation, activation_alpha, activation_beta, activation_gamma)


def _bind_matmul_bias(relu: bool):
    def make(inputs, attrs, constant):
        A, B, bias = inputs[:3]
        if A.__class__ is not np.ndarray or bias.__class__ is not np.ndarray:
            return None
        return bound_matmul(A, B, bias, relu)

    return make


@binds(_bind_matmul_bias(relu=False), constants=(1, 2))
@op("MatMulAdd", since=1, domain=ONYX_DOMAIN, threads=constant_product_threads)
def matmul_add(A, B, bias):
    """A @ B + bias: MatMul of an A of any rank by a constant 2-D B, then Add of a constant
    bias [N] (optimizer/gemm.py fuses them where Gemm, 2-D only, does not apply)."""
    return _matmul_bias(A, B, bias, relu=False)


@binds(_bind_matmul_bias(relu=True), constants=(1, 2))
@op("MatMulAddRelu", since=1, domain=ONYX_DOMAIN, threads=constant_product_threads)
def matmul_add_relu(A, B, bias):
    """Relu(A @ B + bias), as MatMulAdd."""
    return _matmul_bias(A, B, bias, relu=True)


def _matmul_bias(A, B, bias, relu: bool):
    y = packed_matmul(A, B, bias, relu=relu)  # (the native GEMM adds the bias as it stores)
    if y is not None:
        return y
    y = few_rows_matmul(A, B, bias)
    if y is None:
        y = _owned(matmul(A, B))
        y += bias.astype(y.dtype, copy=False)
    return ACTIVATIONS["Relu"](y, None, None, None) if relu else y


@op("TableLookup", since=1, domain=ONYX_DOMAIN)
def table_lookup(x, table):
    """table[x] for a byte tensor x: an elementwise function of it tabulated at its 256
    values, indexed by bit pattern (an int8 -1 reads table[255], as Gather's negative indices
    do in the function's body)."""
    y = native.lookup8(x, table)
    if y is None:
        y = np.take(table, x.view(np.uint8) if x.dtype == np.int8 else x)
    return y


@op("ChannelTableLookup", since=1, domain=ONYX_DOMAIN)
def channel_table_lookup(x, table, offsets):
    """table[x + offsets]: a function of a byte tensor x and its channel (the optimizer's
    LookupTableFusion of chains reading per-channel constants), the table holding C runs of
    256 values in x's value order, offsets each channel's start broadcast along its axis."""
    hit = _channel_runs.get((id(table), id(offsets), x.shape, x.dtype.char))
    if hit is not None and hit[0] is table and hit[1] is offsets and x.flags.c_contiguous:
        return hit[2](x)
    axis = x.ndim - offsets.ndim
    key = ("channel table", x.dtype, id(offsets), offsets.shape)  # (constants of one session)
    channels = derived(table, key, lambda: _channel_table(table, offsets, x))
    y = native.lookup8_channels(x, channels, axis) if channels is not None and axis >= 0 else None
    if y is not None:
        _keep_channel_run(x, table, offsets, channels, axis)
        return y
    index = x.astype(np.int32)
    index += offsets
    return np.take(table, index)


#: ChannelTableLookup's native set-ups by the constants' ids, input shape and type; each entry
#: holds its table and offsets (so no id is reused while it lives), taken only for them.
_channel_runs: dict = {}


def _keep_channel_run(x, table, offsets, channels, axis) -> None:
    if table.flags.writeable or offsets.flags.writeable:  # (not a session's constants)
        return
    run = native.lookup8_channels_setup(x.shape, channels, axis)
    if run is not None:
        if len(_channel_runs) >= 1024:  # (sessions come and go)
            _channel_runs.clear()
        _channel_runs[(id(table), id(offsets), x.shape, x.dtype.char)] = (table, offsets, run)


def _channel_table(table, offsets, x) -> np.ndarray | None:
    """The (C, 256) table in x's bit-pattern order when offsets are the plain c * 256 (+128
    for int8) along one axis (the optimizer's), else None (the general gather runs)."""
    size = offsets.size
    signed = x.dtype == np.int8
    start = np.arange(size, dtype=np.int64) * 256 + (128 if signed else 0)
    plain = offsets.shape[1:] == (1,) * (offsets.ndim - 1) and table.shape == (256 * size,)
    if not plain or not np.array_equal(offsets.reshape(-1), start):
        return None
    runs = table.reshape(size, 256)
    return np.ascontiguousarray(np.roll(runs, -128, axis=1) if signed else runs)
