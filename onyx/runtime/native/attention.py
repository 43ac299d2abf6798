"""GroupQueryAttention's step (attention.c): the cache rows written and attended in place; the
RMS norms of LLM layers (SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization)."""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    WorkSplit,
    _addr,
    _check_sizes,
    _element_cuts,
    _even_cuts,
    _input_addr,
    _run,
    _ways,
    abi,
    bound_task,
)

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
        + [(name, _I64) for name in ("q_hs", "kv_hs", "y_bs", "y_ss", "y_hs", "kb_bs", "kb_hs")]
    )


def _rows_strides(task: _GqaTask, q_len: int, q_heads: int, head: int) -> _GqaTask:
    """task with the head strides of [B, S, H * D] rows (q, k, v and y alike)."""
    task.q_hs = task.kv_hs = task.y_hs = head
    task.y_ss = q_heads * head
    task.y_bs = q_len * q_heads * head
    return task


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
    _rows_strides(task, q_len, q_heads, head)
    task.kb_bs = n_keys
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
    qkv: np.ndarray,
    num_heads: int,
    scale: float,
    key_bias: np.ndarray | None,
    present: bool,
    causal: bool = False,
    rotary: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple | None:
    """Attention without past or rotary on a packed projection qkv [B, S, 3 * Hq * D] (q, k,
    v side by side, float32, the last axis contiguous): (y [B, S, Hq * D], the present [2, B,
    Hq, S, D] when ``present`` else None), or None where the kernel does not apply. key_bias:
    float32 [B, S] added to each key's scores (padding penalties) or None; causal: key j for
    query i only where j <= i; rotary: (cos, sin) [>= S, D / 2] float32 tables that rotate q
    and k by halves at positions 0 .. S - 1 (rotate_row's roundings) or None."""
    lib = core.lib
    if lib is None or not lib.gqa_range or qkv.dtype != np.float32:
        return None
    if key_bias is not None and (key_bias.dtype != np.float32 or not key_bias.flags.c_contiguous):
        return None
    bias_shape = None if key_bias is None else key_bias.shape
    tables = None if rotary is None else tuple(t.shape for t in rotary)
    key = (qkv.shape, qkv.strides, num_heads, scale, bias_shape, causal, tables)
    key += (core.thread_setting(),)
    setup = _PACKED.get(key, _UNSET)
    if setup is _UNSET:
        setup = _packed_setup(qkv, num_heads, scale, bias_shape, causal, rotary)
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
    if rotary is not None:
        task.cos, task.sin = _const_addr(rotary[0]), _const_addr(rotary[1])
    status = lib.onyx_parallel(lib.gqa_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "Attention")
    return y, kv if present else None


