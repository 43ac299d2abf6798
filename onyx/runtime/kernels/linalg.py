"""Linear algebra: MatMul, Gemm, Einsum, Det.

Products go through BLAS (or the native library's packed GEMM): float16/bfloat16 are multiplied
in float32 (numpy has no BLAS for them). The integer product (MatMulInteger, and the exact
integer products the quantized kernels share) is quantized_matmul.py's: a float model's session
neither reads nor runs it.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import DataType
from .. import native
from ..registry import binds, op
from .derived import derived
from .low_floats import upcast


def gemm_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul, as one GEMM when a stack of A rows meets one 2-D B: numpy would loop over the
    stack (one small product each: [seq, 1, d] @ [d, n] is seq matrix-vector products)."""
    if b.ndim == 2 and a.ndim > 2:
        rows = a.reshape(-1, a.shape[-1])  # (a copy only when a's layout needs one)
        return np.matmul(rows, b).reshape(a.shape[:-1] + (b.shape[1],))
    return np.matmul(a, b)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul with the result in A's dtype; low-precision floats through float32."""
    y = packed_matmul(a, b)
    if y is None:
        y = few_rows_matmul(a, b)
    if y is not None:
        return y
    return np.asarray(gemm_matmul(upcast(a), upcast(b))).astype(a.dtype, copy=False)


#: Largest constant B packed for the native GEMM (the packed copy doubles its memory).
PACKED_B_BYTES = 8 << 20


def packed_b(b: np.ndarray, trans_b: bool = False) -> native.PackedGemm | None:
    """The native GEMM's packed copy of a constant 2-D float32 B (made once per weight), or
    None where it does not apply."""
    if (
        type(b) is not np.ndarray
        or b.dtype != np.float32
        or b.ndim != 2
        or b.flags.writeable
        or b.nbytes > PACKED_B_BYTES
        or not b.size
        or not native.sgemm_ok()
    ):
        return None
    if trans_b:
        return derived(b, ("packed_gemm_t",), lambda: native.PackedGemm(b.T))
    return derived(b, ("packed_gemm",), lambda: native.PackedGemm(b))


def packed_matmul(
    a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, relu: bool = False
) -> np.ndarray | None:
    """float32 A of many rows times a constant 2-D float32 B on the native GEMM (gemm_f32.c,
    B packed once per session), plus a per-column ``bias`` and then ReLU when given; or None
    where it does not apply."""
    if a.dtype != np.float32 or a.ndim < 2 or a.shape[-1] != b.shape[0]:
        return None
    if a.size < native.SGEMM_ROWS * a.shape[-1]:
        return None
    gemm = packed_b(b)
    y = None if gemm is None else gemm(a.reshape(-1, a.shape[-1]), bias, relu)
    return None if y is None else y.reshape(a.shape[:-1] + (b.shape[1],))


def constant_product_threads(node) -> str:
    """Where a product's work runs: a float32 constant B the native GEMM packs goes to it, or
    for A of a few rows to the native GEMV, on onyx's pool; others to BLAS. The session gives BLAS one thread
    when pool work dominates: OpenBLAS's threads spin after every call, and on a loaded machine
    a small transformer's 2-thread BLAS products took 100x their one-thread time."""
    b = node.inputs[1] if len(node.inputs) > 1 else None
    t = None if b is None else b.const_value
    if t is None or len(t.shape) != 2 or t.dtype != DataType.FLOAT:
        return "blas"
    packed = 4 * math.prod(t.shape) <= PACKED_B_BYTES  # (larger: BLAS, on its threads)
    # (native.avx512, not sgemm_ok: asked at creation, which then imported the GEMM's family
    # for a model whose products all run on the GEMV)
    return "pool" if packed and native.avx512() else "blas"


