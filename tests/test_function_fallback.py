"""Ops without a kernel run through the standard's function body.

Every op has a kernel today, so the fallback is proven by hiding one op's kernel at a time and
running onnx's node-suite cases of that op (the expected data is the oracle), and by a model
whose op has neither a kernel nor a body (clear error at session creation).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from node_harness import compare, node_cases, to_value

import onyx
import onyx.defs
from onyx.runtime import plan as plan_module


def _op_has_body(case) -> bool:
    graph = case.model.graph
    if len(graph.node) != 1 or graph.node[0].domain not in ("", "ai.onnx"):
        return False
    opset = max(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    schema = onyx.defs.get_schema(graph.node[0].op_type, opset)
    return schema is not None and schema.function_for(opset) is not None


def _cases():
    return [c for c in node_cases("") if not c.name.endswith("_expanded") and _op_has_body(c)]


CASES = _cases()


def test_there_are_cases():
    # bodies the standard writes: Softsign, HardSigmoid, Mish, Swish, PRelu, ReduceL2, ...
    assert len({c.model.graph.node[0].op_type for c in CASES}) >= 20


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_runs_through_its_function_body(case, monkeypatch):
    hidden = case.model.graph.node[0].op_type
    real_lookup = plan_module.lookup
    used_body = []

    def lookup(op_type, domain, version):
        if op_type == hidden and domain == "":
            used_body.append(op_type)
            return None
        return real_lookup(op_type, domain, version)

    monkeypatch.setattr(plan_module, "lookup", lookup)
    session = onyx.InferenceSession(case.model.SerializeToString())
    names = [i.name for i in case.model.graph.input]
    for inputs, outputs in case.data_sets:
        feeds = dict(zip(names, (to_value(x) for x in inputs)))
        with np.errstate(all="ignore"):
            results = session.run(None, feeds)
        for i, (e, a) in enumerate(zip(outputs, results)):
            compare(to_value(e), a, case.rtol, case.atol, f"output {i}")
    assert used_body, "the op's kernel was not hidden: the test proved nothing"


def test_op_without_kernel_or_body_is_named(monkeypatch):
    real_lookup = plan_module.lookup
    monkeypatch.setattr(
        plan_module, "lookup", lambda op, d, v: None if op == "Relu" else real_lookup(op, d, v)
    )
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="the_relu")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    graph = onnx.helper.make_graph(
        [node], "g", [x], [x.__class__.FromString(x.SerializeToString())]
    )
    graph.output[0].name = "y"
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    with pytest.raises(onyx.errors.NotImplementedOp, match="the_relu.*Relu"):
        onyx.InferenceSession(model.SerializeToString())
