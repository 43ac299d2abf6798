"""TreeLeafFunctionFusion and TreeSumFusion (optimizer/trees.py): an IsolationForest's
per-tree chains go into the leaf weights and its trees into one ensemble, with the unfused
graph's results to the bit; what the passes may not take stays as written."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import onyx

FLOAT = TensorProto.FLOAT
ML = "ai.onnx.ml"


def _tree(name: str, x: str, out: str, weights=(1.0, 2.0, 3.0), **extra):
    """A one-tree regressor: x[0] <= 0.5 ? (x[1] <= 0 ? w0 : w1) : w2."""
    attrs = dict(
        n_targets=1,
        nodes_treeids=[0] * 5,
        nodes_nodeids=[0, 1, 2, 3, 4],
        nodes_featureids=[0, 1, 0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 3, 0, 0, 0],
        nodes_falsenodeids=[2, 4, 0, 0, 0],
        target_treeids=[0, 0, 0],
        target_nodeids=[3, 4, 2],
        target_ids=[0, 0, 0],
        target_weights=list(weights),
    )
    attrs.update(extra)
    return h.make_node("TreeEnsembleRegressor", [x], [out], domain=ML, name=name, **attrs)


def _model(nodes, inits, outputs=("y",)) -> bytes:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", FLOAT, ["N", 2])],
        [h.make_tensor_value_info(o, FLOAT, None) for o in outputs],
        initializer=inits,
    )
    opsets = [h.make_opsetid("", 17), h.make_opsetid(ML, 3)]
    return h.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _forest(n_trees: int, const=(2.0,), outputs=("y",)) -> bytes:
    """n one-tree regressors, each followed by Log(Max(y, 1)) * c + 1, summed."""
    nodes, outs = [], []
    inits = [
        h.make_tensor("one", FLOAT, [1], [1.0]),
        numpy_helper.from_array(np.asarray(const, np.float32), "c"),
    ]
    for t in range(n_trees):
        w = [1.0 + t, 2.5 * t + 0.25, 7.0 - t]
        nodes += [
            _tree(f"tree{t}", "x", f"leaf{t}", w),
            h.make_node("Max", [f"leaf{t}", "one"], [f"m{t}"]),
            h.make_node("Log", [f"m{t}"], [f"l{t}"]),
            h.make_node("Mul", [f"l{t}", "c"], [f"s{t}"]),
            h.make_node("Add", [f"s{t}", "one"], [f"d{t}"]),
        ]
        outs.append(f"d{t}")
    nodes.append(h.make_node("Sum", outs, ["y"]))
    return _model(nodes, inits, outputs)


def _sessions(model):
    """The model optimized, and optimized without the tree passes (the oracle)."""
    unfused = onyx.SessionOptions()
    unfused.disabled_optimizers = ["TreeLeafFunctionFusion", "TreeSumFusion"]
    return onyx.InferenceSession(model), onyx.InferenceSession(model, unfused)


def _ops(sess) -> list[str]:
    return [s.node.op_type for s in sess.plan.steps]


def _rows(n: int) -> np.ndarray:
    x = np.random.default_rng(n).uniform(-1, 2, (n, 2)).astype(np.float32)
    x[0] = [0.5, 0.0]  # on both thresholds
    return x


@pytest.mark.parametrize("rows", [1, 7, 300])
def test_forest_becomes_one_ensemble_with_the_same_bits(rows):
    fused, unfused = _sessions(_forest(5))
    assert _ops(fused) == ["TreeEnsembleRegressor"]
    assert "Log" in _ops(unfused)
    x = _rows(rows)
    want = unfused.run(None, {"x": x})[0]
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], want)
    assert want.shape == (rows, 1)


def test_a_constant_that_broadcasts_ends_the_chain():
    """c of 2 values makes [N, 2] from [N, 1]: that product is no function of the leaf alone
    (Max and Log before it still go into the weights)."""
    fused, unfused = _sessions(_forest(2, const=(2.0, 3.0)))
    assert "Log" not in _ops(fused) and _ops(fused).count("Mul") == 2
    x = _rows(5)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], unfused.run(None, {"x": x})[0])


def test_two_trees_in_one_node_are_not_folded():
    tree = _tree("t", "x", "leaf", nodes_treeids=[0, 0, 0, 1, 1])
    # (a node of tree 1 without its weight: not one tree, and a leaf without a weight)
    model = _model(
        [tree, h.make_node("Log", ["leaf"], ["y"])], [h.make_tensor("one", FLOAT, [1], [1.0])]
    )
    fused, _ = _sessions(model)
    assert "Log" in _ops(fused)


def test_a_tree_read_elsewhere_stays_out_of_the_sum():
    fused, unfused = _sessions(_forest(3, outputs=("y", "d0")))  # d0 is also a graph output
    assert "Sum" in _ops(fused) and "Log" not in _ops(fused)
    x = _rows(9)
    for a, b in zip(fused.run(None, {"x": x}), unfused.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_the_optimized_model_runs_in_onnxruntime():
    model = _forest(4)
    stats: dict = {}
    optimized = onyx.optimize(onyx.loads(model), stats=stats)
    assert stats.get("TreeLeafFunctionFusion") == 4 and stats.get("TreeSumFusion") == 1
    x = _rows(20)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(onyx.dumps(optimized), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got.run(None, {"x": x})[0], want[0], rtol=1e-6)


def test_the_passes_can_be_disabled():
    so = onyx.SessionOptions()
    so.disabled_optimizers = ["TreeLeafFunctionFusion", "TreeSumFusion"]
    sess = onyx.InferenceSession(_forest(3), so)
    assert "Log" in _ops(sess) and "Sum" in _ops(sess)


def test_scikit_learn_isolation_forest():
    """skl2onnx's IsolationForest (one regressor and some twenty nodes per tree): one
    ensemble, and the unfused graph's scores and labels to the bit."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import IsolationForest

    x = np.random.default_rng(0).standard_normal((200, 6)).astype(np.float32)
    model = IsolationForest(n_estimators=8, random_state=0).fit(x)
    onx = skl2onnx.to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    fused, unfused = _sessions(onx.SerializeToString())
    assert _ops(fused).count("TreeEnsembleRegressor") == 1
    assert "LabelEncoder" not in _ops(fused) and len(_ops(fused)) < 15
    for rows in (x[:1], x):
        for a, b in zip(fused.run(None, {"X": rows}), unfused.run(None, {"X": rows})):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fused.run(None, {"X": x})[0].reshape(-1), model.predict(x))


