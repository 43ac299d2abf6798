"""float32 ConvTranspose (onyx/runtime/native/convtranspose.c) against onnxruntime and the numpy
path: strides, dilations, pads (cropping), output_padding and output_shape (outputs past the
full output: the bias alone), auto_pad, groups, 1-D, the tiled 2x2 stride-2 upsampling with
and without crops, pixel counts off the tile's 16, several blocks of output channels on
threads, and float16. Where the library is off (ONYX_NATIVE=0) the same cases test the numpy
path against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.kernels import small_cnn
from onyx.runtime.kernels.conv_transpose import conv_transpose


@pytest.fixture(autouse=True)
def _no_small_kernels(monkeypatch):
    """These cases are convtranspose.c's: the small kernels' 2x2 upsampling, which takes some
    of them otherwise, has its own tests (test_small_cnn.py)."""
    monkeypatch.setattr(small_cnn, "ENABLED", False)


#: x shape, (C, M / group, *kernel) weight shape, attributes
CASES = [
    ((1, 64, 8, 8), (64, 32, 2, 2), dict(strides=[2, 2])),  # a U-Net's upsampling
    ((2, 5, 6, 7), (5, 3, 2, 2), dict(strides=[2, 2], pads=[1, 0, 0, 1])),  # tiled, cropped
    ((1, 4, 5, 3), (4, 3, 2, 2), dict(strides=[2, 2], output_padding=[1, 1])),  # tiled, extended
    ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[3, 3])),  # tiled, stride 3
    ((2, 6, 5, 7), (6, 3, 3, 3), dict(strides=[2, 3], pads=[1, 0, 2, 1], group=2)),
    ((1, 4, 5, 6), (4, 5, 3, 2), dict(strides=[2, 2], dilations=[2, 3], output_padding=[1, 1])),
    ((1, 4, 5, 6), (4, 5, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 4, 5, 6), (4, 5, 4, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 4, 5, 6), (4, 5, 3, 3), dict(strides=[3, 2], output_shape=[14, 12])),
    ((1, 6, 4, 4), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),  # depthwise
    ((1, 5, 9, 9), (5, 7, 4, 4), dict()),  # stride 1: every tap overlaps
    ((2, 40, 9, 9), (40, 33, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 96, 16, 16), (96, 48, 2, 2), dict(strides=[2, 2])),  # blocks of channels on threads
    ((3, 3, 11), (3, 4, 5), dict(strides=[3], pads=[2, 1], dilations=[2])),  # 1-D
    ((1, 16, 40), (16, 8, 2), dict(strides=[2])),  # 1-D, tiled
]


def _model(x_shape, w, b, attrs, dtype):
    from onnx import helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, x_shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _arrays(x_shape, w_shape, attrs, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(dtype)
    return x, w, b


@pytest.fixture
def native_calls(monkeypatch):
    """Input shapes of the native ConvTranspose's calls from now on."""
    calls, run = [], native.FloatConvTranspose.__call__
    monkeypatch.setattr(native.FloatConvTranspose, "__call__",
                        lambda self, x, *a: calls.append(x.shape) or run(self, x, *a))  # fmt: skip
    return calls


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_conv_transpose_matches_onnxruntime_and_numpy(case, native_calls):
    import onnxruntime as ort

    import onyx

    x_shape, w_shape, attrs = case
    x, w, b = _arrays(x_shape, w_shape, attrs)
    model = _model(x_shape, w, b, attrs, np.float32).SerializeToString()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onyx.InferenceSession(model).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert bool(native_calls) == native.conv_transpose_ok()
    with native.disabled():
        numpy_path = conv_transpose(x, w, b, **attrs)
    np.testing.assert_allclose(got, numpy_path, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_random_upsamplings_match_numpy(seed, native_calls):
    """Random 2x2 stride-2 (and 3x3 stride-1) ConvTransposes: pixel counts that are and are
    not multiples of the AVX-512 tile's two blocks of 16, against the numpy path."""
    rng = np.random.default_rng(seed)
    C, M, H, W = (int(v) for v in rng.integers(1, 40, 4))
    k, s = (2, 2) if seed % 2 == 0 else (3, 1)
    x, w, b = _arrays((1 + seed // 2, C, H, W), (C, M, k, k), {})
    attrs = dict(strides=[s, s])
    got = conv_transpose(x, w, b, **attrs)
    with native.disabled():
        want = conv_transpose(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert bool(native_calls) == native.conv_transpose_ok()


def test_float16_computes_in_float32_on_the_native_kernel(native_calls):
    import onnxruntime as ort

    import onyx

    attrs = dict(strides=[2, 2], pads=[0, 1, 1, 0])
    x, w, b = _arrays((1, 8, 5, 6), (8, 4, 3, 3), attrs, np.float16)
    model = _model(x.shape, w, b, attrs, np.float16).SerializeToString()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onyx.InferenceSession(model).run(None, {"x": x})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2
    )
    assert bool(native_calls) == native.conv_transpose_ok()


def test_threads_split_the_work_without_changing_a_bit():
    if not native.conv_transpose_ok():
        pytest.skip("no native ConvTranspose")
    x, w, b = _arrays((2, 32, 12, 12), (32, 64, 3, 3), {})
    w.flags.writeable = False  # (a constant: the set-up is kept per thread setting)
    with native.threads(1):
        one = conv_transpose(x, w, b, strides=[2, 2])
    with native.threads(2):
        two = conv_transpose(x, w, b, strides=[2, 2])
    np.testing.assert_array_equal(one, two)


def test_a_bias_of_the_wrong_length_is_left_to_the_numpy_path():
    x, w, _ = _arrays((1, 4, 3, 3), (4, 2, 2, 2), {})
    with pytest.raises(Exception):  # noqa: B017 (whatever the numpy path raises; no bad read)
        conv_transpose(x, w, np.ones(7, np.float32), strides=[2, 2])


def test_native_conv_transpose_refuses_absurd_dilations():
    if not native.conv_transpose_ok():
        pytest.skip("no native ConvTranspose")
    w = np.ones((4, 2, 3, 3), np.float32)
    d = 2**31
    with pytest.raises(InvalidArgument, match="ConvTranspose"):
        conv = native.FloatConvTranspose((1, 4, 5, 5), w, 1, (5, 5), (1, 1), (d, d), (0, 0))
        conv(np.ones((1, 4, 5, 5), np.float32))
