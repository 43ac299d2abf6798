"""The pass manager's quiet rules (pipeline.QUIET, SELF_QUIET): a pass idle before a change
that gives it nothing new is not run again. Each case here is a graph where a pass must run
again after a change of another kind: the optimized graph and the change counts must be those
of running every pass every round (SKIP_IDLE off), and the case shows what it guards: with the
rule made wrong, the result differs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
import onyx.optimizer as opt
from onyx import ir, serde
from onyx.optimizer import cleanup, core, pipeline

F = TensorProto.FLOAT
_MODELS = Path(__file__).resolve().parent.parent / "benchmarks" / "models"


def _model(nodes, inputs, outputs, inits=(), opset=17) -> ir.Model:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return serde.loads(m.SerializeToString())


def _optimized(make, level, monkeypatch, **kw) -> tuple[bytes, dict]:
    stats: dict[str, int] = {}
    out = opt.optimize(make(), level, stats=stats, **kw)
    return serde.dumps(out), stats


def _check(make, level, monkeypatch, wrong, **kw) -> ir.Model:
    """The result with the rules equals the one without skipping; with ``wrong`` (a change
    to the rules, made by the caller's function) it differs. The optimized model returned."""
    with monkeypatch.context() as m:
        m.setattr(opt, "SKIP_IDLE", False)
        full = _optimized(make, level, monkeypatch, **kw)
    assert _optimized(make, level, monkeypatch, **kw) == full
    with monkeypatch.context() as m:
        wrong(m)
        assert _optimized(make, level, monkeypatch, **kw) != full
    return serde.loads(full[0])


def _quiet_too(m, name: str, tag: str) -> None:
    m.setitem(opt.QUIET, name, opt.QUIET.get(name, frozenset()) | {tag})


def _shape_then_cast() -> ir.Model:
    """Shape(x) -> Cast -> Add: ShapeFolding makes the shape a constant, and only then can
    ConstantFolding fold the Cast."""
    return _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Cast", ["s"], ["c"], to=F),
            helper.make_node("Add", ["c", "z"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("z", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )


def _dropout_mask_read_by_a_dead_node() -> ir.Model:
    """The Dropout's mask is read by a Not that nothing reads: only once DeadCodeElimination
    took the Not is the Dropout an identity."""
    return _model(
        [
            helper.make_node("Dropout", ["x"], ["d", "mask"]),
            helper.make_node("Not", ["mask"], ["unread"]),
            helper.make_node("Relu", ["d"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )


def test_dead_code_elimination_wakes_dropout_elimination(monkeypatch):
    out = _check(
        _dropout_mask_read_by_a_dead_node,
        "basic",
        monkeypatch,
        lambda m: _quiet_too(m, "EliminateDropout", "DeadCodeElimination"),
    )
    assert [n.op_type for n in out.graph] == ["Relu"]


def _dequantized_weight_read_by_a_dead_conv() -> ir.Model:
    """A constant DequantizeLinear read by a Conv (a QDQ unit's, left for the QDQ fusion) and a
    Relu; the Conv is dead: once DeadCodeElimination took it, ConstantFolding folds the DQ."""
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.int8), "w")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    zp = numpy_helper.from_array(np.array(0, np.int8), "zp")
    return _model(
        [
            helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["wf"]),
            helper.make_node("Conv", ["x", "wf"], ["unread"]),
            helper.make_node("Relu", ["wf"], ["r"]),
            helper.make_node("Add", ["x", "r"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", F, [1, 1, 2, 2])],
        [w, scale, zp],
    )


def test_dead_code_elimination_wakes_constant_folding_of_a_dequantize(monkeypatch):
    out = _check(
        _dequantized_weight_read_by_a_dead_conv,
        "all",
        monkeypatch,
        lambda m: _quiet_too(m, "ConstantFolding", "DeadCodeElimination"),
        disabled=["ShapeFolding"],  # (its inference would wake every pass in round 1)
    )
    assert "DequantizeLinear" not in {n.op_type for n in out.graph}


def _twin_negs() -> ir.Model:
    return _model(
        [
            helper.make_node("Neg", ["x"], ["a"]),
            helper.make_node("Neg", ["x"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )


def test_merged_twin_nodes_wake_dead_code_elimination(monkeypatch):
    out = _check(
        _twin_negs,
        "basic",
        monkeypatch,
        lambda m: _quiet_too(m, "DeadCodeElimination", "CommonSubexpressionElimination"),
    )
    assert [n.op_type for n in out.graph] == ["Neg", "Add"]


def test_a_pass_leaving_dead_nodes_waits_for_a_sweep(monkeypatch):
    """Without DeadCodeElimination, ShapeFolding's folded Shape stays in the graph, and each
    run of ShapeFolding takes it again (counted, as before the rules)."""
    out = _check(
        _shape_then_cast,
        "basic",
        monkeypatch,
        lambda m: m.setitem(pipeline.SELF_QUIET, "ShapeFolding", False),
        disabled=["DeadCodeElimination"],
    )
    assert "Shape" in {n.op_type for n in out.graph}


def _out_of_order_casts() -> ir.Model:
    """Cast(Cast(c)) of a constant, the outer Cast listed first: one walk of ConstantFolding
    folds only the inner one."""
    c = numpy_helper.from_array(np.ones(2, np.float32), "c")
    return _model(
        [
            helper.make_node("Cast", ["c1"], ["c2"], to=F),
            helper.make_node("Cast", ["c"], ["c1"], to=TensorProto.DOUBLE),
            helper.make_node("Add", ["c2", "x"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
        [c],
    )


@pytest.mark.filterwarnings("ignore:the model to optimize breaks rules")
def test_a_pass_runs_again_after_its_own_change_on_nodes_out_of_order(monkeypatch):
    """Validation warns the nodes are out of order: SELF_QUIET's rules are off."""
    out = _check(
        _out_of_order_casts,
        "basic",
        monkeypatch,
        lambda m: m.setattr(opt, "_ordered", lambda model, warned, for_session: True),
        disabled=["ShapeFolding"],  # (its inference would wake every pass in round 1)
    )
    assert [n.op_type for n in out.graph] == ["Add"]


def test_a_session_model_out_of_order_runs_a_pass_again_after_its_own_change(monkeypatch):
    """optimize(for_session=True) (optimize_for_session, public) of a model whose nodes are out
    of order, from a caller other than a session (which sorts them first): no validation
    warns, so the order is checked, and SELF_QUIET's rules are off (the outer Cast was left
    unfolded)."""
    out = _check(
        _out_of_order_casts,
        "basic",
        monkeypatch,
        lambda m: m.setattr(opt, "_ordered", lambda model, warned, for_session: True),
        disabled=["ShapeFolding"],
        for_session=True,
    )
    assert [n.op_type for n in out.graph] == ["Add"]


def _ctx_with_twin_constants(second_type: ir.TensorType | None) -> core.PassContext:
    """Two equal constants c and d, each read by a Neg; d declared ``second_type``."""
    model = _model(
        [helper.make_node("Neg", ["c"], ["a"]), helper.make_node("Neg", ["d"], ["b"])],
        [],
        [helper.make_tensor_value_info("a", F, [3]), helper.make_tensor_value_info("b", F, [3])],
        [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("c", "d")],
    )
    if second_type is not None:
        model.graph.initializers["d"].type = second_type
    return core.PassContext(model)


@pytest.mark.parametrize(
    ("second_type", "tag"),
    [
        (None, cleanup.CONSTANTS_MERGED),
        (ir.TensorType(ir.DataType.FLOAT, ir.Shape(["n"])), None),  # (a reader's type changes)
    ],
)
def test_merging_constants_is_quiet_only_between_equal_types(second_type, tag):
    ctx = _ctx_with_twin_constants(second_type)
    assert cleanup.common_subexpressions(ctx)
    assert ctx.change_tag == tag


def test_quiet_rules_skip_runs_on_a_transformer(monkeypatch):
    """The rules do skip: a transformer's rounds after its constants merge run fewer passes
    (and the optimized model is the same: test_creation_speed checks the zoo's)."""
    path = _MODELS / "serving" / "transformer_d128.onnx"
    if not path.exists():
        pytest.skip("the serving zoo is not here")
    model = onyx.load(str(path))
    runs = []
    opt.optimize(model, "all", results=runs)
    with monkeypatch.context() as m:
        m.setattr(opt, "QUIET", {})
        before = []
        opt.optimize(model, "all", results=before)
    assert len(runs) < len(before)


_ORDER_SAMPLE = [
    "serving/transformer_d128",
    "serving/cnn_mobilenet_qdq",
    "serving/cnn_mobilenet",
    "serving/rnn_lstm7",
    "serving/audio_kws",
    "serving/sklearn_mixed_pipeline",
    "bert_dynamo_op18",
    "gpt_quant_qoperator",
    "unet_quant_qdq",
]


@pytest.mark.parametrize("name", _ORDER_SAMPLE)
def test_passes_keep_the_nodes_in_order(name, monkeypatch):
    """SELF_QUIET's rules rest on it: a graph in order when optimize starts stays so after
    every pass run."""
    path = _MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip("the zoo is not here")
    broke = []

    def checked(p):
        def fn(ctx):
            changed = p.fn(ctx)
            if not ctx.in_order():
                broke.append(p.name)
            return changed

        return core.Pass(p.name, p.level, fn, p.triggers)

    monkeypatch.setattr(opt, "PASSES", [checked(p) for p in opt.PASSES])
    model = serde.load(str(path))
    opt.optimize(model, "all", for_session=True, in_place=True)
    assert broke == []
