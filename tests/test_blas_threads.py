"""onyx.runtime.blas_threads: the BLAS libraries a run limits, found without threadpoolctl."""

import sys

import numpy as np  # noqa: F401  (loads numpy's BLAS)
import pytest
from threadpoolctl import threadpool_info

from onyx.runtime import blas_threads, concurrency


def _blas_info() -> list[dict]:
    return [i for i in threadpool_info() if i["user_api"] == "blas"]


def test_finds_what_threadpoolctl_finds_or_defers_to_it():
    libs = blas_threads.loaded_openblas()
    info = _blas_info()
    if libs is None:  # another BLAS, or an OpenMP build: threadpoolctl's survey serves it
        assert not sys.platform.startswith("linux") or any(
            i["internal_api"] != "openblas" or i["threading_layer"] == "openmp" for i in info
        )
        return
    assert sorted(lib.filepath for lib in libs) == sorted(i["filepath"] for i in info)
    assert [lib.get_num_threads() for lib in libs] == [
        next(i["num_threads"] for i in info if i["filepath"] == lib.filepath) for lib in libs
    ]


def test_a_count_set_through_it_is_the_library_s():
    libs = blas_threads.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS of its own threads here")
    lib = libs[0]
    had = lib.get_num_threads()
    try:
        lib.set_num_threads(1)
        seen = next(i for i in _blas_info() if i["filepath"] == lib.filepath)
        assert seen["num_threads"] == 1 == lib.get_num_threads()
    finally:
        lib.set_num_threads(had)
    assert lib.get_num_threads() == had


def test_other_blas_libraries_defer_to_threadpoolctl(monkeypatch, tmp_path):
    libs = blas_threads.loaded_openblas()
    if not libs:
        pytest.skip("no OpenBLAS of its own threads here")
    maps = tmp_path / "maps"
    line = "7f00-7f01 r-xp 00000000 08:01 {} {}\n"
    maps.write_text(line.format(1, libs[0].filepath))
    monkeypatch.setattr(blas_threads, "open", _reading(maps), raising=False)
    assert [lib.filepath for lib in blas_threads.loaded_openblas()] == [libs[0].filepath]
    maps.write_text(line.format(1, libs[0].filepath) + line.format(2, "/opt/lib/libmkl_rt.so.2"))
    assert blas_threads.loaded_openblas() is None


def _reading(maps):
    """open() that reads ``maps`` for /proc/self/maps."""
    return lambda path, *args, **kwargs: open(
        maps if path == "/proc/self/maps" else path, *args, **kwargs
    )


def test_concurrency_uses_them():
    libs = concurrency._blas_libs()  # noqa: SLF001  (the controllers runs set)
    assert sorted(lib.filepath for lib in libs) == sorted(i["filepath"] for i in _blas_info())
