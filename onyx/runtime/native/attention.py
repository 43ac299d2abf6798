"""GroupQueryAttention's step (attention.c): the cache rows written and attended in place; the
RMS norms of LLM layers (SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization)."""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from . import _core as core
from ._core import _I64, _P, _addr, _check_sizes, _element_cuts, _even_cuts, _run, _ways, abi

_GQA_POINTERS = (
    "k_cache",
    "v_cache",
    "y",
    "past",
    "valid",
    "positions",
    "cos",
    "sin",
    "sink",
    "key_bias",
)
_GQA_SIZES = (
    "batch",
    "q_len",
    "q_heads",
    "kv_heads",
    "head",
    "capacity",
    "n_keys",
    "rotary",
    "max_position",
    "interleaved",
    "causal",
    "window",
)


@abi("gqa_task")
class _GqaTask(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("q", "k", "v")]
        + [(name, _I64) for name in ("q_bs", "q_ss", "kv_bs", "kv_ss")]
        + [(name, _P) for name in _GQA_POINTERS]
        + [(name, _I64) for name in _GQA_SIZES]
        + [("scale", ctypes.c_float), ("softcap", ctypes.c_float)]
    )


#: Read-only constants' data addresses (cos / sin caches, norm weights), by id: taking a
#: read-only array's address costs an exception and a ctypes object per call, 20 per token.
_ADDRESSES: dict[int, tuple] = {}


def _const_addr(a: np.ndarray | None) -> int | None:
    if a is None or a.flags.writeable:
        return _addr(a)
    hit = _ADDRESSES.get(id(a))
    if hit is not None and hit[0]() is a:
        return hit[1]
    key, address = id(a), a.ctypes.data
    _ADDRESSES[key] = (weakref.ref(a, lambda _ref: _ADDRESSES.pop(key, None)), address)
    return address


def gqa_ok() -> bool:
    """Whether the native GroupQueryAttention step is loaded."""
    return core.lib is not None and bool(core.lib.gqa_range)


def _rows(x: np.ndarray, heads: int, head: int):
    """(batch stride, token stride) in floats of x [B, S, >= heads * head] whose last axis is
    contiguous, or None."""
    if x.dtype != np.float32 or x.ndim != 3 or x.strides[2] != 4 or x.shape[2] != heads * head:
        return None
    if x.strides[0] % 4 or x.strides[1] % 4:
        return None
    return x.strides[0] // 4, x.strides[1] // 4


