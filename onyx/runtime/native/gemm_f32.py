"""The float32 GEMM against a constant packed B (gemm_f32.c): MatMul / Attention projections
of many rows."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import _I64, _P, _PARALLEL_MACS, _addr, _check_sizes, _element_cuts, _run, _ways, abi


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

    __slots__ = ("K", "N", "packed", "panels")

    def __init__(self, b: np.ndarray):
        K, N = b.shape
        _check_sizes("float GEMM", K, N)
        width = core.lib.sgemm_panel
        self.panels = -(-N // width)
        padded = np.zeros((K, self.panels * width), np.float32)
        padded[:, :N] = b
        self.packed = np.ascontiguousarray(padded.reshape(K, self.panels, width).transpose(1, 0, 2))
        self.K, self.N = K, N

    def __call__(
        self, a: np.ndarray, bias: np.ndarray | None = None, relu: bool = False
    ) -> np.ndarray | None:
        if core.lib is None or a.dtype != np.float32 or a.ndim != 2 or a.shape[1] != self.K:
            return None
        if bias is not None and (bias.dtype != np.float32 or bias.shape != (self.N,)):
            return None
        a = np.ascontiguousarray(a)
        bias = None if bias is None else np.ascontiguousarray(bias)
        M = a.shape[0]
        y = np.empty((M, self.N), np.float32)
        task = _SgemmTask(
            _addr(a),
            _addr(self.packed),
            _addr(y),
            M,
            self.K,
            self.N,
            self.K,
            self.N,
            _addr(bias),
            int(relu),
        )
        ways = _ways(M * self.K * self.N, self.panels, _PARALLEL_MACS)
        _run(core.lib.sgemm_range, task, _element_cuts(self.panels, 1, ways), ways, "float GEMM")
        return y


def bind(lib, isa: int) -> None:
    lib.onyx_sgemm_panel.restype = _I64
    lib.sgemm_panel = lib.onyx_sgemm_panel()
    # without AVX-512 the portable loop would be slower than BLAS: products stay on BLAS
    lib.sgemm_range = core.range_of(lib, "sgemm") if isa & core.ISA_AVX512 else None
