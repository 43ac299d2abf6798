"""native._core's array addresses: a read-only array's is kept while it lives, and only then."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from onyx.runtime.native import _core


def read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize(
    "make",
    [
        lambda: read_only(np.arange(12, dtype=np.float32)),  # a constant's weights
        lambda: read_only(np.arange(12, dtype=np.float32)).reshape(3, 4),  # a whole view of one
        lambda: read_only(np.arange(12, dtype=np.float32))[2:],  # a part of one
        lambda: np.arange(12, dtype=np.float32).view(),  # writeable
        lambda: read_only(np.arange(12, dtype=np.float32).view()),  # a feed's view
    ],
)
def test_address_is_the_data_start(make):
    a = make()
    for _ in range(2):  # (the second from what was kept)
        assert _core._addr(a) == a.ctypes.data
        assert _core._input_addr(a) == a.ctypes.data


def test_kept_address_goes_with_its_array():
    a = read_only(np.ones(5, np.float32))
    key = id(a)
    assert _core._addr(a) == a.ctypes.data
    assert key in _core._kept
    del a
    gc.collect()
    assert key not in _core._kept


def test_a_kept_array_cannot_move():
    """numpy refuses to resize an array with a weak reference: a kept address stays valid."""
    a = read_only(np.ones(4, np.float64))
    _core._addr(a)
    a.flags.writeable = True
    with pytest.raises(ValueError):
        a.resize(1 << 16, refcheck=False)
    assert _core._addr(a) == a.ctypes.data
