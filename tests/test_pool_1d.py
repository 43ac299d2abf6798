"""1-D MaxPool's kept-geometry path (pool._max_pool_1d) against the general window max, to the
bit, over kernels, strides, dilations, pads, ceil mode and auto_pad, floats with NaN and
infinities and integers; and through a session."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onyx.runtime.kernels import pool

# ruff: noqa: SLF001  (the private paths are what is compared)

CASES = [
    dict(kernel_shape=[k], strides=[s], dilations=[d], pads=p, ceil_mode=c)
    for k, s, d, p, c in itertools.product(
        (1, 2, 3, 5), (1, 2, 3), (1, 2), ([0, 0], [1, 0], [2, 2]), (0, 1)
    )
    if p[0] < k and p[1] < k
] + [
    dict(kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[4], strides=[3], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2], strides=[2], auto_pad="VALID"),
]


class _Ctx:
    n_outputs = 1
    outputs_wanted = (True,)


def _general(x, kernel_shape, strides=None, dilations=None, pads=None, ceil_mode=0,
             auto_pad="NOTSET"):  # fmt: skip
    p = pool._Pool(x, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode, "MaxPool")
    return pool._window_max(x, p.pads, p.out, p.kernel, p.strides, p.dilations)


@pytest.mark.parametrize("attrs", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_max_pool_1d_matches_the_window_max(attrs, dtype):
    rng = np.random.default_rng(len(str(attrs)))
    for length in (1, 7, 12):
        x = (rng.standard_normal((2, 3, length)) * 50).astype(dtype)
        if dtype == np.float32 and length > 2:
            x[0, 0, 1], x[1, 2, 0], x[0, 1, 2] = np.nan, -np.inf, np.inf
        try:
            want = _general(x, **attrs)
        except ValueError:  # (no window fits: both say so)
            with pytest.raises(ValueError):
                pool.max_pool(_Ctx, x, **attrs)
            continue
        hits = pool._max_plan_1d.cache_info().hits
        for _ in range(2):  # (the second call takes the kept plan)
            got = pool.max_pool(_Ctx, x, **attrs)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        assert pool._max_plan_1d.cache_info().hits > hits
