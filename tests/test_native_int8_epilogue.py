"""The int8 GEMM's byte epilogue (gemm_i8.c's byte_epilogue: the named accumulators' rows
requantized and narrowed by saturating packs): every tile height (1-6 rows), one or two
16-column halves and partial panels, uint8 and int8 outputs, per-tensor and per-column
scales, A's and B's zero points (the column and row corrections), and values that clamp at
both ends, each to the bits of the numpy formula onnxruntime's requantization follows."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.native import _core

RNG = np.random.default_rng(2311)

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native library")
needs_vnni = pytest.mark.skipif(not _core.vnni, reason="needs the native int8 GEMM (VNNI)")


def _expected(a, b, za, zb, scale, y_zp):
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    v = acc.astype(np.float32) * scale
    info = np.iinfo(y_zp.dtype)
    zp = int(y_zp)
    return (np.clip(np.rint(v), info.min - zp, info.max - zp) + zp).astype(y_zp.dtype)


@needs_vnni
@pytest.mark.parametrize("y_type", [np.uint8, np.int8])
@pytest.mark.parametrize("a_type", [np.uint8, np.int8])
@pytest.mark.parametrize("N", [5, 16, 20, 32, 45, 70])
@pytest.mark.parametrize("per_column", [False, True])
def test_requantized_bytes_match_the_formula(y_type, a_type, N, per_column):
    M, K = 13, 19  # (two full 6-row tiles and a 1-row one; a partial last quad)
    info = np.iinfo(a_type)
    a = RNG.integers(info.min, info.max + 1, (M, K), dtype=a_type)
    b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
    za = 3 if a_type == np.uint8 else -5
    shape = (N,) if per_column else ()
    # scales spread so that many values clamp at both ends and many land in range
    scale = (RNG.random(shape) * 0.02 + 0.0005).astype(np.float32)
    y_zp = np.array(100 if y_type == np.uint8 else -7, y_type)
    for zb in (0, 4):  # (4: the row corrections' path)
        got = native.int8_gemm(
            a, native.pack(b, a.dtype, za), za, zb, scale=scale, y_zero_point=y_zp
        )
        want = _expected(a, b, za, zb, scale, y_zp)
        assert got.dtype == want.dtype and got.shape == (M, N)
        np.testing.assert_array_equal(got, want)
        assert (got == np.iinfo(y_type).min).any() and (got == np.iinfo(y_type).max).any()


@needs_vnni
@pytest.mark.parametrize("M", range(1, 8))
def test_every_tile_height(M):
    K, N = 16, 48
    a = RNG.integers(0, 256, (M, K), dtype=np.uint8)
    b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
    scale = np.float32(0.004)
    y_zp = np.array(128, np.uint8)
    got = native.int8_gemm(a, native.pack(b, a.dtype, 128), 128, scale=scale, y_zero_point=y_zp)
    np.testing.assert_array_equal(got, _expected(a, b, 128, 0, scale, y_zp))


@pytest.mark.parametrize("shape", [(1, 1), (7, 9), (8, 8), (16, 24), (17, 33), (196, 72)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_transpose_words_is_the_transpose(shape, dtype):
    """native.transpose_words (8 x 8 blocks, the edges element by element): a pointwise
    ConvIntegerToFloat's (pixels, channels) result to NCHW."""
    src = RNG.integers(-(2**31), 2**31 - 1, shape, dtype=np.int64).astype(np.int32).view(dtype)
    got = native.transpose_words(src)
    assert got.flags.c_contiguous and got.shape == shape[::-1]
    np.testing.assert_array_equal(got.view(np.int32), src.T.view(np.int32))


