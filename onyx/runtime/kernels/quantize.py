"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul.

Granularity follows the scale's shape: a scalar (per tensor), a 1-D tensor along `axis` (per
axis), or the input's rank with `axis` divided into blocks of `block_size` (blocked).
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import to_numpy
from .. import native
from ..registry import binds, op
from .cast import _to_wide, cast_numeric
from .low_floats import fits, upcast
from .quantized_matmul import integer_matmul, native_matmul, packed_operand

#: float8e8m0's numpy name (ml_dtypes'): compared by name, so that the quantization kernels do
#: not import ml_dtypes (milliseconds of a cold start) for models without its types.
_E8M0 = "float8_e8m0fnu"


def _is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2")


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
    else:  # (a sub-byte integer: ml_dtypes is imported, its type is in use)
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def _wide(x: np.ndarray) -> np.ndarray:
    """Integers as int64 (no overflow when subtracting zero points), floats in float32 or wider."""
    x = _to_wide(np.asarray(x))
    return x.astype(np.int64) if x.dtype.kind in "iu" else x


def expand_param(p: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """A scale / zero point laid out so that it broadcasts against an input of `shape`."""
    p = np.asarray(p)
    ndim = len(shape)
    axis = axis + ndim if axis < 0 else axis
    if p.ndim == 0 or (p.size == 1 and block_size <= 0):
        return p.reshape(())
    if block_size > 0:  # blocked: each entry covers block_size consecutive elements along axis
        return np.take(np.repeat(p, block_size, axis=axis), np.arange(shape[axis]), axis=axis)
    if p.ndim == 1:
        return p.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))
    return p


def saturate_cast(
    values: np.ndarray, zero_point, dtype: np.dtype, saturate: int = 1, *, owned: bool = False
):
    """values (already divided by the scale) + zero point, into `dtype`; ``owned``: values is
    a fresh array the function may round in place.

    Integers: round half to even, add the zero point, clamp to the type's range.
    Floats (float8, float4, float6): add the zero point and convert, saturating if asked.
    """
    dtype = np.dtype(dtype)
    if _is_integer(dtype):
        lo, hi = _int_range(dtype)
        v = upcast(np.asarray(values))
        if v.dtype == np.float32 and hi - lo < 2**17:
            # float32 is exact here: rint gives an integer; adding a zero point of the type
            # stays exact below 2**24, and anything beyond saturates to lo or hi either way
            fresh = owned and v is values and v.ndim > 0
            q = np.rint(v, out=v if fresh else np.empty(v.shape, np.float32))  # (0-d: an array)
            if zero_point is not None:
                q += np.asarray(zero_point).astype(np.float32)
            np.clip(q, lo, hi, out=q)
            return q.astype(dtype) if dtype.kind in "iu" else q.astype(np.int8).astype(dtype)
        q = np.rint(v).astype(np.float64)
        if zero_point is not None:
            q = q + _wide(zero_point).astype(np.float64)
        return np.asarray(np.clip(q, lo, hi)).astype(np.int64).astype(dtype)
    v = upcast(values)
    if zero_point is not None:
        v = v + upcast(np.asarray(zero_point)).astype(v.dtype)
    return cast_numeric(np.asarray(v), dtype, bool(saturate))


_F32 = np.dtype(np.float32)
#: 8/16-bit integer outputs (numpy types) -> their range: the per-tensor float32 fast path.
_FAST_RANGES = {
    np.dtype(t): _int_range(np.dtype(t)) for t in (np.uint8, np.int8, np.uint16, np.int16)
}


def _per_tensor(scale: np.ndarray, zero_point) -> bool:
    """One float32 scale and one zero point: the hot QDQ case, on float32 activations."""
    return scale.dtype == _F32 and scale.size == 1 and (zero_point is None or zero_point.size == 1)


