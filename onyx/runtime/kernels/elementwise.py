"""Element-wise math, comparison, logic and bitwise operators (numpy broadcasting throughout)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import numpy as np

from .. import native
from ..registry import op
from .low_floats import LOW_FLOATS, fits, is_float, type_range, upcast  # noqa: F401  (importable from here)

# ---------------------------------------------------------------------------------------------
# Shared helpers (also used by activation, reduction and linalg kernels)


def float_unary(fn: Callable) -> Callable:
    """Wrap a float function so low-precision floats are computed in float32 and cast back."""

    def kernel(x):
        return np.asarray(fn(upcast(x))).astype(x.dtype, copy=False)

    return kernel


#: Terms of erf's series and of erfc's continued fraction (split at |x| = 2) that reach
#: double precision.
_ERF_SERIES_TERMS, _ERF_FRACTION_TERMS = 30, 40
#: 1 / (2n+1)!! for the series, highest term first (Horner's order).
#: (math.prod of the floats multiplies left to right, as np.prod of the float64 arange did: the
#: same bits, without numpy's reductions at import)
_ERF_SERIES = tuple(
    1 / math.prod(map(float, range(2 * n + 1, 0, -2))) for n in range(_ERF_SERIES_TERMS - 1, -1, -1)
)
#: erf(x) ~ x * P(x^2) / Q(x^2) on |x| <= 4 (beyond, erf rounds to +-1 in float32): a rational
#: least-squares fit of ours (relative error < 3e-9 in exact arithmetic). Evaluated in float32
#: (about 25 in-place passes), results are within a few ulps of the exact erf: below 1 ulp on
#: average, at most 7 over a dense grid (tests/test_optimizer.py::test_erf32_accuracy).
#: Coefficients lowest degree first.
_ERF32_P = (
    1.1283791680816342,
    0.18527986566330937,
    0.05435401473927662,
    0.003856476233981757,
    0.00038086010687583745,
    4.71514345330577e-06,
    -1.3360401926784835e-08,
)
_ERF32_Q = (
    1.0,
    0.4975334033805757,
    0.11401398416974638,
    0.015479843637148574,
    0.001310692200770633,
    6.340380370659191e-05,
)
_F32 = np.float32
_P32 = tuple(_F32(c) for c in _ERF32_P)
_Q32 = tuple(_F32(c) for c in _ERF32_Q)

#: Elements per block of the float32 erf: its scratch (4 blocks, 512 KB) stays in L2 cache.
_ERF_BLOCK = 32768


def erf32(x: np.ndarray, out: np.ndarray | None = None, *, scale: float = 1.0, gelu=False):
    """erf(scale * x) for float32 x, into ``out`` (a fresh array when None; may be x itself).

    ``gelu``: x * (0.5 + 0.5 * erf(scale * x)) instead (GELU with scale = 1/sqrt(2)), finished
    block by block while the block is in cache. The one erf of every float32 path (Erf, Gelu,
    com.microsoft Gelu / BiasGelu).
    """
    if out is None:
        out = np.empty(x.shape, np.float32)
    if native.erf_f32(x, out, _F32(scale), gelu, _P32, _Q32):  # (one pass, the same bits)
        return out
    flat = x.reshape(-1)
    res = out.reshape(-1)  # (out is contiguous: a view)
    n = min(flat.size, _ERF_BLOCK)
    u, t, p, q = np.empty((4, n), np.float32)
    k = _F32(scale)
    for start in range(0, flat.size, _ERF_BLOCK):
        stop = min(start + _ERF_BLOCK, flat.size)
        m = stop - start
        if m != n:
            u, t, p, q = u[:m], t[:m], p[:m], q[:m]
        xb = flat[start:stop]
        np.multiply(xb, k, out=u)
        np.clip(u, -4.0, 4.0, out=u)  # NaN stays NaN (one clip: min / max with a scalar bound
        # take numpy's slow unvectorized loop)
        np.multiply(u, u, out=t)
        np.multiply(t, _P32[-1], out=p)
        for c in _P32[-2:0:-1]:
            p += c
            p *= t
        p += _P32[0]
        np.multiply(t, _Q32[-1], out=q)
        for c in _Q32[-2:0:-1]:
            q += c
            q *= t
        q += _Q32[0]
        p /= q
        e = p if gelu else res[start:stop]
        np.multiply(p, u, out=e)
        np.clip(e, -1.0, 1.0, out=e)  # rounding can leave the fit a few ulps beyond +-1
        if gelu:  # x * (0.5 + 0.5 * erf)
            e *= 0.5
            e += 0.5
            np.multiply(xb, e, out=res[start:stop])
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """Error function (numpy has none), vectorized: float64 inputs to double precision (a series
    and a continued fraction), float32 by :func:`erf32`, narrower floats through float32."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _erf64(x)
    return erf32(x if x.dtype == np.float32 else x.astype(np.float32))


