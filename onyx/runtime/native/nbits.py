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
        + [(name, _P) for name in ("dwords", "scales_t", "zeros_t")]
    )


#: Most rows of A the int8 kernel takes: beyond, one GEMM per dequantized panel is faster.
NBITS_INT8_ROWS = 16

#: Weight values (per row of A) worth a second thread: the kernels' time is reading bytes.
_PARALLEL_VALUES = 1 << 18


def _by_groups(values: np.ndarray) -> np.ndarray:
    """[N, k_blocks] as [ceil(N / 16), k_blocks, 16] (zeros past N)."""
    n, k_blocks = values.shape
    groups = -(-n // 16)
    padded = np.zeros((groups * 16, k_blocks), np.float32)
    padded[:n] = values
    return np.ascontiguousarray(padded.reshape(groups, 16, k_blocks).transpose(0, 2, 1))


def nbits_ok() -> bool:
    """Whether the native MatMulNBits kernels are loaded."""
    return core.lib is not None and bool(core.lib.nbits_dequant_range)


class NBitsProduct:
    """One MatMulNBits weight set up once for nbits.c (sizes checked, the task filled): its
    float32 panels (:meth:`dequantize`) and the accuracy-level-4 product (:meth:`int8`).
    The arrays must stay alive and unchanged while this lives (a session's constants)."""

    __slots__ = ("arrays", "dwords", "prepared", "task", "transposed")

    def __init__(
        self, packed, scales, zero_points, default_zero: float, *, K: int, bits: int, block: int
    ):
        N, k_blocks = scales.shape
        _check_sizes("MatMulNBits", N, K, k_blocks, block)
        self.arrays = (packed, scales, zero_points)
        self.task = _NBitsTask(
            None,
            None,
            _addr(packed),
            _addr(scales),
            _addr(zero_points),
            None,
            0,
            K,
            N,
            k_blocks,
            block,
            bits,
            0,
            default_zero,
        )
        self.prepared: dict[int, tuple] = {}
        self.dwords: np.ndarray | None = None
        # the scales (and zero points) as [column group of 16][block][16 columns]: the VNNI
        # kernels read a group's as vectors (gathering them costs a GEMV more than its products)
        self.transposed = [None if v is None else _by_groups(v) for v in (scales, zero_points)]
        self.task.scales_t, self.task.zeros_t = (_addr(v) for v in self.transposed)

    @staticmethod
    def fits(packed, scales, zero_points) -> bool:
        """Whether the arrays are laid out as the kernels read them."""
        arrays = (packed, scales) + (() if zero_points is None else (zero_points,))
        return (
            all(a.flags.c_contiguous for a in arrays)
            and packed.dtype == np.uint8
            and scales.dtype == np.float32
            and (
                zero_points is None
                or zero_points.dtype == np.float32
                and zero_points.shape == scales.shape
            )
        )

    def dequantize(self, n0: int, n1: int, out: np.ndarray) -> bool:
        """Rows n0:n1 of the float32 weight into ``out`` [n1 - n0, k_blocks * block] (C
        contiguous), (q - zero_point) * scale as the numpy kernel rounds it."""
        t = self.task
        if not nbits_ok() or out.shape != (n1 - n0, t.k_blocks * t.block):
            return False
        if not out.flags.c_contiguous:
            return False
        task = _NBitsTask.from_buffer_copy(t)
        task.out, task.row0 = _addr(out), n0
        rows = n1 - n0
        ways = _ways(rows * t.k_blocks * t.block, rows, _PARALLEL_VALUES)
        _run(core.lib.nbits_dequant_range, task, _even_cuts(rows, ways), ways, "MatMulNBits")
        return True

    def _prompt_ok(self) -> bool:
        """Whether many rows take the int8 GEMM (4-bit blocks of 32 on AVX512-VNNI), its
        repacked weight made on first use."""
        t = self.task
        if t.bits != 4 or t.block != 32 or not core.vnni:
            return False
        if self.dwords is None:
            # B's 4-byte words as [column group of 16][word][16 columns]: one vector a word
            packed = self.arrays[0]
            groups = -(-t.N // 16)
            words = np.zeros((groups * 16, packed.shape[1] // 4, 4), np.uint8)
            words[: t.N] = packed.reshape(t.N, -1, 4)
            self.dwords = np.ascontiguousarray(
                words.reshape(groups, 16, -1, 4).transpose(0, 2, 1, 3)
            )
        return True

    def int8(self, a2: np.ndarray, y2: np.ndarray) -> bool:
        """accuracy_level 4 for the rows of a2 [M, K]: y2 [M, N] with onnxruntime's integer
        products per block, in the numpy kernel's float ops (its bits up to NBITS_INT8_ROWS
        rows, where numpy switches to a float GEMM). More rows only on AVX512-VNNI."""
        M = a2.shape[0]
        if core.lib is None or not y2.flags.c_contiguous or a2.shape[1] != self.task.K:
            return False
        prepared = self.prepared.get(M)
        if prepared is None:  # (per row count: the same for every decoding step)
            prepared = self._prepare(M)
            if prepared is None:
                return False
        template, _cuts, cuts_at, parts, ways = prepared
        if a2.dtype != np.float32 or not a2.flags.c_contiguous:
            a2 = np.ascontiguousarray(a2, np.float32)
        task = _NBitsTask.from_buffer_copy(template)
        task.a, task.y = _addr(a2), _addr(y2)
        # (the pool call of core._run, its cuts' address kept: a decoding step makes 20 of
        # these calls, each a few microseconds of work)
        status = core.lib.onyx_parallel(
            core.lib.nbits_int8_range, ctypes.byref(task), cuts_at, parts, ways
        )
        if status:
            core.check(status, "MatMulNBits")
        return True

    def _prepare(self, M: int):
        """(task template, cuts, parts, threads) for M rows, or None where the kernel does not
        take them."""
        t = self.task
        if not nbits_ok() or t.bits not in (4, 8):
            return None
        if M > NBITS_INT8_ROWS and not self._prompt_ok():
            return None
        template = _NBitsTask.from_buffer_copy(t)
        template.M = M
        if M > NBITS_INT8_ROWS:
            template.dwords = _addr(self.dwords)
        groups = -(-t.N // core.lib.nbits_columns)
        ways = _ways(M * t.N * t.k_blocks * t.block, groups, _PARALLEL_VALUES)
        cuts = _even_cuts(groups, ways)
        self.prepared[M] = (template, cuts, _addr(cuts), len(cuts) - 1, ways)
        return self.prepared[M]


def nbits_product(packed, scales, zero_points, default_zero, *, K, bits, block):
    """A :class:`NBitsProduct` for these arrays, or None where the native kernels do not
    apply (not loaded, another layout)."""
    if not nbits_ok() or not NBitsProduct.fits(packed, scales, zero_points):
        return None
    return NBitsProduct(packed, scales, zero_points, default_zero, K=K, bits=bits, block=block)


def bind(lib, isa: int) -> None:
    lib.onyx_nbits_columns.restype = _I64
    lib.nbits_columns = lib.onyx_nbits_columns()
    lib.nbits_dequant_range = core.range_of(lib, "nbits_dequant")
    lib.nbits_int8_range = core.range_of(lib, "nbits_int8")


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
