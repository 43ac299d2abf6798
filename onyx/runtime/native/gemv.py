"""The float32 GEMV of a few rows (gemv.c, AVX-512): Gemm and 1x1 convs of one pixel."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    WorkSplit,
    _addr,
    _even_cuts,
    _filled,
    _run,
    _ways,
    abi,
    bound_float_call,
    bound_task,
    range_of,
)


@abi("gemv_f32")
class _GemvF32(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("x", "w", "c", "z", "y")]
        + [(name, _I64) for name in ("M", "K", "N", "trans")]
        + [("alpha", ctypes.c_float), ("beta", ctypes.c_float), ("act", ctypes.c_int32)]
        + [("act_alpha", ctypes.c_float), ("act_beta", ctypes.c_float)]
    )


#: Most rows of x the GEMV takes (_core's: callers read it without importing this family).
GEMV_ROWS = core.GEMV_ROWS


#: Weights (multiply-adds per row) worth a second thread: reading them is the GEMV's time.
_GEMV_PARALLEL = _PARALLEL_MACS // 4


def gemv_ok() -> bool:
    """Whether the native float GEMV (:class:`FloatGemv`) is built (it needs AVX-512)."""
    return core.lib is not None and bool(core.lib.gemv_range)


class FloatGemv:
    """y = act(alpha * x @ W' + beta * c + z) (gemv.c) for x of ``rows`` (at most GEMV_ROWS)
    rows of K float32 values: W' is w (K, N), or w (N, K) transposed when ``trans``. c is
    [N] (Gemm's C, a conv's bias), z the output's shape (FusedConv's residual), the activation
    a code of CONV_ACTIVATIONS (act_alpha, act_beta: its parameters, as FloatConv's).
    The work split is made here once, per weight and row count."""

    __slots__ = ("cuts", "shape", "task", "w", "ways")

    def __init__(
        self,
        w: np.ndarray,
        trans: bool,
        rows: int,
        *,
        alpha: float = 1.0,
        beta: float = 1.0,
        activation: int = 0,
        act_alpha: float = 0.0,
        act_beta: float = 0.0,
    ):
        self.w = np.ascontiguousarray(w, np.float32)
        N, K = self.w.shape if trans else self.w.shape[::-1]
        blocks = -(-N // core.lib.gemv_block)
        self.ways = _ways(rows * N * K, blocks, _GEMV_PARALLEL)
        self.cuts = _even_cuts(blocks, self.ways)
        self.shape = (rows, N)
        self.task = _GemvF32(
            None,
            _addr(self.w),
            None,
            None,
            None,
            rows,
            K,
            N,
            int(trans),
            alpha,
            beta,
            activation,
            act_alpha,
            act_beta,
        )

    def __call__(self, x: np.ndarray, c=None, z=None) -> np.ndarray:
        """x (rows, K) C-contiguous float32; c [N] or None; z (rows, N) or None."""
        y = np.empty(self.shape, np.float32)
        task = _filled(self.task, x, y)
        if c is not None:
            c = np.ascontiguousarray(c, np.float32)
            task.c = _addr(c)
        if z is not None:
            z = np.ascontiguousarray(np.broadcast_to(z, self.shape), np.float32)
            task.z = _addr(z)
        _run(core.lib.gemv_range, task, self.cuts, self.ways)
        return y

    def bound(self, c=None):
        """``call(x)`` = ``self(x, c)`` for a constant ``c`` (registry.binds): the task made
        once with c's address; x (rows, K) float32, any layout."""
        template = _GemvF32.from_buffer_copy(self.task)
        if c is not None:
            c = np.ascontiguousarray(c, np.float32)
            template.c = _addr(c)
        # (split per thread setting as __init__ splits: the bound call outlives a change)
        M, K, N = self.task.M, self.task.K, self.task.N
        blocks = -(-N // core.lib.gemv_block)
        split = WorkSplit(M * N * K, blocks, _GEMV_PARALLEL, lambda ways: _even_cuts(blocks, ways))
        run = bound_task(template, core.lib.gemv_range, split, ("x", "y"))
        return bound_float_call(run, self.shape, (self, c))


def bind(lib, isa: int) -> None:
    lib.onyx_gemv_f32_block.restype = _I64
    lib.gemv_block = lib.onyx_gemv_f32_block() if isa & core.ISA_AVX512 else 0
    lib.gemv_range = range_of(lib, "gemv_f32") if lib.gemv_block else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
