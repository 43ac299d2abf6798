"""window.c's 8-bit MaxPool (a quantized model's MaxPool on its bytes) against the numpy
kernel, exactly: uint8 and int8 (their extremes in the planes), kernels 1 to 5, strides 1 to
3, uneven pads, ceil mode, windows wider than the image, planes narrower than a vector; a
dilated pool keeps the numpy path. With ONYX_NATIVE=0 both sides are the numpy kernel."""

from __future__ import annotations

import numpy as np
import pytest
from test_native_pool_narrow import _Ctx, _numpy  # (the numpy oracle's call, shared)

from onyx.runtime.kernels import pool

_GEOMETRIES = [  # (H, W, kernel, stride, pads, ceil_mode)
    (112, 112, 3, 2, [1, 1, 1, 1], 0),  # ResNet's stem pool
    (56, 56, 3, 2, [0, 0, 1, 1], 0),
    (55, 55, 3, 2, [0, 0, 0, 0], 1),
    (27, 27, 3, 1, [1, 1, 1, 1], 0),
    (40, 37, 2, 2, [0, 1, 1, 0], 1),
    (33, 50, 2, 1, [1, 0, 0, 1], 0),
    (20, 70, 5, 3, [2, 2, 2, 2], 1),
    (7, 5, 4, 1, [3, 3, 3, 3], 0),  # windows reaching past both edges
    (9, 9, 1, 1, [0, 0, 0, 0], 0),
    (3, 130, 3, 2, [1, 1, 1, 1], 1),  # a row of several vectors
    (15, 17, 5, 2, [2, 2, 2, 2], 0),  # stride 2 from an even left pad: pairs from the second
    (16, 21, 3, 2, [0, 3, 2, 0], 1),  # stride 2 from an odd left pad of 3
]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("geometry", _GEOMETRIES, ids=lambda g: "x".join(map(str, g[:4])))
def test_8bit_max_pools_match_the_numpy_kernel(geometry, dtype, monkeypatch):
    H, W, k, s, pads, ceil_mode = geometry
    info = np.iinfo(dtype)
    rng = np.random.default_rng(H * W + k)
    x = rng.integers(info.min, info.max, (2, 3, H, W), endpoint=True).astype(dtype)
    x[0, 0, 0, 0], x[0, 1, -1, -1], x[1, 2] = info.max, info.min, info.min  # (a plane of lowest)
    geo = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "ceil_mode": ceil_mode}
    got = pool.max_pool(_Ctx, x, **geo)
    want = _numpy(pool.max_pool, (_Ctx, x), geo, monkeypatch)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_8bit_max_pool_of_a_strided_view_and_with_dilations(monkeypatch):
    x = np.random.default_rng(1).integers(0, 256, (1, 4, 20, 22)).astype(np.uint8)
    view = x[:, ::2]  # (not contiguous: copied first)
    for geo in (
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 2], "strides": [1, 2], "dilations": [2, 3]},
    ):
        got = pool.max_pool(_Ctx, view, **geo)
        want = _numpy(pool.max_pool, (_Ctx, view), geo, monkeypatch)
        np.testing.assert_array_equal(got, want)


def test_8bit_max_pool_of_an_empty_batch():
    x = np.zeros((0, 3, 8, 8), np.int8)
    y = pool.max_pool(_Ctx, x, kernel_shape=[2, 2], strides=[2, 2])
    assert y.shape == (0, 3, 4, 4) and y.dtype == np.int8
