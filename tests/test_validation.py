"""Validate before transforming: InferenceSession and onyx.optimize refuse a malformed model
with one ValidationError naming the rule, before any pass or plan touches it; onyx.check and
infer_shapes report such models without raising anything but OnyxErrors."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onyx
from onyx.validation import ValidationWarning, validate


def vi(name, elem=T.FLOAT, shape=(1, 4)):
    return h.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), functions=(), sparse=(), opset=17) -> bytes:
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits), sparse_initializer=list(sparse))
    ops = [h.make_opsetid("", opset), h.make_opsetid("local", 1)]
    m = h.make_model(g, opset_imports=ops, functions=list(functions))
    m.ir_version = 8
    return m.SerializeToString()


def recursive_functions():
    ops = [h.make_opsetid("", 17), h.make_opsetid("local", 1)]
    f = h.make_function(
        "local", "F", ["a"], ["b"], [h.make_node("G", ["a"], ["b"], domain="local")], ops
    )
    g = h.make_function(
        "local", "G", ["a"], ["b"], [h.make_node("F", ["a"], ["b"], domain="local")], ops
    )
    return model(
        [h.make_node("F", ["x"], ["y"], domain="local")], [vi("x")], [vi("y")], functions=[f, g]
    )


def sparse_out_of_range():
    values = nh.from_array(np.array([1.0, 2.0], np.float32), "s")
    sp = h.make_sparse_tensor(values, nh.from_array(np.array([3, 99], np.int64), "si"), [4])
    return model(
        [h.make_node("Add", ["x", "s"], ["y"])],
        [vi("x", shape=(4,))],
        [vi("y", shape=(4,))],
        sparse=[sp],
    )


def tensor_attribute_without_tensor():
    n = h.make_node("Constant", [], ["y"])
    a = n.attribute.add()
    a.name, a.type = "value", onnx.AttributeProto.TENSOR
    return model([n], [], [vi("y", shape=None)])


def constant_of_float():
    n = h.make_node("Constant", [], ["y"], value_float=1.0)
    n.attribute[0].name = "value"
    return model([n], [], [vi("y", shape=None)])


def no_graph():
    m = onnx.ModelProto()
    m.ir_version = 8
    m.opset_import.add().version = 17
    return m.SerializeToString()


def axes(values):
    return [nh.from_array(np.array(values, np.int64), "ax")]


CASES = {
    "recursive_functions": ("function-recursion", recursive_functions),
    "sparse_out_of_range": ("sparse-tensor", sparse_out_of_range),
    "cast_to_no_type": ("attribute-value", lambda: model([h.make_node("Cast", ["x"], ["y"], to=-1000)], [vi("x")], [vi("y")])),
    "conv_without_weights": ("missing-input", lambda: model([h.make_node("Conv", ["x", ""], ["y"])], [vi("x", shape=(1, 1, 4, 4))], [vi("y", shape=None)])),
    "sum_with_an_omitted_entry": ("missing-input", lambda: model([h.make_node("Sum", ["x", "", "x"], ["y"])], [vi("x")], [vi("y")])),
    "concat_with_an_omitted_entry": ("missing-input", lambda: model([h.make_node("Concat", ["", "x"], ["y"], axis=0)], [vi("x")], [vi("y", shape=None)])),
    "cycle": ("cycle", lambda: model([h.make_node("Add", ["x", "b"], ["a"]), h.make_node("Relu", ["a"], ["b"])], [vi("x")], [vi("a")])),
    "lstm_hidden_size_float": ("attribute-type", lambda: model([h.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2.5)], [vi("x", shape=(1, 1, 4)), vi("w", shape=(1, 8, 4)), vi("r", shape=(1, 8, 2))], [vi("y", shape=None)])),
    "shape_start_list": ("attribute-type", lambda: model([h.make_node("Shape", ["x"], ["y"], start=[1, 2])], [vi("x")], [vi("y", T.INT64, None)])),
    "leakyrelu_alpha_string": ("attribute-type", lambda: model([h.make_node("LeakyRelu", ["x"], ["y"], alpha="abc")], [vi("x")], [vi("y")])),
    "transpose_perm_float": ("attribute-type", lambda: model([h.make_node("Transpose", ["x"], ["y"], perm=[1.0, 0.0])], [vi("x")], [vi("y", shape=None)])),
    "tensor_attribute_without_tensor": ("tensor-type", tensor_attribute_without_tensor),
    "constant_of_float": ("attribute-type", constant_of_float),
    "input_declared_twice": ("ssa", lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x"), vi("x")], [vi("y")])),
    "input_elem_type_0": ("elem-type", lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x", 0)], [vi("y")])),
    "no_graph": ("graph", no_graph),
    "if_without_branches": ("attribute-required", lambda: model([h.make_node("If", ["c"], ["y"])], [vi("c", T.BOOL, ())], [vi("y", shape=None)])),
    "einsum_without_equation": ("attribute-required", lambda: model([h.make_node("Einsum", ["x"], ["y"])], [vi("x")], [vi("y", shape=None)])),
    "layernorm_axis_min_int64": ("attribute-value", lambda: model([h.make_node("LayerNormalization", ["x", "sc"], ["y"], axis=-(2**63))], [vi("x")], [vi("y", shape=None)], [nh.from_array(np.ones(4, np.float32), "sc")])),
    "pool_dilations_near_2_32": ("attribute-value", lambda: model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2**32 - 5] * 2, auto_pad="SAME_UPPER")], [vi("x", shape=(1, 1, 5, 5))], [vi("y", shape=None)])),
    "pool_kernel_2_63": ("attribute-value", lambda: model([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2**63 - 1])], [vi("x", shape=(1, 1, 5, 5))], [vi("y", shape=None)])),
    "auto_pad_byte_flipped": ("attribute-value", lambda: model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], auto_pad=b"\xffSAME_UPPER")], [vi("x", shape=(1, 1, 4, 4))], [vi("y", shape=None)])),
    "split_num_outputs_2_31": ("attribute-value", lambda: model([h.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2**31 - 1)], [vi("x")], [vi("a", shape=None), vi("b", shape=None)], opset=18)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_session_and_optimize_refuse_before_transforming(name):
    rule, make = CASES[name]
    data = make()
    with pytest.raises(onyx.ValidationError) as info:
        onyx.InferenceSession(data)
    assert rule in {p.rule for p in info.value.problems}, info.value
    with pytest.raises(onyx.ValidationError):
        onyx.optimize(onyx.loads(data))
    with pytest.raises(onyx.ValidationError):
        onyx.check(data, full=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_inference_raises_only_onyx_errors(name):
    try:
        onyx.infer_shapes(onyx.loads(CASES[name][1]()))
    except onyx.OnyxError:
        pass


def test_inference_crashes_become_problems():
    data = model(
        [h.make_node("Unsqueeze", ["x", "ax"], ["y"])],
        [vi("x")],
        [vi("y", shape=None)],
        axes([0, 0]),
    )
    with pytest.raises(onyx.ValidationError, match="Unsqueeze"):
        onyx.check(data, full=True)


def test_leniencies_are_warnings():
    data = model(
        [h.make_node("Relu", ["a"], ["y"]), h.make_node("Abs", ["x"], ["a"])],
        [vi("x", shape=(-1, 4))],
        [vi("y", shape=(-1, 4))],
    )
    with pytest.raises(onyx.ValidationError) as info:
        onyx.check(data)
    assert {p.rule for p in info.value.problems} == {"topological-order", "negative-dim"}
    with pytest.warns(ValidationWarning, match="topological-order"):
        validate(onyx.loads(data))


def test_a_malformed_file_is_a_problem_of_check():
    with pytest.raises(onyx.ValidationError, match=r"\[format\]"):
        onyx.check(b"\x08\x99garbage")


def test_a_ragged_feed_is_an_invalid_argument():
    data = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", shape=None)], [vi("y", shape=None)])
    with pytest.raises(onyx.InvalidArgument, match="'x'"):
        onyx.InferenceSession(data).run(None, {"x": [[1, 2], [3]]})


F32 = np.float32
SHAPE_ERRORS = {
    "col2im_blocks": ("Col2Im", {"x": np.ones((1, 4, 5), F32), "i": np.array([3, 3]), "b": np.array([2, 2])}, r"Col2Im: input \[1, 4, 5\] must be \[N, C \* 4, 4\]"),
    "col2im_block_of_zero": ("Col2Im", {"x": np.ones((1, 4, 4), F32), "i": np.array([3, 3]), "b": np.array([0, 2])}, "Col2Im: input"),
    "grid_sample_coordinates": ("GridSample", {"x": np.ones((1, 1, 4, 4), F32), "g": np.ones((1, 2, 2, 3), F32)}, r"grid is \[1, 2, 2, 3\].* must be \[1, <2 output sizes>, 2\]"),
    "grid_sample_batch": ("GridSample", {"x": np.ones((1, 1, 4, 4), F32), "g": np.ones((2, 2, 2, 2), F32)}, "GridSample: grid is"),
    "affine_grid_theta": ("AffineGrid", {"t": np.ones((1, 3, 3), F32), "s": np.array([1, 1, 4, 4])}, r"theta of shape \[N, 2, 3\].*theta is \[1, 3, 3\]"),
    "affine_grid_size": ("AffineGrid", {"t": np.ones((1, 2, 3), F32), "s": np.array([1, 1, 4])}, r"AffineGrid: size \[1, 1, 4\]"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SHAPE_ERRORS))
def test_shape_errors_say_what_the_op_needs(name):
    """Not numpy's words ("cannot reshape array of size 6 into shape (1,1,2,2)", a matmul
    gufunc signature): the input the op needed, in the node's RuntimeFailure."""
    op, feeds, message = SHAPE_ERRORS[name]
    feeds = {k: v.astype(np.int64) if v.dtype.kind == "i" else v for k, v in feeds.items()}
    elem = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64}
    inputs = [vi(k, elem[v.dtype], None) for k, v in feeds.items()]
    data = model([h.make_node(op, list(feeds), ["y"])], inputs, [vi("y", shape=None)], opset=20)
    with pytest.raises(onyx.RuntimeFailure, match=message):
        onyx.InferenceSession(data).run(None, feeds)


