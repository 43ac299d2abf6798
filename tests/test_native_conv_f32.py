"""The native float32 conv (onyx/runtime/native/conv_f32.c, an implicit GEMM on AVX-512)
against onnxruntime: padding, strides, dilations, groups, 1-D, strips that span images and
rows, K longer than one packed block, and FusedConv's residual and activations applied as it
stores. Skipped where the library is not built or the CPU lacks AVX-512 (there the numpy
im2col path, which every other test covers, runs instead)."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.kernels import conv as conv_kernels
from onyx.runtime.kernels import small_cnn, winograd
from onyx.runtime.kernels.activation import hard_swish
from onyx.runtime.kernels.fused import ACTIVATIONS, conv_hard_swish, fused_conv

pytestmark = pytest.mark.skipif(
    not native.conv_f32_ok(), reason="no native float conv (no AVX-512)"
)


@pytest.fixture(autouse=True)
def _no_small_conv(monkeypatch):
    """These cases are conv_f32.c's: the small conv that takes many of them otherwise has its
    own tests (test_small_cnn.py)."""
    monkeypatch.setattr(small_cnn, "ENABLED", False)
    monkeypatch.setattr(winograd, "ENABLED", False)  # (test_winograd.py's)


#: N, C, H, W, M, kernel, stride, dilation, pads (top, left, bottom, right), group
CASES = [
    (1, 16, 14, 14, 24, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # a ResNet block's
    (2, 20, 7, 9, 13, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # partial panel; strips span images
    (1, 12, 15, 17, 16, (5, 3), (2, 3), (1, 2), (2, 1, 0, 3), 1),  # strides, dilation, uneven pads
    (3, 40, 5, 40, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # 1x1: runs cross rows
    (2, 40, 5, 9, 16, (1, 1), (1, 1), (1, 1), (0, 0, 2, 0), 1),  # 1x1, an end pad: more rows
    (2, 8, 6, 7, 24, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # a thin 1x1 (K = 8)
    (3, 300, 7, 7, 40, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # 1x1 runs over rows; K > kc
    (8, 24, 7, 7, 20, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # a last strip of 8: narrow
    (1, 64, 7, 7, 40, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # the 49th pixel alone
    (2, 24, 5, 5, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # 48 + 2 pixels, two images
    # a last strip of a few pixels (stride 2: not wide), k dealt to 8 / w chains and a rest
    (1, 70, 14, 14, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),  # 1 pixel; blocks of 315
    (1, 35, 6, 34, 24, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),  # 3 pixels: 2 chains
    (2, 37, 1, 98, 8, (1, 3), (1, 2), (1, 1), (0, 1, 0, 1), 1),  # 2 pixels: 4 chains, K = 111
    (1, 8, 9, 9, 12, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 4),  # groups of 2 -> 3 channels
    (2, 64, 6, 6, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # K = 576: several blocks of K
    (1, 6, 3, 100, 8, (1, 7), (1, 1), (1, 1), (0, 3, 0, 3), 1),  # rows longer than a strip
    (1, 5, 4, 4, 16, (3, 3), (1, 1), (1, 1), (2, 2, 2, 2), 1),  # taps wholly in the padding
    (2, 3, 41, 39, 16, (7, 7), (2, 2), (1, 1), (3, 3, 2, 3), 1),  # a stem: stride 2 packing
    (1, 8, 20, 50, 8, (3, 3), (1, 4), (1, 1), (1, 1, 1, 1), 1),  # stride 4: gathered
]


def _model(op, x_shape, consts, attrs, domain=""):
    from onnx import TensorProto, helper, numpy_helper

    inputs = ["x", *consts]
    if op == "FusedConv":
        inputs = ["x", "w", "b", "z"]
    node = helper.make_node(op, inputs, ["y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
        + (
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)]
            if op == "FusedConv"
            else []
        ),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items() if k != "z"],
    )
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _ort_run(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.fixture
def native_calls(monkeypatch):
    """The native float convs run from now on (their input shapes)."""
    calls, run = [], native.FloatConv.__call__
    monkeypatch.setattr(native.FloatConv, "__call__",
                        lambda self, x, *a: calls.append(x.shape) or run(self, x, *a))  # fmt: skip
    return calls


def _case_arrays(case, seed):
    N, C, H, W, M, kernel, stride, dilation, pads, group = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C // group, *kernel)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    w.flags.writeable = False  # a constant, as in a session: its packing is kept
    attrs = {
        "strides": list(stride),
        "dilations": list(dilation),
        "pads": list(pads),
        "group": group,
    }
    return x, w, b, attrs


def _derived_conv(x, w, attrs, ways):
    """The native conv set up (and kept) for a conv of _case_arrays' x, w and attrs that ran
    at ways threads."""
    key = ("f32 conv", x.shape, attrs["group"], conv_kernels.conv_key("NOTSET", attrs["pads"],
           attrs["strides"], attrs["dilations"], None), 0, 0.0, 0.0, ways)  # fmt: skip
    return conv_kernels.derived(w, key, lambda: None)


@pytest.mark.parametrize("case", CASES)
def test_conv_matches_onnxruntime(case, native_calls):
    x, w, b, attrs = _case_arrays(case, sum(case[:5]))
    model = _model("Conv", list(x.shape), {"w": w, "b": b}, attrs)
    want = _ort_run(model, {"x": x})
    for _ in range(2):  # the second call uses the kept packing
        got = conv_kernels.conv(x, w, b, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(native_calls) == 2, "the native kernel did not run"


def test_conv_1d_matches_onnxruntime(monkeypatch):
    # (1-D convs run on conv1d.c's direct kernel: tests/test_native_conv1d.py)
    native_calls, run = [], native.Conv1d.__call__
    monkeypatch.setattr(native.Conv1d, "__call__",
                        lambda self, x, *a: native_calls.append(x.shape) or run(self, x, *a))  # fmt: skip
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10, 61)).astype(np.float32)
    w = rng.standard_normal((16, 10, 5)).astype(np.float32)
    attrs = {"strides": [2], "dilations": [2], "pads": [3, 1], "group": 1}
    got = conv_kernels.conv(x, w, **attrs)
    want = _ort_run(_model("Conv", list(x.shape), {"w": w}, attrs), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert native_calls, "the native kernel did not run"


def test_threads_split_the_work_without_changing_a_bit():
    x, w, b, attrs = _case_arrays((2, 32, 30, 30, 40, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), 7)
    with native.threads(1):
        one = conv_kernels.conv(x, w, b, **attrs)
    with native.threads(4):  # (each tile's sums are in the same order however parts fall)
        four = conv_kernels.conv(x, w, b, **attrs)
    np.testing.assert_array_equal(one, four)


def test_columns_packed_once_for_parts_that_split_the_channels():
    """A deep layer's parts split its output channels and share the columns, packed before."""
    case = (1, 64, 7, 7, 128, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1)
    x, w, b, attrs = _case_arrays(case, 9)
    want = _ort_run(_model("Conv", list(x.shape), {"w": w, "b": b}, attrs), {"x": x})
    with native.threads(2):
        got = conv_kernels.conv(x, w, b, **attrs)
        key = ("f32 conv", x.shape, 1, ("NOTSET", (1, 1, 1, 1), (1, 1), (1, 1), None), 0, 0.0,
               0.0, 2)  # fmt: skip
        assert conv_kernels.derived(w, key, lambda: None).cols > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "activation, params",
    [("", []), ("Relu", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 1.5]), ("Clip", [0.0, 6.0]),
     ("HardSigmoid", [0.3, 0.4]), ("Sigmoid", []), ("Tanh", [])],
)  # fmt: skip
def test_fused_conv_applies_residual_and_activation(activation, params, native_calls):
    case = (2, 12, 9, 11, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1)
    x, w, b, attrs = _case_arrays(case, 11)
    z = np.random.default_rng(12).standard_normal((2, 16, 9, 11)).astype(np.float32)
    x[0, 0, 4, 5] = np.nan  # a NaN goes through every activation as a NaN
    fused = {"activation": activation, "activation_params": params} if params else {}
    if activation:
        fused["activation"] = activation
    model = _model("FusedConv", list(x.shape), {"w": w, "b": b, "z": z}, {**attrs, **fused},
                   domain="com.microsoft")  # fmt: skip
    want = _ort_run(model, {"x": x, "z": z})
    got = fused_conv(x, w, b, z, **attrs, **fused)
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert native_calls, "the native kernel did not run"