@pytest.mark.parametrize(
    "shape", [(1, 37), (37, 1), (0, 5), (5, 0), (8, 1), (1, 8), (9, 8), (8, 9), (64, 40)]
)
def test_transpose_words_tails(shape):
    """1 x N, N x 1, empty and one-past-a-block shapes; a misaligned source (from a byte
    buffer at offset 1) and a strided one go the same way."""
    src = RNG.random(shape, dtype=np.float32)
    got = native.transpose_words(src)
    assert got.flags.c_contiguous and got.shape == shape[::-1]
    np.testing.assert_array_equal(got, src.T)
    n = src.size
    odd = np.frombuffer(b"\0" + src.tobytes(), np.float32, count=n, offset=1).reshape(shape)
    assert not odd.flags.aligned or n == 0
    np.testing.assert_array_equal(native.transpose_words(odd), src.T)
    wide = np.repeat(src, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(native.transpose_words(wide), src.T)


def test_transpose_words_into_dst():
    """transpose_words writes into a given C-contiguous dst, as transpose_bytes does."""
    src = RNG.random((2, 19, 23), dtype=np.float32)
    dst = np.empty((2, 23, 19), np.float32)
    for i in range(2):
        assert np.shares_memory(native.transpose_words(src[i], dst[i]), dst[i])
    np.testing.assert_array_equal(dst, src.transpose(0, 2, 1))


@needs_vnni
@pytest.mark.parametrize(
    "y_type, y_zp", [(np.uint8, 0), (np.uint8, 255), (np.int8, -128), (np.int8, 127)]
)
@pytest.mark.parametrize("scale", [0.5, 0.25, 1.5])
def test_ties_and_extreme_zero_points(y_type, y_zp, scale):
    """Halfway products (rint's ties to even) and zero points at either end of the output
    type, so that one bound is the zero point itself: every column count up to two halves."""
    M, K = 7, 8
    a = RNG.integers(0, 256, (M, K), dtype=np.uint8)
    y_zp = np.array(y_zp, y_type)
    for N in (3, 16, 17, 31, 32):
        b = RNG.integers(-3, 4, (K, N), dtype=np.int8)  # (small products: ties and both ends)
        got = native.int8_gemm(
            a, native.pack(b, a.dtype, 128), 128, scale=np.float32(scale), y_zero_point=y_zp
        )
        np.testing.assert_array_equal(got, _expected(a, b, 128, 0, np.float32(scale), y_zp))


@needs_vnni
@pytest.mark.parametrize("kind", ["int32", "bytes", "float"])
@pytest.mark.parametrize("M", [1, 13, 40])
def test_a_kept_set_up_runs_as_one_call(kind, M):
    """int8_gemm_setup's call (a bound QLinearMatMul's / QGemm's) is one native call
    (onyx_gemm_call: the kept task and epilogue copied in C): the bits of the per-call path,
    for int32, requantized and float results; an output narrower than N is refused, not
    written past."""
    K, N = 19, 45
    a = RNG.integers(0, 256, (M, K), dtype=np.uint8)
    b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
    packed = native.pack(b, a.dtype, 3)
    params = {
        "int32": {},
        "bytes": {"scale": np.float32(0.01), "y_zero_point": np.array(100, np.uint8)},
        "float": {"scale": (RNG.random(N) * 0.01).astype(np.float32), "float_out": True},
    }[kind]
    bias = RNG.integers(-500, 500, N).astype(np.int32)
    run = native.int8_gemm_setup(a, packed, 3, 0, col_bias=bias, **params)
    want = native.int8_gemm(a, packed, 3, 0, col_bias=bias, **params)
    np.testing.assert_array_equal(run(a), want)
    call = _core_gemm_call(a, packed, bias, params)
    assert call.whole_call() is not None
    narrow = np.empty((M, N - 1), want.dtype)
    with pytest.raises(InvalidArgument):
        call.whole_call()(a, narrow)


def _core_gemm_call(a, packed, bias, params):
    from onyx.runtime.native import gemm_i8

    M, K = a.shape
    return gemm_i8._GemmCall(
        a, packed, M, K, 3, 0, None, bias, params.get("scale"), params.get("y_zero_point"),
        False, params.get("float_out", False),
    )  # fmt: skip


@needs_vnni
def test_a_kept_set_up_takes_rows_of_any_stride_and_none():
    """A kept set-up's call takes what the per-call path took: a row broadcast (stride 0),
    rows in reverse (a negative stride), and no rows at all (its one native call refused
    these as sizes out of range: a QGemm fed a[::-1] or a (0, K) input failed)."""
    K, N = 19, 45
    b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
    packed = native.pack(b, np.dtype(np.uint8), 3)
    params = {"scale": np.float32(0.01), "y_zero_point": np.array(100, np.uint8)}
    a = RNG.integers(0, 256, (5, K), dtype=np.uint8)
    for rows in (np.broadcast_to(a[0], (1, K)), a[::-1], np.empty((0, K), np.uint8)):
        run = native.int8_gemm_setup(np.ascontiguousarray(rows), packed, 3, 0, **params)
        want = native.int8_gemm(np.ascontiguousarray(rows), packed, 3, 0, **params)
        for _ in range(2):
            np.testing.assert_array_equal(run(rows), want)