def bound_matmul(a, b, bias, relu=False):
    """``call(a)`` computing packed_matmul's product (then few_rows_matmul's, when ``relu``
    is False) for A of a's signature and a constant B (and bias: the caller's binds declares
    them constant), the path chosen once (registry.binds); None where neither applies."""
    if b.__class__ is not np.ndarray:
        return None
    if a.dtype != _F32 or b.dtype != _F32 or a.ndim < 2 or b.ndim != 2 or b.flags.writeable:
        return None
    if bias is not None and (bias.dtype != _F32 or bias.shape != (b.shape[1],)):
        return None
    K = a.shape[-1]
    if K != b.shape[0] or not K:
        return None
    rows, shape = a.size // K, a.shape[:-1] + (b.shape[1],)
    if a.size >= native.SGEMM_ROWS * K:
        gemm = packed_b(b)
        product = None if gemm is None else gemm.bound(rows, bias, relu)
        if product is not None:
            return lambda a, *_: product(a.reshape(rows, K)).reshape(shape)
    if not 0 < rows <= native.GEMV_ROWS or not native.gemv_ok():
        return _bound_numpy_matmul(a, b, bias, relu)
    key = ("gemv", False, rows, 1.0, 1.0, native.thread_setting())  # (few_rows_matmul's)
    make = lambda: native.FloatGemv(b, False, rows, alpha=1.0, beta=1.0)  # noqa: E731
    gemv = derived(b, key, make).bound(bias)
    if not relu:
        return lambda a, *_: gemv(a.reshape(rows, K)).reshape(shape)
    clip, inf = np.clip, np.inf

    def gemv_relu(a, *_):  # (_matmul_bias's Relu after the GEMV: fused.ACTIVATIONS')
        y = gemv(a.reshape(rows, K)).reshape(shape)
        return clip(y, 0, inf, out=y)

    return gemv_relu


def _bound_numpy_matmul(a, b, bias, relu):
    """matmul's numpy path (gemm_matmul's one GEMM for a stack of rows), then
    fused._matmul_bias's bias and Relu, for float32 A of a's shape."""
    K, N = b.shape
    shape = a.shape[:-1] + (N,)
    stacked, matmul_, clip, inf = a.ndim > 2, np.matmul, np.clip, np.inf

    def call(a, *_):
        y = matmul_(a.reshape(-1, K), b).reshape(shape) if stacked else matmul_(a, b)
        if bias is not None:
            y += bias
        return clip(y, 0, inf, out=y) if relu else y

    return call


def _bind_matmul(inputs, attrs, constant):
    a, b = inputs[:2]
    if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray:
        return None
    return bound_matmul(a, b, None)


@binds(_bind_matmul, constants=(1,))
@op("MatMul", since=1, threads=constant_product_threads)
def mat_mul(a, b):
    return matmul(a, b)


#: weights below which a Gemm of a few rows stays with numpy (a classifier head's): its matmul
#: and bias take less than the native GEMV's call (the weights fit L1; threads gain nothing)
NUMPY_GEMV_WEIGHTS = 1024


def native_gemv(a, b, c, alpha, beta, trans_b) -> np.ndarray | None:
    """alpha * a @ b' + beta * c for a float32 A of a few rows (native.FloatGemv, set up once
    per constant B), or None where it does not apply. c: None or one value per column."""
    if not (a.dtype == b.dtype == np.float32 and a.ndim == b.ndim == 2 and native.gemv_ok()):
        return None
    rows, n = a.shape[0], b.shape[0 if trans_b else 1]
    if rows > native.GEMV_ROWS or (
        c is not None and (c.dtype != np.float32 or c.shape not in ((n,), (1, n)))
    ):
        return None
    key = ("gemv", trans_b, rows, alpha, beta, native.thread_setting())
    call = derived(b, key, lambda: native.FloatGemv(b, bool(trans_b), rows, alpha=alpha, beta=beta))
    return call(np.ascontiguousarray(a), None if c is None or beta == 0 else c.reshape(-1))