@pytest.mark.parametrize("N, H", [(1, 7), (2, 5)])
def test_lone_pixels_done_with_the_strip_before_them(N, H, native_calls):
    """A 7x7 layer's 49th pixel (or 50 over two images) is summed in the same pass over the
    weights as the 48 before it (conv_f32.c's tile_pair), over two blocks of K, with the
    residual and the activation applied as it stores."""
    case = (N, 300, H, H, 20, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1)
    x, w, b, attrs = _case_arrays(case, 13)
    z = np.random.default_rng(14).standard_normal((N, 20, H, H)).astype(np.float32)
    model = _model("FusedConv", list(x.shape), {"w": w, "b": b, "z": z},
                   {**attrs, "activation": "Relu"}, domain="com.microsoft")  # fmt: skip
    want = _ort_run(model, {"x": x, "z": z})
    got = fused_conv(x, w, b, z, **attrs, activation="Relu")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert native_calls, "the native kernel did not run"


@pytest.mark.skipif(not native.depthwise_activates(), reason="no AVX-512 depthwise kernel")
@pytest.mark.parametrize(
    "activation, params",
    [("Relu", []), ("LeakyRelu", [0.3]), ("Clip", [0.0, 6.0]), ("HardSwish", []),
     ("HardSigmoid", [0.3, 0.4]), ("HardSigmoid", [])],
)  # fmt: skip
@pytest.mark.parametrize("shape", [(1, 24, 9, 37), (2, 40, 14, 14)])
def test_depthwise_applies_its_activation_as_it_stores(activation, params, shape, monkeypatch):
    """A MobileNet block's depthwise conv + activation: the same bits as the two apart."""
    fused, run = [], native.depthwise_setup
    monkeypatch.setattr(native, "depthwise_setup",
                        lambda *a: fused.append(a[6] is not None and a[6][0]) or run(*a))  # fmt: skip
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    x[0, 1, 2, 3] = np.nan
    C = shape[1]
    w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    attrs = {"group": C, "pads": [1, 1, 1, 1], "strides": [1, 2]}
    apart = conv_kernels.conv(x, w, b, **attrs)
    if activation == "HardSwish":
        got, want = conv_hard_swish(x, w, b, **attrs), hard_swish(apart)
    else:
        got = fused_conv(x, w, b, activation=activation, activation_params=params, **attrs)
        want = ACTIVATIONS[activation](apart.copy(), *(params + [None] * 3)[:3])
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).any()
    assert any(fused), "the activation was not applied by the kernel"


