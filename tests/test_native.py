"""The optional native kernels (onyx/runtime/native): the int8 GEMM against exact numpy
integer products, the byte transposes, and the quantized ops that use them against
onnxruntime. Skipped where the library is not built or the CPU lacks AVX512-VNNI; the numpy
paths they replace are what every other test runs there (and ONYX_NATIVE=0 runs here)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import conv as conv_kernels
from onyx.runtime.kernels import integer_conv, quantized_conv
from onyx.runtime.kernels.quantize import qlinear_matmul

needs_vnni = pytest.mark.skipif(
    not native.int8_gemm_ok(1), reason="native int8 GEMM not built or no AVX512-VNNI"
)
BYTES = (np.uint8, np.int8)


def _random(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _exact(a, b, za, zb):
    za = np.asarray(za, dtype=np.int64).reshape(-1, 1) if np.ndim(za) else za
    return (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)


@needs_vnni
@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (7, 13, 45), (6, 4, 32), (13, 37, 70), (130, 300, 97)]
)
@pytest.mark.parametrize("a_type", BYTES)
@pytest.mark.parametrize("b_type", BYTES)
def test_int8_gemm_exact(shape, a_type, b_type):
    rng = np.random.default_rng(sum(shape))
    M, K, N = shape
    a, b = _random(rng, a_type, (M, K)), _random(rng, b_type, (K, N))
    zero_points = [
        (0, 0),
        (3, 0),
        (0, 7),
        (rng.integers(0, 100, M), 0),  # per row of A
        (2, rng.integers(0, 100, N)),  # per column of B
    ]
    for za, zb in zero_points:
        got = native.int8_gemm(a, native.pack(b, a.dtype), za, zb)
        np.testing.assert_array_equal(got, _exact(a, b, za, zb), err_msg=f"za={za} zb={zb}")


@needs_vnni
@pytest.mark.parametrize("a_type", BYTES)
@pytest.mark.parametrize("b_type", BYTES)
@pytest.mark.parametrize("b_layout", ["rows", "transposed"])  # K^T: B's columns contiguous
def test_batched_int8_gemm_exact(a_type, b_type, b_layout):
    """Attention's products: a batch of A_i . B_i with B of data, broadcast batch dimensions,
    every zero point combination; the same bits as the exact integer product."""
    rng = np.random.default_rng(3)
    a = _random(rng, a_type, (2, 3, 17, 45))
    b = _random(rng, b_type, (3, 45, 37))
    if b_layout == "transposed":
        b = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)
    for za, zb in [(0, 0), (5, 0), (0, 7), (-3 if a_type == np.int8 else 200, 9)]:
        got = native.batched_int8_gemm(a, b, za, zb)
        want = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
        np.testing.assert_array_equal(got, want, err_msg=f"za={za} zb={zb}")


@needs_vnni
def test_batched_int8_gemm_requantizes_like_one_item_at_a_time():
    rng = np.random.default_rng(4)
    a = _random(rng, np.uint8, (1, 4, 33, 64))
    b = _random(rng, np.uint8, (1, 4, 50, 64)).transpose(0, 1, 3, 2)  # K^T
    scale, yz = np.array(0.0005, np.float32), np.array(90, np.uint8)
    got = native.batched_int8_gemm(a, b, 128, 120, scale, yz)
    for h in range(4):
        one = native.int8_gemm(a[0, h], native.pack(b[0, h], a.dtype, 128), 128, 120,
                               scale=scale, y_zero_point=yz)  # fmt: skip
        np.testing.assert_array_equal(got[0, h], one)


@needs_vnni
def test_int8_gemm_requantizes_like_numpy():
    rng = np.random.default_rng(0)
    a, b = _random(rng, np.uint8, (37, 70)), _random(rng, np.int8, (70, 45))
    bias = rng.integers(-5000, 5000, 37).astype(np.int32)
    scale = rng.uniform(1e-4, 1e-2, (37, 1)).astype(np.float32)
    got = native.int8_gemm(a, native.pack(b, a.dtype), 5, 0, row_bias=bias, scale=scale,
                           y_zero_point=np.array(100, np.uint8))  # fmt: skip
    acc = (_exact(a, b, 5, 0) + bias[:, None]).astype(np.float32) * scale
    want = np.clip(np.rint(acc) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


@needs_vnni
def test_int8_gemm_threads_agree():
    rng = np.random.default_rng(1)
    a, b = _random(rng, np.uint8, (300, 512)), _random(rng, np.int8, (512, 300))
    packed = native.pack(b, a.dtype)
    with native.threads(1):
        one = native.int8_gemm(a, packed, 3, 0)
    with native.threads(2):
        two = native.int8_gemm(a, packed, 3, 0)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, _exact(a, b, 3, 0))


@needs_vnni
def test_int8_gemm_set_up_is_reused_only_for_the_same_parameters():
    """A packed B keeps each call's set-up (corrections, requantization) for the next call
    with the same shape and parameters; any other parameter gets its own."""
    rng = np.random.default_rng(3)
    a, b = _random(rng, np.uint8, (40, 64)), _random(rng, np.int8, (64, 50))
    packed = native.pack(b, a.dtype)
    bias = rng.integers(-500, 500, 50).astype(np.int32)
    for _ in range(2):  # (the second round finds every set-up made)
        for za in (0, 3, 9):
            for col_bias in (None, bias, bias + 1):
                got = native.int8_gemm(a, packed, za, 0, col_bias=col_bias)
                want = _exact(a, b, za, 0) + (0 if col_bias is None else col_bias)
                np.testing.assert_array_equal(got, want, err_msg=f"za={za}")
            for scale, yz in ((0.01, 3), (0.02, 3), (0.01, 4)):
                s = np.array(scale, np.float32)
                got = native.int8_gemm(a, packed, za, 0, scale=s, y_zero_point=np.uint8(yz))
                acc = _exact(a, b, za, 0).astype(np.float32) * s
                np.testing.assert_array_equal(got, np.clip(np.rint(acc) + yz, 0, 255))
        fresh = _random(rng, np.uint8, a.shape)  # another A: nothing of A is kept
        np.testing.assert_array_equal(native.int8_gemm(fresh, packed, 3, 0),
                                      _exact(fresh, b, 3, 0))  # fmt: skip


@needs_vnni
def test_pool_serves_callers_on_several_threads():
    """Sessions run on several Python threads at once: the native pool takes one job at a
    time and a caller that finds it busy runs its job itself; every result stays exact."""
    import threading

    rng = np.random.default_rng(4)
    cases = [(_random(rng, np.uint8, (64 + 8 * i, 96)), _random(rng, np.int8, (96, 80)))
             for i in range(4)]  # fmt: skip
    errors = []

    def work(a, b):
        packed = native.pack(b, a.dtype)
        want = _exact(a, b, 5, 0)
        with native.threads(2):
            for _ in range(30):
                if not np.array_equal(native.int8_gemm(a, packed, 5, 0), want):
                    errors.append(a.shape)

    threads = [threading.Thread(target=work, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@needs_vnni
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_pool_works_in_a_forked_child():
    """A child made by fork() has none of the parent's pool threads: it starts its own."""
    rng = np.random.default_rng(5)
    a, b = _random(rng, np.uint8, (200, 256)), _random(rng, np.int8, (256, 200))
    packed = native.pack(b, a.dtype)
    with native.threads(2):
        want = native.int8_gemm(a, packed, 1, 0)  # the parent's pool is running now
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when its result is right, on its own workers
            right = np.array_equal(native.int8_gemm(a, packed, 1, 0), want)
            os._exit(0 if right and native.library().onyx_pool_threads() >= 1 else 1)
    import time

    deadline = time.monotonic() + 60  # (a child waiting on its parent's threads would hang)
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, 9)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("shape", [(16, 16), (17, 33), (50, 64), (5, 3), (1, 100)])
def test_transpose_bytes(shape):
    a = _random(np.random.default_rng(2), np.uint8, shape)
    out = np.empty(shape[::-1], np.uint8)
    np.testing.assert_array_equal(native.transpose_bytes(a, out), a.T)


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("rows, cols", [(96, 14), (14, 96), (49, 7), (7, 49), (16, 56), (33, 1)])
def test_transpose_bytes_partial_tiles_touch_only_their_bytes(rows, cols):
    """Partial 16 x 16 tiles (a 14 x 14 or 7 x 7 conv's planes; masked loads and stores):
    rows read from a wider source, written into a wider destination whose other bytes stay."""
    rng = np.random.default_rng(rows * 100 + cols)
    src = _random(rng, np.uint8, (rows, cols + 5))[:, :cols]
    wide = np.full((cols, rows + 3), 7, np.uint8)
    native.transpose_bytes(src, wide[:, :rows])
    np.testing.assert_array_equal(wide[:, :rows], src.T)
    assert (wide[:, rows:] == 7).all()


