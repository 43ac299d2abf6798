"""The native library's loading and what every kernel family shares: the ABI check (abi.h,
abi.c), the one CPU dispatch (onyx_isa, capped by ONYX_NATIVE_ISA), the thread pool's
calls and the work split.

A family module (gemm_i8.py, depthwise.py, ...: one per C file) declares its task structs
with ``@abi("c_name")`` and a ``bind(lib, isa)`` that looks its entry points up, and ends with
``core.join(__name__, bind)``; it reads the library as ``core.lib`` at call time (None: its
numpy caller's path runs). The library is loaded with the package; a family is imported,
checked and bound when a kernel first asks for it (native/__init__.py's table).
"""

from __future__ import annotations

import _ctypes
import contextvars
import ctypes
import functools
import importlib.machinery
import os
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...errors import InvalidArgument

#: The loaded library (ctypes.CDLL), or None: numpy kernels only.
lib = None
#: The library start() loaded: what a family joining later binds to, even while ``lib`` is
#: hidden (a test's numpy run sets lib to None; a family imported then must still be bound
#: once lib is back, or its entry points stay unbound for the rest of the process).
started = None
#: The instruction sets the hand-written kernels use (ISA_* bits, abi.c's onyx_isa).
isa = 0
#: Whether the int8 GEMM (AVX512-VNNI) runs.
vnni = False
#: Why the library is or is not in use (native.status()).
why = ""

#: The 8-bit types of the integer kernels (the GEMM's operands, quantized tensors).
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))

#: FusedConv activations the native convs (conv_f32, nhwc, depthwise, conv1d, gemv...) apply as
#: they store, by their code in activation.h. Here, not in a family: a kernel asks for a code
#: before it knows which family will run it (importing conv_f32 for the table cost a cold
#: start's first run its import).
CONV_ACTIVATIONS = {
    "": 0,
    "Identity": 0,
    "Relu": 1,
    "LeakyRelu": 2,
    "Clip": 3,
    "HardSwish": 4,
    "HardSigmoid": 5,
    "Sigmoid": 6,  # (activation.h's exp-based forms: within a few ulps of numpy's)
    "Tanh": 7,
}


#: Size limits that decide whether a family's kernel applies, here rather than in the family:
#: a caller weighing its paths reads them before it knows it will run the family, and each
#: family imported for a limit alone cost a cold start's first run that import (the tiny CNN
#: imported gemv and depthwise for these two, running neither).
#: Most rows of x the GEMV takes (gemv.py): beyond, the weights are worth packing for BLAS.
GEMV_ROWS = 8
#: The direct small conv (depthwise.py) takes convs whose windows have at most this many
#: values (C * kh * kw): beyond, an im2col GEMM's columns are worth building.
SMALL_CONV_K = 32

#: The Winograd conv's (winograd.py) limits, and winograd_applies, here for the same reason:
#: a conv's set-up asks whether Winograd takes it before any other path, and importing the
#: family to hear no (the tiny CNN's 3x3 convs of 3 and 8 channels) cost a first run.
#: Most weight-transform floats (16 x M x C) per 2x2 tile: every block of up to 48 tiles reads
#: them all, so a deep layer of few tiles (512 -> 512 channels at 7x7, batch 1: 16 tiles) is
#: one pass over 16 MB of weights for little work (twice the direct conv's time). On whole
#: models at 2 threads, 256 -> 256 channels at 14x14, batch 1 (49 tiles, 21k floats a tile)
#: still lost to the direct conv, 128 -> 128 at 16x16 (64 tiles, 4k) gained.
WINOGRAD_MAX_WEIGHTS_PER_TILE = 1 << 12
#: Fewest input channels: below, a tile's few multiply-adds per transform do not pay for it.
WINOGRAD_MIN_CHANNELS = 16
#: Fewest multiply-adds (of the direct conv): a small layer's (64 -> 64 channels at 8x8, 32 ->
#: 32 at 16x16) transforms of short tile rows (lanes idle) cost more than they save.
WINOGRAD_MIN_MACS = 1 << 23


