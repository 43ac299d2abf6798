"""The native 1-D float conv (onyx/runtime/native/conv1d.c) against a float64 oracle and
onnxruntime: both tiles (channel vectors for few positions, position vectors for long
signals), strides past the kernel, dilations, pads and auto_pad, groups, batches, FusedConv's
residual and every activation, strided inputs (a transposed view, a reversed one), the work
split between threads, and sizes it must refuse. Where the library is off (ONYX_NATIVE=0) the
same cases test the numpy path (CI also runs them with ONYX_NATIVE_ISA=avx2: the AVX2 build
of the tiles)."""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.kernels import conv1d as conv1d_kernels
from onyx.runtime.kernels.conv import conv
from onyx.runtime.kernels.fused import fused_conv

#: N, C, L, M, k, attributes (group defaults to 1)
CASES = [
    (1, 1, 512, 258, 256, dict(strides=[64])),  # an STFT front-end: 5 frames, channel tiles
    (1, 129, 5, 64, 3, dict(pads=[1, 1])),  # a VAD's encoder on 5 frames
    (1, 64, 5, 64, 3, dict(pads=[1, 1], strides=[2])),
    (2, 1, 1000, 8, 7, dict(pads=[3, 3], strides=[2])),  # a signal's first layer: positions
    (1, 16, 300, 64, 16, dict(strides=[8])),  # a byte classifier's
    (3, 5, 77, 19, 4, dict(pads=[2, 1], strides=[3], dilations=[2])),  # partial tiles
    (1, 6, 50, 9, 5, dict(dilations=[4], pads=[8, 8])),  # a TCN's dilated layer
    (2, 8, 40, 12, 3, dict(group=4, pads=[1, 1])),  # groups of 2 channels
    (1, 12, 33, 6, 3, dict(group=3, strides=[2])),
    (1, 3, 10, 17, 6, dict(pads=[5, 5])),  # taps wholly in the padding
    (1, 4, 9, 5, 3, dict(strides=[7])),  # stride past the kernel: inputs skipped
    (1, 2, 31, 33, 1, dict()),  # k = 1
    (1, 3, 20, 7, 4, dict(auto_pad="SAME_UPPER", strides=[3])),
    (1, 3, 20, 7, 4, dict(auto_pad="SAME_LOWER", strides=[2])),
    (2, 3, 20, 7, 4, dict(auto_pad="VALID", strides=[2])),
    (1, 2, 3, 4, 5, dict(pads=[1, 1])),  # one output position
]