def _ort_run(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _qlinear_conv_model(x_type, w, w_zero_point, bias, attrs):
    from onnx import TensorProto, helper, numpy_helper

    elem = TensorProto.UINT8 if x_type == np.uint8 else TensorProto.INT8
    consts = {
        "xs": np.array(0.05, np.float32),
        "xz": np.array(7, x_type),
        "w": w,
        "ws": np.linspace(0.001, 0.01, w.shape[0]).astype(np.float32),
        "wz": np.full(w.shape[0], w_zero_point, np.int8),
        "ys": np.array(0.3, np.float32),
        "yz": np.array(5, x_type),
        "b": bias,
    }
    node = helper.make_node("QLinearConv", ["x", *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, consts


@needs_vnni
@pytest.mark.parametrize(
    "case",
    [
        # N, C, H, W, M, kernel, stride, dilation, pad, x type, weight zero point
        (1, 3, 20, 17, 8, 3, 1, 1, 1, np.uint8, 0),  # channels padded to 4 (the stem)
        (2, 5, 9, 9, 40, 3, 2, 1, 1, np.uint8, 0),
        (1, 8, 7, 7, 33, 1, 1, 1, 0, np.uint8, 0),
        (1, 16, 12, 12, 16, 3, 1, 2, 2, np.uint8, 0),
        (1, 4, 8, 8, 8, 5, 2, 1, 2, np.int8, 0),
        (1, 6, 10, 10, 8, 3, 1, 1, 1, np.uint8, 3),  # weight zero point: explicit columns
        (2, 8, 10, 10, 8, 1, 2, 1, 0, np.uint8, 0),
    ],
)
def test_qlinear_conv_matches_onnxruntime(case):
    N, C, H, W, M, k, s, d, p, x_type, wz = case
    rng = np.random.default_rng(C * M + k)
    x = _random(rng, x_type, (N, C, H, W))
    w = _random(rng, np.int8, (M, C, k, k))
    w.flags.writeable = False  # a constant, as in a session (packed once)
    bias = rng.integers(-1000, 1000, M).astype(np.int32)
    attrs = {"pads": [p] * 4, "strides": [s, s], "dilations": [d, d]}
    model, c = _qlinear_conv_model(x_type, w, wz, bias, attrs)
    want = _ort_run(model, {"x": x})
    # twice (the second run reuses the set-up), then a strided input (the numpy packing path)
    for feed in (x, x, np.asfortranarray(x)):
        got = quantized_conv.qlinear_conv(feed, c["xs"], c["xz"], w, c["ws"], c["wz"], c["ys"],
                                        c["yz"], bias, **attrs)  # fmt: skip
        np.testing.assert_array_equal(got, want)


@needs_vnni
def test_qlinear_conv_kept_runner_only_for_the_same_constants():
    """A QLinearConv node's native runner is kept per weight and input shape, and used again
    only with the very constant objects it was made for."""
    rng = np.random.default_rng(8)
    x = _random(rng, np.uint8, (1, 8, 6, 6))
    w = _random(rng, np.int8, (16, 8, 3, 3))
    w.flags.writeable = False
    bias = rng.integers(-1000, 1000, 16).astype(np.int32)
    attrs = {"pads": [1, 1, 1, 1]}
    model, c = _qlinear_conv_model(np.uint8, w, 0, bias, attrs)
    for v in c.values():
        v.flags.writeable = False
    want = _ort_run(model, {"x": x})
    args = [c[k] for k in ("xs", "xz", "w", "ws", "wz", "ys")]
    for yz in (c["yz"], c["yz"].copy()):  # the same object, then an equal one
        yz.flags.writeable = False
        got = quantized_conv.qlinear_conv(x, *args, yz, bias, **attrs)
        np.testing.assert_array_equal(got, want)
    other = np.array(90, np.uint8)  # another zero point: not the kept runner's
    other.flags.writeable = False
    shifted = quantized_conv.qlinear_conv(x, *args, other, bias, **attrs)
    inside = (want > 0) & (want < 170)  # (not clamped either way)
    assert inside.sum() > 100
    np.testing.assert_array_equal(shifted[inside], want[inside] + 85)


@needs_vnni
@pytest.mark.parametrize("x_type", BYTES)
def test_conv_integer_implicit_gemm_is_exact(x_type):
    """ConvInteger's int32 sums through the implicit GEMM, against the exact float path."""
    rng = np.random.default_rng(6)
    x = _random(rng, x_type, (2, 5, 11, 9))
    w = _random(rng, np.int8, (12, 5, 3, 3))
    w.flags.writeable = False
    xz = np.array(9, x_type)
    attrs = {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}
    got = quantized_conv.conv_integer(x, w, xz, **attrs)
    want, _ = quantized_conv._integer_conv(x, w, xz, None, group=1, auto_pad="NOTSET",
                                         kernel_shape=None, **attrs)  # fmt: skip
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int64))


@needs_vnni
def test_conv_integer_result_outlives_the_next_call():
    """One output channel: the transposed result is contiguous as it is, and must still be
    a copy of the per-thread work buffer, which the next conv overwrites."""
    rng = np.random.default_rng(8)
    x = _random(rng, np.uint8, (1, 3, 6, 5))
    w = _random(rng, np.uint8, (1, 3, 3, 3))
    w.flags.writeable = False
    xz, wz = np.array(7, np.uint8), np.array(200, np.uint8)
    first = quantized_conv.conv_integer(x, w, xz, wz, pads=[1, 1, 1, 1])
    kept = first.copy()
    quantized_conv.conv_integer(x[:, :, ::-1].copy(), w, xz, wz, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, conv_kernels.scratch((1,), np.uint8))


@needs_vnni
@pytest.mark.parametrize("x_type", BYTES)
@pytest.mark.parametrize("w_type", BYTES)
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]},
        {"pads": [3, 3, 3, 3], "strides": [2, 2], "kernel_shape": [7, 7]},
        {"kernel_shape": [1, 1]},
    ],
)
def test_conv_integer_with_any_weight_zero_point_is_exact(x_type, w_type, per_channel, attrs):
    """ConvInteger of weights with nonzero zero points (dynamic quantization's uint8 weights,
    (w - w_zp) outside int8) through the implicit GEMM and its window-sum term, to the int32
    of the exact path, run twice (the kept set-up)."""
    rng = np.random.default_rng(7)
    kernel = attrs.get("kernel_shape", [3, 3])
    x = _random(rng, x_type, (2, 5, 13, 9))
    w = _random(rng, w_type, (12, 5, *kernel))
    w.flags.writeable = False
    xz = np.array(200 if x_type == np.uint8 else -7, x_type)
    wz = _random(rng, w_type, (12,) if per_channel else ())
    taken = []
    split = integer_conv.window_sums  # (conv.py imports it at the call: integer convs only)

    def spy(*args, **kwargs):  # (the native row sums of the padded copy, and numpy's sums)
        sums = split(*args, **kwargs)
        np.testing.assert_array_equal(sums, split(*args))
        taken.append(1)
        return sums

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(integer_conv, "window_sums", spy)
        got = [quantized_conv.conv_integer(x, w, xz, wz, **attrs) for _ in range(2)]
    full = {"kernel_shape": None, "pads": None, "strides": None, "dilations": None, **attrs}
    want, _ = quantized_conv._integer_conv(x, w, xz, wz, group=1, auto_pad="NOTSET", **full)
    assert taken and got[0].dtype == np.int32
    for y in got:
        np.testing.assert_array_equal(y, want.astype(np.int64))


