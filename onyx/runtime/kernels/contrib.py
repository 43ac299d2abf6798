"""com.microsoft quantized contrib operators (QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, QLinearConcat, MatMulIntegerToFloat, DynamicQuantizeMatMul,
QGemm), with the semantics of onnxruntime's ContribOperators docs. The float ones of its
transformer optimizer (Gelu, BiasGelu, FastGelu, SkipLayerNormalization, FusedMatMul) are in
contrib_norm.py: a float transformer's session neither reads nor runs this module (nor
quantize.py and cast.py, which it imports).

Quantized ops dequantize, compute in float32 and requantize (round half to even, saturate), as
onnxruntime's reference paths do; where onnxruntime folds scales into one float32 multiplier
the same is done here so results agree to the last unit.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from .derived import derived, frozen, value_key
from .linalg import gemm_matmul
from .low_floats import fits, upcast
from .quantize import dynamic_params, dynamic_quantize_linear, quantize_per_tensor, saturate_cast
from .quantized_matmul import integer_matmul

MS = "com.microsoft"
_F32 = np.float32

# (activation.py's Sigmoid, Softmax and Relu and fused.py's table lookup are imported where
# the ops that run them first do: a quantized CNN's or a dynamically quantized transformer's
# session runs none of them, and their modules, with elementwise.py's kernels, which this
# module took along only for two helpers, were a millisecond of its cold start)


def _deq(x, scale, zero_point=None) -> np.ndarray:
    """(x - zero_point) * scale in float32."""
    v = x.astype(np.float32)
    if zero_point is not None:
        v = v - np.asarray(zero_point).astype(np.float32)
    return v * np.asarray(scale, dtype=np.float32)


def _q(v, scale, zero_point, dtype) -> np.ndarray:
    """round(v / scale) + zero_point, saturated to dtype: per tensor as QuantizeLinear does it
    (one native pass, the same bits), else saturate_cast."""
    v = np.asarray(v, np.float32)
    y = quantize_per_tensor(v, np.asarray(scale, np.float32), zero_point, dtype)
    return saturate_cast(v / np.float32(scale), zero_point, dtype) if y is None else y


# ---------------------------------------------------------------------------------------------
# Quantized element-wise


def _centered(x, zero_point, k=None) -> np.ndarray:
    """(x - zero_point) [* k] in a fresh float32 array (the difference is exact for 8-bit
    integers), in place."""
    v = x.astype(np.float32)
    if zero_point is not None:
        v -= np.asarray(zero_point).astype(np.float32)
    if k is not None:
        v *= k
    return v


def _requantized(v, zero_point, dtype) -> np.ndarray:
    """round_half_even(v + zero_point), saturated: v is a fresh float32 array already in units
    of the output scale, rounded in place.

    onnxruntime adds the zero point in float32 before rounding (the tie-breaker for where the
    rounding happens; it matters only on ties, which 8-bit grids hit often).
    """
    if zero_point is not None:
        v += np.asarray(zero_point).astype(np.float32)
    info = np.iinfo(dtype)
    np.rint(v, out=v)
    return np.clip(v, info.min, info.max, out=v).astype(dtype)


def _combine(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ufunc(a, b) for a commutative ufunc and fresh a, b: into whichever already has the
    broadcast shape (a bias [N] plus [M, 1, N] activations lands in the activations)."""
    if fits(a.shape, b.shape):
        return ufunc(a, b, out=a)
    if fits(b.shape, a.shape):
        return ufunc(b, a, out=b)
    return ufunc(a, b)


#: The native QLinearAdd / QLinearMul set-ups of constant parameters, by operation, operand
#: shapes and type and the parameters' ids; each entry holds its parameter objects (so no id
#: is reused while it lives) and is taken only when they are the very objects passed.
_binary_runs: dict = {}
_BINARY_RUNS = 1024


def _kept_binary(multiply: bool, a, b, params: tuple):
    """(key, the kept native set-up for these operands and constant parameters or None)."""
    key = (multiply, a.shape, b.shape, a.dtype.char, b.dtype.char, *map(id, params))
    hit = _binary_runs.get(key)
    if hit is not None and all(map(operator.is_, hit[0], params)):
        return key, hit[1]
    return key, None


