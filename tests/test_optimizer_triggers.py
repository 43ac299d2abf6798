"""The pass scheduler's op-type precheck (pipeline.TRIGGERS): a pass whose trigger ops are
absent is skipped without a walk of the graph, and one whose trigger ops are present runs."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onyx import ir, serde
from onyx.optimizer import optimize
from onyx.optimizer.core import PassContext
from onyx.optimizer.pipeline import PIPELINE, TRIGGERS


def _model(nodes, inits=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return serde.load(model.SerializeToString())


def _ran(model) -> set[str]:
    results = []
    optimize(model, "all", for_session=True, results=results)
    return {r.name for r in results}


def test_every_trigger_names_a_pass_of_the_pipeline():
    names = {p.name for p in PIPELINE}
    assert set(TRIGGERS) <= names
    for p in PIPELINE:
        assert all(isinstance(ops, frozenset) and ops for ops in p.triggers)
        assert len(p.triggers) == len(TRIGGERS.get(p.name, ()))


def test_passes_without_their_ops_are_skipped():
    ran = _ran(_model([helper.make_node("Relu", ["x"], ["y"])]))
    assert {"ConvAddFusion", "GeluFusion", "QDQSelectorActionTransformer"}.isdisjoint(ran)
    assert "ConstantFolding" in ran  # (no trigger: always runs)


def test_passes_with_their_ops_run_and_change_the_graph():
    w = np.ones((4, 4), np.float32)
    b = np.arange(4, dtype=np.float32)
    model = _model(
        [
            helper.make_node("Identity", ["x"], ["i"]),
            helper.make_node("MatMul", ["i", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["y"]),
        ],
        [("w", w), ("b", b)],
    )
    results = []
    out = optimize(model, "all", for_session=True, results=results)
    changed = {r.name for r in results if r.changed}
    assert {"EliminateIdentity", "MatMulAddFusion"} <= changed
    assert [n.op_type for n in out.graph] == ["Gemm"]


def test_each_listed_pass_is_its_functions_name_and_level():
    """pipeline.py names each pass by "module:function" with its name and level (so that its
    module is imported only when it runs): they must be the function's own."""
    from onyx.optimizer.core import pass_of
    from onyx.optimizer.rnn import STATE_INPUTS

    for p in PIPELINE:
        marked = pass_of(p.fn)
        assert (marked.name, marked.level) == (p.name, p.level)
    assert TRIGGERS["RnnZeroInitialState"] == (tuple(STATE_INPUTS),)


def test_a_session_imports_only_the_pass_modules_it_runs():
    import subprocess
    import sys

    code = (
        "import sys, onnx\n"
        "from onnx import TensorProto, helper\n"
        "import onyx\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',\n"
        "    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 4])],\n"
        "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 4])])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
        "onyx.InferenceSession(m.SerializeToString())\n"
        "print(sorted(m for m in sys.modules if m.startswith('onyx.optimizer.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout
    assert "onyx.optimizer.fold" in loaded  # (constant folding has no trigger: it runs)
    for fusion in ("transformer", "self_attention", "conv", "trees", "gemm"):
        assert f"onyx.optimizer.{fusion}'" not in loaded


def test_a_pass_fires_on_a_trigger_op_another_pass_made():
    """No Gemm at first: MatMulAddFusion makes one, and GemmActivationFusion (trigger Gemm),
    skipped until then, must see it in the same round and take the Relu."""
    w = np.ones((4, 4), np.float32)
    b = np.arange(4, dtype=np.float32)
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        [("w", w), ("b", b)],
    )
    results = []
    out = optimize(model, "all", for_session=True, results=results)
    changed = [r.name for r in results if r.changed]
    assert changed.index("MatMulAddFusion") < changed.index("GemmActivationFusion")
    assert [n.op_type for n in out.graph] == ["FusedGemm"]


def test_op_types_follow_the_node_list():
    """The op-type index is found again when nodes come or go (a new version with a new node
    list), kept when only the version moved (a rewrite that kept every node)."""
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])])
    ctx = PassContext(model)
    assert ctx.op_types() == {"Relu", "Neg"}
    found = ctx.op_types()
    ctx.version += 1  # (no node changed)
    assert ctx.op_types() is found
    relu = next(iter(ctx.graph))
    ctx.graph.insert_before(relu, ir.Node("Sigmoid", [relu.inputs[0]], ["s"]))
    ctx.version += 1
    assert ctx.op_types() == {"Relu", "Neg", "Sigmoid"}


def test_a_round_visits_only_the_passes_whose_triggers_the_graph_holds():
    """The positions of the passes a round visits are kept per set of op types (one tuple,
    found once): the passes without triggers and those whose trigger ops are all present."""
    from onyx.optimizer import _eligible, _schedule

    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    ctx = PassContext(model)
    _, basic, fusions, _, _ = _schedule(99, frozenset())
    for passes in (basic, fusions):
        found = _eligible(ctx, passes)
        assert _eligible(ctx, passes) is found
        want = [i for i, p in enumerate(passes) if ctx.may_change(p)]
        assert list(found) == want
    assert all(not fusions[i].triggers for i in _eligible(ctx, fusions))
