"""A dropped session unlinks the graph it made for itself (InferenceSession.__del__), so
reference counting frees it at once instead of a later creation's garbage collections; a graph
someone else still holds (the caller's model, the session's plan) is left whole."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import onyx
from onyx.runtime import session
from onyx.tools.cmd_run import EXAMPLE_MODEL
from onyx.utils import gc_paused as collector_off  # (the collector off, as creation has it)


def _feed(sess) -> dict:
    rng = np.random.default_rng(0)
    (x,) = sess.get_inputs()
    return {x.name: rng.random([d if isinstance(d, int) else 1 for d in x.shape], np.float32)}


@pytest.mark.skipif(
    not session.EXACT_REFCOUNTS, reason="this interpreter's refcounts are not relied on"
)
@pytest.mark.parametrize("runs", [0, 1, 3])
@pytest.mark.parametrize("source", ["path", "bytes"])
def test_a_dropped_session_frees_its_graph_without_the_collector(source, runs):
    data = EXAMPLE_MODEL if source == "path" else open(EXAMPLE_MODEL, "rb").read()
    with collector_off():
        sess = onyx.InferenceSession(data)
        feed = _feed(sess)
        for _ in range(runs):  # (the second run generates a runner that holds the plan)
            sess.run(None, feed)
        graph = weakref.ref(sess.plan.graph)
        node = next(iter(sess.plan.graph))
        del sess
        assert graph() is None
        assert node.graph is None and not node.inputs


def test_a_held_model_keeps_its_graph():
    sess = onyx.InferenceSession(EXAMPLE_MODEL)
    model = sess._planned_model  # noqa: SLF001  (what a subclass or a tool might keep)
    n_nodes = len(model.graph)
    del sess
    assert len(model.graph) == n_nodes
    assert all(n.graph is model.graph and n.inputs for n in model.graph)


def _relu_neg_model() -> bytes:
    """A model whose steps take no context: its runner's namespace holds no bound frame, only
    the failure handler whose closure holds the plan."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.skipif(
    not session.EXACT_REFCOUNTS, reason="this interpreter's refcounts are not relied on"
)
def test_a_dropped_session_without_context_steps_frees_its_graph():
    with collector_off():
        sess = onyx.InferenceSession(_relu_neg_model())
        for _ in range(3):
            sess.run(None, _feed(sess))
        graph = weakref.ref(sess.plan.graph)
        del sess
        assert graph() is None


def test_a_held_runner_keeps_running():
    sess = onyx.InferenceSession(EXAMPLE_MODEL)
    feed = _feed(sess)
    expected = sess.run(None, feed)
    sess.run(None, feed)
    runner = sess.plan.runner()
    inputs = [feed.get(v.name) for v in sess.plan.graph.inputs]
    del sess
    gc.collect()
    np.testing.assert_array_equal(runner(inputs, None)[0], expected[0])


@pytest.mark.parametrize("exact", [False, True])
def test_where_refcounts_are_not_relied_on_the_collector_frees_it(monkeypatch, exact):
    """Only the nodes held (not the graph, which would keep it whole either way): with exact
    counts the teardown unlinks them, without it leaves the graph to the collector."""
    monkeypatch.setattr(session, "EXACT_REFCOUNTS", exact and session.EXACT_REFCOUNTS)
    if exact and not session.EXACT_REFCOUNTS:
        pytest.skip("this interpreter's reference counts are not relied on")
    with collector_off():
        sess = onyx.InferenceSession(EXAMPLE_MODEL)
        sess.run(None, _feed(sess))
        nodes = list(sess.plan.graph)
        del sess
        assert [n.graph is None for n in nodes] == [exact] * len(nodes)


def test_a_held_graph_stays_whole():
    with collector_off():
        sess = onyx.InferenceSession(EXAMPLE_MODEL)
        sess.run(None, _feed(sess))
        graph, n_nodes = sess.plan.graph, len(sess.plan.graph)
        del sess
        assert len(graph) == n_nodes and all(n.graph is graph and n.inputs for n in graph)