def gqa_step(
    q,
    k,
    v,
    k_cache,
    v_cache,
    past,
    valid,
    positions,
    cos,
    sin,
    sink,
    *,
    q_heads: int,
    kv_heads: int,
    n_keys: int,
    interleaved: int,
    causal: int,
    window: int,
    scale: float,
    softcap: float,
    key_bias=None,
) -> np.ndarray | None:
    """One GroupQueryAttention step: k / v [B, S, Hkv * D] (rows of a packed QKV array too)
    rotated (when ``positions`` [B, S] is given, by the cos / sin tables) into the caches
    [B, Hkv, capacity, D] at rows past[b] .. (in place), then q [B, S, Hq * D] attends the
    first n_keys cached rows (valid[b] of them for entry b, causal, a local window): y
    [B, S, Hq * D] float32, or None where the kernel does not apply (numpy's path runs)."""
    if core.lib is None or not core.lib.gqa_range:
        return None
    batch, q_len = q.shape[:2]
    head = k_cache.shape[-1]
    layouts = [_rows(q, q_heads, head), _rows(k, kv_heads, head), _rows(v, kv_heads, head)]
    if None in layouts or layouts[1] != layouts[2]:
        return None
    caches_ok = all(
        c.dtype == np.float32 and c.flags.c_contiguous and c.flags.writeable
        for c in (k_cache, v_cache)
    )
    if not caches_ok or k_cache.shape != v_cache.shape or k_cache.shape[:2] != (batch, kv_heads):
        return None
    capacity = k_cache.shape[2]
    past = np.ascontiguousarray(past, np.int64)
    valid = np.ascontiguousarray(valid, np.int64)
    if not _within(past, 0, capacity - q_len):
        return None
    rotary = max_position = 0
    if positions is not None:
        positions = np.ascontiguousarray(positions, np.int64)
        cos = np.ascontiguousarray(cos, np.float32)
        sin = np.ascontiguousarray(sin, np.float32)
        max_position, rotary = cos.shape[0], 2 * cos.shape[1]
        if sin.shape != cos.shape or not 0 < rotary <= head:
            return None
        if not _within(positions, 0, max_position - 1):
            return None  # (numpy's path raises its IndexError)
    if sink is not None:
        sink = np.ascontiguousarray(np.broadcast_to(sink, (q_heads,)), np.float32)
    if key_bias is not None:  # (Attention's key padding penalties: [B, n_keys])
        key_bias = np.ascontiguousarray(key_bias, np.float32)
        if key_bias.shape != (batch, n_keys):
            return None
    _check_sizes("GroupQueryAttention", batch, q_len, q_heads, kv_heads, head, capacity)
    y = np.empty((batch, q_len, q_heads * head), np.float32)
    task = _GqaTask(
        _addr(q),
        _addr(k),
        _addr(v),
        *layouts[0],
        *layouts[1],
        _addr(k_cache),
        _addr(v_cache),
        _addr(y),
        _addr(past),
        _addr(valid),
        _addr(positions),
        _const_addr(cos),
        _const_addr(sin),
        _addr(sink),
        _addr(key_bias),
        batch,
        q_len,
        q_heads,
        kv_heads,
        head,
        capacity,
        n_keys,
        rotary,
        max_position,
        int(interleaved),
        int(causal),
        int(window),
        float(scale),
        float(softcap),
    )
    units = batch * kv_heads
    ways = _ways(q_len * n_keys * q_heads * head, units, 1 << 18)
    _run(core.lib.gqa_range, task, _element_cuts(units, 1, ways), ways, "GroupQueryAttention")
    return y


#: A BERT layer's set-up of the packed step, by (qkv's shape and strides, heads, scale, the key
#: bias's shape, the thread setting): every call of an encoder's Attention meets the same one,
#: so the checks, sizes and thread split run once; a new signature is a new key, checked anew.
#: None where the kernel does not apply (numpy's path runs).
_PACKED: dict[tuple, tuple | None] = {}
_PACKED_ENTRIES = 64  # (a bound: a model fed ever new shapes)
_UNSET = object()


def packed_attention(
    qkv: np.ndarray, num_heads: int, scale: float, key_bias: np.ndarray | None, present: bool
) -> tuple | None:
    """Attention without past, rotary or causal mask on a packed projection qkv [B, S, 3 * Hq
    * D] (q, k, v side by side, float32, the last axis contiguous): (y [B, S, Hq * D], the
    present [2, B, Hq, S, D] when ``present`` else None), or None where the kernel does not
    apply. key_bias: float32 [B, S] added to each key's scores (padding penalties) or None."""
    lib = core.lib
    if lib is None or not lib.gqa_range or qkv.dtype != np.float32:
        return None
    if key_bias is not None and (key_bias.dtype != np.float32 or not key_bias.flags.c_contiguous):
        return None
    bias_shape = None if key_bias is None else key_bias.shape
    key = (qkv.shape, qkv.strides, num_heads, scale, bias_shape, core.thread_setting())
    setup = _PACKED.get(key, _UNSET)
    if setup is _UNSET:
        setup = _packed_setup(qkv, num_heads, scale, bias_shape)
        if len(_PACKED) >= _PACKED_ENTRIES:
            _PACKED.clear()
        _PACKED[key] = setup
    if setup is None:
        return None
    template, kv_shape, y_shape, k_offset, v_offset, cuts_at, parts, ways, _held = setup
    y = np.empty(y_shape, np.float32)
    kv = np.empty(kv_shape, np.float32)
    task = _GqaTask.from_buffer_copy(template)
    at, kv_at = _addr(qkv), _addr(kv)
    task.q, task.k, task.v = at, at + k_offset, at + v_offset
    task.k_cache, task.v_cache = kv_at, kv_at + kv.nbytes // 2
    task.y, task.key_bias = _addr(y), _addr(key_bias)
    status = lib.onyx_parallel(lib.gqa_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "Attention")
    return y, kv if present else None


