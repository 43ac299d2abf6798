"""The passes' gates (pipeline.GATES): a look at the graph made before a pass's module is
imported, False only where the pass surely changes nothing. A float CNN's session then imports
none of those modules, and each pass still fires where its gate lets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx import serde
from onyx.optimizer import optimize
from onyx.optimizer.core import DeferredPass, PassContext
from onyx.optimizer.pipeline import GATES, PIPELINE

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


def test_a_float_cnns_session_imports_no_pass_module_its_gates_rule_out():
    # (its Gemm reads no activation: GemmActivationFusion's triggers rule gemm.py out too;
    # bisect: the scheduler's own search, a module of its own to load)
    code = (
        "import sys, onyx\n"
        f"onyx.InferenceSession({str(TINY)!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith('onyx.optimizer.')\n"
        "    or m in ('bisect', '_bisect')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout
    assert "onyx.optimizer.conv'" in loaded  # (its convs, batch norm and relus: fused)
    for module in ("float16", "lookup", "audio", "layout", "gemm"):
        assert f"onyx.optimizer.{module}'" not in loaded
    assert "bisect" not in loaded


def test_every_gate_belongs_to_a_pass_of_the_pipeline():
    by_name = {p.name: p for p in PIPELINE}
    for name, gate in GATES.items():
        assert by_name[name].gate is gate
    assert all(p.gate is None for p in PIPELINE if p.name not in GATES)


def _ctx(model, **kw) -> PassContext:
    ctx = PassContext(model, **kw)
    ctx.infer()
    return ctx


def _tiny_ctx() -> PassContext:
    return _ctx(serde.load(TINY.read_bytes()), for_session=True)


def test_the_tiny_cnn_fails_every_gate_and_its_passes_find_nothing():
    """Each gate's False is its pass's: on the graph the gate rules out, the pass changes
    nothing (the float16 gate notes, as its pass did, that it looked)."""
    for name, gate in GATES.items():
        ctx = _tiny_ctx()
        assert not gate(ctx), name
        p = next(p for p in PIPELINE if p.name == name)
        fresh = _tiny_ctx()
        assert not p.fn(fresh), name
        assert ctx.memo == fresh.memo, name


def _graph(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return serde.load(model.SerializeToString())


def _ran_and_changed(model) -> set[str]:
    results: list = []
    optimize(model, "all", for_session=True, results=results)
    return {r.name for r in results if r.changed}


def test_a_float16_model_is_lowered():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])
    model = _graph([helper.make_node("Tanh", ["x"], ["y"])], [x], [y])
    assert "InsertCastTransformer" in _ran_and_changed(model)


def test_an_8_bit_chain_is_tabulated():
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 8])
    s, z = np.array(0.1, np.float32), np.array(128, np.uint8)
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("Tanh", ["f"], ["t"]),
        helper.make_node("QuantizeLinear", ["t", "s", "z"], ["y"]),
    ]
    model = _graph(nodes, [x], [y], [("s", s), ("z", z)])
    assert "LookupTableFusion" in _ran_and_changed(model)


def test_a_1d_convs_max_pool_is_fused_and_a_2d_ones_gate_is_closed():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = np.ones((4, 2, 3), np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2], strides=[2]),
    ]
    model = _graph(nodes, [x], [y], [("w", w)])
    assert GATES["ConvMaxPoolFusion"](_ctx(model))
    assert "ConvMaxPoolFusion" in _ran_and_changed(model)
    assert not GATES["ConvMaxPoolFusion"](_tiny_ctx())  # (its pool reads a 2-D conv)


def test_a_grouped_conv_opens_the_channels_last_gate():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = np.ones((4, 1, 3, 3), np.float32)
    model = _graph([helper.make_node("Conv", ["x", "w"], ["y"], group=4)], [x], [y], [("w", w)])
    assert GATES["ChannelsLastTransformer"](_ctx(model))


def test_a_gated_out_pass_is_skipped_as_an_idle_one():
    """A gate's False marks the pass idle at the graph's version, as a run that found nothing
    would: it is not asked again until the graph changes, and it leaves no result."""
    looked: list = []

    def gate(ctx):
        looked.append(ctx.version)
        return False

    def never(ctx):
        raise AssertionError("a gated-out pass ran")

    from onyx.optimizer import _run_all

    passes = (DeferredPass("Gated", 2, never, (), gate),)
    ctx = _tiny_ctx()
    assert not _run_all(ctx, passes) and not _run_all(ctx, passes)
    assert looked == [ctx.version] and ctx.idle["Gated"] == ctx.version
    assert "Gated" not in ctx.ran
