"""A decoder's gated MLP as one node: what onyx.generate's own session runs.

A Llama-style layer computes ``down(silu(gate(x)) * up(x))``; onnxruntime-genai's builder
writes it as two MatMulNBits of the same input, Sigmoid, Mul, Mul: five nodes per layer, each
a Python call per decoded token. :func:`fuse_gated_mlp` replaces the five by one
``ai.onyx.GatedMatMulNBits`` node (its kernel in runtime/kernels/contrib_quant.py: the same two
products and the same float ops, so the values do not change), with a model-local function
body for runtimes without onyx's kernel.
"""

from __future__ import annotations

from .. import ir
from ..runtime.registry import ONYX_DOMAIN

MS = "com.microsoft"
#: MatMulNBits' attributes the two products must share (and the fused node takes).
_ATTRIBUTES = ("K", "N", "bits", "block_size", "accuracy_level")
_TYPES = dict.fromkeys(_ATTRIBUTES, ir.AttrType.INT)
_DEFAULTS = {"bits": 4, "accuracy_level": 0}


def _only_reader(v: ir.Value, graph: ir.Graph) -> ir.Node | None:
    if any(o is v for o in graph.outputs):
        return None
    use = v.only_use()
    return use[0] if use is not None else None


def _projection(v: ir.Value | None) -> ir.Node | None:
    """The MatMulNBits making v from a constant weight (no zero points, g_idx or bias)."""
    node = v.producer if v is not None else None
    if node is None or (node.domain, node.op_type) != (MS, "MatMulNBits"):
        return None
    inputs = list(node.inputs) + [None] * (6 - len(node.inputs))
    if any(x is not None for x in inputs[3:]) or None in inputs[:3]:
        return None
    if any(x.const_value is None for x in inputs[1:3]):
        return None
    return node


def _attrs(node: ir.Node) -> dict | None:
    values = {}
    for name in _ATTRIBUTES:
        a = node.attributes.get(name)
        value = _DEFAULTS.get(name) if a is None else a.value
        if value is None:
            return None
        values[name] = int(value)
    return values


def _gate(mul: ir.Node, graph: ir.Graph):
    """(gate projection, Sigmoid, inner Mul, up projection) where ``mul`` is
    Mul(Mul(g, Sigmoid(g)), u) of two MatMulNBits g and u of one input, else None."""
    if (mul.domain, mul.op_type) != ("", "Mul") or len(mul.inputs) != 2:
        return None
    for inner_v, up_v in (mul.inputs, mul.inputs[::-1]):
        inner = inner_v.producer if inner_v is not None else None
        if inner is None or (inner.domain, inner.op_type) != ("", "Mul"):
            continue
        if _only_reader(inner_v, graph) is not mul or len(inner.inputs) != 2:
            continue
        for g_v, s_v in (inner.inputs, inner.inputs[::-1]):
            sigmoid = s_v.producer if s_v is not None else None
            if sigmoid is None or (sigmoid.domain, sigmoid.op_type) != ("", "Sigmoid"):
                continue
            if sigmoid.inputs[0] is not g_v or _only_reader(s_v, graph) is not inner:
                continue
            gate, up = _projection(g_v), _projection(up_v)
            if gate is None or up is None or gate is up or gate.inputs[0] is not up.inputs[0]:
                continue
            if g_v.use_count() != 2 or _only_reader(up_v, graph) is not mul:
                continue
            if any(o is g_v for o in graph.outputs) or _attrs(gate) != _attrs(up):
                continue
            if _attrs(gate) is None or g_v is up_v:
                continue
            return gate, sigmoid, inner, up
    return None


def _ensure_function(model: ir.Model) -> None:
    """The model-local function GatedMatMulNBits(X, Bg, Sg, Bu, Su) = silu(g) * u."""
    model.opset_imports.setdefault(ONYX_DOMAIN, 1)
    if (ONYX_DOMAIN, "GatedMatMulNBits", "") in model.functions:
        return
    x, bg, sg, bu, su = (ir.Value(n) for n in ("X", "Bg", "Sg", "Bu", "Su"))
    refs = [ir.Attr(a, _TYPES[a], ref_attr_name=a) for a in _ATTRIBUTES]
    gate = ir.Node("MatMulNBits", [x, bg, sg], ["g"], refs, domain=MS)
    up = ir.Node("MatMulNBits", [x, bu, su], ["u"], list(refs), domain=MS)
    sigmoid = ir.Node("Sigmoid", [gate.outputs[0]], ["s"])
    silu = ir.Node("Mul", [gate.outputs[0], sigmoid.outputs[0]], ["silu"])
    y = ir.Node("Mul", [silu.outputs[0], up.outputs[0]], ["Y"])
    nodes = [gate, up, sigmoid, silu, y]
    body = ir.Graph([x, bg, sg, bu, su], [y.outputs[0]], nodes, name="GatedMatMulNBits")
    opset = model.opset_imports.get("", 21)
    f = ir.Function(ONYX_DOMAIN, "GatedMatMulNBits", body, attributes=_ATTRIBUTES,
                    opset_imports={"": opset, MS: 1})  # fmt: skip
    f.doc_string = "Y = silu(MatMulNBits(X, Bg, Sg)) * MatMulNBits(X, Bu, Su) (onyx: one kernel)"
    model.functions[f.key] = f


def fuse_gated_mlp(model: ir.Model) -> int:
    """Rewrite ``model`` (in place): each Mul(Mul(g, Sigmoid(g)), u) of two MatMulNBits g, u
    of one input becomes one GatedMatMulNBits node. The number of nodes fused."""
    graph = model.graph
    count = 0
    for mul in list(graph):
        found = _gate(mul, graph)
        if found is None or any(o is mul.outputs[0] for o in graph.outputs):
            continue
        gate, sigmoid, inner, up = found
        out = ir.Value(f"{mul.outputs[0].name}/gated")
        out.type = mul.outputs[0].type
        inputs = [gate.inputs[0], *gate.inputs[1:3], *up.inputs[1:3]]
        fused = ir.Node("GatedMatMulNBits", inputs, [out], _attrs(gate), domain=ONYX_DOMAIN,
                        name=f"{gate.name}/gated")  # fmt: skip
        graph.insert_before(mul, fused)
        mul.outputs[0].replace_all_uses_with(out)
        for node in (mul, inner, sigmoid, gate, up):
            graph.remove(node)
        count += 1
    if count:
        _ensure_function(model)
    return count
