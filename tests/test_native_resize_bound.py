"""Resize nodes of constant scales or sizes in a session (registry.binds): the bound step sets
up its native task once (native.bound_bilinear_f32, native.bound_repeat2d_4byte) and each run
is one native call; the results are onnxruntime's bits, as the unbound kernels' are."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import resample


def _model(shape, sizes, elem, **attrs) -> bytes:
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    return model.SerializeToString()


def _onnxruntime(data: bytes, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.fixture
def bound_calls(monkeypatch):
    """The set-ups the bound Resize steps make from now on (kind, input shape)."""
    made = []

    def counted(kind: str):
        real = getattr(native, f"bound_{kind}")

        def setup(shape, *args):
            made.append((kind, shape))
            return real(shape, *args)

        return setup

    for kind in ("bilinear_f32", "repeat2d_4byte"):
        monkeypatch.setattr(native, f"bound_{kind}", counted(kind))
    return made


def _native(kind: str) -> bool:
    """Whether the kernel runs here (else the kernel as written answers)."""
    if kind == "bilinear_f32":
        return native.bilinear_ok()
    return native.repeat2d_4byte(np.zeros((1, 1, 1), np.float32), 2, 2) is not None


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize(
    "shape, sizes",
    [
        ((1, 16, 16, 16), (1, 16, 32, 32)),  # a U-Net's 2x upsampling
        ((2, 5, 33, 31), (2, 5, 17, 40)),  # down and up, odd sizes, a batch
        ((7, 9), (13, 5)),  # an image
    ],
)
def test_bound_bilinear_is_onnxruntime_bits(mode, shape, sizes, bound_calls):
    data = _model(
        shape, sizes, TensorProto.FLOAT, mode="linear", coordinate_transformation_mode=mode
    )
    sess = onyx.InferenceSession(data)
    for seed in range(3):  # (the first run checks; the next ones run the bound step)
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        x.flat[seed] = np.nan
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _onnxruntime(data, x))
    if _native("bilinear_f32"):
        assert bound_calls == [("bilinear_f32", shape)], "the bound native set-up did not run"


@pytest.mark.parametrize(
    "dtype, elem", [(np.float32, TensorProto.FLOAT), (np.int32, TensorProto.INT32)]
)
@pytest.mark.parametrize("shape", [(1, 16, 16, 16), (3, 5, 7)])
def test_bound_nearest_2x_is_onnxruntime_bits(dtype, elem, shape, bound_calls):
    sizes = (*shape[:-2], 2 * shape[-2], 2 * shape[-1])
    attrs = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    data = _model(shape, sizes, elem, mode="nearest", **attrs)
    sess = onyx.InferenceSession(data)
    for seed in range(3):
        x = (np.random.default_rng(seed).standard_normal(shape) * 100).astype(dtype)
        got = sess.run(None, {"x": x})[0]
        assert got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, _onnxruntime(data, x))
    if _native("repeat2d_4byte"):
        assert bound_calls == [("repeat2d_4byte", shape)], "the bound native set-up did not run"


def test_other_layouts_keep_the_kernel_as_written(bound_calls):
    """NHWC bilinear (the planes moved first) and nearest 3x (no 4-byte kernel for it) are
    the kernel as written."""
    shape = (1, 6, 5, 3)
    data = _model(shape, (1, 12, 10, 3), TensorProto.FLOAT, mode="linear")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess = onyx.InferenceSession(data)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _onnxruntime(data, x))
    data = _model((1, 2, 4, 4), (1, 2, 12, 12), TensorProto.FLOAT, mode="nearest")
    x = x.reshape(-1)[:32].reshape(1, 2, 4, 4)
    sess = onyx.InferenceSession(data)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _onnxruntime(data, x))
    assert not bound_calls


def test_a_bound_call_refuses_another_dtype():
    if not native.bilinear_ok():
        pytest.skip("no native bilinear kernel (AVX-512)")
    tables = resample._bilinear_table("half_pixel", 4, 8, 2.0, 0.0, 1.0, None)
    call = native.bound_bilinear_f32((1, 4, 4), tables, tables)
    assert call(np.ones((1, 4, 4), np.float32)).shape == (1, 8, 8)
    with pytest.raises(TypeError, match="float64 input"):
        call(np.ones((1, 4, 4)))
