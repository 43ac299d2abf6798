"""Channels-last float32 kernels (nhwc.c): the convs and pixel means of the optimizer's layout
chains (optimizer/layout.py), on AVX-512. Each is set up once per constant weight and input
shape (geometry, packed weights, the work split), so a call fills in two pointers."""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import weakref

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    _addr,
    _check_sizes,
    _element_cuts,
    _even_cuts,
    _input_addr,
    _ways,
    abi,
    check,
    range_of,
)

_FIELDS = (
    *("kind", "N", "C", "H", "W", "M", "OH", "OW", "kh", "kw", "sh", "sw", "dh", "dw"),
    *("top", "left", "xs_n", "xs_c", "xs_h", "xs_w", "act"),
)


@abi("nhwc_task")
class _NhwcTask(ctypes.Structure):
    _fields_ = [
        ("x", _P),
        ("w", _P),
        ("bias", _P),
        ("y", _P),
        *((name, _I64) for name in _FIELDS),
        ("alpha", ctypes.c_float),
        ("beta", ctypes.c_float),
        ("z", _P),
        ("s", _P),
    ]


#: nhwc.c's kinds of task.
CONV, POINTWISE, DEPTHWISE, MEAN = 0, 1, 2, 3

#: The work worth a second thread, lower than other kernels' (_PARALLEL_MACS): a MobileNet's
#: small layers come one after another, so the pool's threads are still spinning from the last
#: one (a hand-off costs about a microsecond), and a layer left on one thread between two split
#: ones reads the other thread's half of its input out of that core's cache (the halves line
#: up: each thread keeps the same rows of every layer). The depthwise conv does one
#: multiply-add per lane where a GEMM tile does several: its threshold is lower still.
_GROUP1_MACS = _PARALLEL_MACS // 8
_DEPTHWISE_MACS = _PARALLEL_MACS // 32


def available() -> bool:
    """Whether the channels-last kernels run here (the library loaded, AVX-512)."""
    return core.lib is not None and bool(core.lib.nhwc_ok)


#: Constant weights packed once for every set-up that reads them (each layer's own and each
#: input signature's conv chain): id(w), id(bias) -> (w's weakref, bias's, (packed, b,
#: their addresses)).
PACKED: dict = {}


