"""One-pass elementwise kernels (elementwise.c): erf / GELU, HardSigmoid, HardSwish, byte
lookups, QLinearAdd / QLinearMul, QuantizeLinear and DequantizeLinear, each to the numpy
kernel's bits."""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_BYTES,
    _PARALLEL_ELEMENTS,
    BYTES,
    _addr,
    _element_cuts,
    _input_addr,
    _run,
    _ways,
    abi,
    address,
    range_of,
)


@abi("lookup_task")
class _LookupTask(ctypes.Structure):
    _fields_ = [("fn", _P), ("x", _P), ("table", _P), ("size", _I64), ("y", _P)]


@abi("qbinary")
class _QBinary(ctypes.Structure):
    _fields_ = [(name, ctypes.c_float) for name in ("za", "zb", "ka", "kb", "zy")] + [
        (name, ctypes.c_int32) for name in ("is_signed", "multiply", "lo", "hi")
    ]


@abi("qbinary_task")
class _QBinaryTask(ctypes.Structure):
    _fields_ = [
        ("a", _P),
        ("b", _P),
        ("inner", _I64),
        ("mid", _I64),
        ("bn", _I64),
        ("p", _P),
        ("y", _P),
    ]


@abi("quantize_task")
class _QuantizeTask(ctypes.Structure):
    _fields_ = [
        ("x", _P),
        ("scale", ctypes.c_float),
        ("zero_point", ctypes.c_int32),
        ("is_signed", ctypes.c_int32),
        ("y", _P),
    ]


@abi("unary_task")
class _UnaryTask(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P)]


@abi("erf_task")
class _ErfTask(ctypes.Structure):
    _fields_ = [
        ("x", _P),
        ("y", _P),
        ("scale", ctypes.c_float),
        ("p", ctypes.c_float * 7),
        ("q", ctypes.c_float * 6),
        ("gelu", ctypes.c_int32),
        ("bias", _P),
        ("width", _I64),
    ]


#: (p, q, their ctypes copies) of the last coefficients passed (the module's constants every
#: call: converted once)
_coefficients: list = [None, None, None, None]


def _erf_coefficients(p, q) -> tuple:
    if _coefficients[0] is not p or _coefficients[1] is not q:
        _coefficients[:] = [
            p,
            q,
            (ctypes.c_float * 7)(*map(float, p)),
            (ctypes.c_float * 6)(*map(float, q)),
        ]
    return _coefficients[2], _coefficients[3]


def erf_f32(x: np.ndarray, y: np.ndarray, scale, gelu: bool, p, q) -> bool:
    """erf(scale * x), or GELU's x * (0.5 + 0.5 * erf(scale * x)), of contiguous float32 x
    into y (x itself allowed) as elementwise.erf32 computes it, P (7) and Q (6) its float32
    coefficients; False (nothing done) without the library."""
    ok = (
        core.lib is not None
        and x.dtype == y.dtype == np.float32
        and x.flags.c_contiguous
        and y.flags.c_contiguous
        and x.size == y.size
    )
    if not ok:
        return False
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS // 8)  # (some 30 operations a value)
    task = _ErfTask(_addr(x), _addr(y), float(scale), *_erf_coefficients(p, q), int(gelu))
    _run(core.lib.erf_range, task, _element_cuts(n, 16, ways), ways)
    return True


#: BiasGelu's set-up for a constant bias, by (x's shape, the bias's and coefficients' ids, the
#: scale, the thread setting): the bias and coefficients (held: no reused id, compared by
#: identity), the task with the bias's address, the thread split. A new shape or bias is a new
#: key, checked anew.
_GELU_SETUPS: dict[tuple, tuple] = {}


def bias_gelu_f32(x: np.ndarray, bias: np.ndarray, scale, p, q) -> np.ndarray | None:
    """BiasGelu's (x + bias) * (0.5 + 0.5 * erf(scale * (x + bias))) of contiguous float32 x,
    bias [x's last dimension], in one pass: a fresh array of the add then erf_f32's bits, or
    None where it does not apply."""
    lib = core.lib
    if lib is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    key = (x.shape, id(bias), id(p), id(q), scale, core.thread_setting())
    setup = _GELU_SETUPS.get(key)
    if setup is None or setup[0] is not bias or setup[1] is not p or setup[2] is not q:
        setup = _bias_gelu_setup(x, bias, scale, p, q)
        if setup is None:
            return None
        if type(bias) is np.ndarray and not bias.flags.writeable:  # (a constant: kept)
            if len(_GELU_SETUPS) >= 64:  # (a bound: a model fed ever new shapes)
                _GELU_SETUPS.clear()
            _GELU_SETUPS[key] = setup
    template, cuts_at, parts, ways = setup[3:7]
    y = np.empty(x.shape, np.float32)
    task = _ErfTask.from_buffer_copy(template)
    task.x, task.y = _addr(x), _addr(y)
    status = lib.onyx_parallel(lib.erf_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "kernel")
    return y


