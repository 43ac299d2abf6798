"""ShuffleNet's channel shuffle fused into the depthwise conv after it (optimizer/shuffle.py's
ChannelShuffleConvFusion, kernels/shuffle.py, depthwise.c's shuffled plane reads)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_cnn_fusions import _ops, _run, agrees_with_onnxruntime

import onyx
from onyx.runtime import native
from onyx.runtime.native import _core

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _unit(x_shape, groups, *, stride=1, activation=None, opset=13, ir3=False, extra=None):
    """A ShuffleNet unit's middle: the shuffle (Reshape -> Transpose -> Reshape) of x, then a
    3x3 depthwise conv with a bias (and ``activation`` after it)."""
    n, c, h, w = x_shape
    inits = [
        ("shape5", np.array([n, groups, c // groups, h, w], np.int64)),
        ("shape4", np.array([n, c, h, w], np.int64)),
        ("w", RNG.standard_normal((c, 1, 3, 3)).astype(np.float32)),
        ("b", RNG.standard_normal(c).astype(np.float32)),
    ]
    last = "y" if activation is None else "c"
    nodes = [
        helper.make_node("Reshape", ["x", "shape5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=extra or [0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t5", "shape4"], ["s"]),
        helper.make_node(
            "Conv", ["s", "w", "b"], [last], group=c, kernel_shape=[3, 3], pads=[1] * 4,
            strides=[stride] * 2,
        ),
    ]  # fmt: skip
    if activation is not None:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(a, k) for k, a in inits],
    )  # fmt: skip
    if ir3:  # (onnx's light ShuffleNet: IR 3, its initializers listed as inputs too; its
        weights = inits.pop(2)[1]  # weights made by nodes: a Constant here)
        del graph.initializer[2]
        graph.node.insert(
            0, helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(weights))
        )
        graph.input.extend(
            helper.make_tensor_value_info(k, numpy_helper.from_array(a).data_type, a.shape)
            for k, a in inits
        )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir3:
        m.ir_version = 3
    return m.SerializeToString()


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize(
    "x_shape,groups,stride,activation,opset,ir3",
    [((1, 112, 56, 56), 4, 2, None, 9, True), ((1, 136, 28, 28), 4, 1, None, 9, True),
     ((2, 48, 9, 11), 3, 1, "Relu", 13, False), ((1, 24, 7, 7), 8, 2, "Relu", 13, False),
     ((1, 16, 5, 5), 2, 1, None, 13, False)],
)  # fmt: skip
def test_channel_shuffle_conv_same_bits(
    monkeypatch, x_shape, groups, stride, activation, opset, ir3, numpy_path
):
    """Reshape -> Transpose -> Reshape -> depthwise conv becomes ai.onyx ChannelShuffleConv:
    the unfused graph's bits (native: the conv reads the planes shuffled; numpy: the
    shuffle's copy), onnxruntime's values, and the saved model (a model-local function)
    checks and runs in onnxruntime."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    m = _unit(x_shape, groups, stride=stride, activation=activation, opset=opset, ir3=ir3)
    ops = _ops(m)
    assert ops == ["ChannelShuffleConv"], ops
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    s = onyx.InferenceSession(m)
    got = s.run(None, feeds)[0]
    assert np.array_equal(s.run(None, feeds)[0], got)  # (the bound call's second run)
    apart = _run(m, feeds, ["ChannelShuffleConvFusion"])
    np.testing.assert_array_equal(got.view(np.uint32), apart.view(np.uint32))
    agrees_with_onnxruntime(m, feeds, got, 1e-5)