def _keep_binary(key, params: tuple, run) -> None:
    if run is not None and all(p is None or not np.asarray(p).flags.writeable for p in params):
        if len(_binary_runs) >= _BINARY_RUNS:  # (sessions come and go)
            _binary_runs.clear()
        _binary_runs[key] = (params, run)


def _native_binary_run(multiply, a, b, params, ka, kb):
    """A kept (or new) native set-up's result for QLinearAdd / QLinearMul, or None."""
    a_zero_point, b_zero_point, c_zero_point = params[1], params[3], params[5]
    zero_points = [np.asarray(0 if z is None else z) for z in (a_zero_point, b_zero_point)]
    zy = np.asarray(0 if c_zero_point is None else c_zero_point)
    if any(z.size != 1 for z in (*zero_points, zy)):
        return None
    return native.qlinear_binary_setup(
        a,
        b,
        zero_points[0].reshape(-1)[0],
        zero_points[1].reshape(-1)[0],
        ka,
        kb,
        zy.reshape(-1)[0],
        multiply,
    )


def _binary_factors(multiply: bool, a_scale, b_scale, c_scale) -> tuple:
    """(ka, kb): onnxruntime's float32 multipliers, A' * (sa / sc) + B' * (sb / sc) for
    QLinearAdd, A' * B' * (sa * sb / sc) (both the product's) for QLinearMul."""
    if multiply:
        k = np.float32(a_scale) * np.float32(b_scale) / np.float32(c_scale)
        return k, k
    return np.float32(a_scale) / np.float32(c_scale), np.float32(b_scale) / np.float32(c_scale)


def _bind_binary(multiply: bool):
    """registry.binds for QLinearAdd (QLinearMul with ``multiply``) of constant scales and
    zero points: the native set-up the kernel keeps after its first call, made once for the
    operands' shapes and type (the same pass: the same bits), without the kernel's look-up of
    it by the parameters' ids. None (the kernel as written) where the native pass does not
    apply."""

    def make(inputs, attrs, constant):
        a, b = inputs[0], inputs[3]
        params = (inputs[1], inputs[2], inputs[4], inputs[5], inputs[6], _input(inputs, 7))
        if not (a.flags.c_contiguous and b.flags.c_contiguous):
            a, b = native.contiguous_bytes(a), native.contiguous_bytes(b)
        ka, kb = _binary_factors(multiply, params[0], params[2], params[4])
        run = _native_binary_run(multiply, a, b, params, ka, kb)
        if run is None:
            return None
        contiguous = native.contiguous_bytes

        def call(a, a_scale, a_zero_point, b, *rest):
            if not (a.flags.c_contiguous and b.flags.c_contiguous):
                a, b = contiguous(a), contiguous(b)
            return run(a, b)

        return call

    return make


def _input(inputs, k: int):
    return inputs[k] if k < len(inputs) else None


@binds(_bind_binary(multiply=False), constants=(1, 2, 4, 5, 6, 7))
@op("QLinearAdd", since=1, domain=MS, elementwise=True)
def q_linear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    params = (a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point)
    if not (a.flags.c_contiguous and b.flags.c_contiguous):  # (a channels-last chain's views)
        a, b = native.contiguous_bytes(a), native.contiguous_bytes(b)
    key, run = _kept_binary(False, a, b, params)
    if run is not None:  # (a and b C-contiguous above)
        return run(a, b)
    # onnxruntime folds each scale ratio into one float32 multiplier: A' * (sa / sc) + B' * (sb / sc)
    ka, kb = _binary_factors(False, a_scale, b_scale, c_scale)
    run = _native_binary_run(False, a, b, params, ka, kb)
    if run is not None:
        _keep_binary(key, params, run)
        return run(a, b)
    total = _combine(np.add, _centered(a, a_zero_point, ka), _centered(b, b_zero_point, kb))
    return _requantized(total, c_zero_point, a.dtype)


