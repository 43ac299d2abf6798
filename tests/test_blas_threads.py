"""onyx.runtime.blas_threads: the BLAS libraries a run limits, found without threadpoolctl."""

import ctypes
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np  # noqa: F401  (loads numpy's BLAS)
import pytest
from threadpoolctl import threadpool_info

import onyx
from onyx.runtime import blas_threads, concurrency

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


def _blas_info() -> list[dict]:
    return [i for i in threadpool_info() if i["user_api"] == "blas"]


def _real(paths) -> list[str]:
    return sorted(os.path.realpath(p) for p in paths)


def test_finds_what_threadpoolctl_finds_or_defers_to_it():
    libs = blas_threads.loaded_openblas()
    info = _blas_info()
    if libs is None:  # another BLAS, or an OpenMP build: threadpoolctl's survey serves it
        assert not sys.platform.startswith("linux") or any(
            i["internal_api"] != "openblas" or i["threading_layer"] == "openmp" for i in info
        )
        return
    assert _real(lib.filepath for lib in libs) == _real(i["filepath"] for i in info)
    by_path = {os.path.realpath(i["filepath"]): i["num_threads"] for i in info}
    assert [lib.get_num_threads() for lib in libs] == [
        by_path[os.path.realpath(lib.filepath)] for lib in libs
    ]


def test_a_count_set_through_it_is_the_library_s():
    libs = blas_threads.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS of its own threads here")
    lib = libs[0]
    had = lib.get_num_threads()
    try:
        lib.set_num_threads(1)
        path = os.path.realpath(lib.filepath)
        seen = next(i for i in _blas_info() if os.path.realpath(i["filepath"]) == path)
        assert seen["num_threads"] == 1 == lib.get_num_threads()
    finally:
        lib.set_num_threads(had)
    assert lib.get_num_threads() == had


def test_other_blas_libraries_defer_to_threadpoolctl(monkeypatch):
    libs = blas_threads.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS of its own threads here")
    ours = libs[0].filepath
    monkeypatch.setattr(blas_threads, "_loaded_files", lambda: {ours})
    assert [lib.filepath for lib in blas_threads.loaded_openblas()] == [ours]
    monkeypatch.setattr(blas_threads, "_loaded_files", lambda: {ours, "/opt/lib/libmkl_rt.so.2"})
    assert blas_threads.loaded_openblas() is None


def test_the_loaded_files_are_those_the_process_maps():
    found = blas_threads._loaded_files()  # noqa: SLF001
    with open("/proc/self/maps", "rb") as f:
        mapped = blas_threads._mapped_files(f.read())  # noqa: SLF001
    assert found is not None and len(found) > 3
    # (the maps also list data files; every loaded object is mapped)
    assert set(_real(found)) <= set(_real(mapped))


def test_maps_lines_give_their_paths():
    maps = (
        b"7f00-7f01 r-xp 00000000 08:01 1        /usr/lib/libopenblas.so.0\n"
        b"7f02-7f03 rw-p 00000000 00:00 0 \n"
        b"7f04-7f05 r--p 00000000 00:00 0        [vdso]\n"
        b"7f06-7f07 r-xp 00000000 08:01 2        /opt/my libs/libx.so (deleted)\n"
    )
    found = blas_threads._mapped_files(maps)  # noqa: SLF001
    assert found == {"/usr/lib/libopenblas.so.0", "/opt/my libs/libx.so (deleted)"}


def test_concurrency_uses_them():
    concurrency.refresh_blas_libs()  # (libraries loaded since an earlier test's survey)
    libs = concurrency._blas_libs()  # noqa: SLF001  (the controllers runs set)
    assert _real(lib.filepath for lib in libs) == _real(i["filepath"] for i in _blas_info())


def test_the_load_count_grows_with_a_new_object():
    count = blas_threads.load_count()
    if count is None:
        pytest.skip("no dl_iterate_phdr load counter here")
    _load_a_new_object()
    assert blas_threads.load_count() > count


def test_a_session_surveys_again_after_a_load():
    """A library loaded after the first survey (scipy's OpenBLAS, imported later) is found
    at the next session's creation, and limited by its runs."""
    if blas_threads.load_count() is None:
        pytest.skip("no dl_iterate_phdr load counter here")
    onyx.InferenceSession(str(TINY))  # (its imports may load objects: _json's, ...)
    first = concurrency._blas_libs()  # noqa: SLF001
    onyx.InferenceSession(str(TINY))
    assert concurrency._libs is first  # noqa: SLF001  (nothing loaded since: kept)
    _load_a_new_object()
    onyx.InferenceSession(str(TINY))
    assert concurrency._libs is None  # noqa: SLF001  (found again at the next run)
    assert _real(lib.filepath for lib in concurrency._blas_libs()) == _real(  # noqa: SLF001
        i["filepath"] for i in _blas_info()
    )


def _load_a_new_object() -> None:
    for name in ("_ctypes_test", "_testcapi", "_sqlite3", "_lzma", "_bz2", "_decimal", "_curses"):
        if name not in sys.modules:
            try:
                importlib.import_module(name)
                return
            except ImportError:
                continue
    pytest.skip("no C extension module left to load")


def test_the_native_walk_finds_what_the_callback_walk_finds(monkeypatch):
    # (abi.c's onyx_loaded_objects: the same objects and count as a ctypes callback per object)
    walked = blas_threads._native_walk()  # noqa: SLF001
    if walked is None:
        pytest.skip("no native library or no dl_iterate_phdr here")
    names, adds = walked
    native_files = blas_threads._loaded_files()  # noqa: SLF001
    native_count = blas_threads.load_count()
    monkeypatch.setattr(blas_threads, "_native_walk", lambda names=True: None)
    assert blas_threads._loaded_files() == native_files  # noqa: SLF001
    assert blas_threads.load_count() == native_count == (adds or None)
    assert len(names) == len(native_files) > 3


def test_a_first_run_makes_no_ctypes_callback_for_the_survey():
    # a ctypes callback's first thunk cost a fresh process's first run a sixth of a ms
    code = (
        "import numpy as np, onyx\n"
        "from onyx.runtime import blas_threads, native\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros([1, 1, 28, 28], np.float32)})\n"
        "print(not native.available() or blas_threads._phdr_types.cache_info().currsize == 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_the_survey_makes_no_ctypes_type():
    # a fresh process's first run surveys BLAS: each ctypes type made on the way (a PyDLL's
    # function class, create_string_buffer's array type, POINTER(c_uint64)) cost it 10-30 us
    code = (
        "import ctypes, _ctypes, numpy as np\n"
        "from onyx.runtime import blas_threads, native\n"
        "def types():\n"
        "    kinds = (_ctypes.CFuncPtr, _ctypes.Array, _ctypes._Pointer, _ctypes.Structure)\n"
        "    return {t for k in kinds for t in k.__subclasses__()}\n"
        "before = types()\n"
        "blas_threads.load_count()\n"
        "libs = blas_threads.loaded_openblas()\n"
        "print(not native.available() or not libs or types() == before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_the_openblas_found_keeps_the_gil_as_a_pydll_would():
    libs = blas_threads.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS of its own threads here")
    flags = ctypes.pythonapi._FuncPtr._flags_  # noqa: SLF001  (a PyDLL's: GIL kept)
    assert all(
        type(f)._flags_ == flags for lib in libs for f in (lib.get_num_threads, lib.set_num_threads)
    )
