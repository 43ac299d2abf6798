"""Inference BatchNormalization as one per-channel affine map: y = x * a + b.

With a = scale / sqrt(var + epsilon) and b = bias - mean * a computed once per constant
parameter set (derived.py), a call is one pass over x: native (norms.c's batch_norm entry, fed
a zero mean: x - 0 is x, bit for bit) or numpy's multiply and add into one output buffer.
This is onnxruntime's order of operations (a scale and a shift per channel), which is the
tie-breaker here; it differs from (x - mean) * a + bias by rounding only.

The ResNet-style exports keep a BatchNormalization after a residual Add that no pass folds
into a conv; there a call's Python set-up cost more than its pass over the data.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..native import _core as core
from .derived import derived, frozen

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class _Affine:
    """A parameter set's per-channel multiplier and shift (read-only: the native wrapper keeps
    their addresses), and their broadcast forms by rank."""

    __slots__ = ("held", "mult", "shift", "zeros", "mult_b", "shift_b")

    def __init__(self, held: tuple, mult: np.ndarray, shift: np.ndarray):
        self.held = held  # (bias, mean, var): compared by identity, held so no id is reused
        self.mult, self.shift = mult, shift
        self.zeros = frozen(np.zeros_like(mult))
        self.mult_b: dict[int, np.ndarray] = {}  # x.ndim -> mult shaped (1, C, 1, ...)
        self.shift_b: dict[int, np.ndarray] = {}

    def broadcast(self, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        mult = self.mult_b.get(ndim)
        if mult is None:
            shape = (1, -1) + (1,) * (ndim - 2)
            mult = self.mult_b[ndim] = self.mult.reshape(shape)
            self.shift_b[ndim] = self.shift.reshape(shape)
        return mult, self.shift_b[ndim]


def _make_affine(scale, bias, mean, var, epsilon: float, dtype: np.dtype) -> _Affine | None:
    params = [np.asarray(v) for v in (scale, bias, mean, var)]
    if any(v.ndim > 1 or v.size != params[0].size for v in params):
        return None  # (spatial=0's per-feature parameters: the general kernel)
    s, b, m, v = (p.reshape(-1).astype(dtype) for p in params)
    # (epsilon as the float32 an attribute is, its default too: onnxruntime's float64 bits)
    inv_std = 1 / np.sqrt(v + dtype.type(np.float32(epsilon)))
    mult = inv_std * s
    shift = b - m * mult
    return _Affine((bias, mean, var), frozen(mult), frozen(shift))


def _affine(scale, B, mean, var, epsilon: float, dtype: np.dtype) -> _Affine | None:
    """The parameter set's form, kept while ``scale`` lives (derived.py) when it is constant."""
    if B is scale or mean is scale or var is scale:  # (the form holds them: scale would never go)
        return _make_affine(scale, B, mean, var, epsilon, dtype)
    key = ("batchnorm_affine", id(B), id(mean), id(var), float(epsilon), dtype.str)
    affine = derived(scale, key, lambda: _make_affine(scale, B, mean, var, epsilon, dtype))
    if affine is not None and (
        affine.held[0] is not B or affine.held[1] is not mean or affine.held[2] is not var
    ):
        return _make_affine(scale, B, mean, var, epsilon, dtype)  # (a recycled id)
    return affine


def inference(X, scale, B, mean, var, epsilon: float, relu: bool = False) -> np.ndarray | None:
    """Y of inference-mode BatchNormalization for float32/float64 X (N, C, ...) with (C,)
    parameters of X's type (with relu, then Relu, in the same pass where native); None where
    the general kernel is needed."""
    if type(X) is not np.ndarray or X.dtype not in _FLOATS or X.ndim < 2:
        return None
    dtype = X.dtype
    if scale.dtype != dtype or mean.dtype != dtype or var.dtype != dtype or B.dtype != dtype:
        return None
    affine = _affine(scale, B, mean, var, epsilon, dtype)
    if affine is None or affine.mult.size != X.shape[1]:
        return None
    if dtype == np.float32 and core.lib is not None and X.flags.c_contiguous and X.size:
        return native.batch_norm_f32(X, affine.zeros, affine.mult, affine.shift, relu)
    mult, shift = affine.broadcast(X.ndim)
    y = np.multiply(X, mult)
    y = np.add(y, shift, out=y)
    return np.clip(y, 0, np.inf, out=y) if relu else y


def bound_inference(inputs: tuple, epsilon: float, general, relu: bool = False):
    """registry.binds for inference's native pass: ``call(X, scale, B, mean, var)`` for float32
    X of inputs[0]'s signature and the constant parameters (the caller's binds declares
    them constant), the affine form and the native
    set-up made once; ``general`` (the kernel as written) where X is strided. None where the
    pass does not apply."""
    X, scale, B, mean, var = inputs[:5]
    if X.dtype != np.float32 or X.ndim < 2 or not X.size:
        return None
    if any(type(p) is not np.ndarray or p.dtype != X.dtype for p in (scale, B, mean, var)):
        return None
    affine = _affine(scale, B, mean, var, epsilon, X.dtype)
    if affine is None or affine.mult.size != X.shape[1]:
        return None
    native_pass = native.batch_norm_bound(X.shape, affine.zeros, affine.mult, affine.shift, relu)
    if native_pass is None:
        return None

    def call(X, *params):
        y = native_pass(X)
        return general(X, *params) if y is None else y

    return call