def erf_gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """0.5 * x * (1 + erf(x / sqrt(2))) of float32 or float64 x (into ``out`` if given)."""
    if x.dtype == np.float32:
        return erf32(x, out, scale=1 / np.sqrt(2), gelu=True)
    e = _erf64(x * (1 / np.sqrt(2)))
    e += 1
    e *= 0.5
    return np.multiply(x, e, out=out)


def _erf64(x: np.ndarray) -> np.ndarray:
    """|x| < 2: erf(x) = 2/sqrt(pi) * exp(-x^2) * x * sum_n (2x^2)^n / (2n+1)!!, all terms
    positive (evaluated by Horner's rule). |x| >= 2: 1 - erfc(x), erfc from its continued fraction
    exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), evaluated bottom-up.
    Both are computed on the whole array (clamped to their range) and selected after: cheaper
    than gathering and scattering the two subsets.
    """
    shape = x.shape
    x = x.reshape(-1)  # 1-D: in-place ufuncs need arrays, not scalars
    a = np.abs(x)
    s = np.minimum(a, 2)
    x2 = s * s
    y = 2 * x2
    series = np.full_like(s, _ERF_SERIES[0])
    for c in _ERF_SERIES[1:]:
        series *= y
        series += c
    np.exp(-x2, out=x2)
    series *= x2
    series *= s
    series *= 2 / np.sqrt(np.pi)
    b = np.maximum(a, 2)
    frac = np.zeros_like(b)
    for k in range(_ERF_FRACTION_TERMS, 0, -1):
        frac += b
        np.divide(k / 2, frac, out=frac)
    frac += b
    tail = np.exp(-b * b)
    tail /= frac
    tail *= -1 / np.sqrt(np.pi)
    tail += 1  # NaN inputs come out of this branch as NaN
    out = np.where(a < 2, series, tail)
    return np.copysign(out, x, out=out).reshape(shape)


# ---------------------------------------------------------------------------------------------
# Unary math

_UNARY: dict[str, tuple[Callable, int]] = {
    # op: (numpy function, first opset); integer inputs (Abs, Neg, Sign, ...) stay integers
    "Abs": (np.abs, 1),
    "Neg": (np.negative, 1),
    "Sign": (np.sign, 9),
    "Exp": (np.exp, 1),
    "Log": (np.log, 1),
    "Sqrt": (np.sqrt, 1),
    "Reciprocal": (np.reciprocal, 1),
    "Floor": (np.floor, 1),
    "Ceil": (np.ceil, 1),
    "Round": (np.round, 11),  # numpy rounds half to even, as the spec asks
    "Sin": (np.sin, 7),
    "Cos": (np.cos, 7),
    "Tan": (np.tan, 7),
    "Asin": (np.arcsin, 7),
    "Acos": (np.arccos, 7),
    "Atan": (np.arctan, 7),
    "Sinh": (np.sinh, 9),
    "Cosh": (np.cosh, 9),
    "Asinh": (np.arcsinh, 9),
    "Acosh": (np.arccosh, 9),
    "Atanh": (np.arctanh, 9),
    "Erf": (erf, 9),
}
#: Ops whose opset-1 version carries the legacy (ignored) `consumed_inputs` attribute.
_CONSUMED_INPUTS = {"Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Abs", "Neg"}


def _register_unary(name: str, fn: Callable, since: int) -> None:
    if name in _CONSUMED_INPUTS:

        def legacy(x, *, consumed_inputs=None):
            return fn(x)

        op(name, since=1, elementwise=True)(legacy)
        op(name, since=6)(fn)
    else:
        op(name, since=since, elementwise=True)(fn)


