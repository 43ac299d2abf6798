"""Native code fails closed (issue 21, item 2): sizes from a fuzzed model (dilations near
2**32, kernels near 2**63) are refused with an onyx error, by the kernels' Python checks and,
for any caller that skips them, by the C entry points (checks.h), never a crash or a hang.
The model cases run in a subprocess with a timeout: a crash or a hang fails the test instead
of the test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.kernels import pool as pool_kernels

needs_native = pytest.mark.skipif(not native.available(), reason="native library not loaded")

#: (op, x shape, attributes, weight shape): each once crashed (SIGSEGV) or hung.
MODEL_CASES = {
    "maxpool_dilations": ("MaxPool", [1, 1, 5, 5],
                          dict(kernel_shape=[2, 2], dilations=[2**32 - 5] * 2,
                               auto_pad="SAME_UPPER"), None),
    "avgpool_dilations": ("AveragePool", [1, 1, 5, 5],
                          dict(kernel_shape=[2, 2], dilations=[2**32 - 5] * 2,
                               auto_pad="SAME_UPPER"), None),
    "conv_dilations": ("Conv", [1, 1, 5, 5],
                       dict(dilations=[2**31 - 16] * 2, auto_pad="SAME_UPPER"), [8, 1, 2, 2]),
    "avgpool_kernel": ("AveragePool", [1, 1, 5, 5], dict(kernel_shape=[2, 2**63 - 1]), None),
    "avgpool_kernel_same": ("AveragePool", [1, 1, 5, 5],
                            dict(kernel_shape=[2, 2**63 - 1], auto_pad="SAME_UPPER"), None),
    "maxpool3d_kernel": ("MaxPool", [1, 1, 5, 5, 5], dict(kernel_shape=[2**63 - 1, 5, 5]), None),
    "maxpool_zero_stride": ("MaxPool", [1, 1, 5, 5], dict(kernel_shape=[2, 2], strides=[0, 1]),
                            None),
    "conv_window_past_input": ("Conv", [1, 2, 5, 5], dict(), [8, 2, 7, 7]),
    "conv_padded_plane": ("Conv", [1, 1, 5, 5],
                          dict(dilations=[2**29] * 2, auto_pad="SAME_UPPER"), [8, 1, 2, 2]),
}  # fmt: skip

_SCRIPT = """
import json, sys
import numpy as np
import onyx
from onnx import TensorProto, helper, numpy_helper

cases = json.loads(sys.argv[1])
for name, (op, x_shape, attrs, w_shape) in cases.items():
    inits, inputs = [], ["x"]
    if w_shape:
        inits, inputs = [numpy_helper.from_array(np.ones(w_shape, np.float32), "w")], ["x", "w"]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    try:
        session = onyx.InferenceSession(model.SerializeToString())
        session.run(None, {"x": np.ones(x_shape, np.float32)})
        outcome = ["ran", ""]
    except onyx.OnyxError as e:
        outcome = [type(e).__name__, str(e)]
    except Exception as e:
        outcome = ["raw " + type(e).__name__, str(e)]
    print(json.dumps([name, *outcome]), flush=True)
