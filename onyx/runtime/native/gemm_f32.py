"""The float32 GEMM against a constant packed B (gemm_f32.c): MatMul / Attention projections
of many rows."""

from __future__ import annotations

import ctypes
from ctypes import byref

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    WorkSplit,
    _addr,
    _check_sizes,
    _element_cuts,
    abi,
    bound_float_call,
    bound_task,
)


@abi("sgemm_task")
class _SgemmTask(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("a", "packed", "y")]
        + [(name, _I64) for name in ("M", "K", "N", "lda", "ldy")]
        + [("bias", _P), ("relu", _I64)]
    )


#: Fewest rows of A worth the packed GEMM (fewer: BLAS, or the GEMV of Gemm).
SGEMM_ROWS = 16


def sgemm_ok() -> bool:
    """Whether the native float GEMM is loaded (its AVX-512 kernel: BLAS is faster than the
    portable loop)."""
    return core.lib is not None and bool(core.lib.sgemm_range)


class PackedGemm:
    """A constant float32 B [K, N] packed once ([panels][K][32]); ``y = gemm(a)`` for
    C-contiguous float32 A [M, K], optionally plus a float32 ``bias`` [N] and then ReLU. B's
    array must stay alive while this lives."""

    __slots__ = ("K", "N", "packed", "panels", "_packed_at", "_splits", "_bias")

    def __init__(self, b: np.ndarray):
        K, N = b.shape
        _check_sizes("float GEMM", K, N)
        width = core.lib.sgemm_panel
        self.panels = -(-N // width)
        padded = np.zeros((K, self.panels * width), np.float32)
        padded[:, :N] = b
        self.packed = np.ascontiguousarray(padded.reshape(K, self.panels, width).transpose(1, 0, 2))
        self.K, self.N = K, N
        self._packed_at = _addr(self.packed)
        #: (rows, the thread setting) -> (cuts, their address, parts, threads): a node's calls
        #: meet the same few row counts, so each call skips working its split out again
        self._splits: dict = {}
        #: (the last read-only bias array, its address): a node passes the same constant bias
        #: every call, and a read-only array's address costs a microsecond to find (held: no
        #: reused id)
        self._bias: tuple = (None, None)

    def _split(self, M: int) -> WorkSplit:
        """The work split of A's M rows (made per thread setting: WorkSplit), kept per M for
        the direct calls and the bound ones alike."""
        split = self._splits.get(M)
        if split is None:
            if len(self._splits) >= 8:  # (a model fed ever new shapes)
                self._splits.clear()
            panels = self.panels
            split = self._splits[M] = WorkSplit(
                M * self.K * self.N, panels, _PARALLEL_MACS, lambda w: _element_cuts(panels, 1, w)
            )
        return split

    def _bias_at(self, bias: np.ndarray | None) -> int | None:
        if bias is None:
            return None
        held, at = self._bias
        if held is bias:
            return at
        bias = np.ascontiguousarray(bias)  # (1-D: a copy only when strided)
        at = _addr(bias)
        if not bias.flags.writeable:  # (a constant's buffer never moves)
            self._bias = (bias, at)
        return at

    def __call__(
        self, a: np.ndarray, bias: np.ndarray | None = None, relu: bool = False
    ) -> np.ndarray | None:
        if core.lib is None or a.dtype != np.float32 or a.ndim != 2 or a.shape[1] != self.K:
            return None
        if bias is not None and (bias.dtype != np.float32 or bias.shape != (self.N,)):
            return None
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        M, K, N = a.shape[0], self.K, self.N
        y = np.empty((M, N), np.float32)
        cuts_at, parts, ways, _ = self._split(M)()
        task = _SgemmTask(
            _addr(a), self._packed_at, _addr(y), M, K, N, K, N, self._bias_at(bias), int(relu)
        )
        status = core.lib.onyx_parallel(core.lib.sgemm_range, byref(task), cuts_at, parts, ways)
        if status:
            core.check(status, "float GEMM")
        return y

    def bound(self, M: int, bias: np.ndarray | None = None, relu: bool = False):
        """``call(a)`` = ``self(a, bias, relu)`` for float32 A [M, K] of any layout and a
        constant ``bias`` (registry.binds): the split and the constants' addresses found
        once."""
        if bias is not None:
            bias = np.ascontiguousarray(bias)
        K, N = self.K, self.N
        split = self._split(M)
        template = _SgemmTask(None, self._packed_at, None, M, K, N, K, N, _addr(bias), int(relu))
        run = bound_task(template, core.lib.sgemm_range, split, ("a", "y"), "float GEMM")
        return bound_float_call(run, (M, N), (self, bias))


def bind(lib, isa: int) -> None:
    lib.onyx_sgemm_panel.restype = _I64
    lib.sgemm_panel = lib.onyx_sgemm_panel()
    # without AVX-512 the portable loop would be slower than BLAS: products stay on BLAS
    lib.sgemm_range = core.range_of(lib, "sgemm") if isa & core.ISA_AVX512 else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
