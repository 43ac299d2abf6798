"""What the pass manager spares a small model's creation (issue 23): the eligible passes found
again only after a run that changed the node list, the op types found without a walk of
subgraphs no node holds, a session's model not walked for its order, and the basic passes
not run again after a fusion whose replacements are local (core.local_fusion) while they
still run after one that is not."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
import onyx.optimizer as opt
from onyx import ir, serde
from onyx.optimizer import core

F = TensorProto.FLOAT
BASIC = {p.name for p in opt.pipeline.BASIC_PASSES}


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()) -> ir.Model:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    m = helper.make_model(g, opset_imports=opsets)
    return serde.loads(m.SerializeToString())


def _conv_relu(twin: bool = False, second_input: bool = False) -> ir.Model:
    """x -> Conv -> Relu -> y; ``twin``: a com.microsoft FusedConv(x, w, b, Relu) the fused
    Conv becomes the twin of, read too; ``second_input``: the graph's other output is
    Conv(z) -> Relu, z a graph input too."""
    w = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")
    b = numpy_helper.from_array(np.arange(2, dtype=np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
    ]
    outputs = ["r"]
    if twin:
        nodes.append(
            helper.make_node(
                "FusedConv", ["x", "w", "b"], ["t"], domain="com.microsoft", activation="Relu",
                pads=[1, 1],
            )
        )  # fmt: skip
        nodes.append(helper.make_node("Add", ["r", "t"], ["y"]))
        outputs = ["y"]
    x = helper.make_tensor_value_info("x", F, [1, 1, 8])
    ys = [helper.make_tensor_value_info(o, F, [1, 2, 8]) for o in outputs]
    return _model(nodes, [x], ys, [w, b], domains=("com.microsoft",) if twin else ())


def _runs(model: ir.Model) -> list:
    results: list = []
    opt.optimize(model, "all", for_session=True, results=results)
    return results


def test_basic_passes_stay_idle_after_a_local_fusion():
    """Conv + Relu becomes a FusedConv reading what they read: no basic pass runs after it
    (but ConstantFolding, whose last run came before the types ShapeFolding's first run
    inferred, a change it is not quiet through)."""
    results = _runs(_conv_relu())
    names = [r.name for r in results]
    fused = names.index("ConvActivationFusion")
    assert results[fused].changed
    assert not (BASIC - {"ConstantFolding"}) & set(names[fused + 1 :]), names


def test_a_fusion_making_a_twin_is_not_local(monkeypatch):
    """The FusedConv the fusion makes is the twin of one the graph held: the fusion is not
    local, and CommonSubexpressionElimination runs again and merges them (as it would if
    every pass ran every round); with the fusion taken for local, the twins stay."""

    def optimized() -> tuple[bytes, dict]:
        stats: dict = {}
        out = opt.optimize(_conv_relu(twin=True), "all", stats=stats)
        return serde.dumps(out), stats

    with monkeypatch.context() as m:
        m.setattr(opt, "SKIP_IDLE", False)
        full = optimized()
    assert optimized() == full
    assert full[1].get("CommonSubexpressionElimination") == 1
    with monkeypatch.context() as m:
        m.setattr(core, "local_fusion", lambda *a: True)
        assert optimized() != full


def test_local_fusion_rules():
    """What makes a replacement not local: a standard new node, a value of the pattern's no
    longer read, inputs all constants, a pattern reading a DequantizeLinear."""
    g = _conv_relu().graph
    conv, relu = list(g)

    def fused(inputs, domain="com.microsoft", op="FusedConv") -> ir.Node:
        return ir.Node(op, inputs, 1, domain=domain)

    assert core.local_fusion(relu, fused(conv.inputs), (conv,))
    assert not core.local_fusion(relu, fused(conv.inputs, domain=""), (conv,))
    assert not core.local_fusion(relu, fused(conv.inputs[:2]), (conv,))  # (b unread)
    w, b = conv.inputs[1:]
    assert not core.local_fusion(relu, fused([w, w, b]), (conv,))  # (constants only)
    dq = ir.Node("DequantizeLinear", [w, b], ["dq"])
    conv.set_input(1, dq.outputs[0])
    assert not core.local_fusion(relu, fused(conv.inputs), (conv,))


def test_eligible_passes_are_found_again_only_after_the_node_list_changed(monkeypatch):
    """A run that changed no node (most runs) does not ask for the eligible passes again: each
    round asks once, and each run that inserted or removed nodes once more."""
    calls: list = []
    real = opt.__dict__["_eligible"]

    def counted(ctx, passes):
        calls.append(ctx.graph._nodes)  # noqa: SLF001
        return real(ctx, passes)

    monkeypatch.setattr(opt, "_eligible", counted)
    relu = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", F, [2])
    results = _runs(_model([relu], [x], [helper.make_tensor_value_info("y", F, [2])]))
    assert len(results) >= 3 and not any(r.changed for r in results)
    assert len(calls) <= 3  # (a round of the basic passes, one of the fusions, no more)


def test_op_types_walk_no_subgraphs_where_no_node_holds_one(monkeypatch):
    """After the first look, the op types of a graph without subgraphs are found without
    asking any node for subgraphs; a graph with an If still finds its branches' ops."""
    model = _conv_relu()
    ctx = core.PassContext(model)
    assert ctx.op_types() == {"Conv", "Relu"}
    asked: list = []
    monkeypatch.setattr(ir.Node, "has_subgraphs", lambda self: asked.append(self) or False)
    conv = next(iter(ctx.graph))
    ctx.graph.insert_before(conv, ir.Node("Neg", [conv.inputs[0]], ["n"]))
    assert ctx.op_types() == {"Conv", "Relu", "Neg"}
    assert ctx.fresh_name("n") == "n_1"
    assert not asked
    monkeypatch.undo()

    then = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"])], "then", [],
        [helper.make_tensor_value_info("s", F, [2])],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["t"])], "else", [],
        [helper.make_tensor_value_info("t", F, [2])],
    )  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BOOL),
        helper.make_node("ReduceMax", ["c"], ["any"], keepdims=0),
        helper.make_node("If", ["any"], ["y"], then_branch=then, else_branch=other),
    ]
    x = helper.make_tensor_value_info("x", F, [2])
    ctx = core.PassContext(_model(nodes, [x], [helper.make_tensor_value_info("y", F, [2])]))
    assert {"Sigmoid", "Tanh", "If"} <= ctx.op_types()
    first = next(iter(ctx.graph))
    ctx.graph.insert_before(first, ir.Node("Neg", [first.inputs[0]], ["n"]))
    assert {"Sigmoid", "Tanh", "Neg"} <= ctx.op_types()