"""


@pytest.mark.parametrize("native_on", ["1", "0"])
def test_absurd_window_sizes_are_refused_with_an_onyx_error(native_on):
    env = {"ONYX_NATIVE": native_on, "PATH": "", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(MODEL_CASES)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    results = {name: (kind, message) for name, kind, message in map(json.loads,
               done.stdout.splitlines())}  # fmt: skip
    assert set(results) == set(MODEL_CASES)
    for name, (kind, message) in results.items():
        op = MODEL_CASES[name][0]
        if kind == "ValidationError":  # validation refuses the sizes before any kernel runs
            assert f"({op})" in message and "attribute-value" in message, (name, message)
            continue
        assert kind == "RuntimeFailure", (name, kind, message)
        assert f"{op} node" in message and f"{op}: " in message, (name, message)


@needs_native
@pytest.mark.parametrize("dilation", [2**32 - 5, 2**62, 2**30 + 1])
def test_native_pooling_refuses_absurd_geometry_itself(dilation):
    """The C entry point's own check (checks.h), reached without the kernel's."""
    x = np.ones((1, 1, 5, 5), np.float32)
    begin = dilation // 2
    with pytest.raises(InvalidArgument, match="pooling"):
        native.pool2d_f32(x, [2, 2], [1, 1], [dilation] * 2, [begin, begin, begin, begin],
                          [5, 5], average=True)  # fmt: skip


@needs_native
def test_native_pooling_refuses_sizes_ctypes_would_wrap():
    x = np.ones((1, 1, 5, 5), np.float32)
    with pytest.raises(InvalidArgument, match="out of the range"):
        native.pool2d_f32(x, [2, 2], [1, 1], [2**64 + 1] * 2, [0] * 4, [4, 4], average=False)


@needs_native
def test_native_small_conv_refuses_absurd_dilations():
    if not native.library().conv_small:
        pytest.skip("no AVX-512 small conv")
    x = np.ones((1, 1, 5, 5), np.float32)
    w = np.ones((8, 1, 2, 2), np.float32)
    d = 2**31 - 16
    with pytest.raises(InvalidArgument, match="conv"):
        native.conv_small_f32(x, w, None, [5, 5], [1, 1], [d, d], [d // 2, d // 2])


@needs_native
def test_native_depthwise_refuses_a_zero_stride():
    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((4, 1, 3, 3), np.float32)
    with pytest.raises(InvalidArgument, match="conv"):
        native.depthwise_f32(x, w, None, [3, 3], [0, 1], [1, 1], [0, 0])


@needs_native
def test_native_float_conv_refuses_absurd_dilations():
    if not native.conv_f32_ok():
        pytest.skip("no native float conv")
    w = np.ones((16, 4, 3, 3), np.float32)
    packed = native.pack_conv_f32(w, 1)
    d = 2**31
    with pytest.raises(InvalidArgument, match="float conv"):
        conv = native.FloatConv((1, 4, 5, 5), packed, 16, (3, 3), (5, 5), (1, 1), (d, d),
                                (d, d))  # fmt: skip
        conv(np.ones((1, 4, 5, 5), np.float32))


def test_numpy_max_pool_loops_over_the_offsets_that_read_the_input():
    """_window_max (the numpy path, 3-D pools) once looped over every kernel offset: a kernel
    of 2**62 cells padded as large hung. Now its passes are bounded by input and output."""
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
    start = time.perf_counter()
    y = pool_kernels._window_max(x, [2**62, 2**62], [3], [2**62], [1], [1])
    assert time.perf_counter() - start < 5
    assert y.shape == (1, 1, 3)
    np.testing.assert_array_equal(y.reshape(-1), [-np.inf, 0, 1])  # windows [t - 2**62, t - 1]


@needs_native
def test_the_pool_refuses_cuts_that_run_backwards():
    """onyx_parallel checks every job's cuts before any kernel part runs (pool.c)."""
    from onyx.runtime.native import _core, window

    task = window._Pool2d()
    for cuts in ([3, 1], [-1, 2], [0, 2, 1]):
        with pytest.raises(InvalidArgument, match="pooling"):
            _core._run(native.library().pool2d_f32_range, task, cuts, 1, "pooling")


@needs_native
def test_native_pad_copy_refuses_sizes_past_its_buffer():
    """conv_f32.c's copy of a wide conv's input into its zero-bordered buffer checks its sizes
    (a status, nothing written) before it copies a row."""
    lib = native.library()
    x = np.ones((2, 3, 4), np.float32)
    dst = np.zeros((2, 5, 6), np.float32)
    args = (x.ctypes.data, 2, 3, 4, dst.ctypes.data)
    assert lib.onyx_pad_planes_f32(*args, 5, 6, 1, 1) == 0
    assert dst[:, 1:4, 1:5].sum() == 24 and dst.sum() == 24
    for hp, wp, top, left in [(5, 6, 6, 0), (5, 6, 0, 7), (2**40, 6, 0, 0), (5, 6, -1, 0)]:
        assert lib.onyx_pad_planes_f32(*args, hp, wp, top, left) == 2  # (ONYX_INVALID)
    assert dst.sum() == 24


