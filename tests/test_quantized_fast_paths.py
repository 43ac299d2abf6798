"""The quantized models' fast paths (issue 27's speed target): each must give the bits of the
path it short-cuts.

- QLinearConvLookupFusion (onyx/optimizer/qdq.py): a QLinearConv and the ai.onyx TableLookup
  of its activation become one ai.onyx QLinearConvLookup; the model's outputs keep every bit,
  and the saved model (the op's function body) runs in onnxruntime to the same results.
- Kernels that keep a node's set-up for its constants (QLinearConv, QGemm, QLinearAdd/Mul,
  QLinearConcat, QuantizeLinear, DequantizeLinear, DynamicQuantizeMatMul): called again with
  the same constant objects, or with other constants of the same shapes, each result is the
  numpy kernel's (the native library off).
- MaxPool of bytes whose windows tile the image; reflect / edge Pad by slices.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onyx
from onyx.runtime import native
from onyx.runtime.registry import ONYX_DOMAIN, lookup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.zoo import zoo_models  # noqa: E402

PASS = "QLinearConvLookupFusion"
QDQ = {m.name: m for m in zoo_models() if m.quantization == "qdq"}
RNG = np.random.default_rng(27)


def _constant(a) -> np.ndarray:
    a = np.array(a)
    a.flags.writeable = False  # (as a session's initializers)
    return a


# ------------------------------------------------------------------------------- the fusion


def test_conv_lookup_fusion_keeps_every_bit(tmp_path):
    model = QDQ["mobilenet_quant_qdq"]  # (its hard-swishes: tables after convs)
    stats: dict = {}
    optimized = onyx.optimize(onyx.load(str(model.path)), stats=stats)
    assert stats.get(PASS, 0) > 0
    assert any(n.op_type.startswith("QLinearConvLookup") for n in optimized.graph)  # (+Nhwc)
    unfused = onyx.SessionOptions()
    unfused.disabled_optimizers = [PASS]
    sessions = [onyx.InferenceSession(str(model.path)),
                onyx.InferenceSession(str(model.path), unfused)]  # fmt: skip
    path = str(tmp_path / "optimized.onnx")
    onyx.save(optimized, path)
    onnx.checker.check_model(onnx.load(path))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    in_ort = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for batch in (1, 2):
        feeds = model.feeds(batch=batch, seed=batch)
        fused, plain = (s.run(None, feeds) for s in sessions)
        for f, p in zip(fused, plain):
            assert f.dtype == p.dtype and np.array_equal(f, p)
        for f, o in zip(onyx.InferenceSession(optimized).run(None, feeds),
                        in_ort.run(None, feeds)):  # fmt: skip
            np.testing.assert_array_equal(f, o)


def test_conv_lookup_needs_a_table_of_the_output_type():
    kernel = lookup("QLinearConvLookup", ONYX_DOMAIN, 1).fn
    x = RNG.integers(0, 255, (1, 2, 4, 4)).astype(np.uint8)
    w = _constant(RNG.integers(-100, 100, (3, 2, 1, 1)).astype(np.int8))
    s, z = _constant(np.float32(0.1)), _constant(np.uint8(3))
    params = (s, z, w, s, _constant(np.int8(0)), s, z, None)
    with pytest.raises(ValueError, match="256 bytes"):
        kernel(x, *params[:2], *params[2:], _constant(np.zeros(256, np.float32)))


# ------------------------------------------------------------------------- kept set-ups


def _both(fn, *args, **kw):
    """(fn's result with the native library, twice, and without it)."""
    first, again = fn(*args, **kw), fn(*args, **kw)
    fresh = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
    with native.disabled():
        want = fn(*fresh, **kw)
    return first, again, want


def _same(results) -> None:
    first, again, want = (np.asarray(r) for r in results)
    assert first.dtype == want.dtype and first.shape == want.shape
    np.testing.assert_array_equal(first, want)
    np.testing.assert_array_equal(again, want)


def _q(dtype, lo=0.01, hi=0.1):
    info = np.iinfo(dtype)
    return (_constant(np.float32(RNG.uniform(lo, hi))),
            _constant(np.asarray(RNG.integers(info.min, info.max + 1), dtype)))  # fmt: skip


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_binary_kept_per_constants(op, dtype):
    kernel = lookup(op, "com.microsoft", 1).fn
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max + 1, (2, 8, 5, 5)).astype(dtype)
    b = RNG.integers(info.min, info.max + 1, (1, 8, 1, 1)).astype(dtype)
    for _ in range(2):  # (other constants, the same shapes: a new set-up, not the kept one)
        params = [*_q(dtype), *_q(dtype), *_q(dtype)]
        _same(_both(kernel, a, *params[:2], b, *params[2:]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantize_and_dequantize_kept_per_constants(dtype):
    q13, dq13 = lookup("QuantizeLinear", "", 13).fn, lookup("DequantizeLinear", "", 13).fn
    x = (RNG.standard_normal((1, 3, 7, 9)) * 4).astype(np.float32)
    for _ in range(2):
        scale, zero_point = _q(dtype)
        _same(_both(q13, x, scale, zero_point))
        b = q13(x, scale, zero_point)
        _same(_both(dq13, b, scale, zero_point))


def test_concat_requantization_tables():
    kernel = lookup("QLinearConcat", "com.microsoft", 1).fn
    for dtype in (np.uint8, np.int8):
        info = np.iinfo(dtype)
        parts = [RNG.integers(info.min, info.max + 1, (1, c, 3, 3)).astype(dtype) for c in (2, 5)]
        y = _q(dtype)
        inputs = [parts[0], *_q(dtype), parts[1], *y]  # (the second at Y's scale: copied)
        _same(_both(kernel, *y, *inputs, axis=1))


@pytest.mark.parametrize("float_out", [False, True])
def test_qgemm_kept_per_weight(float_out):
    kernel = lookup("QGemm", "com.microsoft", 1).fn
    a = RNG.integers(0, 256, (3, 40)).astype(np.uint8)
    for trans_b in (0, 1):
        b = _constant(RNG.integers(-128, 128, (24, 40) if trans_b else (40, 24)).astype(np.int8))
        bias = _constant(RNG.integers(-999, 999, 24).astype(np.int32))
        scale = _constant(RNG.uniform(0.001, 0.01, 24).astype(np.float32))
        out = [] if float_out else list(_q(np.uint8, 0.1, 0.3))
        args = (a, *_q(np.uint8), b, scale, _constant(np.zeros(24, np.int8)), bias, *out)
        _same(_both(kernel, *args, transB=trans_b, alpha=0.5))


def test_qlinear_conv_kept_per_constants():
    kernel = lookup("QLinearConv", "", 10).fn
    x = RNG.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    w = _constant(RNG.integers(-128, 128, (5, 4, 3, 3)).astype(np.int8))
    w_scale, w_zp = _constant(np.float32(0.01)), _constant(np.int8(0))
    first = _q(np.uint8)
    for pads in ([1, 1, 1, 1], [0, 0, 0, 0]):  # (other attributes, the same weight)
        y = _q(np.uint8, 0.2, 0.5)
        _same(_both(kernel, x, *first, w, w_scale, w_zp, *y, pads=pads, kernel_shape=[3, 3]))


def test_dynamic_matmul_kept_per_weight():
    kernel = lookup("DynamicQuantizeMatMul", "com.microsoft", 1).fn
    a = RNG.standard_normal((2, 7, 33)).astype(np.float32)
    b = _constant(RNG.integers(-128, 128, (33, 20)).astype(np.int8))
    for _ in range(2):
        scale = _constant(RNG.uniform(0.001, 0.01, 20).astype(np.float32))
        bias = _constant(RNG.standard_normal(20).astype(np.float32))
        _same(_both(kernel, a, b, scale, _constant(np.zeros(20, np.int8)), bias))


# ----------------------------------------------------------------------- MaxPool, Pad


@pytest.mark.parametrize("kernel_shape", [[2, 2], [3, 3], [2, 1]])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_tiled_max_pool_of_bytes(kernel_shape, dtype):
    kernel = lookup("MaxPool", "", 12).fn
    ctx = SimpleNamespace(n_outputs=1, outputs_wanted=(True,))
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (2, 3, 6, 6)).astype(dtype)
    attrs = {"kernel_shape": kernel_shape, "strides": kernel_shape, "pads": [0, 0, 0, 0]}
    got = kernel(ctx, x, **attrs)
    want = kernel(ctx, x.astype(np.float32), **attrs)  # (the general windowed path)
    np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_by_slices_is_np_pad(mode):
    kernel = lookup("Pad", "", 18).fn
    for _ in range(200):
        rank = int(RNG.integers(1, 5))
        x = RNG.standard_normal(tuple(RNG.integers(1, 6, rank))).astype(np.float32)
        pads = RNG.integers(0, 6, 2 * rank)
        widths = list(zip(pads[:rank].tolist(), pads[rank:].tolist()))
        try:
            want = np.pad(x, widths, mode=mode)
        except ValueError:  # (reflecting a one-element axis)
            continue
        np.testing.assert_array_equal(kernel(x, pads.astype(np.int64), mode=mode), want)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("weights", [np.int8, np.uint8])
def test_dynamic_quantize_lstm_native_products(direction, weights):
    """The recurrence's products on native.DynamicMatMul: the numpy kernel's bits."""
    kernel = lookup("DynamicQuantizeLSTM", "com.microsoft", 1).fn
    dirs, hidden, steps, batch, size = 1 + (direction == "bidirectional"), 6, 5, 3, 7
    info = np.iinfo(weights)
    w = _constant(RNG.integers(info.min, info.max + 1, (dirs, size, 4 * hidden)).astype(weights))
    r = _constant(RNG.integers(info.min, info.max + 1, (dirs, hidden, 4 * hidden)).astype(weights))
    x = RNG.standard_normal((steps, batch, size)).astype(np.float32)
    scales = [_constant(RNG.uniform(0.001, 0.01, (dirs, 4 * hidden)).astype(np.float32))
              for _ in range(2)]  # fmt: skip
    zero_points = [_constant(RNG.integers(0, 3, (dirs, 4 * hidden)).astype(weights))
                   for _ in range(2)]  # fmt: skip
    args = (x, w, r, None, None, None, None, None, scales[0], zero_points[0], scales[1],
            zero_points[1])  # fmt: skip
    results = _both(kernel, *args, direction=direction, hidden_size=hidden)
    for got, again, want in zip(*results):
        _same((got, again, want))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_global_average_pool_kept_per_constants(dtype):
    kernel = lookup("QLinearGlobalAveragePool", "com.microsoft", 1).fn
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (2, 5, 4, 3)).astype(dtype)
    for _ in range(2):
        _same(_both(kernel, x, *_q(dtype), *_q(dtype)))