def packed_attention_bound(qkv: np.ndarray, num_heads: int, scale: float, causal: bool):
    """``call(qkv)`` = packed_attention(qkv, num_heads, scale, None, False, causal)'s y for
    qkv of this one's shape and strides (None for others: the caller's general path), the
    task set up once (registry.binds); None where the kernel does not apply."""
    lib = core.lib
    if lib is None or not lib.gqa_range or qkv.dtype != np.float32:
        return None
    setup = _packed_setup(qkv, num_heads, scale, None, causal)
    if setup is None:
        return None
    template, kv_shape, y_shape, k_offset, v_offset = setup[:5]
    batch, q_len, _ = qkv.shape
    units = batch * num_heads
    work = q_len * q_len * num_heads * (qkv.shape[2] // 3 // num_heads)
    split = WorkSplit(work, units, 1 << 18, lambda w: _element_cuts(units, 1, w))
    fields = ("q", "k", "v", "k_cache", "v_cache", "y")
    run = bound_task(template, lib.gqa_range, split, fields, "Attention")
    strides, empty, f32, half = qkv.strides, np.empty, np.float32, 4 * int(np.prod(kv_shape)) // 2

    def call(qkv):
        if qkv.strides != strides:
            return None
        y, kv = empty(y_shape, f32), empty(kv_shape, f32)
        at, kv_at = _input_addr(qkv), _addr(kv)
        run(at, at + k_offset, at + v_offset, kv_at, kv_at + half, _addr(y))
        return y

    call.held = setup
    return call


def _packed_setup(
    qkv: np.ndarray, num_heads: int, scale: float, bias_shape, causal=False, rotary=None
) -> tuple | None:
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
    positions, n_rotary, max_position = None, 0, 0
    if rotary is not None:  # (positions 0 .. S - 1 of every entry)
        cos, sin = rotary
        ok = all(t.dtype == np.float32 and t.flags.c_contiguous for t in rotary)
        if not ok or cos.ndim != 2 or cos.shape != sin.shape or 2 * cos.shape[1] != head:
            return None
        if cos.shape[0] < q_len:
            return None
        positions = np.tile(np.arange(q_len, dtype=np.int64), batch)
        n_rotary, max_position = head, cos.shape[0]
    past = np.zeros(batch, np.int64)  # (read only by the kernel: one pair for every call)
    valid = np.full(batch, q_len, np.int64)
    units = batch * num_heads
    ways = _ways(q_len * q_len * num_heads * head, units, 1 << 18)
    cuts = _element_cuts(units, 1, ways)
    template = _GqaTask(
        None, None, None, *layouts[0], *layouts[1], None, None, None,
        _addr(past), _addr(valid), _addr(positions), None, None, None, None,
        batch, q_len, num_heads, num_heads, head, q_len, q_len, n_rotary, max_position, 0,
        int(causal), -1, float(scale), 0.0,
    )  # fmt: skip
    _rows_strides(template, q_len, num_heads, head)
    template.kb_bs = q_len
    return (
        template,
        (2, batch, num_heads, q_len, head),  # (present's layout: k rows, then v rows)
        (batch, q_len, size),
        size * 4,
        2 * size * 4,
        _addr(cuts),
        len(cuts) - 1,
        ways,
        (past, valid, cuts, positions),  # (held: the template points at them)
    )


#: Attention's (opset 23) set-ups on 4-D heads, by (q's shape and strides, k's shape, scale,
#: causal, the thread setting): as _PACKED's, the checks and the split run once a signature.
_HEADS: dict[tuple, tuple | None] = {}


def heads_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal: bool,
    key_bias: np.ndarray | None = None,
):
    """softmax(scale * q k^T [+ key_bias] [causal: key j <= query i]) v for float32 q [B, Hq,
    S, D] (the last axis contiguous), k, v [B, Hkv, T, D] (S <= T; Hq a multiple of Hkv),
    key_bias float32 [B or 1, Hq or 1, 1, T] (a padding mask per key) or None: y [B, Hq, S,
    D], or None where the kernel does not apply (numpy's path runs). k and v serve as the
    kernel's cache in place (made contiguous first where they are not)."""
    lib = core.lib
    if lib is None or not lib.gqa_range:
        return None
    if not all(a.dtype == np.float32 and a.ndim == 4 for a in (q, k, v)) or k.shape != v.shape:
        return None
    strides = (0, 0)
    if key_bias is not None:
        if key_bias.ndim != 4 or key_bias.dtype != np.float32:
            return None
        b, h, rows, keys = key_bias.shape
        if rows != 1 or keys != k.shape[2]:
            return None
        if b not in (1, q.shape[0]) or h not in (1, q.shape[1]):
            return None
        key_bias = np.ascontiguousarray(key_bias)
        strides = (h * keys if b > 1 else 0, keys if h > 1 else 0)
    key = (q.shape, q.strides, k.shape, scale, causal, core.thread_setting())
    setup = _HEADS.get(key, _UNSET)
    if setup is _UNSET:
        setup = _heads_setup(q, k, scale, causal)
        if len(_HEADS) >= _PACKED_ENTRIES:
            _HEADS.clear()
        _HEADS[key] = setup
    if setup is None:
        return None
    template, y_shape, cuts_at, parts, ways, _held = setup
    k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
    y = np.empty(y_shape, np.float32)
    task = _GqaTask.from_buffer_copy(template)
    task.q, task.y = _addr(q), _addr(y)
    task.k = task.k_cache = _addr(k)
    task.v = task.v_cache = _addr(v)
    task.key_bias, (task.kb_bs, task.kb_hs) = _addr(key_bias), strides
    status = lib.onyx_parallel(lib.gqa_range, ctypes.byref(task), cuts_at, parts, ways)
    if status:
        core.check(status, "Attention")
    return y


