"""The int8 NHWC convs' shape rule (inference/channels_last.py, qlinear_conv_nhwc): a
quantized CNN's optimized graph is a chain of ai.onyx QLinearConvNhwc calls, whose function
bodies (Transpose -> QLinearConv [-> Cast -> Gather] -> Transpose) the engine inferred at
every call: 88% of the types a session's first run derives to check its outputs against.
The rule gives the bodies' types (held to them here, on the zoo's quantized CNNs and on
chains of other shapes), infers the body where its path is less plain, and the first run's
check still catches such a kernel's wrong shape."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from test_nhwc_quantized import VNNI, _chain_model

import onyx
from onyx.errors import RuntimeFailure
from onyx.inference import engine
from onyx.inference.engine import derived_types
from onyx.optimizer import nhwc
from onyx.runtime import plan
from onyx.runtime.registry import ONYX_DOMAIN

pytestmark = pytest.mark.skipif(not VNNI, reason="the pass runs where the native int8 GEMM does")
SERVING = Path(__file__).resolve().parent.parent / "benchmarks" / "models" / "serving"
OPS = ("QLinearConvNhwc", "QLinearConvLookupNhwc")


def _types(model) -> dict:
    return {v.name: t for v, t in derived_types(model).values()}


def _by_bodies(model, monkeypatch) -> dict:
    """The types with the ops' bodies inferred (no rule: the engine's way for a call)."""
    with monkeypatch.context() as m:
        for op in OPS:
            m.delitem(engine.RULES, (ONYX_DOMAIN, op), raising=False)
        return _types(model)


def _chain():
    return onyx.optimize(onyx.loads(_chain_model().SerializeToString()))


def _with_lookups(model):
    """The chain with its last two convs as QLinearConvLookupNhwc (a table after each)."""

    class Opsets:
        def opset(self, domain):
            return model.opset_imports.get(domain)

    f = nhwc._function(Opsets(), "QLinearConvLookupNhwc", True)  # noqa: SLF001
    model.functions[f.key] = f
    g = model.graph
    table = onyx.ir.Value("table", onyx.ir.TensorType(onyx.ir.DataType.UINT8, (256,)))
    table.const_value = onyx.ir.Tensor(np.arange(256, dtype=np.uint8)[::-1].copy())
    g.add_initializer(table)
    convs = [n for n in g if n.op_type == "QLinearConvNhwc"][-2:]
    for node in convs:
        inputs = [*node.inputs, *[None] * (9 - len(node.inputs)), table]
        attrs = list(node.attributes.values())
        new = onyx.ir.Node("QLinearConvLookupNhwc", inputs, [node.name + "_t"], attrs, ONYX_DOMAIN)
        g.insert_before(node, new)
        new.take_over_outputs(node)
        g.remove(node, safe=False)
    return model


def _optimized_chains():
    yield "chain", _chain()
    yield "wide", onyx.optimize(onyx.loads(_chain_model(C=16, H=9).SerializeToString()))
    yield "lookups", _with_lookups(_chain())
    for name in ("cnn_mobilenet_qdq", "cnn_resnet32_qdq"):  # (benchmarks/models/serving.py)
        path = SERVING / f"{name}.onnx"
        yield name, onyx.InferenceSession(str(path))._planned_model if path.exists() else None  # noqa: SLF001


@pytest.mark.parametrize("name, model", list(_optimized_chains()), ids=lambda x: str(x)[:30])
def test_the_rule_gives_the_bodies_types(name, model, monkeypatch):
    if model is None:
        pytest.skip(f"{name}: not generated (benchmarks/models/serving.py)")
    ops = {n.op_type for n in model.graph}
    assert ops & set(OPS), name
    if name == "lookups":
        assert "QLinearConvLookupNhwc" in ops
    assert _types(model) == _by_bodies(model, monkeypatch)


def test_no_body_is_inferred_for_a_plain_chain(monkeypatch):
    model = onyx.optimize(onyx.loads(_chain_model().SerializeToString()))
    assert [n.op_type for n in model.graph].count("QLinearConvNhwc") == 8
    calls = []
    infer_call = engine.Engine.infer_call
    spy = lambda self, ctx, *a: calls.append(ctx) or infer_call(self, ctx, *a)  # noqa: E731
    monkeypatch.setattr(engine.Engine, "infer_call", spy)
    types = _types(model)
    assert calls == [] and types["u3"].shape.dims == ("N", 12, 5, 5)


@pytest.mark.parametrize("dims", [None, ("N", 8, 10), ("N", None, 10, 10)])
def test_an_input_of_no_known_shape_or_rank_gets_the_bodies_types(dims, monkeypatch):
    """Where x's shape is unknown or not 4-D the body is inferred, as before the rule; an
    unknown dim goes through the rule, as through the body."""
    models = []
    for _ in range(2):
        model = onyx.optimize(onyx.loads(_chain_model().SerializeToString()))
        model.graph.inputs[0].type = onyx.ir.TensorType(onyx.ir.DataType.UINT8, dims)
        models.append(model)
    assert _types(models[0]) == _by_bodies(models[1], monkeypatch)


def test_first_run_catches_an_nhwc_int8_convs_wrong_shape(monkeypatch):
    """A QLinearConvNhwc kernel that returns a wrong shape fails the first run, naming it."""
    real_lookup = plan.lookup

    def lookup(op_type, domain="", version=None):
        kernel = real_lookup(op_type, domain, version)
        if op_type != "QLinearConvNhwc":
            return kernel
        doubled = copy.copy(kernel)  # (a frozen record: its copy's kernel doubles the rows)
        object.__setattr__(
            doubled, "fn", lambda *a, **k: np.concatenate([kernel.fn(*a, **k)] * 2, axis=1)
        )
        return doubled

    monkeypatch.setattr(plan, "lookup", lookup)
    sess = onyx.InferenceSession(_chain_model().SerializeToString())
    x = np.random.default_rng(3).integers(0, 256, (2, 8, 10, 10)).astype(np.uint8)
    with pytest.raises(RuntimeFailure, match=r"QLinearConvNhwc"):
        sess.run(None, {"x": x})