@pytest.mark.skipif(not native.available(), reason="needs the native library")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(2, 6, 6, 64), (3, 4, 5, 300), (1, 1, 1, 7), (2, 9, 1, 1)])
def test_global_average_pool_of_channels_last_bytes(monkeypatch, dtype, shape):
    """An NCHW X that is a channels-last tensor's transposed view (a quantized NHWC chain's
    end), and a channels_last X, are pooled by columns in place (rows.c's qmean_columns: no
    transposed copy), to the bytes of the numpy path; columns past a chunk of 256, a single
    pixel. Both layouts of one shape and constants keep their own multipliers."""
    kernel = lookup("QLinearGlobalAveragePool", "com.microsoft", 1).fn
    calls = []
    columns = native.qmean_columns
    monkeypatch.setattr(native, "qmean_columns", lambda *a: calls.append(1) or columns(*a))
    info = np.iinfo(dtype)
    nhwc = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    params = (*_q(dtype), *_q(dtype))
    for _ in range(2):  # (the second: the multiplier kept per constants and layout)
        _same(_both(kernel, nhwc.transpose(0, 3, 1, 2), *params))
        _same(_both(kernel, nhwc, *params, channels_last=1))
        square = nhwc.reshape(shape[0], shape[1] * shape[2], shape[3], 1)  # (as NCHW: rows)
        _same(_both(kernel, square, *params))
    assert len(calls) >= 8


