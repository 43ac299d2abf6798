"""The execution plan's generated runner: values, frees, outputs, failures, and purity."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime.registry import lookup

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def unoptimized(model):
    so = onyx.SessionOptions()
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onyx.InferenceSession(model, so)


@pytest.fixture
def chain():
    """x and the initializer w flow through views (Reshape, Identity, Squeeze, Slice) into
    element-wise kernels and out as outputs."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])
    return make_model(
        [
            helper.make_node("Identity", ["x"], ["xi"], name="ident"),
            helper.make_node("Reshape", ["xi", "shape"], ["xr"], name="reshape"),
            helper.make_node("Add", ["xr", "w"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "a"], ["m"], name="mul"),
            helper.make_node("Relu", ["w"], ["rw"], name="relu"),
            helper.make_node("Sub", ["m", "rw"], ["y"], name="sub"),
            helper.make_node("Identity", ["w"], ["w_out"], name="w_out"),
        ],
        [vi("x", F, [2, 3])],
        [vi("y", F, [3, 2]), vi("xr", F, [3, 2]), vi("w_out", F, [3, 2])],
        [numpy_helper.from_array(np.arange(-3, 3, dtype=np.float32).reshape(3, 2), "w"), shape],
    )


def test_feeds_and_initializers_are_never_modified(chain):
    for sess in (onyx.InferenceSession(chain), unoptimized(chain)):
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        x_before = x.copy()
        first = sess.run(None, {"x": x})
        np.testing.assert_array_equal(x, x_before)
        for out in first:  # the caller owns its outputs: writing them changes no later run
            out[...] = 99
        second = sess.run(None, {"x": x})
        w = np.arange(-3, 3, dtype=np.float32).reshape(3, 2)
        np.testing.assert_array_equal(second[0], (x.reshape(3, 2) + w) ** 2 - np.maximum(w, 0))
        np.testing.assert_array_equal(second[1], x.reshape(3, 2))
        np.testing.assert_array_equal(second[2], w)


def test_output_subsets_and_intermediates(chain):
    sess = onyx.InferenceSession(chain)
    x = np.ones((2, 3), np.float32)
    full = sess.run(None, {"x": x})
    (m,) = sess.run(["m"], {"x": x})
    y, a = sess.run(["y", "a"], {"x": x})
    np.testing.assert_array_equal(y, full[0])
    np.testing.assert_array_equal(m, a * a)
    (w,) = sess.run(["w_out"], {"x": x})
    np.testing.assert_array_equal(w, full[2])


def test_graph_input_and_initializer_as_outputs():
    model = make_model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [vi("x", F, [2])],
        [vi("x", F, [2]), vi("c", F, [2]), vi("y", F, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float32), "c")],
    )
    x = np.array([3, 4], np.float32)
    got = onyx.InferenceSession(model).run(None, {"x": x})
    for g, want in zip(got, [x, [1, 2], -x]):
        np.testing.assert_array_equal(g, want)


def test_multi_output_node_with_only_its_second_output_used():
    model = make_model(
        [
            helper.make_node("Split", ["x"], ["", "b"], axis=0, num_outputs=2),
            helper.make_node("TopK", ["x", "k"], ["", "idx"]),
            helper.make_node("Neg", ["b"], ["y"]),
        ],
        [vi("x", F, [4])],
        [vi("y", F, [2]), vi("idx", TensorProto.INT64, [1])],
        [numpy_helper.from_array(np.array([1], np.int64), "k")],
        opset=18,
    )
    y, idx = unoptimized(model).run(None, {"x": np.array([1, 5, 3, 4], np.float32)})
    np.testing.assert_array_equal(y, [-3, -4])
    np.testing.assert_array_equal(idx, [1])


@pytest.mark.parametrize("optimize", [True, False])
def test_failure_names_the_step_and_its_inputs(optimize):
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("MatMul", ["r", "w"], ["y"], name="bad_mm"),
            helper.make_node("Neg", ["y"], ["z"], name="after"),
        ],
        [vi("x", F, [2, 3])],
        [vi("z", F, None)],
        [numpy_helper.from_array(np.ones((4, 5), np.float32), "w")],
    )
    sess = onyx.InferenceSession(model) if optimize else unoptimized(model)
    with pytest.raises(
        onyx.RuntimeFailure, match=r"'bad_mm' \(MatMul\).*float32\[2, 3\].*float32\[4, 5\]"
    ):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})