def quantize_per_tensor(x, scale, zero_point, dtype) -> np.ndarray | None:
    """QuantizeLinear of float32 x with one float32 scale and zero point (or none) to an 8 or
    16-bit integer dtype: the native pass, or numpy's four; None where that does not apply
    (QuantizeLinear, DynamicQuantizeLinear and the contrib ops' requantization share it)."""
    scale = np.asarray(scale)
    zero_point = None if zero_point is None else np.asarray(zero_point)
    dtype = np.dtype(dtype)
    if not (
        x.dtype == _F32 and x.ndim and dtype in _FAST_RANGES and _per_tensor(scale, zero_point)
    ):
        return None
    return _quantize_per_tensor(x, scale, zero_point, dtype)


def _quantize_per_tensor(x, scale, zero_point, dtype: np.dtype) -> np.ndarray:
    """round_half_even(x / scale) + zero_point, clipped, as dtype: four passes, one float32
    temporary. Exact: clipping the rounded value to [lo - zp, hi - zp] before adding zp is the
    same as clipping after, since all are small integers in float32; the add writes dtype."""
    lo, hi = _FAST_RANGES[dtype]
    zp = 0 if zero_point is None else int(zero_point.reshape(-1)[0])
    if x.dtype == _F32 and not x.flags.c_contiguous:  # (a transposed view: a copy and one
        x = np.ascontiguousarray(x)  # pass beat numpy's four strided ones 6 to 1)
    y = native.quantize_f32(x, scale.reshape(()), zp, dtype)  # (one pass, the same bits)
    if y is not None:
        return y
    q = np.divide(x, scale.reshape(()))
    np.rint(q, out=q)
    np.clip(q, lo - zp, hi - zp, out=q)
    return np.add(q, np.float32(zp), out=np.empty(q.shape, dtype), casting="unsafe")


#: Native per-tensor (de)quantization set-ups of nodes' constant parameters, by direction,
#: input shape and type, output type and the parameters' ids; each entry holds its parameter
#: objects (so no id is reused while it lives) and is taken only for the very objects passed.
_passes: dict = {}
_PASSES = 1024


def _kept_pass(quantize: bool, x, scale, zero_point, dtype):
    """The kept native pass's result for these constants (a QDQ model's hot nodes: their
    Python set-up cost more than a small tensor's pass), or None."""
    hit = _passes.get((quantize, x.shape, x.dtype.char, dtype, id(scale), id(zero_point)))
    if hit is None or hit[0] is not scale or hit[1] is not zero_point:
        return None
    return hit[2](x) if x.flags.c_contiguous else None


def _keep_pass(quantize: bool, x, scale, zero_point, dtype) -> None:
    """Keeps a native pass for the next call with these constant parameters, where the
    per-tensor native path applies (the same kernel, so the same bits)."""
    constant = lambda v: isinstance(v, np.ndarray) and not v.flags.writeable  # noqa: E731
    if not (constant(scale) and (zero_point is None or constant(zero_point))):
        return
    byte = np.dtype(dtype) if quantize else x.dtype
    if (
        (x.dtype != _F32 if quantize else x.dtype not in native.BYTES)
        or byte not in native.BYTES
        or not x.ndim
        or not x.flags.c_contiguous
        or not _per_tensor(scale, zero_point)
    ):
        return
    zp = 0 if zero_point is None else int(zero_point.reshape(-1)[0])
    run = native.per_tensor_setup(quantize, x.shape, np.float32(scale.reshape(-1)[0]), zp, byte)
    if run is not None:
        if len(_passes) >= _PASSES:  # (sessions come and go)
            _passes.clear()
        key = (quantize, x.shape, x.dtype.char, dtype, id(scale), id(zero_point))
        _passes[key] = (scale, zero_point, run)


