"""SpectralMagnitudeFusion: an STFT's magnitude, Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps))
of two Slices of one tensor, becomes one ai.onyx SpectralMagnitude node with the same bits; its
function body keeps the saved model runnable elsewhere."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

BINS, FRAMES = 9, 5


def _model(eps: bool = True, eps_first: bool = False, im_first: bool = False, axis=1,
           extra_reader: bool = False, step: int | None = None) -> bytes:  # fmt: skip
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "s0"),
        numpy_helper.from_array(np.array([BINS], np.int64), "e0"),
        numpy_helper.from_array(np.array([BINS], np.int64), "s1"),
        numpy_helper.from_array(np.array([2**62], np.int64), "e1"),  # (clamped: to the end)
        numpy_helper.from_array(np.array([axis], np.int64), "ax"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
    ]
    slice_inputs = ["ax"]
    if step is not None:
        inits.append(numpy_helper.from_array(np.array([step], np.int64), "st"))
        slice_inputs.append("st")
    nodes = [
        helper.make_node("Slice", ["x", "s0", "e0", *slice_inputs], ["re"]),
        helper.make_node("Slice", ["x", "s1", "e1", *slice_inputs], ["im"]),
        helper.make_node("Mul", ["re", "re"], ["re2"]),
        helper.make_node("Mul", ["im", "im"], ["im2"]),
        helper.make_node("Add", ["im2", "re2"] if im_first else ["re2", "im2"], ["p"]),
    ]
    if eps:
        nodes.append(helper.make_node("Add", ["eps", "p"] if eps_first else ["p", "eps"], ["q"]))
    nodes.append(helper.make_node("Sqrt", ["q" if eps else "p"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("re2", TensorProto.FLOAT, None))
    shape = [2, 2 * BINS, FRAMES] if axis in (1, -2) else [2, FRAMES, 2 * BINS]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _feeds(model: bytes) -> dict:
    sess = onyx.InferenceSession(model, disabled_optimizers=["SpectralMagnitudeFusion"])
    shape = [d for d in sess.get_inputs()[0].shape]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[:3] = [0.0, -0.0, np.nan]
    return {"x": x}


def _ops(sess) -> list[str]:
    return [s.node.op_type for s in sess.plan.default_schedule]


@pytest.mark.parametrize(
    "kw",
    [{}, {"eps": False}, {"eps_first": True}, {"im_first": True}, {"axis": -1}, {"step": 1}],
)
def test_fused_same_bits(kw):
    model = _model(**kw)
    feeds = _feeds(model)
    fast = onyx.InferenceSession(model)
    plain = onyx.InferenceSession(model, disabled_optimizers=["SpectralMagnitudeFusion"])
    assert _ops(fast) == ["SpectralMagnitude"]
    got, want = fast.run(None, feeds)[0], plain.run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, oracle, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [{"extra_reader": True}, {"step": 2}])
def test_not_fused(kw):
    fast = onyx.InferenceSession(_model(**kw))
    assert "SpectralMagnitude" not in _ops(fast)


def test_saved_model_runs_in_onnxruntime(tmp_path):
    """The optimized model holds the fused node and its function body: onnxruntime runs it."""
    model = _model()
    path = tmp_path / "opt.onnx"
    opts = onyx.SessionOptions()
    opts.optimized_model_filepath = str(path)
    onyx.InferenceSession(model, opts)
    saved = path.read_bytes()
    assert b"SpectralMagnitude" in saved
    feeds = _feeds(model)
    got = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    want = onyx.InferenceSession(model).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_numpy_path(monkeypatch):
    """The kernel is numpy only: ONYX_NATIVE=0 gives the same bits."""
    monkeypatch.setenv("ONYX_NATIVE", "0")
    model = _model()
    feeds = _feeds(model)
    got = onyx.InferenceSession(model).run(None, feeds)[0]
    want = onyx.InferenceSession(model, disabled_optimizers=["SpectralMagnitudeFusion"]).run(
        None, feeds
    )[0]
    np.testing.assert_array_equal(got, want)


def _conv_pool_model(relu: bool, pool: dict, extra_reader: bool = False,
                     indices: bool = False) -> bytes:  # fmt: skip
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 3, 5)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[2, 2], strides=[2])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    pool_out = ["y", "i"] if indices else ["y"]
    nodes.append(helper.make_node("MaxPool", ["r" if relu else "c"], pool_out, **pool))
    outs = ["y"] + (["c"] if extra_reader else []) + (["i"] if indices else [])
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [info("x", TensorProto.FLOAT, ["N", 3, "L"])],
        [info(o, TensorProto.INT64 if o == "i" else TensorProto.FLOAT, None) for o in outs],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


POOLS = [
    dict(kernel_shape=[2], strides=[2]),
    dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
    dict(kernel_shape=[2], strides=[1], dilations=[2], ceil_mode=1),
]


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("pool", POOLS)
def test_conv_max_pool_same_bits(relu, pool, tmp_path):
    """ConvMaxPoolFusion: a 1-D conv (plain, or FusedConv with its Relu) and its MaxPool in
    one step with the pair's bits; onnxruntime runs the saved model (the function body)."""
    model = _conv_pool_model(relu, pool)
    x = np.random.default_rng(2).standard_normal((2, 3, 101)).astype(np.float32)
    x[0, 0, :4] = np.nan
    opts = onyx.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    fast = onyx.InferenceSession(model, opts)
    plain = onyx.InferenceSession(model, disabled_optimizers=["ConvMaxPoolFusion"])
    assert _ops(fast) == ["FusedConvMaxPool" if relu else "ConvMaxPool"]
    got = fast.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, plain.run(None, {"x": x})[0])
    # (onnxruntime's MaxPool passes over NaN where onyx's keeps it: compared without them)
    clean = {"x": x[1:]}
    for path in (model, str(tmp_path / "opt.onnx")):
        oracle = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got[1:], oracle.run(None, clean)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [{"extra_reader": True}, {"indices": True}])