@binds(_bind_binary(multiply=True), constants=(1, 2, 4, 5, 6, 7))
@op("QLinearMul", since=1, domain=MS, elementwise=True)
def q_linear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    params = (a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point)
    if not (a.flags.c_contiguous and b.flags.c_contiguous):  # (a channels-last chain's views)
        a, b = native.contiguous_bytes(a), native.contiguous_bytes(b)
    key, run = _kept_binary(True, a, b, params)
    if run is not None:  # (a and b C-contiguous above)
        return run(a, b)
    # onnxruntime: A' * B' * (sa * sb / sc) in float32
    k, _ = _binary_factors(True, a_scale, b_scale, c_scale)
    run = _native_binary_run(True, a, b, params, k, k)
    if run is not None:
        _keep_binary(key, params, run)
        return run(a, b)
    product = _combine(np.multiply, _centered(a, a_zero_point), _centered(b, b_zero_point))
    product *= k
    return _requantized(product, c_zero_point, a.dtype)


@op("QLinearSigmoid", since=1, domain=MS, elementwise=True)
def q_linear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    from .activation import _sigmoid

    return _q(_sigmoid(_deq(x, x_scale, x_zero_point)), y_scale, y_zero_point, x.dtype)


@op("QLinearLeakyRelu", since=1, domain=MS, elementwise=True)
def q_linear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, alpha=0.01):
    v = _deq(x, x_scale, x_zero_point)
    return _q(np.where(v >= 0, v, np.float32(alpha) * v), y_scale, y_zero_point, x.dtype)


def _bind_qlinear_softmax(inputs, attrs, constant):
    """registry.binds for QLinearSoftmax over the last axis of bytes with constant scales and
    zero points, per tensor, where no byte's exp overflows (the byte path's first check,
    made once for all 256): that path's lookup, sums and division, and the quantization's
    native pass set up once (the same operations, so the same bits), without the kernel's
    per-call look-ups. None (the kernel as written) elsewhere."""
    x, x_scale, x_zero_point, y_scale, y_zero_point = inputs
    if attrs.get("opset", 0) < 13 or not (x.ndim and x.size):
        return None
    if attrs["axis"] not in (-1, x.ndim - 1):
        return None
    if x.dtype not in native.BYTES or y_scale is None or y_zero_point is None:
        return None
    if (
        y_zero_point.dtype != x.dtype
        or np.size(x_scale) != 1
        or np.size(x_zero_point) > 1
        or y_scale.dtype != _F32
    ):
        return None
    if y_scale.size != 1 or y_zero_point.size != 1:
        return None
    table, exps = _softmax_tables(x, x_scale, x_zero_point)
    if not np.max(table) <= 60:  # (no exp overflows, whatever the bytes)
        return None
    zp = int(y_zero_point.reshape(-1)[0])
    quantize = native.per_tensor_setup(True, x.shape, y_scale.reshape(()), zp, x.dtype)
    if quantize is None:
        return None
    from .fused import table_lookup

    ones = frozen(np.ones(x.shape[-1], np.float32))
    # (a sum can vanish only where some exp does: then each call's sums are looked at)
    may_vanish = not np.min(exps) >= 1e-30
    minimum = np.minimum.reduce

    def call(x, *params):
        e = table_lookup(np.ascontiguousarray(x), exps)
        total = np.matmul(e, ones)
        if may_vanish and not minimum(total.reshape(-1)) >= 1e-30:
            return q_linear_softmax(x, *params, **attrs)  # (the kernel's general path)
        e /= total[..., None]
        return quantize(e)

    return call


def _softmax_tables(x, x_scale, x_zero_point) -> tuple[np.ndarray, np.ndarray]:
    """The dequantized values of x's 256 bytes and their exps, by bit pattern (lookups index
    by it), once per constant scale."""

    def tables():
        codes = np.arange(256, dtype=np.uint8).view(x.dtype)
        table = _deq(codes, x_scale, x_zero_point)
        return frozen(table), frozen(np.exp(table))

    key = ("softmax exps", x.dtype.char, value_key(x_zero_point))
    return derived(x_scale, key, tables)


