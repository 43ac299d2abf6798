"""Reduce{Mean,Max,Min,Sum} of float32 over the last axis (kernels/reduce_fast.py): the bits,
shape and type of the general path, native and numpy alike."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime import native
from onyx.runtime.kernels import reduce_fast, reduction
from onyx.runtime.registry import lookup

SHAPES = [(1, 32, 19), (1, 128, 126), (4, 16, 8), (2, 3, 1), (5, 7)]


def _data(shape, contiguous: bool = True) -> np.ndarray:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32) * 4
    x.reshape(-1)[:2] = [np.inf, -np.inf]
    x.reshape(-1)[-1] = np.nan
    return x if contiguous else np.flip(x, 0)


def _general(name: str, data, axes, keepdims: int) -> np.ndarray:
    return reduction._reduce(reduction._REDUCTIONS[name], data, axes, keepdims)  # noqa: SLF001


@pytest.mark.parametrize("numpy_only", [False, True])
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(reduce_fast.FAST))
def test_bits_of_the_general_path(name, shape, keepdims, contiguous, numpy_only, monkeypatch):
    if numpy_only:
        monkeypatch.setattr(native._core, "lib", None)  # noqa: SLF001 (numpy)
    x = _data(shape, contiguous)
    x.flags.writeable = False  # (as a session's feed)
    want = _general(name, x, [-1], keepdims)
    for since, axes in ((13, [len(shape) - 1]), (18, np.array([-1], np.int64))):
        kernel = lookup(name, "", since).fn
        got = (
            kernel(x, axes, keepdims=keepdims)
            if since == 18
            else kernel(x, axes=axes, keepdims=keepdims)
        )
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(reduce_fast.FAST))
def test_applies_to_one_last_axis_of_float32_only(name):
    fast = reduce_fast.FAST[name]
    x = _data((2, 3, 4))
    if name != "ReduceMean" or native.available():  # (numpy's mean: the general path)
        assert fast(x, [-1], 1) is not None
        assert fast(x, (2,), 0) is not None
    for data, axes in (
        (x.astype(np.float64), [-1]),
        (x, [1]),
        (x, [1, 2]),
        (x, None),
        (x, np.array([1, 2])),
        (x[0, 0], [-1]),
        (x[:, :, :0], [-1]),
    ):
        assert fast(data, axes, 1) is None