def _heads_setup(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> tuple | None:
    """heads_attention's checks and the call-invariant part of its task."""
    batch, q_heads, q_len, head = q.shape
    _, kv_heads, n_keys, k_head = k.shape
    if k.shape[0] != batch or k_head != head or q_heads % kv_heads or q_len > n_keys:
        return None
    if q.strides[3] != 4 or any(s % 4 for s in q.strides) or not q.size:
        return None
    _check_sizes("Attention", batch, q_len, q_heads, kv_heads, head, n_keys)
    past = np.zeros(batch, np.int64)
    valid = np.full(batch, n_keys, np.int64)
    units = batch * kv_heads
    ways = _ways(q_len * n_keys * q_heads * head, units, 1 << 18)
    cuts = _element_cuts(units, 1, ways)
    qs = [s // 4 for s in q.strides]
    template = _GqaTask(
        None, None, None, qs[0], qs[2], kv_heads * n_keys * head, head, None, None, None,
        _addr(past), _addr(valid), None, None, None, None, None,
        batch, q_len, q_heads, kv_heads, head, n_keys, n_keys, 0, 0, 0, int(causal), -1,
        float(scale), 0.0, qs[1], n_keys * head, q_heads * q_len * head, head, q_len * head,
    )  # fmt: skip
    return template, q.shape, _addr(cuts), len(cuts) - 1, ways, (past, valid, cuts)


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


@abi("rotary_task")
class _RotaryTask(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "y", "cos", "sin")] + [
        ("size", _I64),
        ("period", _I64),
    ]


def rotate_half_f32(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray | None:
    """x * cos + concat(-x2, x1) * sin over the last axis (halves x1, x2) for float32 x [..., S,
    D] and cos, sin [S, D] (leading ones allowed): one native pass, or None where the kernel
    does not apply (numpy's path runs)."""
    if core.lib is None or not core.lib.rotary_range or x.dtype != np.float32 or x.ndim < 2:
        return None
    period, n = x.shape[-2:]
    tables = []
    for t in (cos, sin):
        if t.dtype != np.float32 or t.ndim > x.ndim or t.size != period * n:
            return None
        if t.shape[-2:] != (period, n) or not t.flags.c_contiguous:
            return None
        tables.append(t)
    if n % 2 or not x.size:
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    rows = x.size // n
    task = _RotaryTask(
        _addr(x), _addr(y), _const_addr(tables[0]), _const_addr(tables[1]), n, period
    )
    ways = _ways(x.size, rows, 1 << 16)
    _run(core.lib.rotary_range, task, _even_cuts(rows, ways), ways, "rotary embedding")
    return y


@abi("silu_task")
class _SiluTask(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("g", "u", "y")]


def silu_f32(g: np.ndarray, u: np.ndarray | None = None) -> np.ndarray | None:
    """g * sigmoid(g) [* u] of float32 g (u of g's shape) in one native pass, or None where
    the kernel does not apply (numpy's path runs)."""
    if core.lib is None or not core.lib.silu_range or g.dtype != np.float32:
        return None
    if u is not None and (u.dtype != np.float32 or u.shape != g.shape):
        return None
    g = np.ascontiguousarray(g)
    u = None if u is None else np.ascontiguousarray(u)
    y = np.empty_like(g)
    ways = _ways(g.size, g.size // 16 + 1, 1 << 16)
    _run(
        core.lib.silu_range,
        _SiluTask(_addr(g), _addr(u), _addr(y)),
        _element_cuts(g.size, 16, ways),
        ways,
        "SiLU",
    )
    return y


def bind(lib, isa: int) -> None:
    lib.gqa_range = core.range_of(lib, "gqa")
    lib.rms_range = core.range_of(lib, "rms")
    lib.rotary_range = core.range_of(lib, "rotary")
    lib.silu_range = core.range_of(lib, "silu")


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