@binds(_bind_qlinear_softmax, constants=(1, 2, 3, 4))
@op("QLinearSoftmax", since=1, domain=MS)
def q_linear_softmax(x, x_scale, x_zero_point, y_scale, y_zero_point, *, opset, axis=-1):
    per_tensor = np.size(x_scale) == 1 and np.size(x_zero_point) <= 1
    if per_tensor and axis in (-1, x.ndim - 1) and x.ndim and x.size and opset >= 13:
        e = _softmax_last_of_bytes(x, x_scale, x_zero_point)
        if e is not None:
            return _q(e, y_scale, y_zero_point, x.dtype)
    from .activation import _coerced_2d, _softmax

    v = _deq(x, x_scale, x_zero_point)
    # as Softmax of the matching opset: along one axis from 13, on the coerced 2-D view before
    y = _softmax(v, axis) if opset >= 13 else _coerced_2d(_softmax, v, axis)
    return _q(y, y_scale, y_zero_point, x.dtype)


def _softmax_last_of_bytes(x, x_scale, x_zero_point) -> np.ndarray | None:
    """Softmax over the last axis of the dequantized bytes x, as _softmax's unshifted path
    computes it to the bit, or None where that path does not apply. A byte has 256 values:
    its dequantized value and their exps are tabulated (the same float32 operations, value
    by value) and looked up, one pass where numpy's made four."""

    from .fused import table_lookup

    table, exps = _softmax_tables(x, x_scale, x_zero_point)  # (a constant scale: once)
    ends = np.array([np.minimum.reduce(x.reshape(-1)), np.maximum.reduce(x.reshape(-1))])
    if not np.maximum.reduce(table[ends.view(np.uint8)]) <= 60:  # (exp cannot overflow)
        return None
    e = table_lookup(np.ascontiguousarray(x), exps)
    total = np.matmul(e, np.ones(x.shape[-1], np.float32))
    if not np.minimum.reduce(total.reshape(-1)) >= 1e-30:
        return None
    e /= total[..., None]
    return e


#: QLinearConcat's per-input requantization tables, by the parameters' ids (see _binary_runs).
_concat_tables: dict = {}


def _requantization_tables(y_scale, y_zero_point, inputs) -> list | None:
    """Per 8-bit input, None where its scale and zero point are Y's, else the table of its
    requantization to Y (its 256 values by bit pattern, through the very _deq and _q the
    tensor would go through: elementwise, so table[x] gives their bits); kept per node's
    constant parameters. None when an input is not 8-bit."""
    if any(x.dtype not in native.BYTES for x in inputs[0::3]):
        return None
    params = (y_scale, y_zero_point, *inputs[1::3], *inputs[2::3])
    key = (len(inputs), *(x.dtype.char for x in inputs[0::3]), *map(id, params))
    hit = _concat_tables.get(key)
    if hit is not None and all(map(operator.is_, hit[0], params)):
        return hit[1]
    tables = []
    for x, scale, zero_point in zip(inputs[0::3], inputs[1::3], inputs[2::3]):
        if np.array_equal(scale, y_scale) and np.array_equal(zero_point, y_zero_point):
            tables.append(None)
            continue
        values = np.arange(256, dtype=np.uint8).view(x.dtype)
        tables.append(_q(_deq(values, scale, zero_point), y_scale, y_zero_point, x.dtype))
    if all(p is None or (isinstance(p, np.ndarray) and not p.flags.writeable) for p in params):
        if len(_concat_tables) >= _BINARY_RUNS:  # (sessions come and go)
            _concat_tables.clear()
        _concat_tables[key] = (params, tables)
    return tables


@op("QLinearConcat", since=1, domain=MS)
def q_linear_concat(y_scale, y_zero_point, *inputs, axis):
    """inputs are (tensor, scale, zero_point) triples, each requantized to Y's scale."""
    tables = _requantization_tables(y_scale, y_zero_point, inputs)
    if tables is not None:
        from .fused import table_lookup

        parts = [x if t is None else table_lookup(x, t) for x, t in zip(inputs[0::3], tables)]
        return np.concatenate(parts, axis=axis).astype(y_zero_point.dtype, copy=False)
    parts = []
    for x, scale, zero_point in zip(inputs[0::3], inputs[1::3], inputs[2::3]):
        same = np.array_equal(scale, y_scale) and np.array_equal(zero_point, y_zero_point)
        parts.append(x if same else _q(_deq(x, scale, zero_point), y_scale, y_zero_point, x.dtype))
    return np.concatenate(parts, axis=axis).astype(y_zero_point.dtype, copy=False)