def test_conv_max_pool_not_fused(kw):
    fast = onyx.InferenceSession(_conv_pool_model(True, POOLS[0], **kw))
    assert "MaxPool" in _ops(fast)


@pytest.mark.parametrize("relu", [False, True])
def test_pairs_pool_in_the_native_conv(relu, monkeypatch):
    """MaxPool(2, 2) of a native 1-D conv runs as one native call, the conv and the max of
    its pairs of outputs (kernels/audio.py, conv1d.c's post pass), bound to the step, with the
    pair's bits, odd lengths and batches included; the kernel as written (constant folding)
    gives the same bits."""
    from onyx.runtime import native
    from onyx.runtime.kernels import audio

    if not native.conv1d_ok():
        pytest.skip("the native library is off")
    calls = []
    make = audio.pair_runner

    def counted(*a):
        run = make(*a)
        return None if run is None else lambda X, B: calls.append(run(X, B)) or calls[-1]

    monkeypatch.setattr(audio, "pair_runner", counted)
    model = _conv_pool_model(relu, POOLS[0])
    fast = onyx.InferenceSession(model)
    plain = onyx.InferenceSession(model, disabled_optimizers=["ConvMaxPoolFusion"])
    for n, length in ((1, 101), (3, 100), (3, 100)):
        x = np.random.default_rng(n).standard_normal((n, 3, length)).astype(np.float32)
        want = plain.run(None, {"x": x})[0]
        np.testing.assert_array_equal(fast.run(None, {"x": x})[0], want)
    assert len(calls) == 3 and all(y is not None for y in calls)
    (step,) = [s for s in fast.plan.default_schedule if "MaxPool" in s.node.op_type]
    kernel = audio.fused_conv_max_pool if relu else audio.conv_max_pool
    w, b = (fast.plan.template[i] for i in step.ins[1:3])
    attrs = {k: v for k, v in step.fn.attrs.items()}
    np.testing.assert_array_equal(kernel(x, w, b, **attrs), want)


def _stft_model(bias: bool = False, unsqueeze: bool = False) -> bytes:
    """audio [N, 1, L] (or [N, L] -> Unsqueeze) -> Conv (stride 16, 2 x 9 channels) -> the
    magnitude chain."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((2 * BINS, 1, 32)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(2 * BINS).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([0], np.int64), "s0"),
        numpy_helper.from_array(np.array([BINS], np.int64), "e0"),
        numpy_helper.from_array(np.array([2 * BINS], np.int64), "e1"),
        numpy_helper.from_array(np.array([1], np.int64), "ax"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
    ]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "channel"))
    nodes = [helper.make_node("Unsqueeze", ["audio", "channel"], ["a1"])] if unsqueeze else []
    nodes += [
        helper.make_node(
            "Conv",
            ["a1" if unsqueeze else "audio", "w"] + (["b"] if bias else []),
            ["x"],
            strides=[16],
        ),  # fmt: skip
        helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["re"]),
        helper.make_node("Slice", ["x", "e0", "e1", "ax"], ["im"]),
        helper.make_node("Mul", ["re", "re"], ["re2"]),
        helper.make_node("Mul", ["im", "im"], ["im2"]),
        helper.make_node("Add", ["re2", "im2"], ["p"]),
        helper.make_node("Add", ["p", "eps"], ["q"]),
        helper.make_node("Sqrt", ["q"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    shape = ["N", 256] if unsqueeze else ["N", 1, 256]
    graph = helper.make_graph(nodes, "g", [info("audio", TensorProto.FLOAT, shape)],
                              [info("y", TensorProto.FLOAT, None)], inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("bias, unsqueeze", [(False, False), (True, False), (False, True)])
def test_stft_conv_joins_the_magnitude(bias, unsqueeze, tmp_path):
    """The STFT's bias-free Conv joins the magnitude (ConvMagnitude, one step; a conv with a
    bias stays apart), and so does the Unsqueeze before it (SignalMagnitude), with the unfused
    bits; onnxruntime runs the saved model."""
    model = _stft_model(bias, unsqueeze)
    shape = (2, 256) if unsqueeze else (2, 1, 256)
    x = {"audio": np.random.default_rng(4).uniform(-1, 1, shape).astype(np.float32)}
    opts = onyx.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    fast = onyx.InferenceSession(model, opts)
    plain = onyx.InferenceSession(model, disabled_optimizers=["SpectralMagnitudeFusion"])
    want_ops = ["Conv", "SpectralMagnitude"] if bias else ["ConvMagnitude"]
    assert _ops(fast) == (["SignalMagnitude"] if unsqueeze else want_ops)
    got = fast.run(None, x)[0]
    np.testing.assert_array_equal(got, plain.run(None, x)[0])
    for path in (model, str(tmp_path / "opt.onnx")):
        oracle = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, oracle.run(None, x)[0], rtol=1e-5, atol=1e-5)