def test_alike_chain_nodes_share_a_binding_and_only_those():
    """The chains' nodes alike in op, arity and scalar attributes share one bound kernel;
    another value (-0.0 against 0.0 too), type or attribute binds anew."""
    from onyx import ir
    from onyx.optimizer.trees import _bound

    def node(**attrs):
        n = ir.Node("LeakyRelu", [ir.Value("x")], ["y"])
        for name, value in attrs.items():
            n.attributes[name] = ir.Attr(name, ir.AttrType.FLOAT, value)
        return n

    opsets, steps = {"": 17}, {}
    first = _bound(node(alpha=0.0), opsets, steps)
    assert _bound(node(alpha=0.0), opsets, steps) is first
    assert _bound(node(alpha=-0.0), opsets, steps) is not first
    assert _bound(node(alpha=0.5), opsets, steps) is not first
    assert _bound(node(), opsets, steps) is not first
    x = np.array([-2.0, 3.0], np.float32)
    assert _bound(node(alpha=0.5), opsets, steps).call([x])[0].tolist() == [-1.0, 3.0]


def _forest_own_constants(consts) -> bytes:
    """One tree per constant, each followed by Log(Max(y, 1)) * its own constant c_t."""
    nodes, outs = [], []
    inits = [h.make_tensor("one", FLOAT, [1], [1.0])]
    for t, c in enumerate(consts):
        inits.append(h.make_tensor(f"c{t}", FLOAT, [1], [c]))
        nodes += [
            _tree(f"tree{t}", "x", f"leaf{t}", [1.0 + t, 2.5 * t + 0.25, 7.0 - t]),
            h.make_node("Max", [f"leaf{t}", "one"], [f"m{t}"]),
            h.make_node("Log", [f"m{t}"], [f"l{t}"]),
            h.make_node("Mul", [f"l{t}", f"c{t}"], [f"d{t}"]),
        ]
        outs.append(f"d{t}")
    nodes.append(h.make_node("Sum", outs, ["y"]))
    return _model(nodes, inits)


def test_chains_with_constants_of_their_own_keep_them():
    """Alike chains run together only where their constants are alike: each tree's own c
    (three of one value, two of others) goes into its own weights."""
    fused, unfused = _sessions(_forest_own_constants([2.0, 2.0, 3.0, 0.0, 2.0]))
    assert _ops(fused) == ["TreeEnsembleRegressor"]
    x = _rows(50)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], unfused.run(None, {"x": x})[0])


def test_alike_chains_call_each_kernel_once(monkeypatch):
    """The chains of an IsolationForest's trees are alike: each of their nodes' kernels runs
    once on all the trees' leaf weights, not once a tree."""
    from onyx.runtime import bind as bind_module

    calls: list[str] = []
    real = bind_module.Step.call

    def counted(self, args, frame=None):
        calls.append(self.node.op_type)
        return real(self, args, frame)

    monkeypatch.setattr(bind_module.Step, "call", counted)
    onyx.optimize(onyx.loads(_forest(6)))
    assert calls.count("Log") == 1 and calls.count("Mul") == 1