def test_a_session_does_not_walk_its_sorted_model_for_its_order(monkeypatch):
    """accept_lenient sorted the model the session optimizes: the optimizer takes it as in
    order, without a walk (optimize itself, given no word, still walks it)."""
    walked: list = []
    real = ir.Graph.in_topological_order

    def counted(self):
        walked.append(self)
        return real(self)

    monkeypatch.setattr(ir.Graph, "in_topological_order", counted)
    model = _conv_relu()
    onyx.InferenceSession(serde.dumps(model))
    assert not walked
    opt.optimize(model, "all", for_session=True)
    assert walked


@pytest.mark.parametrize("twin", [False, True])
def test_local_fusion_keeps_the_graph_of_running_every_pass(twin, monkeypatch):
    def optimized() -> bytes:
        return serde.dumps(opt.optimize(_conv_relu(twin=twin), "all", for_session=True))

    with monkeypatch.context() as m:
        m.setattr(opt, "SKIP_IDLE", False)
        full = optimized()
    assert optimized() == full


def _idle_through(model: ir.Model, name: str, *tags: str) -> bool:
    """Whether pass ``name``, idle at the context's first version, stays idle through
    changes tagged ``tags``."""
    from onyx.optimizer import _still_idle

    ctx = core.PassContext(model)
    ctx.ordered = True
    since = ctx.version
    for tag in tags:
        ctx.changed(tag)
    return _still_idle(ctx, name, since)


def test_constant_folding_stays_idle_through_dead_nodes_gone_without_dequantize():
    """ConstantFolding reads readers for a DequantizeLinear only: dead nodes removed wake it
    where the graph holds one, not elsewhere."""
    plain = _conv_relu()
    assert _idle_through(plain, "ConstantFolding", "DeadCodeElimination")
    assert not _idle_through(plain, "ConstantFolding", "DeadCodeElimination", "NoopElimination")
    w = numpy_helper.from_array(np.ones(2, np.int8), "w")
    s = numpy_helper.from_array(np.ones(2, np.float32), "s")
    dq = helper.make_node("DequantizeLinear", ["w", "s"], ["d"])
    add = helper.make_node("Add", ["x", "d"], ["y"])
    x = helper.make_tensor_value_info("x", F, [2])
    quantized = _model([dq, add], [x], [helper.make_tensor_value_info("y", F, [2])], [w, s])
    assert not _idle_through(quantized, "ConstantFolding", "DeadCodeElimination")


