"""Chains of quantized convs kept channels-last (NHWC), as onnxruntime's NhwcTransformer.

onyx's int8 conv kernels compute in NHWC (the implicit GEMM's rows are pixels, the
depthwise conv's vectors are a pixel's channels): on NCHW tensors each QLinearConv
transposed its input and its output, most of a small layer's time. This pass finds groups of
QLinearConv / QLinearConvLookup nodes connected through each other and through same-shape
QLinearAdds (a residual), and rewrites each group of at least two convs to the ai.onyx
QLinearConvNhwc / QLinearConvLookupNhwc ops (kernels/conv_nhwc.py) on NHWC tensors; the
adds stay as they are (elementwise: layout-free). A Transpose enters the group where it
reads an NCHW tensor (a view: the conv reads the NCHW bytes in place) and one leaves it
where anything else reads a group's output, so the model computes the same bytes. The new
ops are model-local functions (Transpose -> QLinearConv [-> table] -> Transpose), so a
saved model stays valid ONNX.

A session runs the pass only where the native int8 GEMM is there (AVX512-VNNI): the layout
buys nothing on numpy's paths.
"""

from __future__ import annotations

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import _CONV_ATTRIBUTES, _REF_TYPES
from .core import ALL, MS, STANDARD, PassContext, graph_pass, same_dims, static_shape

PASS = "NhwcTransformer"
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
#: NCHW op -> (its NHWC op, the input count of its function)
_CONVS = {
    ("", "QLinearConv"): ("QLinearConvNhwc", 9),
    (ONYX_DOMAIN, "QLinearConvLookup"): ("QLinearConvLookupNhwc", 10),
}


def _native_ready() -> bool:
    from ..runtime import native

    return native.available() and native.int8_gemm_ok(64)


@graph_pass(PASS, ALL)
def nhwc_transformer(ctx: PassContext) -> bool:
    if not _native_ready():
        return False
    members = [n for n in ctx.graph if _is_conv(ctx, n) or _is_add(n)]
    if not members:
        return False
    changed = False
    for group in _groups(members):
        if _worth(ctx, group):
            _rewrite(ctx, group)
            changed = True
    return changed


def _worth(ctx: PassContext, group: list[ir.Node]) -> bool:
    """Whether the group saves more than it pays: each conv saves its own two transposes,
    each reader outside the group (each makes its own NCHW copy) and each tensor entering it
    other than through a conv (which reads an NCHW view in place) costs one, and a copy costs
    more than a conv saves (the convs' own transposes were native and fused with their
    packing). Measured on the zoos: whole networks of quantized convs (the serving zoo's
    ResNet and MobileNet, one crossing at each end) gain 15-20%; a pre-activation ResNet's
    groups between float BatchNormalizations (five convs, two crossings) or a MobileNetV3's
    between squeeze-excites gain nothing. So a group needs four convs per crossing."""
    inside = {id(n) for n in group}
    convs = sum(_is_conv(ctx, n) for n in group)
    paid = 0
    for node in group:
        out = node.outputs[0]
        paid += ctx.is_output(out) + sum(id(u) not in inside for u, _ in out.iter_uses())
        if node.op_type == "QLinearAdd":
            for i in _data_inputs(node):
                p = node.inputs[i].producer
                paid += p is None or id(p) not in inside
    return convs >= 2 and 4 * paid <= convs


def _key(node: ir.Node) -> tuple[str, str]:
    return ("" if node.domain in STANDARD else node.domain, node.op_type)


def _is_conv(ctx: PassContext, node: ir.Node) -> bool:
    """A 2-D QLinearConv(Lookup) on a 4-D tensor with constant weights and attributes."""
    if _key(node) not in _CONVS or node.graph is not ctx.graph or node.attributes_have_refs():
        return False
    if any(a not in _CONV_ATTRIBUTES for a in node.attributes) or len(node.inputs) < 8:
        return False
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    shape = static_shape(node.inputs[0])
    w = ctx.const(node.inputs[3])
    return shape is not None and len(shape) == 4 and w is not None and w.ndim == 4


def _is_add(node: ir.Node) -> bool:
    """A com.microsoft QLinearAdd of two tensors of its output's 4-D shape (no broadcast)."""
    if node.op_type != "QLinearAdd" or node.domain != MS or len(node.inputs) < 8:
        return False
    out, a, b = (static_shape(v) for v in (node.outputs[0], node.inputs[0], node.inputs[3]))
    return out is not None and len(out) == 4 and same_dims(a, out) and same_dims(b, out)


def _data_inputs(node: ir.Node) -> tuple[int, ...]:
    return (0, 3) if node.op_type == "QLinearAdd" else (0,)