def quantize(x, y_scale, y_zero_point, *, axis=1, block_size=0, dtype, saturate=1, precision=0):
    if not precision:
        y = _kept_pass(True, x, y_scale, y_zero_point, dtype)
        if y is not None:
            return y
    y = None if precision else quantize_per_tensor(x, y_scale, y_zero_point, dtype)
    if y is not None:
        _keep_pass(True, x, y_scale, y_zero_point, dtype)
        return y
    compute = to_numpy(precision) if precision else y_scale.dtype
    if compute.kind in "iu":  # an integer scale: divide in double
        compute = np.dtype(np.float64)
    elif compute.name == _E8M0:
        compute = np.dtype(np.float32)
    scale = expand_param(y_scale, x.shape, axis, block_size).astype(compute)
    zp = None
    if y_zero_point is not None:
        zp = expand_param(y_zero_point, x.shape, axis, block_size)
    scaled = np.divide(x.astype(compute, copy=False), scale)
    return saturate_cast(scaled, zp, dtype, saturate, owned=True)


def dequantize(x, x_scale, x_zero_point, *, axis=1, block_size=0, dtype=None):
    """(x - zero_point) * scale, multiplied in the output type's precision."""
    if dtype is None:
        dtype = x_scale.dtype if x_scale.dtype.name != _E8M0 else np.dtype(np.float32)
    if dtype == _F32 and x.dtype in _FAST_RANGES and x.ndim and _per_tensor(x_scale, x_zero_point):
        if not x.flags.c_contiguous and x.dtype.itemsize == 1:
            x = native.contiguous_bytes(x)  # (the NCHW view that ends a channels-last chain)
        y = _kept_pass(False, x, x_scale, x_zero_point, dtype)
        if y is not None:
            return y
        y = _dequantize_per_tensor(x, x_scale, x_zero_point)
        _keep_pass(False, x, x_scale, x_zero_point, dtype)
        return y
    scale = expand_param(x_scale, x.shape, axis, block_size)
    zp = None if x_zero_point is None else expand_param(x_zero_point, x.shape, axis, block_size)
    if dtype == np.float32 and x.dtype.kind in "iu" and x.dtype.itemsize <= 2:
        # small integers and their differences are exact in float32: one rounding, the product
        y = x.astype(np.float32)
        if zp is not None:
            y -= zp.astype(np.float32)
        y *= scale.astype(np.float32)
        return y
    diff = _wide(x)
    if zp is not None:
        diff = diff - _wide(zp)
    # both factors rounded to the output type, their product computed exactly, then rounded
    product = upcast(diff.astype(dtype)) * upcast(scale.astype(dtype))
    return np.asarray(product).astype(dtype, copy=False)


def _dequantize_per_tensor(x, scale, zero_point) -> np.ndarray:
    """(x - zero_point) * scale in float32, in place in the converted copy (exact difference,
    one rounding); 8-bit x in one native pass."""
    if x.dtype.itemsize == 1:
        zp = 0 if zero_point is None else int(zero_point.reshape(-1)[0])
        # (a transposed view, as attention's q/k/v split makes: the byte copy is cheap)
        x8 = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        y = native.dequantize_8(x8, np.float32(scale.reshape(-1)[0]), zp)
        if y is not None:
            return y
    y = x.astype(np.float32)
    if zero_point is not None:
        y -= int(zero_point.reshape(-1)[0])
    y *= scale.reshape(())
    return y


def _output_dtype(zero_point, output_dtype: int, default=np.uint8) -> np.dtype:
    if zero_point is not None:
        return zero_point.dtype
    return to_numpy(output_dtype) if output_dtype else np.dtype(default)


