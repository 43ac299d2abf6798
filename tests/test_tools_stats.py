"""onyx.model_stats: hand-computed figures, and onnx-tool's (the anchor) where it is installed."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import onyx

MODELS = Path(__file__).with_name("models")


def test_small_model_by_hand():
    m = onyx.parse_model(
        """<ir_version: 10, opset_import: ["" : 21]>
        g (float[N, 3, 8, 8] x) => (float[N, 10] y)
          <float[4, 3, 3, 3] w = {...}, float[4] b, float[10, 4] fw, float[10] fb> {
            c = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)
            r = Relu (c)
            p = GlobalAveragePool (r)
            f = Flatten (p)
            y = Gemm <transB: int = 1> (f, fw, fb)
        }""".replace("{...}", "{" + ",".join(["0"] * 108) + "}")
        .replace("float[4] b,", "float[4] b = {1, 2, 3, 4},")
        .replace("float[10, 4] fw,", "float[10, 4] fw = {" + ",".join(["1"] * 40) + "},")
        .replace("float[10] fb>", "float[10] fb = {" + ",".join(["0"] * 10) + "}>")
    )
    s = onyx.model_stats(m, {"N": 2})
    conv = 2 * 4 * 8 * 8 * (3 * 3 * 3) + 2 * 4 * 8 * 8  # products + bias
    gemm = 2 * 10 * 4 + 2 * 10
    assert [n.macs for n in s.nodes] == [conv, 0, 0, 0, gemm]
    assert s.macs == conv + gemm
    assert s.params == 108 + 4 + 40 + 10 and s.param_bytes == 4 * s.params
    assert s.nodes[1].flops == 2 * 4 * 8 * 8  # one per Relu output
    # peak: Relu's input c and output r (2*4*64 floats each), more than x with c at the Conv
    assert s.peak_memory == 4 * (2 * 4 * 64 + 2 * 4 * 64)
    assert not s.assumed
    unbound = onyx.model_stats(m)
    assert "N" in unbound.assumed and unbound.macs == s.macs // 2
    assert "total MACs" in s.table() and "Conv" in s.table(per_node=True)


@pytest.mark.parametrize(
    "name",
    ["resnet_torchscript_op17", "mobilenet_torchscript_op17", "bert_torchscript_op17",
     "unet_torchscript_op17", "gpt_dynamo_op18"],
)  # fmt: skip
def test_matches_onnx_tool(name):
    onnx_tool = pytest.importorskip("onnx_tool")
    path = MODELS / f"{name}.onnx"
    model = onyx.load(path)
    shapes = {v.name: [d if isinstance(d, int) else 2 for d in v.shape] for v in model.graph.inputs}
    feeds = {
        v.name: np.zeros(shapes[v.name], onyx.ir.to_numpy(v.dtype)) for v in model.graph.inputs
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = onnx_tool.Model(str(path)).graph
        graph.shape_infer(feeds)
        graph.profile()
    s = onyx.model_stats(model, shapes)
    assert not s.assumed
    # the products: exactly onnx-tool's count, node by node (ConvTranspose aside: onnx-tool
    # counts the stride's inserted zeros, onyx the products that happen)
    products = {"Conv", "MatMul", "Gemm"}
    compared = 0
    for n in s.nodes:
        if n.op_type in products and n.name in graph.nodemap:
            assert n.macs == int(graph.nodemap[n.name].macs[0]), n.name
            compared += 1
    assert compared >= 5
    assert s.params == pytest.approx(graph.params, rel=1e-3)
    assert s.memory == pytest.approx(graph.memory, rel=1e-2)
    # onnx-tool also counts elementwise work as MACs, weighted by instruction costs
    assert s.macs <= graph.macs[0]