for _name, (_fn, _since) in _UNARY.items():
    _register_unary(_name, float_unary(_fn), _since)


@op("Not", since=1, elementwise=True)
def not_(x):
    return np.logical_not(x)


@op("BitwiseNot", since=18, elementwise=True)
def bitwise_not(x):
    return np.invert(x)


@op("IsNaN", since=9, elementwise=True)
def isnan(x):
    return np.isnan(upcast(x))


@op("IsInf", since=10, elementwise=True)
def isinf(x, *, detect_negative=1, detect_positive=1):
    x = upcast(x)
    return np.isinf(x) & (((x > 0) & bool(detect_positive)) | ((x < 0) & bool(detect_negative)))


# ---------------------------------------------------------------------------------------------
# Binary math


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics, as onnxruntime), not numpy's floor."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


def _div(a, b):
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return np.divide(a, b)


def _in_dtype(fn: Callable) -> Callable:
    """Apply a numpy binary function, low floats via float32, the result in A's dtype."""

    def apply(a, b):
        return np.asarray(fn(upcast(a), upcast(b))).astype(a.dtype, copy=False)

    return apply


#: numpy's own loops for these give the spec's result when both inputs share the type.
_NATIVE_ARITH = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
_NATIVE_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))


def _arith(ufunc: np.ufunc, native: frozenset = _NATIVE_ARITH) -> Callable:
    """A binary arithmetic kernel: the ufunc straight away on the common types (the hot path of
    every transformer and CNN), _in_dtype's general path otherwise."""
    general = _in_dtype(_div if ufunc is np.divide else ufunc)

    def apply(a, b):
        dtype = a.dtype
        if dtype is b.dtype and dtype in native:
            out = ufunc(a, b)
            return out if type(out) is np.ndarray else np.asarray(out)
        return general(a, b)

    return apply


def _compare(fn: Callable) -> Callable:
    def apply(a, b):
        if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":  # strings compare as Python objects
            return np.asarray(fn(a.astype(object), b.astype(object)), dtype=bool)
        return fn(upcast(a), upcast(b))

    return apply


_ARITH = {
    "Add": _arith(np.add),
    "Sub": _arith(np.subtract),
    "Mul": _arith(np.multiply),
    "Div": _arith(np.divide, _NATIVE_FLOATS),  # integers truncate toward zero: general path
}
_LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
_COMPARE = {
    "Equal": _compare(np.equal),
    "Less": _compare(np.less),
    "Greater": _compare(np.greater),
}
_BITWISE = {
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}