def _bind_per_tensor(quantize: bool):
    """registry.binds for QuantizeLinear (``quantize``) / DequantizeLinear of one float32
    scale and zero point (constants) between float32 and 8-bit tensors: the native pass
    set up once for the input's shape (per_tensor_setup, the very pass the kernel keeps
    after its first call: the same bits), without the kernel's look-up of it by the
    parameters' ids and its checks, which cost a small tensor's call more than its pass.
    None (the kernel as written) elsewhere."""

    def make(inputs, attrs, constant):
        x, scale, zero_point = (tuple(inputs) + (None, None))[:3]
        if attrs.get("block_size", 0) or attrs.get("precision", 0) or not x.ndim:
            return None
        if not (isinstance(scale, np.ndarray) and _per_tensor(scale, zero_point)):
            return None
        if quantize:
            byte, out = _output_dtype(zero_point, attrs.get("output_dtype", 0)), None
            if x.dtype != _F32:
                return None
        else:
            byte, out = x.dtype, attrs.get("output_dtype", 0)
            if out and to_numpy(out) != _F32:
                return None
        if byte not in native.BYTES or (zero_point is not None and zero_point.dtype != byte):
            return None
        zp = 0 if zero_point is None else int(zero_point.reshape(-1)[0])
        run = native.per_tensor_setup(quantize, x.shape, np.float32(scale.reshape(-1)[0]), zp, byte)
        if run is None:
            return None
        # (a transposed view: quantized as the kernel does, after a contiguous copy)
        contiguous = np.ascontiguousarray if quantize else native.contiguous_bytes

        def call(x, scale=None, zero_point=None):
            return run(x if x.flags.c_contiguous else contiguous(x))

        return call

    return make


@binds(_bind_per_tensor(quantize=True), constants=(1, 2))
@op("QuantizeLinear", since=10, elementwise=True)
def quantize_linear_10(x, y_scale, y_zero_point=None):
    return quantize(x, y_scale, y_zero_point, dtype=_output_dtype(y_zero_point, 0))


@binds(_bind_per_tensor(quantize=True), constants=(1, 2))
@op("QuantizeLinear", since=13)
def quantize_linear(
    x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0
):
    dtype = _output_dtype(y_zero_point, output_dtype)
    return quantize(
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        block_size=block_size,
        dtype=dtype,
        saturate=saturate,
        precision=precision,
    )


@binds(_bind_per_tensor(quantize=False), constants=(1, 2))
@op("DequantizeLinear", since=10, elementwise=True)
def dequantize_linear_10(x, x_scale, x_zero_point=None):
    return dequantize(x, x_scale, x_zero_point)


@binds(_bind_per_tensor(quantize=False), constants=(1, 2))
@op("DequantizeLinear", since=13)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    dtype = to_numpy(output_dtype) if output_dtype else None
    return dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size, dtype=dtype)


def dynamic_params(x: np.ndarray) -> tuple[np.float32, np.ndarray]:
    """DynamicQuantizeLinear's scale and (uint8) zero point for float32 x."""
    flat = x.reshape(-1)  # (the ufuncs' reduce: np.min's wrapper costs more than a small x's scan)
    lo = np.float32(np.minimum.reduce(flat, initial=0.0))  # (the range always holds 0)
    hi = np.float32(np.maximum.reduce(flat, initial=0.0))
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:  # all-zero input: undefined in the spec; onnxruntime reports a scale of 1
        scale = np.float32(1)
    zp = float(-lo / scale)  # (float32 arithmetic, then exact)
    if math.isfinite(zp):  # round() rounds half to even, as rint: a small tensor's numpy
        # scalar calls (saturate_cast on a 0-d array) had cost as much as quantizing it
        return scale, np.array(min(max(round(zp), 0), 255), np.uint8)
    return scale, saturate_cast(np.asarray(-lo / scale), None, np.uint8)


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x):
    x = x.astype(np.float32, copy=False)
    if x.ndim and x.size and x.flags.c_contiguous:  # one native call: range, then quantize
        hit = native.dynamic_quantize(x)
        if hit is not None:
            return hit
    scale, zero_point = dynamic_params(x)
    y = quantize_per_tensor(x, np.float32(scale), zero_point, np.uint8)
    if y is None:  # (0-d x)
        y = saturate_cast(x / scale, zero_point, np.uint8, owned=True)
    return y, np.asarray(scale, dtype=np.float32), zero_point


def _requant_multiplier(a_scale, b_scale, y_scale) -> np.ndarray:
    """a_scale * b_scale / y_scale in float32 (as onnxruntime); a per-row a_scale as (M, 1)."""
    a_s = upcast(np.asarray(a_scale)).astype(np.float32)
    if a_s.ndim == 1 and a_s.size > 1:
        a_s = a_s.reshape(-1, 1)
    multiplier = a_s * upcast(np.asarray(b_scale)).astype(np.float32)
    return multiplier / upcast(np.asarray(y_scale)).astype(np.float32)


