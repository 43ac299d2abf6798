"""Linear algebra: MatMul, MatMulInteger, Gemm, Einsum, Det.

Products go through BLAS: float16/bfloat16 are multiplied in float32 (numpy has no BLAS for
them), integer products with zero points in float64, which is exact while |sum| < 2**53.
"""

from __future__ import annotations

import numpy as np

from ..registry import op
from .elementwise import upcast


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul with the result in A's dtype; low-precision floats through float32."""
    return np.asarray(np.matmul(upcast(a), upcast(b))).astype(a.dtype, copy=False)


@op("MatMul", since=1)
def mat_mul(a, b):
    return matmul(a, b)


def integer_matmul(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) in int32.

    a_zero_point is a scalar or one per row of A ([M]); b_zero_point a scalar or one per column
    of B ([N]). Products of 8-bit values summed in float64 are exact for any realistic K.
    """
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if a_zero_point is not None:
        azp = np.asarray(a_zero_point, dtype=np.float64)
        if azp.ndim == 1 and azp.size > 1:  # per row: one value per row of A
            azp = azp.reshape(-1, 1)
        a = a - azp
    if b_zero_point is not None:
        b = b - np.asarray(b_zero_point, dtype=np.float64)  # per column broadcasts over rows
    return np.asarray(np.matmul(a, b)).astype(np.int32)


@op("MatMulInteger", since=10)
def mat_mul_integer(a, b, a_zero_point=None, b_zero_point=None):
    return integer_matmul(a, b, a_zero_point, b_zero_point)


def _gemm(a, b, c, alpha, beta, trans_a, trans_b):
    ac, bc = upcast(a), upcast(b)
    if trans_a:
        ac = ac.T
    if trans_b:
        bc = bc.T
    y = np.matmul(ac, bc)
    if alpha != 1:
        y = y * np.asarray(alpha, dtype=y.dtype if y.dtype.kind == "f" else np.float64)
    if c is not None and beta != 0:
        cc = upcast(c)
        y = y + (cc if beta == 1 else beta * cc)
    return np.asarray(y).astype(a.dtype, copy=False)


@op("Gemm", since=1)
def gemm_1(a, b, c, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    # opset < 7: C broadcasts only when `broadcast` is set; numpy broadcasting covers both
    return _gemm(a, b, c, alpha, beta, transA, transB)


@op("Gemm", since=7)
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    return _gemm(a, b, c, alpha, beta, transA, transB)


@op("Einsum", since=12)
def einsum(*inputs, equation):
    args = [upcast(x) for x in inputs]
    out = np.asarray(np.einsum(equation.replace(" ", ""), *args, optimize=len(args) > 1))
    if any(np.shares_memory(out, x) for x in inputs):  # one operand: einsum returns a view
        out = out.copy()
    return out.astype(inputs[0].dtype, copy=False)


@op("Det", since=11)
def det(x):
    return np.asarray(np.linalg.det(upcast(x))).astype(x.dtype, copy=False)
