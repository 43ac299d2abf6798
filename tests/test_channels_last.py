"""The channels-last layout pass (optimizer/layout.py) and its kernels (kernels/channels_last.py,
native/nhwc.c): MobileNet-style chains against onnxruntime and the NCHW graph, the numpy path
(the functions' bodies), where the reorders go, and the native kernels against the NCHW ones."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.optimizer import layout
from onyx.runtime.kernels import channels_last
from onyx.runtime.kernels.conv import _conv_geometry
from onyx.runtime.kernels.fused import fused_conv
from onyx.runtime.native import nhwc

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def w(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _mobile_block(C: int, E: int, stride: int, opset: int):
    """Nodes and weights of a MobileNetV3-like net: stem, inverted residual with
    squeeze-excite, a strided depthwise block, pooling and a classifier."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "ws", "bs"], ["s"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("HardSwish", ["s"], ["s1"]),
        n("Conv", ["s1", "we", "be"], ["e"]),  # expand 1x1
        n("Clip", ["e", "lo", "hi"], ["e1"]),
        n("Conv", ["e1", "wd", "bd"], ["d"], group=E, pads=[1, 1, 1, 1]),  # depthwise 3x3
        n("HardSwish", ["d"], ["d1"]),
        n(
            "ReduceMean",
            ["d1", "axes"] if opset >= 18 else ["d1"],
            ["p"],
            keepdims=1,
            **({} if opset >= 18 else {"axes": [2, 3]}),
        ),  # fmt: skip
        n("Conv", ["p", "wr", "br"], ["r"]),
        n("Relu", ["r"], ["r1"]),
        n("Conv", ["r1", "wx", "bx"], ["q"]),
        n("HardSigmoid", ["q"], ["q1"], alpha=1 / 6, beta=0.5),
        n("Mul", ["d1", "q1"], ["se"]),
        n("Conv", ["se", "wp", "bp"], ["pr"]),  # project 1x1
        n("Add", ["pr", "s1"], ["res"]),  # residual
        n("Mul", ["res", "scale"], ["sc"]),  # a per-channel constant (permuted by the pass)
        n(
            "Conv",
            ["sc", "w5", "b5"],
            ["f"],
            group=C,
            pads=[2, 1, 2, 2],
            strides=[stride, stride],
            kernel_shape=[5, 5],
        ),  # fmt: skip
        n("Relu", ["f"], ["f1"]),
        n("GlobalAveragePool", ["f1"], ["g"]),
        n("Flatten", ["g"], ["fl"]),
        n("Gemm", ["fl", "wc"], ["y"], transB=1),
    ]
    R = max(E // 4, 1)
    inits = [
        ("ws", w(C, 3, 3, 3)), ("bs", w(C)), ("we", w(E, C, 1, 1)), ("be", w(E)),
        ("lo", np.float32(0.0)), ("hi", np.float32(6.0)), ("wd", w(E, 1, 3, 3)), ("bd", w(E)),
        ("wr", w(R, E, 1, 1)), ("br", w(R)), ("wx", w(E, R, 1, 1)), ("bx", w(E)),
        ("wp", w(C, E, 1, 1)), ("bp", w(C)), ("scale", w(C, 1, 1)), ("w5", w(C, 1, 5, 5)),
        ("b5", w(C)), ("wc", w(7, C)),
    ]  # fmt: skip
    if opset >= 18:
        inits.append(("axes", np.array([2, 3], np.int64)))
    return nodes, inits


def mobile_net(C=20, E=36, stride=2, opset=18, hw=(13, 11)) -> bytes:
    nodes, inits = _mobile_block(C, E, stride, opset)
    graph = helper.make_graph(
        nodes,
        "mobile",
        [helper.make_tensor_value_info("x", F, ["N", 3, *hw])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model.SerializeToString()


@pytest.fixture
def forced(monkeypatch):
    """The pass runs wherever the test runs (on the numpy path without AVX-512)."""
    monkeypatch.setattr(layout, "_worthwhile", lambda: True)


def _ops(model: onyx.ir.Model) -> list[str]:
    return [n.op_type for n in model.graph]


@pytest.mark.parametrize(
    "C, E, stride, opset, batch",
    [(20, 36, 2, 18, 1), (16, 48, 1, 17, 2), (7, 24, 2, 14, 8), (33, 40, 1, 18, 2)],
)
def test_mobile_chain_matches_onnxruntime(forced, C, E, stride, opset, batch):
    """The whole net runs channels-last: the optimized model (and its saved copy run by
    onnxruntime) gives onnxruntime's results on the original."""
    m = mobile_net(C, E, stride, opset)
    x = RNG.uniform(-1, 1, (batch, 3, 13, 11)).astype(np.float32)
    expected = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onyx.InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    opt = onyx.optimize(onyx.loads(m))
    assert "NhwcFusedConv" in _ops(opt) and "Conv" not in _ops(opt)
    saved = onyx.dumps(opt)
    onnx.checker.check_model(onnx.load_from_string(saved))  # (no full check: FusedConv
    # is a com.microsoft op, which onnx cannot infer inside a function)
    theirs = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(theirs[0], expected, rtol=1e-4, atol=1e-4)


def test_reorders_only_at_the_chain_ends(forced):
    """One Transpose to NHWC where the image enters, one back where the pooled tensor leaves
    for Flatten; every conv, the pooling and the elementwise ops in between are the chain's."""
    opt = onyx.optimize(onyx.loads(mobile_net()))
    transposes = [n for n in opt.graph if n.op_type == "Transpose"]
    assert [list(n.attr("perm")) for n in transposes] == [[0, 2, 3, 1], [0, 3, 1, 2]]
    entry, exit_ = transposes
    assert entry.inputs[0].name == "x"
    assert exit_.inputs[0].producer.op_type == "NhwcGlobalAveragePool"
    assert [u.op_type for u, _ in exit_.outputs[0].iter_uses()] == ["Flatten"]
    ops = _ops(opt)
    assert ops.count("NhwcGlobalAveragePool") == 2 and "ReduceMean" not in ops
    assert ops.count("NhwcConvHardSwish") == 2 and ops.count("NhwcFusedConv") == 4
    # the squeeze-excite scale and the residual sum join the projection
    assert ops.count("NhwcScaledFusedConvAdd") == 1 and ops.count("Add") == 0
    assert ops.count("Mul") == 1  # (the constant one, permuted)


def test_no_chain_without_a_depthwise_conv(forced):
    """A chain of group-1 convs stays NCHW (conv_f32.c serves it)."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["b"]),
             n("Conv", ["b", "w2"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(w(8, 4, 3, 3), "w1"),
            numpy_helper.from_array(w(4, 8, 1, 1), "w2"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ops = _ops(onyx.optimize(onyx.loads(m.SerializeToString())))
    assert "Transpose" not in ops and "NhwcFusedConv" not in ops


def test_numpy_path_is_the_body(forced, monkeypatch):
    """Without the native kernels the new ops run their bodies (the NCHW kernels between
    transposes): the same results as the native path and the NCHW graph."""
    m = mobile_net(20, 36, 2, 18)
    x = RNG.uniform(-1, 1, (2, 3, 13, 11)).astype(np.float32)
    native = onyx.InferenceSession(m).run(None, {"x": x})[0]
    off = onyx.SessionOptions()
    off.disabled_optimizers = ["ChannelsLastTransformer"]
    nchw = onyx.InferenceSession(m, off).run(None, {"x": x})[0]
    monkeypatch.setattr(nhwc, "available", lambda: False)
    numpy_path = onyx.InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(numpy_path, nchw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(native, nchw, rtol=1e-4, atol=1e-4)


def test_pass_off_without_native_kernels(monkeypatch):
    monkeypatch.setattr(nhwc, "available", lambda: False)
    assert "NhwcFusedConv" not in _ops(onyx.optimize(onyx.loads(mobile_net())))


# ------------------------------------------------------------------------------ the kernels

needs_native = pytest.mark.skipif(not nhwc.available(), reason="channels-last kernels: AVX-512")

_ACTIVATIONS = [("", None), ("Relu", None), ("Clip", [0.0, 6.0]), ("HardSigmoid", [0.2, 0.5])]


@needs_native
@pytest.mark.parametrize(
    "N, C, M, HW, k, s, p, depthwise",
    [
        case
        for case in itertools.product(
            [1, 2], [3, 17, 32], [5, 40], [(7, 8), (12, 9)], [1, 3, 5], [1, 2], [0, 2], [0, 1]
        )
        if not (case[-1] and case[1] == 3)
    ][::7],
)
def test_native_conv_matches_nchw(N, C, M, HW, k, s, p, depthwise):
    """NhwcConv (group 1, from an NHWC or a transposed NCHW input; depthwise) against the
    NCHW FusedConv kernel, borders and channel tails included."""
    M = C if depthwise else M
    H, W = HW
    x = w(N, C, H, W, scale=1.0)
    wt, b = w(M, 1 if depthwise else C, k, k), w(M)
    act, params = _ACTIVATIONS[(N + C + k) % len(_ACTIVATIONS)]
    pads = [p, p + 1, p, p] if k > 1 else [0, 0, 0, 0]
    ref = fused_conv(x, wt, b, activation=act, activation_params=params,
                     group=C if depthwise else 1, pads=pads, strides=[s, s])  # fmt: skip
    geo = _conv_geometry(x.shape, wt.shape, "NOTSET", pads, [s, s], [1, 1], None)
    code = channels_last.activation_code(act, params)
    conv = nhwc.NhwcConv((N, H, W, C), wt, b, geo, code)
    view = x.transpose(0, 2, 3, 1)  # (the group-1 conv reads it in place)
    xin = conv.reads(view if C == 3 else np.ascontiguousarray(view))
    conv.set_strides(xin.strides)
    got = conv(xin).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


@needs_native
def test_set_ups_of_constant_weights_share_their_packing():
    """Each layer's own set-up and each signature's chain set-up pack the same constant W:
    one packed copy (and none kept once W is gone); a writable W is packed afresh."""
    import gc

    wt, b = w(24, 24, 3, 3), w(24)
    wt.flags.writeable = b.flags.writeable = False
    geo = _conv_geometry((1, 24, 8, 8), wt.shape, "NOTSET", [1] * 4, [1, 1], [1, 1], None)
    geo2 = _conv_geometry((2, 24, 8, 8), wt.shape, "NOTSET", [1] * 4, [1, 1], [1, 1], None)
    one = nhwc.NhwcConv((1, 8, 8, 24), wt, b, geo, (0, 0.0, 0.0))
    two = nhwc.NhwcConv((2, 8, 8, 24), wt, b, geo2, (0, 0.0, 0.0))
    assert one.keep[0] is two.keep[0] and one.keep[1] is two.keep[1]
    fresh = wt.copy()  # (writable)
    other = nhwc.NhwcConv((1, 8, 8, 24), fresh, b, geo, (0, 0.0, 0.0))
    assert other.keep[0] is not one.keep[0]
    np.testing.assert_array_equal(other.keep[0], one.keep[0])
    entries = len(nhwc.PACKED)
    del one, two, wt
    gc.collect()
    assert len(nhwc.PACKED) == entries - 1


def _reference_packing(wt: np.ndarray, bias, depthwise: bool) -> tuple:
    """nhwc.c's weight layout made with numpy (what nhwc.py made before the library did)."""
    M, C, kh, kw = wt.shape
    Mp = -(-M // 16) * 16
    b = np.zeros(Mp, np.float32)
    if bias is not None:
        b[:M] = bias
    if depthwise:  # [kh][kw][channels rounded up to 16]
        packed = np.zeros((kh, kw, Mp), np.float32)
        packed[:, :, :M] = wt[:, 0].transpose(1, 2, 0)
        return packed.reshape(-1), b
    full = np.zeros((Mp, C, kh, kw), np.float32)
    full[:M] = wt
    groups = [full[m : m + 64].transpose(2, 3, 1, 0).reshape(-1) for m in range(0, Mp, 64)]
    return np.concatenate(groups), b


@needs_native
@pytest.mark.parametrize(
    "M, C, k, depthwise, bias",
    [(24, 24, 3, False, True), (70, 5, 1, False, True), (130, 3, 3, False, False),
     (64, 9, 5, False, True), (1, 1, 1, False, True), (33, 1, 3, True, True),
     (16, 1, 5, True, False), (200, 1, 3, True, True)],
)  # fmt: skip
def test_weights_are_packed_as_the_kernels_read_them(M, C, k, depthwise, bias):
    """onyx_nhwc_pack lays the weights out as numpy did: groups of 64 outputs [kh][kw][C][64]
    (group 1), [kh][kw][channels] (depthwise), zeros past M, the bias padded."""
    wt = w(M, C, k, k + (1 if k > 1 else 0))
    b = w(M) if bias else None
    packed, padded, *_ = nhwc.pack_weights(wt, b, depthwise)
    want, want_b = _reference_packing(wt, b, depthwise)
    np.testing.assert_array_equal(packed.reshape(-1), want)
    np.testing.assert_array_equal(padded, want_b)
    with pytest.raises(onyx.OnyxError, match="bias"):
        nhwc.pack_weights(wt, w(M + 1), depthwise)


@needs_native
def test_native_depthwise_of_a_channel_slice():
    """A depthwise conv of a channel slice of a wider NHWC array (channels contiguous, pixels
    2C floats apart): nhwc.c's depthwise kernels step a pixel by C floats, so reads() copies
    it (it once passed it as it was, and the kernel read the other channels)."""
    x = w(2, 16, 6, 7, scale=1.0)
    wt, b = w(16, 1, 3, 3), w(16)
    wt.flags.writeable = b.flags.writeable = False  # (constants: the native conv's set-up)
    ref = fused_conv(x, wt, b, group=16, pads=[1, 1, 1, 1])
    wide = np.concatenate([x, w(2, 16, 6, 7, scale=1.0)], axis=1).transpose(0, 2, 3, 1)
    sliced = np.ascontiguousarray(wide)[..., :16]
    y = channels_last.nhwc_conv(
        sliced, wt, b, 16, ("NOTSET", (1, 1, 1, 1), (1, 1), (1, 1), None), "", None
    )
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)


@needs_native
def test_native_dilated_depthwise_and_mean():
    x = w(2, 21, 10, 9, scale=1.0)
    wt, b = w(21, 1, 3, 3), w(21)
    ref = fused_conv(x, wt, b, group=21, pads=[2, 2, 2, 2], dilations=[2, 2], strides=[1, 2])
    y = channels_last.nhwc_conv(
        np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt, b, 21,
        ("NOTSET", (2, 2, 2, 2), (1, 2), (2, 2), None), "", None,
    )  # fmt: skip
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)
    z = w(3, 5, 7, 37)
    np.testing.assert_allclose(
        nhwc.mean_pixels(z), z.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6
    )


@needs_native
@pytest.mark.parametrize(
    "C, M, HW, k, s, depthwise, act",
    [
        (3, 16, (21, 30), 3, 2, 0, ("HardSwish", None)),  # the stem: 12-pixel tiles from NCHW
        (3, 11, (9, 13), 3, 1, 0, ("Clip", [0.0, 6.0])),  # (a partial block, borders)
        (24, 16, (5, 7), 1, 1, 0, ("Relu", None)),  # pointwise, one block: 12-pixel tiles
        (40, 72, (4, 9), 1, 1, 0, ("HardSwish", None)),  # 64 + a partial block
        (24, 24, (13, 11), 5, 2, 1, ("", None)),  # depthwise 5x5 s2, a channel tail
        (40, 40, (6, 6), 3, 1, 1, ("LeakyRelu", [0.1])),  # an image narrower than a tile
        (64, 64, (12, 17), 3, 2, 1, ("HardSigmoid", [0.2, 0.5])),
    ],
)
def test_native_tiles_with_residual(C, M, HW, k, s, depthwise, act):
    """The unrolled tiles (stem, one-block pointwise, depthwise 3x3 / 5x5) with each
    activation as a constant and a residual, against the NCHW FusedConv kernel."""
    N, (H, W) = 2, HW
    x = w(N, C, H, W, scale=1.0)
    wt, b = w(M, 1 if depthwise else C, k, k), w(M)
    pads = [k // 2] * 4
    geo = _conv_geometry(x.shape, wt.shape, "NOTSET", pads, [s, s], [1, 1], None)
    z = w(N, M, *geo["out_shape"], scale=1.0)
    name, params = act
    ref = fused_conv(x, wt, b, z, activation=name, activation_params=params,
                     group=C if depthwise else 1, pads=pads, strides=[s, s])  # fmt: skip
    conv = nhwc.NhwcConv((N, H, W, C), wt, b, geo, channels_last.activation_code(name, params))
    view = x.transpose(0, 2, 3, 1)
    xin = conv.reads(view if C == 3 else np.ascontiguousarray(view))
    conv.set_strides(xin.strides)
    got = conv(xin, None, np.ascontiguousarray(z.transpose(0, 2, 3, 1)))
    np.testing.assert_allclose(
        got.transpose(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max())
    )


@needs_native
@pytest.mark.parametrize("k, s", [(3, 1), (3, 2), (5, 1), (5, 2)])
def test_native_depthwise_six_pixel_tiles(k, s):
    """Rows of 6, 12 and 18 output pixels take depthwise tiles of 6 pixels (fewer empty slots
    than tiles of 8), a border tile and inside ones, a channel tail: the NCHW kernel's sums."""
    for OW, C in [(6, 40), (12, 24), (18, 16)]:
        H = W = (OW - 1) * s + 1
        x = w(2, C, H, W, scale=1.0)
        wt, b = w(C, 1, k, k), w(C)
        pads = [k // 2] * 4
        ref = fused_conv(x, wt, b, activation="Relu", group=C, pads=pads, strides=[s, s])
        geo = _conv_geometry(x.shape, wt.shape, "NOTSET", pads, [s, s], [1, 1], None)
        assert geo["out_shape"][1] == OW
        code = channels_last.activation_code("Relu", None)
        conv = nhwc.NhwcConv((2, H, W, C), wt, b, geo, code)
        xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        conv.set_strides(xin.strides)
        got = conv(xin).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


class _SmallLayer:
    """A MobileNet-sized conv's data (input, weights, the NCHW FusedConv's result) and its
    NhwcConv set up under the current thread setting (``conv()``)."""

    def __init__(self, N, C, M, HW, k, s, depthwise, act=("Clip", [0.0, 6.0])):
        x = w(N, C, HW, HW, scale=1.0)
        self.wt, self.b, self.act = w(M, 1 if depthwise else C, k, k), w(M), act
        pads = [k // 2] * 4
        self.ref = fused_conv(x, self.wt, self.b, activation=act[0], activation_params=act[1],
                              group=C if depthwise else 1, pads=pads, strides=[s, s])  # fmt: skip
        self.geo = _conv_geometry(x.shape, self.wt.shape, "NOTSET", pads, [s, s], [1, 1], None)
        self.shape = (N, HW, HW, C)
        self.x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def conv(self) -> nhwc.NhwcConv:
        code = channels_last.activation_code(*self.act)
        conv = nhwc.NhwcConv(self.shape, self.wt, self.b, self.geo, code)
        conv.set_strides(self.x.strides)
        return conv


@needs_native
@pytest.mark.parametrize(
    "N, C, M, HW, k, s, depthwise",
    [
        (1, 256, 256, 6, 3, 1, 1),  # the smallest depthwise layers of a MobileNet at batch 1
        (1, 192, 192, 12, 3, 2, 1),
        (1, 40, 160, 12, 1, 1, 0),  # pointwise
        (1, 3, 16, 96, 3, 2, 0),  # the stem
        (2, 64, 256, 6, 1, 1, 0),
    ],
)
def test_small_layers_split_between_threads(N, C, M, HW, k, s, depthwise):
    """A MobileNet's small layers take a second thread (each thread keeps its rows from layer
    to layer); split or not, every output row is the same sums: the results are equal."""
    from onyx.runtime import native

    layer = _SmallLayer(N, C, M, HW, k, s, depthwise)
    with native.threads(1):
        alone = layer.conv()
    assert alone.ways == 1
    want = alone(layer.x)
    np.testing.assert_allclose(want.transpose(0, 3, 1, 2), layer.ref, rtol=1e-4, atol=1e-4)
    for threads in (2, 3, 5):
        with native.threads(threads):
            conv = layer.conv()
            assert conv.ways == min(threads, conv.parts) and conv.ways >= 2
            for _ in range(3):
                np.testing.assert_array_equal(conv(layer.x), want)


@needs_native
def test_split_layers_from_several_python_threads():
    """Sessions on several Python threads share the native pool: a caller that finds it busy
    runs its parts itself, and parts a worker has not come for are taken by the caller."""
    import threading

    from onyx.runtime import native

    cases = [(1, 160, 160, 12, 3, 1, 1), (1, 40, 160, 12, 1, 1, 0), (2, 24, 72, 24, 1, 1, 0)]
    layers = [_SmallLayer(*case) for case in cases]
    errors = []

    def work(layer):
        with native.threads(1):
            want = layer.conv()(layer.x)
        with native.threads(3):
            conv = layer.conv()
            for _ in range(200):
                if not np.array_equal(conv(layer.x), want):
                    errors.append(layer.shape)

    runners = [threading.Thread(target=work, args=(layer,)) for layer in layers * 2]
    for t in runners:
        t.start()
    for t in runners:
        t.join()
    assert not errors


@needs_native
def test_a_layers_output_is_written_again_only_when_nothing_holds_it(monkeypatch):
    """NhwcConv keeps its last output for the next call: it writes it again only once no
    one holds it, nor a view of it."""
    from onyx.runtime import native

    monkeypatch.setattr(nhwc, "_SPARE_FLOATS", 1 << 40)  # (whatever other tests keep)
    layer = _SmallLayer(1, 40, 160, 12, 1, 1, 0)
    with native.threads(1):  # (on one thread a fresh buffer is the hotter one: none kept)
        alone = layer.conv()
        assert alone(layer.x) is not alone(layer.x) and alone.kept == 0
    with native.threads(2):
        conv = layer.conv()
    assert conv.ways == 2
    first = conv(layer.x)
    want = first.copy()
    second = conv(layer.x)
    assert second is not first  # (first is held)
    kept = id(second)
    del second
    third = conv(layer.x)
    assert id(third) == kept  # (released: written again)
    assert conv.kept == third.size
    view = third[:, 1:]
    del third
    fourth = conv(layer.x + 1)
    assert id(fourth) != kept  # (a view of it is held)
    np.testing.assert_array_equal(view, want[:, 1:])
    np.testing.assert_array_equal(first, want)


@needs_native
@pytest.mark.parametrize("read_only", [False, True])
def test_plain_call_matches_the_full_call(read_only):
    """NhwcConv.plain (one thread's call, its steps inlined) writes what __call__ writes, a
    fresh 64-byte-aligned output each call, for a layer's output, a read-only feed and the
    stem's strided view of an NCHW image."""
    from onyx.runtime import native

    cases = [(1, 40, 160, 12, 1, 1, 0), (1, 64, 64, 12, 3, 2, 1), (2, 24, 72, 6, 1, 1, 0)]
    for case in cases:
        layer = _SmallLayer(*case)
        with native.threads(1):
            conv = layer.conv()
        assert not conv.keeps
        x = layer.x.copy()
        x.flags.writeable = not read_only
        want = conv(x)
        first, second = conv.plain(x), conv.plain(x)
        assert first is not second and first.ctypes.data % 64 == 0
        np.testing.assert_array_equal(first, want)
        np.testing.assert_array_equal(second, want)
    stem = _SmallLayer(1, 3, 16, 24, 3, 2, 0)
    image = np.ascontiguousarray(stem.x.transpose(0, 3, 1, 2))
    image.flags.writeable = not read_only
    view = image.transpose(0, 2, 3, 1)  # (the chain's entry: no copy)
    with native.threads(1):
        conv = stem.conv()
    conv.set_strides(view.strides)
    np.testing.assert_allclose(
        conv.plain(view).transpose(0, 3, 1, 2), stem.ref, rtol=1e-4, atol=1e-4
    )


def _chain_model() -> bytes:
    """Stem conv, depthwise conv and pointwise conv whose output is the graph's: the layout
    chain ends in the output's Transpose back to NCHW."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "ws", "bs"], ["s"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["s"], ["s1"]),
        n("Conv", ["s1", "wd", "bd"], ["d"], group=16, pads=[1, 1, 1, 1]),
        n("Relu", ["d"], ["d1"]),
        n("Conv", ["d1", "wp", "bp"], ["y"]),
    ]
    inits = {"ws": w(16, 3, 3, 3), "bs": w(16), "wd": w(16, 1, 3, 3), "bd": w(16)}
    inits.update(wp=w(24, 16, 1, 1), bp=w(24))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", F, ["N", 3, 40, 40])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_session_outputs_stay_as_returned(forced, monkeypatch):
    """A run's result, held by the caller, is not written by the next run (the layers keep
    their outputs for the next run only when nothing holds them)."""
    monkeypatch.setattr(nhwc, "_SPARE_FLOATS", 1 << 40)
    m = _chain_model()
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    options = onyx.SessionOptions()
    options.intra_op_num_threads = 2  # (the layers split: they keep their outputs)
    sess = onyx.InferenceSession(m, options)
    xs = [RNG.uniform(-1, 1, (1, 3, 40, 40)).astype(np.float32) for _ in range(3)]
    held = [sess.run(None, {"x": x})[0] for x in xs]
    for _ in range(2):  # (again, the results released: the layers' outputs written again)
        for x in xs:
            got = sess.run(None, {"x": x})[0]
            np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    for x, y in zip(xs, held):
        np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_shapes_read_only_of_the_chains_ops(forced, monkeypatch):
    """The chains are found without the shape of a node that is neither a chain op nor reads
    the chain (the Flatten and Gemm after the pooling): its op is asked first."""
    model = onyx.loads(mobile_net())
    asked: list = []
    real = layout._rank4  # noqa: SLF001

    def counted(v):
        if v is not None and v.producer is not None:
            asked.append(v.producer.op_type)
        return real(v)

    monkeypatch.setattr(layout, "_rank4", counted)
    onyx.optimize(model)
    assert asked and not {"Flatten", "Gemm"} & set(asked), asked