def _arrays(N, C, L, M, k, attrs, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, L)).astype(np.float32)
    w = rng.standard_normal((M, C // attrs.get("group", 1), k)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False  # (constants: the set-up is kept)
    return x, w, b


def _oracle(x, w, b, strides=(1,), pads=(0, 0), dilations=(1,), group=1, auto_pad="NOTSET"):
    """The conv in float64, straight from its definition."""
    N, C, L = x.shape
    M, Cg, k = w.shape
    s, d = strides[0], dilations[0]
    span = (k - 1) * d + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = max(0, (-(-L // s) - 1) * s + span - L)
        small, big = total // 2, total - total // 2
        pads = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = (0, 0)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), tuple(pads)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, span, axis=2)[:, :, ::s, ::d]
    Mg = M // group
    y = np.concatenate(
        [
            np.einsum(
                "nclk,mck->nml",
                windows[:, g * Cg : (g + 1) * Cg],
                w[g * Mg : (g + 1) * Mg].astype(np.float64),
            )
            for g in range(group)
        ],
        axis=1,
    )
    return y + b.astype(np.float64)[None, :, None]


def _close(got, want):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("case", CASES, ids=[f"{c[:5]}-{c[5]}" for c in CASES])
def test_conv1d_matches_the_oracle(case):
    N, C, L, M, k, attrs = case
    x, w, b = _arrays(*case)
    _close(conv(x, w, b, **attrs), _oracle(x, w, b, **attrs))


@pytest.mark.parametrize("case", CASES[:8], ids=[f"{c[:5]}" for c in CASES[:8]])
def test_conv1d_matches_onnxruntime(case):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import onyx

    N, C, L, M, k, attrs = case
    x, w, b = _arrays(*case)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    _close(onyx.InferenceSession(data).run(None, {"x": x})[0], want)


#: FusedConv activations: name, parameters, the float64 function
ACTIVATIONS = [
    ("Relu", None, lambda v: np.maximum(v, 0)),
    ("LeakyRelu", [0.1], lambda v: np.where(v < 0, 0.1 * v, v)),
    ("Clip", [-0.5, 0.7], lambda v: np.clip(v, -0.5, 0.7)),
    ("HardSwish", None, lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
    ("HardSigmoid", [0.3, 0.4], lambda v: np.clip(0.3 * v + 0.4, 0, 1)),
]


@pytest.mark.parametrize("act", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]], ids=["channels", "pos", "part"])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv1d_applies_residual_and_activation(act, case, residual):
    name, params, fn = act
    N, C, L, M, k, attrs = case
    x, w, b = _arrays(*case)
    want = _oracle(x, w, b, **attrs)
    z = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    Z = z if residual else None
    got = fused_conv(x, w, b, Z, activation=name, activation_params=params, **attrs)
    _close(got, fn(want + z if residual else want))


def _tiles():
    """The tile each of CASES runs on (0: channel vectors, 1: position vectors), None where
    the native kernel is off."""
    if not native.conv1d_ok():
        return None
    modes = set()
    for N, C, L, M, k, attrs in CASES:
        x, w, _ = _arrays(N, C, L, M, k, attrs)
        run = conv1d_kernels._setup(x.shape, w, attrs.get("group", 1), _attrs(attrs), 0, 0.0, 0.0)
        modes.add(run.mode)
    return modes


def _attrs(attrs: dict) -> tuple:
    return (
        attrs.get("auto_pad", "NOTSET"),
        tuple(attrs["pads"]) if "pads" in attrs else None,
        tuple(attrs["strides"]) if "strides" in attrs else None,
        tuple(attrs["dilations"]) if "dilations" in attrs else None,
        None,
    )


def test_cases_run_both_tiles_natively():
    modes = _tiles()
    if modes is None:
        pytest.skip("native library off")
    assert modes == {0, 1}


@pytest.mark.parametrize(
    "layout",
    ["transposed", "every_other", "reversed", "offset"],
)
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]], ids=["channels", "bytes", "part"])
def test_conv1d_reads_strided_inputs(layout, case):
    N, C, L, M, k, attrs = case
    _, w, b = _arrays(*case)
    rng = np.random.default_rng(2)
    if layout == "transposed":  # (N, L, C) seen as (N, C, L): a byte classifier's embedding
        x = rng.standard_normal((N, L, C)).astype(np.float32).transpose(0, 2, 1)
    elif layout == "every_other":
        x = rng.standard_normal((N, C, 2 * L)).astype(np.float32)[:, :, ::2]
    elif layout == "reversed":
        x = rng.standard_normal((N, C, L)).astype(np.float32)[:, :, ::-1]
    else:  # a misaligned start: one byte past a float
        raw = np.zeros(N * C * L * 4 + 1, np.uint8)[1:].view(np.float32).reshape(N, C, L)
        raw[...] = rng.standard_normal((N, C, L))
        x = raw
    _close(conv(x, w, b, **attrs), _oracle(x, w, b, **attrs))


def test_conv1d_splits_large_work_between_threads():
    case = (2, 16, 3000, 64, 9, dict(pads=[4, 4], strides=[2]))
    x, w, b = _arrays(*case)
    want = _oracle(x, w, b, **case[5])
    with native.threads(2):
        _close(conv(x, w, b, **case[5]), want)
        _close(fused_conv(x, w, b, want.astype(np.float32), activation="Relu", **case[5]),
               np.maximum(2 * want, 0))  # fmt: skip
    if native.conv1d_ok():
        with native.threads(2):
            run = conv1d_kernels._setup(x.shape, w, 1, _attrs(case[5]), 0, 0.0, 0.0)
        assert run.ways == 2


