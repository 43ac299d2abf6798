"""Cast, CastLike, BitCast: every pair of ONNX element types.

Conversions go through numpy / ml_dtypes `astype` (round to nearest even, integers wrap), with
the spec's extra rules layered on top: float8 saturation, float8e8m0 rounding modes, sub-byte
integers wrapping like the wider ones, and the string formats onnxruntime uses.
"""

from __future__ import annotations

import sys

import numpy as np

from ...ir.dtypes import DataType, bit_width, from_numpy, to_numpy
from ..registry import op
from .low_floats import LOW_FLOATS, is_float


class _MlTypes:
    """ml_dtypes' types the spec's rules single out, made once ml_dtypes is imported: until
    then no array or type of its exists (an ONNX type of its reaches numpy through
    ir/dtypes.py, which imports it), and a model without them never imports it (some
    milliseconds of a cold start, for every model with a Cast)."""

    __slots__ = ("float8", "e8m0", "sub_byte_ints")

    def __init__(self, ml) -> None:  # noqa: ANN001  (the ml_dtypes module, or None)
        if ml is None:
            self.float8 = self.sub_byte_ints = frozenset()
            self.e8m0 = None
            return
        floats = (ml.float8_e4m3fn, ml.float8_e4m3fnuz, ml.float8_e5m2, ml.float8_e5m2fnuz)
        self.float8 = frozenset(np.dtype(t) for t in floats)
        self.e8m0 = np.dtype(ml.float8_e8m0fnu)
        ints = (ml.int4, ml.uint4, ml.int2, ml.uint2)
        self.sub_byte_ints = frozenset(np.dtype(t) for t in ints)


_NO_ML_TYPES = _MlTypes(None)
_ml: _MlTypes | None = None


def _ml_types() -> _MlTypes:
    global _ml
    if _ml is None:
        if "ml_dtypes" not in sys.modules:
            return _NO_ML_TYPES
        # (the import statement, not sys.modules' entry: a module another thread is still
        # importing is there half made, without its types; the statement waits for it)
        import ml_dtypes

        _ml = _MlTypes(ml_dtypes)
    return _ml


_OBJECT = np.dtype(object)
#: Types numpy's astype converts between exactly as the spec asks (round to nearest even,
#: integers wrap, x != 0 for bool): no special rule applies. float16 only as a source (integer
#: -> float16 goes through float64 below).
_PLAIN_TARGETS = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float32,
        np.float64,
    )
)
_PLAIN_SOURCES = _PLAIN_TARGETS | {np.dtype(np.float16)}


def _to_wide(x: np.ndarray) -> np.ndarray:
    """A lossless numpy-native form of x: ml_dtypes floats -> float32, sub-byte ints -> int64."""
    if x.dtype in _ml_types().sub_byte_ints:
        return x.astype(np.int64)
    if x.dtype in LOW_FLOATS and x.dtype != np.float16:
        return x.astype(np.float32)
    return x


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Power-of-two encoding: code = exponent + 127 (0..254), 255 is NaN.

    As onnxruntime does: 'nearest' rounds half up (1.5 -> 2), and without saturation any x
    outside [E8M0_MIN, E8M0_MAX] (zero and infinity included) is NaN, before rounding.
    """
    x = np.abs(x.astype(np.float64))  # negative input is undefined: use the magnitude
    m, e = np.frexp(x)  # x = m * 2**e, m in [0.5, 1): x lies in [2**(e-1), 2**e)
    exp = e - 1
    if round_mode == "up":
        exp = exp + (m > 0.5)
    elif round_mode == "nearest":
        exp = exp + (m >= 0.75)  # the midpoint of [2**(e-1), 2**e)
    elif round_mode != "down":
        raise ValueError(f"Cast: round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    code = np.clip(exp + 127, 0, 255)
    if saturate:
        code = np.where(x == 0, 0, np.where(np.isinf(x), 254, np.minimum(code, 254)))
    else:
        outside = (x > 2.0**127) | (x < 2.0**-127)
        code = np.where(outside, 255, code)
    code = np.where(np.isnan(x), 255, code)
    return code.astype(np.uint8).view(_ml_types().e8m0)


def cast_numeric(x: np.ndarray, dtype: np.dtype, saturate: bool = True, round_mode: str = "up"):
    """Cast between numeric (and bool) element types, following the spec's rules."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x.copy()
    src = _to_wide(x)
    if dtype == np.bool_:
        return src != 0
    ml = _ml_types()
    if dtype in ml.float8:
        src = src.astype(np.float64) if src.dtype.kind in "iub" else src
        if saturate:  # Inf and out-of-range values go to +-FLT_MAX; NaN stays NaN
            top = float(sys.modules["ml_dtypes"].finfo(dtype).max)
            src = np.clip(src, -top, top)
        return src.astype(dtype)
    if ml.e8m0 is not None and dtype == ml.e8m0:  # (never dtype == None: that is float64)
        return _to_e8m0(src, saturate, round_mode)
    if dtype in ml.sub_byte_ints and is_float(src.dtype):
        # float -> 4/2-bit integer: truncate toward zero, then wrap into the width like the
        # wider integers do (out-of-range floats are undefined; this is what the tests expect)
        src = np.where(np.isfinite(src), np.trunc(src), 0).astype(np.int64)
    if dtype in LOW_FLOATS and src.dtype.kind in "iub":
        src = src.astype(np.float64)
    return src.astype(dtype)


