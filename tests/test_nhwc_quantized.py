"""Chains of quantized convs kept channels-last (issue 23): optimizer/nhwc.py's
NhwcTransformer and kernels/conv_nhwc.py's QLinearConvNhwc / QLinearConvLookupNhwc.

- the kernels give the NCHW kernel's bytes, transposed, for random convs (implicit GEMM,
  depthwise, the rest through the NCHW kernel), on NHWC input and on an NCHW tensor's
  transposed view (a chain's entry), with the native library and without it;
- a chain model (convs, a depthwise conv, a residual QLinearAdd) rewritten by the pass gives
  the unrewritten model's and onnxruntime's bytes, and saved, its function bodies run in
  onnxruntime to the same bytes;
- groups that would pay more transposes than they save are left as they are.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import conv_nhwc
from onyx.runtime.kernels import quantized_conv as nchw_kernels

PASS = "NhwcTransformer"
RNG = np.random.default_rng(23)
VNNI = native.available() and native.int8_gemm_ok(64)


def _constant(a) -> np.ndarray:
    a = np.array(a)
    a.flags.writeable = False  # (as a session's initializers)
    return a


def _random_conv(rng):
    """(x NCHW, the kernel's inputs after x, its attributes) of a random quantized conv."""
    depthwise = rng.random() < 0.5
    C = int(rng.choice([3, 8, 16, 17, 40]))
    M = C if depthwise else int(rng.choice([4, 16, 33]))
    k, s, d = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2])), int(rng.choice([1, 1, 2]))
    p = int(rng.integers(0, k))
    H, W = (int(rng.integers(d * (k - 1) + 1, 12)) for _ in range(2))
    x_type, y_type = (rng.choice([np.uint8, np.int8]) for _ in range(2))
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max + 1, (int(rng.integers(1, 3)), C, H, W)).astype(x_type)
    group = C if depthwise else 1
    w = _constant(rng.integers(-128, 128, (M, C // group, k, k)).astype(np.int8))
    w_zp = np.zeros(M, np.int8) if rng.random() < 0.7 else rng.integers(-3, 3, M)
    params = [
        _constant(np.float32(0.02)),
        _constant(np.asarray(rng.integers(info.min, info.max), x_type)),
        w,
        _constant((rng.random(M) * 0.01 + 0.001).astype(np.float32)),
        _constant(np.asarray(w_zp, np.int8)),
        _constant(np.float32(0.05 + rng.random())),
        _constant(np.asarray(rng.integers(-5, 5), y_type)),
        _constant(rng.integers(-1000, 1000, M).astype(np.int32)) if rng.random() < 0.7 else None,
    ]
    attrs = dict(dilations=[d, d], group=group, kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
    table = None
    if rng.random() < 0.3:
        table = _constant(rng.integers(0, 256, 256).astype(np.uint8).view(y_type))
    return x, params, table, attrs


def _nchw(x, params, table, attrs):
    """The NCHW kernel's numpy path's result, NHWC."""
    args = (x, params[0], params[1], *params[2:])
    with native.disabled():
        if table is None:
            y = nchw_kernels.qlinear_conv(*args, **attrs)
        else:
            y = nchw_kernels.qlinear_conv_lookup(*args, table, **attrs)
    return y.transpose(0, 2, 3, 1)


@pytest.mark.parametrize("numpy_only", [False, True])
def test_kernels_give_the_nchw_kernels_bytes(numpy_only):
    rng = np.random.default_rng(7)
    for _ in range(60):
        x, params, table, attrs = _random_conv(rng)
        want = _nchw(x, params, table, attrs)
        if table is None:
            kernel, extra = conv_nhwc.qlinear_conv_nhwc, ()
        else:
            kernel, extra = conv_nhwc.qlinear_conv_lookup_nhwc, (table,)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        wide = np.zeros(nhwc.shape[:3] + (2 * nhwc.shape[3],), nhwc.dtype)
        wide[..., ::2] = nhwc  # (strided otherwise: every other byte)
        for x_in in (nhwc, x.transpose(0, 2, 3, 1), wide[..., ::2]):
            for _ in range(2):  # (the second call: the kept runner)
                if numpy_only:
                    with native.disabled():
                        got = kernel(x_in, *params, *extra, **attrs)
                else:
                    got = kernel(x_in, *params, *extra, **attrs)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not native.available(), reason="needs the native library")
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_3x3_rows_match_numpy_on_threads(stride):
    """The 3x3 depthwise kernel's ring of widened rows (stride 1 and 2): images larger than
    the random cases, channels not a whole number of vectors, signed and unsigned bytes,
    work split between threads mid-image, the activation's table."""
    _check_depthwise_3x3_rows([stride] * 2, seed=stride)


@pytest.mark.skipif(not native.available(), reason="needs the native library")
@pytest.mark.parametrize("strides", [[2, 1], [1, 2], [3, 1], [1, 3]])
def test_depthwise_3x3_rows_of_unequal_strides(strides):
    """The ring steps rows by the vertical stride and pixels by the horizontal one."""
    _check_depthwise_3x3_rows(strides, seed=10 * strides[0] + strides[1])


def _check_depthwise_3x3_rows(strides: list, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for x_type, C, pad, table in ((np.uint8, 72, 1, False), (np.int8, 40, 0, True)):
        info = np.iinfo(x_type)
        x = rng.integers(info.min, info.max + 1, (2, C, 23, 19)).astype(x_type)
        w = _constant(rng.integers(-128, 128, (C, 1, 3, 3)).astype(np.int8))
        params = [
            _constant(np.float32(0.02)),
            _constant(np.asarray(3, x_type)),
            w,
            _constant((rng.random(C) * 0.01 + 0.001).astype(np.float32)),
            _constant(np.zeros(C, np.int8)),
            _constant(np.float32(0.3)),
            _constant(np.asarray(-2 if x_type == np.int8 else 7, x_type)),
            _constant(rng.integers(-1000, 1000, C).astype(np.int32)),
        ]
        lookup = _constant(rng.integers(0, 256, 256).astype(np.uint8).view(x_type))
        attrs = dict(group=C, kernel_shape=[3, 3], pads=[pad] * 4, strides=strides)
        want = _nchw(x, params, lookup if table else None, attrs)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        for n in (1, 2, 3):
            with native.threads(n):
                if table:
                    got = conv_nhwc.qlinear_conv_lookup_nhwc(nhwc, *params, lookup, **attrs)
                else:
                    got = conv_nhwc.qlinear_conv_nhwc(nhwc, *params, **attrs)
            np.testing.assert_array_equal(got, want)


def test_contiguous_bytes_of_transposed_views():
    x = RNG.integers(0, 255, (2, 5, 6, 7)).astype(np.uint8)
    for view in (x.transpose(0, 2, 3, 1), x.transpose(0, 3, 1, 2), x[:, ::2]):
        got = native.contiguous_bytes(view)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, view)


# ------------------------------------------------------------------------------ the pass


def _q_conv(name, x, w, b, x_q, y_q, **attrs):
    inputs = [x, *x_q, f"{name}_w", f"{name}_ws", f"{name}_wz", *y_q, f"{name}_b"]
    return helper.make_node("QLinearConv", inputs, [name], name=name, **attrs)


def _chain_model(C: int = 8, H: int = 10) -> onnx.ModelProto:
    """x (uint8 NCHW) -> 1x1 conv -> 3x3 depthwise -> 1x1 conv -> + x -> 3x3 stride-2 conv ->
    four 1x1 convs (eight convs: the group pays two crossings, x in and the output out)."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    scales = {"x": 0.03, "a": 0.05, "b": 0.04, "c": 0.06, "s": 0.07, "y": 0.08}
    scales.update({f"u{i}": 0.08 + 0.01 * i for i in range(4)})
    for n, s in scales.items():
        inits += [numpy_helper.from_array(np.array(s, np.float32), f"{n}_s"),
                  numpy_helper.from_array(np.array(rng.integers(0, 30), np.uint8), f"{n}_z")]  # fmt: skip
    q = {n: (f"{n}_s", f"{n}_z") for n in scales}
    convs = [("a", "x", 2 * C, C, 1, {}), ("b", "a", 2 * C, 1, 3, {"pads": [1] * 4, "group": 2 * C}),
             ("c", "b", C, 2 * C, 1, {}), ("y", "s", 12, C, 3, {"pads": [1] * 4, "strides": [2, 2]})]  # fmt: skip
    convs += [(f"u{i}", f"u{i - 1}" if i else "y", 12, 12, 1, {}) for i in range(4)]
    for name, src, M, Cg, k, attrs in convs:
        w = rng.integers(-60, 60, (M, Cg, k, k)).astype(np.int8)
        inits += [numpy_helper.from_array(w, f"{name}_w"),
                  numpy_helper.from_array((rng.random(M) * 0.02 + 0.01).astype(np.float32), f"{name}_ws"),
                  numpy_helper.from_array(np.zeros(M, np.int8), f"{name}_wz"),
                  numpy_helper.from_array(rng.integers(-500, 500, M).astype(np.int32), f"{name}_b")]  # fmt: skip
        nodes.append(_q_conv(name, src, w, None, q[src], q[name], **attrs))
        if name == "c":
            add = ["c", *q["c"], "x", *q["x"], *q["s"]]
            nodes.append(helper.make_node("QLinearAdd", add, ["s"], domain="com.microsoft"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", C, H, H])],
        [helper.make_tensor_value_info("u3", TensorProto.UINT8, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.skipif(not VNNI, reason="the pass runs where the native int8 GEMM does")
def test_chain_keeps_its_bytes(tmp_path):
    path = str(tmp_path / "chain.onnx")
    onnx.save(_chain_model(), path)
    stats: dict = {}
    optimized = onyx.optimize(onyx.load(path), stats=stats)
    ops = [n.op_type for n in optimized.graph]
    assert stats.get(PASS) == 9 and ops.count("QLinearConvNhwc") == 8
    assert ops.count("Transpose") == 2  # (in, out: nothing between the convs)
    plain = onyx.SessionOptions()
    plain.disabled_optimizers = [PASS]
    sessions = [onyx.InferenceSession(path), onyx.InferenceSession(path, plain)]
    saved = str(tmp_path / "optimized.onnx")
    onyx.save(optimized, saved)
    onnx.checker.check_model(onnx.load(saved))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    body = ort.InferenceSession(saved, so, providers=["CPUExecutionProvider"])
    reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        feeds = {"x": RNG.integers(0, 256, (batch, 8, 10, 10)).astype(np.uint8)}
        want = reference.run(None, feeds)[0]
        for got in (*(s.run(None, feeds)[0] for s in sessions), body.run(None, feeds)[0]):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not VNNI, reason="the pass runs where the native int8 GEMM does")
@pytest.mark.parametrize("keep", [1, 2])
def test_groups_not_worth_it_stay(keep):
    """One conv saves nothing; two convs whose outputs are both read outside pay as much."""
    model = _chain_model()
    del model.graph.node[keep:]
    model.graph.output[0].name = model.graph.node[-1].output[0]
    if keep == 2:  # (the first conv's output read outside too)
        model.graph.output.append(helper.make_tensor_value_info("a", TensorProto.UINT8, None))
    stats: dict = {}
    onyx.optimize(onyx.load(model.SerializeToString()), stats=stats)
    assert not stats.get(PASS)


# (x shape NCHW, M, kernel, stride, pad, group is C, x given NHWC) of MobileNet-like layers
# large enough that native.threads(n) splits them: the stem (3 channels packed from the
# chain's NCHW entry, or NHWC), a pointwise conv of 5 GEMM panels, depthwise convs.
SPLIT_LAYERS = [
    ((2, 3, 48, 48), 16, 3, 2, 1, False, False),
    ((1, 3, 64, 62), 16, 3, 2, 1, False, True),
    ((2, 40, 12, 12), 160, 1, 1, 0, False, True),
    ((2, 72, 12, 12), 72, 3, 1, 1, True, True),
    ((1, 192, 6, 6), 192, 3, 1, 1, True, True),
]


@pytest.mark.skipif(not native.available(), reason="needs the native library")
@pytest.mark.parametrize("layer", SPLIT_LAYERS)
def test_layers_split_between_threads_give_one_threads_bytes(layer):
    """Each thread count's own set-up (fresh weights: set-ups are kept per weight) gives the
    1-thread bytes and the numpy kernel's: rows packed, GEMM pixels and depthwise rows split."""
    shape, M, k, s, p, depthwise, nhwc_in = layer
    rng = np.random.default_rng(M + k)
    C = shape[1]
    x = rng.integers(0, 256, shape).astype(np.uint8)
    w = rng.integers(-128, 128, (M, 1 if depthwise else C, k, k)).astype(np.int8)
    params = [
        _constant(np.float32(0.02)),
        _constant(np.asarray(7, np.uint8)),
        None,
        _constant((rng.random(M) * 0.01 + 0.001).astype(np.float32)),
        _constant(np.zeros(M, np.int8)),
        _constant(np.float32(0.3)),
        _constant(np.asarray(3, np.uint8)),
        _constant(rng.integers(-1000, 1000, M).astype(np.int32)),
    ]
    group = C if depthwise else 1
    attrs = dict(group=group, kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
    want = _nchw(x, [*params[:2], _constant(w), *params[3:]], None, attrs)
    x_in = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc_in else x.transpose(0, 2, 3, 1)
    got = {}
    for n in (1, 2, 3):
        params[2] = _constant(w.copy())  # (a new weight: a set-up for this thread count)
        with native.threads(n):
            for _ in range(2):  # (the second call: the kept runner)
                got[n] = conv_nhwc.qlinear_conv_nhwc(x_in, *params, **attrs)
        np.testing.assert_array_equal(got[n], got[1])
    np.testing.assert_array_equal(got[1], want)


@pytest.mark.skipif(not VNNI, reason="the pass runs where the native int8 GEMM does")
@pytest.mark.parametrize("scratch", [False, True])
def test_bound_chain_convs_are_one_native_call(tmp_path, monkeypatch, scratch):
    """A chain's convs (implicit GEMMs, depthwise) bind to their one native call
    (under_setting_contiguous: no runner wrappers), with the unbound kernel's bytes; a
    strided x, another thread setting, take the kernel as written, to the same bytes."""
    from onyx.runtime.plan import BoundCall

    if scratch:  # (every implicit GEMM's buffers then the thread's scratch, as large ones)
        monkeypatch.setattr(nchw_kernels, "LARGE_WORK", 0)
    path = str(tmp_path / "chain.onnx")
    onnx.save(_chain_model(), path)
    sess = onyx.InferenceSession(path)
    feeds = {"x": RNG.integers(0, 256, (2, 8, 10, 10)).astype(np.uint8)}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], want)
    calls = [
        (step, call)
        for step in sess.plan.steps
        if step.node.op_type == "QLinearConvNhwc" and step.fn.__class__ is BoundCall
        for call in step.fn.calls.values()
        if call is not None
    ]
    flat = [(s, c) for s, c in calls if "under_setting_contiguous" in c.__qualname__]
    assert len(flat) == len(calls) == 8  # (the implicit GEMMs and the depthwise conv)
    for step, call in flat:
        shape = next(iter(step.fn.calls))[0]
        x_in = RNG.integers(0, 256, shape).astype(np.uint8)
        rest = [sess.plan.template[i] for i in step.ins[1:]]
        want = conv_nhwc.qlinear_conv_nhwc(x_in, *rest, **step.fn.attrs)
        np.testing.assert_array_equal(call(x_in, *rest), want)
        xs = np.zeros(shape[:3] + (2 * shape[3],), np.uint8)
        xs[..., ::2] = x_in
        np.testing.assert_array_equal(call(xs[..., ::2], *rest), want)
        with native.threads(1 if native.thread_setting() != 1 else 2):
            np.testing.assert_array_equal(call(x_in, *rest), want)