@pytest.mark.skipif(not native.available(), reason="no native library")
def test_a_plain_depthwise_conv_is_set_up_once(monkeypatch):
    """A depthwise Conv without an activation (ShuffleNet's) keeps its native set-up per weight
    and shape, as an activated one does: set-ups once cost as much as the kernel; same bits."""
    setups, run = [], native.depthwise_setup
    monkeypatch.setattr(native, "depthwise_setup", lambda *a: setups.append(a) or run(*a))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 24, 13, 13)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    w.flags.writeable = False  # (a session's weights are read-only: what derived.py keys on)
    b = rng.standard_normal(24).astype(np.float32)
    attrs = {"group": 24, "pads": [1, 1, 1, 1], "strides": [1, 1]}
    first = conv_kernels.conv(x, w, b, **attrs)
    for _ in range(3):
        np.testing.assert_array_equal(conv_kernels.conv(x, w, b, **attrs), first)
    assert len(setups) == 1
    with native.disabled():  # (numpy's conv; a writeable copy: nothing kept to reuse)
        want = conv_kernels.conv(x, w.copy(), b, **attrs)
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5)


@pytest.fixture
def gemv_calls(monkeypatch):
    """The native float GEMVs run from now on (their row counts)."""
    calls, run = [], native.FloatGemv.__call__
    monkeypatch.setattr(native.FloatGemv, "__call__",
                        lambda self, x, *a: calls.append(x.shape[0]) or run(self, x, *a))  # fmt: skip
    return calls


@pytest.mark.skipif(not native.gemv_ok(), reason="no AVX-512 GEMV")
@pytest.mark.parametrize("N", [1, 3, 8])
@pytest.mark.parametrize("activation, params", [("Relu", []), ("HardSigmoid", [0.3, 0.4])])
def test_one_pixel_conv_is_a_gemv(N, activation, params, native_calls, gemv_calls):
    """An SE block's 1x1 conv on one pixel is a GEMV (the native one, with the residual and
    the activation), not the pixel-vector tile's."""
    x, w, b, attrs = _case_arrays((N, 48, 1, 1, 96, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1), 2)
    z = np.random.default_rng(3).standard_normal((N, 96, 1, 1)).astype(np.float32)
    want = _ort_run(_model("Conv", list(x.shape), {"w": w, "b": b}, attrs), {"x": x})
    np.testing.assert_allclose(conv_kernels.conv(x, w, b, **attrs), want, rtol=1e-5, atol=1e-5)
    fused = {"activation": activation, **({"activation_params": params} if params else {})}
    model = _model("FusedConv", list(x.shape), {"w": w, "b": b, "z": z}, {**attrs, **fused},
                   domain="com.microsoft")  # fmt: skip
    got = fused_conv(x, w, b, z, **attrs, **fused)
    np.testing.assert_allclose(got, _ort_run(model, {"x": x, "z": z}), rtol=1e-5, atol=1e-5)
    assert native_calls == [] and gemv_calls == [N, N]


def test_depthwise_and_stem_convs_keep_their_own_kernels(native_calls):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    depthwise = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    conv_kernels.conv(x, depthwise, group=16, pads=[1, 1, 1, 1])
    stem = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)  # K = 27: the direct kernel
    conv_kernels.conv(x[:, :3], stem, pads=[1, 1, 1, 1])
    assert native_calls == []


_STEM_ACTIVATIONS = [("Relu", []), ("LeakyRelu", [0.3]), ("Clip", [0.0, 6.0]), ("HardSwish", []),
                     ("HardSigmoid", [0.3, 0.4])]  # fmt: skip


@pytest.mark.parametrize("activation, params", _STEM_ACTIVATIONS)
def test_stem_applies_its_activation_as_it_stores(activation, params, native_calls):
    """A stem with an activation (MobileNetV3's HardSwish): the direct stem kernel applies it
    as it stores where it runs (AVX-512; the same bits as the two apart), else the implicit
    GEMM does."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 33, 32)).astype(np.float32) * 4
    x[1, 2, 5, 6] = np.nan
    stem = rng.standard_normal((24, 3, 3, 3)).astype(np.float32)  # (16 + 8 channels: a tail)
    b = rng.standard_normal(24).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    apart = conv_kernels.conv(x, stem, b, **attrs)
    assert native_calls == []  # (the direct kernel)
    if activation == "HardSwish":
        got, want = conv_hard_swish(x, stem, b, **attrs), hard_swish(apart)
    else:
        got = fused_conv(x, stem, b, activation=activation, activation_params=params, **attrs)
        want = ACTIVATIONS[activation](apart.copy(), *(params + [None] * 3)[:3])
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    if native.conv_small_ok(x, stem, [1, 1]):
        np.testing.assert_array_equal(got, want)
        assert native_calls == []
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert native_calls == [x.shape]


def test_stem_with_a_residual_and_an_activation():
    """FusedConv's residual goes in before the activation: the direct stem kernel declines."""
    x, w, b, attrs = _case_arrays((1, 3, 20, 18, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1), 4)
    z = np.random.default_rng(9).standard_normal((1, 16, 10, 9)).astype(np.float32)
    fused = {"activation": "HardSigmoid", "activation_params": [0.3, 0.4]}
    model = _model("FusedConv", list(x.shape), {"w": w, "b": b, "z": z}, {**attrs, **fused},
                   domain="com.microsoft")  # fmt: skip
    got = fused_conv(x, w, b, z, **attrs, **fused)
    np.testing.assert_allclose(got, _ort_run(model, {"x": x, "z": z}), rtol=1e-5, atol=1e-5)


