"""The native library's one ABI (abi.h, abi.c) and one CPU dispatch (onyx_isa): the ctypes
copies of its structs agree with the C structs, a disagreement leaves the library off with
the reason in native.status(), and ONYX_NATIVE_ISA=avx2 runs the portable kernels."""

from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
import sys
import types

import pytest

from onyx.runtime import native
from onyx.runtime.native import _core

needs_native = pytest.mark.skipif(not native.available(), reason=f"native: {native.status()}")


@needs_native
def test_every_ctypes_struct_matches_its_c_struct():
    native.FAMILIES  # noqa: B018  (every family imported: their structs registered)
    assert _core.abi_mismatches(native.library()) == []
    table = _core._abi_table(native.library())
    assert set(_core._STRUCTS) <= set(table)
    # every C struct Python fills has its copy (dequantize_task shares quantize_task's)
    assert set(table) - set(_core._STRUCTS) <= {"dequantize_task"}


@needs_native
def test_a_struct_that_disagrees_is_reported(monkeypatch):
    @_core.abi("pool2d")
    class _Short(ctypes.Structure):  # one field short of window.c's pool2d
        _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("H", ctypes.c_int64)]

    try:
        problems = _core.abi_mismatches(native.library())
    finally:
        _core._STRUCTS["pool2d"].remove(_Short)
    assert len(problems) == 1 and "_Short != pool2d" in problems[0]


def _status_in_subprocess(env: dict, code: str) -> str:
    env = {**os.environ, **env}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@needs_native
def test_a_disagreeing_struct_turns_the_library_off(monkeypatch):
    families = native.FAMILIES
    monkeypatch.setattr(_core, "abi_mismatches", lambda lib: ["pool2d differs"])
    try:
        _core.start(families)
        assert not native.available() and not native.conv_f32_ok()
        assert "disagree" in native.status() and "pool2d differs" in native.status()
    finally:
        monkeypatch.undo()
        _core.start(native.FAMILIES)
    assert native.available()


@needs_native
def test_a_library_lacking_an_entry_point_turns_off_instead_of_failing(monkeypatch):
    # a library built from older sources: onyx must fall back to numpy and say why
    class Missing:
        @staticmethod
        def bind(lib, isa):
            lib.onyx_an_entry_point_no_library_has  # noqa: B018

    try:
        _core.start([*native.FAMILIES, Missing])
        assert not native.available()
        assert "lacks an entry point" in native.status(), native.status()
    finally:
        _core.start(native.FAMILIES)
    assert native.available()


def test_a_source_tree_without_its_library_says_so(monkeypatch):
    # `python` started in a checkout imports that tree's onyx, not the installed one: the
    # status must say so rather than blame the C compiler
    monkeypatch.setattr(_core, "_library_path", lambda: None)
    monkeypatch.setenv("ONYX_NATIVE", "1")
    try:
        _core.start(native.FAMILIES)
        assert not native.available()
        assert "source tree" in native.status() and "pip install -e ." in native.status()
    finally:
        monkeypatch.undo()
        _core.start(native.FAMILIES)


@needs_native
def test_the_isa_switch_turns_the_avx512_kernels_off():
    code = (
        "from onyx.runtime import native\n"
        "print(native.available(), native.conv_f32_ok(), native.int8_gemm_ok(4),"
        " native.library().depthwise_lanes, native.library().onyx_isa(), '|', native.status())\n"
    )
    out = _status_in_subprocess({"ONYX_NATIVE_ISA": "avx2"}, code)
    assert out.startswith("True False False 1 0 |") and "portable" in out, out