def _bias_gelu_setup(x: np.ndarray, bias, scale, p, q) -> tuple | None:
    """bias_gelu_f32's checks and the task's parts that stay from call to call, or None."""
    if bias.dtype != np.float32 or not x.ndim:
        return None
    width = x.shape[-1]
    if bias.shape != (width,) or not width:
        return None
    held = np.ascontiguousarray(bias)  # (a copy only when strided: then held for its address)
    rows = x.size // width
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS // 8)
    cuts = _element_cuts(rows, 1, ways)
    template = _ErfTask(None, None, float(scale), *_erf_coefficients(p, q), 1, _addr(held), width)
    # (cuts held: the lru cache that made them may let them go)
    return (bias, p, q, template, _addr(cuts), len(cuts) - 1, ways, cuts, held)


@abi("hard_sigmoid_task")
class _HardSigmoidTask(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


def hard_sigmoid_f32(x: np.ndarray, alpha: float, beta: float) -> np.ndarray | None:
    """HardSigmoid of a contiguous float32 array in one pass (clamp(x * alpha + beta, 0, 1),
    alpha and beta rounded to float32 as numpy rounds a Python float), or None without the
    library."""
    return _hard_sigmoid_pass(x, alpha, beta, "hard_sigmoid_range")


def hard_sigmoid_mul_f32(x: np.ndarray, alpha: float, beta: float) -> np.ndarray | None:
    """x * HardSigmoid(x) of a contiguous float32 array in one pass, to the bits of the two
    numpy kernels (alpha and beta rounded as hard_sigmoid_f32 rounds them), or None without
    the library."""
    return _hard_sigmoid_pass(x, alpha, beta, "hard_sigmoid_mul_range")


def _hard_sigmoid_pass(x: np.ndarray, alpha: float, beta: float, entry: str):
    """One pass of the library's ``entry`` (a range function over hard_sigmoid_task) on x."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    y = np.empty_like(x)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS)
    task = _HardSigmoidTask(_addr(x), _addr(y), float(alpha), float(beta))
    _run(getattr(core.lib, entry), task, _element_cuts(n, 16, ways), ways)
    return y


def hardswish_f32(x: np.ndarray) -> np.ndarray | None:
    """HardSwish of a contiguous float32 array in one pass, or None without the library."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    y = np.empty_like(x)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS)
    cuts = _element_cuts(n, 16, ways)
    _run(core.lib.hardswish_range, _UnaryTask(_addr(x), _addr(y)), cuts, ways)
    return y


def lookup8(x: np.ndarray, table: np.ndarray) -> np.ndarray | None:
    """table[x] for a contiguous byte tensor x (int8 by its bit pattern: table[128:] holds the
    values of -128..-1) and a 256-entry table of 1, 2, 4 or 8-byte items; None without the
    library."""
    if core.lib is None or x.dtype not in BYTES or not x.flags.c_contiguous:
        return None
    table = np.ascontiguousarray(table)
    if table.shape != (256,) or table.itemsize not in (1, 2, 4, 8):
        return None
    y = np.empty(x.shape, table.dtype)
    n = x.size
    ways = _ways(n, 64, _PARALLEL_ELEMENTS * 4)  # (a byte per element: 4x HardSwish's speed)
    if ways == 1:  # the lookup itself: the pool's dispatch cost more than a small tensor's pass
        core.lib.lookup_direct(_addr(x), _addr(table), table.itemsize, _addr(y), n)
        return y
    cuts = _element_cuts(n, 64, ways)
    task = _LookupTask(core.lib.lookup, _addr(x), _addr(table), table.itemsize, _addr(y))
    _run(core.lib.lookup_range, task, cuts, ways)
    return y


def lookup8_channels(x: np.ndarray, table: np.ndarray, axis: int) -> np.ndarray | None:
    """table[c, x] for a contiguous byte tensor x whose axis ``axis`` holds the channels c and
    a (C, 256) table of 1, 2, 4 or 8-byte items in x's bit-pattern order (int8 -1 reads entry
    255); None without the library."""
    if x.dtype not in BYTES or not x.flags.c_contiguous:
        return None
    run = lookup8_channels_setup(x.shape, table, axis)
    return None if run is None else run(x)


def lookup8_channels_setup(shape: tuple, table: np.ndarray, axis: int):
    """:func:`lookup8_channels` for contiguous byte tensors of ``shape``, set up once:
    ``run(x) -> y``; None without the library or for a table that does not fit."""
    if core.lib is None or not 0 <= axis < len(shape):
        return None
    size = shape[axis]
    if table.shape != (size, 256) or table.itemsize not in (1, 2, 4, 8):
        return None
    table = np.ascontiguousarray(table)
    dtype, item, at = table.dtype, table.itemsize, _addr(table)
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])

    def run(x):
        y = np.empty(shape, dtype)
        core.lib.onyx_lookup8_channels(
            core.lib.lookup, _addr(x), at, item, _addr(y), outer, size, inner
        )
        return y

    run.table = table  # (held: its address stays valid)
    return run


