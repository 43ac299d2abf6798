"""Convolutions whose ``group`` does not split their channels (issue 21's hardening findings):
a ValidationError naming the node at session creation where the declared shapes show it, a
RuntimeFailure naming the node and the channels at run where they do not (a dynamic X),
never numpy's words ("cannot reshape array of size 72 into shape (4,1,9)") or a
ZeroDivisionError."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime.native import _core

#: (op, X's shape, W's shape, group, what the message says)
CASES = {
    "x_channels": ("Conv", [1, 6, 5, 5], [4, 2, 3, 3], 4, "X has 6 channels"),
    "w_outputs": ("Conv", [1, 8, 5, 5], [6, 2, 3, 3], 4, "does not divide W's 6 output"),
    "zero": ("Conv", [1, 6, 5, 5], [4, 2, 3, 3], 0, "group"),
    "negative": ("Conv", [1, 6, 5, 5], [4, 2, 3, 3], -2, "group"),
    "depthwise_x": ("Conv", [1, 6, 5, 5], [8, 1, 3, 3], 8, "X has 6 channels"),
    # one channel per filter, as many filters as X has channels, group 1: a depthwise conv's
    # weights without its group (the native convs' set-ups, bound and channels-last, once ran
    # it as one: fuzz seed 89's random_cnn case 1381207405)
    "one_per_filter": ("Conv", [1, 7, 5, 5], [7, 1, 3, 3], 1, "X has 7 channels"),
    "one_per_filter_pixels": ("Conv", [2, 7, 3, 3], [7, 1, 3, 3], 1, "X has 7 channels"),
    "transpose_channels": ("ConvTranspose", [1, 6, 5, 5], [6, 2, 3, 3], 4, "does not divide"),
    "transpose_x": ("ConvTranspose", [1, 6, 5, 5], [4, 2, 3, 3], 2, "X has 6 channels"),
    "transpose_zero": ("ConvTranspose", [1, 6, 5, 5], [6, 2, 3, 3], 0, "group"),
}


def _model(op, x_shape, w_shape, group, dynamic=False, relu=False) -> bytes:
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    nodes = [helper.make_node(op, ["x", "w"], ["c" if relu else "y"], name="the_conv", group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    x_dims = ["N", "C", "H", "W"] if dynamic else x_shape
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("case", sorted(CASES))
def test_declared_shapes_are_refused_at_session_creation(case):
    op, x_shape, w_shape, group, words = CASES[case]
    with pytest.raises(onyx.ValidationError, match="the_conv") as e:
        onyx.InferenceSession(_model(op, x_shape, w_shape, group))
    assert words in str(e.value) and "attribute-value" in str(e.value)
    with pytest.raises(onyx.ValidationError, match="the_conv"):
        onyx.check(_model(op, x_shape, w_shape, group))


def _run_outcome(model: bytes, x_shape, level) -> Exception:
    options = onyx.SessionOptions()
    options.graph_optimization_level = level
    try:
        sess = onyx.InferenceSession(model, options)
        sess.run(None, {"x": np.ones(x_shape, np.float32)})
    except Exception as e:  # noqa: BLE001  (the test classifies it)
        return e
    raise AssertionError("the conv ran")


@pytest.mark.parametrize("native_on", [True, False])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("optimized", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_dynamic_shapes_are_refused_at_run_naming_the_node(
    case, optimized, relu, native_on, monkeypatch
):
    if not native_on:
        monkeypatch.setattr(_core, "lib", None)
    op, x_shape, w_shape, group, words = CASES[case]
    level = onyx.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not optimized:
        level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    e = _run_outcome(_model(op, x_shape, w_shape, group, dynamic=True, relu=relu), x_shape, level)
    assert isinstance(e, onyx.OnyxError), repr(e)
    message = str(e)
    if isinstance(e, onyx.ValidationError):  # (what W's shape alone shows)
        assert "the_conv" in message and "group" in message, message
        return
    assert isinstance(e, onyx.RuntimeFailure), repr(e)
    assert "node" in message and words in message, message
    assert "reshape" not in message and "ZeroDivision" not in message, message


def test_valid_groups_still_run():
    for op, x_shape, w_shape, group in (
        ("Conv", [1, 6, 5, 5], [4, 3, 3, 3], 2),
        ("Conv", [1, 6, 5, 5], [12, 1, 3, 3], 6),
        ("ConvTranspose", [1, 6, 5, 5], [6, 2, 3, 3], 3),
    ):
        for dynamic in (False, True):
            sess = onyx.InferenceSession(_model(op, x_shape, w_shape, group, dynamic))
            (y,) = sess.run(None, {"x": np.ones(x_shape, np.float32)})
            assert y.shape[1] == (w_shape[0] if op == "Conv" else w_shape[1] * group)


def _group_norm(opset: int, channels: int, num_groups: int) -> bytes:
    n = channels if opset >= 21 else num_groups  # (opset 18: scale and bias per group)
    inits = [
        numpy_helper.from_array(np.ones(n, np.float32), "s"),
        numpy_helper.from_array(np.zeros(n, np.float32), "b"),
    ]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="the_norm",
                            num_groups=num_groups)  # fmt: skip
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]
    ).SerializeToString()


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_groups_that_do_not_split_the_channels(opset):
    sess = onyx.InferenceSession(_group_norm(opset, 6, 4))
    with pytest.raises(onyx.RuntimeFailure, match="the_norm") as e:
        sess.run(None, {"x": np.ones((2, 6, 3), np.float32)})
    assert "num_groups 4 does not divide the 6 channels" in str(e.value)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_of_an_empty_batch_is_empty(opset):
    """numpy could not reshape a batch of 0 by -1: a wrapped ValueError, where an empty
    batch normalizes to an empty output (as the fuzzer's reshape_input found)."""
    sess = onyx.InferenceSession(_group_norm(opset, 8, 4))
    (y,) = sess.run(None, {"x": np.ones((0, 8, 3), np.float32)})
    assert y.shape == (0, 8, 3)


def _deform(offset_channels: int, offset_group: int = 1) -> bytes:
    w = numpy_helper.from_array(np.ones((3, 2, 1, 1), np.float32), "w")
    node = helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="the_deform",
                            offset_group=offset_group)  # fmt: skip
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"]),
         helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", "K", "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@pytest.mark.parametrize(
    "offset_channels, offset_group, words",
    [(8, 1, "offset is [3, 8, 1, 1], expected [3, 2, 1, 1]"), (6, 3, "offset_group 3 does not")],
)
def test_deform_conv_offsets_of_another_shape_are_named(offset_channels, offset_group, words):
    """Found by the fuzzer's reshape_input (seed 107): numpy's 'cannot reshape' before."""
    sess = onyx.InferenceSession(_deform(offset_channels, offset_group))
    feeds = {
        "x": np.ones((3, 2, 1, 1), np.float32),
        "offset": np.zeros((3, offset_channels, 1, 1), np.float32),
    }
    with pytest.raises(onyx.RuntimeFailure, match="the_deform") as e:
        sess.run(None, feeds)
    assert words in str(e.value)
    (y,) = onyx.InferenceSession(_deform(2)).run(
        None, {**feeds, "offset": np.zeros((3, 2, 1, 1), np.float32)}
    )
    assert y.shape == (3, 3, 1, 1)


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_range_of_a_zero_delta_is_named(dtype):
    """Found in the fuzz runs (seed 103, swap_attr_type): a ZeroDivisionError before."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = ("start", "limit", "delta")
    graph = helper.make_graph(
        [helper.make_node("Range", list(names), ["y"], name="the_range")], "g",
        [helper.make_tensor_value_info(n, elem, []) for n in names],
        [helper.make_tensor_value_info("y", elem, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = onyx.InferenceSession(model.SerializeToString())
    feeds = {n: np.array(v, dtype) for n, v in zip(names, (0, 5, 0))}
    with pytest.raises(onyx.RuntimeFailure, match="the_range") as e:
        sess.run(None, feeds)
    assert "delta is 0" in str(e.value)
    (y,) = sess.run(None, {**feeds, "delta": np.array(2, dtype)})
    np.testing.assert_array_equal(y, np.array([0, 2, 4], dtype))


def test_the_native_channels_last_conv_told_group_1_refuses_one_channel_per_filter():
    """nhwc.NhwcConv reads a conv as depthwise from W's shape alone unless told the group: told
    group 1, weights of one channel per filter over 7 channels are refused in the wrapper
    itself (whatever its caller checked), and told the depthwise group they still run."""
    from onyx.errors import InvalidArgument
    from onyx.runtime.kernels.conv_geometry import _conv_geometry
    from onyx.runtime.native import nhwc

    if not nhwc.available():
        pytest.skip("the native channels-last kernels are off here")
    w = np.ones((7, 1, 3, 3), np.float32)
    geo = _conv_geometry((1, 7, 5, 5), w.shape, "NOTSET", [1, 1, 1, 1], None, None, None)
    with pytest.raises(InvalidArgument, match="for 7 input channels"):
        nhwc.NhwcConv((1, 5, 5, 7), w, None, geo, (0, 0.0, 0.0), 1)
    assert nhwc.NhwcConv((1, 5, 5, 7), w, None, geo, (0, 0.0, 0.0), 7).shape == (1, 5, 5, 7)
