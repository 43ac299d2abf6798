"""onyx.compare and `onyx compare`: per-output errors, the first diverging node, two files
matched by name, random inputs, missing runtimes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.debug import compare, make_inputs
from onyx.runtime.custom_ops import override_kernel


def chain_model(dtype=np.float32, batch="N") -> bytes:
    """x -> MatMul(project) -> Relu(relu) -> Mul(square) -> ReduceSum(sum) -> Sqrt(norm) ->
    Div(normalize): an L2 normalization whose squares overflow float16 (up to ~4e5)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = (np.random.default_rng(1).standard_normal((8, 16)) * 200).astype(dtype)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "r"], ["sq"], name="square"),
        helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sum", keepdims=1),
        helper.make_node("Sqrt", ["s"], ["n"], name="norm"),
        helper.make_node("Div", ["r", "n"], ["y"], name="normalize"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", elem, [batch, 8])],
        [helper.make_tensor_value_info("y", elem, [batch, 16])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([1]), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


def relu_plus_one(x):
    return np.maximum(x, 0) + 1


@pytest.mark.parametrize("against", ["onnxruntime", "reference", "onyx-unoptimized"])
def test_matching_runtimes_report_ok(against):
    report = compare(chain_model(), against)
    assert report.ok, str(report)
    assert report.first_diverging_node is None
    assert set(report.outputs) == {"y"} and report.outputs["y"].size == 16


def test_planted_bug_is_the_first_diverging_node():
    with override_kernel("Relu", relu_plus_one, node="relu"):
        report = compare(chain_model(), "onnxruntime")
    assert not report.ok
    assert report.outputs["y"].mismatches > 0
    assert report.first_diverging_node == "relu"
    assert report.first_diverging.op_type == "Relu"
    assert report.first_diverging.input_shapes == [[1, 16]]
    status = {row.name: row.status for row in report.nodes}
    assert status["project"] == "ok" and status["square"] == "propagated"
    assert "first diverging node: relu (Relu)" in str(report)


def test_override_only_touches_the_named_node():
    with override_kernel("Relu", relu_plus_one, node="not-in-this-model"):
        assert compare(chain_model(), "onnxruntime").ok


def test_fp16_copy_compared_by_name_finds_the_overflowing_node():
    report = compare(chain_model(np.float16), against=chain_model(), rtol=1e-2, atol=1e-3)
    assert not report.ok
    assert report.first_diverging_node == "square"
    assert report.first_diverging.max_abs_error == np.inf


def test_tolerance_per_output():
    x = {"x": np.ones((1, 8), np.float32)}
    with override_kernel("Div", lambda a, b: a / b * 1.001, node="normalize"):
        assert not compare(chain_model(), inputs=x, rtol=1e-4, atol=0).ok
        assert compare(chain_model(), inputs=x, rtol={"y": 1e-2}, atol=0).ok


def test_random_inputs_respect_dtypes_and_symbolic_dims():
    graph = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT)],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = make_inputs(data.SerializeToString(), seed=3)
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].shape == (1, 1, 4)
    again = make_inputs(data.SerializeToString(), seed=3)
    np.testing.assert_array_equal(feeds["ids"], again["ids"])
    sized = make_inputs(data.SerializeToString(), shapes={"ids": [2, 5, 4]})
    assert sized["ids"].shape == (2, 5, 4)


def test_random_integer_inputs_index_a_two_row_table():
    """Random integer feeds stay in range of a segment-embedding table of two rows (BERT's
    token_type_ids), so `onyx run` and `onyx compare` work on such models out of the box."""
    table = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "segments")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["segments", "token_type_ids"], ["e"])],
        "g",
        [helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [1, 64])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
        [table],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = make_inputs(data.SerializeToString(), seed=0)
    assert set(np.unique(feeds["token_type_ids"])) == {0, 1}
    onyx.InferenceSession(data.SerializeToString()).run(None, feeds)


