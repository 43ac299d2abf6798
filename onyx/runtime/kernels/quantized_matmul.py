"""MatMulInteger, and the exact integer products the quantized kernels share (quantize.py's
QLinearMatMul, contrib.py's, contrib_quantizer.py's, contrib_attention.py's).

Integer products are exact: the zero-point-centered operands are small integers, exact in
float32, multiplied by float32 BLAS in chunks of K small enough that every partial sum stays at
most 2**24 (exact whatever order BLAS sums in); twice as fast as float64 BLAS, and numpy's own
integer matmul has no BLAS at all. 8-bit operands take the native int8 GEMM where it applies.
Apart from linalg.py so that a float model's session neither reads nor runs this code.
"""

from __future__ import annotations

import math

import numpy as np

from .. import native
from ..registry import op
from .derived import derived, value_key
from .linalg import gemm_matmul

_F32_EXACT = 2**24  # integers up to this are exact in float32, and so are their sums


#: 8-bit integer types and their ranges (the magnitude bound of a centered operand).
_BYTE_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _centered(x: np.ndarray, zero_point, per_row: bool) -> tuple[np.ndarray, float]:
    """x - zero_point in float32, and a bound on its magnitude (from the type and the zero
    point where the type is 8-bit, else from the data)."""
    xf = x.astype(np.float32)
    zp = None if zero_point is None else np.asarray(zero_point)
    if zp is not None and zp.size == 1:
        z = int(zp.reshape(-1)[0])
        lo_z = hi_z = z
        if z:  # (symmetric int8 weights have zero points of 0: no pass)
            xf -= z
    elif zp is not None:
        lo_z, hi_z = int(zp.min()), int(zp.max())
        zf = zp.astype(np.float32)
        if per_row and zf.ndim == 1:  # one value per row of A
            zf = zf.reshape(-1, 1)
        xf -= zf  # per column (B) broadcasts over the rows as it is
    else:
        lo_z = hi_z = 0
    r = _BYTE_RANGES.get(x.dtype)
    if r is not None:  # x in its type's range
        return xf, float(max(hi_z - r[0], r[1] - lo_z))
    return xf, _magnitude(xf)


def _magnitude(x: np.ndarray) -> float:
    return float(max(np.max(x, initial=0.0), -np.min(x, initial=0.0)))