#: The most elements of A a dynamically quantized product takes through float32 BLAS (where
#: that and the native int8 GEMM cross on one thread, measured on the zoo's transformer shapes).
_SMALL_PRODUCT = 4096


def _centered_weight(b, b_zero_point) -> tuple[np.ndarray, float] | None:
    """A constant 2-D B minus its zero point in float32 and the largest magnitude there, once
    per session; None for a B that is not a read-only 2-D 8-bit constant."""
    if b.flags.writeable or b.ndim != 2 or b.dtype not in (np.int8, np.uint8):
        return None

    def make():
        c = b.astype(np.float32)
        if b_zero_point is not None:
            c -= np.asarray(b_zero_point).astype(np.float32)
        return frozen(c), float(np.max(np.abs(c), initial=0.0))

    return derived(b, ("centered f32", value_key(b_zero_point)), make)


def _small_product(a_centered, a_size: int, b, b_zero_point, scale, bias):
    """(A - a_zp) @ (B - b_zp) * scale [+ bias] by float32 BLAS, or None: when K * 255 * |B - b_zp|
    stays within 2**24 every partial sum is an integer float32 holds exactly, so the product is
    the int32 accumulator's value, to the bit, in one GEMM. Only for a small A (``a_size``
    elements): there the native int8 GEMM's set-up costs more than the product; beyond, its
    one-pass quantization and byte GEMM win."""
    if a_size > _SMALL_PRODUCT:
        return None
    centered = _centered_weight(b, b_zero_point)
    if centered is None or b.shape[0] * 255 * centered[1] > 2**24:
        return None
    y = gemm_matmul(a_centered(), centered[0])
    y *= scale
    if bias is not None:
        y += upcast(np.asarray(bias))
    return y


def _small_integer_product(a, b, a_zero_point, b_zero_point) -> np.ndarray | None:
    """(A - a_zp) @ (B - b_zp) in int32 for a small 2-D A and a constant B, by float32 BLAS
    (exact: see _small_product), or None."""
    if a.ndim != 2 or a.dtype not in (np.int8, np.uint8) or np.size(a_zero_point) > 1:
        return None
    y = _small_product(lambda: _centered(a, a_zero_point), a.size, b, b_zero_point, 1, None)
    return None if y is None else y.astype(np.int32)


def _scale(a_scale, b_scale) -> np.ndarray:
    """a_scale * b_scale in float32 (onnxruntime's one multiplier of the accumulator)."""
    if np.result_type(a_scale) == np.float32 and np.result_type(b_scale) == np.float32:
        return np.multiply(a_scale, b_scale, dtype=np.float32)  # (the common case, one call)
    return (upcast(np.asarray(a_scale)).astype(np.float32) * upcast(np.asarray(b_scale))).astype(
        np.float32, copy=False
    )


@op("MatMulIntegerToFloat", since=1, domain=MS, threads="pool")
def matmul_integer_to_float(
    a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None
):
    """(A - a_zero_point) @ (B - b_zero_point) * (a_scale * b_scale) + bias: a dynamically
    quantized MatMul's MatMulInteger, Cast, scaling Mul and bias Add as one node (onnxruntime's
    fusion writes it). a_scale per tensor; b_scale and b_zero_point per tensor or per column
    ([N]); a_zero_point per tensor or per row; the output has the scales' type."""
    if np.size(a_scale) != 1:  # (one scale for A, as onnxruntime takes it)
        raise ValueError(f"a_scale must be one value (per tensor), got shape {np.shape(a_scale)}")
    scale = _scale(a_scale, b_scale)
    y = None
    if a.dtype in (np.int8, np.uint8) and np.size(a_zero_point) <= 1:
        y = _small_product(lambda: _centered(a, a_zero_point), a.size, b, b_zero_point, scale, bias)
    if y is None:
        acc = integer_matmul(a, b, a_zero_point, b_zero_point)
        if fits(acc.shape, scale.shape):  # (a cast, then in place: faster than a mixed multiply)
            y = acc.astype(np.float32)
            y *= scale
        else:
            y = np.multiply(acc, scale, dtype=np.float32)
        if bias is not None:
            y += upcast(np.asarray(bias))
    return y.astype(np.asarray(a_scale).dtype, copy=False)