@pytest.mark.parametrize(
    "channels, group, per_channel", [(3, 1, False), (2, 1, True), (2, 2, False)]
)
def test_qlinearconv_of_an_empty_batch_is_empty(channels, group, per_channel):
    m = 4 if group == 1 else channels
    wshape = (m, channels // group, 3, 3)
    scale = np.full(m, 0.2, np.float32) if per_channel else np.array(0.2, np.float32)
    zero = np.zeros(m, np.int8) if per_channel else np.array(0, np.int8)
    inits = [nh.from_array(np.array(0.1, np.float32), "xs"), nh.from_array(np.array(0, np.uint8), "xz"),
             nh.from_array(np.ones(wshape, np.int8), "w"), nh.from_array(scale, "ws"),
             nh.from_array(zero, "wz"), nh.from_array(np.array(0.3, np.float32), "ys"),
             nh.from_array(np.array(0, np.uint8), "yz")]  # fmt: skip
    node = h.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], group=group
    )
    data = model(
        [node], [vi("x", T.UINT8, (None, channels, 5, 5))], [vi("y", T.UINT8, None)], inits
    )
    y = onyx.InferenceSession(data).run(None, {"x": np.zeros((0, channels, 5, 5), np.uint8)})[0]
    assert y.shape == (0, m, 3, 3) and y.dtype == np.uint8


