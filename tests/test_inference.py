"""Shape inference: agreement with onnx.shape_inference over the onnx test models, and unit cases.

Agreement: wherever onnx infers a type for a node output, onyx must infer the same element type,
the same rank and every dim onnx knows (>= 99.5% of values). Declared value_info and output
types are stripped first so that both sides infer from the inputs alone.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference
from test_checker import _suite, conv_type, from_onnx

import onyx
from onyx import ir
from onyx.checker import type_string
from onyx.errors import ValidationError
from onyx.inference import infer_shapes


def _strip(m: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto.FromString(m.SerializeToString())
    del m.graph.value_info[:]
    for o in m.graph.output:
        o.ClearField("type")
    return m


def compare(m: onnx.ModelProto):
    """(values onnx types, values onyx agrees on, values where onyx knows more, mismatches)."""
    m = _strip(m)
    try:
        ref = shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:
        return 0, 0, 0, []
    theirs = {
        v.name: conv_type(v.type)
        for v in list(ref.graph.value_info) + list(ref.graph.output)
        if v.HasField("type")
    }
    model = from_onnx(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        infer_shapes(model)
    ours = {v.name: v.type for n in model.graph.nodes for v in n.outputs if v.name}
    total = agree = more = 0
    bad = []
    for name, rt in theirs.items():
        if name not in ours or rt is None or type_string(rt) is None:
            continue
        total += 1
        ot = ours[name]
        good = ot is not None and type_string(ot) == type_string(rt)
        rs, os_ = getattr(rt, "shape", None), getattr(ot, "shape", None)
        if good and rs is not None:
            good = os_ is not None and os_.rank == rs.rank
            good = good and all(not isinstance(a, int) or a == b for a, b in zip(rs, os_))
            if good and any(isinstance(b, int) and not isinstance(a, int) for a, b in zip(rs, os_)):
                more += 1
        elif good and os_ is not None:
            more += 1
        agree += good
        if not good:
            bad.append((name, f"{rt}{rs}", f"{ot}{os_}"))
    return total, agree, more, bad


def test_agreement_with_onnx_shape_inference():
    total = agree = more = 0
    worst = {}
    for name, m in _suite():
        t, a, k, bad = compare(m)
        total, agree, more = total + t, agree + a, more + k
        if bad:
            worst[name] = bad[:2]
    rate = agree / total
    print(f"\nagreement {agree}/{total} = {100 * rate:.2f}%; onyx knows more on {more} values")
    assert total > 10000
    assert rate >= 0.995, sorted(worst.items())[:20]


# -- unit cases -----------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _out(model, name):
    return next(v for n in model.graph.nodes for v in n.outputs if v.name == name).type


def test_symbolic_dims_flow():
    m = _model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("MatMul", ["r", "w"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((4, 5), np.float32), "w")],
    )
    infer_shapes(m)
    assert _out(m, "y").shape.dims == ("N", 5)


def test_shape_gather_concat_reshape_chain():
    i64 = TensorProto.INT64
    m = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
            helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "zero1"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        ],
    )
    infer_shapes(m)
    assert _out(m, "target").shape.dims == (2,)
    assert _out(m, "y").shape.dims == ("N", 12)
    assert _out(m, "y").elem_type == ir.DataType.FLOAT
    del i64


def test_conv_pool_shapes():
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
            helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")],
    )
    infer_shapes(m)
    assert _out(m, "c").shape.dims == ("N", 8, 16, 16)
    assert _out(m, "p").shape.dims == ("N", 8, 8, 8)
    assert _out(m, "g").shape.dims == ("N", 8, 1, 1)


def test_conflict_is_error_in_strict_mode_and_warning_otherwise():
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    with pytest.raises(ValidationError) as info:
        infer_shapes(m, strict=True)
    assert "relu" in str(info.value)
    with pytest.warns(UserWarning, match="relu"):
        infer_shapes(m)


def test_if_and_loop_subgraphs():
    f32 = TensorProto.FLOAT
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"])],
        "then",
        [],
        [helper.make_tensor_value_info("a", f32, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["b"])],
        "else",
        [],
        [helper.make_tensor_value_info("b", f32, None)],
    )
    m = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [
            helper.make_tensor_value_info("x", f32, ["N", 2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", f32, None)],
    )
    infer_shapes(m)
    assert _out(m, "y").shape.dims == ("N", 2)


def test_check_full_uses_inference():
    m = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 5]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onyx.check(m)
    with pytest.raises(ValidationError):
        onyx.check(m, full=True)


def test_every_op_has_a_rule_or_a_fallback():
    from onyx import defs
    from onyx.inference import RULES

    missing = [
        s.name
        for s in defs.schemas("")
        if ("", s.name) not in RULES and not s.functions and not s.deprecated
    ]
    # ops without a dedicated rule still get element types from the schema (generic rule)
    assert len(set(missing)) < 60, sorted(set(missing))


def test_agreement_on_sklearn_exports():
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    total = agree = 0
    for est in [
        make_pipeline(StandardScaler(), LogisticRegression()),
        RandomForestClassifier(n_estimators=3),
        SVC(probability=True),
        LinearRegression(),
    ]:
        est.fit(x, y)
        for zipmap in [True, False] if hasattr(est, "predict_proba") else [None]:
            opts = {"zipmap": zipmap} if zipmap is not None else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = skl2onnx.to_onnx(est, x[:1], options=opts, target_opset=17)
            t, a, _, bad = compare(m)
            total, agree = total + t, agree + a
            assert not bad, (type(est).__name__, bad)
    assert total >= 10


def test_contrib_op_outputs_get_no_undefined_types_and_stay_loadable_by_onnxruntime(tmp_path):
    """A type with element type UNDEFINED is never written: onnxruntime refuses such models."""
    import onnxruntime as ort

    import onyx

    path = Path(__file__).with_name("models") / "gpt_quant_qoperator.onnx"
    model = onyx.infer_shapes(onyx.load(path))
    for v in model.graph.value_info:
        assert getattr(v.type, "elem_type", 1) != 0, v.name
    out = tmp_path / "typed.onnx"
    onyx.save(model, out)
    ort.InferenceSession(str(out))


@pytest.mark.parametrize("opset, mask_type", [(9, TensorProto.FLOAT), (10, TensorProto.BOOL)])
def test_dropout_mask_type_follows_the_opset(opset, mask_type):
    """Dropout's mask has the data's type in opsets 7-9 and is bool from 10 (as the kernels give)."""
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x"], ["y", "mask"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("mask", mask_type, None),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model = infer_shapes(from_onnx(_strip(m)))
    assert type_string(model.graph.outputs[1].type) == type_string(
        conv_type(m.graph.output[1].type)
    )
    # the first (checked) run compares the kernels' outputs with the inferred types
    sess = onyx.InferenceSession(m.SerializeToString())
    y, mask = sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert mask.dtype == (np.float32 if opset == 9 else np.bool_)


def test_dequantize_of_a_float8e8m0_scale_is_float32_without_output_dtype():
    """DequantizeLinear-24 takes a float8e8m0 scale, but its output cannot be float8e8m0: the
    rule and the kernel agree on float32 (the rule said float8e8m0, and the run refused the
    kernel's float32 output as a type mismatch)."""
    from onyx import helper as oh

    scale = oh.make_tensor("s", onyx.ir.DataType.FLOAT8E8M0, [], vals=[2.0])
    node = oh.make_node("DequantizeLinear", ["x", "s"], ["y"])
    graph = oh.make_graph(
        [node], "g", [oh.make_tensor_value_info("x", 3, [3])],
        [oh.make_tensor_value_info("y", 1, None)], initializer=[scale],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    inferred = onyx.infer_shapes(model)
    assert inferred.graph.outputs[0].type.elem_type == onyx.ir.DataType.FLOAT
    y = onyx.InferenceSession(onyx.serde.dumps(model)).run(
        None, {"x": np.array([1, -2, 3], np.int8)}
    )
    assert y[0].dtype == np.float32 and y[0].tolist() == [2.0, -4.0, 6.0]


def test_a_data_fold_runs_after_the_nodes_of_its_ops_only(monkeypatch):
    """A fold names the op types it acts on (elementwise arithmetic, the shape ops): a node of
    another op (a Constant, a Conv: most) calls none; the shape chain still folds."""
    from onyx.inference import engine

    seen = []
    monkeypatch.setattr(engine, "DATA_FOLDS", list(engine.DATA_FOLDS))
    monkeypatch.setattr(engine, "FOLD_OPS", dict(engine.FOLD_OPS))
    engine.data_fold(lambda ctx: seen.append(ctx.node.op_type), ops=("Add",))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Add", ["s", "s"], ["twice"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "twice"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y])
    m = onyx.load(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    )
    onyx.infer_shapes(m)
    assert seen == ["Add"]
    assert m.graph.outputs[0].type.shape.dims == (2, 2)  # (Add's fold of the Shape's data)