def test_an_empty_batch_gives_an_empty_result():
    x = np.zeros((0, 3, 20), np.float32)
    w = np.ones((4, 3, 5), np.float32)
    assert conv(x, w, strides=[2]).shape == (0, 4, 8)


def test_depthwise_and_mismatched_channels_are_left_to_other_paths():
    x, w, b = _arrays(1, 8, 30, 8, 3, dict(group=8))
    attrs = _attrs(dict(pads=[1, 1]))
    assert conv1d_kernels.native_conv1d(x, w, b, 8, attrs) is None  # depthwise.c's
    _close(conv(x, w, b, group=8, pads=[1, 1]), _oracle(x, w, b, group=8, pads=[1, 1]))
    bad = np.ones((4, 5, 3), np.float32)
    bad.flags.writeable = False
    assert conv1d_kernels.native_conv1d(x, bad, None, 1, attrs) is None
    full = np.ones((4, 8, 3), np.float32)
    full.flags.writeable = False
    for kernel_shape, taken in (((5,), False), ((3,), native.conv1d_ok())):
        attrs = ("NOTSET", (1, 1), None, None, kernel_shape)
        assert (conv1d_kernels.native_conv1d(x, full, None, 1, attrs) is not None) == taken


def test_float16_conv1d_computes_in_float32():
    x, w, b = _arrays(*CASES[3])
    x16, w16, b16 = x.astype(np.float16), w.astype(np.float16), b.astype(np.float16)
    got = conv(x16, w16, b16, **CASES[3][5])
    assert got.dtype == np.float16
    want = _oracle(x16.astype(np.float32), w16.astype(np.float32), b16.astype(np.float32),
                   **CASES[3][5])  # fmt: skip
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-2)


@pytest.mark.skipif(not native.conv1d_ok(), reason="native library off")
def test_native_conv1d_refuses_absurd_sizes():
    w = np.ones((4, 2, 3), np.float32)
    with pytest.raises(InvalidArgument, match="1-D conv"):
        native.Conv1d((1, 2, 10), w, 1, 5, 1, 2**41, 0)
    run = native.Conv1d((1, 2, 10), w, 1, 8, 1, 1, 0)
    x = np.ones((1, 2, 10), np.float32)
    np.testing.assert_allclose(run(x), np.full((1, 4, 8), 6.0))
    # the C side checks its task itself: a window past the signal's reach, a dilation near
    # 2**32, a part past the last are refused before anything is read
    lib = native.library()
    y = np.empty((1, 4, 8), np.float32)
    for field, value in (("d", 1 << 32), ("OL", 1 << 31), ("group", 3), ("chunk", 0)):
        task = type(run.task).from_buffer_copy(run.task)
        setattr(task, field, value)
        status = lib.onyx_conv1d_f32(ctypes.addressof(task), x.ctypes.data, None, y.ctypes.data,
                                     None, None)  # fmt: skip
        assert status == 2, field
    task = type(run.task).from_buffer_copy(run.task)
    task.x, task.y = x.ctypes.data, y.ctypes.data
    assert lib.onyx_parallel(lib.conv1d_range, ctypes.byref(task), np.array([0, 2], np.int64).ctypes.data, 1, 1) == 2  # fmt: skip


