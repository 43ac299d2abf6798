"""onyx.reduce and `onyx reduce`: a planted wrong kernel in a real model is isolated; user
commands as predicates; side branches are dropped."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_compare import chain_model

import onyx
from onyx.debug import compare, reduce
from onyx.runtime.custom_ops import override_kernel

MOBILENET = Path(__file__).parent / "models" / "mobilenet_torchscript_op17.onnx"
# (a node the optimizer keeps: the blocks' convs, activations, sums and squeeze-excite
# scales all run as channels-last ops, optimizer/layout.py)
PLANTED = "/fc/fc.1/HardSwish"


def wrong_hard_swish(x):
    return x * np.clip(x / 6 + 0.5, 0, 1) + 1


def test_planted_kernel_in_a_real_model_is_isolated(tmp_path):
    model = onyx.load(MOBILENET)
    with override_kernel("HardSwish", wrong_hard_swish, node=PLANTED):
        assert compare(model, "onnxruntime").first_diverging_node == PLANTED
        result = reduce(model, "compare against onnxruntime")
        assert result.nodes == [PLANTED]
        assert len(result.model.graph) == 1 and result.original_nodes == len(model.graph)
        path, inputs_path = result.save(str(tmp_path / "reduced.onnx"))
        with np.load(inputs_path) as data:
            feeds = {k: data[k] for k in data.files}
        assert not compare(path, "onnxruntime", inputs=feeds).ok
    assert compare(path, "onnxruntime", inputs=feeds).ok  # the right kernel agrees


def test_reduced_model_is_valid_onnx(tmp_path):
    import onnx

    with override_kernel("Relu", lambda x: np.maximum(x, 0) + 1, node="relu"):
        result = reduce(chain_model())
    path, _ = result.save(str(tmp_path / "r.onnx"))
    onnx.checker.check_model(onnx.load(path), full_check=True)
    assert [n.name for n in result.model.graph] == ["relu"]
    assert [v.name for v in result.model.graph.inputs] == ["h"]


def test_side_branches_are_dropped():
    def nodes(*names):
        return [helper.make_node("Relu", [i], [o], name=o) for i, o in names]

    graph = helper.make_graph(
        nodes(("x", "a"), ("a", "b"), ("x", "c"), ("b", "d"), ("d", "e")),
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])

    def needs_b_and_d(model, feeds):  # a failure that takes two nodes
        names = {n.name for n in model.graph}
        return {"b", "d"} <= names

    result = reduce(data.SerializeToString(), needs_b_and_d)
    assert result.nodes == ["b", "d"]  # c (between them in the order) is dropped


def test_a_model_that_does_not_fail_is_refused():
    with pytest.raises(onyx.InvalidArgument, match="does not fail"):
        reduce(chain_model())
    with pytest.raises(onyx.InvalidArgument, match="against a runtime"):
        reduce(chain_model(), "compare against other.onnx")


def test_cli_with_a_user_command(tmp_path, capsys):
    """`onyx compare` itself as the user's command: exits nonzero when outputs differ."""
    from onyx.tools.cli import main

    model = tmp_path / "fp16.onnx"
    model.write_bytes(chain_model(np.float16))
    out = tmp_path / "reduced.onnx"
    command = (
        f"{sys.executable} -m onyx compare {{model}} --inputs {{inputs}} --against float32 "
        "--rtol 1e-2 --atol 1e-3"
    )
    assert main(["reduce", str(model), "--fails-when", command, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "reduced 6 nodes to 1" in printed and "square" in printed
    reduced = onyx.load(out)
    assert [n.op_type for n in reduced.graph] == ["Mul"]
    assert (tmp_path / "reduced_inputs.npz").exists()


def test_fp16_overflow_against_float32():
    fp16 = chain_model(np.float16)
    report = compare(fp16, against="float32", rtol=1e-2, atol=1e-3)
    assert report.first_diverging_node == "square"
    result = reduce(fp16, "compare against float32", rtol=1e-2, atol=1e-3)
    assert result.nodes == ["square"]


def test_debugging_doc_runs(tmp_path, monkeypatch):
    """docs/debugging.md's Python blocks, run in order in one namespace."""
    import re

    doc = (Path(__file__).parents[1] / "docs" / "debugging.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/debugging.md", "exec"), scope)
    assert (tmp_path / "square_only.onnx").exists()
