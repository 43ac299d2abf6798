"""Activation functions, Softmax / LogSoftmax / Hardmax.

Float kernels compute low-precision floats (float16, bfloat16) in float32 and round back.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, op
from .low_floats import type_range, upcast
from .sigmoids import (
    _hard_swish,
    hard_sigmoid_into,
    hard_swish,  # noqa: F401  (the HardSwish kernel's function: importable from here)
    sigmoid_into,
)

_FLOAT32_64 = (np.dtype(np.float32), np.dtype(np.float64))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return sigmoid_into(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def _selu(x, alpha, gamma):
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _elu(x, alpha):
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _hard_sigmoid(x, alpha, beta):
    y = native.hard_sigmoid_f32(x, alpha, beta) if x.size >= 1024 else None  # (one pass)
    if y is not None:
        return y
    return hard_sigmoid_into(x, alpha, beta)


def _gelu_of_float(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    from .elementwise import erf_gelu  # (Gelu's: the elementwise kernels, ~0.8 ms of a cold
    # start, are no import of a model whose activations are Relu, Softmax, Sigmoid...)

    return erf_gelu(x)


def _celu(x, alpha):
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha))


def _activation(fn: Callable) -> Callable:
    """fn(x_float, **attrs) -> kernel(x, **attrs): low floats in float32, result in x's dtype."""

    def kernel(x, **attrs):
        return np.asarray(fn(upcast(x), **attrs)).astype(x.dtype, copy=False)

    return kernel


_sigmoid_k = _activation(_sigmoid)
_tanh_k = _activation(np.tanh)
_elu_k = _activation(_elu)
_selu_k = _activation(_selu)
_hard_sigmoid_k = _activation(_hard_sigmoid)
_leaky_relu_where = _activation(lambda x, alpha: np.where(x >= 0, x, alpha * x))


def _leaky_relu_k(x, alpha):
    """x >= 0 ? x : alpha * x. For 0 < alpha < 1 that is max(x, alpha * x) (min for alpha > 1),
    much faster than a where over a mask; NaN propagates through both. alpha <= 0 keeps the
    select: 0 * inf is NaN, and a max of opposite zeros would pick either."""
    if x.dtype not in _FLOAT32_64 or not (0 < alpha < math.inf):
        return _leaky_relu_where(x, alpha=alpha)
    y = np.asarray(np.multiply(x, x.dtype.type(alpha)))
    return (np.maximum if alpha <= 1 else np.minimum)(y, x, out=y)


# Ops whose opset-1 version has the legacy `consumed_inputs` attribute, then a later version
# with the same semantics: one registration per signature.
@op("Relu", since=1, elementwise=True)
def relu_1(x, *, consumed_inputs=None):
    return relu(x)


@op("Relu", since=6)
def relu(x):
    if x.ndim and x.dtype.kind in "iuf":
        # np.clip with two bounds is vectorized; np.maximum with a scalar is not
        return np.clip(x, x.dtype.type(0), type_range(x.dtype)[1])
    return np.asarray(np.maximum(x, x.dtype.type(0)))


@op("Sigmoid", since=1, elementwise=True)
def sigmoid_1(x, *, consumed_inputs=None):
    return _sigmoid_k(x)


@op("Sigmoid", since=6)
def sigmoid(x):
    return _sigmoid_k(x)


@op("Tanh", since=1, elementwise=True)
def tanh_1(x, *, consumed_inputs=None):
    return _tanh_k(x)


@op("Tanh", since=6)
def tanh(x):
    return _tanh_k(x)


@op("Elu", since=1, elementwise=True)
def elu_1(x, *, alpha=1.0, consumed_inputs=None):
    return _elu_k(x, alpha=alpha)


@op("Elu", since=6)
def elu(x, *, alpha=1.0):
    return _elu_k(x, alpha=alpha)


@op("Selu", since=1, elementwise=True)
def selu_1(
    x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875, consumed_inputs=None
):
    return _selu_k(x, alpha=alpha, gamma=gamma)


@op("Selu", since=6)
def selu(x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return _selu_k(x, alpha=alpha, gamma=gamma)


@op("LeakyRelu", since=1, elementwise=True)
def leaky_relu_1(x, *, alpha=0.01, consumed_inputs=None):
    return _leaky_relu_k(x, alpha=alpha)


@op("LeakyRelu", since=6)
def leaky_relu(x, *, alpha=0.01):
    return _leaky_relu_k(x, alpha=alpha)


@op("HardSigmoid", since=1, elementwise=True)
def hard_sigmoid_1(x, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    return _hard_sigmoid_k(x, alpha=alpha, beta=beta)


@op("HardSigmoid", since=6)
def hard_sigmoid(x, *, alpha=0.2, beta=0.5):
    return _hard_sigmoid_k(x, alpha=alpha, beta=beta)


@op("HardSigmoidMul", since=1, domain=ONYX_DOMAIN, elementwise=True, threads="pool")
def hard_sigmoid_mul(X, *, alpha=0.2, beta=0.5):
    """X * HardSigmoid(X) (HardSigmoidMulFusion: PyTorch's exported hardswish), to the bits of
    the two nodes it replaces: one native pass where there were two (numpy's: four)."""
    y = native.hard_sigmoid_mul_f32(X, alpha, beta) if X.size >= 1024 else None
    if y is not None:
        return y
    x = upcast(X)
    t = hard_sigmoid_into(x, alpha, beta).astype(X.dtype, copy=False)  # (the first node's type)
    return np.multiply(X, t)


def _prelu(x, slope):
    xc, sc = upcast(x), upcast(slope)
    return np.where(xc < 0, xc * sc, xc).astype(x.dtype, copy=False)


@op("PRelu", since=1, elementwise=True)
def prelu_1(x, slope, *, consumed_inputs=None):
    # before opset 7 a 1-D slope of length C holds one slope per channel (axis 1)
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return _prelu(x, slope)


@op("PRelu", since=7)
def prelu(x, slope):  # slope broadcasts to x (unidirectionally)
    return _prelu(x, slope)


_PLAIN: dict[str, tuple[Callable, int]] = {
    # op: (function of the float input, first opset); attribute-free
    "HardSwish": (_hard_swish, 14),
    "Softplus": (_softplus, 1),
    "Softsign": (lambda x: x / (1 + np.abs(x)), 1),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), 18),
}