def _groups(members: list[ir.Node]) -> list[list[ir.Node]]:
    """The members connected through their data inputs, each group in graph order."""
    index = {id(n): i for i, n in enumerate(members)}
    parent = list(range(len(members)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for n in members:
        for i in _data_inputs(n):
            p = n.inputs[i].producer if n.inputs[i] is not None else None
            if p is not None and id(p) in index:
                parent[root(index[id(p)])] = root(index[id(n)])
    groups: dict[int, list[ir.Node]] = {}
    for i, n in enumerate(members):
        groups.setdefault(root(i), []).append(n)
    return list(groups.values())


def _permuted(v: ir.Value, perm: list[int]) -> ir.TensorType | None:
    t = v.type
    if not isinstance(t, ir.TensorType) or t.shape is None:
        return None
    dims = list(t.shape.dims)
    return ir.TensorType(t.elem_type, ir.Shape(tuple(dims[p] for p in perm)))


def _transpose(ctx: PassContext, v: ir.Value, perm: list[int], base: str) -> ir.Node:
    node = ir.Node(
        "Transpose", [v], [ctx.fresh_name(base)], {"perm": perm}, name=ctx.fresh_name(base)
    )
    node.outputs[0].type = _permuted(v, perm)
    return node


def _rewrite(ctx: PassContext, group: list[ir.Node]) -> None:
    """Each member on NHWC tensors: its NCHW inputs through a Transpose (one per tensor),
    its output read as NHWC by the other members and through a Transpose by anything else."""
    g = ctx.graph
    inside = {id(n) for n in group}
    entries: dict[int, ir.Value] = {}  # an NCHW tensor -> its NHWC Transpose's output
    for node in group:  # (graph order: a member's producers in the group come first)
        inputs = list(node.inputs)
        for i in _data_inputs(node):
            v = inputs[i]
            if v.producer is not None and id(v.producer) in inside:
                continue  # (already the NHWC output of a rewritten member)
            if id(v) not in entries:
                t = _transpose(ctx, v, _TO_NHWC, v.name + "_nhwc")
                g.insert_before(node, t)
                entries[id(v)] = t.outputs[0]
            inputs[i] = entries[id(v)]
        old = node.outputs[0]
        fused = _nhwc_node(ctx, node, inputs)
        fused.outputs[0].type = _permuted(old, _TO_NHWC)
        g.insert_before(node, fused)
        inside.add(id(fused))
        for user, i in list(old.iter_uses()):
            if id(user) in inside:
                user.set_input(i, fused.outputs[0])
        if old.has_uses() or ctx.is_output(old):
            leave = _transpose(ctx, fused.outputs[0], _TO_NCHW, old.name + "_nchw")
            g.insert_before(node, leave)
            leave.take_over_outputs(node)
        g.remove(node, safe=False)
        ctx.count(PASS)


def _nhwc_node(ctx: PassContext, node: ir.Node, inputs: list) -> ir.Node:
    name = ctx.fresh_name((node.name or node.op_type) + "_nhwc")
    out = [ctx.fresh_name(node.outputs[0].name + "_nhwc")]
    if node.op_type == "QLinearAdd":
        return ir.Node("QLinearAdd", inputs, out, list(node.attributes.values()), MS, name)
    op_type, arity = _CONVS[_key(node)]
    ctx.ensure_function(op_type, lambda: _function(ctx, op_type, arity == 10))
    inputs = inputs + [None] * (arity - len(inputs))
    carried = list(node.attributes.values())
    return ir.Node(op_type, inputs, out, carried, ONYX_DOMAIN, name)


def _function(ctx: PassContext, op_type: str, lookup: bool) -> ir.Function:
    """The model-local function: Transpose -> QLinearConv [-> Gather(table)] -> Transpose."""
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale"]
    names += ["y_zero_point", "B"] + (["table"] if lookup else [])
    params = [ir.Value(n) for n in names]
    refs = [ir.Attr(a, _REF_TYPES[a], ref_attr_name=a) for a in _CONV_ATTRIBUTES]
    enter = ir.Node("Transpose", [params[0]], ["x_nchw"], {"perm": _TO_NCHW})
    conv = ir.Node("QLinearConv", [enter.outputs[0], *params[1:9]], ["q"], refs)
    nodes = [enter, conv]
    if lookup:
        cast = ir.Node("Cast", [conv.outputs[0]], ["index"], {"to": int(ir.DataType.INT32)})
        nodes += [cast, ir.Node("Gather", [params[9], cast.outputs[0]], ["q_mapped"], {"axis": 0})]
    leave = ir.Node("Transpose", [nodes[-1].outputs[0]], ["y"], {"perm": _TO_NHWC})
    body = ir.Graph(params, [leave.outputs[0]], [*nodes, leave], name=op_type)
    f = ir.Function(
        ONYX_DOMAIN, op_type, body, _CONV_ATTRIBUTES, opset_imports={"": ctx.opset("") or 13}
    )
    f.doc_string = "QLinearConv on channels-last (NHWC) tensors" + (
        ", then table[y] (by bit pattern)" if lookup else ""
    )
    return f