@needs_native
def test_a_family_joined_late_that_disagrees_is_off_alone():
    # a family imported after others bound (a library older than its sources): its kernels
    # take their numpy paths, the families bound before keep the library
    name = "onyx_test_late_family"
    family = types.ModuleType(name)
    family.core = _core
    sys.modules[name] = family
    short = type(
        "_Short", (ctypes.Structure,), {"__module__": name, "_fields_": [("x", ctypes.c_void_p)]}
    )
    _core.abi("pool2d")(short)
    try:
        _core.join(name, lambda lib, isa: None)
        assert family.core.lib is None and family.core.threads is _core.threads
        window = importlib.import_module("onyx.runtime.native.window")  # (bound on any ISA)
        assert native.available() and window.core.lib is not None
        assert "onyx_test_late_family off: _Short != pool2d" in native.load_status()
    finally:
        _core._STRUCTS["pool2d"].remove(short)
        _core.joined.pop(name)
        _core.families_off.pop(name, None)
        del sys.modules[name]
    assert "off" not in native.load_status()


@needs_native
def test_a_family_using_an_off_familys_kernels_is_off_too():
    # (gemm_i8 runs depthwise's IntPlaneConv: with depthwise off, it must not reach the library)
    off, name = "onyx_test_off_family", "onyx_test_leaning_family"
    family = types.ModuleType(name)
    family.core = _core
    family.borrowed = type("Borrowed", (), {"__module__": off})
    sys.modules[name] = family
    _core.families_off[off] = "its struct differs"
    try:
        _core.join(name, lambda lib, isa: None)
        assert family.core.lib is None and native.available()
        assert f"{name} off: it uses {off}, which is off" in native.load_status()
    finally:
        _core.joined.pop(name)
        _core.families_off.pop(name, None)
        _core.families_off.pop(off)
        del sys.modules[name]


