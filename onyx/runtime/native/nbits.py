"""MatMulNBits' block-quantized weights (nbits.c): the float32 panel of a weight, and the
accuracy-level-4 product of a few rows (decoding) with int8 dot products."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import _I64, _P, _addr, _check_sizes, _even_cuts, _run, _ways, abi


@abi("nbits_task")
class _NBitsTask(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("a", "y", "packed", "scales", "zero_points", "out")]
        + [(name, _I64) for name in ("M", "K", "N", "k_blocks", "block", "bits", "row0")]
        + [("default_zero", ctypes.c_float)]
    )


#: Most rows of A the int8 kernel takes: beyond, one GEMM per dequantized panel is faster.
NBITS_INT8_ROWS = 16

#: Weight values (per row of A) worth a second thread: the kernels' time is reading bytes.
_PARALLEL_VALUES = 1 << 18


def nbits_ok() -> bool:
    """Whether the native MatMulNBits kernels are loaded."""
    return core.lib is not None and bool(core.lib.nbits_dequant_range)


def _task(packed, scales, zero_points, default_zero, *, K, bits, block) -> _NBitsTask:
    N, k_blocks = scales.shape
    _check_sizes("MatMulNBits", N, K, k_blocks, block)
    return _NBitsTask(None, None, _addr(packed), _addr(scales), _addr(zero_points), None,
                      0, K, N, k_blocks, block, bits, 0, default_zero)  # fmt: skip


def _arrays_ok(packed, scales, zero_points) -> bool:
    arrays = (packed, scales) + (() if zero_points is None else (zero_points,))
    return (
        all(a.flags.c_contiguous for a in arrays)
        and scales.dtype == np.float32
        and (
            zero_points is None
            or zero_points.dtype == np.float32
            and zero_points.shape == scales.shape
        )
    )


def dequantize_rows(packed, scales, zero_points, default_zero, n0, n1, *, K, bits, block, out):
    """Rows n0:n1 of the float32 weight [n1 - n0, k_blocks * block] into ``out`` (C
    contiguous), (q - zero_point) * scale as the numpy kernel rounds it. False where the
    native kernel does not apply (then ``out`` is untouched)."""
    if not nbits_ok() or not _arrays_ok(packed, scales, zero_points):
        return False
    task = _task(packed, scales, zero_points, default_zero, K=K, bits=bits, block=block)
    if out.shape != (n1 - n0, task.k_blocks * block) or not out.flags.c_contiguous:
        return False
    task.out, task.row0 = _addr(out), n0
    rows = n1 - n0
    ways = _ways(rows * task.k_blocks * block, rows, _PARALLEL_VALUES)
    _run(core.lib.nbits_dequant_range, task, _even_cuts(rows, ways), ways, "MatMulNBits")
    return True


def int8_product(a2, packed, scales, zero_points, default_zero, *, bits, block, y2):
    """accuracy_level 4 for the rows of a2 [M, K] (at most NBITS_INT8_ROWS): y2 [M, N]
    exactly as the numpy kernel computes it. False where the native kernel does not apply."""
    M, K = a2.shape
    if (not nbits_ok() or M > NBITS_INT8_ROWS or bits not in (4, 8)
            or not _arrays_ok(packed, scales, zero_points)):  # fmt: skip
        return False
    if not y2.flags.c_contiguous:
        return False
    a2 = np.ascontiguousarray(a2, np.float32)
    task = _task(packed, scales, zero_points, default_zero, K=K, bits=bits, block=block)
    task.M, task.a, task.y = M, _addr(a2), _addr(y2)
    groups = -(-task.N // core.lib.nbits_columns)
    ways = _ways(M * task.N * task.k_blocks * block, groups, _PARALLEL_VALUES)
    _run(core.lib.nbits_int8_range, task, _even_cuts(groups, ways), ways, "MatMulNBits")
    return True


def bind(lib, isa: int) -> None:
    lib.onyx_nbits_columns.restype = _I64
    lib.nbits_columns = lib.onyx_nbits_columns()
    lib.nbits_dequant_range = core.range_of(lib, "nbits_dequant")
    lib.nbits_int8_range = core.range_of(lib, "nbits_int8")