# -- the long run of 2026-11-26 on the channels-last and conv chain code (issue 21) ----------
def _cnn_cases():
    """tests/fuzz/cnn_cases.py (its guarded buffers and conv_f32 task)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz"))
    import cnn_cases

    return cnn_cases


def _guarded(n: int, fill: float = 0.0):
    return _cnn_cases()._Guarded(n, fill)


def _float_conv_task():
    return _cnn_cases()._conv_f32_task()


@needs_native
@pytest.mark.parametrize("begin, end", [(0, 2**31), (0, 10**6), (5, 2), (2**62, 2**62 + 1)])
def test_native_float_conv_refuses_parts_past_its_work(begin, end):
    """onyx_conv_f32_range ran [begin, end) as given: an end past the task's parts (groups x
    chunks of strips x blocks of panels) wrote output tiles past y. Now refused, nothing
    written."""
    import ctypes

    if not native.conv_f32_ok():
        pytest.skip("no native float conv")
    t, needed = _float_conv_task()
    x, y = _guarded(t.N * t.C * t.H * t.W, 1.0), _guarded(t.N * t.M * t.OH * t.OW)
    cols = _guarded(needed)
    t.x, t.y, t.cols, t.ncols = x.address, y.address, cols.address, needed
    fn = native.library().onyx_conv_f32_range
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    assert fn(ctypes.addressof(t), begin, end) == 2  # (ONYX_INVALID)
    assert x.intact() and y.intact() and cols.intact()
    assert not y.view.any()


@needs_native
@pytest.mark.parametrize("short", [1, 2, 100])
def test_native_float_conv_refuses_a_short_columns_buffer(short):
    """The packed columns (group x strips x K x NR floats) were written to cols unchecked: the
    task now says how many floats cols holds (ncols), and both entries refuse fewer."""
    import ctypes

    if not native.conv_f32_ok():
        pytest.skip("no native float conv")
    t, needed = _float_conv_task()
    jobs = t.group * -(-(t.C // t.group * t.kh * t.kw) // t.kc) * t.strips
    lib = native.library()
    for name in ("onyx_conv_f32_pack_range", "onyx_conv_f32_range"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        x, y = _guarded(t.N * t.C * t.H * t.W, 1.0), _guarded(t.N * t.M * t.OH * t.OW)
        cols = _guarded(needed - short)
        t.x, t.y, t.cols, t.ncols = x.address, y.address, cols.address, needed - short
        assert fn(ctypes.addressof(t), 0, 1 if "pack" not in name else jobs) == 2
        assert x.intact() and y.intact() and cols.intact()
    cols = _guarded(needed)
    t.cols, t.ncols = cols.address, needed
    assert lib.onyx_conv_f32_pack_range(ctypes.addressof(t), 0, jobs) == 0
    assert cols.intact() and cols.view.any()


@needs_native
def test_native_float_conv_still_runs_with_packed_columns():
    """A conv whose columns are packed beforehand (FloatConv.cols) passes its buffer's size."""
    from onyx.runtime.native import conv_f32

    rng = np.random.default_rng(0)
    if not native.conv_f32_ok():
        pytest.skip("no native float conv")
    for C, M, side in [(64, 256, 14), (32, 128, 28), (128, 512, 7)]:
        w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
        conv = conv_f32.FloatConv((1, C, side, side), conv_f32.pack_conv_f32(w, 1), M, (3, 3),
                                  (side, side), (1, 1), (1, 1), (1, 1))  # fmt: skip
        x = rng.standard_normal((1, C, side, side)).astype(np.float32)
        from onyx.runtime.kernels.conv import conv as numpy_conv

        want = numpy_conv(x, w, pads=[1, 1, 1, 1])
        np.testing.assert_allclose(conv(x), want, rtol=1e-4, atol=1e-3)