@needs_vnni
@pytest.mark.parametrize(
    "a_shape, b_shape, b_type",
    [((1, 128, 64), (64, 96), np.int8), ((2, 3, 20, 16), (2, 3, 16, 24), np.uint8)],
)
def test_qlinear_matmul_matches_onnxruntime(a_shape, b_shape, b_type):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    a, b = _random(rng, np.uint8, a_shape), _random(rng, b_type, b_shape)
    consts = {
        "as": np.array(0.02, np.float32),
        "az": np.array(9, np.uint8),
        "bs": np.array(0.01, np.float32),
        "bz": np.array(0 if b_type == np.int8 else 128, b_type),
        "ys": np.array(0.5, np.float32),
        "yz": np.array(120, np.uint8),
    }
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    node = helper.make_node("QLinearMatMul", names, ["y"])
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, None),
            helper.make_tensor_value_info("b", elem[b_type], None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    got = qlinear_matmul(a, consts["as"], consts["az"], b, consts["bs"], consts["bz"],
                         consts["ys"], consts["yz"])  # fmt: skip
    np.testing.assert_array_equal(got, _ort_run(model, {"a": a, "b": b}))


@needs_vnni
def test_qlinear_matmul_stacked_a_per_column_scale():
    """Regression: a per-column multiplier [N] was tiled as if per row of a stacked A."""
    rng = np.random.default_rng(4)
    a, b = _random(rng, np.uint8, (3, 6, 8)), _random(rng, np.int8, (8, 8))
    b_scale = rng.uniform(0.005, 0.02, 8).astype(np.float32)
    args = (np.float32(0.02), np.uint8(128), b, b_scale, np.zeros(8, np.int8), np.float32(0.05),
            np.array(120, np.uint8))  # fmt: skip
    got = qlinear_matmul(a, *args[:1], np.array(128, np.uint8), *args[2:])
    acc = _exact(a.reshape(-1, 8), b, 128, 0).astype(np.float32)
    mult = (np.float32(0.02) * b_scale) / np.float32(0.05)
    want = np.clip(np.rint(acc * mult) + 120, 0, 255).astype(np.uint8).reshape(3, 6, 8)
    np.testing.assert_array_equal(got, want)


def test_environment_switch_turns_the_library_off():
    code = "from onyx.runtime import native; print(native.available())"
    env = dict(os.environ, ONYX_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# ----------------------------------------------------------------------------- depthwise conv

needs_native = pytest.mark.skipif(not native.available(), reason="native library not built")

#: N, C, H, W, multiplier, kernel, stride, dilation, pads (top, left, bottom, right)
DEPTHWISE = [
    (1, 16, 30, 30, 1, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # MobileNet's
    (2, 40, 7, 7, 1, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),  # 7x7 planes, a partial block
    (1, 8, 13, 17, 2, (3, 3), (1, 1), (2, 2), (0, 1, 2, 3)),  # multiplier, dilation
    (1, 5, 9, 10, 1, (4, 2), (3, 2), (1, 1), (3, 0, 1, 2)),  # odd strides, uneven pads
    (2, 3, 5, 5, 1, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0)),  # one output pixel
    (1, 17, 19, 18, 1, (17, 16), (1, 1), (1, 1), (1, 0, 0, 2)),  # 272 taps: integer sums in int32
    # narrow rows, read as one stream; groups of 8 pixels span rows; sums stored in chunks
    (2, 24, 40, 12, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 20, 11, 11, 1, (3, 3), (2, 2), (1, 1), (1, 1, 0, 0)),
    (1, 16, 3, 300, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # a row past a chunk's pixels
]


@pytest.fixture(params=["vector", "vector by rows", "plane"])
def depthwise_kernel(request, monkeypatch):
    """Each depthwise kernel: AVX-512's 16-channel blocks (where the CPU has it; "by rows":
    each part one output row, its band of padded input rows filled afresh) and the portable
    one-plane-at-a-time loops."""
    lib = native.library()
    if lib is None:
        pytest.skip("native library not built")
    if request.param == "vector by rows":
        monkeypatch.setattr(native.depthwise, "_DW_BAND_BYTES", 1)
    if request.param == "plane":
        monkeypatch.setattr(lib, "depthwise_f32", _address(lib.onyx_depthwise_f32))
        monkeypatch.setattr(lib, "depthwise_i8", _address(lib.onyx_depthwise_i8))
        monkeypatch.setattr(lib, "depthwise_lanes", 1)
    elif lib.depthwise_lanes != 16:
        pytest.skip("no AVX-512")
    kernels = {lib.depthwise_f32, lib.depthwise_i8}
    calls = _spy_kernels(monkeypatch)
    yield request.param
    assert calls, "the native kernel did not run"
    assert set(calls) <= kernels, "another kernel ran"


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def _spy_kernels(monkeypatch) -> list:
    """The kernels (addresses) the native convs run from now on."""
    calls = []
    for cls in (native.PlaneConv, native.IntPlaneConv):
        monkeypatch.setattr(cls, "__call__",
                            lambda self, *a, call=cls.__call__: calls.append(self.task.fn)
                            or call(self, *a))  # fmt: skip
    return calls


def _depthwise_model(op, elem, consts, C, kernel, stride, dilation, pads):
    from onnx import helper, numpy_helper

    attrs = {"group": C, "strides": list(stride), "dilations": list(dilation), "pads": list(pads)}
    node = helper.make_node(op, ["x", *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, attrs


@pytest.mark.parametrize("case", DEPTHWISE)
def test_depthwise_float_matches_onnxruntime(case, depthwise_kernel):
    from onnx import TensorProto

    N, C, H, W, mult, kernel, stride, dilation, pads = case
    rng = np.random.default_rng(C + H)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    consts = {"w": rng.standard_normal((C * mult, 1, *kernel)).astype(np.float32),
              "b": rng.standard_normal(C * mult).astype(np.float32)}  # fmt: skip
    model, attrs = _depthwise_model("Conv", TensorProto.FLOAT, consts, C, kernel, stride,
                                    dilation, pads)  # fmt: skip
    got = conv_kernels.conv(x, consts["w"], consts["b"], **attrs)
    np.testing.assert_allclose(got, _ort_run(model, {"x": x}), rtol=1e-5, atol=1e-5)


def test_depthwise_float_1d_matches_onnxruntime(depthwise_kernel):
    from onnx import TensorProto

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 24, 50)).astype(np.float32)
    consts = {"w": rng.standard_normal((24, 1, 4)).astype(np.float32)}
    model, attrs = _depthwise_model("Conv", TensorProto.FLOAT, consts, 24, (4,), (2,), (1,),
                                    (3, 1))  # fmt: skip
    got = conv_kernels.conv(x, consts["w"], **attrs)
    np.testing.assert_allclose(got, _ort_run(model, {"x": x}), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", DEPTHWISE)
@pytest.mark.parametrize("x_type", BYTES)
def test_depthwise_qlinear_conv_matches_onnxruntime(case, x_type, depthwise_kernel):
    from onnx import TensorProto

    N, C, H, W, mult, kernel, stride, dilation, pads = case
    M = C * mult
    rng = np.random.default_rng(M + W)
    x = _random(rng, x_type, (N, C, H, W))
    w = _random(rng, np.int8, (M, 1, *kernel))
    w.flags.writeable = False  # a constant, as in a session
    consts = {
        "xs": np.array(0.05, np.float32),
        "xz": np.array(7, x_type),
        "w": w,
        "ws": np.linspace(0.001, 0.01, M).astype(np.float32),
        "wz": np.zeros(M, np.int8),
        "ys": np.array(0.02, np.float32),
        "yz": np.array(5, x_type),
        "b": rng.integers(-3000, 3000, M).astype(np.int32),
    }
    elem = TensorProto.UINT8 if x_type == np.uint8 else TensorProto.INT8
    model, attrs = _depthwise_model("QLinearConv", elem, consts, C, kernel, stride, dilation,
                                    pads)  # fmt: skip
    got = quantized_conv.qlinear_conv(x, *consts.values(), **attrs)
    np.testing.assert_array_equal(got, _ort_run(model, {"x": x}))


@pytest.mark.parametrize("case", DEPTHWISE[:3])
@pytest.mark.parametrize("w_type", BYTES)
def test_depthwise_conv_integer_is_exact(case, w_type, depthwise_kernel):
    N, C, H, W, mult, kernel, stride, dilation, pads = case
    M = C * mult
    rng = np.random.default_rng(M)
    x = _random(rng, np.uint8, (N, C, H, W))
    w = _random(rng, w_type, (M, 1, *kernel))
    wz = _random(rng, w_type, (M,))  # a zero point per output channel
    attrs = {"group": C, "strides": list(stride), "dilations": list(dilation), "pads": list(pads)}
    got = quantized_conv.conv_integer(x, w, np.array(200, np.uint8), wz, **attrs)
    xc = x.astype(np.float64) - 200
    wc = w.astype(np.float64) - wz.astype(np.float64).reshape(-1, 1, 1, 1)
    want = conv_kernels.conv(xc, wc, **attrs)  # exact in float64
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.skipif(not (native.available() and native.library().conv_small), reason="no AVX-512")
@pytest.mark.parametrize(
    "case",
    [
        # N, C, H, W, M, kernel, stride, dilation, pads
        (1, 3, 32, 30, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # MobileNet's stem
        (2, 1, 11, 9, 21, (5, 3), (1, 2), (2, 1), (0, 2, 1, 0)),  # a partial block
        (1, 2, 8, 8, 8, (2, 2), (3, 3), (1, 1), (1, 0, 0, 1)),
    ],
)
@pytest.mark.parametrize("band_bytes", [None, 1], ids=["bands", "a row per part"])
def test_small_conv_matches_onnxruntime(case, band_bytes, monkeypatch):
    from onnx import TensorProto, helper, numpy_helper

    if band_bytes:  # (each part copies its own band of rows into the padded image)
        monkeypatch.setattr(native.depthwise, "_DW_BAND_BYTES", band_bytes)
    N, C, H, W, M, kernel, stride, dilation, pads = case
    rng = np.random.default_rng(M)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, *kernel)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    attrs = {"strides": list(stride), "dilations": list(dilation), "pads": list(pads)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    calls = _spy_kernels(monkeypatch)
    got = conv_kernels.conv(x, w, b, **attrs)
    assert calls == [native.library().conv_small], "the native kernel did not run"
    np.testing.assert_allclose(got, _ort_run(model, {"x": x}), rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("shape", [(3, 1000), (2, 16, 112, 112)])  # one thread, two threads
def test_hardswish_matches_the_numpy_formula(shape):
    from onyx.runtime.kernels.activation import _hard_swish

    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    x.flat[:6] = [-3.0, 3.0, -0.0, np.inf, -np.inf, np.nan]
    t = np.clip(x / np.float32(6) + np.float32(0.5), 0, 1)
    with np.errstate(invalid="ignore"):
        want = t * x
    got = native.hardswish_f32(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_hard_swish(x), want)


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("x_type", BYTES)
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((4, 64, 300), (4, 64, 300)),
        ((3, 7), (7,)),
        ((7,), (3, 7)),
        ((2, 3, 300), (300,)),
        ((2, 3, 5, 7), (5, 7)),  # a plane, repeated
        ((2, 96, 14, 14), (1, 96, 1, 1)),  # a channel's scale (squeeze-excite), cycling
        ((1, 1, 1, 1), (3, 40, 1, 1)),  # (either way round)
        ((3, 40, 17, 19), (3, 40, 1, 1)),  # two threads
        ((5, 100, 100), ()),  # a scalar
        ((2, 4, 33, 40), (2, 4, 1, 40)),  # an attention mask: rows repeated, cycling
        ((3, 4, 5, 40), (4, 1, 40)),  # (a leading axis cycled)
    ],
)
def test_qlinear_add_and_mul_match_the_numpy_kernels(x_type, a_shape, b_shape, monkeypatch):
    """The native QLinearAdd / QLinearMul round as the numpy kernels do, to the bit (ties and
    saturation included: random scales and zero points over the whole byte range)."""
    from onyx.runtime.kernels import contrib

    rng = np.random.default_rng(len(a_shape) + len(b_shape))
    info = np.iinfo(x_type)
    for _ in range(10):
        a, b = _random(rng, x_type, a_shape), _random(rng, x_type, b_shape)
        scales = [np.float32(rng.uniform(0.001, 0.1)) for _ in range(3)]
        zps = [np.array(rng.integers(info.min, info.max + 1), x_type) for _ in range(3)]
        args = (a, scales[0], zps[0], b, scales[1], zps[1], scales[2], zps[2])
        assert native.qlinear_binary(a, b, 0, 0, 1.0, 1.0, 0, False) is not None  # (it takes them)
        for fn in (contrib.q_linear_add, contrib.q_linear_mul):
            got = fn(*args)
            with monkeypatch.context() as m:
                m.setattr(native._core, "lib", None)  # the numpy kernel
                want = fn(*args)
            np.testing.assert_array_equal(got, want, err_msg=fn.__name__)


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((3, 4, 5), (3, 1, 5, 1)), ((2, 3, 4, 5), (2, 1, 4, 1)), ((4, 1), (1, 5)), ((4, 5), (2, 5))],
)
def test_qlinear_binary_leaves_two_way_broadcasts_to_numpy(a_shape, b_shape):
    """Shapes whose broadcast is not one run of a's axes (or grows a) are not the kernel's."""
    a = np.zeros(a_shape, np.uint8)
    b = np.zeros(b_shape, np.uint8)
    assert native.qlinear_binary(a, b, 0, 0, 1.0, 1.0, 0, True) is None


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("x_type", BYTES)
def test_quantize_linear_matches_the_numpy_kernel(x_type, monkeypatch):
    """Ties, saturation, infinities and NaN: the same bytes as the numpy kernel."""
    from onyx.runtime.kernels.quantize import quantize

    rng = np.random.default_rng(7)
    info = np.iinfo(x_type)
    for n in (1000, 300_000):  # one thread, two
        x = (rng.standard_normal(n) * 50).astype(np.float32)
        x[:9] = [np.inf, -np.inf, 0.5, 1.5, -0.5, -2.5, 1e30, -1e30, np.nan]
        scale = np.array(rng.uniform(0.01, 1), np.float32)
        zp = np.array(rng.integers(info.min, info.max + 1), x_type)
        assert native.quantize_f32(x, scale, int(zp), np.dtype(x_type)) is not None
        got = quantize(x, scale, zp, dtype=np.dtype(x_type))
        with monkeypatch.context() as m:
            m.setattr(native._core, "lib", None)  # the numpy kernel
            want = quantize(x, scale, zp, dtype=np.dtype(x_type))
        np.testing.assert_array_equal(got, want)


@needs_native
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_dequantize_linear_matches_the_numpy_kernel(x_type, monkeypatch):
    """Every 8-bit value, at a scale whose products round, on one thread and two: the same
    float32 bits as the numpy kernel's three passes."""
    from onyx.runtime.kernels.quantize import dequantize

    info = np.iinfo(x_type)
    every = np.arange(info.min, info.max + 1).astype(x_type)
    scale = np.array(0.0123456, np.float32)
    for n in (256 * 3, 256 * 1200):
        x = np.resize(every, n).reshape(-1, 256)
        zp = np.array(info.min + 77, x_type)
        assert native.dequantize_8(x, scale, int(zp)) is not None
        got = dequantize(x, scale, zp)
        with monkeypatch.context() as m:
            m.setattr(native._core, "lib", None)  # the numpy kernel
            want = dequantize(x, scale, zp)
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.skipif(not native.gemv_ok(), reason="no AVX-512 GEMV")
@pytest.mark.parametrize("trans", [True, False])
@pytest.mark.parametrize("rows, K, N", [(1, 1024, 1000), (3, 37, 19), (8, 576, 144), (5, 5, 70)])
def test_float_gemv_matches_numpy(trans, rows, K, N):
    """Every row block (4, 2, 1), the tails of K and N, two threads; alpha, C, the residual
    and an activation in the epilogue."""
    rng = np.random.default_rng(rows + K + N)
    x = rng.standard_normal((rows, K), dtype=np.float32)
    w = rng.standard_normal((N, K) if trans else (K, N), dtype=np.float32)
    c, z = (
        rng.standard_normal(N, dtype=np.float32),
        rng.standard_normal((rows, N), dtype=np.float32),
    )
    with native.threads(2):
        gemv = native.FloatGemv(w, trans, rows, alpha=0.5, beta=2.0, activation=1)
        got = gemv(x, c, z)
    want = np.maximum(0.5 * (x @ (w.T if trans else w)) + 2 * c + z, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(native.FloatGemv(w, trans, rows)(x), x @ (w.T if trans else w),
                               rtol=1e-5, atol=1e-4)  # fmt: skip


@pytest.mark.skipif(not native.gemv_ok(), reason="no AVX-512 GEMV")
@pytest.mark.parametrize(
    "a_shape, trans_b, c_shape, native_runs",
    [((1, 64), 1, (192,), True), ((3, 64), 0, (1, 192), True), ((2, 64), 1, None, True),
     ((3, 64), 1, (3, 192), False), ((3, 64), 0, (3, 1), False), ((9, 64), 1, (192,), False)],
)  # fmt: skip
def test_gemm_of_a_few_rows_runs_the_gemv(a_shape, trans_b, c_shape, native_runs, monkeypatch):
    """Gemm with a few rows of A and C per column: the native GEMV; other C shapes and more
    rows: BLAS. Both as onnxruntime computes."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from onyx.runtime.kernels.linalg import gemm

    calls, run = [], native.FloatGemv.__call__
    monkeypatch.setattr(native.FloatGemv, "__call__",
                        lambda self, *a: calls.append(1) or run(self, *a))  # fmt: skip
    rng = np.random.default_rng(len(a_shape) + a_shape[0])
    a = rng.standard_normal(a_shape, dtype=np.float32)
    b = rng.standard_normal((192, 64) if trans_b else (64, 192), dtype=np.float32)
    c = None if c_shape is None else rng.standard_normal(c_shape, dtype=np.float32)
    got = gemm(a, b, c, alpha=0.7, beta=1.5, transB=trans_b)
    consts = {"b": b} if c is None else {"b": b, "c": c}
    node = helper.make_node("Gemm", ["a", *consts], ["y"], alpha=0.7, beta=1.5, transB=trans_b)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"a": a})[0], rtol=1e-5, atol=1e-5)
    assert bool(calls) == native_runs


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("shape", [(2, 128, 256), (7, 37), (3, 600, 200), (5, 1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_the_numpy_kernel(shape, with_bias, monkeypatch):
    """Rows of 16-lane blocks and tails, two threads (the third shape), no bias; the saved
    mean and inverse deviation too."""
    from onyx.runtime.kernels.normalization import layer_normalization

    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(shape[-1:]).astype(np.float32)
    bias = rng.standard_normal(shape[-1:]).astype(np.float32) if with_bias else None
    assert native.layer_norm_f32(x, scale, bias, 1e-5) is not None
    got = layer_normalization(x, scale, bias)
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)  # the numpy kernel
        want = layer_normalization(x, scale, bias)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("gelu", [False, True], ids=["erf", "gelu"])
@pytest.mark.parametrize("size", [1, 15, 16, 1000, 70001])
def test_erf_and_gelu_have_the_numpy_kernels_bits(gelu, size, monkeypatch):
    """The native erf / GELU pass does the numpy kernel's float32 operations in its order:
    the same bits, NaN, infinities, signed zeros and tiny values included, in place too."""
    from onyx.runtime.kernels import elementwise

    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 3).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 4.5][:size]
    calls, run = [], native.erf_f32
    monkeypatch.setattr(native, "erf_f32", lambda *a: calls.append(1) or run(*a))
    fn = elementwise.erf_gelu if gelu else elementwise.erf32
    got = fn(x)
    in_place = x.copy()
    fn(in_place, out=in_place)
    assert calls == [1, 1]
    monkeypatch.setattr(native, "erf_f32", lambda *a: False)
    with np.errstate(invalid="ignore"):
        want = fn(x)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(in_place.view(np.uint32), want.view(np.uint32))


@needs_native
@pytest.mark.parametrize("case", ["ties", "zeros", "negative", "positive", "tail", "nan", "huge"])
def test_dynamic_quantize_linear_quantizes_natively_to_the_same_bytes(case, monkeypatch):
    """DynamicQuantizeLinear in one native call (range and quantization, gemm_i8.c), through
    QuantizeLinear's native pass, and in numpy: the same scale, zero point and bytes."""
    from onyx.runtime.kernels.quantize import dynamic_quantize_linear

    rng = np.random.default_rng(4)
    x = (rng.standard_normal((37, 129)) * 5).astype(np.float32)
    x[0, :40] = np.arange(40, dtype=np.float32) * (x.max() - x.min()) / 255 / 2  # ties
    x = {
        "ties": x,
        "zeros": np.zeros((3, 5), np.float32),
        "negative": -np.abs(x) - 1,
        "positive": np.abs(x) + 1,
        "tail": x.reshape(-1)[: 1000 * 3 + 7],
        "nan": np.where(x > 3, np.nan, x).astype(np.float32),  # (the numpy path decides)
        "huge": x * np.float32(1e37),
    }[case]
    one_call = native.dynamic_quantize(x)
    assert (one_call is None) == (case in ("nan", "huge") or not native.int8_gemm_ok(1))
    with np.errstate(invalid="ignore", over="ignore"):
        got = dynamic_quantize_linear(x)
        monkeypatch.setattr(native, "dynamic_quantize", lambda x: None)
        calls, run = [], native.quantize_f32
        monkeypatch.setattr(native, "quantize_f32", lambda *a: calls.append(1) or run(*a))
        per_tensor = dynamic_quantize_linear(x)
        assert calls == [1] or case == "huge"
        monkeypatch.setattr(native, "quantize_f32", lambda *a: None)
        want = dynamic_quantize_linear(x)
    for results in (got, per_tensor):
        for g, w in zip(results, want):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype and g.shape == w.shape


@needs_native
@pytest.mark.parametrize("shape, groups", [((1, 4, 131), 0), ((2, 6, 5, 7), 3), ((3, 8, 1, 1), 0)])
def test_instance_and_group_norm_rows_match_float64(shape, groups, monkeypatch):
    """The native rows of InstanceNormalization / GroupNormalization (norms.c, sums in double)
    against float64 and against the numpy rows: within float32 rounding."""
    from onyx.runtime.kernels import normalization

    rng = np.random.default_rng(len(shape) + groups)
    x = (rng.standard_normal(shape) * 4 + 3).astype(np.float32)
    C = shape[1]
    scale, bias = rng.standard_normal((2, C)).astype(np.float32)
    calls, run = [], native.norm_rows_f32
    monkeypatch.setattr(native, "norm_rows_f32", lambda *a: calls.append(1) or run(*a))
    if groups:
        got = normalization.group_normalization(x, scale, bias, num_groups=groups)
        g = x.astype(np.float64).reshape(shape[0], groups, -1)
    else:
        got = normalization.instance_normalization(x, scale, bias)
        g = x.astype(np.float64).reshape(shape[0], C, -1)
    assert calls == [1]
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    per_channel = (1, C) + (1,) * (len(shape) - 2)
    want = g.reshape(shape) * scale.reshape(per_channel) + bias.reshape(per_channel)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(native, "norm_rows_f32", lambda *a: None)
    numpy_rows = (normalization.group_normalization(x, scale, bias, num_groups=groups)
                  if groups else normalization.instance_normalization(x, scale, bias))  # fmt: skip
    np.testing.assert_allclose(got, numpy_rows, rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("alpha, beta", [(1 / 6, 0.5), (0.2, 0.5), (0.7, -0.3)])
def test_hard_sigmoid_has_the_numpy_kernels_bits(alpha, beta, monkeypatch):
    from onyx.runtime.kernels.activation import hard_sigmoid

    rng = np.random.default_rng(7)
    x = (rng.standard_normal(5003) * 6).astype(np.float32)
    x[:5] = [np.nan, np.inf, -np.inf, -0.0, 3.0]
    calls, run = [], native.hard_sigmoid_f32
    monkeypatch.setattr(native, "hard_sigmoid_f32", lambda *a: calls.append(1) or run(*a))
    got = hard_sigmoid(x, alpha=alpha, beta=beta)
    assert calls == [1]
    monkeypatch.setattr(native, "hard_sigmoid_f32", lambda *a: None)
    want = hard_sigmoid(x, alpha=alpha, beta=beta)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [300, 3001])
def test_tree_ensemble_native_descent_matches_numpy(dtype, rows, monkeypatch):
    """trees.c's descent and leaf sums against the numpy walk, to the bit: a random forest on
    300 rows (native.ForestSums, one thread) and 3001 (a partial block of 8 rows at the end,
    two threads), NaN features (the false branch, or a node's tracked branch), float32 and
    float64 features."""
    sklearn = pytest.importorskip("sklearn.ensemble")
    skl2onnx = pytest.importorskip("skl2onnx")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 6)).astype(dtype)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1)
    forest = sklearn.RandomForestClassifier(12, max_depth=7, random_state=0).fit(x, y)
    onx = skl2onnx.to_onnx(forest, x[:1], options={"zipmap": False},
                           target_opset={"": 17, "ai.onnx.ml": 3})  # fmt: skip
    x[::13, 2] = np.nan
    calls = []
    run, small = native.forest_descend, native.ForestSums.__call__
    monkeypatch.setattr(native, "forest_descend", lambda *a: calls.append(1) or run(*a))
    monkeypatch.setattr(native.ForestSums, "__call__", lambda t, x: calls.append(1) or small(t, x))
    finish = native.ForestSums.classify  # (the classifier's sums, best class and finish)
    monkeypatch.setattr(native.ForestSums, "classify",
                        lambda t, *a: calls.append(1) or finish(t, *a))  # fmt: skip
    got = onyx.InferenceSession(onx.SerializeToString()).run(None, {"X": x})
    assert calls
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)
        want = onyx.InferenceSession(onx.SerializeToString()).run(None, {"X": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@needs_native
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 64, 56, 56), (3, 4)])
def test_batch_norm_matches_the_numpy_kernel(shape, monkeypatch):
    """Inference BatchNormalization in one native pass: the bits of numpy's x * mult + shift,
    each step rounded (no fused multiply-add), on one thread and two."""
    from onyx.runtime.kernels.batch_norm import batch_normalization

    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    scale, bias, mean = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(3))
    var = rng.random(shape[1]).astype(np.float32)
    calls, run = [], native.batch_norm_f32
    monkeypatch.setattr(native, "batch_norm_f32", lambda *a: calls.append(1) or run(*a))
    got = batch_normalization(x, scale, bias, mean, var, epsilon=1e-3)
    assert calls
    with monkeypatch.context() as m:
        m.setattr(native._core, "lib", None)
        want = batch_normalization(x, scale, bias, mean, var, epsilon=1e-3)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@needs_native