def legacy_broadcast(a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """Opset < 7 broadcasting: B's shape matches a contiguous run of A's dims starting at `axis`
    (the trailing dims when axis is absent); B is reshaped so numpy broadcasting lines it up."""
    if not broadcast or b.ndim == 0 or b.shape == a.shape:
        return b
    if axis is None:
        axis = a.ndim - b.ndim
    elif axis < 0:
        axis += a.ndim
    return b.reshape((1,) * axis + b.shape + (1,) * (a.ndim - axis - b.ndim))


def _register_binary(name: str, fn: Callable, modern_since: int, legacy: bool) -> None:
    """`legacy`: the op exists from opset 1 with `broadcast`/`axis` (and `consumed_inputs`)."""
    if legacy:

        def old(a, b, *, broadcast=0, axis=None, consumed_inputs=None):
            return fn(a, legacy_broadcast(a, b, broadcast, axis))

        op(name, since=1)(old)
    op(name, since=modern_since, elementwise=True)(fn)


for _name, _fn in {**_ARITH, **_LOGIC, **_COMPARE}.items():
    _register_binary(_name, _fn, 7, legacy=True)
for _name, _fn in _BITWISE.items():
    _register_binary(_name, _fn, 18, legacy=False)
_register_binary("GreaterOrEqual", _compare(np.greater_equal), 12, legacy=False)
_register_binary("LessOrEqual", _compare(np.less_equal), 12, legacy=False)


_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if y.size == 1 and x.dtype in _F32_F64 and 0 < x.ndim and y.ndim <= x.ndim:
        # a scalar square or cube (x ** 2 in variance, x ** 3 in tanh-GELU) by multiplication,
        # as onnxruntime does: far faster than the general pow loop
        e = float(y.reshape(()))
        if e == 2.0:
            return np.multiply(x, x)
        if e == 3.0:
            sq = np.multiply(x, x)
            sq *= x
            return sq
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and not np.any(y < 0):
        return np.power(x, y.astype(x.dtype))  # exact integer power (wraps like C on overflow)
    if x.dtype.kind in "iu":
        # integer base, float or negative exponent: pow in double, truncated (onnxruntime)
        return np.power(x.astype(np.float64), upcast(y).astype(np.float64)).astype(x.dtype)
    xc = upcast(x)
    return np.power(xc, upcast(y).astype(xc.dtype)).astype(x.dtype, copy=False)


@op("Pow", since=1, elementwise=True)
def pow_1(x, y, *, broadcast=0, axis=None):
    return _pow(x, legacy_broadcast(x, y, broadcast, axis))


@op("Pow", since=7)
def pow_(x, y):
    return _pow(x, y)


@op("Mod", since=10, elementwise=True)
def mod(a, b, *, fmod=0):
    if fmod:
        return _in_dtype(np.fmod)(a, b)
    # fmod=0: A - floor(A/B) * B, the sign of B (numpy's remainder); integer % 0 gives 0
    return _in_dtype(np.remainder)(a, b)


def _bit_shift(x: np.ndarray, y: np.ndarray, left: bool) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    y = np.asarray(y)
    out_of_range = (y < 0) | (y >= bits)
    shift = np.where(out_of_range, 0, y).astype(x.dtype)
    shifted = np.left_shift(x, shift) if left else np.right_shift(x, shift)
    # Shifts by >= the width (or negative) leave only the sign fill: -1 right-shifting negatives
    fill = np.zeros((), x.dtype) if left else np.where(x < 0, -1, 0).astype(x.dtype)
    return np.where(out_of_range, fill, shifted).astype(x.dtype, copy=False)


@op("BitShift", since=11)
def bit_shift(x, y, *, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift: direction must be LEFT or RIGHT, got {direction!r}")
    return _bit_shift(x, y, direction == "LEFT")


# ---------------------------------------------------------------------------------------------
# Variadic, selection, clipping


def _variadic(fn: Callable) -> Callable:
    def apply(*inputs):
        if len(inputs) == 1:
            return inputs[0].copy()  # never hand back the input object itself
        return reduce(_in_dtype(fn), inputs).astype(inputs[0].dtype, copy=False)

    return apply


_max = _variadic(np.maximum)
_min = _variadic(np.minimum)
_sum = _variadic(np.add)


def _mean(*inputs):
    total = reduce(np.add, [upcast(x) for x in inputs])
    return np.asarray(total / len(inputs)).astype(inputs[0].dtype, copy=False)


def _register_variadic(name: str, fn: Callable) -> None:
    def legacy(*inputs, consumed_inputs=None):
        return fn(*inputs)

    op(name, since=1, elementwise=True)(legacy)
    op(name, since=6)(fn)


for _name, _fn in {"Max": _max, "Min": _min, "Sum": _sum, "Mean": _mean}.items():
    _register_variadic(_name, _fn)


@op("Where", since=9, elementwise=True)
def where(condition, x, y):
    return np.where(condition, x, y)


def _clip(x, lo, hi):
    if lo is None and hi is None:
        return x.copy()
    if x.dtype.kind in "iuf" and x.ndim:
        # one np.clip with both bounds (a missing one is the type's extreme): min / max with a
        # scalar run numpy's unvectorized loop. np.clip takes max then min: when
        # min > max every value becomes max, as the spec says.
        low, high = type_range(x.dtype)
        lo = low if lo is None else np.asarray(lo, dtype=x.dtype)
        hi = high if hi is None else np.asarray(hi, dtype=x.dtype)
        return np.clip(x, lo, hi)
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi, dtype=x.dtype))
    return np.asarray(out).astype(x.dtype, copy=False)


@op("Clip", since=1, elementwise=True)
def clip_1(x, *, min=None, max=None, consumed_inputs=None):
    return _clip(x, min, max)


@op("Clip", since=6)
def clip_6(x, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):
    return _clip(x, min, max)


@op("Clip", since=11)
def clip(x, min=None, max=None):
    return _clip(x, min, max)