def test_rnn_zero_initial_state_stays_idle_through_what_changes_no_state():
    tags = ("DeadCodeElimination", "RnnZeroInitialState", "RnnLastStepFromState")
    assert _idle_through(_conv_relu(), "RnnZeroInitialState", *tags, "RnnBatchFirstInput")
    assert not _idle_through(_conv_relu(), "RnnZeroInitialState", *tags, "ConstantFolding")


def test_constant_folding_stays_idle_through_inferred_types_without_a_constant_node():
    """ConstantFolding reads a type only for a Constant node's: the types ShapeFolding's first
    run inferred wake it where the graph holds one, not elsewhere."""
    assert _idle_through(_conv_relu(), "ConstantFolding", "infer")
    value = numpy_helper.from_array(np.ones(2, np.float32), "v")
    const = helper.make_node("Constant", [], ["c"], value=value)
    add = helper.make_node("Add", ["x", "c"], ["y"])
    x = helper.make_tensor_value_info("x", F, [2])
    held = _model([const, add], [x], [helper.make_tensor_value_info("y", F, [2])])
    assert not _idle_through(held, "ConstantFolding", "infer")


def test_a_fusion_visits_only_its_anchor_ops_nodes(monkeypatch):
    """ConvActivationFusion asks about the activations' nodes alone (PassContext.nodes_of),
    not every node; nodes_of keeps graph order and the walk's snapshot."""
    from onyx.optimizer import conv

    asked: list = []
    real = conv.activation
    monkeypatch.setattr(conv, "activation", lambda ctx, n: asked.append(n.op_type) or real(ctx, n))
    model = _conv_relu()
    conv_node = next(iter(model.graph))
    for k in range(3):
        model.graph.insert_before(conv_node, ir.Node("Neg", [conv_node.inputs[0]], [f"n{k}"]))
    ctx = core.PassContext(model)
    assert [n.op_type for n in ctx.nodes_of(frozenset(("Relu", "Neg")))] == ["Neg"] * 3 + ["Relu"]
    assert ctx.nodes_of("Tanh") == ()
    assert conv.conv_activation(ctx)
    assert asked == ["Relu"]


def test_one_cse_run_merges_twins_whose_first_input_a_later_merge_shares():
    """x -> Neg a -> Relu z1; x -> Neg b (a's twin, after z1) -> Relu z2: merging b into a
    makes z2 read a, z1's twin, in the same walk (CSE is quiet through its own change: one
    run must take both; a node is keyed whether or not its first input has other readers)."""
    nodes = [
        helper.make_node("Neg", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["z1"]),
        helper.make_node("Neg", ["x"], ["b"]),
        helper.make_node("Relu", ["b"], ["z2"]),
        helper.make_node("Add", ["z1", "z2"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, [2])
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", F, [2])])
    ctx = core.PassContext(model)
    ctx.op_types()
    assert opt.cleanup.common_subexpressions(ctx)
    assert ctx.stats["CommonSubexpressionElimination"] == 2


def test_flattened_matmul_asks_about_a_product_only_after_its_reshape(monkeypatch):
    """FlattenedMatMulFusion's pattern starts at a product reading a Reshape: a product (or
    any other node) reading none is not sized up (its constants read, a Gemm's checked)."""
    from onyx.optimizer import flat_matmul

    asked: list = []
    real = flat_matmul._is_row_product  # noqa: SLF001
    monkeypatch.setattr(
        flat_matmul, "_is_row_product", lambda ctx, n: asked.append(n.op_type) or real(ctx, n)
    )
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    x = helper.make_tensor_value_info("x", F, [2, 4])
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", F, [2, 4])], [w, shape])
    ctx = core.PassContext(model)
    assert not flat_matmul.flattened_matmul(ctx)
    assert asked == []


def test_shape_and_noop_passes_stay_idle_through_the_recurrent_fusions():
    rnn = ("RnnZeroInitialState", "RnnLastStepFromState", "RnnBatchFirstInput")
    for name in ("ShapeFolding", "NoopElimination"):
        assert _idle_through(_conv_relu(), name, *rnn)
        assert not _idle_through(_conv_relu(), name, *rnn, "CommonSubexpressionElimination")
    assert _idle_through(_conv_relu(), "DeadCodeElimination", "RnnBatchFirstInput")
    assert not _idle_through(_conv_relu(), "DeadCodeElimination", "RnnLastStepFromState")


def test_a_fused_conv_gets_its_activation_attributes_made_as_they_are(monkeypatch):
    """ConvActivationFusion makes the activation's attributes of their types, not through
    Node.set_attr (which finds each value's type: a fusion's own work at every creation);
    the fused node's attributes are the conv's, then activation and its parameters."""
    monkeypatch.setattr(ir.Node, "set_attr", lambda *a, **k: pytest.fail("set_attr"))
    w = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
        helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.5),
    ]
    x = helper.make_tensor_value_info("x", F, [1, 1, 8])
    y = helper.make_tensor_value_info("y", F, [1, 2, 8])
    out = opt.optimize(_model(nodes, [x], [y], [w]), "all", for_session=True)
    (fused,) = list(out.graph)
    assert fused.op_type == "FusedConv"
    assert [(a.name, a.type, a.value) for a in fused.attributes.values()] == [
        ("pads", ir.AttrType.INTS, [1, 1]),
        ("activation", ir.AttrType.STRING, "LeakyRelu"),
        ("activation_params", ir.AttrType.FLOATS, [0.5]),
    ]