def few_rows_matmul(
    a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None
) -> np.ndarray | None:
    """float32 A of a few rows (GEMV_ROWS at most, any rank) times a constant 2-D float32 B
    on the native GEMV (on onyx's pool, as the packed GEMM of more rows), plus a per-column
    ``bias``; or None where it does not apply."""
    if type(b) is not np.ndarray or b.ndim != 2 or b.flags.writeable or not a.ndim:
        return None
    K = a.shape[-1]
    rows = a.size // K if K == b.shape[0] and K else 0
    if not 0 < rows <= native.GEMV_ROWS:
        return None
    y = native_gemv(a.reshape(rows, K), b, bias, 1.0, 1.0, False)
    return None if y is None else y.reshape(a.shape[:-1] + (b.shape[1],))


def packed_gemm(a, b, c, alpha, beta, trans_b, relu: bool = False) -> np.ndarray | None:
    """Gemm (A not transposed, alpha 1) of a float32 A of many rows and a constant B on the
    native GEMM, C (one value per column) as its bias, then ReLU when asked; or None where it
    does not apply. The bias is added after the sums, as numpy's path does."""
    if alpha != 1 or a.dtype != np.float32 or a.ndim != 2 or a.shape[0] < native.SGEMM_ROWS:
        return None
    n = b.shape[0 if trans_b else 1] if b.ndim == 2 else -1
    bias = None
    if c is not None and beta != 0:
        if c.dtype != np.float32 or c.shape not in ((n,), (1, n)):
            return None
        bias = c if c.ndim == 1 else c.reshape(-1)  # (C itself: the GEMM keeps its address)
        if beta != 1:
            bias = bias * np.float32(beta)
    gemm = packed_b(b, bool(trans_b))
    return None if gemm is None or gemm.K != a.shape[1] else gemm(a, bias, relu)


def _gemm(a, b, c, alpha, beta, trans_a, trans_b):
    tiny = b.size < NUMPY_GEMV_WEIGHTS and a.ndim == 2 and a.shape[0] <= native.GEMV_ROWS
    if not trans_a and not tiny:
        y = native_gemv(a, b, c, alpha, beta, trans_b)
        if y is None:
            y = packed_gemm(a, b, c, alpha, beta, trans_b)
        if y is not None:
            return y
    ac, bc = upcast(a), upcast(b)
    if trans_a:
        ac = ac.T
    if trans_b:
        bc = bc.T
    y = np.matmul(ac, bc)  # a fresh array: scaled and biased in place
    floating = y.dtype.kind == "f"
    if alpha != 1:
        if floating:
            y *= y.dtype.type(alpha)
        else:
            y = y * np.float64(alpha)
    if c is not None and beta != 0:
        cc = upcast(c)
        if beta != 1:
            cc = cc * (y.dtype.type(beta) if floating else np.float64(beta))
        if floating and cc.dtype == y.dtype:
            y += cc  # C broadcasts to (M, N) one way (the spec's rule)
        else:
            y = y + cc
    return np.asarray(y).astype(a.dtype, copy=False)