@functools.lru_cache(maxsize=4096)
def _qbinary_params(
    za: float, zb: float, ka: float, kb: float, zy: float, dtype: np.dtype, multiply: bool
) -> _QBinary:
    """A node's QLinearAdd / QLinearMul constants as the kernel takes them (kept per node)."""
    info = np.iinfo(dtype)
    return _QBinary(za, zb, ka, kb, zy, int(dtype == np.int8), int(multiply), info.min, info.max)


def _walk(a_shape: tuple, b_shape: tuple) -> tuple[int, int] | None:
    """How b broadcasts over a as qbinary's kernel walks it: (inner, mid) when a reads as
    (outer, mid, inner) and b as (outer, 1, inner), b's outer index cycling (its leading
    axes of 1); None when b is larger than a along some axis, or broadcast along two runs
    of a's axes."""
    if len(b_shape) > len(a_shape):
        return None
    pairs = [
        (n, m)
        for n, m in zip(a_shape, (1,) * (len(a_shape) - len(b_shape)) + b_shape)
        if n != 1 or m != 1
    ]
    if any(m not in (1, n) for n, m in pairs):
        return None
    # from the last axis: b's axes equal to a's (inner), then broadcast (mid), then equal
    # (outer), then broadcast (cycled)
    runs = [1, 1]
    phase = 0
    for n, m in reversed(pairs):
        state = 0 if m == n else 1  # (n == 1 == m cannot occur)
        while phase < 4 and state != phase % 2:
            phase += 1
        if phase == 4:
            return None
        if phase < 2:
            runs[phase] *= n
    return runs[0], runs[1]


def qlinear_binary(a: np.ndarray, b: np.ndarray, za, zb, ka, kb, zy, multiply: bool):
    """QLinearAdd (``ka`` (a - za) + ``kb`` (b - zb)) or QLinearMul (``ka`` (a - za)(b - zb)),
    requantized to a's type with zero point zy, in the float32 operations and order of the
    numpy kernels (contrib.py), to the bit; None where it does not apply: a and b contiguous
    bytes of one type, b as large as a or broadcast over it as _walk says (a bias, a mask, a
    channel's scale), either way round."""
    run = qlinear_binary_setup(a, b, za, zb, ka, kb, zy, multiply)
    return None if run is None else run(a, b)


def qlinear_binary_setup(a: np.ndarray, b: np.ndarray, za, zb, ka, kb, zy, multiply: bool):
    """:func:`qlinear_binary`'s set-up for operands like a and b (shapes, type): ``run(a, b)``
    computes it for contiguous a, b of those; None where it does not apply."""
    if (
        core.lib is None
        or a.dtype != b.dtype
        or a.dtype not in BYTES
        or not (a.flags.c_contiguous and b.flags.c_contiguous)
    ):
        return None
    swap = b.size > a.size  # (both operations commute: the smaller goes second)
    if swap:
        a, b, za, zb, ka, kb = b, a, zb, za, kb, ka
    walk = _walk(a.shape, b.shape)
    if walk is None:
        return None
    p = _qbinary_params(
        float(np.float32(za)),
        float(np.float32(zb)),
        float(ka),
        float(kb),
        float(np.float32(zy)),
        a.dtype,
        bool(multiply),
    )
    shape, dtype, n = a.shape, a.dtype, a.size
    ways = _ways(n, 64, _PARALLEL_BYTES)
    cuts = _element_cuts(n, 64, ways)
    template = _QBinaryTask(None, None, *walk, max(b.size, 1), ctypes.addressof(p), None)
    part = core.lib.qbinary_range

    def run(a, b, _keep=p):
        if swap:
            a, b = b, a
        y = np.empty(shape, dtype)
        task = _QBinaryTask.from_buffer_copy(template)
        task.a, task.b, task.y = _addr(a), _addr(b), _addr(y)
        _run(part, task, cuts, ways)
        return y

    return run