def test_first_fresh_name_reads_the_nodes_own_lists(monkeypatch):
    """The names a first fresh_name finds taken (values', nodes', a subgraph's too) are read
    from the nodes' own lists, without an outputs tuple made per node."""
    model = _conv_relu()
    ctx = core.PassContext(model)
    conv = next(iter(ctx.graph))
    conv.name = "conv"
    monkeypatch.setattr(ir.Node, "outputs", property(lambda self: pytest.fail("outputs")))
    assert ctx.fresh_name("r") == "r_1" and ctx.fresh_name("conv") == "conv_1"
    assert ctx.fresh_name("x") == "x_1" and ctx.fresh_name("w") == "w_1"
    assert ctx.fresh_name("free") == "free"


def _batch_first_lstm() -> ir.Model:
    """x (batch, steps, in) -> Transpose -> LSTM -> Squeeze(Y_h, [0]) (PyTorch's batch_first
    LSTM whose last state is read): a session's RnnBatchFirstInput takes it."""
    B, T, I, H = 2, 3, 4, 5
    inits = [
        numpy_helper.from_array(np.full((1, 4 * H, I), 0.1, np.float32), "W"),
        numpy_helper.from_array(np.full((1, 4 * H, H), 0.1, np.float32), "R"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["t", "W", "R"], ["", "h"], hidden_size=H),
        helper.make_node("Squeeze", ["h", "axes"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, [B, T, I])
    return _model(nodes, [x], [helper.make_tensor_value_info("y", F, [B, H])], inits)


def test_constant_folding_stays_idle_through_a_batch_first_lstm(monkeypatch):
    """ConstantFolding does not run again after RnnBatchFirstInput alone changed the graph
    (a DequantizeLinear in the graph wakes it: its readers may change); the graph is that of
    running every pass every round."""
    results = _runs(_batch_first_lstm())
    names = [r.name for r in results]
    first = names.index("RnnBatchFirstInput")
    assert results[first].changed
    assert "ConstantFolding" not in names[first + 1 :], names
    assert not _idle_through(_conv_relu(), "ConstantFolding", "RnnBatchFirstInput", "fusion")
    w = numpy_helper.from_array(np.ones(2, np.int8), "w")
    s = numpy_helper.from_array(np.ones(2, np.float32), "s")
    dq = helper.make_node("DequantizeLinear", ["w", "s"], ["d"])
    add = helper.make_node("Add", ["x", "d"], ["y"])
    x = helper.make_tensor_value_info("x", F, [2])
    quantized = _model([dq, add], [x], [helper.make_tensor_value_info("y", F, [2])], [w, s])
    assert not _idle_through(quantized, "ConstantFolding", "RnnBatchFirstInput")

    def optimized() -> bytes:
        return serde.dumps(opt.optimize(_batch_first_lstm(), "all", for_session=True))

    with monkeypatch.context() as m:
        m.setattr(opt, "SKIP_IDLE", False)
        full = optimized()
    assert optimized() == full
