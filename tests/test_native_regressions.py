"""Regressions of the native kernels' call sites: each case once returned a wrong shape or
value with the library on (and the right one with ONYX_NATIVE=0)."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime import native
from onyx.runtime.kernels.conv import conv
from onyx.runtime.kernels.fused import fused_conv


def _numpy_conv(x, w, b=None, monkeypatch=None, **attrs):
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)
        return conv(x, w, b, **attrs)


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [
        ((1, 128, 1), (1, 128, 1)),  # a voice-activity detector's: one output position
        ((3, 16, 1), (8, 16, 1)),  # a few rows: the GEMV
        ((2, 16, 4), (8, 16, 4)),  # one position from a longer input
    ],
)
def test_1d_conv_of_one_position_keeps_its_axes(x_shape, w_shape, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    got = conv(x, w, b)
    want = _numpy_conv(x, w, b, monkeypatch)
    assert got.shape == want.shape == (x_shape[0], w_shape[0], 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_1d_fused_conv_of_one_position_takes_its_residual(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 32, 1)).astype(np.float32)
    w = rng.standard_normal((16, 32, 1)).astype(np.float32)
    z = rng.standard_normal((2, 16, 1)).astype(np.float32)
    got = fused_conv(x, w, None, z, activation="Relu")
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)
        want = fused_conv(x, w, None, z, activation="Relu")
    assert got.shape == want.shape == (2, 16, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_small_conv_with_fewer_outputs_than_inputs_runs(monkeypatch):
    """The stem conv's geometry has no channel multiplier (M // C is 0 here): the C entry
    point's check once refused it."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 16, 1, 1)).astype(np.float32)
    w = rng.standard_normal((8, 16, 1, 2)).astype(np.float32)
    attrs = {"pads": [0, 0, 0, 1], "strides": [1, 3]}
    got = conv(x, w, **attrs)
    want = _numpy_conv(x, w, None, monkeypatch, **attrs)
    assert got.shape == want.shape == (5, 8, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_argmax_small_rows_are_argmaxs_of_both_float_types(dtype):
    """trees.c's onyx_argmax_small (float32 rows through the forest classifier's best-class
    loop, float64 through its twin of one macro): numpy's argmax, the first of equal values
    (-0.0 equals 0.0), the first NaN, an inf, a row of one value."""
    nan, inf = np.nan, np.inf
    rows = [
        [1, 3, 3, 2], [3, 3, 3, 3], [-0.0, 0.0, -1, 0.0], [0.0, -0.0, -1, -0.0],
        [1, nan, 5, nan], [nan, nan, nan, nan], [1, 2, 3, nan], [-inf, -inf, -inf, -inf],
        [-inf, inf, inf, 1], [-5, -4, -4, -9], [2, 1, 0, -1], [nan, 7, 8, 9],
    ]  # fmt: skip
    x = np.array(rows, dtype)
    got = native.argmax_rows(x)
    assert got is not None and got.tolist() == x.argmax(axis=1).tolist()
    for cols in (1, 2, 3, 4):  # (each width, the row's tail cut off)
        part = np.ascontiguousarray(x[:, :cols])
        assert native.argmax_rows(part).tolist() == part.argmax(axis=1).tolist()


def test_depthwise_set_up_refuses_a_bias_of_another_size():
    """depthwise.c reads one bias value per output channel: a bias of another size is refused
    (_core.bias_entry), one of the right size is added."""
    from onyx.errors import InvalidArgument
    from onyx.runtime.native.depthwise import depthwise_setup

    if not native.available():
        pytest.skip("native library not built")
    w = np.ones((8, 1, 3, 3), np.float32)
    conv = depthwise_setup((1, 8, 16, 16), w, (16, 16), (1, 1), (1, 1), (1, 1))
    if conv is None:
        pytest.skip("no native depthwise conv on this machine")
    x = np.ones((1, 8, 16, 16), np.float32)
    assert conv(x, np.ones(8, np.float32))[0, 0, 5, 5] == 10
    with pytest.raises(InvalidArgument, match="depthwise conv: a bias of 3 values for 8"):
        conv(x, np.ones(3, np.float32))
