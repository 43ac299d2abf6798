"""Normalizations over rows (norms.c): layer normalization (with SkipLayerNormalization's sum),
instance and group normalization, inference BatchNormalization (with Relu)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_ELEMENTS,
    WorkSplit,
    _addr,
    _element_cuts,
    _input_addr,
    _run,
    _ways,
    abi,
    bound_task,
    range_of,
)


@abi("norm_rows")
class _NormRows(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "scale", "bias", "y")] + [
        ("channels", _I64),
        ("spatial", _I64),
        ("epsilon", ctypes.c_float),
    ]


@abi("layer_norm")
class _LayerNorm(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "scale", "bias", "y", "mean", "inv_std")] + [
        ("size", _I64),
        ("epsilon", ctypes.c_float),
        ("skip", _P),
        ("add", _P),
        ("sum", _P),
    ]


@abi("batch_norm")
class _BatchNorm(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "y", "mean", "mult", "bias")] + [
        ("channels", _I64),
        ("size", _I64),
    ]


def batch_norm_f32(
    x: np.ndarray, mean: np.ndarray, mult: np.ndarray, bias: np.ndarray, relu: bool = False
):
    """Inference BatchNormalization of C-contiguous float32 x (N, C, ...): (x - mean) * mult +
    bias per channel, each step rounded (numpy's passes, to the bit); the parameters float32
    [C]; with relu, then Relu (np.clip's bits) in the same pass. None without the library."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim < 2:
        return None
    params = [_vector_f32(v) for v in (mean, mult, bias)]
    if any(v.size != x.shape[1] for v in params):
        return None
    y = np.empty_like(x)
    rows = x.shape[0] * x.shape[1]
    size = x.size // rows if rows else 0
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    addrs = (_param_addr(v) for v in params)  # (a session's constants: their addresses kept)
    task = _BatchNorm(_input_addr(x), _addr(y), *addrs, x.shape[1], size)
    entry = core.lib.batch_norm_relu_f32_range if relu else core.lib.batch_norm_f32_range
    _run(entry, task, _element_cuts(rows, 1, ways), ways)
    return y


def _rows_split(size: int, rows: int) -> WorkSplit:
    """A bound row kernel's split: whole rows per thread, as the kernels' own calls split
    ``size`` values in ``rows`` rows."""
    return WorkSplit(size, rows, _PARALLEL_ELEMENTS, lambda ways: _element_cuts(rows, 1, ways))


def batch_norm_bound(shape: tuple, mean, mult, bias, relu: bool = False):
    """``call(x)`` = batch_norm_f32(x, mean, mult, bias, relu) for float32 x of ``shape``,
    C-contiguous (None otherwise: the caller's general path), the constant parameters'
    addresses and the split found once (registry.binds); None where it does not apply."""
    if core.lib is None or len(shape) < 2:
        return None
    params = [_vector_f32(v) for v in (mean, mult, bias)]
    if any(v.size != shape[1] for v in params):
        return None
    rows = shape[0] * shape[1]
    size = math.prod(shape) // rows if rows else 0
    split = _rows_split(math.prod(shape), rows)
    template = _BatchNorm(None, None, *(_param_addr(v) for v in params), shape[1], size)
    entry = core.lib.batch_norm_relu_f32_range if relu else core.lib.batch_norm_f32_range
    run, empty, f32 = bound_task(template, entry, split, ("x", "y")), np.empty, np.float32

    def call(x):
        if not x.flags.c_contiguous:
            return None
        y = empty(shape, f32)
        run(_input_addr(x), _addr(y))
        return y

    call.held = params
    return call


def _vector_f32(v) -> np.ndarray:
    """v as a contiguous float32 vector: v itself when it is one (so that a constant keeps its
    identity, which _param_addr keys on)."""
    if type(v) is np.ndarray and v.ndim == 1 and v.dtype == np.float32 and v.flags.c_contiguous:
        return v
    return np.ascontiguousarray(v, np.float32).reshape(-1)


#: id -> (a read-only parameter array, its address), held so that no id is reused
_PARAMS: dict[int, tuple[np.ndarray, int]] = {}


def _param_addr(a: np.ndarray) -> int | None:
    """The address of a kernel's parameter array (a norm's scale or bias). A read-only one's is
    kept: a session's constants come back every run, and finding a read-only array's address
    costs a microsecond (of a small norm's few)."""
    hit = _PARAMS.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1]
    at = _addr(a)
    if not a.flags.writeable:
        if len(_PARAMS) >= 256:  # (a bound: a process making many sessions)
            _PARAMS.clear()
        _PARAMS[id(a)] = (a, at)
    return at


def layer_norm_f32(x: np.ndarray, scale: np.ndarray, bias, epsilon: float):
    """LayerNormalization of C-contiguous float32 x over its last axis, with float32 scale and
    bias (or None) of its length: (y, mean, inv_std), the statistics shaped [..., 1]; None
    without the library."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or not x.ndim:
        return None
    n = x.shape[-1]
    rows = x.size // n if n else 0
    y = np.empty_like(x)
    stats = np.empty((2,) + x.shape[:-1] + (1,), np.float32)
    scale = np.ascontiguousarray(scale, np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
    task = _LayerNorm(
        _addr(x),
        _param_addr(scale),
        None if bias is None else _param_addr(bias),
        _addr(y),
        _addr(stats[0]),
        _addr(stats[1]),
        n,
        float(epsilon),
    )
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    _run(core.lib.layer_norm_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y, stats[0], stats[1]


def layer_norm_bound(shape: tuple, scale: np.ndarray, bias, epsilon: float):
    """``call(x)`` = layer_norm_f32(x, scale, bias, epsilon) for C-contiguous float32 x of
    ``shape``, the constant parameters' addresses and the split found once (registry.binds);
    None without the library."""
    if core.lib is None or not shape:
        return None
    n = shape[-1]
    size = math.prod(shape)
    rows = size // n if n else 0
    scale = np.ascontiguousarray(scale, np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
    bias_at = None if bias is None else _param_addr(bias)
    template = _LayerNorm(None, _param_addr(scale), bias_at, None, None, None, n, float(epsilon))
    split = _rows_split(size, rows)
    fields = ("x", "y", "mean", "inv_std")
    run = bound_task(template, core.lib.layer_norm_f32_range, split, fields)
    stats_shape, empty, f32 = (2,) + shape[:-1] + (1,), np.empty, np.float32

    def call(x):
        y, stats = empty(shape, f32), empty(stats_shape, f32)
        mean, inv_std = stats[0], stats[1]
        run(_input_addr(x), _addr(y), _addr(mean), _addr(inv_std))
        return y, mean, inv_std

    call.held = (scale, bias)
    return call


#: A node's set-up of skip_layer_norm_f32 with constant parameters, by (x's shape, the
#: parameters' ids, epsilon, the thread setting): the parameters (held: no reused id, compared
#: by identity), then the task with their addresses and sizes, the thread split and the
#: statistics' shape. An encoder's norms meet one signature each call after call; a new
#: shape or parameter is a new key, checked anew.
_SKIP_SETUPS: dict[tuple, tuple] = {}


def skip_layer_norm_f32(x, skip, scale, bias, add, epsilon: float):
    """SkipLayerNormalization in one pass a row: x + skip (+ add) normalized over the last
    axis, times scale (+ bias), for float32 x and skip alike and C-contiguous, scale, bias and
    add float32 [x's last dimension] (bias and add may be None): (y, mean, inv_std, the sum),
    the bits of the add then layer_norm_f32; None where that does not apply."""
    lib = core.lib
    if lib is None or x.dtype != np.float32 or skip.dtype != np.float32:
        return None
    if x.shape != skip.shape or not (x.flags.c_contiguous and skip.flags.c_contiguous):
        return None
    key = (x.shape, id(scale), id(bias), id(add), epsilon, core.thread_setting())
    setup = _SKIP_SETUPS.get(key)
    if setup is None or setup[0] is not scale or setup[1] is not bias or setup[2] is not add:
        setup = _skip_setup(x, scale, bias, add, epsilon)
        if setup is None:  # (parameters fed, strided or of other shapes: the general path)
            return skip_layer_norm_checked(x, skip, scale, bias, add, epsilon)
        if len(_SKIP_SETUPS) >= 64:  # (a bound: a model fed ever new shapes)
            _SKIP_SETUPS.clear()
        _SKIP_SETUPS[key] = setup
    template, cuts_at, parts, ways, stats_shape = setup[3:8]
    y = np.empty_like(x)
    total = np.empty_like(x)
    stats = np.empty(stats_shape, np.float32)
    task = _LayerNorm.from_buffer_copy(template)
    stats_at = _addr(stats)
    task.x, task.y, task.skip, task.sum = _addr(x), _addr(y), _addr(skip), _addr(total)
    task.mean, task.inv_std = stats_at, stats_at + stats.nbytes // 2
    status = lib.onyx_parallel(lib.layer_norm_f32_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "kernel")
    return y, stats[0], stats[1], total


def _skip_setup(x, scale, bias, add, epsilon: float) -> tuple | None:
    """skip_layer_norm_f32's kept set-up for read-only contiguous parameters (the constants of
    a session), or None."""
    if not x.ndim or not x.shape[-1]:
        return None
    n = x.shape[-1]
    for a in (scale, bias, add):
        if a is not None and (
            type(a) is not np.ndarray
            or a.dtype != np.float32
            or a.shape != (n,)
            or a.flags.writeable
            or not a.flags.c_contiguous
        ):
            return None
    rows = x.size // n
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    cuts = _element_cuts(rows, 1, ways)
    template = _LayerNorm(
        None, _addr(scale), _addr(bias), None, None, None, n, float(epsilon), None, _addr(add)
    )
    stats_shape = (2,) + x.shape[:-1] + (1,)
    # (cuts held: the lru cache that made them may let them go)
    return (scale, bias, add, template, _addr(cuts), len(cuts) - 1, ways, stats_shape, cuts)


def skip_layer_norm_bound(x, scale, bias, add, epsilon: float):
    """``call(x, skip)`` = skip_layer_norm_f32(x, skip, scale, bias, add, epsilon) for x and
    skip of x's shape, C-contiguous (None otherwise: the caller's general path), the constant
    parameters set up once (registry.binds); None where the set-up does not apply."""
    if core.lib is None or x.dtype != np.float32:
        return None
    setup = _skip_setup(x, scale, bias, add, epsilon)
    if setup is None:
        return None
    template, stats_shape, rows = setup[3], setup[7], x.size // x.shape[-1]
    split = _rows_split(x.size, rows)
    fields = ("x", "y", "skip", "sum", "mean", "inv_std")
    run = bound_task(template, core.lib.layer_norm_f32_range, split, fields)
    shape, empty, f32, half = x.shape, np.empty, np.float32, 4 * math.prod(stats_shape) // 2

    def call(x, skip):
        if not (x.flags.c_contiguous and skip.flags.c_contiguous) or skip.dtype != f32:
            return None
        y, total, stats = empty(shape, f32), empty(shape, f32), empty(stats_shape, f32)
        at = _addr(stats)
        run(_input_addr(x), _addr(y), _input_addr(skip), _addr(total), at, at + half)
        return y, stats[0], stats[1], total

    call.held = setup
    return call


def skip_layer_norm_checked(x, skip, scale, bias, add, epsilon: float):
    """skip_layer_norm_f32 with every check made on each call (parameters fed at run time)."""
    if core.lib is None or not x.ndim or x.shape != skip.shape or not x.shape[-1]:
        return None
    n = x.shape[-1]
    params = [a for a in (scale, bias, add) if a is not None]
    if any(a.dtype != np.float32 or a.shape != (n,) for a in params):
        return None
    if x.dtype != np.float32 or skip.dtype != np.float32:
        return None
    if not (x.flags.c_contiguous and skip.flags.c_contiguous):
        return None
    rows = x.size // n
    y = np.empty_like(x)
    total = np.empty_like(x)
    stats = np.empty((2,) + x.shape[:-1] + (1,), np.float32)
    task = _LayerNorm(
        _addr(x),
        _param_addr(np.ascontiguousarray(scale)),
        None if bias is None else _param_addr(np.ascontiguousarray(bias)),
        _addr(y),
        _addr(stats[0]),
        _addr(stats[1]),
        n,
        float(epsilon),
        _addr(skip),
        None if add is None else _param_addr(np.ascontiguousarray(add)),
        _addr(total),
    )
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    _run(core.lib.layer_norm_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y, stats[0], stats[1], total


def norm_rows_f32(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float):
    """Instance / group normalization of C-contiguous float32 x (rows, channels, spatial),
    statistics per row, scale and bias (rows, channels): the normalized rows, or None
    without the library."""
    if core.lib is None or x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim != 3:
        return None
    rows, channels, spatial = x.shape
    y = np.empty_like(x)
    scale = np.ascontiguousarray(scale, np.float32)
    bias = np.ascontiguousarray(bias, np.float32)
    task = _NormRows(
        _addr(x), _addr(scale), _addr(bias), _addr(y), channels, spatial, float(epsilon)
    )
    ways = _ways(x.size, rows, _PARALLEL_ELEMENTS)
    _run(core.lib.norm_rows_f32_range, task, _element_cuts(rows, 1, ways), ways)
    return y


def norm_rows_bound(shape: tuple, scale: np.ndarray, bias: np.ndarray, epsilon: float):
    """``call(x)`` = norm_rows_f32(x, scale, bias, epsilon) for C-contiguous float32 x of
    ``shape`` (rows, channels, spatial), the constant parameters' addresses and the split
    found once (registry.binds); None without the library."""
    if core.lib is None or len(shape) != 3:
        return None
    rows, channels, spatial = shape
    scale = np.ascontiguousarray(scale, np.float32)
    bias = np.ascontiguousarray(bias, np.float32)
    template = _NormRows(None, _addr(scale), _addr(bias), None, channels, spatial, float(epsilon))
    split = _rows_split(rows * channels * spatial, rows)
    run = bound_task(template, core.lib.norm_rows_f32_range, split, ("x", "y"))
    empty, f32 = np.empty, np.float32

    def call(x):
        y = empty(shape, f32)
        run(_input_addr(x), _addr(y))
        return y

    call.held = (scale, bias)
    return call


def bind(lib, isa: int) -> None:
    for name in (
        "layer_norm_f32",
        "norm_rows_f32",
        "batch_norm_f32",
        "batch_norm_relu_f32",
    ):
        setattr(lib, f"{name}_range", range_of(lib, name))


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