def winograd_applies(x_shape, w_shape, group: int, out_shape, strides, dilations, begin) -> bool:
    """Whether winograd.WinogradConv takes this conv (on a library that has it: winograd_ok):
    a 2-D 3x3 one of group 1, unit stride and dilation, begin pads of at most 2, enough
    channels and work, few weights per tile."""
    if len(x_shape) != 4 or group != 1 or tuple(w_shape[2:]) != (3, 3):
        return False
    if tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) or not 0 <= min(begin):
        return False
    N, C = x_shape[:2]
    if w_shape[1] != C:  # (weights for other channels: the kernels after this one refuse them)
        return False
    tiles = N * (-(-out_shape[0] // 2)) * (-(-out_shape[1] // 2))
    M = w_shape[0]
    return (
        max(begin) <= 2
        and C >= WINOGRAD_MIN_CHANNELS
        and M >= 8
        and 16 * M * C <= WINOGRAD_MAX_WEIGHTS_PER_TILE * tiles
        and N * out_shape[0] * out_shape[1] * M * C * 9 >= WINOGRAD_MIN_MACS
    )


def activation_params(activation: str, params) -> tuple[float, float]:
    """(alpha, beta) of a FusedConv activation as the native conv kernels take them: its
    activation_params with the spec's defaults filled in (LeakyRelu's beta unused: 0)."""
    lo, hi = (list(params or []) + [None, None])[:2]
    if activation == "LeakyRelu":
        lo, hi = 0.01 if lo is None else lo, 0.0
    elif activation == "HardSigmoid":
        lo, hi = 0.2 if lo is None else lo, 0.5 if hi is None else hi
    elif activation == "Clip":
        lo, hi = -np.inf if lo is None else lo, np.inf if hi is None else hi
    return float(lo or 0.0), float(hi or 0.0)


#: onyx_isa's bits (onyx.h).
ISA_AVX512, ISA_AVX512BW, ISA_VNNI, ISA_VBMI = 1, 2, 4, 8
#: ONYX_NATIVE_ISA's values: the instruction sets each allows.
ISA_LEVELS = {"avx512": 0xF, "native": 0xF, "avx2": 0, "portable": 0, "baseline": 0}

#: abi.h's ONYX_ABI_VERSION, raised with it when an entry point's signature changes: a library
#: of another version (one left from an earlier build, its sources older or newer) stays off.
ABI_VERSION = 1

#: Each ctypes struct class by its C name (``abi``), checked against abi.c's table at load.
_STRUCTS: dict[str, list[type]] = {}


def abi(c_name: str):
    """Class decorator: a ctypes.Structure that copies abi.h's struct ``c_name`` (field names,
    order and types), checked at load."""

    def register(cls):
        _STRUCTS.setdefault(c_name, []).append(cls)
        return cls

    return register


@functools.cache
def _abi_row() -> type:
    """abi.c's abi_row as a ctypes struct, made at its first use: only a library whose structs
    disagree with the ctypes copies (or one built before onyx_abi_agrees) has its rows read,
    and making the class cost every process's import of the package a tenth of a millisecond."""

    class _AbiRow(ctypes.Structure):
        _fields_ = [
            ("structure", ctypes.c_char_p),
            ("field", ctypes.c_char_p),
            ("offset", ctypes.c_int64),
            ("size", ctypes.c_int64),
        ]

    return ctypes.POINTER(_AbiRow)


@functools.lru_cache(maxsize=1)
def _abi_table(library) -> dict[str, dict[str, tuple[int, int]]]:
    """abi.c's table: struct -> field ("" for the struct itself) -> (offset, size); read once
    per library (each family's check asks for it)."""
    library.onyx_abi.restype = _abi_row()
    rows = library.onyx_abi()
    table: dict[str, dict[str, tuple[int, int]]] = {}
    i = 0
    while rows[i].structure is not None:
        r = rows[i]
        table.setdefault(r.structure.decode(), {})[r.field.decode()] = (r.offset, r.size)
        i += 1
    return table


@functools.lru_cache(maxsize=256)
def _abi_struct(library, c_name: str) -> dict[str, tuple[int, int]] | None:
    """abi.c's rows of one struct (field -> (offset, size), "" for the struct itself), or None
    where the library has no such struct: found by onyx_abi_struct and read row by row until
    the next struct's (a family's check reads its own structs' rows, not the whole table; a
    library built before onyx_abi_struct: the whole table, once)."""
    try:
        find = library.onyx_abi_struct
    except AttributeError:
        return _abi_table(library).get(c_name)
    if find.argtypes is None:  # (its prototype set at its first use)
        find.restype, find.argtypes = _abi_row(), [ctypes.c_char_p]
    rows = find(c_name.encode())
    if not rows:
        return None
    fields = {"": (rows[0].offset, rows[0].size)}
    i = 1
    while True:
        row = rows[i]
        if row.structure is None or not row.field:  # (the table's end, the next struct)
            return fields
        fields[row.field.decode()] = (row.offset, row.size)
        i += 1


def _layout(cls: type, c_name: str) -> str:
    """A ctypes copy's layout as abi.c's onyx_abi_agrees describes its C struct: "c_name
    size" then " field:offset:size" for each field, in order."""
    parts = [c_name, str(ctypes.sizeof(cls))]
    for name, *_ in cls._fields_:
        field = getattr(cls, name)
        parts.append(f"{name}:{field.offset}:{field.size}")
    return " ".join(parts)


def _agree(library, module: str | None) -> bool:
    """Whether the library says every ctypes copy checked (as abi_mismatches picks them) is
    its struct's exact layout: one call (abi.c's onyx_abi_agrees) with every copy's _layout,
    where reading each struct's rows through ctypes cost a family's import most of its check.
    False also for a library without it: then the rows are read, as before."""
    try:
        agrees = library.onyx_abi_agrees  # (no prototype: bytes in, int out are ctypes' defaults)
    except AttributeError:
        return False
    lines = [
        _layout(cls, c_name)
        for c_name, classes in _STRUCTS.items()
        for cls in classes
        if module is None or cls.__module__ == module
    ]
    return bool(agrees("".join(f"{line}\n" for line in lines).encode()))


def abi_mismatches(library, module: str | None = None) -> list[str]:
    """Where the ctypes copies (those of family ``module`` if given; else of every family
    imported so far) disagree with the library's structs (empty: they agree). Checked in one
    call (_agree); only where that finds a difference are the library's rows read (for the
    structs checked) to say which: none at the package's import."""
    if _agree(library, module):
        return []
    problems = []
    for c_name, classes in _STRUCTS.items():
        fields = None
        for cls in classes:
            if module is not None and cls.__module__ != module:
                continue
            fields = fields or _abi_struct(library, c_name)
            if fields is None:
                problems.append(f"{cls.__name__}: the library has no struct {c_name}")
                continue
            ours = {
                name: (getattr(cls, name).offset, getattr(cls, name).size)
                for name, *_ in cls._fields_
            }
            theirs = {k: v for k, v in fields.items() if k}
            if ctypes.sizeof(cls) != fields[""][1] or ours != theirs:
                problems.append(
                    f"{cls.__name__} != {c_name}: sizes {ctypes.sizeof(cls)} and "
                    f"{fields[''][1]}; fields {ours} and {theirs}"
                )
    return problems


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_kernels{suffix}"
        if path.exists():
            return path
    return None


def _open():
    """The library, or None with ``why`` set."""
    global why
    if os.environ.get("ONYX_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        why = "off: ONYX_NATIVE=0"
        return None
    path = _library_path()
    if path is None:
        tree = Path(__file__).parents[3]
        if (tree / "setup.py").exists():  # (`python` started in a checkout imports its onyx)
            why = (
                f"not built in the source tree onyx was imported from ({tree}; "
                "`pip install -e .` there builds it): numpy kernels"
            )
        else:
            why = "not built (no C compiler at install?): numpy kernels"
        return None
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:  # a build for another platform, a missing runtime library, ...
        why = f"not loadable ({e}): numpy kernels"
        return None


def _abi_version(library) -> int | None:
    """The library's ONYX_ABI_VERSION (None: a library from before it had one)."""
    try:
        entry = library.onyx_abi_version
    except AttributeError:
        return None
    entry.restype, entry.argtypes = _INT, []
    return entry()


def start(families) -> None:
    """Loads the library, checks its ABI (the structs of every family imported so far) and
    binds each of ``families`` (modules) and each family joined before; on any failure the
    library stays off (numpy kernels) and ``why`` says why."""
    global lib, started, isa, vnni, why
    lib = started = None
    isa, vnni = 0, False
    families_off.clear()
    _kept.clear()
    for name in joined:
        sys.modules[name].core = sys.modules[__name__]
    # (each bind once: a family passed in that has joined is among the joined)
    binds = [*(f.bind for f in families if f.__name__ not in joined), *joined.values()]
    library = _open()
    if library is None:
        return
    version = _abi_version(library)
    if version != ABI_VERSION:
        why = (
            f"off: built from other sources (ABI version {version}, onyx's {ABI_VERSION}; "
            "rebuild it): numpy kernels"
        )
        return
    try:
        problems = abi_mismatches(library)
    except AttributeError as e:  # (a library from another version of onyx)
        problems = [f"no ABI table ({e})"]
    if problems:
        why = "off: its structs disagree with onyx's (rebuild it): " + "; ".join(problems)
        return
    level = os.environ.get("ONYX_NATIVE_ISA", "avx512").strip().lower()
    library.onyx_allow_isa.argtypes = [_INT]
    isa = library.onyx_allow_isa(ISA_LEVELS.get(level, 0))
    library.onyx_parallel.restype = _INT
    library.onyx_parallel.argtypes = [_P, _P, _P, _I64, _I64]
    library.onyx_pool_threads.restype = _INT
    library.onyx_pool_threads.argtypes = []
    vnni = bool(isa & ISA_VNNI)
    try:
        for bind in binds:
            bind(library, isa)
    except AttributeError as e:  # (an entry point missing: a library built from older sources)
        why = f"off: it lacks an entry point onyx needs (rebuild it): {e}"
        isa, vnni = 0, False
        return
    names = [
        n
        for n, bit in (
            ("avx512", ISA_AVX512),
            ("avx512bw", ISA_AVX512BW),
            ("vnni", ISA_VNNI),
            ("vbmi", ISA_VBMI),
        )
        if isa & bit
    ]
    why = f"loaded ({', '.join(names) or 'portable kernels'}; ONYX_NATIVE_ISA={level})"
    lib = started = library


#: The families imported so far: module name -> its bind.
joined: dict[str, object] = {}
#: The families whose structs disagree with the library's or whose entry points it lacks
#: (joined after the library was loaded): module name -> why. Their kernels take their numpy
#: paths; the rest of the library stays in use (kernels bound before keep running).
families_off: dict[str, str] = {}


class _Off:
    """What a family that failed its check sees as ``core``: no library, the rest as is."""

    lib, isa, vnni = None, 0, False

    def __getattr__(self, name: str):
        return getattr(sys.modules[__name__], name)


def join(name: str, bind) -> None:
    """A family module's last line: its structs checked against the library's and its entry
    points bound (``bind(lib, isa)``), or, should either fail or a family it imported from be
    off, the family's kernels off (their numpy paths run) with the reason in native.status()."""
    joined[name] = bind
    if started is None:
        return
    try:
        problems = [f"it uses {off}, which is off" for off in _off_families_used(name)]
        problems = problems or abi_mismatches(started, name)
        if not problems:
            bind(started, isa)
    except AttributeError as e:  # (an entry point missing: a library built from older sources)
        problems = [f"it lacks an entry point onyx needs (rebuild it): {e}"]
    if problems:
        families_off[name] = "; ".join(problems)
        sys.modules[name].core = _Off()


def _off_families_used(name: str) -> list[str]:
    """The families that are off whose classes or functions family ``name`` imported (its
    kernels would run theirs, whose structs disagree with the library or are unbound)."""
    if not families_off:
        return []
    used = {getattr(value, "__module__", None) for value in vars(sys.modules[name]).values()}
    return sorted(n.rsplit(".", 1)[-1] for n in used if n in families_off)


def address(fn) -> int | None:
    """A C function's address (what onyx_parallel and the task structs take), or None."""
    return fn and ctypes.cast(fn, _P).value


def range_of(library, name: str) -> int:
    """lib.onyx_<name>_range's address: a kernel's part of a pool job. Looked up with dlsym
    where the platform has it (ctypes' attribute made a function object, then cast it: ten
    times the time, a family's import binding several); AttributeError, as ctypes', where the
    library has no such entry point."""
    symbol = f"onyx_{name}_range"
    handle = getattr(library, "_handle", None)
    if _dlsym is None or handle is None:  # (no dlsym here, or a test's stand-in library)
        return address(getattr(library, symbol))
    try:
        return _dlsym(handle, symbol)
    except OSError as e:  # (a library built from older sources: the families' binds catch it)
        raise AttributeError(str(e)) from None


#: _ctypes' dlsym (POSIX), or None.
_dlsym = getattr(_ctypes, "dlsym", None)


#: A product of fewer multiply-adds runs on one thread: it takes the kernel a few microseconds,
#: about what handing work to the pool's threads costs (more when they have gone to sleep).
_PARALLEL_MACS = 1 << 20


_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


_threads: contextvars.ContextVar[int] = contextvars.ContextVar("onyx_native_threads", default=0)
#: The same variable, public: a run's slot (concurrency.run_slot) sets and resets it itself, as
#: ``threads`` does, without the three Python calls per run of a ``threads`` object (about 6k
#: instructions: a sixth of a one-row tree ensemble's run with intra_op_num_threads set).
THREAD_SETTING = _threads


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        return os.cpu_count() or 1


class threads:  # noqa: N801  (used as a function: ``with threads(n):``)
    """Run native kernels on at most ``n`` threads inside the block (0: every core). A class,
    not a generator: it wraps every run of tiny models too."""

    __slots__ = ("n", "token")

    def __init__(self, n: int):
        self.n = int(n)

    def __enter__(self):
        self.token = _threads.set(self.n)
        return self

    def __exit__(self, *exc) -> None:
        _threads.reset(self.token)


@functools.cache
def int_range(dtype) -> tuple[int, int]:
    """(min, max) of an integer dtype, np.iinfo's, kept: a set-up's requantization asks for
    its output type's range, and np.iinfo makes an object per call (a few microseconds, a
    quantized CNN's first run sets up each of its convs)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_sizes(what: str, *values) -> None:
    """InvalidArgument unless every size is an int in [0, 2**40]: ctypes would wrap a larger
    one silently into the kernel's int64 fields (checks.h then checks what it receives)."""
    for v in values:
        if not 0 <= int(v) <= 1 << 40:
            raise InvalidArgument(f"onyx native {what}: size {v} out of the range it takes")


#: A kernel part's status bits (checks.h).
_NOMEM, _INVALID = 1, 2


def _run(part: int, task: ctypes.Structure, cuts, threads: int, what: str = "kernel") -> None:
    """The kernel's parts [cuts[i], cuts[i + 1]) of the task on the native thread pool
    (pool.c), ``part`` one of lib.<kernel>_range. A kernel that refused its arguments
    (checks.h: nothing touched) raises InvalidArgument, one that could not allocate its
    buffers MemoryError."""
    if cuts.__class__ is not np.ndarray or cuts.dtype is not _INT64:  # (a set-up's kept cuts
        cuts = np.asarray(cuts, np.int64)  # are used as they are, unconverted)
    status = lib.onyx_parallel(part, ctypes.byref(task), _addr(cuts), len(cuts) - 1, threads)
    if status:
        check(status, what)


_INT64 = np.dtype(np.int64)


#: Calls of the entry points that have a twin keeping the GIL made through ``lib`` instead
#: (their inputs too large to hold the GIL for), which let the GIL go: a session's tiny runs
#: that make them take turns (concurrency.Pace.switched). One count for every thread: another
#: thread's call counted in a run only sends that run's session back to turns.
let_go = [0]

#: Each entry point's twin that keeps the GIL (``keeping_gil``), by name.
_kept: dict[str, Callable] = {}


def keeping_gil(name: str) -> Callable:
    """The library's entry point ``name`` (bound: its argtypes and restype set) as a twin that
    keeps the GIL while it runs (ctypes.PyDLL's kind of call), for calls that take a few
    microseconds: a ctypes call through ``lib`` lets the GIL go, and in a run of a small
    scikit-learn model, which otherwise holds the GIL throughout, each such release woke a
    thread waiting for the GIL to take it from the run for nothing (docs/reliability.md,
    "Runs that keep the GIL"). Larger calls go through ``lib``, so that other threads run
    meanwhile."""
    twin = _kept.get(name)
    if twin is None:
        entry = getattr(lib, name)
        if not hasattr(entry, "restype"):  # (a test's wrapper counting calls)
            return entry
        prototype = ctypes.PYFUNCTYPE(entry.restype, *(entry.argtypes or ()))
        twin = prototype(ctypes.cast(entry, ctypes.c_void_p).value)
        twin.argtypes = entry.argtypes  # (None: each argument converted as it comes)
        _kept[name] = twin
    return twin


def check(status: int, what: str) -> None:
    """Raises for a kernel's non-zero status (checks.h's bits)."""
    if status & _INVALID:
        raise InvalidArgument(f"onyx native {what}: sizes out of the range it takes")
    if status:
        raise MemoryError(f"onyx native {what}: out of memory for its buffers")


def _even_cuts(parts: int, ways: int) -> np.ndarray:
    """Cuts of ``parts`` pieces of work into ``ways`` nearly equal runs."""
    return np.array([parts * i // ways for i in range(ways + 1)], np.int64)


@functools.lru_cache(maxsize=4096)
def _element_cuts(n: int, unit: int, ways: int) -> np.ndarray:
    """Cuts of n elements between ``ways`` threads at multiples of ``unit`` (the same for
    every call of a node: kept)."""
    return np.array([n * i // ways // unit * unit for i in range(ways)] + [n], np.int64)


def _filled(template: ctypes.Structure, x: np.ndarray, y: np.ndarray):
    """A copy of a set-up's task (calls may come from several threads) pointing at x and y."""
    task = type(template).from_buffer_copy(template)
    task.x, task.y = _addr(x), _addr(y)
    return task


def _ways(work: int, parts: int, least: int = _PARALLEL_MACS) -> int:
    """Threads for ``work`` multiply-adds in ``parts`` pieces, where ``least`` is worth one."""
    if work < least:  # (before asking the OS for the cores: most calls are small)
        return 1
    n = _threads.get() or _cpu_count()
    return max(1, min(n, parts, work // (least // 2)))


_c_char_from, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def _addr(a: np.ndarray | None) -> int | None:
    """The address of a's data (None for None). A writeable array's is taken through
    c_char.from_buffer; a.ctypes.data builds a Python object per call (several times slower,
    and a native call passes several)."""
    if a is None:
        return None
    try:
        return _addressof(_c_char_from(a))
    except (TypeError, ValueError, BufferError):  # read-only, empty or not contiguous
        pass
    return _read_only_addr(a)


def _input_addr(a: np.ndarray) -> int:
    """_addr of an array a kernel only reads, most often a session's feed (a read-only view):
    its flag is looked at first, not learnt from from_buffer's exception (which cost a
    one-row call more than its look-up)."""
    if a.flags.writeable:
        return _addr(a)
    return _read_only_addr(a)


def bias_entry(bias, M: int, what: str) -> tuple:
    """(bias, its float32 C-contiguous copy, the copy's address): a conv's bias as its kernel
    reads it, made once per bias object (a constant's is the same every call). The kernel
    reads M floats there, so a bias of another size is refused here."""
    b = np.ascontiguousarray(bias, np.float32)
    if b.size != M:
        raise InvalidArgument(f"onyx native {what}: a bias of {b.size} values for {M} outputs")
    return bias, b, _addr(b)


def cached_bias(owner, bias, M: int, what: str) -> tuple:
    """``owner.bias``'s entry (:func:`bias_entry`) for ``bias`` of M values, made again only
    for another bias object. The caller holds the entry through its call: another thread may
    replace ``owner.bias`` meanwhile."""
    entry = owner.bias
    if bias is not entry[0]:
        entry = owner.bias = bias_entry(bias, M, what)
    return entry


def as_residual(z: np.ndarray, shape) -> np.ndarray:
    """A residual input as the conv kernels read it: float32, C-contiguous, the output's shape
    (z itself when it is; a broadcast view is read-only, the slow path of _addr)."""
    if z.shape != shape or z.dtype != np.float32 or not z.flags.c_contiguous:
        z = np.ascontiguousarray(np.broadcast_to(z, shape), np.float32)
    return z


def output_array(shape: tuple, out: np.ndarray | None, what: str) -> np.ndarray:
    """A conv's output: a fresh array, or ``out`` (a part of a larger output the caller made,
    as a fused Concat's channels at batch 1) where it is float32, C-contiguous, writeable and
    of that shape; the kernel writes through its address, so any other ``out`` is refused."""
    if out is None:
        return np.empty(shape, np.float32)
    f = out.flags
    if out.shape != tuple(shape) or out.dtype != np.float32 or not (f.c_contiguous and f.writeable):
        raise InvalidArgument(
            f"onyx native {what}: an output of shape {out.shape} ({out.dtype}) where "
            f"{tuple(shape)} float32, C-contiguous and writeable is written"
        )
    return out


def _read_only_addr(a: np.ndarray) -> int:
    # A session's feed is a read-only view of the caller's array: a C-contiguous view as long
    # as its C-contiguous base starts where the base starts (a.ctypes.data: ~1 us a call). A
    # whole view of a read-only array (a constant's) has its base's address, kept.
    base = a.base
    if (
        base.__class__ is np.ndarray
        and a.nbytes
        and base.nbytes == a.nbytes
        and a.flags.c_contiguous
        and base.flags.c_contiguous
    ):
        if base.flags.writeable:
            return _addressof(_c_char_from(base))
        a = base
    return _kept_addr(a)


#: id -> (a weak reference, the address, nbytes) of read-only arrays that are no fresh view
#: of a writeable one: a constant's weights, passed at every run (a.ctypes.data builds a
#: Python object per call). An entry is used only while its array lives (its weak reference;
#: numpy refuses to resize an array that has one) and has the same size.
_kept: dict[int, tuple] = {}


def _kept_addr(a: np.ndarray) -> int:
    key = id(a)
    hit = _kept.get(key)
    if hit is not None and hit[0]() is a and hit[2] == a.nbytes:
        return hit[1]
    address = a.ctypes.data
    if a.flags.writeable:  # (an empty or strided one: most often fresh, not worth keeping)
        return address
    try:
        ref = weakref.ref(a, lambda _, key=key: _forget(key))
    except TypeError:  # (no weak references to it: not kept)
        return address
    _kept[key] = (ref, address, a.nbytes)
    return address


def _forget(key: int) -> None:
    hit = _kept.get(key)
    if hit is not None and hit[0]() is None:  # (not a newer array's entry under the same id)
        del _kept[key]


def thread_setting() -> int:
    """The thread count set for native kernels here (0: every core): part of a set-up's key."""
    return _threads.get()


def under_setting(run: Callable, kernel: Callable, attrs: dict) -> Callable:
    """A bound call ``run`` (a native set-up's), made under the current thread setting: under
    another setting the kernel as written answers (the set-up's work split is the setting's,
    and its derived entry is kept per setting)."""
    threads = thread_setting()

    def call(*inputs):
        if _threads.get() != threads:
            return kernel(*inputs, **attrs)
        return run(*inputs)

    return call


def under_setting_contiguous(run: Callable, kernel: Callable, attrs: dict) -> Callable:
    """under_setting for a ``run(x)`` that reads its first input alone and needs it
    C-contiguous: ``call(x, *rest)`` is run(x) under the setting it was made in and for such
    an x, else the kernel as written. One frame where a bound step's wrappers stacked three
    or four (a quantized MobileNet's 20-odd convs a run)."""
    threads, setting = thread_setting(), _threads.get

    def call(x, *rest):
        if x.flags.c_contiguous and setting() == threads:
            return run(x)
        return kernel(x, *rest, **attrs)

    return call


def under_setting_flat(flat: Callable | None, run: Callable, kernel: Callable, attrs: dict):
    """under_setting of a conv's bound call ``run(X, W, B=None[, Z])`` with a one-frame path:
    ``flat(X, B)`` (a set-up's ``bound()``, None: none) answers for a C-contiguous X and no
    residual Z, in one frame where run's wrappers stacked several (a small conv's few
    microseconds a layer)."""
    if flat is None:
        return under_setting(run, kernel, attrs)
    threads, setting = thread_setting(), _threads.get

    def one_frame(X, W, B=None, *Z):
        if setting() != threads:
            return kernel(X, W, B, *Z, **attrs)
        if X.flags.c_contiguous and (not Z or Z[0] is None):
            return flat(X, B)
        return run(X, W, B, *Z)

    return one_frame


#: Elements below which an elementwise kernel stays on one thread.
_PARALLEL_ELEMENTS = 1 << 16


#: The same for QLinearAdd / QLinearMul / QuantizeLinear on AVX-512 (a few bytes' work a
#: value).
_PARALLEL_BYTES = 1 << 14


class WorkSplit:
    """A bound call's split of its work between the pool's threads (registry.binds): one
    thread, fixed, where the work is below ``least``; else made per thread setting and kept
    (the setting may change between runs). Calling it gives (cuts' address, parts, threads,
    cuts); ``cuts_of(ways)`` makes the cuts, as the kernel's own call would."""

    __slots__ = ("work", "parts", "least", "cuts_of", "fixed", "by_setting")

    def __init__(self, work: int, parts: int, least: int, cuts_of):
        self.work, self.parts, self.least, self.cuts_of = work, parts, least, cuts_of
        self.by_setting: dict = {}
        self.fixed = self._made(1) if work < least else None

    def _made(self, ways: int) -> tuple:
        cuts = np.ascontiguousarray(self.cuts_of(ways), np.int64)
        return (_addr(cuts), len(cuts) - 1, ways, cuts)  # (the cuts held with their address)

    def __call__(self) -> tuple:
        if self.fixed is not None:
            return self.fixed
        setting = _threads.get()
        split = self.by_setting.get(setting)
        if split is None:
            split = self.by_setting[setting] = self._made(_ways(self.work, self.parts, self.least))
        return split


def bound_task(template: ctypes.Structure, part: int, split: WorkSplit, fields, what="kernel"):
    """``run(*pointers)`` for a bound call: a copy of ``template`` (a task struct filled once:
    sizes, constants' addresses) with the call's pointers set in the order of ``fields``,
    run as ``_run`` runs it. A copy per call: calls come from several threads. (Generated
    per field list: a loop of setattr took twice the time of the plain stores.)"""
    fields = tuple(fields)
    make = _TASK_RUNNERS.get(fields)
    if make is None:
        env: dict = {}
        args = ", ".join(f"p{k}" for k in range(len(fields)))
        stores = "".join(f"        task.{f} = p{k}\n" for k, f in enumerate(fields))
        source = (
            "def make(copy, template, part, split, core, byref, check, what):\n"
            f"    def run({args}):\n"
            "        task = copy(template)\n"
            f"{stores}"
            "        cuts_at, parts, ways, _ = split.fixed or split()\n"
            "        status = core.lib.onyx_parallel(part, byref(task), cuts_at, parts, ways)\n"
            "        if status:\n"
            "            check(status, what)\n"
            "    return run\n"
        )
        exec(compile(source, "<onyx bound task>", "exec"), env)
        make = _TASK_RUNNERS[fields] = env["make"]
    copy = type(template).from_buffer_copy
    core = sys.modules[__name__]  # (the pool's entry looked up per call, as _run does)
    run = make(copy, template, part, split, core, ctypes.byref, check, what)
    run.template = template  # (its constants' arrays are held by whoever made it)
    return run


def bound_float_call(run, shape: tuple, held: tuple):
    """``call(a)`` for a bound_task ``run`` of fields (input, output): ``a`` (float32, any
    layout: its callers' signatures hold the dtype, so unguarded) made C-contiguous, a fresh
    float32 output of ``shape``; ``held`` keeps alive what the task's constant addresses point
    into."""
    return bound_typed_call(run, shape, np.dtype(np.float32), held, "")


def bound_typed_call(run, shape: tuple, dtype: np.dtype, held: tuple, what: str):
    """``call(X)`` for a bound_task ``run`` of fields (x, y): X made C-contiguous, a fresh
    output of ``shape`` and ``dtype``; ``held`` keeps the task's tables alive. With ``what``
    (bound Resize and pools: the op named in the error) X's dtype, the set-up's signature, is
    guarded."""
    empty, contiguous = np.empty, np.ascontiguousarray

    def call(X: np.ndarray) -> np.ndarray:
        if what and X.dtype != dtype:
            raise TypeError(f"onyx native {what}: a {X.dtype} input for a {dtype} set-up")
        if not X.flags.c_contiguous:
            X = contiguous(X)
        y = empty(shape, dtype)
        run(_input_addr(X), _addr(y))
        return y

    call.held = held
    return call


#: bound_task's generated makers, by the fields a call sets
_TASK_RUNNERS: dict[tuple, object] = {}