def test_svm_regressor_rbf_with_infinite_features_gives_the_intercept():
    node = h.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", kernel_type="RBF",
                       kernel_params=[0.5, 0.0, 3.0], support_vectors=[1.0, 2.0, 3.0, 4.0],
                       coefficients=[0.5, -0.25], rho=[0.1], n_supports=2)  # fmt: skip
    g = h.make_graph([node], "g", [vi("x", shape=(None, 2))], [vi("y", shape=None)])
    ops = [h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)]
    data = h.make_model(g, opset_imports=ops).SerializeToString()
    x = np.array([[np.inf, 1.0], [-np.inf, 0.0], [np.inf, -np.inf], [1.0, 2.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = onyx.InferenceSession(data).run(None, {"x": x})[0].ravel()
    np.testing.assert_allclose(y[:3], 0.1, rtol=1e-6)  # onnxruntime's result
    assert np.isfinite(y).all()


def test_a_string_tensor_in_external_data_is_refused(tmp_path):
    t = onnx.TensorProto(name="s", data_type=T.STRING, dims=[1])
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="s.bin")
    (tmp_path / "s.bin").write_bytes(b"abc")
    g = h.make_graph(
        [h.make_node("Identity", ["s"], ["y"])], "g", [], [vi("y", T.STRING, None)], [t]
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(onyx.FormatError, match="STRING"):
        onyx.load(path)


def test_an_op_type_that_is_not_utf8_is_an_unknown_op():
    """A flipped bit in a node's op_type left bytes that are not UTF-8 (read as bytes): the
    schema look-up called bytes.encode (an AttributeError from check). Now no operator's."""
    data = model([h.make_node("Reluzz", ["x"], ["y"])], [vi("x")], [vi("y")])
    data = data.replace(b"Reluzz", b"Relu\xff\xfe")
    with pytest.raises(onyx.ValidationError) as info:
        onyx.check(data, full=True)
    assert "unknown-op" in {p.rule for p in info.value.problems}, info.value
    with pytest.raises(onyx.OnyxError):
        onyx.InferenceSession(data)
