"""onyx simplify: standard ops only, the same outputs (onnxruntime), at most onnxslim's node
count where onnxslim is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onyx
from onyx.tools.simplify import compare, simplify

MODELS = Path(__file__).with_name("models")
STANDARD = {"", "ai.onnx", "ai.onnx.ml"}


def _feeds(model):
    rng = np.random.default_rng(0)
    out = {}
    for v in model.graph.inputs:
        dims = [d if isinstance(d, int) else 2 for d in v.shape]
        dt = onyx.ir.to_numpy(v.dtype)
        if "mask" in v.name:
            out[v.name] = np.ones(dims, dt)
        elif dt.kind in "iu":
            out[v.name] = rng.integers(0, 10, dims).astype(dt)
        else:
            out[v.name] = rng.standard_normal(dims).astype(dt)
    return out


@pytest.mark.parametrize(
    "name",
    ["bert_torchscript_op17", "gpt_torchscript_op17", "llama_dynamo_op18", "unet_torchscript_op17",
     "lstm_torchscript_op17", "bert_quant_qdq", "resnet_quant_qdq"],
)  # fmt: skip
def test_simplify_keeps_outputs_and_standard_ops(name):
    path = MODELS / f"{name}.onnx"
    model = onyx.load(path)
    small = simplify(model)
    domains = {n.domain for n in small.graph.all_nodes()}
    assert domains <= STANDARD | {n.domain for n in model.graph.all_nodes()}
    assert len(small.graph) < len(model.graph)
    feeds = _feeds(model)
    want = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    data = onyx.dumps(small)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    dq = [n for n in small.graph if n.op_type == "DequantizeLinear"]
    if "qdq" in name:  # quantized weights stay quantized
        assert any(n.inputs[0].name in small.graph.initializers for n in dq)
    table = compare(model, small)
    assert "nodes" in table and "params" in table and "size" in table


def test_node_counts_against_onnxslim():
    onnxslim = pytest.importorskip("onnxslim")
    ours = theirs = 0
    for name in [
        "bert_torchscript_op17",
        "gpt_torchscript_op17",
        "bert_quant_qdq",
        "gru_dynamo_op18",
    ]:
        path = MODELS / f"{name}.onnx"
        ours += len(simplify(onyx.load(path)).graph)
        theirs += len(onnxslim.slim(onnx.load(path)).graph.node)
    assert ours <= theirs


def test_compare_says_when_no_op_type_changed():
    from pathlib import Path

    model = onyx.load(Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx")
    lines = compare(model, model).splitlines()
    assert lines[2].startswith("(no op type changed)")
    assert lines[3].startswith("-")
