"""The float32 1-D conv (conv1d.c): a direct conv over (N, C, L) signals, any stride,
dilation, padding and group, with FusedConv's residual and activation applied as it stores.
Built for AVX-512, AVX2 and baseline x86-64 (one portable body)."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _addr,
    _check_sizes,
    _filled,
    _input_addr,
    _run,
    _ways,
    abi,
    as_residual,
    cached_bias,
    range_of,
)


@abi("conv1d_f32")
class _Conv1dF32(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("x", "w", "bias", "z", "y")]
        + [(name, _I64) for name in "N C L M sn sc sl OL k s d left group chunk mode".split()]
        + [("act", ctypes.c_int32), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]
    )


#: conv1d.c's tiles (its AVX-512 ones: the choice between them is made on these): a channel
#: tile is 16 output channels (a panel) by _CHANNEL_POSITIONS positions, a position tile 8
#: output channels by 32 positions.
_PANEL, _CHANNEL_POSITIONS, _ROWS, _POSITIONS = 16, 8, 8, 32

#: What a channel tile's transposed store costs per output value, in (channel, tap) pairs of
#: its sums: a scalar store where a position tile stores vectors.
_TRANSPOSED_STORE = 64

#: Output positions per part at most: a part's copy of its window of signal stays in L2.
_CHUNK_FLOATS = 1 << 15


def conv1d_ok() -> bool:
    """Whether :class:`Conv1d` runs here (the library is loaded; any x86-64 CPU)."""
    return core.lib is not None and bool(core.lib.conv1d_range)


def _filled_share(n: int, tile: int) -> float:
    """The share of a tile's lanes that n values fill (the last tile partly)."""
    return n / (-(-n // tile) * tile)


def channel_vectors(Mg: int, P: int, T: int) -> bool:
    """Whether the channel tile (mode 0) suits Mg output channels per group by P positions with
    T (channel, tap) pairs each, rather than the position tile: by the share of their lanes
    that do work."""
    channels = _filled_share(Mg, _PANEL) * _filled_share(P, _CHANNEL_POSITIONS)
    channels *= T / (T + _TRANSPOSED_STORE)
    positions = _filled_share(P, _POSITIONS) * (Mg / (-(-Mg // _ROWS) * _ROWS) if Mg >= 4 else 0.5)
    return channels > positions


def pack_conv1d(w: np.ndarray, group: int, mode: int) -> np.ndarray:
    """Weights (M, C / group, k) in conv1d.c's layout: mode 0 panels of 16 output channels,
    (group, panels, T, 16), zeros past the last; mode 1 blocks of 8 rows, each (T, rows)."""
    M, T = w.shape[0], w[0].size
    Mg = M // group
    rows = w.reshape(group, Mg, T)
    if mode == 0:
        panels = -(-Mg // _PANEL)
        wp = np.zeros((group, panels * _PANEL, T), np.float32)
        wp[:, :Mg] = rows
        return np.ascontiguousarray(wp.reshape(group, panels, _PANEL, T).transpose(0, 1, 3, 2))
    out = np.empty((group, Mg * T), np.float32)
    for m0 in range(0, Mg, _ROWS):
        rb = min(_ROWS, Mg - m0)
        out[:, m0 * T : (m0 + rb) * T] = rows[:, m0 : m0 + rb].transpose(0, 2, 1).reshape(group, -1)
    return out


class Conv1d:
    """A float32 1-D conv set up for one input shape x (N, C, L) and weights w (M, C / group,
    k); begin: the left pad (the end pad is implied by out_len); the activation a code of
    CONV_ACTIVATIONS (alpha: LeakyRelu's slope or Clip's min, beta: Clip's max or
    HardSigmoid's). What does not depend on the data is made here once: a small layer's conv
    takes a few microseconds."""

    __slots__ = ("address", "bias", "cuts", "packed", "shape", "task", "ways")

    def __init__(
        self,
        x_shape,
        w: np.ndarray,
        group: int,
        out_len: int,
        stride: int,
        dilation: int,
        begin: int,
        activation: int = 0,
        alpha: float = 0.0,
        beta: float = 0.0,
    ):
        N, C, L = x_shape
        M, k = w.shape[0], w.shape[2]
        _check_sizes("1-D conv", *x_shape, M, k, out_len, stride, dilation, begin, group)
        Mg, T = M // group, w[0].size
        mode = 0 if channel_vectors(Mg, out_len, T) else 1
        self.packed = pack_conv1d(w, group, mode)
        work = N * M * T * out_len
        # parts: (image, group, run of whole tiles of positions), at least one per thread;
        # a run's window of signal stays in L2
        tile = _CHANNEL_POSITIONS if mode == 0 else _POSITIONS
        self.ways = _ways(work, N * group * -(-out_len // tile))
        runs = -(-self.ways // (N * group))  # (per image and group)
        per_run = -(-out_len // runs)
        chunk = -(-per_run // tile) * tile
        most = max(tile, _CHUNK_FLOATS // ((C // group) * stride) // tile * tile)
        chunk = min(chunk, most, out_len)
        parts = N * group * -(-out_len // chunk)
        self.ways = min(self.ways, parts)
        self.cuts = np.array([parts * i // self.ways for i in range(self.ways + 1)], np.int64)
        self.shape, self.bias = (N, M, out_len), (None, None, None)
        self.task = _Conv1dF32(
            None,
            _addr(self.packed),
            None,
            None,
            None,
            N,
            C,
            L,
            M,
            C * L,
            L,
            1,
            out_len,
            k,
            stride,
            dilation,
            begin,
            group,
            chunk,
            mode,
            activation,
            alpha,
            beta,
        )
        self.address = ctypes.addressof(self.task)  # (read, never written, by every call)

    @property
    def mode(self) -> int:
        """0: channel vectors, 1: position vectors (conv1d.c)."""
        return self.task.mode

    def __call__(self, x: np.ndarray, bias=None, z=None) -> np.ndarray:
        """activation(conv(x) + bias [M] + z (the output's shape)); x float32, read in place
        where its strides are whole floats (a transposed view: not copied first)."""
        strides = None
        if not x.flags.c_contiguous:
            strides = _float_strides(x)
            if strides is None:
                x = np.ascontiguousarray(x)
        y = np.empty(self.shape, np.float32)
        b = None
        if bias is not None:
            entry = cached_bias(self, bias, self.shape[1], "1-D conv")  # (alive: a local)
            b = entry[2]
        if z is not None:
            z = as_residual(z, y.shape)  # (a local: a converted copy stays alive)
        if self.ways == 1:  # (one call: no pool job, no copy of the task)
            xs = None if strides is None else (_I64 * 3)(*strides)
            status = core.lib.onyx_conv1d_f32(
                self.address, _input_addr(x), xs, _addr(y), b, _addr(z)
            )  # (x: _input_addr, a signal model's feed is a read-only view)
            if status:
                core.check(status, "1-D conv")
            return y
        task = _filled(self.task, x, y)
        task.bias, task.z = b, _addr(z)
        if strides is not None:
            task.sn, task.sc, task.sl = strides
        _run(core.lib.conv1d_range, task, self.cuts, self.ways, "1-D conv")
        return y


#: conv1d.c's post passes (onyx_conv1d_f32_post): MaxPool(2, 2) along the signal, an STFT's
#: magnitude sqrt(re * re + im * im + eps) of two ranges of output channels.
PAIR_MAX, MAGNITUDE = 1, 2


def conv1d_then(conv: Conv1d, kind: int, bins: int = 0, re0: int = 0, im0: int = 0, eps=0.0):
    """``run(x, bias=None)``: ``conv`` (no residual) and the post pass ``kind`` after it in one
    native call where the conv runs on one thread (its output kept in that thread's buffer,
    never an array), else the conv on the pool and the pass after it. PAIR_MAX gives
    (N, M, OL // 2), MAGNITUDE (N, bins, OL) from the channels re0 + c and im0 + c."""
    N, M, OL = conv.shape
    shape = (N, M, OL // 2) if kind == PAIR_MAX else (N, bins, OL)
    sel = (_I64 * 3)(bins, re0, im0)
    eps = float(np.float32(eps))
    fused, post, address = core.lib.onyx_conv1d_f32_post, core.lib.onyx_conv1d_post, conv.address
    empty, f32, what = np.empty, np.float32, "1-D conv"

    def run(x: np.ndarray, bias=None) -> np.ndarray:
        out = empty(shape, f32)
        if conv.ways != 1:  # (the conv's own call on the pool, then the pass)
            full = conv(x, bias)  # (a local: alive through the pass)
            status = post(address, _addr(full), kind, sel, eps, _addr(out))
            if status:
                core.check(status, what)
            return out
        strides = None
        if not x.flags.c_contiguous:
            strides = _float_strides(x)
            if strides is None:
                x = np.ascontiguousarray(x)
        entry = None if bias is None else cached_bias(conv, bias, M, what)  # (alive: a local)
        b = None if entry is None else entry[2]
        xs = None if strides is None else (_I64 * 3)(*strides)
        status = fused(address, _input_addr(x), xs, b, kind, sel, eps, _addr(out))
        if status:
            core.check(status, what)
        return out

    return run


def _float_strides(x: np.ndarray) -> tuple[int, int, int] | None:
    """x's strides in floats, or None where one is negative or not a whole float."""
    strides = tuple(v // 4 for v in x.strides)
    if any(v < 0 or v % 4 for v in x.strides):
        return None
    return strides


def bind(lib, isa: int) -> None:
    lib.conv1d_range = range_of(lib, "conv1d_f32")
    lib.onyx_conv1d_f32.argtypes = [_P] * 6
    lib.onyx_conv1d_f32.restype = ctypes.c_int
    lib.onyx_conv1d_f32_post.argtypes = [_P, _P, _P, _P, _I64, _P, ctypes.c_float, _P]
    lib.onyx_conv1d_f32_post.restype = ctypes.c_int
    lib.onyx_conv1d_post.argtypes = [_P, _P, _I64, _P, ctypes.c_float, _P]
    lib.onyx_conv1d_post.restype = ctypes.c_int


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