def test_the_int8_gemm_family_imports_the_depthwise_family_only_for_its_nhwc_depthwise_conv():
    # (a transformer's products and a ResNet's convs run no depthwise conv: its family's
    # import was 0.4 ms of their cold start)
    code = (
        "import sys\n"
        "from onyx.runtime.native import gemm_i8\n"
        "print('onyx.runtime.native.depthwise' in sys.modules)\n"
        "cls = gemm_i8.NhwcDepthwise\n"
        "from onyx.runtime.native.depthwise import IntPlaneConv\n"
        "print('onyx.runtime.native.depthwise' in sys.modules, issubclass(cls, IntPlaneConv),\n"
        "      cls.__qualname__, gemm_i8.NhwcDepthwise is cls)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "NhwcDepthwise", "True"]


def test_no_nhwc_depthwise_conv_where_the_depthwise_family_is_off(monkeypatch):
    # (it runs that family's IntPlaneConv: the channels-last conv then takes its NCHW kernel)
    from onyx.runtime.native import depthwise, gemm_i8

    monkeypatch.delitem(gemm_i8.__dict__, "NhwcDepthwise", raising=False)
    monkeypatch.setitem(_core.families_off, depthwise.__name__, "its struct differs")
    assert gemm_i8._nhwc_depthwise() is None
    monkeypatch.undo()
    assert gemm_i8._nhwc_depthwise() is not None


def test_every_family_module_is_listed_and_joins_the_library():
    # a family is imported when a kernel first asks for one of its names: it must be in
    # FAMILY_NAMES, its public names in _EXPORTS, and its last line must join the library
    from pathlib import Path

    here = Path(native.__file__).parent
    modules = {p.stem for p in here.glob("*.py")} - {"__init__", "_core"}
    assert modules == set(native.FAMILY_NAMES) == set(native._EXPORTS) | {"nhwc"}
    for name in modules:
        lines = (here / f"{name}.py").read_text().rstrip().splitlines()
        assert lines[-1].startswith("core.join(__name__, bind)"), name
        assert f"onyx.runtime.native.{name}" in _core.joined
    for name in native._ORIGIN:  # every exported name resolves
        assert getattr(native, name) is not None, name


def test_the_library_handed_to_tests_has_every_family_bound():
    # (a test that wraps an entry point to count its calls must wrap the bound one)
    code = (
        "from onyx.runtime import native\n"
        "lib = native.library()\n"
        "print(lib is None or lib.onyx_conv1d_f32.argtypes is not None)\n"
    )
    assert _status_in_subprocess({}, code) == "True"


def test_each_family_binds_what_it_calls():
    # a family is bound when it is imported: every library attribute its kernels read (set
    # by a bind, not an onyx_ symbol) must be set by its own bind or by a family it imports
    import re
    from pathlib import Path

    here = Path(native.__file__).parent
    sources = {name: (here / f"{name}.py").read_text() for name in native.FAMILY_NAMES}
    binds = {name: src[src.index("\ndef bind(") :] for name, src in sources.items()}
    for name, src in sources.items():
        bound = binds[name] + "".join(
            binds[other] for other in re.findall(r"^from \.(\w+) import", src, re.M)
            if other in binds
        )  # fmt: skip
        used = set(re.findall(r"lib\.(\w+)", src[: src.index("\ndef bind(")]))
        for attr in used - {"onyx_parallel", "onyx_pool_threads"}:
            if attr.startswith("onyx_"):
                continue
            looped = attr.endswith("_range") and 'f"{name}_range"' in bound
            assert f"lib.{attr}" in bound or looped, (name, attr)


def test_threads_asking_for_a_family_at_once_get_it_bound_once():
    # (the import lock holds the others until the first thread's import has joined)
    code = (
        "import threading, time\n"
        "from onyx.runtime import native\n"
        "from onyx.runtime.native import _core\n"
        "joins, real, got = [], _core.join, []\n"
        "def join(name, bind):\n"
        "    joins.append(name); time.sleep(0.05); real(name, bind)\n"
        "_core.join = join\n"
        "start = threading.Barrier(4)\n"
        "def ask():\n"
        "    start.wait(); got.append((native.svm_coupling, native.load_status()))\n"
        "threads = [threading.Thread(target=ask) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "lib = native.library()\n"
        "print(joins.count('onyx.runtime.native.trees'), len(set(got)),\n"
        "      lib is None or lib.onyx_svm_coupling.argtypes is not None)\n"
    )
    assert _status_in_subprocess({}, code) == "1 1 True"


@needs_native
def test_a_family_first_imported_while_disabled_binds_when_the_block_ends():
    # (a first session under native.disabled() imports the pool family against no library;
    # its first native call after the block found pool2d_f32_range unbound)
    code = (
        "import sys, numpy as np\n"
        "from onyx.runtime import native\n"
        "from onyx.runtime.native import _core\n"
        "assert 'onyx.runtime.native.window' not in sys.modules\n"
        "with native.disabled():\n"
        "    from onyx.runtime.native import window\n"
        "x = np.ones((1, 2, 6, 6), np.float32)\n"
        "y = window.pool2d_f32(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (3, 3), average=True)\n"
        "print(_core.lib.pool2d_f32_range is not None, float(y.sum()))\n"
    )
    assert _status_in_subprocess({}, code) == "True 18.0"


@needs_native
def test_each_struct_read_alone_is_its_rows_of_the_whole_table():
    # (abi.c's onyx_abi_struct: a family's check reads its own structs' rows)
    lib = native.library()
    table = _core._abi_table(lib)
    assert {name: _core._abi_struct(lib, name) for name in table} == table
    assert _core._abi_struct(lib, "no_such_struct") is None


@needs_native
def test_a_cold_start_reads_the_rows_of_the_structs_it_checks_only():
    # the whole ABI table, read row by row through ctypes at the package's import, cost a
    # cold start a third of a millisecond: the families imported check their own structs
    code = (
        "import numpy as np, onyx\n"
        "from onyx.runtime import native\n"
        "from onyx.runtime.native import _core\n"
        "at_import = _core._abi_table.cache_info().currsize\n"
        "s = onyx.InferenceSession(onyx.__path__[0] + '/examples/tiny_cnn.onnx')\n"
        "s.run(None, {s.get_inputs()[0].name: np.zeros([1, 1, 28, 28], np.float32)})\n"
        "rows = _core._abi_struct.cache_info().currsize\n"
        "print(at_import, _core._abi_table.cache_info().currsize, rows, native.status())\n"
    )
    at_import, after_run, rows, status = _status_in_subprocess({}, code).split(" ", 3)
    assert (at_import, after_run) == ("0", "0") and status.startswith("loaded"), status
    # nor even the rows of the structs it checks: they agree (one onyx_abi_agrees call each)
    assert rows == "0"


@needs_native
def test_the_library_refuses_every_layout_but_its_structs_own():
    # (abi.c's onyx_abi_agrees: a family's structs checked in one call, each line exactly the
    # C struct's size, fields, order, offsets and sizes)
    native.FAMILIES  # noqa: B018  (every family imported: their structs registered)
    agrees = native.library().onyx_abi_agrees
    cls = _core._STRUCTS["pool2d"][0]
    right = _core._layout(cls, "pool2d")
    assert right.startswith("pool2d 152 x:0:8 y:8:8 H:16:8 ")
    assert agrees(f"{right}\n".encode()) == 1
    others = "".join(f"{_core._layout(c, n)}\n" for n, cs in _core._STRUCTS.items() for c in cs)
    assert agrees(others.encode()) == 1
    wrong = [
        right.replace("pool2d 152", "pool2d 144"),  # another size
        right.replace("H:16:8", "H:16:4"),  # a field's size
        right.replace("y:8:8", "y:16:8"),  # an offset
        right.replace("y:8:8 H:16:8", "H:16:8 y:8:8"),  # the order
        right.replace(" H:16:8", " h:16:8"),  # a name
        right.rsplit(" ", 1)[0],  # a field short
        f"{right} extra:152:8",  # a field more
        right.replace("pool2d", "no_such_struct"),
        right + "x" * 9000,  # (longer than the C side compares: refused)
    ]
    for layout in wrong:
        assert agrees(f"{layout}\n".encode()) == 0, layout
        assert agrees(f"{others}{layout}\n".encode()) == 0, layout  # one wrong line of many
    assert agrees(right.encode()) == 0  # (a line without its newline)


@needs_native
def test_a_struct_that_disagrees_at_its_familys_import_is_refused_in_words(monkeypatch):
    # the one-call check says no; the rows are then read to say what differs
    @_core.abi("pool2d")
    class _Shifted(ctypes.Structure):  # pool2d's fields, H and W swapped in size
        _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("H", ctypes.c_int32)] + [
            (name, ctypes.c_int64)
            for name in ("W", "OH", "OW", "kh", "kw", "sh", "sw", "dh", "dw", "top", "left")
            + ("bottom", "right", "average", "include_pad", "by_columns")
        ]

    _Shifted.__module__ = "a_family"
    try:
        assert not _core._agree(native.library(), "a_family")
        problems = _core.abi_mismatches(native.library(), "a_family")
    finally:
        _core._STRUCTS["pool2d"].remove(_Shifted)
    assert len(problems) == 1 and "_Shifted != pool2d" in problems[0] and "'H'" in problems[0]


def test_a_library_without_the_one_call_check_has_its_rows_read():
    # (a library built before onyx_abi_agrees: abi_mismatches reads the rows, as before)
    assert _core._agree(types.SimpleNamespace(), None) is False


def test_the_package_makes_no_ctypes_struct_before_a_family_is_imported():
    # abi_row's class (read only where a library's structs disagree) cost every process's
    # import of the package a tenth of a millisecond
    code = (
        "import ctypes\n"
        "from onyx.runtime import native\n"
        "print(native.available() and native.load_status().startswith('loaded'),\n"
        "    [t.__name__ for t in ctypes.Structure.__subclasses__()\n"
        "     if t.__module__.startswith('onyx')])\n"
    )
    out = _status_in_subprocess({}, code)
    assert out in ("True []", "False []"), out