def _nhwc_conv(k: int = 3, C: int = 8, H: int = 6):
    from onyx.runtime.native import nhwc

    w = np.ones((C, 1 if k == 3 else C, k, k), np.float32)
    geo = {"pads": [k // 2] * 4, "strides": [1, 1], "dilations": [1, 1],
           "kernel_shape": [k, k], "out_shape": [H, H]}  # fmt: skip
    conv = nhwc.NhwcConv((1, H, H, C), w, None, geo, (0, 0.0, 0.0))
    conv.set_strides((4 * H * H * C, 4 * H * C, 4 * C, 4))
    return conv


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("past", [1, 31, 2**31, 2**62])
def test_native_nhwc_call_refuses_cuts_past_its_work(k, past):
    """onyx_nhwc_call's parts ran [cuts[i], cuts[i + 1]) unclamped: a last cut past the task's
    rows (or pixels) wrote past y. Now refused, nothing written."""
    from onyx.runtime.native import _core, nhwc

    if not nhwc.available():
        pytest.skip("channels-last kernels: AVX-512")
    conv = _nhwc_conv(k)
    work = 6 if k == 3 else 36  # (rows of a 3x3 layer's task, pixels of a 1x1 layer's)
    end = work + past if past < 2**31 else past
    x, y = _guarded(6 * 6 * 8, 1.0), _guarded(6 * 6 * 8)
    cuts = np.array([0, end], np.int64)
    status = nhwc._CALL[0](conv.task_at, x.address, y.address, None, None, cuts.ctypes.data, 1, 1)
    with pytest.raises(InvalidArgument):
        _core.check(status, "channels-last conv")
    assert x.intact() and y.intact() and not y.view.any()


@pytest.mark.parametrize(
    "x_shape, dtype, transposed",
    [((1, 6, 6, 7), np.float32, False), ((1, 6, 5, 8), np.float32, False),
     ((2, 6, 6, 8), np.float32, False), ((1, 6, 6, 8), np.int8, False),
     ((1, 6, 6, 8), np.float32, True)],
)  # fmt: skip
def test_native_nhwc_conv_call_refuses_an_x_it_was_not_set_up_for(x_shape, dtype, transposed):
    """NhwcConv's calls passed x's address to kernels that read it by the set-up's shape and
    strides: an x of another shape, dtype or layout was read past its end. Now refused."""
    from onyx.runtime.native import nhwc

    if not nhwc.available():
        pytest.skip("channels-last kernels: AVX-512")
    for k in (1, 3):
        conv = _nhwc_conv(k)
        x = np.ones(x_shape, dtype)
        if transposed:
            x = np.ones((1, 8, 6, 6), dtype).transpose(0, 2, 3, 1)
        for call in (conv, conv.plain):
            with pytest.raises(InvalidArgument, match="channels-last conv"):
                call(x)
        with pytest.raises(InvalidArgument, match="channels-last conv"):
            conv(np.ones((1, 6, 6, 8), np.float32), None, np.ones((1, 6, 6, 7), np.float32))
        assert conv.plain(np.ones((1, 6, 6, 8), np.float32)).shape == (1, 6, 6, 8)


@pytest.mark.parametrize(
    "w_shape, geo",
    [
        ((8, 3, 3, 3), {}),  # (group 1 weights for 3 of x's 8 channels)
        ((8, 8, 3, 3), {"out_shape": [9, 6]}),  # (windows past the padded input)
        ((8, 8, 3, 3), {"pads": [1, 1, -1, 1]}),
        ((8, 8, 1, 1), {"pads": [0, 0, 0, 0], "out_shape": [6, 7]}),
    ],
)
def test_native_nhwc_conv_set_up_refuses_sizes_its_kernels_would_overrun(w_shape, geo):
    """NhwcConv is the only guard of the packed weights' and x's sizes (the C side reads them
    by the task's): weights that do not read x's channels, or windows past the padded input,
    are refused at set-up."""
    from onyx.runtime.native import nhwc

    k = w_shape[2]
    full = {"pads": [k // 2] * 4, "strides": [1, 1], "dilations": [1, 1],
            "kernel_shape": [k, k], "out_shape": [6, 6], **geo}  # fmt: skip
    with pytest.raises(InvalidArgument, match="channels-last conv"):
        nhwc.NhwcConv((1, 6, 6, 8), np.ones(w_shape, np.float32), None, full, (0, 0.0, 0.0))


def test_one_pixel_conv_refuses_zero_points_of_the_other_type():
    """ConvIntegerToFloat's one-pixel path (a GEMV of the centered weights) took a zero point
    of the other 8-bit type (an int8 x_zero_point for a uint8 x; the session's checks refuse
    such a model, a kernel called directly does not) by its value: it now declines, and the
    general path (ConvInteger's kernel, then the scale) gives its answer, as for any other x."""
    from onyx.runtime.kernels.conv_to_float import conv_integer_to_float, one_pixel_sums
    from onyx.runtime.kernels.quantized_conv import conv_integer

    x = np.full((1, 4, 1, 1), 200, np.uint8)
    w = np.full((3, 4, 1, 1), -3, np.int8)
    attrs = ("NOTSET", None, 1, None, None, None)
    assert one_pixel_sums(x, w, np.uint8(1), np.int8(0), attrs) is not None
    for xz, wz in [(np.int8(-1), np.int8(0)), (np.uint8(1), np.uint8(255))]:
        assert one_pixel_sums(x, w, xz, wz, attrs) is None
        got = conv_integer_to_float(x, w, xz, wz, np.float32(0.5), None)
        want = conv_integer(x, w, xz, wz).astype(np.float32) * np.float32(0.5)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_one_pixel_conv_of_an_empty_batch_is_empty(x_type):
    """A batch of 0 on the one-pixel path raised numpy's reshape error (wrapped as a
    RuntimeFailure) where onnxruntime returns an empty (0, M, 1, 1) output."""
    from onyx.runtime.kernels.conv_to_float import conv_integer_to_float

    x = np.zeros((0, 17, 1, 1), x_type)
    w = np.ones((4, 17, 1, 1), np.uint8)
    y = conv_integer_to_float(x, w, x_type(0), np.uint8(0), np.float32(0.5), None)
    assert y.shape == (0, 4, 1, 1) and y.dtype == np.float32


@pytest.mark.parametrize("optimized", [True, False])
def test_conv_kernel_shape_that_does_not_match_w_is_refused(optimized):
    """A Conv whose kernel_shape attribute ([2, 1]) differs from W's spatial dims ([1, 1]) ran,
    and the optimized and unoptimized sessions gave different answers (some kernels read W by
    its shape, others by the attribute); onnxruntime refuses the pair. Now every path raises
    (the long run, seed 71, random_cnn/529562386)."""
    from onnx import TensorProto, helper, numpy_helper

    import onyx

    w = numpy_helper.from_array(np.ones((8, 3, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = onyx.SessionOptions()
    if not optimized:
        options.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(onyx.OnyxError, match="kernel_shape"):
        sess = onyx.InferenceSession(model.SerializeToString(), options)
        sess.run(None, {"x": np.ones((1, 3, 4, 4), np.float32)})


def test_kept_chain_scratch_is_not_counted_when_it_cannot_be_allocated(monkeypatch):
    """conv_chain's process-wide count of kept scratch (KEPT_SCRATCH_ALL) takes a set-up's
    bytes back where allocating them fails: a MemoryError leaves the count as it was."""
    from onyx.runtime import conv_chain

    def fail(n):
        raise MemoryError

    before = conv_chain._kept_scratch[0]  # noqa: SLF001
    monkeypatch.setattr(conv_chain, "_aligned_bytes", fail)
    with pytest.raises(MemoryError):
        conv_chain._kept_scratch_of(1 << 10)  # noqa: SLF001
    assert conv_chain._kept_scratch[0] == before  # noqa: SLF001
    monkeypatch.undo()
    kept = conv_chain._kept_scratch_of(1 << 10)  # noqa: SLF001
    assert kept is not None and conv_chain._kept_scratch[0] == before + (1 << 10)  # noqa: SLF001
    del kept
    assert conv_chain._kept_scratch[0] == before  # noqa: SLF001


def _grouped_integer_conv_model(op: str, x_channels: int, group: int) -> bytes:
    """x (uint8 or float32 for the dynamically quantized chain, channels undeclared) -> ``op``
    with weights [4, 1, 3, 3] and ``group``."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(36, dtype=np.uint8).reshape(4, 1, 3, 3)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.1), "s"),
             numpy_helper.from_array(np.uint8(3), "z")]  # fmt: skip
    attrs = {"group": group, "pads": [1, 1, 1, 1]}
    x_type, y_type = TensorProto.UINT8, TensorProto.UINT8
    if op == "QLinearConv":
        nodes = [helper.make_node(op, ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"], **attrs)]
    elif op == "ConvInteger":
        nodes, y_type = (
            [helper.make_node(op, ["x", "w", "z", "z"], ["y"], **attrs)],
            TensorProto.INT32,
        )
    else:  # onnxruntime's dynamic quantization: fused to ConvIntegerScaled
        x_type, y_type = TensorProto.FLOAT, TensorProto.FLOAT
        nodes = [
            helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
            helper.make_node("ConvInteger", ["xq", "w", "xz", "z"], ["acc"], **attrs),
            helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["accf", "xs"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", x_type, ["N", "C", 6, 6])],
        [helper.make_tensor_value_info("y", y_type, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("op", ["QLinearConv", "ConvInteger", "dynamic chain"])
@pytest.mark.parametrize("x_channels, group", [(4, 2), (2, 4), (8, 4)])
def test_integer_depthwise_conv_whose_group_is_not_x_channels_is_refused(op, x_channels, group):
    """Weights [4, 1, 3, 3] (one input channel a group) need x of ``group`` channels. The
    native int8 depthwise set-up checked only W's shape (and that M is a multiple of x's
    channels), so a 4-channel x with group 2, or a 2-channel x with group 4, ran as a
    depthwise conv of x's own channels and returned an output (QLinearConv, ConvInteger, and
    the bound ConvIntegerScaled of a dynamically quantized model): the numpy path and the
    float Conv refuse it, and so does every path now."""
    import onyx

    x = np.full((1, x_channels, 6, 6), 7, np.float32 if op == "dynamic chain" else np.uint8)
    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        options = onyx.SessionOptions()
        options.graph_optimization_level = getattr(onyx.GraphOptimizationLevel, level)
        sess = onyx.InferenceSession(_grouped_integer_conv_model(op, x_channels, group), options)
        with pytest.raises(onyx.OnyxError):
            sess.run(None, {"x": x})