def test_missing_runtimes_are_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(onyx.OnyxError, match="pip install onnxruntime"):
        compare(chain_model(), "onnxruntime")
    monkeypatch.setitem(sys.modules, "onnx.reference", None)
    with pytest.raises(onyx.OnyxError, match="pip install onnx"):
        compare(chain_model(), "reference")


def test_cli_prints_errors_and_first_diverging_node(tmp_path, capsys):
    from onyx.tools.cli import main

    path = tmp_path / "chain.onnx"
    path.write_bytes(chain_model())
    np.savez(tmp_path / "in.npz", x=np.ones((2, 8), np.float32))
    assert main(["compare", str(path), "--inputs", str(tmp_path / "in.npz")]) == 0
    assert "ok   y:" in capsys.readouterr().out
    report_path = tmp_path / "report.json"
    with override_kernel("Relu", relu_plus_one, node="relu"):
        rc = main(
            ["compare", str(path), "--shape", "x=3,8", "--report", str(report_path), "--nodes"]
        )
    out = capsys.readouterr().out
    assert rc == 1
    assert "  diverges   relu (Relu)" in out
    assert "FAIL y:" in out and "first diverging node: relu (Relu)" in out
    table = json.loads(report_path.read_text())
    assert table["first_diverging_node"] == "relu"
    assert [row["name"] for row in table["nodes"]][:3] == ["project", "relu", "square"]
    assert table["nodes"][0]["input_shapes"] == [[3, 8], [8, 16]]


def test_cli_against_another_file(tmp_path, capsys):
    from onyx.tools.cli import main

    fp32, fp16 = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    fp32.write_bytes(chain_model())
    fp16.write_bytes(chain_model(np.float16))
    rc = main(["compare", str(fp16), "--against", str(fp32), "--rtol", "1e-2", "--atol", "1e-3"])
    assert rc == 1
    assert "first diverging node: square (Mul)" in capsys.readouterr().out


def test_no_shared_values_is_explained():
    import onnx

    other = onnx.load_from_string(chain_model())
    for node in other.graph.node:  # other names inside, and one node computing differently
        node.output[:] = [o if o == "y" else o + "_renamed" for o in node.output]
        node.input[:] = [i if i in ("x", "w", "axes") else i + "_renamed" for i in node.input]
    other.graph.node[1].op_type = "Abs"
    report = compare(chain_model(), against=other.SerializeToString())
    assert not report.ok and report.first_diverging_node == "normalize"
    assert report.first_diverging.status == "suspect"
    assert "not visible on both sides" in report.note and "note:" in str(report)


def conv_relu_model() -> bytes:
    w = np.random.default_rng(2).standard_normal((2, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])],
        [numpy_helper.from_array(w, "W")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_wrong_fused_kernel_is_blamed_on_the_optimization():
    def wrong_fused(x, w, *rest, **attrs):
        return np.zeros((1, 2, 2, 2), np.float32) - 1

    with override_kernel("FusedConv", wrong_fused, domain="com.microsoft"):
        report = compare(conv_relu_model(), "onnxruntime")
        unoptimized = compare(conv_relu_model(), "onnxruntime", optimize=False)
    assert not report.ok and unoptimized.ok
    assert "without graph optimizations agrees" in report.note


def test_maps_compare_by_key_within_tolerance():
    """ZipMap outputs (a list of class -> probability maps): values within tolerance agree,
    as onnxruntime's Python floats and onyx's float32 differ in the last bit; keys must match."""
    from onyx.debug.compare import compare_values

    ours = [{0: np.float32(0.25), 1: np.float32(0.75)}]
    theirs = [{0: 0.25000001, 1: 0.7499999}]
    assert compare_values("p", ours, theirs, 1e-3, 1e-4).ok
    assert not compare_values("p", ours, [{0: 0.25, 1: 0.5}], 1e-3, 1e-4).ok
    assert not compare_values("p", ours, [{0: 0.25, 2: 0.75}], 1e-3, 1e-4).ok
