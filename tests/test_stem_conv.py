"""The few-input-channel stem conv (depthwise.c's onyx_conv_small_f32_avx512: 16 output pixels
of a row per vector, a band's rows split into their stride phases) against a float64 numpy
oracle: row tails, strides 1 to 3, dilation, uneven pads, channel blocks with a tail, bands
shared by consecutive parts, and the activation applied as it stores. Without the native
library (ONYX_NATIVE=0) or AVX-512 the same cases check the numpy path."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime import native
from onyx.runtime.kernels import conv as conv_kernels
from onyx.runtime.kernels.fused import fused_conv

#: N, C, H, W, M, kernel, stride, dilation, pads (top, left, bottom, right)
CASES = [
    (1, 3, 227, 227, 64, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0)),  # SqueezeNet's: 113-pixel rows
    (1, 3, 40, 70, 24, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # MobileNet's; 16 + 8 channels
    (2, 3, 19, 33, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # stride 1: a row of 33
    (1, 2, 23, 50, 20, (2, 3), (3, 3), (1, 1), (1, 0, 0, 2)),  # stride 3: the generic phases
    (1, 3, 17, 41, 16, (3, 3), (2, 1), (2, 2), (0, 2, 1, 0)),  # dilation, strides apart
    (1, 1, 9, 130, 12, (1, 3), (1, 2), (1, 1), (0, 1, 0, 1)),  # 65 pixels: 4 vectors + 1 lane
]


def _oracle(x, w, b, stride, dilation, pads):
    """The conv in float64 from its definition: every output a dot of its window."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    M, C, kh, kw = w.shape
    OH = (xp.shape[2] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    OW = (xp.shape[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    y = np.zeros((x.shape[0], M, OH, OW))
    for a in range(kh):
        for c in range(kw):
            r0, c0 = a * dilation[0], c * dilation[1]
            win = xp[:, :, r0 : r0 + (OH - 1) * stride[0] + 1 : stride[0],
                     c0 : c0 + (OW - 1) * stride[1] + 1 : stride[1]]  # fmt: skip
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, a, c].astype(np.float64))
    return y + b.astype(np.float64)[None, :, None, None]


def _arrays(case, seed=0):
    N, C, H, W, M, kernel, stride, dilation, pads = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, *kernel)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    attrs = {"strides": list(stride), "dilations": list(dilation), "pads": list(pads)}
    return x, w, b, attrs


def _direct(x, w, pads) -> bool:
    """Whether the native stem kernel takes this conv here."""
    return native.available() and native.conv_small_ok(x, w, pads[:2])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[2]}x{c[3]}/{c[6][1]}->{c[4]}")
def test_stem_conv_matches_the_oracle(case):
    x, w, b, attrs = _arrays(case)
    want = _oracle(x, w, b, case[6], case[7], case[8])
    got = conv_kernels.conv(x, w, b, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES[:4], ids=lambda c: f"{c[2]}x{c[3]}/{c[6][1]}->{c[4]}")
@pytest.mark.parametrize("threads", [1, 2])
def test_stem_relu_as_it_stores(case, threads, monkeypatch):
    """FusedConv's Relu applied by the kernel as it stores; one output row per part (each
    part fills its own band) and on two threads (parts apart)."""
    monkeypatch.setattr(native.depthwise, "_DW_BAND_BYTES", 1)
    x, w, b, attrs = _arrays(case, seed=1)
    x[0, 0, 3, 4] = np.nan  # (a NaN input stays NaN through the sums and the Relu)
    want = np.maximum(_oracle(x, w, b, case[6], case[7], case[8]), 0)
    with native.threads(threads):
        got = fused_conv(x, w, b, activation="Relu", **attrs)
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_direct_kernel_runs_where_it_is_built():
    """The cases above are the direct kernel's where the library has it (AVX-512)."""
    x, w, _, attrs = _arrays(CASES[0])
    if not (native.available() and native.library().conv_small):
        pytest.skip("no AVX-512 stem kernel: the numpy path ran the cases")
    assert _direct(x, w, attrs["pads"])


def test_a_begin_pad_past_the_read_columns():
    """A begin pad wider than the columns the windows read (stride 4, 9 pads before a 1-pixel
    row: the windows read padded columns 0 .. 6, so no input pixel): zeros plus the bias, no
    copy of a negative count of pixels."""
    case = (1, 3, 5, 1, 8, (1, 3), (1, 4), (1, 1), (0, 9, 0, 0))
    x, w, b, attrs = _arrays(case)
    want = _oracle(x, w, b, case[6], case[7], case[8])
    got = conv_kernels.conv(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
