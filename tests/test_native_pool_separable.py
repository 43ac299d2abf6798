"""window.c's separable pools on rows of several vectors (the column strides 1 and 2 of a
SqueezeNet's or an Inception's 3x3 pools, 27 to 111 columns wide, with and without pads and
ceil mode) against the numpy kernel: averages to the bit (count_include_pad both ways), max
pools by value with NaN where numpy's has one. A max pool takes the plain vector max on planes
without NaN and a NaN-aware one elsewhere: the planes here hold none, one NaN (at the start of
a window row, where a plain max would lose it, or anywhere), or several, and -0.0 / inf.
With ONYX_NATIVE=0 both sides are the numpy kernel."""

from __future__ import annotations

import numpy as np
import pytest
from test_native_pool_narrow import _Ctx, _numpy  # (the numpy oracle's call, shared)

from onyx.runtime.kernels import pool


def _planes(rng, shape) -> np.ndarray:
    """Random planes: the first without specials, then one NaN at a window row's first cell,
    one NaN anywhere, several NaN, and -0.0 with infinities."""
    x = rng.standard_normal(shape).astype(np.float32)
    planes = x.reshape(-1, shape[-2], shape[-1])
    H, W = shape[-2:]
    if len(planes) > 1:
        planes[1, H // 2, 0] = np.nan
    if len(planes) > 2:
        planes[2, rng.integers(0, H), rng.integers(0, W)] = np.nan
    if len(planes) > 3:
        planes[3].reshape(-1)[rng.integers(0, H * W, 5)] = np.nan
    if len(planes) > 4:
        planes[4].reshape(-1)[rng.integers(0, H * W, 6)] = [-0.0, 0.0, np.inf, -np.inf, -0.0, 0]
    return x


_GEOMETRIES = [  # (H, W, kernel, stride, pads, ceil_mode)
    (111, 111, 3, 2, [0, 0, 0, 0], 0),  # SqueezeNet's first pool
    (55, 55, 3, 2, [0, 0, 0, 0], 1),
    (27, 27, 3, 2, [0, 0, 0, 0], 0),
    (56, 56, 3, 2, [0, 0, 1, 1], 0),  # Inception v2's
    (112, 112, 3, 2, [1, 1, 1, 1], 0),  # ResNet's, DenseNet's
    (27, 27, 3, 1, [1, 1, 1, 1], 0),  # Inception v1's 3x3 / 1
    (40, 37, 2, 2, [0, 1, 1, 0], 1),
    (33, 50, 2, 1, [1, 0, 0, 1], 0),
    (20, 70, 3, 2, [2, 2, 2, 2], 1),
]


@pytest.mark.parametrize("geometry", _GEOMETRIES, ids=lambda g: "x".join(map(str, g[:4])))
def test_separable_pools_match_the_numpy_kernel(geometry, monkeypatch):
    H, W, k, s, pads, ceil_mode = geometry
    rng = np.random.default_rng(H * W + k)
    x = _planes(rng, (1, 5, H, W))
    geo = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "ceil_mode": ceil_mode}
    runs = [
        (pool.average_pool_1, (x,), {"count_include_pad": 0}),  # (by columns)
        (pool.average_pool_1, (x,), {"count_include_pad": 1}),
        (pool.max_pool, (_Ctx, x), {}),
    ]
    for fn, args, kwargs in runs:
        got = fn(*args, **kwargs, **geo)
        want = _numpy(fn, args, {**kwargs, **geo}, monkeypatch)
        assert got.shape == want.shape
        if fn is pool.max_pool:  # (a tie of -0.0 and +0.0 may keep either: by value)
            np.testing.assert_array_equal(got, want)
            assert np.isnan(got).sum() == np.isnan(want).sum() > 0
        else:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