#: x shape, M, kernel, stride, dilation, pads: convs of a few output pixels in all (<= 8)
FEW_PIXELS = [  # (1-D convs of a few frames: conv1d.c's channel tiles, test_native_conv1d.py)
    ((1, 6, 4, 5), 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # 2-D: 2 x 3 pixels
]


@pytest.mark.skipif(not native.gemv_ok(), reason="no AVX-512 GEMV")
@pytest.mark.parametrize("case", FEW_PIXELS, ids=lambda c: "x".join(map(str, c[0])))
def test_few_pixel_conv_is_a_gemv_over_gathered_windows(case, native_calls, gemv_calls):
    """A conv with a few output pixels runs the GEMV over its im2col rows (gathered by an
    index made once): against onnxruntime, the numpy path, and with FusedConv's residual and
    activation."""
    x_shape, M, kernel, stride, dilation, pads = case
    rng = np.random.default_rng(len(x_shape) + M)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((M, x_shape[1], *kernel)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    w.flags.writeable = False
    attrs = {"strides": list(stride), "dilations": list(dilation), "pads": list(pads)}
    want = _ort_run(_model("Conv", list(x_shape), {"w": w, "b": b}, attrs), {"x": x})
    got = conv_kernels.conv(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with native.disabled():
        np.testing.assert_allclose(conv_kernels.conv(x, w, b, **attrs), got, rtol=1e-5, atol=1e-4)
    z = rng.standard_normal(want.shape).astype(np.float32)
    fused = {"activation": "LeakyRelu", "activation_params": [0.2]}
    model = _model("FusedConv", list(x_shape), {"w": w, "b": b, "z": z}, {**attrs, **fused},
                   domain="com.microsoft")  # fmt: skip
    got = fused_conv(x, w, b, z, **attrs, **fused)
    np.testing.assert_allclose(got, _ort_run(model, {"x": x, "z": z}), rtol=1e-4, atol=1e-4)
    rows = x_shape[0] * want[0, 0].size
    assert native_calls == [] and gemv_calls == [rows, rows]


#: unit-stride convs that run "wide" (their padded input read in place, conv_f32.c): uneven
#: and wide pads, dilation, 1-D, batch, a padded input over the per-conv size (the shared
#: scratch, its borders rewritten per call), a rectangular kernel; up to 8 panels (of 8
#: channels) the tile reads the columns in place, past that they are copied once for all
#: (unless a part's strips cover whole images)
WIDE_CASES = [
    (2, 12, 9, 11, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (3, 10, 13, 30, 20, (3, 5), (1, 1), (2, 1), (2, 0, 2, 4), 1),
    (1, 20, 40, 60, 24, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # > 64K padded floats
    (2, 64, 8, 8, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 8, 6, 40, 8, (3, 3), (1, 1), (1, 1), (0, 1, 0, 1), 2),  # groups
    (1, 16, 12, 14, 96, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # 12 panels, whole images
    (1, 16, 30, 34, 96, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # 12 panels: copied
]


@pytest.mark.parametrize("case", WIDE_CASES)
def test_wide_conv_matches_onnxruntime_call_after_call(case, native_calls):
    x, w, b, attrs = _case_arrays(case, sum(case[:5]) + 1)
    model = _model("Conv", list(x.shape), {"w": w, "b": b}, attrs)
    other = (1, 3, 50, 50, 4, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1)  # (shares the scratch)
    ox, ow_, ob, oattrs = _case_arrays(other, 5)
    for seed in (1, 2):  # a second input: what the first left in the buffers is overwritten
        x = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32) * 1e3
        want = _ort_run(model, {"x": x})
        with native.threads(1):  # (more threads may split a small layer's channels: not wide)
            got = conv_kernels.conv(x, w, b, **attrs)
            conv_kernels.conv(ox * seed, ow_, ob, **oattrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-1)
    assert _derived_conv(x, w, attrs, 1).task.raw == 1, "it did not run wide"
    assert native_calls, "the native kernel did not run"
    with native.threads(3):  # (the same sums in the same order, whatever the split)
        np.testing.assert_array_equal(conv_kernels.conv(x, w, b, **attrs), got)


#: Stride-2 convs run wide on their input's four parity phases (conv_f32.c's wide = 2): a stem,
#: a downsampling 3x3 whose 12 panels copy their rows, an even kernel, no padding, groups.
PHASE_CASES = [
    (2, 3, 41, 39, 16, (7, 7), (2, 2), (1, 1), (3, 3, 2, 3), 1),
    (1, 16, 14, 15, 96, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (1, 6, 7, 9, 8, (4, 4), (2, 2), (1, 1), (1, 1, 2, 1), 1),
    (3, 8, 10, 10, 8, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    (2, 12, 15, 15, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 4),
]


@pytest.mark.parametrize("case", PHASE_CASES)
def test_stride_2_conv_on_phases_matches_onnxruntime(case, native_calls):
    x, w, b, attrs = _case_arrays(case, sum(case[:5]) + 2)
    model = _model("Conv", list(x.shape), {"w": w, "b": b}, attrs)
    for seed in (1, 2):  # a second input: what the first left in the scratch is overwritten
        x = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        want = _ort_run(model, {"x": x})
        with native.threads(1):
            got = conv_kernels.conv(x, w, b, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _derived_conv(x, w, attrs, 1).task.wide == 2, "not on phases"
    assert native_calls, "the native kernel did not run"
    with native.threads(3):  # (the same sums in the same order, whatever the split)
        np.testing.assert_array_equal(conv_kernels.conv(x, w, b, **attrs), got)


def test_wide_conv_1d():
    x = np.random.default_rng(3).standard_normal((2, 6, 50)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((10, 6, 5)).astype(np.float32)
    w.flags.writeable = False
    attrs = {"pads": [2, 2], "strides": [1], "dilations": [1], "group": 1}
    want = _ort_run(_model("Conv", list(x.shape), {"w": w}, attrs), {"x": x})
    np.testing.assert_allclose(conv_kernels.conv(x, w, **attrs), want, rtol=1e-4, atol=1e-4)


def test_few_panel_wide_conv_stays_wide_when_threads_split_its_channels(native_calls):
    """Two threads on a layer of few strips split its channels; a wide conv of at most 8 panels
    then still reads its columns in place (nothing packed beforehand), with the same sums."""
    x, w, b, attrs = _case_arrays((1, 64, 16, 16, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), 7)
    with native.threads(1):
        one = conv_kernels.conv(x, w, b, **attrs)
    with native.threads(2):
        two = conv_kernels.conv(x, w, b, **attrs)
        setup = _derived_conv(x, w, attrs, 2)
    assert setup.task.raw == 1 and setup.cols == 0 and setup.task.blocks > 1
    np.testing.assert_array_equal(one, two)
    want = _ort_run(_model("Conv", list(x.shape), {"w": w, "b": b}, attrs), {"x": x})
    np.testing.assert_allclose(two, want, rtol=1e-4, atol=1e-4)


def _wide_setup(threads: int):
    """A wide conv (1, 64, 16, 16) x (32, 64, 3, 3) set up for ``threads``, its input, bias and
    the result of one thread."""
    x, w, b, attrs = _case_arrays((1, 64, 16, 16, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), 9)
    packed = native.pack_conv_f32(w, 1)
    with native.threads(threads):
        conv = native.FloatConv(x.shape, packed, 32, (3, 3), (16, 16), (1, 1), (1, 1), (1, 1))
    with native.threads(1):
        one = native.FloatConv(x.shape, packed, 32, (3, 3), (16, 16), (1, 1), (1, 1), (1, 1))
    return conv, x, b, one(x, b)


def _run_parts(conv, x, b, cuts, task=None):
    from onyx.runtime.native import _core

    y = np.empty(conv.shape, np.float32)
    task = _core._filled(conv.task if task is None else task, x, y)
    task.bias = _core._addr(b)
    _core._run(_core.lib.conv_f32_range, task, cuts, 1, "float conv")
    return y


@pytest.mark.skipif(not native.conv_f32_ok(), reason="no AVX-512 float conv")
def test_wide_conv_pads_its_input_in_its_parts():
    """Each part of a wide conv pads the rows it reads (no padded copy made by the caller): any
    split, one call over every part (whose blocks of panels revisit the strips: rows padded
    again), part by part, or backwards, gives the same bits as one thread's run."""
    conv, x, b, want = _wide_setup(2)
    parts = int(conv.cuts[-1])
    assert conv.task.raw == 1 and conv.task.blocks > 1 and parts > 2
    for cuts in ([0, parts], range(parts + 1), [0, 1, parts - 1, parts]):
        np.testing.assert_array_equal(_run_parts(conv, x, b, list(cuts)), want)
    x2 = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    with native.threads(1):  # (a second input: no row of the first is read)
        np.testing.assert_array_equal(conv(x2, b), _wide_setup(1)[0](x2, b))


@pytest.mark.skipif(not native.conv_f32_ok(), reason="no AVX-512 float conv")
@pytest.mark.parametrize(
    "field, value",
    [("raw", 2), ("xtop", 19), ("xleft", 19), ("xh", -1), ("xw", 1 << 50), ("wide", 0)],
)
def test_wide_conv_refuses_unpadded_sizes_that_disagree(field, value):
    from onyx.runtime.native import _core

    conv, x, b, _ = _wide_setup(1)
    task = type(conv.task).from_buffer_copy(conv.task)
    setattr(task, field, value)
    with pytest.raises(InvalidArgument):
        _run_parts(conv, x, b, [0, 1], task)
    with pytest.raises(InvalidArgument):  # (a raw conv packs no columns beforehand)
        _core._run(_core.lib.conv_f32_pack_range, conv.task, [0, 1], 1, "float conv")


@pytest.mark.skipif(not native.conv_f32_ok(), reason="no AVX-512 float conv")
def test_a_large_wide_conv_is_padded_by_its_caller(monkeypatch):
    """Past _RAW_PAD_FLOATS the caller pads the input (each thread would keep a buffer of the
    whole padded input): the same bits."""
    from onyx.runtime.native import conv_f32

    conv, x, b, want = _wide_setup(2)
    monkeypatch.setattr(conv_f32, "_RAW_PAD_FLOATS", 0)
    large, _, _, _ = _wide_setup(2)
    assert conv.task.raw == 1 and large.task.raw == 0 and large.pad is not None
    with native.threads(2):
        np.testing.assert_array_equal(large(x, b), want)
        np.testing.assert_array_equal(conv(x, b), want)


@pytest.mark.parametrize(
    "planes, H, W, top, left",
    [(3, 7, 9, 1, 1), (2, 64, 64, 1, 1), (5, 33, 47, 3, 0), (1, 5, 40, 0, 2), (2, 1, 1, 1, 1)],
)
def test_phase_planes_match_the_padded_input_read_at_stride_2(planes, H, W, top, left):
    """onyx_phase_planes_f32 (each input row split into both of its column phases at once):
    phase (pr, pc)'s cell (i, j) is the zero-padded input's (2i + pr, 2j + pc), rows and
    columns of the phases past the input zeros, every cell written."""
    from onyx.runtime.native import _core

    Hq, Wq = (H + top + 1) // 2 + 1, (W + left + 1) // 2 + 2
    x = np.random.default_rng(H * W).standard_normal((planes, H, W)).astype(np.float32)
    got = np.full((planes, 4, Hq, Wq), np.nan, np.float32)
    status = _core.lib.onyx_phase_planes_f32(
        _core._addr(x), planes, H, W, _core._addr(got), Hq, Wq, top, left
    )
    assert status == 0
    xp = np.zeros((planes, 2 * Hq, 2 * Wq), np.float32)
    xp[:, top : top + H, left : left + W] = x[:, : 2 * Hq - top, : 2 * Wq - left]
    want = np.stack([xp[:, pr::2, pc::2] for pr in (0, 1) for pc in (0, 1)], 1)
    np.testing.assert_array_equal(got, want)


#: Strided 1x1 convs (a projection shortcut) large enough to sample their input first:
#: N, C, H, W, M, stride, end pads (bottom, right)
SAMPLED_CASES = [
    (2, 64, 33, 31, 128, (2, 2), (0, 0)),  # odd sizes: the last row and column sampled
    (1, 160, 45, 45, 116, (3, 2), (0, 0)),  # unequal strides, a partial panel
    (1, 64, 32, 32, 136, (2, 2), (1, 1)),  # an end pad: a row and column of zeros, packed
]


@pytest.mark.parametrize("case", SAMPLED_CASES)
def test_strided_1x1_conv_on_its_sampled_input_matches_onnxruntime(case, native_calls):
    N, C, H, W, M, stride, end = case
    x, w, b, attrs = _case_arrays((N, C, H, W, M, (1, 1), stride, (1, 1), (0, 0, *end), 1), 5)
    model = _model("Conv", list(x.shape), {"w": w, "b": b}, attrs)
    want = _ort_run(model, {"x": x})
    with native.threads(1):
        got = conv_kernels.conv(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    sampled = _derived_conv(x, w, attrs, 1).sampled is not None
    assert sampled == (end == (0, 0)), "an end pad's zeros are packed, the rest sampled"
    assert native_calls, "the native kernel did not run"
    with native.threads(2):  # (the same sums in the same order, whatever the split)
        np.testing.assert_array_equal(conv_kernels.conv(x, w, b, **attrs), got)


def test_subsample_planes_refuses_samples_past_the_input():
    from onyx.runtime.native import _core

    x = np.zeros((2, 5, 5), np.float32)
    out = np.zeros((2, 4, 3), np.float32)
    args = (_core._addr(x), 2, 5, 5, _core._addr(out))
    assert _core.lib.onyx_subsample_planes_f32(*args, 3, 3, 2, 2) == 0
    assert _core.lib.onyx_subsample_planes_f32(*args, 4, 3, 2, 2) != 0  # row 6 of 5
    assert _core.lib.onyx_subsample_planes_f32(*args, 3, 3, 0, 2) != 0  # a zero stride


def test_stride_2_phases_split_between_threads_give_the_same_bits(monkeypatch):
    """At two threads a large stride-2 conv's phases are made by planes on the pool (the phase
    job, onyx_conv_f32_phase_range): the same bits as one thread's, and any cut of the planes
    writes the same phases."""
    from onyx.runtime.native import _core, conv_f32

    monkeypatch.setattr(conv_f32, "_RAW_PAD_FLOATS", 0)  # (a small one's parts make them)
    x, w, b, _ = _case_arrays((1, 32, 64, 64, 64, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1), 3)
    packed = native.pack_conv_f32(w, 1)
    setups = {}
    for threads in (1, 2):
        with native.threads(threads):
            setups[threads] = native.FloatConv(
                x.shape, packed, 64, (3, 3), (32, 32), (2, 2), (1, 1), (1, 1)
            )
    assert setups[2].ways == 2 and setups[2].phases is not None
    np.testing.assert_array_equal(setups[2](x, b), setups[1](x, b))
    planes, H, W, Hq, Wq, top, left, _ = setups[2].phases
    whole = np.empty(planes * 4 * Hq * Wq, np.float32)
    status = _core.lib.onyx_phase_planes_f32(
        _core._addr(x), planes, H, W, _core._addr(whole), Hq, Wq, top, left
    )
    assert status == 0
    job = conv_f32._phase_job(planes, H, W, Hq, Wq, top, left)
    parts = np.full_like(whole, np.nan)
    job.x, job.cols, job.ncols = _core._addr(x), _core._addr(parts), parts.size
    _core._run(_core.lib.conv_f32_phase_range, job, [0, 5, 6, planes], 1, "float conv")
    np.testing.assert_array_equal(parts, whole)
    with pytest.raises(InvalidArgument):  # (planes past the job's)
        _core._run(_core.lib.conv_f32_phase_range, job, [0, planes + 1], 1, "float conv")


@pytest.mark.skipif(not native.conv_f32_ok(), reason="no AVX-512 float conv")
@pytest.mark.parametrize("batch", [1, 3])
def test_stride_2_conv_makes_its_phases_in_its_parts(batch):
    """A stride-2 conv of a small input makes the phase rows each part reads in the part (no
    phases made by the caller): any split of the parts, part by part or backwards, a second
    input, gives the same bits as one thread's run and onnxruntime's result."""
    case = (batch, 32, 41, 39, 48, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), 1)
    x, w, b, attrs = _case_arrays(case, 11)
    packed = native.pack_conv_f32(w, 1)
    out = conv_kernels.conv_out_shape(x.shape[2:], (3, 3), (2, 2), (1, 1), attrs["pads"])
    with native.threads(2):
        conv = native.FloatConv(x.shape, packed, 48, (3, 3), out, (2, 2), (1, 1), (1, 0))
    with native.threads(1):
        one = native.FloatConv(x.shape, packed, 48, (3, 3), out, (2, 2), (1, 1), (1, 0))
    assert conv.task.raw == 1 and conv.task.wide == 2 and conv.phases is None
    parts = int(conv.cuts[-1])
    assert parts > 2
    model = _model("Conv", list(x.shape), {"w": w, "b": b}, attrs)
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        want = one(x, b)
        np.testing.assert_allclose(want, _ort_run(model, {"x": x}), rtol=1e-4, atol=1e-4)
        for cuts in ([0, parts], range(parts + 1), [0, 1, parts - 1, parts]):
            np.testing.assert_array_equal(_run_parts(conv, x, b, list(cuts)), want)


@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh"])
@pytest.mark.parametrize("seed", range(4))
def test_sigmoid_and_tanh_fused_match_numpy(activation, seed, native_calls):
    """Sigmoid and Tanh applied by the kernels as they store (activation.h's exp-based forms)
    agree with numpy's apart within a few ulps, on random shapes (1x1 heads such as a U-Net's,
    3x3 convs; large inputs that saturate)."""
    rng = np.random.default_rng(seed)
    N, C, H, W = 1 + seed % 2, int(rng.integers(1, 20)), *rng.integers(4, 24, 2)
    M, k = int(rng.integers(1, 8)), int(rng.choice([1, 3]))  # (M < 8: not a stem)
    x = (rng.standard_normal((N, C, H, W)) * 6).astype(np.float32)
    w = rng.standard_normal((M, C, k, k)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    attrs = {"pads": [k // 2] * 4}
    want = ACTIVATIONS[activation](conv_kernels.conv(x, w, b, **attrs).copy(), None, None, None)
    got = fused_conv(x, w, b, activation=activation, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert native_calls, "the native kernel did not run"


@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh"])
def test_one_d_fused_sigmoid_and_tanh_take_the_two_d_kernel(activation):
    """conv1d.c applies only the clamps: a 1-D FusedConv with Sigmoid or Tanh runs on the 2-D
    kernel (height 1) rather than being refused."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 50)).astype(np.float32)
    w = rng.standard_normal((5, 6, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    want = ACTIVATIONS[activation](conv_kernels.conv(x, w, b, pads=[1, 1]).copy(), None, None, None)
    got = fused_conv(x, w, b, activation=activation, pads=[1, 1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


#: Wide convs whose tiles are stored run by run (conv_f32.c's store_runs, one instance per
#: activation): rows of odd widths whose runs end inside a vector, a stem on phases, a
#: downsampling 3x3 on phases, an unpadded unit-stride conv, two images.
STORED_CASES = [
    (1, 3, 37, 35, 16, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (2, 9, 13, 21, 12, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (1, 7, 11, 19, 10, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (2, 5, 9, 23, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
]


@pytest.mark.parametrize("case", STORED_CASES)
@pytest.mark.parametrize(
    "activation, params",
    [("", []), ("Relu", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 1.5]), ("Tanh", [])],
)  # fmt: skip
def test_wide_tiles_stored_with_residual_and_activation_match_numpy(
    case, activation, params, monkeypatch
):
    wide, run = [], native.FloatConv.__call__
    monkeypatch.setattr(native.FloatConv, "__call__",
                        lambda self, *a: wide.append(self.task.wide) or run(self, *a))  # fmt: skip
    x, w, b, attrs = _case_arrays(case, sum(case[:5]) + 7)
    with native.disabled():  # (the numpy oracle: ONYX_NATIVE=0's path)
        shape = conv_kernels.conv(x, w, b, **attrs).shape
    z = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    x[0, 0, 2, 3] = np.nan  # (a NaN stays a NaN through every activation)
    fused = {"activation": activation, "activation_params": params or None}
    with native.disabled():
        want = fused_conv(x, w, b, z, **attrs, **fused)
    with native.threads(1):
        got = fused_conv(x, w, b, z, **attrs, **fused)
    assert got.shape == want.shape == shape
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert wide and all(wide), "the native kernel did not run wide"


#: Convs whose columns are packed beforehand, the packing's jobs (group, block of K, strip)
#: shared between threads: a 7x7 layer's 48 + 1 pixels over blocks of K, an odd image over
#: two images, groups, a stride-2 conv's strided packing.
PACKED_CASES = [
    (1, 300, 7, 7, 128, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 70, 5, 9, 96, (3, 3), (1, 1), (1, 1), (1, 0, 1, 2), 1),
    (1, 256, 7, 7, 256, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    (1, 100, 13, 13, 128, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
]


@pytest.mark.parametrize("case", PACKED_CASES)
def test_columns_packed_by_threads_in_blocks_of_k_match_numpy(case):
    x, w, b, attrs = _case_arrays(case, sum(case[:5]) + 3)
    with native.disabled():  # (the numpy oracle: ONYX_NATIVE=0's path)
        want = conv_kernels.conv(x, w, b, **attrs)
    for ways in (2, 3):
        with native.threads(ways):
            got = conv_kernels.conv(x, w, b, **attrs)
            conv = _derived_conv(x, w, attrs, ways)
            assert conv.cols > 0, "its columns were not packed beforehand"
            task = conv.task  # (more jobs than the strips: blocks of K too)
            assert len(conv.pack_cuts) == ways + 1
            assert conv.pack_cuts[-1] > task.group * task.strips
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_column_packing_jobs_fill_the_same_columns_and_refuse_any_past_their_own():
    from onyx.runtime.native import _core

    case = PACKED_CASES[0]
    x, w, b, attrs = _case_arrays(case, 5)
    with native.threads(2):
        conv_kernels.conv(x, w, b, **attrs)
        conv = _derived_conv(x, w, attrs, 2)
    task = type(conv.task).from_buffer_copy(conv.task)
    whole, by_job = np.zeros(conv.cols, np.float32), np.zeros(conv.cols, np.float32)
    task.x, task.cols, task.ncols = x.ctypes.data, whole.ctypes.data, whole.size
    jobs = int(conv.pack_cuts[-1])
    _core._run(_core.lib.conv_f32_pack_range, task, [0, jobs], 1, "float conv")
    task.cols = by_job.ctypes.data
    for q in reversed(range(jobs)):  # (each job its own rows, whatever the order)
        _core._run(_core.lib.conv_f32_pack_range, task, [q, q + 1], 1, "float conv")
    assert np.count_nonzero(whole) > whole.size // 4
    np.testing.assert_array_equal(by_job, whole)
    with pytest.raises(InvalidArgument):
        _core._run(_core.lib.conv_f32_pack_range, task, [0, jobs + 1], 1, "float conv")
    with pytest.raises(InvalidArgument):  # (a range that ends before it begins)
        _core._run(_core.lib.conv_f32_pack_range, task, [1, 0], 1, "float conv")


@pytest.mark.parametrize("w_shape", [(0, 3, 3, 3), (0, 0, 3, 3), (4, 0, 3, 3), (8, 0, 3, 3)])
def test_conv_of_no_channels_is_numpys(w_shape):
    """A conv of no output (or input) channels: numpy's empty (or zero) result, as onnxruntime
    (the native set-up indexed W[0] of an empty weight: an IndexError)."""
    x = np.ones((1, w_shape[1], 6, 6), np.float32)
    w = np.zeros(w_shape, np.float32)
    got = fused_conv(x, w, activation="Relu", kernel_shape=[3, 3], pads=[1] * 4)
    assert got.shape == (1, w_shape[0], 6, 6) and not got.any()


@pytest.mark.parametrize("w_shape", [(0, 3, 3, 3), (0, 0, 3, 3)])
def test_session_conv_of_no_output_channels(w_shape):
    """The bound conv of a session (kernels/conv.py's _float_conv) with no output channels:
    the empty result (the small-image set-up indexed W[0]: a RuntimeFailure)."""
    from onnx import TensorProto, helper, numpy_helper

    import onyx

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w_shape[1], 8, 8])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weight = numpy_helper.from_array(np.zeros(w_shape, np.float32), "w")
    graph = helper.make_graph(nodes, "g", [x_info], [y_info], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    s = onyx.InferenceSession(model.SerializeToString())
    got = s.run(None, {"x": np.ones((1, w_shape[1], 8, 8), np.float32)})[0]
    assert got.shape == (1, 0, 8, 8)