@op("Gemm", since=1, threads=constant_product_threads)
def gemm_1(a, b, c, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    # opset < 7: C broadcasts only when `broadcast` is set; numpy broadcasting covers both
    return _gemm(a, b, c, alpha, beta, transA, transB)


_F32 = np.dtype(np.float32)

#: Cells of a small product up to which its bias is added into a fresh array: numpy's ufunc
#: writing into a given array costs about 0.5 us more (an LSTM head's Gemm of 1 x 4), the
#: same sums.
FRESH_BIAS_SUM = 64


def bound_product(a, b, c, alpha=1.0, beta=1.0, trans_b=0, relu=False):
    """``call(a)`` computing what ``_gemm`` (``relu``: ``packed_gemm``'s ReLU) computes for A
    of a's signature, B and C the constants given (C: None for none; the caller's binds
    declares them constant), with _gemm's choice of path made once (registry.binds); None
    where the types are not float32 or no path applies."""
    if b.__class__ is not np.ndarray:
        return None
    if not (a.dtype == b.dtype == _F32 and a.ndim == b.ndim == 2) or (
        c is not None and c.dtype != _F32
    ):
        return None
    rows = a.shape[0]
    if relu:  # (fused_gemm's Relu: the packed GEMM's epilogue or nothing)
        return _bound_packed(a, b, c, alpha, beta, trans_b, relu)
    tiny = b.size < NUMPY_GEMV_WEIGHTS and rows <= native.GEMV_ROWS
    if tiny:
        return _bound_numpy_gemm(b, c, alpha, beta, trans_b, rows)
    n = b.shape[0 if trans_b else 1]
    if rows <= native.GEMV_ROWS and native.gemv_ok():  # (native_gemv, set up as it does)
        if c is not None and c.shape not in ((n,), (1, n)):
            return None
        key = ("gemv", trans_b, rows, alpha, beta, native.thread_setting())
        make = lambda: native.FloatGemv(b, bool(trans_b), rows, alpha=alpha, beta=beta)  # noqa: E731
        return derived(b, key, make).bound(None if c is None or beta == 0 else c.reshape(-1))
    return _bound_packed(a, b, c, alpha, beta, trans_b, relu)


def _bound_packed(a, b, c, alpha, beta, trans_b, relu):
    """packed_gemm bound to A's rows (None where it does not apply)."""
    if alpha != 1 or a.shape[0] < native.SGEMM_ROWS:
        return None
    n = b.shape[0 if trans_b else 1]
    bias = None
    if c is not None and beta != 0:
        if c.shape not in ((n,), (1, n)):
            return None
        bias = c if c.ndim == 1 else c.reshape(-1)
        if beta != 1:
            bias = bias * np.float32(beta)
    gemm = packed_b(b, bool(trans_b))
    if gemm is None or gemm.K != a.shape[1]:
        return None
    return gemm.bound(a.shape[0], bias, relu)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` one way (as += needs)."""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _bound_numpy_gemm(b, c, alpha, beta, trans_b, rows: int):
    """_gemm's numpy path for float32 operands, B' and beta * C made once (for A of ``rows``
    rows)."""
    bt = b.T if trans_b else b
    scale = None if alpha == 1 else np.float32(alpha)
    cc = None if c is None or beta == 0 else c if beta == 1 else c * np.float32(beta)
    matmul_, add = np.matmul, np.add
    shape = (rows, bt.shape[1])
    if scale is None and cc is not None and math.prod(shape) <= FRESH_BIAS_SUM:
        if _broadcasts_to(cc.shape, shape):  # (a C that += in place would refuse: as written)
            return lambda a: add(matmul_(a, bt), cc)

    def call(a):
        y = matmul_(a, bt)
        if scale is not None:
            y *= scale
        if cc is not None:
            y += cc
        return y

    return call


def _bind_gemm(inputs, attrs, constant):
    a, b, c = (tuple(inputs) + (None, None))[:3]
    if attrs["transA"] or a.__class__ is not np.ndarray:
        return None
    call = bound_product(a, b, c, attrs["alpha"], attrs["beta"], attrs["transB"])
    return None if call is None else lambda a, b, c=None: call(a)


@binds(_bind_gemm, constants=(1, 2))
@op("Gemm", since=7, threads=constant_product_threads)
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    return _gemm(a, b, c, alpha, beta, transA, transB)


@op("Einsum", since=12, threads="blas")
def einsum(*inputs, equation):
    args = [upcast(x) for x in inputs]
    out = np.asarray(np.einsum(equation.replace(" ", ""), *args, optimize=len(args) > 1))
    if any(np.shares_memory(out, x) for x in inputs):  # one operand: einsum returns a view
        out = out.copy()
    return out.astype(inputs[0].dtype, copy=False)


@op("Det", since=11)
def det(x):
    return np.asarray(np.linalg.det(upcast(x))).astype(x.dtype, copy=False)
