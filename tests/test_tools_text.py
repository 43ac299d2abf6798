"""onyx.to_text / parse_model against onnx's printer and parser (the anchors).

Both directions run over every model of onnx's backend node suite: onnx's parser reads our text
into a model that onnx prints exactly as it prints the original, and our parser reads onnx's
text into a model that onnx prints the same way again.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from tools_node_suite import node_cases

import onyx
from onyx.tools.text import TextSyntaxError, format_float, parse_graph, parse_node


@pytest.fixture(scope="module")
def node_models():
    return [(c.name, c.model) for c in node_cases()]


def test_onnx_parses_our_text_of_every_node_model(node_models):
    wrong = []
    for name, proto in node_models:
        text = onyx.to_text(onyx.loads(proto.SerializeToString()))
        if onnx.printer.to_text(onnx.parser.parse_model(text)) != onnx.printer.to_text(proto):
            wrong.append(name)
    assert len(node_models) > 1800
    assert not wrong, wrong[:10]


def test_we_parse_onnx_text_of_every_node_model(node_models):
    wrong = []
    for name, proto in node_models:
        text = onnx.printer.to_text(proto)
        model = onyx.parse_model(text)
        if onnx.printer.to_text(onnx.load_from_string(onyx.dumps(model))) != text:
            wrong.append(name)
    assert not wrong, wrong[:10]


FUNCTION_MODEL = """
<ir_version: 8, opset_import: ["" : 17, "local" : 1], producer_name: "me",
 metadata_props: ["k": "v \\"q\\""]>
g (float[N, 3] x, int64[2] shape = {1, 3}) => (float[1, 3] y)
  <float[3] bias = {0.5, -1, 1e-05}, float[N,3] t>
{
   # a comment, then a node with a name and an outer-scope read in a subgraph
   [first] t = local.AddBias <alpha: float = 2> (x, bias)
   c = Constant <value: tensor = bool {1}> ()
   y = If (c) <then_branch: graph = then () => (float[1,3] a) {
         a = Reshape (t, shape)
      }, else_branch: graph = else () => (float[1,3] b) {
         b = Reshape (x, shape)
      }>
}
<domain: "local", opset_import: ["" : 17]>
AddBias <alpha: float = 1.5> (X, B) => (Y) {
   A = Constant <value_float: float = @alpha> ()
   S = Mul (X, A)
   Y = Add (S, B)
}
"""


def test_function_subgraph_and_header_round_trip():
    model = onyx.parse_model(FUNCTION_MODEL)
    assert model.producer_name == "me" and model.metadata_props == {"k": 'v "q"'}
    (fn,) = model.functions.values()
    assert fn.attribute_defaults[0].value == 1.5
    ref = fn.graph.nodes[0].attributes["value_float"]
    assert ref.ref_attr_name == "alpha"
    g = model.graph
    assert g.nodes[0].name == "first" and g.nodes[0].domain == "local"
    then = g.nodes[2].attributes["then_branch"].value
    assert then.nodes[0].inputs[0] is g.nodes[0].outputs[0]  # the outer value itself
    assert list(onyx.to_array(g.initializers["bias"].const_value)) == [0.5, -1, 1e-05]
    # onnx reads our text of it, and our parser reads that text back the same
    text = onyx.to_text(model)
    proto = onnx.parser.parse_model(text)
    onnx.checker.check_model(proto)
    assert onyx.to_text(onyx.parse_model(text)) == text
    x = np.ones((1, 3), np.float32)
    (y,) = onyx.InferenceSession(onyx.dumps(model)).run(None, {"x": x})
    np.testing.assert_allclose(y, x * 2 + np.float32([0.5, -1, 1e-05]))


def test_graph_node_and_tensor_text():
    g = parse_graph('agraph (float[N] "x y") => (float[N] z) { z = Relu ("x y") }')
    assert g.inputs[0].name == "x y"
    assert onyx.to_text(g).startswith('agraph (float[N] "x y") => (float[N] z)')
    n = parse_node("out, = Split <axis = 0, split: ints = []> (a,)")
    assert [v.name for v in n.outputs] == ["out"] and n.attributes["split"].value == []
    assert onyx.to_text(n) == "out = Split <axis: int = 0, split: ints = []> (a)"
    t = onyx.from_array(np.array([1.5, np.inf, -np.nan], np.float16), name="h")
    assert onyx.to_text(t) == "float16[3] h {15872,31744,65024}"


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-05, "1e-05"), (0.1, "0.1"), (100.0, "100"), (1e20, "1e+20"), (-2.5, "-2.5"), (0.0, "0")],
)
def test_floats_print_as_cpp_to_chars(value, text):
    assert format_float(value) == text


def test_errors_name_line_and_column():
    with pytest.raises(TextSyntaxError, match="line 2, column"):
        onyx.parse_model("<ir_version: 8>\ng (float x) => (float y) { y = Relu (x }")
    with pytest.raises(TextSyntaxError, match="declared int, written as string"):
        parse_node('y = Foo <a: int = "s"> (x)')
    with pytest.raises(onyx.OnyxError, match="3 values given, 2 needed"):
        parse_graph("g () => () <float[2] w = {1, 2, 3}> {}")