@pytest.mark.parametrize(
    "kernel, stride, pads, dilation",
    [(5, 1, [2, 2], 1), (5, 2, [2, 2], 1), (400, 160, [0, 0], 1), (3, 1, [0, 1], 2)],
)
def test_one_dimensional_qlinear_conv_runs_as_a_one_row_image(
    monkeypatch, kernel, stride, pads, dilation
):
    """A 1-D QLinearConv takes the 2-D conv's native paths on a one-row image (an audio
    model's int8 front-end ran at half its float speed on the column-packing path): the bits
    stay onnxruntime's."""
    from onyx.runtime.kernels import quantized_conv as conv_kernels

    lifted = []
    real = conv_kernels._one_row_result  # noqa: SLF001  (the dispatch under test)
    monkeypatch.setattr(conv_kernels, "_one_row_result", lambda y: lifted.append(1) or real(y))
    rng = np.random.default_rng(kernel + stride)
    C, M, L = 8, 16, 1600
    x = rng.integers(0, 256, (2, C, L), dtype=np.uint8)
    w = rng.integers(-127, 128, (M, C, kernel), dtype=np.int8)
    h = onnx.helper
    inits = [
        onnx.numpy_helper.from_array(a, n)
        for a, n in [
            (np.float32(0.02), "xs"), (np.uint8(128), "xz"), (w, "w"),
            (rng.uniform(0.001, 0.01, M).astype(np.float32), "ws"), (np.zeros(M, np.int8), "wz"),
            (np.float32(0.5), "ys"), (np.uint8(100), "yz"),
        ]
    ]  # fmt: skip
    node = h.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
        kernel_shape=[kernel], strides=[stride], pads=pads, dilations=[dilation],
    )  # fmt: skip
    graph = h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)],
        [h.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)], inits,
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    ours = onyx.InferenceSession(model).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, theirs)
    assert lifted or not native.int8_gemm_ok(C * kernel)  # (the int8 GEMM wants VNNI)


@pytest.mark.parametrize("group", [1, 3])
def test_one_dimensional_conv_lookup_applies_its_table_once(group):
    """A 1-D QLinearConvLookup whose lifted 2-D runner applies the table in its native call
    must not apply it again (a depthwise case of the native differential test found it)."""
    kernel = lookup("QLinearConvLookup", ONYX_DOMAIN, 1).fn
    rng = np.random.default_rng(1486)
    x = rng.integers(0, 256, (3, 3, 12)).astype(np.uint8)
    w = _constant(rng.integers(0, 256, (3, 3 // group, 4)).astype(np.uint8))
    params = (
        _constant(np.float32(0.035)), _constant(np.uint8(156)), w,
        _constant(np.array([0.0026, 0.0148, 0.0051], np.float32)),
        _constant(np.array([64, 86, 203], np.uint8)),
        _constant(np.float32(0.46)), _constant(np.uint8(73)),
        _constant(np.array([555, 2475, -1137], np.int32)),
        _constant(rng.permutation(256).astype(np.uint8)),
    )  # fmt: skip
    attrs = dict(kernel_shape=[4], strides=[1], dilations=[3], pads=[3, 0], group=group)
    _same(_both(kernel, x, *params, **attrs))
