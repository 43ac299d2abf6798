"""The native bindings' guards are real checks (issue 21's hardening findings): an ``assert``
vanishes under ``python -O`` and bad arguments would reach C, so the bindings raise onyx
errors (or take numpy's path where that is the contract), and the C byte transposes refuse
arguments out of range themselves (checks.h), as onyx_transpose_u32 does."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.native import _core

needs_native = pytest.mark.skipif(not native.available(), reason="native library not loaded")
needs_vnni = pytest.mark.skipif(not _core.vnni, reason="needs the native int8 GEMM (VNNI)")

NATIVE_DIR = Path(native.__file__).parent


def test_native_bindings_guard_without_assert():
    """``python -O`` strips asserts: no binding may rely on one to keep bad arguments out."""
    found = [
        f"{path.name}:{node.lineno}"
        for path in sorted(NATIVE_DIR.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert not found, f"asserts used as guards in the native bindings: {found}"


def test_transpose_bytes_refuses_arrays_that_are_no_byte_transpose():
    src = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for dst in (
        np.empty((3, 4), np.uint8),  # not the transposed shape
        np.empty((4, 2), np.uint8),  # too few columns: the C would write past them
        np.empty((4, 3), np.int8),  # another type
        np.empty((4, 3), np.float32),
    ):
        with pytest.raises(InvalidArgument, match="transpose_bytes"):
            native.transpose_bytes(src, dst)
    with pytest.raises(InvalidArgument, match="transpose_bytes"):
        native.transpose_bytes(np.zeros((2, 3, 4), np.uint8), np.zeros((4, 3, 2), np.uint8))


@pytest.mark.parametrize("view", ["strided_src", "strided_dst", "reversed_rows"])
def test_transpose_bytes_takes_numpy_path_for_rows_the_library_does_not_take(view):
    """Rows that are not runs of bytes are numpy's copy, not an assert (nor a C call)."""
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (24, 40), dtype=np.uint8)
    dst = np.zeros((40, 24), np.uint8)
    if view == "strided_src":
        src = src[:, ::2]
        dst = dst[::2]
    elif view == "strided_dst":
        dst = np.zeros((40, 48), np.uint8)[:, ::2]
    else:
        src = src[::-1]
    np.testing.assert_array_equal(native.transpose_bytes(src, dst), src.T)


def test_transpose_words_refuses_mismatched_arrays():
    src = np.ones((3, 4), np.float32)
    for dst in (np.empty((3, 4), np.float32), np.empty((4, 3), np.int32)):
        with pytest.raises(InvalidArgument, match="transpose_words"):
            native.transpose_words(src, dst)
    with pytest.raises(InvalidArgument, match="transpose_words"):
        native.transpose_words(np.ones((2, 3, 4), np.float32))


@needs_native
@pytest.mark.parametrize("entry, dtype", [("u8", np.uint8), ("u32", np.float32)])
def test_transposes_refuse_bad_arguments(entry, dtype):
    """onyx_transpose_u8 and _u32 check their sizes, strides and pointers (checks.h) before
    they touch anything: ONYX_INVALID, the destination unwritten (u8 trusted them: rows of
    2**40 bytes wrote wherever they reached)."""
    transpose = getattr(_core.lib, f"onyx_transpose_{entry}")
    src = np.arange(64, dtype=dtype).reshape(8, 8)
    dst = np.zeros((8, 8), dtype)
    a, b = src.ctypes.data, dst.ctypes.data
    bad = [
        (a, -1, 8, 8, b, 8),  # negative sizes
        (a, 8, -1, 8, b, 8),
        (a, 8, 8, 7, b, 8),  # rows overlapping
        (a, 8, 8, 8, b, 7),
        (a, 1 << 40, 1 << 40, 1 << 40, b, 1 << 40),  # products past any buffer
        (a, 1 << 21, 1 << 21, 1 << 21, b, 1 << 21),
        (None, 8, 8, 8, b, 8),  # null pointers
        (a, 8, 8, 8, None, 8),
    ]
    for args in bad:
        assert transpose(*args) == 2, args
    assert not dst.any()
    assert transpose(None, 0, 8, 8, None, 0) == 0  # (nothing to do)
    assert transpose(a, 8, 8, 8, b, 8) == 0
    np.testing.assert_array_equal(dst, src.T)


@needs_native
def test_to_nhwc_refuses_bad_arguments():
    lib = _core.lib
    x = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    out = np.zeros((3, 4, 8), np.uint8)
    a, b = x.ctypes.data, out.ctypes.data
    bad = [
        (a, -1, 3, 4, b, 4, 8),  # negative sizes
        (a, 2, 3, 4, b, 3, 8),  # a row narrower than the image
        (a, 9, 3, 4, b, 4, 8),  # more channels than a pixel holds
        (a, 2, 1 << 40, 1 << 40, b, 1 << 40, 8),  # products past any buffer
        (None, 2, 3, 4, b, 4, 8),
        (a, 2, 3, 4, None, 4, 8),
    ]
    for args in bad:
        assert lib.onyx_to_nhwc(*args) == 2, args
    assert not out.any()
    assert lib.onyx_to_nhwc(a, 2, 3, 4, b, 4, 8) == 0
    np.testing.assert_array_equal(out[..., :2], x.transpose(1, 2, 0))


