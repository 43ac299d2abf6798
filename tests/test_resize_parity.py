"""Resize / Upsample in linear mode against onnxruntime, bit for bit, for float32 2-D spatial
resizing (images, and the H, W axes of NCHW / NHWC tensors: the U-Net decoders' case).

Combinations where onnxruntime departs from the spec (which onyx and the node suite follow) are
skipped with the reason.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper

from onyx.runtime.registry import lookup

COORDINATE_MODES = [
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "half_pixel_symmetric",
    "tf_crop_and_resize",
]

# (input shape, scales or None, sizes or None): NCHW unless noted
TARGETS = {
    "up2": ((1, 3, 7, 9), [1, 1, 2, 2], None),
    "down2": ((2, 4, 16, 16), [1, 1, 0.5, 0.5], None),
    "up3": ((1, 2, 5, 6), [1, 1, 3, 3], None),
    "mixed": ((1, 3, 7, 9), [1, 1, 1.5, 0.75], None),
    "odd": ((2, 4, 16, 16), [1, 1, 0.7, 1.3], None),
    "quarter": ((1, 2, 33, 17), [1, 1, 0.25, 0.25], None),
    "width_only": ((1, 3, 7, 9), [1, 1, 1, 2], None),
    "height_only": ((1, 3, 7, 9), [1, 1, 1.7, 1], None),
    "sizes_up2": ((2, 8, 16, 16), None, [2, 8, 32, 32]),
    "sizes_odd": ((1, 3, 7, 9), None, [1, 3, 13, 5]),
    "sizes_to_1": ((1, 2, 6, 5), None, [1, 2, 1, 3]),
    "unet_up": ((1, 16, 32, 32), None, [1, 16, 64, 64]),
    "nhwc": ((1, 7, 9, 3), [1, 2, 1.5, 1], None),
    "image_2d": ((11, 13), [1.6, 0.6], None),
}


def _model(coordinate_mode: str, opset: int, use_sizes: bool, extrapolation: float = 0.0):
    roi = "roi" if coordinate_mode == "tf_crop_and_resize" else ""
    inputs = ["x", roi, "" if use_sizes else "scales", "sizes" if use_sizes else ""]
    while not inputs[-1]:
        inputs.pop()
    attrs = {"mode": "linear", "coordinate_transformation_mode": coordinate_mode}
    if extrapolation:
        attrs["extrapolation_value"] = extrapolation
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    declared = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)]
    if roi:
        declared.append(helper.make_tensor_value_info("roi", TensorProto.FLOAT, None))
    if use_sizes:
        declared.append(helper.make_tensor_value_info("sizes", TensorProto.INT64, None))
    else:
        declared.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        [node], "g", declared, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _onnxruntime(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return sess.run(None, feeds)[0]


def _roi(rank: int) -> np.ndarray:
    # crop the last two axes (0.1..0.9, 0.2..0.8 for an image), keep the others whole
    starts, ends = [0.0] * rank, [1.0] * rank
    starts[-2:], ends[-2:] = [0.1, 0.2], [0.9, 0.8]
    return np.array(starts + ends, np.float32)


def _skip_reason(coordinate_mode: str, shape, scales, sizes) -> str | None:
    if scales is None:
        return None
    fractional = any(
        float(np.float32(n) * np.float32(s)) != int(np.float32(n) * np.float32(s))
        for n, s in zip(shape, scales)
    )
    if coordinate_mode == "align_corners" and fractional:
        return (
            "onnxruntime divides by the integer output length; the spec (and the node suite, "
            "e.g. test_resize_downsample_scales_linear_align_corners) by input * scale"
        )
    if coordinate_mode == "pytorch_half_pixel" and any(
        1 < n * s < 2 for n, s in zip(shape, scales)
    ):
        return (
            "an output length of 1 from a fractional input * scale above 1: onnxruntime tests "
            "the integer length (> 1), the spec's reference the fractional one"
        )
    if coordinate_mode == "tf_crop_and_resize":
        return "onnxruntime's output shape ignores roi; the spec's is floor(in * (end - start) * scale)"
    return None


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_resize_linear_bit_exact(coordinate_mode, target):
    shape, scales, sizes = TARGETS[target]
    reason = _skip_reason(coordinate_mode, shape, scales, sizes)
    if reason:
        pytest.skip(reason)
    if coordinate_mode == "tf_crop_and_resize" and target == "nhwc":
        pytest.skip("roi on the NHWC spatial axes: covered by the NCHW cases")
    x = np.random.default_rng(len(target)).standard_normal(shape).astype(np.float32)
    feeds = {"x": x}
    if sizes is not None:
        feeds["sizes"] = np.array(sizes, np.int64)
    else:
        feeds["scales"] = np.array(scales, np.float32)
    if coordinate_mode == "tf_crop_and_resize":
        feeds["roi"] = _roi(x.ndim)
    model = _model(coordinate_mode, 19, sizes is not None, extrapolation=-7.5)
    expected = _onnxruntime(model, feeds)
    (actual,) = run_onnx(model, feeds)
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "align_corners", "asymmetric"])
def test_resize_linear_older_opsets(opset, coordinate_mode):
    x = np.random.default_rng(opset).standard_normal((1, 4, 10, 12)).astype(np.float32)
    feeds = {"x": x, "sizes": np.array([1, 4, 23, 17], np.int64)}
    model = _model(coordinate_mode, opset, use_sizes=True)
    if opset == 11:  # Resize-11 requires roi and scales (empty: sizes rule)
        model.graph.node[0].input[:] = ["x", "roi", "scales", "sizes"]
        for name in ("roi", "scales"):
            model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
            feeds[name] = np.zeros(0, np.float32)
    np.testing.assert_array_equal(run_onnx(model, feeds)[0], _onnxruntime(model, feeds))


@pytest.mark.parametrize("op_type, opset", [("Upsample", 9), ("Resize", 10)])
def test_legacy_linear(op_type, opset):
    x = np.random.default_rng(opset).standard_normal((2, 3, 5, 7)).astype(np.float32)
    node = helper.make_node(op_type, ["x", "scales"], ["y"], mode="linear")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    feeds = {"x": x, "scales": np.array([1, 1, 2.5, 1.5], np.float32)}
    np.testing.assert_array_equal(run_onnx(model, feeds)[0], _onnxruntime(model, feeds))


def test_resize_axes_attribute():
    # opset 18+: scales for the listed axes only
    x = np.random.default_rng(18).standard_normal((1, 5, 12, 10)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", axes=[2, 3])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    feeds = {"x": x, "scales": np.array([1.75, 0.6], np.float32)}
    np.testing.assert_array_equal(run_onnx(model, feeds)[0], _onnxruntime(model, feeds))


@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES[:-1])
def test_resize_linear_random_shapes(coordinate_mode):
    # random input and output lengths, scales from the float32 sizes ratio or given directly
    rng = np.random.default_rng(COORDINATE_MODES.index(coordinate_mode))
    for _ in range(20):
        shape = (1, 2, *rng.integers(1, 20, 2))
        x = rng.standard_normal(shape).astype(np.float32)
        sizes = np.array([1, 2, *rng.integers(1, 40, 2)], np.int64)
        model = _model(coordinate_mode, 19, use_sizes=True)
        feeds = {"x": x, "sizes": sizes}
        np.testing.assert_array_equal(run_onnx(model, feeds)[0], _onnxruntime(model, feeds))
        scales = np.array([1, 1, *rng.uniform(0.3, 3.5, 2)], np.float32)
        if min(np.floor(np.float32(shape[2:]) * scales[2:])) < 1:
            continue  # empty output
        if _skip_reason(coordinate_mode, shape, scales, None):
            continue
        model = _model(coordinate_mode, 19, use_sizes=False)
        feeds = {"x": x, "scales": scales}
        np.testing.assert_array_equal(run_onnx(model, feeds)[0], _onnxruntime(model, feeds))


def test_identity_resize_is_a_copy():
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 7)).astype(np.float32)
    feeds = {"x": x, "scales": np.ones(4, np.float32)}
    model = _model("half_pixel", 19, use_sizes=False)
    (y,) = run_onnx(model, feeds)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(y, _onnxruntime(model, feeds))


# ----------------------------------------------------------------------------- nearest, 8-bit


def _nearest_model(coordinate_mode: str, nearest_mode: str, elem: int, use_sizes: bool):
    model = _model(coordinate_mode, 19, use_sizes)
    node = model.graph.node[0]
    del node.attribute[:]
    node.attribute.extend(
        [
            helper.make_attribute("mode", "nearest"),
            helper.make_attribute("coordinate_transformation_mode", coordinate_mode),
            helper.make_attribute("nearest_mode", nearest_mode),
        ]
    )
    model.graph.input[0].type.tensor_type.elem_type = elem
    model.graph.output[0].type.tensor_type.elem_type = elem
    return model


# "odd" (0.7, 1.3) left out: at coordinates a float32 rounding away from an exact half,
# onnxruntime's nearest rounding goes the other way (e.g. 19.5 / 1.3f - 0.5 = 14.500001 there
# rounds to 14 with round_prefer_floor), and it keeps an axis whose length does not change as
# it is, whatever its scale; onyx follows the spec's coordinates (as the node suite does).
NEAREST_TARGETS = ["up2", "down2", "up3", "mixed", "quarter", "width_only", "sizes_odd",
                   "sizes_to_1", "unet_up", "nhwc", "image_2d"]  # fmt: skip


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES[:-1])
def test_resize_nearest_bit_exact(coordinate_mode, nearest_mode):
    # index tables of every kind: repeats (2x, 3x), strided slices (0.5x), gathers (fractional)
    rng = np.random.default_rng(len(coordinate_mode) + len(nearest_mode))
    for i, target in enumerate(NEAREST_TARGETS):
        shape, scales, sizes = TARGETS[target]
        if _skip_reason(coordinate_mode, shape, scales, sizes):
            continue
        dtype, elem = [(np.float32, TensorProto.FLOAT), (np.uint8, TensorProto.UINT8)][i % 2]
        x = rng.standard_normal(shape).astype(np.float32)
        x = x if dtype == np.float32 else (x * 40 + 128).clip(0, 255).astype(np.uint8)
        feeds = {"x": x}
        if sizes is not None:
            feeds["sizes"] = np.array(sizes, np.int64)
        else:
            feeds["scales"] = np.array(scales, np.float32)
        model = _nearest_model(coordinate_mode, nearest_mode, elem, sizes is not None)
        expected = _onnxruntime(model, feeds)
        (actual,) = run_onnx(model, feeds)
        assert actual.dtype == dtype and actual.shape == expected.shape, target
        np.testing.assert_array_equal(actual, expected, err_msg=target)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int64, np.int16, np.uint8, np.bool_])
@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_nearest_integer_upscale_any_type(dtype, k):
    # integer upscales copy each element k x k times (packed into wide integers where they fit)
    x = (np.random.default_rng(k).standard_normal((2, 3, 5, 7)) * 50).astype(dtype)
    resize = lookup("Resize", "", 19).fn
    scales = np.array([1, 1, k, k], np.float32)
    y = resize(
        x, None, scales, None, coordinate_transformation_mode="asymmetric", nearest_mode="floor"
    )
    np.testing.assert_array_equal(y, np.repeat(np.repeat(x, k, axis=2), k, axis=3))
    assert y.dtype == x.dtype and y.flags.c_contiguous


@pytest.mark.parametrize(
    "dtype, elem",
    [(np.uint8, TensorProto.UINT8), (np.int8, TensorProto.INT8), (np.int32, TensorProto.INT32)],
)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES[:-1])
def test_resize_linear_integer_images(coordinate_mode, dtype, elem):
    # onnxruntime's float32 formula, truncated to the integer type (QOperator U-Net: uint8)
    rng = np.random.default_rng(len(coordinate_mode) + elem)
    for _ in range(8):
        shape = (1, 3, *rng.integers(1, 20, 2))
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype)
        feeds = {"x": x, "sizes": np.array([1, 3, *rng.integers(1, 40, 2)], np.int64)}
        model = _model(coordinate_mode, 19, use_sizes=True)
        model.graph.input[0].type.tensor_type.elem_type = elem
        model.graph.output[0].type.tensor_type.elem_type = elem
        expected = _onnxruntime(model, feeds)
        (actual,) = run_onnx(model, feeds)
        assert actual.dtype == dtype
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "align_corners", "asymmetric"])
def test_native_bilinear_same_bits_as_numpy(coordinate_mode, monkeypatch):
    """The native bilinear kernel (resize.c) against the numpy path it replaces: same bits,
    a U-Net's 2x upsampling and a downsampling with odd sizes."""
    from onyx.runtime import native

    if not native.bilinear_ok():
        pytest.skip("no native bilinear kernel (AVX-512)")
    resize = lookup("Resize", "", 19).fn
    rng = np.random.default_rng(5)
    for shape, sizes in [((2, 40, 33, 31), (2, 40, 66, 62)), ((1, 3, 50, 47), (1, 3, 17, 29))]:
        x = rng.standard_normal(shape).astype(np.float32)
        x[0, 0, 0, 0] = np.nan
        size = np.array(sizes, np.int64)
        calls, run = [], native.bilinear_f32
        monkeypatch.setattr(native, "bilinear_f32",
                            lambda *a, calls=calls, run=run: calls.append(1) or run(*a))  # fmt: skip
        got = resize(
            x, None, None, size, mode="linear", coordinate_transformation_mode=coordinate_mode
        )
        assert calls, "the native kernel did not run"
        monkeypatch.setattr(native, "bilinear_ok", lambda: False)
        want = resize(
            x, None, None, size, mode="linear", coordinate_transformation_mode=coordinate_mode
        )
        monkeypatch.undo()
        np.testing.assert_array_equal(got, want)