def _dynamic_centered(a, scale, zero_point) -> np.ndarray:
    """DynamicQuantizeLinear(a) - its zero point in float32: clip(rint(a / scale), -zp, 255 - zp),
    which is the uint8 tensor's value less zp, exactly (small integers in float32)."""
    zp = float(zero_point)
    q = np.divide(a, scale)
    np.rint(q, out=q)
    np.maximum(q, -zp, out=q)  # (the ufuncs: np.clip's wrapper costs more than a small q)
    return np.minimum(q, 255.0 - zp, out=q)


def _native_dynamic_matmul(a, b, b_scale, b_zero_point, bias, with_relu=False):
    """DynamicQuantizeMatMul [then Relu] in one native call (native.DynamicMatMul), or None
    where it does not apply: float32 A, a constant 2-D 8-bit B, constant float32 scales, zero
    points and bias per tensor or per column."""
    dm = _kept_dynamic_matmul(a, b, b_scale, b_zero_point, bias, with_relu)
    if dm is None:
        return None
    K = a.shape[-1]
    if a.ndim == 2:  # (no reshapes: a few tenths of a microsecond of a small product's few)
        return dm(a if a.flags.c_contiguous else np.ascontiguousarray(a))
    x = a.reshape(-1, K)
    y = dm(x if x.flags.c_contiguous else np.ascontiguousarray(x))
    return None if y is None else y.reshape(a.shape[:-1] + (dm.N,))


def _kept_dynamic_matmul(a, b, b_scale, b_zero_point, bias, with_relu: bool):
    """native.DynamicMatMul's set-up, kept per weight and checked by the identity of the very
    parameter objects it was made for (held, so no id is reused); None for an A or parameters
    it does not take (A's rows another length than B's: the numpy path names the mismatch,
    where the native call would read past A's rows)."""
    K = a.shape[-1] if a.ndim else 0
    if a.dtype != np.float32 or a.size == 0 or b.ndim != 2 or b.shape[0] != K:
        return None
    if not native.int8_gemm_ok(K):
        return None
    kept = derived(b, ("dynamic matmul", with_relu), list)  # (b read-only, else a fresh list)
    for (held_scale, held_zero_point, held_bias), dm in kept:  # (one, mostly)
        if held_scale is b_scale and held_zero_point is b_zero_point and held_bias is bias:
            return dm
    if b.flags.writeable or not _dynamic_matmul_ok(b, b_scale, b_zero_point, bias):
        return None
    dm = native.DynamicMatMul(b, b_scale, b_zero_point, bias, with_relu)
    kept[:] = kept[-3:] + [((b_scale, b_zero_point, bias), dm)]
    return dm


def _dynamic_matmul_ok(b, b_scale, b_zero_point, bias) -> bool:
    """Whether native.DynamicMatMul takes these constant parameters of B (K x N)."""
    n = b.shape[1]
    constant = all(
        p is None or (isinstance(p, np.ndarray) and not p.flags.writeable)
        for p in (b_scale, b_zero_point, bias)
    )
    return (
        constant
        and b.dtype in native.BYTES
        and b_scale.dtype == np.float32
        and b_scale.ndim <= 1
        and b_scale.size in (1, n)
        and (
            b_zero_point is None
            or (
                b_zero_point.dtype == b.dtype
                and b_zero_point.ndim <= 1
                and b_zero_point.size in (1, n)
            )
        )
        and (bias is None or (bias.dtype == np.float32 and bias.shape == (n,)))
    )


def _bind_dynamic_matmul(with_relu: bool):
    """registry.binds' set-up of DynamicQuantizeMatMul[Relu] with constant parameters: the
    native set-up found once, each call the product of A's rows (a NaN or an infinity in A:
    the kernel as written, whose numpy paths decide those)."""

    def make(inputs, attrs, constant):
        a, b, b_scale, b_zero_point, bias = (tuple(inputs) + (None,) * 5)[:5]
        if not all(constant[1:]) or a.__class__ is not np.ndarray or b.__class__ is not np.ndarray:
            return None
        dm = _kept_dynamic_matmul(a, b, b_scale, b_zero_point, bias, with_relu)
        if dm is None:
            return None
        K = a.shape[-1]
        kernel = dynamic_quantize_matmul_relu if with_relu else dynamic_quantize_matmul
        rows, shape, flat = a.size // K, a.shape[:-1] + (dm.N,), a.ndim != 2

        def call(a, b, b_scale, b_zero_point=None, bias=None):
            x = a.reshape(rows, K) if flat else a
            y = dm(x if x.flags.c_contiguous else np.ascontiguousarray(x))
            if y is None:
                return kernel(a, b, b_scale, b_zero_point, bias)
            return y.reshape(shape) if flat else y

        call.held = dm
        return call

    return make