@pytest.mark.skipif(not native.conv1d_ok(), reason="native library off")
@pytest.mark.parametrize("threads", [1, 2])
def test_conv1d_then_pair_max_and_magnitude_keep_numpys_bits(threads):
    """conv1d.c's pass after the conv (one call on one thread, the pool's conv then the pass
    on two): MaxPool(2, 2) as numpy's maximum of the pairs (NaN wins, odd lengths drop the
    last), an STFT's magnitude as numpy's passes round it (no fused multiply-add)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 1, 16000)).astype(np.float32)
    x[0, 0, 100:140] = np.nan
    w = rng.standard_normal((42, 1, 64)).astype(np.float32)
    b = rng.standard_normal(42).astype(np.float32)
    with native.threads(threads):
        conv = native.Conv1d(x.shape, w, 1, 491, 32, 1, 3, native.CONV_ACTIVATIONS["Relu"])
        full = conv(x, b)
        pairs = native.conv1d_then(conv, native.PAIR_MAX)(x, b)
        eps = np.float32(1e-6)
        mag = native.conv1d_then(conv, native.MAGNITUDE, 17, 1, 21, eps)(x)
    assert conv.ways == threads
    np.testing.assert_array_equal(pairs, np.maximum(full[..., 0:490:2], full[..., 1:490:2]))
    assert np.isnan(pairs).any()
    plain = conv(x)
    re, im = plain[:, 1:18], plain[:, 21:38]
    np.testing.assert_array_equal(mag, np.sqrt(np.add(np.add(re * re, im * im), eps)))


@pytest.mark.skipif(not native.conv1d_ok(), reason="native library off")
def test_conv1d_post_refuses_channels_past_the_output():
    w = np.ones((4, 2, 3), np.float32)
    conv = native.Conv1d((1, 2, 10), w, 1, 8, 1, 1, 0)
    x = np.ones((1, 2, 10), np.float32)
    for bins, re0, im0 in ((3, 0, 2), (0, 0, 0), (1, -1, 0), (2, 2, 3)):
        with pytest.raises(InvalidArgument, match="1-D conv"):
            native.conv1d_then(conv, native.MAGNITUDE, bins, re0, im0)(x)
    one = native.Conv1d((1, 2, 3), w, 1, 1, 1, 1, 0)
    with pytest.raises(InvalidArgument, match="1-D conv"):
        native.conv1d_then(one, native.PAIR_MAX)(x[..., :3])


@pytest.mark.skipif(not native.conv1d_ok(), reason="native library off")
def test_conv1d_then_takes_outputs_past_the_kept_buffer():
    """A conv output past what a thread keeps between calls (a batch of clips): the call's
    own buffer, the same bits."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((64, 1, 1204)).astype(np.float32)
    w = rng.standard_normal((64, 1, 8)).astype(np.float32)
    with native.threads(1):
        conv = native.Conv1d(x.shape, w, 1, 300, 4, 1, 0)
        full = conv(x)
        mag = native.conv1d_then(conv, native.MAGNITUDE, 32, 0, 32, 0.5)(x)
        pairs = native.conv1d_then(conv, native.PAIR_MAX)(x)
    assert full.size > 1 << 20
    re, im = full[:, :32], full[:, 32:]
    np.testing.assert_array_equal(mag, np.sqrt(re * re + im * im + np.float32(0.5)))
    np.testing.assert_array_equal(pairs, np.maximum(full[..., ::2], full[..., 1::2]))


@pytest.mark.skipif(not native.conv1d_ok(), reason="native library off")
def test_conv1d_post_pair_max_keeps_numpys_signed_zeros():
    """A pair of zeros of either sign gives the second, as numpy's maximum (and the vector
    max) does, in the scalar rows and tails too (the bits, not only the values)."""
    from onyx.runtime.native import _core as core

    for OL in (34, 35, 7):  # (a vector of 16 pairs and a tail; a tail alone)
        conv = native.Conv1d((1, 2, OL + 2), np.ones((4, 2, 3), np.float32), 1, OL, 1, 1, 0)
        full = np.zeros((1, 4, OL), np.float32)
        full[:, ::2, 0::2] = -0.0  # (channels 0, 2: -0 then +0; channels 1, 3: +0 then -0)
        full[:, 1::2, 1::2] = -0.0
        full[0, 0, -3:] = np.nan, 1.0, np.nan
        out = np.empty((1, 4, OL // 2), np.float32)
        sel = (ctypes.c_int64 * 3)(0, 0, 0)
        status = core.lib.onyx_conv1d_post(
            conv.address, full.ctypes.data, native.PAIR_MAX, sel, 0.0, out.ctypes.data
        )
        assert status == 0
        expected = np.maximum(full[..., 0 : OL - 1 : 2], full[..., 1:OL:2])
        np.testing.assert_array_equal(out, expected)
        if platform.machine() in ("x86_64", "AMD64"):  # (numpy's zeros there: max_ps's)
            assert (np.signbit(out) == np.signbit(expected)).all()