def _packed_setup(qkv: np.ndarray, num_heads: int, scale: float, bias_shape) -> tuple | None:
    """packed_attention's checks and the parts of its task that do not change between calls
    of one signature (the data addresses are filled per call)."""
    if qkv.ndim != 3 or qkv.shape[2] % 3 or (qkv.shape[2] // 3) % num_heads:
        return None
    batch, q_len, width = qkv.shape
    size = width // 3
    head = size // num_heads
    q, k, v = qkv[..., :size], qkv[..., size : 2 * size], qkv[..., 2 * size :]
    layouts = [_rows(q, num_heads, head), _rows(k, num_heads, head), _rows(v, num_heads, head)]
    if None in layouts or layouts[1] != layouts[2]:
        return None
    if bias_shape is not None and bias_shape != (batch, q_len):
        return None
    _check_sizes("Attention", batch, q_len, num_heads, head)
    past = np.zeros(batch, np.int64)  # (read only by the kernel: one pair for every call)
    valid = np.full(batch, q_len, np.int64)
    units = batch * num_heads
    ways = _ways(q_len * q_len * num_heads * head, units, 1 << 18)
    cuts = _element_cuts(units, 1, ways)
    template = _GqaTask(
        None, None, None, *layouts[0], *layouts[1], None, None, None,
        _addr(past), _addr(valid), None, None, None, None, None,
        batch, q_len, num_heads, num_heads, head, q_len, q_len, 0, 0, 0, 0, -1,
        float(scale), 0.0,
    )  # fmt: skip
    return (
        template,
        (2, batch, num_heads, q_len, head),  # (present's layout: k rows, then v rows)
        (batch, q_len, size),
        size * 4,
        2 * size * 4,
        _addr(cuts),
        len(cuts) - 1,
        ways,
        (past, valid, cuts),  # (held: the template points at them)
    )


def _within(values: np.ndarray, lo: int, hi: int) -> bool:
    """Whether every value lies in [lo, hi] (a decoding step's single values without numpy's
    reductions)."""
    if values.size == 1:
        return lo <= int(values.reshape(-1)[0]) <= hi
    return not values.size or (lo <= int(values.min()) and int(values.max()) <= hi)


@abi("rms_task")
class _RmsTask(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "skip", "bias", "gamma", "y", "sum", "inv")] + [
        ("size", _I64),
        ("epsilon", ctypes.c_float),
    ]


def rms_norm_f32(x: np.ndarray, skip, bias, gamma, epsilon: float):
    """RMS normalization over the last axis of float32 x (+ skip of x's shape, + bias): (y,
    1 / rms [..., 1], the sum x + skip + bias or None without skip), or None where the kernel
    does not apply (numpy's path runs)."""
    if core.lib is None or not core.lib.rms_range or x.dtype != np.float32 or not x.ndim:
        return None
    n = x.shape[-1]
    arrays = [a for a in (x, skip, bias, gamma) if a is not None]
    if any(a.dtype != np.float32 or not a.flags.c_contiguous for a in arrays) or not n:
        return None
    if (skip is not None and skip.shape != x.shape) or gamma.size != n:
        return None
    if bias is not None and bias.size != n:
        return None
    rows = x.size // n
    y = np.empty_like(x)
    total = np.empty_like(x) if skip is not None else None
    inv = np.empty(x.shape[:-1] + (1,), np.float32)
    task = _RmsTask(
        _addr(x),
        _addr(skip),
        _const_addr(bias),
        _const_addr(gamma),
        _addr(y),
        _addr(total),
        _addr(inv),
        n,
        float(epsilon),
    )
    ways = _ways(x.size, rows, 1 << 16)
    _run(core.lib.rms_range, task, _even_cuts(rows, ways), ways, "RMS normalization")
    return y, inv, total


def bind(lib, isa: int) -> None:
    lib.gqa_range = core.range_of(lib, "gqa")
    lib.rms_range = core.range_of(lib, "rms")