def test_profiling_gives_one_event_per_node_per_run(chain, tmp_path):
    so = onyx.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onyx.InferenceSession(chain, so)
    plain = unoptimized(chain)
    x = np.ones((2, 3), np.float32)
    for _ in range(2):
        for got, want in zip(sess.run(None, {"x": x}), plain.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)
    events = json.loads(open(sess.end_profiling()).read())
    names = [e["name"] for e in events if e["cat"] == "Node"]
    assert names == ["ident", "reshape", "add", "mul", "relu", "sub", "w_out"] * 2


def test_if_branch_reads_values_produced_before_it():
    then_g = helper.make_graph(
        [helper.make_node("Add", ["h", "h"], ["t"])], "then", [], [vi("t", F, [2])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["e"])], "else", [], [vi("e", F, [2])]
    )
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["h"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        [vi("x", F, [2]), vi("c", TensorProto.BOOL, [])],
        [vi("y", F, [2])],
    )
    sess = unoptimized(model)
    x = np.array([-1, 2], np.float32)
    (y,) = sess.run(None, {"x": x, "c": np.array(True)})
    np.testing.assert_array_equal(y, [0, 4])
    (y,) = sess.run(None, {"x": x, "c": np.array(False)})
    np.testing.assert_array_equal(y, [0, -2])


def test_context_kernels_without_subgraphs_make_no_frame():
    """MaxPool's kernel takes a context but runs no subgraph: its runner makes no frame per
    run (its context is made once, frame None) and gives the same values; an If beside it
    makes the frame again."""
    pool = helper.make_node(
        "MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"
    )
    model = make_model(
        [pool, helper.make_node("Relu", ["p"], ["y"], name="relu")],
        [vi("x", F, [1, 1, 4, 4])],
        [vi("y", F, [1, 1, 2, 2])],
    )
    sess = unoptimized(model)
    # (else this test tests nothing: a context kernel, bound with its context made once)
    assert lookup("MaxPool", "", 17).takes_ctx
    x = np.arange(-8, 8, dtype=np.float32).reshape(1, 1, 4, 4)
    for _ in range(2):
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, [[[[0, 0], [5, 7]]]])
    assert "_frame" not in sess.plan.runner(None).__globals__

    then_g = helper.make_graph([helper.make_node("Neg", ["p"], ["t"])], "then", [], [])
    then_g.output.extend([vi("t", F, [1, 1, 2, 2])])
    iffy = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)
    model = make_model(
        [pool, iffy],
        [vi("x", F, [1, 1, 4, 4]), vi("c", TensorProto.BOOL, [])],
        [vi("y", F, [1, 1, 2, 2])],
    )
    sess = unoptimized(model)
    (y,) = sess.run(None, {"x": x, "c": np.array(True)})
    np.testing.assert_array_equal(y, [[[[3, 1], [-5, -7]]]])
    assert "_frame" in sess.plan.runner(None).__globals__