def _register_plain(name: str, fn: Callable, since: int) -> None:
    def kernel(x):
        return np.asarray(fn(upcast(x))).astype(x.dtype, copy=False)

    op(name, since=since, elementwise=True)(kernel)


for _name, (_fn, _since) in _PLAIN.items():
    _register_plain(_name, _fn, _since)


@op("Gelu", since=20, elementwise=True)
def gelu(x, *, approximate="none"):
    return _activation(_gelu_of_float)(x, approximate=approximate)


@op("Celu", since=12, elementwise=True)
def celu(x, *, alpha=1.0):
    return _activation(_celu)(x, alpha=alpha)


@op("ThresholdedRelu", since=10, elementwise=True)
def thresholded_relu(x, *, alpha=1.0):
    return _activation(lambda v, alpha: np.where(v > alpha, v, 0))(x, alpha=alpha)


@op("Shrink", since=9, elementwise=True)
def shrink(x, *, bias=0.0, lambd=0.5):
    xc = upcast(x)
    if xc.dtype.kind in "iu":  # integer inputs: compute exactly in float64
        xc = xc.astype(np.float64)
    out = np.where(xc < -lambd, xc + bias, np.where(xc > lambd, xc - bias, 0))
    return out.astype(x.dtype, copy=False)


@op("Swish", since=24)
def swish(x, *, alpha=1.0):
    return _activation(lambda v: v * _sigmoid(alpha * v))(x)


@op("SwiGLU", since=28)
def swiglu(a, b, *, alpha=1.0):
    ac = upcast(a)
    return (ac * _sigmoid(alpha * ac) * upcast(b)).astype(a.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Softmax family. From opset 13 they work along one axis; before, the input is coerced to 2-D
# [prod(shape[:axis]), prod(shape[axis:])] and normalised over the second dimension.


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if axis in (-1, x.ndim - 1) and x.dtype == np.float32 and x.ndim:
        e = native.softmax_rows_f32(x)  # (one pass a row: numpy's reductions over short rows
        if e is None:  # cost more than their work)
            e = _softmax_last_unshifted(x)
        if e is not None:
            return e
    # the ufuncs' reduce methods: np.max / np.sum without their Python-level wrappers
    e = x - np.maximum.reduce(x, axis=axis, keepdims=True)  # fresh: the rest works in place
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis=axis, keepdims=True)
    return e


def _softmax_last_unshifted(x: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis without the per-row max shift (numpy's reductions over short
    rows are slow; one max over all of x is not): when no value exceeds 60, exp cannot overflow
    nor a row sum reach float32's limit. Rows sum by BLAS (a matrix-vector product). None when
    some row sums below 1e-30 (all its values far below zero, or -inf, or NaN): the shifted
    path then."""
    if not np.maximum.reduce(x.reshape(-1)) <= 60:  # (NaN: not <= 60)
        return None
    e = np.exp(x)
    total = np.matmul(e, np.ones(x.shape[-1], x.dtype))
    if not np.minimum.reduce(total.reshape(-1)) >= 1e-30:
        return None
    e /= total[..., None]
    return e


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    first_max = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros(x.shape, dtype=x.dtype)
    np.put_along_axis(out, first_max, 1, axis=axis)
    return out


def _along_axis(fn: Callable, x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    return np.asarray(fn(upcast(x), axis)).astype(x.dtype, copy=False)


def _coerced_2d(fn: Callable, x: np.ndarray, axis: int) -> np.ndarray:
    axis = axis + x.ndim if axis < 0 else axis
    rows = math.prod(x.shape[:axis])  # (np.prod's dispatch took 40 us after a large conv)
    return _along_axis(fn, x.reshape(rows, -1), 1).reshape(x.shape)


def _register_softmax_family(name: str, fn: Callable) -> None:
    def legacy(x, *, axis=1):
        return _coerced_2d(fn, x, axis)

    def modern(x, *, axis=-1):
        return _along_axis(fn, x, axis)

    op(name, since=1)(legacy)
    op(name, since=13)(modern)


for _name, _fn in {"Softmax": _softmax, "LogSoftmax": _log_softmax, "Hardmax": _hardmax}.items():
    _register_softmax_family(_name, _fn)