def dequantize_8(x: np.ndarray, scale, zero_point: int) -> np.ndarray | None:
    """DequantizeLinear of contiguous uint8 / int8 x per tensor to float32 in one pass, to the
    numpy kernel's bits (quantize.py); None without the library."""
    if core.lib is None or x.dtype not in BYTES or not x.flags.c_contiguous:
        return None
    y = np.empty(x.shape, np.float32)
    return _per_tensor_pass(core.lib.dequantize_range, x, y, scale, zero_point, x.dtype)


def quantize_f32(x: np.ndarray, scale, zero_point: int, dtype) -> np.ndarray | None:
    """QuantizeLinear of contiguous float32 x per tensor to uint8 / int8 in one pass, as the
    numpy kernel rounds (quantize.py); None without the library."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or dtype not in BYTES:
        return None
    y = np.empty(x.shape, dtype)
    return _per_tensor_pass(core.lib.quantize_range, x, y, scale, zero_point, dtype)


def per_tensor_setup(quantize: bool, shape: tuple, scale, zero_point: int, byte_type):
    """QuantizeLinear (float32 -> byte_type) or DequantizeLinear (byte_type -> float32) per
    tensor of contiguous tensors of ``shape``, set up once: ``run(x) -> y`` to the bits of
    :func:`quantize_f32` / :func:`dequantize_8`; None without the library."""
    if core.lib is None or np.dtype(byte_type) not in BYTES:
        return None
    n = math.prod(shape)
    ways = _ways(n, 64, _PARALLEL_BYTES)
    cuts = _element_cuts(n, 64, ways)
    part = core.lib.quantize_range if quantize else core.lib.dequantize_range
    template = _QuantizeTask(
        None, float(scale), int(zero_point), int(np.dtype(byte_type) == np.int8), None
    )
    y_dtype = np.dtype(byte_type) if quantize else np.dtype(np.float32)
    if ways == 1:  # the kernel's range itself: the pool's dispatch cost more than a small pass
        name = "onyx_quantize_range" if quantize else "onyx_dequantize_range"
        copy, byref = _QuantizeTask.from_buffer_copy, ctypes.byref

        def run(x):
            y = np.empty(shape, y_dtype)
            task = copy(template)
            task.x, task.y = _input_addr(x), _addr(y)  # (x: often a read-only feed)
            status = getattr(core.lib, name)(byref(task), 0, n)
            if status:
                core.check(status, "kernel")
            return y

        return run

    def run(x):
        y = np.empty(shape, y_dtype)
        task = _QuantizeTask.from_buffer_copy(template)
        task.x, task.y = _input_addr(x), _addr(y)
        _run(part, task, cuts, ways)
        return y

    return run


def _per_tensor_pass(part, x, y, scale, zero_point: int, byte_type) -> np.ndarray:
    """y = the (de)quantization of x with one scale and zero point (quantize_task's kernels;
    ``byte_type``: the 8-bit side's type)."""
    ways = _ways(x.size, 64, _PARALLEL_BYTES)
    task = _QuantizeTask(
        _addr(x), float(scale), int(zero_point), int(byte_type == np.int8), _addr(y)
    )
    _run(part, task, _element_cuts(x.size, 64, ways), ways)
    return y


def bind(lib, isa: int) -> None:
    names = ("hardswish", "erf", "hard_sigmoid", "hard_sigmoid_mul", "lookup", "qbinary")
    for name in (*names, "quantize", "dequantize"):
        setattr(lib, f"{name}_range", range_of(lib, name))
    lib.lookup = address(lib.onyx_lookup8_vbmi if isa & core.ISA_VBMI else lib.onyx_lookup8)
    for name in ("onyx_quantize_range", "onyx_dequantize_range"):  # (called directly too)
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [_P, _I64, _I64]
    lib.lookup_direct = lib.onyx_lookup8_vbmi if isa & core.ISA_VBMI else lib.onyx_lookup8
    lib.lookup_direct.restype = None
    lib.lookup_direct.argtypes = [_P, _P, _I64, _P, _I64]
    lib.onyx_lookup8_channels.restype = None
    lib.onyx_lookup8_channels.argtypes = [_P, _P, _P, _I64, _P, _I64, _I64, _I64]


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