def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """Integer (or float8) matmul of the zero-point-shifted inputs, requantized to y's type.

    As onnxruntime: one float32 multiplier a_scale * b_scale / y_scale applied to the exact
    accumulator. a's scale / zero point may be per row ([M]), b's per column ([N]).
    """
    multiplier = _requant_multiplier(a_scale, b_scale, y_scale)
    if _is_integer(a.dtype) and _is_integer(b.dtype):
        y = native_matmul(a, b, a_zero_point, b_zero_point, multiplier, y_zero_point)
        if y is not None:
            return y
        acc = integer_matmul(_to_wide(a), _to_wide(b), a_zero_point, b_zero_point, True)
    else:
        a_f = upcast(a).astype(np.float32) - upcast(np.asarray(a_zero_point)).astype(np.float32)
        b_f = upcast(b).astype(np.float32) - upcast(np.asarray(b_zero_point)).astype(np.float32)
        acc = np.matmul(a_f, b_f)
    acc = acc.astype(np.float32, copy=False)  # (int32 accumulators to float32, as onnxruntime)
    if acc.ndim and fits(acc.shape, multiplier.shape):
        acc *= multiplier  # a fresh array: scaled and requantized in place
    else:
        acc = acc * multiplier
    return saturate_cast(acc, y_zero_point, y_zero_point.dtype, owned=True)


def _bind_qlinear_matmul(inputs, attrs, constant):
    """registry.binds for QLinearMatMul of 8-bit operands with constant scales and zero
    points (one each for A and Y; B's per tensor or per column): the path native_matmul
    takes, set up once. A constant 2-D B: the int8 GEMM's set-up for A's rows
    (int8_gemm_setup: the packed B, the epilogue's corrections and requantization, the work
    split), unless B's zero point is not 0; a B of data with batch dimensions (attention's
    products): batched_int8_gemm with the requantization multiplier made once. The same
    kernels on the same values, so the same bits; None (the kernel as written) elsewhere."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    if any(v is None for v in inputs) or np.size(a_scale) != 1 or np.size(a_zp) != 1:
        return None
    if a.dtype not in native.BYTES or b.dtype not in native.BYTES or y_zp.dtype not in native.BYTES:
        return None
    if min(a.ndim, b.ndim) < 2 or not native.int8_gemm_ok(a.shape[-1]) or not a.size:
        return None
    K, N = b.shape[-2:]
    multiplier = _requant_multiplier(a_scale, b_scale, y_scale)
    if np.size(b_zp) not in (1, N) or not (multiplier.size == 1 or multiplier.shape == (N,)):
        return None
    if b.ndim == 2 and constant[3]:
        rows = a.reshape(-1, K)
        packed = packed_operand(b, a.dtype, a_zp)
        run = native.int8_gemm_setup(
            np.ascontiguousarray(rows), packed, a_zp, b_zp, scale=multiplier, y_zero_point=y_zp
        )
        if run is None:
            return None
        shape = a.shape[:-1] + (N,)

        def product(a, *params):
            return run(np.ascontiguousarray(a.reshape(rows.shape))).reshape(shape)

        return native.under_setting(product, q_linear_mat_mul, {})
    if b.ndim > 2 and np.size(b_zp) == 1 and multiplier.size == 1:
        za, zb = int(a_zp.reshape(-1)[0]), int(b_zp.reshape(-1)[0])
        return lambda a, a_s, a_z, b, *rest: native.batched_int8_gemm(
            a, b, za, zb, scale=multiplier, y_zero_point=y_zp
        )
    return None


@binds(_bind_qlinear_matmul, constants=(1, 2, 4, 5, 6, 7))
@op("QLinearMatMul", since=10, threads="pool")
def q_linear_mat_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    return qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