def test_to_nhwc_refuses_an_image_that_does_not_fit():
    x = np.zeros((2, 3, 4), np.uint8)
    for dst in (
        np.zeros((3, 4, 1), np.uint8),  # fewer channels than the image
        np.zeros((4, 3, 2), np.uint8),  # another side
        np.zeros((3, 4, 2), np.float32),
        np.zeros((3, 4), np.uint8),
    ):
        with pytest.raises(InvalidArgument, match="to_nhwc"):
            native.to_nhwc(x, dst)


@pytest.mark.parametrize("layout", ["padded", "pixel_strided", "x_strided"])
def test_to_nhwc_copies_views_the_library_does_not_take(layout):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (3, 5, 6), dtype=np.uint8)
    buf = np.zeros((7, 8, 4), np.uint8)
    dst = buf[1:6, 1:7]  # (a padded buffer's interior: what the library takes)
    if layout == "pixel_strided":
        dst = np.zeros((5, 12, 4), np.uint8)[:, ::2]
    elif layout == "x_strided":
        x = rng.integers(0, 256, (3, 5, 12), dtype=np.uint8)[:, :, ::2]
    native.to_nhwc(x, dst)
    np.testing.assert_array_equal(dst[..., :3], x.transpose(1, 2, 0))


def _float_gemm_call():
    from onyx.runtime.native import gemm_i8

    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (6, 64), dtype=np.uint8)
    bm = rng.integers(-128, 128, (64, 40), dtype=np.int8)
    one = np.ones(1, np.float32)
    b = gemm_i8.pack(bm, np.uint8)
    call = gemm_i8._GemmCall(a, b, 6, 64, 0, 0, None, None, one, None, False, True)
    return call, a, bm, np.empty((6, 40), np.float32)


@needs_vnni
def test_int8_gemm_refuses_an_epilogue_it_would_read_past():
    call, a, bm, out = _float_gemm_call()
    good = np.ones(40, np.float32)
    bad = [
        (np.ones(2, np.float32), None),  # neither one scale nor one per column
        (np.ones(40, np.float64), None),
        (np.ones(80, np.float32)[::2], None),  # not contiguous
        (good, np.ones(39, np.float32)),  # a short bias
        (good, np.ones(40, np.int32)),
    ]
    for epilogue in bad:
        with pytest.raises(InvalidArgument, match="int8 GEMM"):
            call(a, out, None, float_epilogue=epilogue)
    call(a, out, None, float_epilogue=(good, np.zeros(40, np.float32)))
    expected = a.astype(np.int32) @ bm.astype(np.int32)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


@needs_vnni
def test_int8_gemm_refuses_rank1_terms_of_other_sizes():
    call, a, _, out = _float_gemm_call()
    m, n = np.ones(6, np.int32), np.ones(40, np.int32)
    for rank1 in ((m[:5], n), (m, np.ones(41, np.int32)), (m.astype(np.int64), n)):
        with pytest.raises(InvalidArgument, match="int8 GEMM"):
            call(a, out, None, rank1)


def test_refusals_hold_under_python_O():
    """The same refusals with asserts stripped (``python -O``)."""
    code = (
        "import numpy as np\n"
        "from onyx.errors import InvalidArgument\n"
        "from onyx.runtime import native\n"
        "try:\n"
        "    native.transpose_bytes(np.zeros((3, 4), np.uint8), np.zeros((4, 2), np.uint8))\n"
        "except InvalidArgument:\n"
        "    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "refused"


@needs_native
@pytest.mark.parametrize(
    "size, columns, images",
    [(-1, 8, 1), ((2**31 - 1) // 255 + 1, 8, 1), (4, 0, 1), (4, 8, -1), (1000, 2**40, 2)],
)
def test_qmean_columns_refuses_sizes_out_of_range(size, columns, images):
    """rows.c's channels-last pooling checks its task itself: a column's int32 sum of more
    than 2**31 / 255 bytes, no columns, parts that run backwards or cells past the limit are
    refused before anything is read."""
    from onyx.runtime.native import rows

    x, y = np.zeros(64, np.uint8), np.zeros(64, np.uint8)
    task = rows._GlobalPool(x.ctypes.data, y.ctypes.data, size, 1.0, 0, 0, 0, columns)
    cuts = np.array([0, images] if images >= 0 else [1, 0], np.int64)
    with pytest.raises(InvalidArgument):
        _core._run(_core.lib.qmean_columns_range, task, cuts, 1, "qmean columns")
