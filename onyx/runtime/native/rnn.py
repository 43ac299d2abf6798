"""The LSTM and GRU recurrences (rnn.c, AVX-512)."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _INT,
    _P,
    _PARALLEL_MACS,
    _addr,
    _even_cuts,
    _input_addr,
    _ways,
    abi,
)
from .conv_f32 import conv_f32_ok


@abi("recurrence")
class _Recurrence(ctypes.Structure):
    _fields_ = (
        [(n, _P) for n in ("xs", "x", "w", "bias")]
        + [("n_in", _I64)]
        + [(n, _P) for n in ("rt", "h0", "c0", "rbh", "ys", "cs")]
        + [(n, _I64) for n in ("steps", "dirs", "batch", "H", "reverse")]
    )


class Inputs(NamedTuple):
    """The inputs for rnn.c to project itself (xs = x . w + bias) rather than projections
    made beforehand: x [steps, batch, n_in], w [n_in, dirs * gates * H] (the weights
    transposed), bias [dirs * gates * H], float32 C-contiguous. For a few steps at batch 1, where a second native call and the
    projections' transposes cost more than the product."""

    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray


class Rows(NamedTuple):
    """Input projections made beforehand as rows, xs [steps, batch, dirs * gates * H] (biases
    in), float32 C-contiguous: a GEMM's output, read by each step as it stands."""

    xs: np.ndarray


def recurrence_ok(hidden: int, steps: int, batch: int) -> bool:
    """Whether :func:`lstm_f32` and :func:`gru_f32` (and their projection on conv_f32) run here:
    AVX-512, H a multiple of 16, steps x batch a 32-bit gather's stride apart."""
    return (
        core.lib is not None
        and bool(core.lib.lstm)
        and conv_f32_ok()
        and hidden % 16 == 0
        and 0 < steps * batch < 1 << 25
    )


def lstm_f32(xs, rt: np.ndarray, h0: np.ndarray, c0: np.ndarray, reverse):
    """The common LSTM's recurrence (rnn.c): xs [dirs, 4, H, steps, batch] input projections
    (gates i, o, f, c; biases in) or :class:`Inputs` to project, rt [dirs, H / 16, H, 4, 16] the recurrent weights, h0 and
    c0 [dirs, batch, H], reverse: per direction, whether it runs backwards in time. Every time
    step's H and C, [steps, dirs, batch, H] each."""
    return _recurrence(core.lib.lstm, xs, rt, h0, c0, None, reverse)


def gru_f32(xs, rt: np.ndarray, rbh: np.ndarray, h0: np.ndarray, reverse):
    """PyTorch's GRU's recurrence (linear_before_reset; rnn.c): xs [dirs, 3, H, steps, batch]
    (gates z, r, h; biases in but the candidate's recurrent one, rbh [dirs, H]), rt [dirs, H /
    16, H, 3, 16], h0 [dirs, batch, H], reverse as :func:`lstm_f32`'s; every time step's H,
    [steps, dirs, batch, H]."""
    return _recurrence(core.lib.gru, xs, rt, h0, None, rbh, reverse)[0]