def test_pooling_matches_the_numpy_kernel(monkeypatch):
    """window.c's 2-D MaxPool / AveragePool (every version's order of additions) against the
    numpy kernel, to the bit, over random geometries: kernels, strides, dilations, pads, ceil
    mode, count_include_pad, NaN and -0.0 inputs (the max's zeros compared by value)."""
    from onyx.runtime.kernels import pool

    class Ctx:
        n_outputs, outputs_wanted = 1, (True,)

    rng = np.random.default_rng(11)
    calls, run = [], native.pool2d_f32
    monkeypatch.setattr(native, "pool2d_f32", lambda *a, **k: calls.append(1) or run(*a, **k))
    compared = 0
    for _ in range(150):
        H, W, kh, kw = (int(v) for v in rng.integers(1, 10, 4))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
        kh, kw, dh, dw = min(kh, 4), min(kw, 4), min(dh, 2), min(dw, 2)
        pads = [int(min(p, k - 1)) for p, k in zip(rng.integers(0, 3, 4), (kh, kw, kh, kw))]
        geo = {"kernel_shape": [kh, kw], "strides": [sh, sw], "pads": pads,
               "ceil_mode": int(rng.integers(0, 2))}  # fmt: skip
        x = rng.standard_normal((2, 3, H + 16, W + 5)).astype(np.float32)
        x.reshape(-1)[rng.integers(0, x.size, 2)] = [np.nan, -0.0]
        include = int(rng.integers(0, 2))
        runs = [
            (pool.average_pool, (x,), {"count_include_pad": include, "dilations": [dh, dw]}),
            (pool.average_pool_1, (x,), {"count_include_pad": include}),
            (pool.max_pool, (Ctx, x), {"dilations": [dh, dw]}),
        ]
        for fn, args, kwargs in runs:
            try:
                got = fn(*args, **kwargs, **geo)
            except Exception:  # (a geometry with no output)
                continue
            with monkeypatch.context() as m:
                m.setattr(native._core, "lib", None)
                want = fn(*args, **kwargs, **geo)
            assert got.shape == want.shape
            if fn is pool.max_pool:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            compared += 1
    assert compared > 300 and calls