def _format_numbers(x: np.ndarray) -> np.ndarray:
    """Numbers -> strings as onnxruntime writes them: '%.8g' floats, 'NaN', 'INF', '-INF'."""
    src = _to_wide(x)
    if src.dtype == np.bool_:
        strs = np.where(src, "1", "0")
    elif src.dtype.kind in "iu":
        strs = src.astype(str)
    else:
        wide = src.astype(np.float64)
        strs = np.char.mod("%.8g", wide)
        strs = np.where(np.isnan(wide), "NaN", strs)
        strs = np.where(np.isposinf(wide), "INF", np.where(np.isneginf(wide), "-INF", strs))
    # filled flat: a nested shape would take a list of strings as one row to broadcast
    out = np.empty(np.size(strs), dtype=object)
    out[:] = [str(s) for s in np.ravel(strs)]
    return out.reshape(x.shape)


def _parse_strings(x: np.ndarray, dtype: np.dtype, saturate: bool, round_mode: str):
    """Strings -> numbers: integers parse exactly when they can, everything else via double
    (which takes 'INF', '+INF', '-INF', 'NaN' in any case and scientific notation)."""
    strs = np.asarray(x, dtype=str)
    if dtype.kind in "iu" or dtype in _ml_types().sub_byte_ints:
        wide = np.uint64 if dtype == np.uint64 else np.int64
        try:
            return strs.astype(wide).astype(dtype)
        except (ValueError, OverflowError):
            pass
    return cast_numeric(strs.astype(np.float64), dtype, saturate, round_mode)


def cast(x: np.ndarray, to, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """Cast to the ONNX element type `to` (enum value, or its name as in opset 1)."""
    code = DataType[to.upper()] if isinstance(to, str) else to
    dtype = to_numpy(code)
    x = np.asarray(x)
    if dtype == _OBJECT:
        return x.copy() if x.dtype == _OBJECT else _format_numbers(x)
    if x.dtype.kind in "OUS":
        return _parse_strings(x, dtype, bool(saturate), round_mode)
    return cast_numeric(x, dtype, bool(saturate), round_mode)


@op("Cast", since=1, elementwise=True)
def cast_op(x, *, to, saturate=1, round_mode="up"):
    # `saturate` (opset 19) and `round_mode` (opset 24) only matter for float8 targets, which
    # earlier opsets do not have, so one kernel serves every version
    if type(to) is int and type(x) is np.ndarray and x.dtype in _PLAIN_SOURCES:
        dtype = to_numpy(to)
        if dtype in _PLAIN_TARGETS:
            return x.astype(dtype)  # the common case, without cast()'s dispatch
    return cast(x, to, saturate, round_mode)


@op("CastLike", since=15, elementwise=True)
def cast_like(x, target_type, *, saturate=1, round_mode="up"):
    return cast(x, from_numpy(target_type.dtype), saturate, round_mode)


@op("BitCast", since=26)
def bit_cast(x, *, to):
    dtype = to_numpy(to)
    source = from_numpy(x.dtype)
    if dtype == _OBJECT or source == DataType.STRING:
        raise ValueError("BitCast: strings have no bit representation")
    if bit_width(source) != bit_width(to):
        raise ValueError(
            f"BitCast: {x.dtype} ({bit_width(source)} bits) and {dtype} ({bit_width(to)} bits)"
            " differ in width"
        )
    # one element per array item, little endian: reinterpreting the buffer is the bit cast
    # (sub-byte types keep their bits in the low part of each byte)
    out = np.ascontiguousarray(x).view(dtype).reshape(x.shape).copy()
    return out != 0 if dtype == np.bool_ else out