def chunked_matmul(a: np.ndarray, b: np.ndarray, bound: float, exact_float=False) -> np.ndarray:
    """a @ b in int32 for integer-valued float32 a, b whose products are at most ``bound`` in
    magnitude: float32 BLAS over K-chunks whose partial sums stay exact. ``exact_float``: the
    float32 product itself when one chunk covers K (its values are the exact integers)."""
    k = a.shape[-1]
    chunk = max(int(_F32_EXACT // max(bound, 1.0)), 1)
    if k <= chunk:
        y = gemm_matmul(a, b)
        return y if exact_float else y.astype(np.int32)
    acc = gemm_matmul(a[..., :chunk], b[..., :chunk, :]).astype(np.int32)
    for start in range(chunk, k, chunk):
        acc += gemm_matmul(a[..., start : start + chunk], b[..., start : start + chunk, :]).astype(
            np.int32
        )
    return acc


def _centered_operand(x: np.ndarray, zero_point, per_row: bool) -> tuple[np.ndarray, float]:
    """_centered's (x - zero_point, bound). A constant operand (a weight: read-only) is centered
    once per session and its bound taken from the data (see derived.py); anything else is
    centered per call, its bound from its type.
    """

    def make():
        xf, bound = _centered(x, zero_point, per_row)
        xf.flags.writeable = False
        return xf, min(bound, _magnitude(xf))

    if x.flags.writeable:
        return _centered(x, zero_point, per_row)
    return derived(x, ("centered", per_row, value_key(zero_point)), make)


def packed_operand(b: np.ndarray, a_dtype, a_zero_point) -> native.Packed:
    """B packed for the native GEMM with an A of a_dtype: once per session for a constant (a
    weight, then with its column sums whatever A's zero point)."""
    if b.flags.writeable:
        return native.pack(b, a_dtype, a_zero_point)
    return derived(b, ("packed", np.dtype(a_dtype).char), lambda: native.pack(b, a_dtype))


def _per_row(v, rows: int, repeat: int):
    """A per-row (M) parameter repeated for a stack of `repeat` matrices; scalars as they are."""
    if v is None or np.size(v) == 1 or repeat == 1:
        return v
    return np.tile(np.asarray(v).reshape(rows, -1), (repeat, 1)).reshape(-1, *np.shape(v)[1:])


def native_matmul(a, b, a_zero_point=None, b_zero_point=None, scale=None, y_zero_point=None):
    """integer_matmul (or, with ``scale``, its requantization to y_zero_point's type) on the
    native int8 GEMM; None where that does not apply (then the caller's numpy path runs)."""
    if not (
        a.dtype in _BYTE_RANGES
        and b.dtype in _BYTE_RANGES
        and min(a.ndim, b.ndim) >= 2
        and native.int8_gemm_ok(a.shape[-1])
        and np.size(a_zero_point) in (1, a.shape[-2])
        and np.size(b_zero_point) in (1, b.shape[-1])
        and (np.size(a_zero_point) == 1 or np.size(b_zero_point) == 1)
        and (scale is None or y_zero_point.dtype in _BYTE_RANGES)
        and (scale is None or scale.size == 1 or scale.shape in ((a.shape[-2], 1), (b.shape[-1],)))
    ):
        return None
    za = 0 if a_zero_point is None else a_zero_point
    zb = 0 if b_zero_point is None else b_zero_point
    M, K = a.shape[-2:]
    N = b.shape[-1]
    requant = {"scale": scale, "y_zero_point": y_zero_point}
    if b.ndim == 2:  # one B for every row of every matrix of A: one GEMM
        repeat = math.prod(a.shape[:-2])
        rows = np.ascontiguousarray(a.reshape(-1, K))
        if scale is not None and scale.ndim == 2:  # per row (M, 1); per column stays
            requant["scale"] = _per_row(scale, M, repeat)
        packed = packed_operand(b, a.dtype, za)
        y = native.int8_gemm(rows, packed, _per_row(za, M, repeat), zb, **requant)
        return y.reshape(a.shape[:-1] + (N,))
    if np.size(za) == 1 and np.size(zb) == 1 and (scale is None or scale.size == 1):
        za, zb = int(np.reshape(za, -1)[0]), int(np.reshape(zb, -1)[0])
        return native.batched_int8_gemm(a, b, za, zb, **requant)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + (M, K))
    b = np.broadcast_to(b, batch + (K, N))
    y = np.empty(batch + (M, N), np.int32 if scale is None else y_zero_point.dtype)
    for i in np.ndindex(*batch):
        rows = a[i] if a[i].strides[1] == 1 else np.ascontiguousarray(a[i])
        native.int8_gemm(rows, native.pack(b[i], a.dtype, za), za, zb, out=y[i], **requant)
    return y


def integer_matmul(a, b, a_zero_point=None, b_zero_point=None, exact_float=False) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) in int32, exactly (``exact_float``: or as float32
    holding the exact integers, when that needs no conversion).

    a_zero_point is a scalar or one per row of A ([M]); b_zero_point a scalar or one per column
    of B ([N]).
    """
    y = native_matmul(a, b, a_zero_point, b_zero_point)
    if y is not None:
        return y
    af, a_bound = _centered_operand(a, a_zero_point, per_row=True)
    bf, b_bound = _centered_operand(b, b_zero_point, per_row=False)
    if a.shape[-1] * a_bound * b_bound > _F32_EXACT:  # chunks needed: the data may need fewer
        # (a constant's bound is its data's already)
        a_bound = min(a_bound, _magnitude(af)) if a.flags.writeable else a_bound
        b_bound = min(b_bound, _magnitude(bf)) if b.flags.writeable else b_bound
    return chunked_matmul(af, bf, a_bound * b_bound, exact_float)


@op("MatMulInteger", since=10, threads="pool")
def mat_mul_integer(a, b, a_zero_point=None, b_zero_point=None):
    return integer_matmul(a, b, a_zero_point, b_zero_point)