def test_a_held_plan_keeps_its_graph_and_runs():
    sess = onyx.InferenceSession(EXAMPLE_MODEL)
    feed = _feed(sess)
    expected = sess.run(None, feed)
    sess.run(None, feed)
    plan, n_nodes = sess.plan, len(sess.plan.graph)
    del sess
    gc.collect()
    assert len(plan.graph) == n_nodes
    assert all(n.graph is plan.graph for n in plan.graph)
    inputs = [feed[v.name] for v in plan.graph.inputs if v.name in feed]
    np.testing.assert_array_equal(plan.run(inputs, None)[0], expected[0])


@pytest.mark.parametrize("level", [0, 99])
def test_the_callers_model_stays_whole(level):
    model = onyx.load(EXAMPLE_MODEL)
    n_nodes = len(model.graph)
    options = onyx.SessionOptions()
    options.graph_optimization_level = level
    sess = onyx.InferenceSession(model, options)
    feed = _feed(sess)
    expected = sess.run(None, feed)
    del sess
    gc.collect()
    assert len(model.graph) == n_nodes
    assert all(n.graph is model.graph and n.inputs for n in model.graph)
    again = onyx.InferenceSession(model, options).run(None, feed)
    np.testing.assert_array_equal(again[0], expected[0])


def test_sessions_made_one_after_another_agree():
    feed, results = None, []
    for _ in range(3):
        sess = onyx.InferenceSession(EXAMPLE_MODEL)
        feed = feed or _feed(sess)
        results.append(sess.run(None, feed)[0])
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_the_callers_local_functions_stay_whole():
    from onnx import TensorProto, helper

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])

    fn = helper.make_function(
        "custom",
        "AddTwice",
        ["a", "b"],
        ["c"],
        [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "b"], ["c"])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("AddTwice", ["x", "y"], ["z"], domain="custom")],
        "g",
        [vi("x"), vi("y")],
        [vi("z")],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
        functions=[fn],
    )
    model = onyx.load(proto.SerializeToString())
    body = next(iter(model.functions.values())).graph
    feed = {"x": np.array([1, 2], np.float32), "y": np.array([10, 20], np.float32)}
    with collector_off():
        sess = onyx.InferenceSession(model)
        sess.run(None, feed)
        del sess
    assert len(body) == 2 and all(n.graph is body and n.inputs for n in body)
    (z,) = onyx.InferenceSession(model).run(None, feed)
    np.testing.assert_array_equal(z, feed["x"] + 2 * feed["y"])


def test_the_nodes_the_optimizer_removes_are_freed_without_the_collector():
    """A node a pass takes out (a fusion's, a no-op's) and its outputs refer to each other:
    optimize unlinks them when it is done, so reference counting frees them at once, and a
    session's creation leaves the collector nothing of them to find."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Identity", ["a"], ["b"]),  # (a no-op, bypassed, then dead code)
        helper.make_node("Neg", ["b"], ["y"]),
        helper.make_node("Neg", ["a"], ["unread"]),  # (dead code)
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    data = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    ).SerializeToString()
    model = onyx.load(data)
    removed = [n for n in model.graph if n.outputs[0].name in ("b", "unread")]
    gc.collect()
    with collector_off():
        optimized = onyx.optimize(model, in_place=True)
        assert len(optimized.graph) == 2 and optimized.graph.removed is None
        assert all(v.producer is None for n in removed for v in n.outputs)
        del removed
        assert gc.collect() == 0


def _matmul_add_model() -> bytes:
    """MatMul + Add of constants: the optimizer fuses them into onyx's MatMulAdd, adding the
    op's body to the model as a local function."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4])
    graph = helper.make_graph(nodes, "g", [x], [y], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.skipif(
    not session.EXACT_REFCOUNTS, reason="this interpreter's refcounts are not relied on"
)
def test_a_dropped_session_frees_its_fused_ops_bodies_without_the_collector():
    data = _matmul_add_model()
    onyx.InferenceSession(data)  # (the first creation's imports and caches)
    with collector_off():
        gc.collect()
        sess = onyx.InferenceSession(data)
        model = sess._planned_model  # noqa: SLF001  (to see the fusion happened)
        assert model.functions  # (the fused op's body)
        del model
        del sess
        assert gc.collect() == 0  # (nothing left to the collector: no cycle survives)


def test_captured_values_leaves_no_cycle():
    from onyx.ir.graph import captured_values

    graph = onyx.load(EXAMPLE_MODEL).graph
    with collector_off():
        gc.collect()
        assert captured_values(graph) == []
        assert gc.collect() == 0
