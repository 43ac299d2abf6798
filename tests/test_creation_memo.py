"""What session creation keeps per process to be fast must not leak between models or
sessions: the reader's memo of small attributes, the pass schedules and trigger verdicts, the
compiled runner code, and the unknown-dim names inference starts from."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
import onyx.optimizer as opt
from onyx import serde
from onyx.inference.engine import Symbols
from onyx.runtime import plan as plan_module
from onyx.serde import model_io, reader, wire_reader

F = TensorProto.FLOAT


def _conv_model(kernel: int = 3, pads: int = 1) -> bytes:
    nodes = [
        helper.make_node(
            "Conv", ["x", "w"], ["c"], kernel_shape=[kernel], pads=[pads, pads], strides=[1]
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    w = helper.make_tensor("w", F, [2, 1, kernel], np.ones(2 * kernel, np.float32))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 1, 8])],
        [helper.make_tensor_value_info("y", F, [1, 2, None])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _attrs(data: bytes) -> dict:
    return {k: a.value for k, a in serde.loads(data).graph.nodes[0].attributes.items()}


def _one_node_model(node) -> bytes:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def by_protobuf(monkeypatch):
    """Loads through protobuf and the Reader (whose memo these tests hold): a small model is
    otherwise read by wire_reader, which keeps memos of its own."""
    monkeypatch.setattr(wire_reader, "WARM_MAX_ITEMS", 0)
    monkeypatch.setattr(wire_reader, "SMALL_ITEMS", 0)
    monkeypatch.setattr(wire_reader, "items_left", 0)
    monkeypatch.setattr(model_io, "_DECLINED", set())  # (what it declines stays here)


@pytest.mark.parametrize("path", ["reader", "wire"])
def test_memoized_attributes_are_equal_and_not_shared(path, request):
    if path == "reader":
        request.getfixturevalue("by_protobuf")
    reader.PLAIN_ATTRS.clear()
    wire_reader._ATTRS.clear()  # noqa: SLF001
    wire_reader._NODE_ATTRS.clear()  # noqa: SLF001
    data = _conv_model()
    first = serde.loads(data).graph.nodes[0]
    assert reader.PLAIN_ATTRS if path == "reader" else wire_reader._ATTRS  # noqa: SLF001
    again = serde.loads(data).graph.nodes[0]
    for name, a in first.attributes.items():
        b = again.attributes[name]
        assert (b.name, b.type, b.value) == (a.name, a.type, a.value)
        assert b is not a and (not isinstance(a.value, list) or b.value is not a.value)
    first.attributes["pads"].value.append(7)  # an edit of one model's list stays its own
    assert _attrs(data)["pads"] == [1, 1]


def test_memo_tells_values_apart_and_starts_afresh_when_full(monkeypatch, by_protobuf):
    monkeypatch.setattr(reader, "MEMO_MAX_ENTRIES", 3)
    reader.PLAIN_ATTRS.clear()
    for k in range(1, 6):
        assert _attrs(_conv_model(kernel=k, pads=k - 1)) == {
            "kernel_shape": [k],
            "pads": [k - 1, k - 1],
            "strides": [1],
        }
        assert len(reader.PLAIN_ATTRS) <= 3


def test_memo_keeps_no_reference_attribute(by_protobuf):
    reader.PLAIN_ATTRS.clear()
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.5)
    unknown = helper.make_attribute("beta", 2)
    unknown.ref_attr_name = "outer"
    node.attribute.extend([unknown])
    data = _one_node_model(node)
    attrs = serde.loads(data).graph.nodes[0].attributes
    assert attrs["beta"].ref_attr_name == "outer"
    assert all(known[0] != "beta" for known in reader.PLAIN_ATTRS.values())
    assert serde.loads(data).graph.nodes[0].attributes["beta"].ref_attr_name == "outer"


def test_memo_keeps_the_doc_string():
    reader.PLAIN_ATTRS.clear()
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.5)
    node.attribute[0].doc_string = "the slope"
    data = _one_node_model(node)
    for _ in range(2):  # (the second read is the memo's)
        alpha = serde.loads(data).graph.nodes[0].attributes["alpha"]
        assert (alpha.value, alpha.doc_string) == (0.5, "the slope")


def test_pass_schedule_follows_the_disabled_names_and_swapped_passes(monkeypatch):
    data = _conv_model()
    fused = opt.optimize(serde.loads(data), "all")
    assert "FusedConv" in {n.op_type for n in fused.graph}
    kept = opt.optimize(serde.loads(data), "all", disabled=["ConvActivationFusion"])
    assert "FusedConv" not in {n.op_type for n in kept.graph}
    monkeypatch.setattr(opt, "PASSES", [p for p in opt.PASSES if p.name != "ConvActivationFusion"])
    assert "FusedConv" not in {n.op_type for n in opt.optimize(serde.loads(data)).graph}


def test_sessions_share_runner_code_and_still_name_the_failing_node():
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="the_matmul")],
        "g",
        [
            helper.make_tensor_value_info("a", F, ["n", "k"]),
            helper.make_tensor_value_info("b", F, ["k2", "m"]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    runners = []
    for _ in range(2):
        sess = onyx.InferenceSession(data)
        for n in (2, 3, 4):  # (two checked signatures of these ranks, then the runner)
            sess.run(None, {"a": np.ones((n, 3), np.float32), "b": np.ones((3, 2), np.float32)})
        runners.append(sess.plan.runner(None))
        with pytest.raises(onyx.OnyxError, match="the_matmul"):
            sess.run(None, {"a": np.ones((5, 3), np.float32), "b": np.ones((4, 2), np.float32)})
    assert runners[0] is not runners[1]
    assert runners[0].__code__ is runners[1].__code__


def test_fresh_unknown_dims_start_past_the_graphs_own():
    g = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, ["unk__4", 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    m = onyx.infer_shapes(serde.loads(data))
    dims = m.graph.outputs[0].type.shape.dims
    assert dims[0] == 2 and dims[1] == "unk__5"
    assert Symbols(3).fresh() == "unk__3"


def test_plan_code_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(plan_module, "MAX_CACHED_RUNNERS", 2)
    plan_module.RUNNER_CODE.clear()
    for k in range(1, 5):
        sess = onyx.InferenceSession(_conv_model(kernel=k, pads=0))
        x = np.ones((1, 1, 8), np.float32)
        sess.run(None, {"x": x})
        sess.run(None, {"x": x})
        assert len(plan_module.RUNNER_CODE) <= 2


def test_warm_creation_runs_no_import_statement_per_node(monkeypatch):
    """An import statement inside a function is a call into the import system every time it
    runs: a warm creation runs those of the checker, the IR's attribute helpers and the
    optimizer once at most, not once per node (two grouped convs here; two attributes set
    from Python values)."""
    import builtins
    from collections import Counter

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, group=2),
        helper.make_node("Conv", ["c", "w"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=2),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    w = helper.make_tensor("w", F, [2, 1, 3, 3], np.ones(18, np.float32))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 2, 8, 8])],
        [w],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    onyx.InferenceSession(data)
    model = serde.loads(data)
    watched = ("onyx.checker", "onyx.ir.graph", "onyx.optimizer.fold", "onyx.optimizer.core")
    importing: Counter = Counter()
    real = builtins.__import__

    def counted(name, globals=None, *args, **kwargs):
        where = (globals or {}).get("__name__", "")
        if where in watched:
            importing[(where, name)] += 1
        return real(name, globals, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counted)
    onyx.InferenceSession(data)
    model.graph.nodes[2].set_attr("unused", np.float32(1.0))  # (ir.graph's infer_attr_type)
    model.graph.nodes[2].set_attr("also_unused", 2)
    monkeypatch.undo()
    assert not [k for k, n in importing.items() if n > 1], importing
