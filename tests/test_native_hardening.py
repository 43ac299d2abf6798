"""Native code fails closed (issue 21, item 2): sizes from a fuzzed model (dilations near
2**32, kernels near 2**63) are refused with an onyx error, by the kernels' Python checks and,
for any caller that skips them, by the C entry points (checks.h), never a crash or a hang.
The model cases run in a subprocess with a timeout: a crash or a hang fails the test instead
of the test run."""

from __future__ import annotations

import json
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