@binds(_bind_dynamic_matmul(with_relu=False))
@op("DynamicQuantizeMatMul", since=1, domain=MS, threads="pool")
def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None):
    """A quantized as DynamicQuantizeLinear does (uint8 per tensor), then MatMulIntegerToFloat
    with B: onnxruntime's fusion of a dynamically quantized MatMul."""
    y = _native_dynamic_matmul(a, b, b_scale, b_zero_point, bias)
    if y is not None:
        return y
    x = upcast(a).astype(np.float32, copy=False)
    a_scale, a_zero_point = dynamic_params(x)
    y = None
    if np.isfinite(a_scale):
        y = _small_product(
            lambda: _dynamic_centered(x, a_scale, a_zero_point),
            x.size,
            b,
            b_zero_point,
            _scale(a_scale, b_scale),
            bias,
        )
    if y is None:
        q = quantize_per_tensor(x, a_scale, a_zero_point, np.uint8) if x.ndim else None
        if q is None:  # (DynamicQuantizeLinear's other paths)
            q, a_scale, a_zero_point = dynamic_quantize_linear(x)
        y = matmul_integer_to_float(q, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
    return y.astype(a.dtype, copy=False)


@binds(_bind_dynamic_matmul(with_relu=True))
@op("DynamicQuantizeMatMulRelu", since=1, domain=ONYX_DOMAIN, threads="pool")
def dynamic_quantize_matmul_relu(a, b, b_scale, b_zero_point=None, bias=None):
    """Relu(DynamicQuantizeMatMul(...)): the native epilogue applies the Relu as it stores
    (optimizer/dynamic_quant.py fuses them; the Relu's bits, NaN and -0 kept)."""
    y = _native_dynamic_matmul(a, b, b_scale, b_zero_point, bias, with_relu=True)
    if y is not None:
        return y
    from .activation import relu

    return relu(dynamic_quantize_matmul(a, b, b_scale, b_zero_point, bias))


def _native_q_gemm(
    a,
    a_scale,
    a_zero_point,
    b,
    b_scale,
    b_zero_point,
    c,
    y_scale,
    y_zero_point,
    alpha,
    trans_a,
    trans_b,
) -> np.ndarray | None:
    """QGemm on the native int8 GEMM, its bias, scale and requantization (or float result) in
    the epilogue, to the numpy path's bits; None where that does not apply (a B of data, a
    per-row or 2-D C, ...). The set-up is kept per weight, checked by the identity of the very
    parameter objects it was made for (held, so no id is reused)."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in native.BYTES or b.dtype not in native.BYTES:
        return None
    params = (
        a_scale,
        a_zero_point,
        b_scale,
        b_zero_point,
        c,
        y_scale,
        y_zero_point,
        alpha,
        trans_a,
        trans_b,
    )
    kept = derived(b, ("qgemm",), list)  # (b read-only, else a fresh list)
    run = next((run for held, run in kept if all(map(operator.is_, held, params))), None)
    if run is not None:
        return run(a)
    run = _q_gemm_runner(a, *params[:7], b, trans_a, trans_b, alpha)
    if run is None:
        return None
    if all(p is None or not p.flags.writeable for p in params[:7] if not np.isscalar(p)):
        kept[:] = kept[-3:] + [(params, run)]
    return run(a)


def _q_gemm_runner(
    a,
    a_scale,
    a_zero_point,
    b_scale,
    b_zero_point,
    c,
    y_scale,
    y_zero_point,
    b,
    trans_a,
    trans_b,
    alpha,
):
    """a -> QGemm(a) on the native GEMM (see _native_q_gemm), or None."""
    K, N = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if (
        b.flags.writeable
        or not native.int8_gemm_ok(K)
        or (a.shape[0] if trans_a else a.shape[1]) != K
    ):
        return None
    if np.size(a_zero_point) > 1 or np.size(b_zero_point) not in (1, N):
        return None
    if c is not None and (c.dtype != np.int32 or c.shape != (N,)):
        return None
    za = 0 if a_zero_point is None else int(np.asarray(a_zero_point).reshape(-1)[0])
    zb = 0 if b_zero_point is None else b_zero_point
    packed = derived(
        b,
        ("qgemm packed", a.dtype.char, trans_b),
        lambda: native.pack(b.T if trans_b else b, a.dtype),
    )
    scale = np.float32(alpha) * np.float32(a_scale) * np.asarray(b_scale, dtype=np.float32)
    if y_scale is None:
        kind = {"scale": scale.reshape(-1), "float_out": True}
    else:
        kind = {"scale": (scale / np.float32(y_scale)).reshape(-1), "y_zero_point": y_zero_point}
    if kind["scale"].size not in (1, N):
        return None

    setups: dict = {}  # (a's shape and type, threads) -> the GEMM's kept set-up

    def run(a):
        rows = a.T if trans_a else a
        if rows.strides[1] != 1:  # (the kernel reads each row's bytes in a run)
            rows = np.ascontiguousarray(rows)
        key = (rows.shape, rows.dtype.char, native.thread_setting())
        call = setups.get(key)
        if call is None:
            call = native.int8_gemm_setup(rows, packed, za, zb, col_bias=c, **kind)
            if call is None:
                return native.int8_gemm(rows, packed, za, zb, col_bias=c, **kind)
            if len(setups) >= 4:  # (ever new shapes)
                setups.clear()
            setups[key] = call
        return call(rows)

    return run


def _bind_q_gemm(inputs, attrs, constant):
    """registry.binds for QGemm of a constant B and constant parameters: the native runner
    _native_q_gemm keeps for them (_q_gemm_runner), found once instead of by the identity
    of the parameter objects at every call. None (the kernel as written) elsewhere."""
    a, a_scale, a_zp, b, b_scale, b_zp, c, y_scale, y_zp = (tuple(inputs) + (None,) * 9)[:9]
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in native.BYTES or b.dtype not in native.BYTES:
        return None
    trans_a, trans_b = attrs["transA"], attrs["transB"]
    params = (a_scale, a_zp, b_scale, b_zp, c, y_scale, y_zp)
    run = _q_gemm_runner(a, *params, b, trans_a, trans_b, attrs["alpha"])
    if run is None:
        return None
    return lambda a, *rest: run(a)


@binds(_bind_q_gemm, constants=(1, 2, 3, 4, 5, 6, 7, 8))
@op("QGemm", since=1, domain=MS)
def q_gemm(
    a,
    a_scale,
    a_zero_point,
    b,
    b_scale,
    b_zero_point,
    c=None,
    y_scale=None,
    y_zero_point=None,
    *,
    alpha=1.0,
    transA=0,
    transB=0,
):
    """Y = alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C), C in int32 at that scale.

    b's scale and zero point may be per column ([N]). Without y_scale the output is float32.
    """
    y = _native_q_gemm(
        a,
        a_scale,
        a_zero_point,
        b,
        b_scale,
        b_zero_point,
        c,
        y_scale,
        y_zero_point,
        alpha,
        transA,
        transB,
    )
    if y is not None:
        return y
    a_ = a.T if transA else a
    b_ = b.T if transB else b
    if transB and not b.flags.writeable:  # a weight: one stable transposed copy per session,
        b_ = derived(b, ("transposed",), lambda: frozen(b.T.copy()))  # (its packing cached)
    acc = _small_integer_product(a_, b_, a_zero_point, b_zero_point)
    if acc is None:
        acc = integer_matmul(a_, b_, a_zero_point, b_zero_point)
    if c is not None:
        acc = acc + c.astype(np.int32)
    scale = np.float32(alpha) * np.float32(a_scale) * np.asarray(b_scale, dtype=np.float32)
    if y_scale is None:
        return acc.astype(np.float32) * scale
    multiplier = scale / np.float32(y_scale)
    return saturate_cast(acc.astype(np.float32) * multiplier, y_zero_point, y_zero_point.dtype)