def test_trees_reading_alike_gathers_become_one_ensemble_without_cse():
    """skl2onnx gives each tree its own Gather of the same columns: alike nodes on the same
    inputs, so the trees read one value and the Sum is merged in the first round (common
    subexpression elimination off: the Sum fusion alone sees it)."""
    nodes, outs = [], []
    inits = [h.make_tensor("cols", TensorProto.INT64, [2], [1, 0])]
    for t in range(4):
        w = [1.0 + t, 2.5 * t + 0.25, 7.0 - t]
        nodes += [
            h.make_node("Gather", ["x", "cols"], [f"g{t}"], axis=1),
            _tree(f"tree{t}", f"g{t}", f"d{t}", w),
        ]
        outs.append(f"d{t}")
    nodes.append(h.make_node("Sum", outs, ["y"]))
    model = _model(nodes, inits)
    so = onyx.SessionOptions()
    so.disabled_optimizers = ["CommonSubexpressionElimination"]
    fused = onyx.InferenceSession(model, so)
    assert _ops(fused) == ["Gather", "TreeEnsembleRegressor"]
    unfused = onyx.SessionOptions()
    unfused.disabled_optimizers = ["TreeSumFusion", "CommonSubexpressionElimination"]
    x = _rows(30)
    want = onyx.InferenceSession(model, unfused).run(None, {"x": x})[0]
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], want)


def test_trees_reading_gathers_of_other_columns_stay_apart():
    nodes, outs = [], []
    inits = [
        h.make_tensor("a", TensorProto.INT64, [2], [1, 0]),
        h.make_tensor("b", TensorProto.INT64, [2], [0, 1]),
    ]
    for t, cols in enumerate("ab"):
        nodes += [
            h.make_node("Gather", ["x", cols], [f"g{t}"], axis=1),
            _tree(f"tree{t}", f"g{t}", f"d{t}"),
        ]
        outs.append(f"d{t}")
    nodes.append(h.make_node("Sum", outs, ["y"]))
    fused = onyx.InferenceSession(_model(nodes, inits))
    assert _ops(fused).count("TreeEnsembleRegressor") == 2 and "Sum" in _ops(fused)


def test_chains_whose_lookups_give_other_types_are_taken_one_by_one():
    """Two chains alike but for their LabelEncoders' value types (floats, int64s): run
    together, their lookups' results would meet in one array of doubles, and 2**54 + 2**30 + 1
    would reach float32 through a double (2**54, a tie rounded to even) instead of directly
    (2**54 + 2**31)."""
    big = 2**54 + 2**30 + 1
    nodes, outs = [], []
    for t, values in enumerate(
        [{"values_floats": [0.5, 1.5, 2.5]}, {"values_int64s": [big, 7, big]}]
    ):
        nodes += [
            _tree(f"tree{t}", "x", f"leaf{t}"),
            h.make_node("Cast", [f"leaf{t}"], [f"i{t}"], to=TensorProto.INT64),
            h.make_node(
                "LabelEncoder", [f"i{t}"], [f"v{t}"], domain=ML, keys_int64s=[1, 2, 3], **values
            ),
            h.make_node("Cast", [f"v{t}"], [f"d{t}"], to=FLOAT),
        ]
        outs.append(f"d{t}")
    nodes.append(h.make_node("Sum", outs, ["y"]))
    fused, unfused = _sessions(_model(nodes, []))
    assert _ops(fused) == ["TreeEnsembleRegressor"]
    x = _rows(40)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], unfused.run(None, {"x": x})[0])


def test_trees_without_targets_are_left_alone():
    """A tree whose leaves all weigh nothing has empty target lists (valid: it outputs 0):
    the Sum of two such trees is no one-tree regressors' Sum, and the session still runs
    (checking the empty lists raised IndexError)."""

    def tree(name: str, out: str):
        node = h.make_node(
            "TreeEnsembleRegressor",
            ["x"],
            [out],
            domain=ML,
            name=name,
            n_targets=1,
            nodes_treeids=[0],
            nodes_nodeids=[0],
            nodes_featureids=[0],
            nodes_values=[0.0],
            nodes_modes=["LEAF"],
            nodes_truenodeids=[0],
            nodes_falsenodeids=[0],
        )
        for attr, kind in (
            ("target_weights", h.AttributeProto.FLOATS),
            ("target_treeids", h.AttributeProto.INTS),
            ("target_nodeids", h.AttributeProto.INTS),
            ("target_ids", h.AttributeProto.INTS),
        ):
            node.attribute.append(h.make_attribute(attr, [], attr_type=kind))
        return node

    model = _model([tree("t0", "a"), tree("t1", "b"), h.make_node("Sum", ["a", "b"], ["y"])], [])
    fused, unfused = _sessions(model)
    x = _rows(4)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], np.zeros((4, 1), np.float32))
    np.testing.assert_array_equal(unfused.run(None, {"x": x})[0], np.zeros((4, 1), np.float32))


def test_a_chain_giving_negative_zero_is_not_folded():
    """Mul(leaf, -1) gives -0.0 at a leaf of weight 0; the regressor adds its weights to +0.0,
    so a weight of -0.0 would come out +0.0: that chain stays (its bits, sign included)."""
    model = _model(
        [_tree("t", "x", "leaf", [0.0, 2.0, 3.0]), h.make_node("Mul", ["leaf", "m"], ["y"])],
        [h.make_tensor("m", FLOAT, [1], [-1.0])],
    )
    fused, unfused = _sessions(model)
    x = _rows(20)
    want = unfused.run(None, {"x": x})[0]
    assert np.signbit(want[want == 0]).any()
    np.testing.assert_array_equal(
        fused.run(None, {"x": x})[0].view(np.uint32), want.view(np.uint32)
    )