def _recurrence(fn, xs, rt, h0, c0, rbh, reverse):
    dirs, H = rt.shape[0], rt.shape[2]
    gates = rt.shape[3]
    inputs = xs if isinstance(xs, Inputs) else None
    if inputs is not None:  # (rnn.c writes the projections here first)
        steps, batch, n_in = inputs.x.shape
        xs = np.empty((dirs, gates, H, steps, batch), np.float32)
    elif isinstance(xs, Rows):
        xs = np.ascontiguousarray(xs.xs, np.float32)
        steps, batch, n_in = xs.shape[0], xs.shape[1], -1
        if xs.shape[2] != dirs * gates * H:
            raise InvalidArgument(
                f"projections of {xs.shape[2]} columns, expected {dirs * gates * H}"
            )
    else:
        steps, batch, n_in = xs.shape[3], xs.shape[4], 0
    ys = np.empty((steps, dirs, batch, H), np.float32)
    cs = np.empty_like(ys) if c0 is not None else None
    keep = [None if a is None else np.ascontiguousarray(a, np.float32) for a in (h0, c0, rbh)]
    backwards = sum(1 << d for d, rev in enumerate(reverse) if rev)
    x, w, bias = inputs if inputs is not None else (None, None, None)
    t = _Recurrence(
        _addr(xs),
        _addr(x),
        _addr(w),
        _addr(bias),
        n_in,
        _addr(rt),
        *map(_addr, keep),
        _addr(ys),
        _addr(cs),
        steps,
        dirs,
        batch,
        H,
        backwards,
    )
    parts = dirs * (H // 16)
    ways = _ways(gates * H * H * batch * dirs, parts, _PARALLEL_MACS // 4)
    cuts = _even_cuts(parts, ways)
    core.check(fn(ctypes.byref(t), _addr(cuts), len(cuts) - 1, ways), "recurrence")
    return ys, cs


class LstmRecurrence:
    """:func:`lstm_f32` of inputs projected by rnn.c (:class:`Inputs`) for one node and X's
    shape: the task's constant fields (weights, bias, zero states, sizes) set once, and a call
    one native call (onyx_lstm_run) that fills in X, the states and the buffers, one array
    for the outputs and rnn.c's projections (at batch 1, filling the task's fields from Python and copying
    the last states out made most of the call)."""

    __slots__ = ("address", "cuts", "keep", "out_shape", "parts", "serial", "steps", "task", "work")

    def __init__(
        self,
        rt: np.ndarray,
        w: np.ndarray,
        bias: np.ndarray,
        h0: np.ndarray,
        c0: np.ndarray,
        reverse,
        x_shape: tuple,
    ):
        dirs, H, gates = rt.shape[0], rt.shape[2], rt.shape[3]
        steps, batch, n_in = x_shape
        # Y, C, Y_h, Y_c, then the projections (gates x steps states' worth)
        self.steps, self.out_shape = steps, ((2 + gates) * steps + 2, dirs, batch, H)
        self.keep = keep = [np.ascontiguousarray(a, np.float32) for a in (w, bias, rt, h0, c0)]
        backwards = sum(1 << d for d, rev in enumerate(reverse) if rev)
        self.task = _Recurrence(
            None,
            None,
            *map(_addr, keep[:2]),
            n_in,
            *map(_addr, keep[2:]),
            None,
            None,
            None,
            steps,
            dirs,
            batch,
            H,
            backwards,
        )
        self.address = ctypes.addressof(self.task)  # (read, never written, by every call)
        self.parts = dirs * (H // 16)
        self.work = gates * H * H * batch * dirs
        self.cuts = _even_cuts(self.parts, 1)
        self.serial = _addr(self.cuts) if self.work < _PARALLEL_MACS // 4 else None

    def _split(self) -> tuple:
        """(the cuts' address, ways, the cuts array to keep alive through the call): one
        thread for a small recurrence, else even cuts over the ways the work is worth."""
        if self.serial is not None:
            return self.serial, 1, None
        ways = _ways(self.work, self.parts, _PARALLEL_MACS // 4)
        even = _even_cuts(self.parts, ways)
        return _addr(even), ways, even

    def __call__(self, x: np.ndarray, h0: np.ndarray | None = None, c0: np.ndarray | None = None):
        """Y (every step's H, [steps, dirs, batch, H]), Y_h and Y_c ([dirs, batch, H], the
        last step's H and C) of x [steps, batch, n_in] from the initial states h0 and c0
        [dirs, batch, H] (float32; None: zeros). C-contiguous views of one array."""
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if h0 is not None and not h0.flags.c_contiguous:
            h0 = np.ascontiguousarray(h0)
        if c0 is not None and not c0.flags.c_contiguous:
            c0 = np.ascontiguousarray(c0)
        out = np.empty(self.out_shape, np.float32)
        cuts, ways, even = self._split()  # (even: kept through the call)
        status = core.lib.onyx_lstm_run(
            self.address,
            _input_addr(x),
            None if h0 is None else _input_addr(h0),
            None if c0 is None else _input_addr(c0),
            _addr(out),
            cuts,
            ways,
            ways,
        )
        if status:
            core.check(status, "lstm")
        steps = self.steps
        return out[:steps], out[2 * steps], out[2 * steps + 1]

    def batch_first(self, x: np.ndarray, h0: np.ndarray | None = None, c0=None):
        """__call__ for the layout-1 LSTM at batch 1 (x [1, steps, n_in], the states [1, dirs,
        H]), whose inputs' and outputs' bytes are the time-major ones: Y [1, steps, dirs, H],
        Y_h and Y_c [1, dirs, H], C-contiguous views of one array. Small inputs are passed as
        bytes (a C-ordered copy of any layout: cheaper than checking and addressing a view)."""
        rows, dirs, _, H = self.out_shape
        out = np.empty((1, rows, dirs, H), np.float32)
        cuts, ways, even = self._split()  # (even: kept through the call)
        status = core.lib.onyx_lstm_run(
            self.address, _bytes(x), _bytes(h0), _bytes(c0), _addr(out), cuts, ways, ways
        )
        if status:
            core.check(status, "lstm")
        steps = self.steps
        return out[:, :steps], out[:, 2 * steps], out[:, 2 * steps + 1]


#: Bytes up to which _bytes copies an input (past it, a copy costs more than its address).
_SMALL_INPUT_BYTES = 1 << 16


def _bytes(a: np.ndarray | None):
    """What a native call reads a float32 input through: a small one's C-ordered bytes (one
    copy, cheaper than looking at its flags and address), a large one's address where it is
    C-contiguous, else its C-ordered bytes too (an object the call's arguments keep alive: a
    copy's bare address would outlive the copy); None stays None."""
    if a is None:
        return None
    if a.nbytes <= _SMALL_INPUT_BYTES or not a.flags.c_contiguous:
        return a.tobytes()
    return _input_addr(a)


class GruRecurrence(LstmRecurrence):
    """:class:`LstmRecurrence`'s GRU (PyTorch's: linear_before_reset, rnn.c's onyx_gru_run):
    rbh [dirs, H] the candidate gate's recurrent bias; a call gives Y and Y_h."""

    __slots__ = ()

    def __init__(self, rt, w, bias, rbh, h0, reverse, x_shape: tuple):
        super().__init__(rt, w, bias, h0, h0, reverse, x_shape)
        dirs, gates, H = rt.shape[0], rt.shape[3], rt.shape[2]
        steps, batch = x_shape[:2]
        self.out_shape = ((1 + gates) * steps + 1, dirs, batch, H)  # Y, Y_h, projections
        self.keep.append(np.ascontiguousarray(rbh, np.float32))
        self.task.rbh = _addr(self.keep[-1])

    def __call__(self, x: np.ndarray, h0: np.ndarray | None = None, c0=None):
        """Y ([steps, dirs, batch, H]) and Y_h ([dirs, batch, H]) of x from h0 (as
        :class:`LstmRecurrence`'s)."""
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if h0 is not None and not h0.flags.c_contiguous:
            h0 = np.ascontiguousarray(h0)
        out = np.empty(self.out_shape, np.float32)
        cuts, ways, even = self._split()  # (even: kept through the call)
        status = core.lib.onyx_gru_run(
            self.address,
            _input_addr(x),
            None if h0 is None else _input_addr(h0),
            _addr(out),
            cuts,
            ways,
            ways,
        )
        if status:
            core.check(status, "gru")
        steps = self.steps
        return out[:steps], out[steps]


def bind(lib, isa: int) -> None:
    avx512 = bool(isa & core.ISA_AVX512)
    lib.lstm, lib.gru = (lib.onyx_lstm, lib.onyx_gru) if avx512 else (None, None)
    for fn in (lib.lstm, lib.gru) if avx512 else ():
        fn.restype, fn.argtypes = _INT, [_P, _P, _I64, _I64]
    lib.onyx_lstm_run.restype, lib.onyx_lstm_run.argtypes = _INT, [_P] * 6 + [_I64, _I64]
    lib.onyx_gru_run.restype, lib.onyx_gru_run.argtypes = _INT, [_P] * 5 + [_I64, _I64]


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
