"""compose / extract / inline / dims against onnx.compose, onnx.utils, onnx.inliner and
onnx.tools.update_model_dims, with onnxruntime running onnx's results and onyx ours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.compose
import onnx.inliner
import onnx.tools.update_model_dims
import onnx.utils
import onnxruntime as ort
import pytest

import onyx

MODELS = Path(__file__).with_name("models")
RESNET = MODELS / "resnet_torchscript_op17.onnx"


def _ort(proto_or_bytes, feeds):
    data = (
        proto_or_bytes if isinstance(proto_or_bytes, bytes) else proto_or_bytes.SerializeToString()
    )
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def _onyx(model, feeds):
    return onyx.InferenceSession(onyx.dumps(model)).run(None, feeds)


def _text(model) -> str:
    return onnx.printer.to_text(onnx.load_from_string(onyx.dumps(model)))


def _small(name: str, k: float) -> onyx.ir.Model:
    return onyx.parse_model(
        f"""<ir_version: 10, opset_import: ["" : 21]>
        {name} (float[N, 4] x) => (float[N, 4] y, float[N] s) <float[4] w = {{1, 2, 3, {k}}}> {{
            [mul] h = Mul (x, w)
            y = Relu (h)
            axes = Constant <value: tensor = int64[1] {{1}}> ()
            s = ReduceSum <keepdims: int = 0> (h, axes)
        }}"""
    )


def test_add_prefix_matches_onnx():
    for model in (_small("a", 4), onyx.load(RESNET)):
        ours = _text(onyx.add_prefix(model, "p/"))
        theirs = onnx.compose.add_prefix(onnx.load_from_string(onyx.dumps(model)), "p/")
        for n in theirs.graph.node:
            if not n.name:
                n.ClearField("name")  # onnx writes the empty name it prefixed nothing to
        assert ours == onnx.printer.to_text(theirs)


def test_merge_models_matches_onnx_compose():
    a, b = _small("a", 4), _small("b", 5)
    io_map = [("y", "x")]
    ours = onyx.merge_models(a, b, io_map, prefix1="a/", prefix2="b/")
    pa, pb = (onnx.load_from_string(onyx.dumps(m)) for m in (a, b))
    theirs = onnx.compose.merge_models(pa, pb, io_map, prefix1="a/", prefix2="b/")
    assert [v.name for v in ours.graph.inputs] == [i.name for i in theirs.graph.input]
    assert [v.name for v in ours.graph.outputs] == [o.name for o in theirs.graph.output]
    assert sorted(n.name for n in ours.graph) == sorted(n.name for n in theirs.graph.node)
    onnx.checker.check_model(onnx.load_from_string(onyx.dumps(ours)), full_check=True)
    feeds = {"a/x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    for got, want in zip(_onyx(ours, feeds), _ort(theirs, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(onyx.OnyxError, match="both models define"):
        onyx.merge_models(a, b, [("y", "x")])
    with pytest.raises(onyx.OnyxError, match="no output 'a/nope'"):
        onyx.merge_models(a, b, [("nope", "x")], prefix1="a/", prefix2="b/")


def test_extract_model_matches_onnx_utils(tmp_path):
    model = onyx.load(RESNET)
    nodes = list(model.graph)
    cut_in = nodes[8].outputs[0].name  # a residual block's output ...
    cut_out = nodes[14].outputs[0].name  # ... to the next one's
    ours = onyx.extract_model(model, [cut_in], [cut_out])
    onnx.utils.extract_model(str(RESNET), str(tmp_path / "t.onnx"), [cut_in], [cut_out])
    theirs = onnx.load(tmp_path / "t.onnx")
    assert [n.name for n in ours.graph] == [n.name for n in theirs.graph.node]
    assert sorted(ours.graph.initializers) == sorted(t.name for t in theirs.graph.initializer)
    assert len(ours.graph.initializers) < len(model.graph.initializers)  # only the used ones
    shape = [d if isinstance(d, int) else 1 for d in ours.graph.inputs[0].shape]
    feeds = {cut_in: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    np.testing.assert_allclose(_onyx(ours, feeds)[0], _ort(theirs, feeds)[0], rtol=1e-4, atol=1e-5)
    # onnx's argument order, saving the result
    onyx.extract_model(str(RESNET), str(tmp_path / "o.onnx"), [cut_in], [cut_out])
    assert len(onyx.load(tmp_path / "o.onnx").graph) == len(ours.graph)
    with pytest.raises(onyx.OnyxError, match="depend on graph input"):
        onyx.extract_model(model, [nodes[12].outputs[0].name], [cut_out])


def test_inline_functions_matches_onnx_inliner():
    model = onyx.parse_model(
        """<ir_version: 10, opset_import: ["" : 21, "local" : 1]>
        g (float[2] x) => (float[2] y, float[2] z) {
            t = local.Scale <k: float = 3> (x)
            y = local.Twice (t)
            z = local.Pass (x)
        }
        <domain: "local", opset_import: ["" : 21, "local" : 1]>
        Scale <k: float = 2> (X) => (Y) {
            K = Constant <value_float: float = @k> ()
            Y = Mul (X, K)
        }
        <domain: "local", opset_import: ["" : 21, "local" : 1]>
        Twice (X) => (Y) {
            A = local.Scale (X)
            Y = Add (A, X)
        }
        <domain: "local", opset_import: ["" : 21]>
        Pass (X) => (X) {}
        """
    )
    flat = onyx.inline_functions(model)
    assert not flat.functions
    assert all(n.domain == "" for n in flat.graph)
    onnx.checker.check_model(onnx.load_from_string(onyx.dumps(flat)), full_check=True)
    feeds = {"x": np.array([1, 2], np.float32)}
    # (onnx's inliner drops the reference to 'k' where the call leaves it to its default, and
    # onnxruntime refuses the functions themselves: it runs the inlined model)
    for got, want in zip(_onyx(flat, feeds), _ort(onyx.dumps(flat), feeds)):
        np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(_onyx(flat, feeds)[1], feeds["x"])
    np.testing.assert_allclose(_onyx(flat, feeds)[0], [9, 18])  # 3x, then 2*(3x) + 3x
    some = onyx.inline_functions(model, names=["Twice"])
    assert [f.name for f in some.functions.values()] == ["Scale", "Pass"]
    np.testing.assert_allclose(_onyx(some, feeds)[0], [9, 18])


def test_inline_functions_of_the_optimizers_local_functions():
    model = onyx.load(MODELS / "mobilenet_quant_qdq.onnx")
    optimized = onyx.optimize(model)
    assert optimized.functions  # TableLookup / ConvHardSwish
    flat = onyx.inline_functions(optimized)
    assert not flat.functions and not any(n.domain == "ai.onyx" for n in flat.graph.all_nodes())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = model.graph.inputs[0].name
    got = _ort(onyx.dumps(flat), {name: x})[0]
    want = _ort(onyx.dumps(model), {name: x})[0]
    np.testing.assert_allclose(got, want, atol=0.1)


def test_update_dims_matches_onnx():
    model = onyx.load(RESNET)
    name = model.graph.inputs[0].name
    out = model.graph.outputs[0].name
    ours = onyx.update_dims(model, {name: [1, 3, 32, 32]}, {out: [1, -1]})
    theirs = onnx.tools.update_model_dims.update_inputs_outputs_dims(
        onnx.load(RESNET), {name: [1, 3, 32, 32]}, {out: [1, -1]}
    )
    assert ours.graph.inputs[0].shape.dims == (1, 3, 32, 32)
    assert ours.graph.outputs[0].shape.dims == tuple(
        d.dim_value or d.dim_param for d in theirs.graph.output[0].type.tensor_type.shape.dim
    )
    inner = ours.graph.nodes[5].outputs[0]
    assert inner.shape is not None and inner.shape.dims[0] == 1  # inferred anew
    dyn = onyx.update_dims(model, {name: ["B", 3, None, None]})
    assert dyn.graph.inputs[0].shape.dims == ("B", 3, f"{name}_2", f"{name}_3")
    with pytest.raises(onyx.OnyxError, match="no graph input 'nope'"):
        onyx.update_dims(model, {"nope": [1]})


def test_free_dimension_overrides():
    model = _small("a", 4)
    opts = onyx.SessionOptions()
    opts.add_free_dimension_override_by_name("N", 2)
    sess = onyx.InferenceSession(onyx.dumps(model), opts)
    assert sess.get_inputs()[0].shape == [2, 4]
    sess.run(None, {"x": np.ones((2, 4), np.float32)})
    with pytest.raises(onyx.OnyxError, match="dimension 0 must be 2"):
        sess.run(None, {"x": np.ones((3, 4), np.float32)})
    assert model.graph.inputs[0].shape.dims == ("N", 4)  # the caller's model is left as it was
    denoted = onyx.helper.make_tensor_value_info(
        "x", 1, ["N", 4], shape_denotation=["DATA_BATCH", ""]
    )
    model.graph.inputs[0].type = denoted.type
    opts = onyx.SessionOptions()
    opts.add_free_dimension_override_by_denotation("DATA_BATCH", 5)
    assert onyx.InferenceSession(model, opts).get_inputs()[0].shape == [5, 4]
