"""The float32 conv (conv_f32.c): an implicit GEMM on AVX-512, with FusedConv's residual and
activation applied as it stores."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _P,
    _addr,
    _check_sizes,
    _even_cuts,
    _filled,
    _run,
    _ways,
    abi,
    as_residual,
    cached_bias,
    output_array,
    range_of,
)


@abi("conv_f32")
class _ConvF32(ctypes.Structure):
    _fields_ = (
        [(name, _P) for name in ("x", "w", "bias", "z", "y", "cols")]
        + [(name, _I64) for name in "N C H W M OH OW kh kw sh sw dh dw top left".split()]
        + [(name, _I64) for name in ("group", "kc", "strips", "per_part", "blocks", "wide")]
        + [(name, _I64) for name in ("raw", "xh", "xw", "xtop", "xleft")]
        + [("act", ctypes.c_int32), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]
        + [("ncols", _I64)]
    )


#: Rows of im2col columns packed at a time (kc x 48 floats, read by every panel's tile from L1
#: or L2): 256 rather than 128 halves the round trips of the partial sums through memory,
#: though a strip's columns then outgrow a 32 KB L1.
_CONV_KC = 256


def _conv_kc(K: int) -> int:
    """Rows of columns per block for K in all: about _CONV_KC, in equal blocks (a K of 288,
    a 3x3 conv over 32 channels, as one block, not 256 + 32: a block of a few rows pays the
    tile's loading and storing of its sums for little work)."""
    blocks = max(1, round(K / _CONV_KC))
    return -(-K // blocks)


#: Strips (of 48 pixels) and panels (of 8 output channels) per part of the work: each block
#: of panels' weights is read once per block of strips, and their sums (48 x 8 x 16 floats)
#: stay in L2. _CONV_PANELS is the least: a part of fewer strips takes more panels, as many
#: as _CONV_L2 bytes hold (their weights' and sums' share of a block of columns, and the
#: strips' columns): a small image's layer (7x7, 14x14) then packs its columns once in one
#: part, where blocks of 16 panels had them packed beforehand and read back from memory.
_CONV_STRIPS, _CONV_PANELS = 8, 16
_CONV_L2 = 768 << 10


def _panels_cap(per_part: int) -> int:
    """Panels per block whose working set (see _CONV_L2) fits, for per_part strips a part."""
    mr, nr = core.lib.conv_f32_tile
    columns = per_part * _CONV_KC * nr * 4
    per_panel = _CONV_KC * mr * 4 + per_part * mr * nr * 4
    return max(_CONV_PANELS, (_CONV_L2 - columns) // per_panel)


#: Largest set of columns packed beforehand for parts that share them (FloatConv).
_CONV_COLS_BYTES = 8 << 20


def _conv_parts(strips: int, panels: int, group: int, ways: int) -> tuple[int, int]:
    """Strips per part and blocks of panels: _CONV_STRIPS x _panels_cap, made smaller where
    that leaves fewer than 4 parts per thread (so that the threads finish together). Blocks
    of panels are split first, down to 4 panels: a part reads its panels' weights once for
    all its strips, and a deep layer's weights (9 MB for 512 -> 512 channels, 3x3) come from
    memory."""
    per_part = min(strips, _CONV_STRIPS)
    blocks = -(-panels // _panels_cap(per_part))
    want = 4 * ways if ways > 1 else 1

    def parts() -> int:
        return group * -(-strips // per_part) * blocks

    while parts() < want and -(-panels // (2 * blocks)) >= 4:
        blocks *= 2
    while parts() < want and per_part > 1:
        per_part = max(1, per_part // 2)
    while parts() < want and blocks < panels:
        blocks = min(panels, 2 * blocks)
    return _balanced(strips, panels, group, per_part, blocks, ways), blocks


def _busiest(strips: int, panels: int, group: int, per_part: int, blocks: int, ways: int) -> int:
    """The most tiles (strips x panels) that one of ``ways`` threads computes when the parts
    (group, block of panels, block of per_part strips) are cut evenly between them."""
    chunks, per_block = -(-strips // per_part), -(-panels // blocks)
    tiles = [
        min(per_part, strips - c * per_part) * min(per_block, panels - b * per_block)
        for _ in range(group)
        for b in range(blocks)
        for c in range(chunks)
    ]
    cuts = _even_cuts(len(tiles), ways)
    return max(sum(tiles[cuts[i] : cuts[i + 1]]) for i in range(ways))


def _balanced(strips: int, panels: int, group: int, per_part: int, blocks: int, ways: int) -> int:
    """Strips per part, down to half of per_part, that least loads the busiest thread: 88
    strips in parts of 8 leave one thread 6 parts and the other 5 (a tenth of the layer
    waiting on one thread), in parts of 4 11 each."""
    if ways == 1 or group * blocks * strips > 4096:  # (a large layer: many parts, even)
        return per_part
    return min(range(max(1, per_part // 2), per_part + 1),
               key=lambda p: (_busiest(strips, panels, group, p, blocks, ways), -p))  # fmt: skip


#: Panels of 8 output channels per part up to which a wide conv's tile reads its columns in
#: place (conv_f32.c's CF_IN_PLACE) rather than copying them first.
IN_PLACE_PANELS = 8

#: Most of a wide conv's row given to discarded pixels (its kw - 1 of W): beyond, the tile's
#: wasted work outweighs the packing it saves.
_WIDE_WASTE = 0.25

_scratch = threading.local()  # each thread's padded input of wide convs (grown, never shrunk)

#: Floats of a thread's regions (conv_f32.c's raw mode: each part pads the rows of the input
#: it reads, per image a region of a few rows of every channel, into its thread's buffer) up
#: to which a wide conv's parts pad their input: beyond (many channels of long rows), the
#: calling thread pads it alone, into one buffer of the whole padded input.
_RAW_PAD_FLOATS = 1 << 20


def _raw_floats(channels: int, wide: tuple[int, int, int], kernel, dilations) -> int:
    """The most floats of a raw conv's regions (conv_f32.c's region_rows, per_part + 1 of
    them) for ``channels`` per group and the padded input (or phases) H x W of ``wide``."""
    (_, W, mode), nr = wide, core.lib.conv_f32_tile[1]
    if mode == 2:
        reach = (kernel[0] - 1) // 2 * W + (kernel[1] - 1) // 2
    else:
        reach = (kernel[0] - 1) * dilations[0] * W + (kernel[1] - 1) * dilations[1]
    rows = (_CONV_STRIPS * nr + reach) // W + 2
    return (_CONV_STRIPS + 1) * channels * (4 if mode == 2 else 1) * rows * W


def _scratch_floats(n: int) -> np.ndarray:
    """n floats of this thread's scratch (a wide conv's padded input, read within the call)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < n:
        buf = _scratch.buf = np.empty(n, np.float32)
    return buf[:n]


def _wide(x_shape, kernel, out_shape, strides, dilations) -> tuple[int, int, int] | None:
    """(H, W, mode) of the padded input a conv reads in place (conv_f32.c's wide mode), or None
    where packing its columns is better (a 1x1 conv reads them in place anyway). Mode 1: a
    unit-stride conv; mode 2: a stride-2 one (a stem, a downsampling 3x3), whose input is
    split into its four (row, column) parity phases of H x W: each tap then reads one phase
    at a unit stride, where packing its columns took strided copies (a fifth of its time)."""
    if tuple(kernel) == (1, 1):
        return None
    if tuple(strides) == (2, 2) and tuple(dilations) == (1, 1):
        extra_w = (kernel[1] - 1) // 2
        if extra_w > _WIDE_WASTE * (out_shape[1] + extra_w):
            return None
        return out_shape[0] + (kernel[0] - 1) // 2, out_shape[1] + extra_w, 2
    if tuple(strides) != (1, 1):
        return None
    extra_w = (kernel[1] - 1) * dilations[1]
    if extra_w > _WIDE_WASTE * (out_shape[1] + extra_w):
        return None
    return out_shape[0] + (kernel[0] - 1) * dilations[0], out_shape[1] + extra_w, 1


#: Multiply-adds from which a strided 1x1 conv samples its input first (_sampled).
_SAMPLED_MACS = 1 << 22


def _sampled(x_shape, kernel, out_shape, strides, begin, out_channels) -> tuple | None:
    """(planes, H, W, OH, OW, sh, sw) of a strided 1x1 conv without padding before its input,
    run as a plain 1x1 on its input sampled at the stride (every sample inside it); else None.
    Packing its columns took a strided copy per strip and row of them, about as long as its
    multiply-adds (a ResNet's projection shortcut)."""
    (N, C, H, W), (OH, OW), (sh, sw) = x_shape, out_shape, strides
    if tuple(kernel) != (1, 1) or (sh, sw) == (1, 1) or any(begin):
        return None
    if N * OH * OW * C * out_channels < _SAMPLED_MACS:  # (the sampling's call then costs more)
        return None
    if (OH - 1) * sh >= H or (OW - 1) * sw >= W:  # (an end pad's rows or columns of zeros)
        return None
    return N * C, H, W, OH, OW, sh, sw


def _phase_job(planes: int, H: int, W: int, Hq: int, Wq: int, top: int, left: int) -> _ConvF32:
    """The task of conv_f32.c's phase job (onyx_conv_f32_phase_range): its fields x, N, H, W
    the input's planes, cols, xh, xw, xtop, xleft the phases'; x, cols and ncols set per call."""
    return _ConvF32(N=planes, H=H, W=W, xh=Hq, xw=Wq, xtop=top, xleft=left)


def conv_f32_ok() -> bool:
    """Whether the native float conv (:class:`FloatConv`) is built (it needs AVX-512)."""
    return core.lib is not None and bool(core.lib.conv_f32_range)


def pack_conv_f32(w: np.ndarray, group: int) -> np.ndarray:
    """Conv weights (M, C / group, kh, kw) in :func:`conv_f32`'s layout: per group, panels of
    MR output channels (zeros past the last), k-major: (group, panels, K, MR)."""
    mr = core.lib.conv_f32_tile[0]
    M, K = w.shape[0], w[0].size
    Mg = M // group
    panels = -(-Mg // mr)
    wp = np.zeros((group, panels * mr, K), np.float32)
    wp[:, :Mg] = w.reshape(group, Mg, K)
    return np.ascontiguousarray(wp.reshape(group, panels, mr, K).transpose(0, 1, 3, 2))


class FloatConv:
    """A 2-D float32 conv (conv_f32.c) set up for one input shape: x (N, C, H, W) with
    weights packed by :func:`pack_conv_f32` (M output channels, kernel (kh, kw)); begin: the
    top and left pads (the end pads are implied by out_shape); the activation a code of
    CONV_ACTIVATIONS (alpha: LeakyRelu's slope or Clip's min, beta: Clip's max).

    What does not depend on the data (the task's sizes, the work split) is made here once:
    a small layer's conv takes a few microseconds, as long as setting it up in Python did."""

    #: (its call takes ``out``: a fused Concat's convs write their parts of its output)
    writes_out = True

    __slots__ = (
        "bias",
        "cols",
        "cuts",
        "pack_cuts",
        "packed",
        "pad",
        "phase_job",
        "phases",
        "sampled",
        "shape",
        "task",
        "ways",
    )

    def __init__(
        self,
        x_shape,
        packed,
        M: int,
        kernel,
        out_shape,
        strides,
        dilations,
        begin,
        activation: int = 0,
        alpha: float = 0.0,
        beta: float = 0.0,
    ):
        (N, C, H, W), group = x_shape, packed.shape[0]
        _check_sizes("float conv", *x_shape, M, *kernel, *out_shape, *strides, *dilations, *begin)
        self.sampled = _sampled(x_shape, kernel, out_shape, strides, begin, M)
        if self.sampled is not None:  # (the conv of the sampled input: a plain 1x1)
            (N, C, H, W), strides = (N, C, *out_shape), (1, 1)
        P, K, nr = out_shape[0] * out_shape[1], packed.shape[2], core.lib.conv_f32_tile[1]
        strips, panels = -(-N * P // nr), packed.shape[1]
        if C % group or K != C // group * kernel[0] * kernel[1]:  # (the kernel reads C's)
            raise InvalidArgument(
                f"onyx native float conv: weights of {K} values per output for {C} channels"
            )
        # (a layer whose parts split the channels packs its columns once for all, below)
        _, blocks = _conv_parts(
            strips, panels, group, _ways(N * P * M * K, group * strips * panels)
        )
        wide = _wide(x_shape, kernel, out_shape, strides, dilations)
        # (a wide conv of few panels reads its columns in place: nothing to share)
        in_place = wide is not None and panels <= IN_PLACE_PANELS
        if blocks > 1 and not in_place and group * strips * K * nr * 4 <= _CONV_COLS_BYTES:
            wide = None  # (shared: packed once beforehand)
        self.pad = self.phases = self.phase_job = None
        raw = (0, 0, 0, 0, 0)
        mode = wide[2] if wide else 0
        # (each part pads the rows it reads, on its thread, as it reads them: no serial copy)
        own = bool(wide) and _raw_floats(C // group, wide, kernel, dilations) <= _RAW_PAD_FLOATS
        if mode == 2:  # the conv of the input's phases (N, C, 4, *wide), unpadded
            if own:  # (each part makes the phase rows it reads)
                raw = (1, H, W, *begin)
            else:
                self.phases = (N * C, H, W, *wide[:2], *begin, (kernel[1] - 1) // 2 + 48)
                self.phase_job = _phase_job(N * C, H, W, *wide[:2], *begin)
            (H, W), begin = wide[:2], (0, 0)
            strips = N * -(-out_shape[0] * W // nr)
        elif wide:  # the conv of the padded input (N, C, *wide), unpadded
            wide = wide[:2]
            if own:
                raw = (1, H, W, *begin)
            else:
                slack = (kernel[1] - 1) * dilations[1] + 48
                self.pad = ((N, C, *wide), (H, W), tuple(begin), slack)
            (H, W), begin = wide, (0, 0)
            strips = N * -(-out_shape[0] * W // nr)
        self.ways = _ways(N * P * M * K, group * strips * panels)
        per_part, blocks = _conv_parts(strips, panels, group, self.ways)
        parts = group * -(-strips // per_part) * blocks
        self.cuts = _even_cuts(parts, self.ways)
        self.packed, self.shape, self.bias = packed, (N, M, *out_shape), (None, None, None)
        # Parts that split the output channels would each pack every strip's columns: they
        # are packed once beforehand instead (a deep layer's are small), except where a
        # 1x1 conv reads them in place.
        plain = (
            tuple(kernel) == (1, 1)
            and tuple(strides) == (1, 1)
            and not any(begin)
            and tuple(out_shape) == (H, W)
        )
        self.cols = group * strips * K * nr
        if blocks == 1 or plain or wide or self.cols * 4 > _CONV_COLS_BYTES:
            self.cols = 0
        # (packing jobs: (group, block of K, strip), so that threads share a few strips' rows:
        # a 7x7 layer's 48 + 1 pixels as two jobs left one thread nearly all the packing)
        kc = _conv_kc(K)
        self.pack_cuts = _even_cuts(group * -(-K // kc) * strips, self.ways)
        self.task = _ConvF32(
            None,
            _addr(packed),
            None,
            None,
            None,
            None,
            N,
            C,
            H,
            W,
            M,
            *out_shape,
            *kernel,
            *strides,
            *dilations,
            *begin,
            group,
            kc,
            strips,
            per_part,
            blocks,
            mode,
            *raw,
            activation,
            alpha,
            beta,
        )

    def __call__(self, x: np.ndarray, bias=None, z=None, out=None) -> np.ndarray:
        """activation(conv(x) + bias [M] + z (the output's shape)); x C-contiguous float32;
        written into ``out`` where given (core.output_array)."""
        y = output_array(self.shape, out, "float conv")
        task = _filled(self.task, x, y)
        if self.sampled is not None:
            xp = self._sample(x)
            task.x = _addr(xp)
        elif self.pad is not None:
            xp = self._padded(x)  # (a local reference: read in the call)
            task.x = _addr(xp)
        elif self.phases is not None:
            xp = self._phased(x)
            task.x = _addr(xp)
        if bias is not None:
            entry = cached_bias(self, bias, self.task.M, "float conv")  # (alive: a local)
            task.bias = entry[2]
        if z is not None:
            z = as_residual(z, y.shape)  # (a local: a converted copy stays alive)
            task.z = _addr(z)
        if self.cols:
            cols = np.empty(self.cols, np.float32)
            task.cols, task.ncols = _addr(cols), cols.size
            _run(core.lib.conv_f32_pack_range, task, self.pack_cuts, self.ways)
        _run(core.lib.conv_f32_range, task, self.cuts, self.ways, "float conv")
        return y

    def _sample(self, x: np.ndarray) -> np.ndarray:
        """A strided 1x1 conv's input sampled at its stride (onyx_subsample_planes_f32), in
        this thread's scratch."""
        planes, H, W, OH, OW, sh, sw = self.sampled
        flat = _scratch_floats(planes * OH * OW)
        status = core.lib.onyx_subsample_planes_f32(
            _addr(x), planes, H, W, _addr(flat), OH, OW, sh, sw
        )
        core.check(status, "float conv")
        return flat

    def _phased(self, x: np.ndarray) -> np.ndarray:
        """x's (row, column) parity phases with their zero padding (onyx_phase_planes_f32),
        in this thread's scratch, and zero slack floats after them that the last strip's
        vectors read (into discarded pixels)."""
        planes, H, W, Hq, Wq, top, left, slack = self.phases
        flat = _scratch_floats(planes * 4 * Hq * Wq + slack)
        if self.ways > 1:  # (by planes, on the pool's threads)
            job = type(self.phase_job).from_buffer_copy(self.phase_job)
            job.x, job.cols, job.ncols = _addr(x), _addr(flat), flat.size
            _run(core.lib.conv_f32_phase_range, job, _even_cuts(planes, self.ways), self.ways)
        else:
            status = core.lib.onyx_phase_planes_f32(
                _addr(x), planes, H, W, _addr(flat), Hq, Wq, top, left
            )
            core.check(status, "float conv")
        flat[flat.size - slack :] = 0
        return flat

    def _padded(self, x: np.ndarray) -> np.ndarray:
        """x with its zero padding, in this thread's scratch, and slack floats after it that
        the last strip's vectors read (into discarded pixels)."""
        shape, (H, W), (top, left), slack = self.pad
        h, w = min(H, shape[2] - top), min(W, shape[3] - left)
        x = x.reshape(shape[0], shape[1], H, W)  # (a 1-D conv's input: height 1)
        flat = _scratch_floats(int(np.prod(shape)) + slack)
        xp = flat[: flat.size - slack].reshape(shape)
        xp[:, :, :top] = 0
        xp[:, :, top + h :] = 0
        xp[:, :, top : top + h, :left] = 0
        xp[:, :, top : top + h, left + w :] = 0
        xp[:, :, top : top + h, left : left + w] = x[:, :, :h, :w]
        flat[flat.size - slack :] = 0
        return flat


def bind(lib, isa: int) -> None:
    tile = (_I64 * 2)()
    lib.onyx_conv_f32_shape.argtypes = [_P]
    lib.onyx_conv_f32_shape.restype = None
    lib.onyx_conv_f32_shape(tile)
    lib.conv_f32_tile = tuple(tile)
    lib.onyx_pad_planes_f32.argtypes = [_P, _I64, _I64, _I64, _P, _I64, _I64, _I64, _I64]
    lib.onyx_pad_planes_f32.restype = ctypes.c_int
    lib.onyx_phase_planes_f32.argtypes = lib.onyx_pad_planes_f32.argtypes
    lib.onyx_phase_planes_f32.restype = ctypes.c_int
    lib.onyx_subsample_planes_f32.argtypes = lib.onyx_pad_planes_f32.argtypes
    lib.onyx_subsample_planes_f32.restype = ctypes.c_int
    avx512 = bool(isa & core.ISA_AVX512)
    lib.conv_f32_range = range_of(lib, "conv_f32") if avx512 else None
    lib.conv_f32_pack_range = range_of(lib, "conv_f32_pack") if avx512 else None
    lib.conv_f32_phase_range = range_of(lib, "conv_f32_phase") if avx512 else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