def test_nested_subgraphs_read_outer_values_through_context_kernels():
    """A Loop inside an If's branch reads a value of the main graph and one of the branch,
    each made by a context kernel (MaxPool) that runs no subgraph; compared with
    onnxruntime, twice (the checked run and the generated runner)."""
    ort = pytest.importorskip("onnxruntime")
    shape = [1, 1, 2, 2]
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc", "p"], ["s"]),  # p: the main graph's
            helper.make_node("Mul", ["s", "q"], ["acc_out"]),  # q: the branch's
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", F, shape)],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, shape)],
    )
    then_g = helper.make_graph(
        [
            helper.make_node("MaxPool", ["x"], ["q0"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Sigmoid", ["q0"], ["q"]),
            helper.make_node("Loop", ["n", "", "p"], ["t"], body=body),
        ],
        "then",
        [],
        [vi("t", F, shape)],
    )
    else_g = helper.make_graph([helper.make_node("Neg", ["p"], ["e"])], "else", [], [])
    else_g.output.extend([vi("e", F, shape)])
    model = make_model(
        [
            helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        [vi("x", F, [1, 1, 4, 4]), vi("c", TensorProto.BOOL, []), vi("n", TensorProto.INT64, [])],
        [vi("y", F, shape)],
    )
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 1, 4, 4)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for sess in (unoptimized(model), onyx.InferenceSession(model)):
        for c in (True, False, True):
            feeds = {"x": x, "c": np.array(c), "n": np.array(3, np.int64)}
            (y,) = sess.run(None, feeds)
            np.testing.assert_allclose(y, ref.run(None, feeds)[0], rtol=1e-6)


def test_a_functions_body_with_a_subgraph_reading_its_values():
    """A model-local function's body: a context kernel (MaxPool), then an If whose branches
    read its result (the body's frame, its parent None); called twice in the main graph."""
    ort = pytest.importorskip("onnxruntime")
    shape = [1, 1, 2, 2]
    then_g = helper.make_graph([helper.make_node("Neg", ["p"], ["t"])], "then", [], [])
    then_g.output.extend([vi("t", F, shape)])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["p"], ["e"])], "else", [], [])
    else_g.output.extend([vi("e", F, shape)])
    fn = helper.make_function(
        "local",
        "PoolIf",
        ["x", "c"],
        ["y"],
        [
            helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("PoolIf", ["x", "c"], ["y1"], domain="local"),
            helper.make_node("Not", ["c"], ["nc"]),
            helper.make_node("PoolIf", ["x", "nc"], ["y2"], domain="local"),
        ],
        "g",
        [vi("x", F, [1, 1, 4, 4]), vi("c", TensorProto.BOOL, [])],
        [vi("y1", F, shape), vi("y2", F, shape)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    m = helper.make_model(graph, opset_imports=opsets, functions=[fn])
    m.ir_version = 8
    model = m.SerializeToString()
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 1, 4, 4)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for sess in (unoptimized(model), onyx.InferenceSession(model)):
        for c in (True, False, True):
            feeds = {"x": x, "c": np.array(c)}
            for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
                np.testing.assert_allclose(got, want, rtol=1e-6)


def test_op_traits_live_with_the_kernel():
    from onyx.runtime.registry import op, traits

    assert traits("Relu").elementwise and traits("Gelu", "com.microsoft").elementwise
    assert not traits("MatMul").elementwise and traits("Einsum").threads == "blas"
    assert not traits("RandomNormal").deterministic and traits("Add").deterministic
    assert traits("Conv").threads == "pool" and traits("NoSuchOp") == traits("Identity", "x")
    with pytest.raises(TypeError, match="unknown trait"):
        op("Relu", since=999, elementwise_=True)


def _relu_tanh_session():
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="the_relu"),
            helper.make_node("Tanh", ["r"], ["y"], name="the_tanh"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onyx.InferenceSession(model.SerializeToString())


def _break(sess, op_type, fn):
    for step in sess.plan.default_schedule:
        if step.node.op_type == op_type:
            step.fn = fn


def test_first_run_checks_outputs_against_inferred_types():
    """A kernel whose result contradicts what shape inference proved is named on the first
    run of a shape signature (here its dtype, then its shape)."""
    sess = _relu_tanh_session()
    _break(sess, "Relu", lambda x: np.maximum(x, 0).astype(np.float64))
    x = np.ones((2, 3), np.float32)
    with pytest.raises(onyx.errors.RuntimeFailure, match=r"the_relu.*Relu.*'r' is float64\[2, 3\]"):
        sess.run(None, {"x": x})
    _break(sess, "Relu", lambda x: np.maximum(x, 0)[:, :2])
    with pytest.raises(onyx.errors.RuntimeFailure, match=r"the_relu.*float32\[2, 2\].*proved"):
        sess.run(None, {"x": x})


def test_the_check_runs_once_per_shape_signature():
    sess = _relu_tanh_session()
    x = np.ones((2, 3), np.float32)
    sess.run(None, {"x": x})
    _break(sess, "Relu", lambda x: np.maximum(x, 0).astype(np.float64))
    sess.run(None, {"x": x})  # checked before: the generated runner, no check
    with pytest.raises(onyx.errors.RuntimeFailure, match="the_relu"):
        sess.run(None, {"x": np.ones((5, 3), np.float32)})  # a new signature is checked


def test_the_check_says_the_dims_inference_proved():
    sess = _relu_tanh_session()
    _break(sess, "Relu", lambda x: np.maximum(x, 0).astype(np.float64))
    with pytest.raises(onyx.errors.RuntimeFailure, match=r"proved tensor\(float\)\[n,3\]$"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})


