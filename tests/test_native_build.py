"""A failed build of the optional native library leaves no library behind (issue 21's
hardening findings): the install goes on without it, and a library kept from an earlier build
(older sources, another ABI) must not load in its place. setup.py's build_native is driven
here on a one-file extension, built in place as an editable install does, then broken."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SETUP = """
import runpy, sys
import setuptools

real_setup = setuptools.setup
setuptools.setup = lambda **kw: None  # (onyx's setup.py for its command only)
command = runpy.run_path({setup!r})["build_native"]
setuptools.setup = real_setup
real_setup(
    name="pkg",
    packages=["pkg"],
    cmdclass={{"build_ext": command}},
    ext_modules=[setuptools.Extension("pkg._k", ["pkg/k.c"], optional=True)],
    script_args=sys.argv[1:],
)
"""

GOOD = "int pkg_answer(void) { return 42; }\n"
BROKEN = "int pkg_answer(void) { return 42 }\n"  # (a missing semicolon)


def _build(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "setup.py", "-q", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "k.c").write_text(GOOD)
    (tmp_path / "setup.py").write_text(_SETUP.format(setup=str(ROOT / "setup.py")))
    return tmp_path


def _edit(project: Path, text: str) -> None:
    """k.c rewritten, dated later than any library built from it (distutils compares whole
    seconds: a rewrite within the second of a build would look up to date)."""
    source = project / "pkg" / "k.c"
    source.write_text(text)
    later = source.stat().st_mtime + 10
    os.utime(source, (later, later))


def _libraries(where: Path) -> list[str]:
    return glob.glob(os.path.join(where, "**", "_k*.so"), recursive=True) + glob.glob(
        os.path.join(where, "**", "_k*.pyd"), recursive=True
    )


def test_a_failed_in_place_build_removes_the_stale_library(project: Path):
    done = _build(project, "build_ext", "--inplace")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _libraries(project / "pkg"), "the first build made no library"
    _edit(project, BROKEN)
    done = _build(project, "build_ext", "--inplace")
    assert done.returncode == 0, done.stderr[-3000:]  # (optional: the install goes on)
    assert "error" in (done.stdout + done.stderr).lower()  # (the compiler did fail)
    assert _libraries(project / "pkg") == []
    assert _libraries(project / "build") == []
    _edit(project, GOOD)  # fixed: built again, in place again
    assert _build(project, "build_ext", "--inplace").returncode == 0
    assert _libraries(project / "pkg")


def test_a_failed_build_removes_its_own_stale_output(project: Path):
    """A plain build (a wheel's) keeps nothing of an earlier one in build/ either."""
    assert _build(project, "build_ext").returncode == 0
    assert _libraries(project / "build")
    _edit(project, BROKEN)
    assert _build(project, "build_ext").returncode == 0
    assert _libraries(project / "build") == []


def test_build_native_is_setup_pys_build_command():
    assert 'cmdclass={"build_ext": build_native}' in (ROOT / "setup.py").read_text()


def test_a_library_of_another_abi_version_stays_off(monkeypatch):
    """The loader's second line: a library whose entry points are another version's
    (abi.h's ONYX_ABI_VERSION) is refused with the reason in native.status()."""
    from onyx.runtime import native
    from onyx.runtime.native import _core

    if not native.available():
        pytest.skip(f"native: {native.status()}")
    assert _core._abi_version(native.library()) == _core.ABI_VERSION
    monkeypatch.setattr(_core, "ABI_VERSION", _core.ABI_VERSION + 1)
    try:
        _core.start(native.FAMILIES)
        assert not native.available() and not native.conv_f32_ok()
        assert "other sources (ABI version" in native.status() and "rebuild" in native.status()
    finally:
        monkeypatch.undo()
        _core.start(native.FAMILIES)
    assert native.available()


def test_a_library_without_an_abi_version_is_refused():
    from onyx.runtime.native import _core

    class OldLibrary:  # (one built before onyx_abi_version existed)
        pass

    assert _core._abi_version(OldLibrary()) is None
