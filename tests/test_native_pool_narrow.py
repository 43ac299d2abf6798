"""window.c's pools of narrow planes at unit strides (row_narrow: every window column of a row
in one vector, as an Inception's 3x3 / 1 pools of 7x7 and 14x14 planes) against the numpy
kernel, to the bit: kernels 1 to 5, uneven pads, dilation apart, ceil mode,
count_include_pad, NaN, -0.0 and infinities in the planes. With ONYX_NATIVE=0 both sides are
the numpy kernel (its own run of the same geometries)."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime import native
from onyx.runtime.kernels import pool


class _Ctx:
    n_outputs, outputs_wanted = 1, (True,)


def _numpy(fn, args, kwargs, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)
        return fn(*args, **kwargs)


def _planes(rng, shape, specials: bool):
    x = rng.standard_normal(shape).astype(np.float32)
    if specials:  # (a plane each, where there are enough: the rest keep the fast compare)
        planes = x.reshape(-1, shape[-2] * shape[-1])
        for p, value in enumerate([np.nan, -0.0, np.inf, -np.inf][: len(planes)]):
            planes[p, (5 * p + 3) % planes.shape[1]] = value
    return x


@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan-inf"])
def test_narrow_pools_match_the_numpy_kernel(specials, monkeypatch):
    rng = np.random.default_rng(23)
    compared = 0
    for _ in range(60):
        k = int(rng.integers(1, 6))
        H, W = (int(v) for v in rng.integers(max(k - 1, 1), 17, 2))
        pads = [int(v) for v in rng.integers(0, k, 4)]
        if W + pads[1] + pads[3] > 18:  # (the narrow rows' geometry, and just past it)
            continue
        geo = {"kernel_shape": [k, k], "strides": [1, 1], "pads": pads,
               "ceil_mode": int(rng.integers(0, 2))}  # fmt: skip
        x = _planes(rng, (2, 3, H, W), specials)
        include = int(rng.integers(0, 2))
        for fn, args, kwargs in [
            (pool.average_pool_1, (x,), {"count_include_pad": include}),  # (by columns)
            (pool.max_pool, (_Ctx, x), {}),
            (pool.max_pool, (_Ctx, x), {"dilations": [1, 2]}),  # (not narrow: the general path)
        ]:
            try:
                got = fn(*args, **kwargs, **geo)
            except Exception:  # (a geometry with no output)
                continue
            want = _numpy(fn, args, {**kwargs, **geo}, monkeypatch)
            assert got.shape == want.shape
            if fn is pool.max_pool:  # (a tie of -0.0 and +0.0 may keep either: by value)
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            compared += 1
    assert compared > 60


@pytest.mark.parametrize("shape", [(1, 64, 14, 14), (1, 40, 7, 7), (2, 20, 7, 13)])
@pytest.mark.parametrize("op", ["avg", "max"])
def test_inception_pools_match_the_numpy_kernel(shape, op, monkeypatch):
    """3x3 / 1, pads 1: an Inception's pools, on one thread and on two."""
    x = _planes(np.random.default_rng(len(shape) + shape[1]), shape, True)
    geo = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}
    fn, args = (pool.average_pool_1, (x,)) if op == "avg" else (pool.max_pool, (_Ctx, x))
    want = _numpy(fn, args, geo, monkeypatch)
    for threads in (1, 2):
        with native.threads(threads):
            got = fn(*args, **geo)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