def _packed(w: np.ndarray, bias, depthwise: bool) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(packed weights, bias padded to blocks of 16, their addresses) of w (M, C, kh, kw):
    from PACKED where w and bias are constants (read-only arrays: a writable one may change
    between calls). The addresses are taken while the fresh arrays are still writeable (a
    read-only one's, _addr's slow path, cost a first run's set-up of each layer as much as
    its packing)."""
    constant = not w.flags.writeable and (bias is None or not bias.flags.writeable)
    key = (id(w), id(bias), depthwise)
    hit = PACKED.get(key) if constant else None
    if hit is not None and hit[0]() is w and (bias is None or hit[1]() is bias):
        return hit[2]
    made = packed, b, _, _ = pack_weights(w, bias, depthwise)
    packed.flags.writeable = b.flags.writeable = False  # (shared by set-ups: never written)
    if constant:
        drop = functools.partial(PACKED.pop, key, None)  # (either array freed: the entry goes)
        refs = (
            weakref.ref(w, lambda _: drop()),
            bias is not None and weakref.ref(bias, lambda _: drop()),
        )
        PACKED[key] = (*refs, made)
    return made


def pack_weights(w: np.ndarray, bias, depthwise: bool) -> tuple[np.ndarray, np.ndarray, int, int]:
    """_packed's arrays, made by nhwc.c (onyx_nhwc_pack): a group-1 conv's weights as groups
    of 64 output channels (the last one of the blocks of 16 left), each [kh][kw][C][its
    channels], a depthwise conv's as [kh][kw][channels rounded up to 16], zeros past M; the
    bias padded to the blocks."""
    M, Cw, kh, kw = w.shape
    Mp = -(-M // 16) * 16
    w32 = np.ascontiguousarray(w, np.float32)
    b32 = None if bias is None else np.ascontiguousarray(bias, np.float32)
    if b32 is not None and b32.size != M:
        raise InvalidArgument(f"onyx native channels-last conv: a bias of {b32.size} for {M}")
    shape = (kh, kw, Mp) if depthwise else (Mp * Cw * kh * kw,)
    packed, b = np.empty(shape, np.float32), np.empty(Mp, np.float32)
    packed_at, b_at = _addr(packed), _addr(b)  # (while writeable: the fast way)
    status = _PACK[0](
        w32.ctypes.data, None if b32 is None else b32.ctypes.data,
        M, Cw, kh, kw, int(depthwise), packed_at, b_at,
    )  # fmt: skip
    if status:
        check(status, "channels-last weight packing")
    return packed, b, packed_at, b_at


class NhwcConv:
    """A 2-D float32 conv reading x as (N, H, W, C) through its element strides (any: an NCHW
    array's transposed view too; depthwise convs want the channels contiguous) and writing y
    (N, OH, OW, M) contiguous; w (M, C / group, kh, kw) with group 1 or depthwise (group ==
    C == M). geo: the conv's geometry (out_shape, strides, dilations, pads); activation:
    (code, alpha, beta) as native.CONV_ACTIVATIONS."""

    __slots__ = (
        *("cuts", "cuts_addr", "keep", "parts", "shape", "size", "spare", "task", "task_at"),
        *("ways", "kept", "keeps", "nbytes", "release", "x_shape", "x_strides", "__weakref__"),
    )

    def __init__(self, x_shape, w: np.ndarray, bias, geo: dict, activation: tuple, group=None):
        N, H, W, C = x_shape
        M, _, kh, kw = w.shape
        (OH, OW), (sh, sw), (dh, dw) = geo["out_shape"], geo["strides"], geo["dilations"]
        top, left = geo["pads"][:2]
        _check_sizes("conv", *x_shape, *w.shape, OH, OW, sh, sw, dh, dw, top, left)
        # (group None: read from w's shape, which a depthwise weight and a group-1 conv's of
        # one input channel share; the runtime's callers pass the node's group)
        depthwise = w.shape[1] == 1 and M == C and C > 1 if group is None else group != 1
        _check_geometry(x_shape, w.shape, geo, depthwise)
        self.x_shape = tuple(x_shape)
        self.x_strides = (4 * H * W * C, 4 * W * C, 4 * C, 4)  # (set_strides sets others)
        packed, b, packed_at, b_at = _packed(w, bias, depthwise)
        self.keep = packed, b
        pointwise = (kh, kw, sh, sw) == (1, 1, 1, 1) and not any(geo["pads"])
        kind = DEPTHWISE if depthwise else (POINTWISE if pointwise else CONV)
        self.shape = (N, OH, OW, M)
        self.size = N * OH * OW * M
        macs = N * OH * OW * M * (kh * kw if depthwise else C * kh * kw)
        if kind == POINTWISE:
            pixels = N * OH * OW
            self.ways = _ways(macs, -(-pixels // 6), _GROUP1_MACS)
            self.cuts = _element_cuts(pixels, 6, self.ways)
        else:
            least = _DEPTHWISE_MACS if depthwise else _GROUP1_MACS
            self.ways = _ways(macs, N * OH, least)
            self.cuts = _even_cuts(N * OH, self.ways)
        self.parts, self.cuts_addr = len(self.cuts) - 1, _addr(self.cuts)
        code, alpha, beta = activation
        self.task = _NhwcTask(
            None,
            packed_at,
            b_at,
            None,
            *(kind, N, C, H, W, M, OH, OW, kh, kw, sh, sw, dh, dw, top, left),
            *(0, 0, 0, 0, code),
            alpha,
            beta,
        )
        self.task_at = ctypes.addressof(self.task)
        #: the last output (with its address) while it may be written again: see _output
        self.spare: list = []
        self.kept = 0  # (the floats this set-up counts in _held[0])
        #: whether it may ever keep an output (_may_keep: split layers only)
        self.keeps = self.ways >= 2 and _SOLE is not None
        self.nbytes = 4 * self.size + 60  # (_aligned's buffer)

    def reads(self, x: np.ndarray) -> np.ndarray:
        """x as this conv reads it: a depthwise conv wants its channels contiguous and its
        pixels C floats apart (its kernels step a pixel so, whatever xs_w says), a pointwise
        conv all of x contiguous, every conv whole-float strides."""
        kind = self.task.kind
        whole_rows = x.strides[3] == 4 and x.strides[2] == 4 * x.shape[3]
        if (kind == DEPTHWISE and not whole_rows) or any(s % 4 for s in x.strides):
            return np.ascontiguousarray(x)
        if kind == POINTWISE and not x.flags.c_contiguous:
            return np.ascontiguousarray(x)
        return x

    def set_strides(self, strides) -> None:
        """The strides (bytes) of the inputs this set-up reads (see :meth:`reads`)."""
        t = self.task
        t.xs_n, t.xs_h, t.xs_w, t.xs_c = (s // 4 for s in strides)
        self.x_strides = tuple(strides)

    def _extras_fit(self, s, z) -> bool:
        """Whether s and z (None: not given) are C-contiguous float32 of the scales' (N, C)
        and the output's sizes (the kernels read them by the task's sizes: nothing else
        bounds them)."""
        for extra, n in ((s, self.x_shape[0] * self.x_shape[3]), (z, self.size)):
            if extra is not None and not (
                isinstance(extra, np.ndarray)
                and extra.dtype == _F32
                and extra.size == n
                and extra.flags.c_contiguous
            ):
                return False
        return True

    def _refuse(self, x) -> None:
        """InvalidArgument: x is not of the set-up's shape, strides and dtype, or s or z not
        as _extras_fit wants them."""
        raise InvalidArgument(
            f"onyx native channels-last conv: set up for x {self.x_shape} float32, strides "
            f"{self.x_strides}; got {getattr(x, 'shape', x)!r} {getattr(x, 'dtype', '')} "
            f"{getattr(x, 'strides', '')} (or an s or z not of its shape)"
        )

    def __call__(self, x: np.ndarray, s=None, z=None) -> np.ndarray:
        """x float32 of the set-up's (N, H, W, C) shape and strides (set_strides); s: per-image
        input channel scales (N, C) (pointwise only), z: a residual of the output's shape,
        added before the activation (both C-contiguous float32)."""
        if (x.shape != self.x_shape or x.strides != self.x_strides or x.dtype != _F32
                or not (s is None and z is None or self._extras_fit(s, z))):  # fmt: skip
            self._refuse(x)
        y, address = self._output()
        status = _CALL[0](
            self.task_at,
            _base_addr(x),
            address,
            None if s is None else _input_addr(s),
            None if z is None else _input_addr(z),
            self.cuts_addr,
            self.parts,
            self.ways,
        )
        if status:
            check(status, "channels-last conv")
        if self.keeps and not self.spare and (self.kept or self._may_keep()):
            self.spare.append((y, address))
        return y

    def plain(self, x: np.ndarray) -> np.ndarray:
        """__call__(x) where no output is ever kept (``keeps`` false: one thread): its steps
        inlined (at batch 1 a small layer's kernel
        takes a few microseconds, and each Python call on its way cost a tenth of one)."""
        if x.shape != self.x_shape or x.strides != self.x_strides or x.dtype != _F32:
            self._refuse(x)
        buf = _empty(self.nbytes, _BYTE)  # (_aligned, inlined)
        base = _addressof(_c_char_from(buf))
        start = -base & 63
        y = _ndarray(self.shape, _F32, buf, start)
        try:
            source = _addressof(_c_char_from(x))  # (a writeable C-contiguous x: a layer's)
        except (TypeError, ValueError, BufferError):  # (a feed, or a view)
            source = _base_addr(x)
        status = _CALL[0](
            self.task_at, source, base + start, None, None, self.cuts_addr, self.parts, self.ways
        )
        if status:
            check(status, "channels-last conv")
        return y

    def _may_keep(self) -> bool:
        """Whether this set-up may keep its output: a layer split between threads (each
        thread then writes the same rows of it run after run, in its own core's cache, where
        a fresh allocation hands back whichever buffer was freed last, often written by the
        other core; on one thread that buffer is the hotter one), while the kept outputs all
        fit in _SPARE_FLOATS (counted from the first layer that keeps one to the last)."""
        if _held[0] + self.size > _SPARE_FLOATS:  # (asked only where self.keeps)
            return False
        _held[0] += self.size
        self.kept = self.size
        self.release = weakref.finalize(self, _release, self.size)
        return True

    def give_back(self) -> None:
        """Drops the kept output and its share of _SPARE_FLOATS (a conv chain runs this layer
        from now on); a later call may keep one again."""
        self.spare.clear()
        if self.kept:
            self.kept = 0
            self.release()  # (gives the floats back once: the finalizer is then dead)

    def _output(self) -> tuple:
        """The output array and its address: the last call's again when nothing but this
        set-up holds it or a view of it any more (a session lets go of a layer's output at
        the end of a run), else a fresh one: allocating a small layer's output took a good
        part of its time, and a small model's kept outputs stay in the caches from run to
        run. (A list: calls may come from several threads, and pop hands the spare to one.)"""
        if self.spare:  # (tested first: a raised IndexError cost a small layer's call)
            try:
                kept = self.spare.pop()
            except IndexError:  # (another thread took it)
                return _aligned(self.shape, self.size)
            if _holders(kept) == _SOLE:
                return kept
        return _aligned(self.shape, self.size)


def _check_geometry(x_shape, w_shape, geo: dict, depthwise: bool) -> None:
    """InvalidArgument unless w reads x's channels (group 1: all of them, depthwise: one) and
    every window lies in the padded input (the kernels read x and the packed weights by
    these sizes: nothing else bounds them)."""
    N, H, W, C = x_shape
    pads, problems = list(geo["pads"]), []
    if len(pads) != 4 or min(pads) < 0:
        problems.append(f"pads {pads}")
    elif w_shape[1] != (1 if depthwise else C) or depthwise and w_shape[0] != C:
        problems.append(f"weights {tuple(w_shape)} for {C} input channels")
    else:
        for axis, size in enumerate((H, W)):
            out, k = geo["out_shape"][axis], w_shape[2 + axis]
            s, d = geo["strides"][axis], geo["dilations"][axis]
            if out < 1 or (out - 1) * s + (k - 1) * d + 1 > pads[axis] + size + pads[axis + 2]:
                problems.append(f"{out} outputs along axis {axis + 1} of {size}")
    if problems:
        raise InvalidArgument("onyx native channels-last conv: " + ", ".join(problems))


#: The floats of all kept outputs together (see NhwcConv._may_keep): a small model's outputs
#: stay in the caches from run to run; a larger model's would not, and a kept output, cold,
#: then took longer to write than a fresh allocation.
_SPARE_FLOATS = 1 << 20
_held = [0]  # (the floats kept now)


def _release(floats: int) -> None:
    _held[0] -= floats


def _holders(kept: tuple) -> tuple:
    """The reference counts of a kept (output, address)'s array and of the buffer under it,
    read through the pair (not a local: Python 3.14 lends a local to a call uncounted, so a
    local held elsewhere read as held only here); compared with _SOLE, read the same way."""
    return _refs(kept[0]), _refs(kept[0].base)


_refs = sys.getrefcount

_copy, _byref = _NhwcTask.from_buffer_copy, ctypes.byref
_c_char_from, _addressof = ctypes.c_char.from_buffer, ctypes.addressof
_empty, _ndarray, _F32, _BYTE = np.empty, np.ndarray, np.dtype(np.float32), np.dtype(np.uint8)


def _aligned(shape: tuple, size: int) -> tuple:
    """An empty float32 array of ``size`` elements whose data starts on a 64-byte line (the
    kernels' vectors of 16 channels then never straddle two lines; malloc aligns to 16), and
    that address (_addr's: __array_interface__ builds a dict)."""
    buf = _empty(4 * size + 60, _BYTE)
    base = _addressof(_c_char_from(buf))  # (_addr's way, inlined: once a layer)
    start = -base & 63
    return _ndarray(shape, _F32, buf, start), base + start


def _sole_counts() -> tuple | None:
    """_holders of a pair that nothing else holds, or None where _holders does not see a
    holder more (then no output is kept)."""
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None  # (free-threaded Python's deferred counts are not exact)
    kept = _aligned((1,), 1)
    sole = _holders(kept)
    held, view = kept[0], kept[0][:]  # (a holder more of the array, one of its buffer)
    more = _holders(kept)
    del held, view
    return sole if more[0] > sole[0] and more[1] > sole[1] else None


#: _holders of a kept output that nothing else holds (None: none is kept).
_SOLE = _sole_counts()
_RANGE = [0]  # (lib.nhwc_range, set by bind)
_CALL: list = [None]  # (lib.onyx_nhwc_call, set by bind)
_PACK: list = [None]  # (lib.onyx_nhwc_pack, set by bind)


def _base_addr(x: np.ndarray) -> int:
    """The address of x's first element (a strided view's too)."""
    if x.flags.c_contiguous:
        return _input_addr(x)
    return x.__array_interface__["data"][0]


def mean_pixels(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) float32 -> (N, 1, 1, C), the mean over each image's pixels."""
    x = np.ascontiguousarray(x, np.float32)
    task, cuts, ways = _mean_setup(x.shape, core.thread_setting())
    y = np.empty((x.shape[0], 1, 1, x.shape[3]), np.float32)
    task = _copy(task)  # (calls may come from several threads)
    task.x, task.y = _input_addr(x), _addr(y)
    check(
        core.lib.onyx_parallel(_RANGE[0], _byref(task), _addr(cuts), len(cuts) - 1, ways),
        "channels-last mean",
    )
    return y


@functools.lru_cache(maxsize=256)
def _mean_setup(shape: tuple, threads: int) -> tuple:
    """The mean's task (without its pointers), cuts and threads for one input shape."""
    N, H, W, C = shape
    _check_sizes("mean", *shape)
    task = _NhwcTask(
        None,
        None,
        None,
        None,
        *(MEAN, N, C, H, W, C, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, H * W * C, 1, W * C, C, 0),
        0.0,
        0.0,
    )
    ways = _ways(math.prod(shape), N, 1 << 17)
    return task, _even_cuts(N, ways), ways


def bind(lib, isa: int) -> None:
    lib.nhwc_range = _RANGE[0] = range_of(lib, "nhwc")
    call = _CALL[0] = lib.onyx_nhwc_call
    call.restype = ctypes.c_int
    call.argtypes = [_P, _P, _P, _P, _P, _P, _I64, _I64]
    pack = _PACK[0] = lib.onyx_nhwc_pack
    pack.restype = ctypes.c_int
    pack.argtypes = [_P, _P, _I64, _I64, _I64, _I64, _I64, _P, _P]
    lib.onyx_nhwc_available.restype = ctypes.c_int
    lib.nhwc_ok = bool(isa & core.ISA_AVX512) and bool(lib.onyx_nhwc_available())


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