@needs_native
@pytest.mark.parametrize("seed", range(3))
def test_max_pool_2x2_stride_2_matches_numpy_and_onnxruntime(seed, monkeypatch):
    """window.c's 2x2 stride-2 path (a U-Net's down step): random planes, odd sizes (the last
    row and column dropped), rows of several vectors and a tail, NaN in a window, and ceil
    mode (a last window past the plane: the general path), to numpy's (NaN included) and
    onnxruntime's (without NaN)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from onyx.runtime.kernels import pool

    class Ctx:
        n_outputs, outputs_wanted = 1, (True,)

    rng = np.random.default_rng(seed)
    for ceil_mode in (0, 1):
        shape = tuple(
            int(v)
            for v in (*rng.integers(1, 3, 1), *rng.integers(1, 20, 1), *rng.integers(2, 70, 2))
        )
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1)[rng.integers(0, x.size, 3)] = np.nan
        geo = {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": ceil_mode}
        got = pool.max_pool(Ctx, x, **geo)
        with monkeypatch.context() as m:
            m.setattr(native._core, "lib", None)
            np.testing.assert_array_equal(got, pool.max_pool(Ctx, x, **geo))
        node = helper.make_node("MaxPool", ["x"], ["y"], **geo)
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        clean = np.nan_to_num(x)  # (onnxruntime's NaN depends on where it sits in a window)
        np.testing.assert_array_equal(
            pool.max_pool(Ctx, clean, **geo), sess.run(None, {"x": clean})[0]
        )


@pytest.mark.skipif(not native.gemv_ok(), reason="no AVX-512 GEMV")
def test_gemm_with_tiny_weights_stays_with_numpy(monkeypatch):
    """A classifier head's few weights (below linalg.NUMPY_GEMV_WEIGHTS): numpy's product and
    bias take less than the native call's set-up."""
    from onyx.runtime.kernels.linalg import NUMPY_GEMV_WEIGHTS, gemm

    calls, run = [], native.FloatGemv.__call__
    monkeypatch.setattr(native.FloatGemv, "__call__",
                        lambda self, *a: calls.append(1) or run(self, *a))  # fmt: skip
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 64), dtype=np.float32)
    b = rng.standard_normal((4, 64), dtype=np.float32)
    c = rng.standard_normal(4, dtype=np.float32)
    assert b.size < NUMPY_GEMV_WEIGHTS
    np.testing.assert_allclose(gemm(a, b, c, transB=1), a @ b.T + c, rtol=1e-6, atol=1e-6)
    assert not calls


def test_an_input_address_is_its_datas_first_byte():
    """_input_addr (the flag looked at first) gives what numpy's ctypes.data gives, for a
    feed's read-only view, a writeable array, a read-only strided view and an empty one."""
    from onyx.runtime.native import _core

    base = np.arange(20, dtype=np.float32).reshape(4, 5)
    feed = base.view()
    feed.setflags(write=False)
    strided = base[:, 1::2]
    strided.setflags(write=False)
    empty = np.zeros((0, 3), np.float32)
    empty.setflags(write=False)
    for a in (feed, base, strided, empty, base[1:]):
        assert _core._input_addr(a) == a.ctypes.data  # noqa: SLF001
