"""ConvIntegerToFloat of a one-pixel x (a squeeze-excite block's 1x1 convs: kernels/
conv_to_float.py's float64 product) against the kernel's general path (ConvInteger, then the
cast, product and sum, which tests/test_optimizer_dynamic_quant.py holds to onnxruntime's
bits): the same bits for uint8 / int8 operands, zero points per tensor and per channel, with
and without bias, batch 1 and 3; other convs keep the general path."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime.kernels import conv_to_float

RNG = np.random.default_rng(7)


def _general(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(conv_to_float, "one_pixel_sums", lambda *a: None)
        return conv_to_float.conv_integer_to_float(*args, **kwargs)


def _operands(x_dtype, w_dtype, n, c, m, per_channel):
    def ints(dtype, shape):
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)

    x, w = ints(x_dtype, (n, c, 1, 1)), ints(w_dtype, (m, c, 1, 1))
    w.flags.writeable = False  # (a model's constant: its centered copy is kept)
    wz = ints(w_dtype, (m,) if per_channel else ())
    return x, w, ints(x_dtype, ()), wz


@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("w_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("n, per_channel, with_bias", [(1, False, True), (3, True, False)])
def test_one_pixel_sums_matches_the_general_path(
    x_dtype, w_dtype, n, per_channel, with_bias, monkeypatch
):
    c, m = 576, 144
    x, w, xz, wz = _operands(x_dtype, w_dtype, n, c, m, per_channel)
    scale = np.array(0.0123, np.float32)
    bias = RNG.standard_normal((m, 1, 1)).astype(np.float32) if with_bias else None
    got = conv_to_float.conv_integer_to_float(x, w, xz, wz, scale, bias)
    want = _general(monkeypatch, x, w, xz, wz, scale, bias)
    assert got.shape == want.shape == (n, m, 1, 1) and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_other_convs_keep_the_general_path():
    x, w, xz, wz = _operands(np.uint8, np.uint8, 1, 8, 4, False)
    attrs = (("NOTSET", None, 1, None, [1, 1, 1, 1], None), ("NOTSET", None, 2, None, None, None))
    for a in attrs:
        assert conv_to_float.one_pixel_sums(x, w, xz, wz, a) is None
    wide = np.zeros((1, 8, 2, 2), np.uint8)
    assert (
        conv_to_float.one_pixel_sums(wide, w, xz, wz, ("NOTSET", None, 1, None, None, None)) is None
    )
    assert (
        conv_to_float.one_pixel_sums(x, w, xz, wz, ("NOTSET", None, 1, None, None, None))
        is not None
    )


def test_channels_past_the_int32_bound_keep_the_general_path():
    """2**15 channels of 9-bit products fit int32 (the float64 sums are ConvInteger's); more
    may not, so they take the general path (its 32-bit accumulation)."""
    attrs = ("NOTSET", None, 1, None, None, None)
    for c, taken in ((1 << 15, True), ((1 << 15) + 1, False)):
        x, w, xz, wz = _operands(np.uint8, np.uint8, 1, c, 1, False)
        assert (conv_to_float.one_pixel_sums(x, w, xz, wz, attrs) is not None) == taken