def test_channel_shuffle_conv_binds_and_checks_a_fed_shape():
    """An IR 3 model's shape initializer is an input a caller may feed: the step binds (the
    native conv set up once), and a fed shape that makes the same shuffle runs it."""
    from onyx.runtime.plan import BoundCall

    x_shape = (1, 24, 8, 8)
    m = _unit(x_shape, 4, opset=9, ir3=True)
    s = onyx.InferenceSession(m)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    want = s.run(None, {"x": x})[0]
    steps = [st.fn for st in s._plan.steps if isinstance(st.fn, BoundCall)]  # noqa: SLF001
    assert len(steps) == 1 and steps[0].make is not None
    if native.avx512():
        assert None not in steps[0].calls.values() and steps[0].calls
    same = np.array([0, 4, -1, 0, 8], np.int64)  # (copy N, 4 groups, infer C / 4, copy H)
    got = s.run(None, {"x": x, "shape5": same})[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize("disabled", [(), ("ChannelShuffleConvFusion",)])
@pytest.mark.parametrize(
    "fed,problem",
    [([1, 3, 8, 8, 8], "1, 3, 8, 8, 8"), ([1, 4, 6, 4, 16], "1, 4, 6, 4, 16"),
     ([1, 4, 6, 8, 0], "has 0 at index 4")],
)  # fmt: skip
def test_fed_shape_that_shuffles_otherwise_is_refused_fused_or_not(
    monkeypatch, fed, problem, disabled, numpy_path
):
    """A fed shape (an IR 3 model's initializer, a constant to inference) that reshapes X
    another way than the model's: the unfused graph refuses it (its first run's output check:
    r5's dims were inferred from the initializer) and so does ChannelShuffleConv (it had
    computed it), native or numpy; a 0 past X's rank is named as such, not an IndexError."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    x = RNG.standard_normal((1, 24, 8, 8)).astype(np.float32)
    so = onyx.SessionOptions()
    so.disabled_optimizers = list(disabled)
    s = onyx.InferenceSession(_unit((1, 24, 8, 8), 4, opset=9, ir3=True), so)
    ops = [n.op_type for n in s._plan.graph]  # noqa: SLF001
    assert ("ChannelShuffleConv" in ops) == (not disabled)
    with pytest.raises(onyx.OnyxError, match=problem) as e:
        s.run(None, {"x": x, "shape5": np.array(fed, np.int64)})
    assert "IndexError" not in str(e.value)


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize("fed", [[1, -1, 6, 8, 8], [1, 4, 6, 8, -1], [0, 4, 6, -1, 8]])
def test_fed_shape_that_shuffles_the_same_way_runs(monkeypatch, fed, numpy_path):
    """A fed shape whose -1 or 0 lies elsewhere than the model's, resolving to the same dims
    (1, 4, 6, 8, 8): the unfused graph runs it, and so does ChannelShuffleConv, to the same
    bits (its groups check had read shuffle_groups, which resolves a -1 at index 2 only)."""
    if numpy_path:
        monkeypatch.setattr(_core, "lib", None)
    x = RNG.standard_normal((1, 24, 8, 8)).astype(np.float32)
    m = _unit((1, 24, 8, 8), 4, opset=9, ir3=True)
    so = onyx.SessionOptions()
    so.disabled_optimizers = ["ChannelShuffleConvFusion"]
    feeds = {"x": x, "shape5": np.array(fed, np.int64)}
    want = onyx.InferenceSession(m, so).run(None, feeds)[0]
    s = onyx.InferenceSession(m)
    assert "ChannelShuffleConv" in [n.op_type for n in s._plan.graph]  # noqa: SLF001
    got = s.run(None, feeds)[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_channel_shuffle_conv_leaves_other_patterns():
    """Another permutation, a shuffle read elsewhere too, or a conv that is not depthwise
    stay as they are."""
    assert "ChannelShuffleConv" not in _ops(_unit((1, 8, 5, 5), 2, extra=[0, 1, 2, 4, 3]))
    shared = onnx.load_from_string(_unit((1, 8, 5, 5), 2))
    shared.graph.output.append(helper.make_tensor_value_info("s", F, None))
    assert "ChannelShuffleConv" not in _ops(shared.SerializeToString())
    dense = onnx.load_from_string(_unit((1, 8, 5, 5), 2))
    conv = dense.graph.node[-1]
    conv.ClearField("attribute")
    conv.attribute.extend([helper.make_attribute("pads", [1] * 4)])
    dense.graph.initializer[2].CopyFrom(
        numpy_helper.from_array(RNG.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    )
    assert "ChannelShuffleConv" not in _ops(dense.SerializeToString())


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("x_shape,groups", [((1, 112, 28, 28), 4), ((2, 48, 7, 9), 3)])
def test_native_depthwise_reads_planes_shuffled(x_shape, groups):
    """depthwise.c with a shuffle of g groups: the bits of the plain conv of the shuffled
    copy; a shuffle that does not divide the channels is refused."""
    from onyx.errors import OnyxError

    n, c, h, w = x_shape
    x = RNG.standard_normal(x_shape).astype(np.float32)
    wt = RNG.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    shuffled = np.ascontiguousarray(
        x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4)
    ).reshape(x_shape)
    geo = ((h, w), (1, 1), (1, 1), (1, 1))
    want = native.depthwise_setup(x_shape, wt, *geo)(shuffled, b)
    got = native.depthwise_setup(x_shape, wt, *geo, shuffle=groups)(x, b)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(OnyxError, match="shuffle groups"):
        native.depthwise_setup(x_shape, wt, *geo, shuffle=c + 1)


@pytest.mark.parametrize("disabled", [(), ("ChannelShuffleConvFusion",)])
def test_fed_bias_of_another_size_is_refused(disabled):
    """An IR 3 model's bias is an input a caller may feed; declared of a symbolic size, a bias
    of other than C values is an OnyxError (the native depthwise conv read past its end,
    fused or not, and returned garbage)."""
    model = onnx.load_from_string(_unit((1, 24, 8, 8), 4, opset=9, ir3=True))
    b_input = next(i for i in model.graph.input if i.name == "b")
    b_input.type.tensor_type.shape.dim[0].dim_param = "n"
    m = model.SerializeToString()
    x = RNG.standard_normal((1, 24, 8, 8)).astype(np.float32)
    so = onyx.SessionOptions()
    so.disabled_optimizers = list(disabled)
    s = onyx.InferenceSession(m, so)
    s.run(None, {"x": x})
    for size in (1, 3, 48):
        with pytest.raises(onyx.OnyxError):
            s.run(None, {"x": x, "b": np.ones(size, np.float32)})