def test_as_array_result_copies_maps_and_wraps_numpy_scalars():
    """A map of Python numbers (ZipMap's rows) comes back as a new dict of the same values;
    one holding numpy scalars or arrays still has them converted and owned."""
    from onyx.runtime.plan import as_array_result

    row = {"a": 0.25, "b": 1}
    got = as_array_result([row])
    assert got == [row] and got[0] is not row
    frozen = np.arange(2.0)
    frozen.flags.writeable = False
    mixed = as_array_result({1: np.float32(2), 2: frozen})
    assert isinstance(mixed[1], np.ndarray) and mixed[1].shape == () and mixed[1] == 2
    assert mixed[2] is not frozen and mixed[2].flags.writeable


def shape_arithmetic_model(x_shape=(3, "batch", 4)):
    """An RNN export's initial state: zeros of [1, batch, 4] built from x's shape at run time,
    beside a step on x's data; the shape chain is also an output."""
    i64 = TensorProto.INT64
    consts = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "lead"),
        numpy_helper.from_array(np.array([4], np.int64), "width"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
    ]
    return make_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "axes"], ["b1"]),
            helper.make_node("Concat", ["lead", "b1", "width"], ["dims"], axis=0),
            helper.make_node("ConstantOfShape", ["dims"], ["zeros"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("ReduceSum", ["r", "axes"], ["rs"], keepdims=1),
            helper.make_node("Add", ["zeros", "rs"], ["y"]),
        ],
        [vi("x", F, x_shape)],
        [vi("y", F, None), vi("dims", i64, [3])],
        consts,
    )


def test_shape_arithmetic_runs_once_per_input_shape():
    sess = unoptimized(shape_arithmetic_model())
    for batch in (2, 5, 2):
        x = np.arange(3 * batch * 4, dtype=np.float32).reshape(3, batch, 4) - 20
        for _ in range(3):
            y, dims = sess.run(None, {"x": x})
            np.testing.assert_array_equal(y, np.maximum(x, 0).sum(0, keepdims=True))
            assert dims.tolist() == [1, batch, 4]
            dims[:] = -1  # the caller owns its outputs: no later run sees this
            y[:] = -1
    memo = sess.plan.runner().__globals__["_memo"]
    assert sorted(k[0] for k in memo) == [(3, 2, 4), (3, 5, 4)]
    assert "onyx.runtime.shape_memo" in sys.modules  # (imported for a schedule with Shape)
    assert all(not v.flags.writeable for values in memo.values() for v in values)


def test_shape_memo_holds_no_large_values(monkeypatch):
    from onyx.runtime import shape_memo

    monkeypatch.setattr(shape_memo, "MEMO_BYTES", 8)  # dims (24 bytes) exceed it
    sess = unoptimized(shape_arithmetic_model())
    x = np.ones((3, 2, 4), np.float32)
    for _ in range(2):
        assert sess.run(None, {"x": x})[1].tolist() == [1, 2, 4]
    assert sess.plan.runner().__globals__["_memo"] == {}


def test_shape_memo_failure_names_its_step():
    sess = unoptimized(shape_arithmetic_model(x_shape=None))  # (any rank gets to the run)
    with pytest.raises(onyx.OnyxError, match="Gather"):
        sess.run(None, {"x": np.ones((3,), np.float32)})  # rank 1: index 1 out of range
