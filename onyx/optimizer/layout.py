"""Layout propagation: a MobileNet's convs run channels-last (NHWC) between two reorders.

In NCHW a depthwise conv has its channels in separate planes: onyx's kernel transposed 16 of
them into vector lanes and back around every layer (depthwise.c), more time than the
multiply-adds. ``ChannelsLastTransformer`` takes each maximal chain of

- float32 2-D convs with constant weights, group 1 or depthwise (Conv, com.microsoft FusedConv
  without a residual, ai.onyx ConvHardSwish), which become ai.onyx NhwcFusedConv /
  NhwcConvHardSwish,
- GlobalAveragePool and ReduceMean over (H, W) keeping dims (squeeze-excite's pooling), which
  become ai.onyx NhwcGlobalAveragePool,
- elementwise activations, and Add / Sub / Mul / Div of two chain tensors (a residual sum, a
  squeeze-excite scale: both operands permuted alike broadcast alike) or of a chain tensor and
  a constant (the constant is permuted once here),

and runs it on (N, H, W, C) tensors: a standard Transpose (0, 2, 3, 1) where a chain reads an
NCHW tensor (onyx's Transpose is a view, which the first conv reads through its strides) and
one Transpose (0, 3, 1, 2) where an NCHW reader or a graph output takes a chain tensor (a
pooled (N, 1, 1, C) one is the same bytes). The chain's tensors are new Values; the old ones
stay NCHW for readers outside it. The new ops are model-local functions (Transpose, the NCHW
op, Transpose back), so a saved model runs in any runtime.

A chain is taken only where it holds a depthwise conv (the layout's gain; a ResNet's convs run
on conv_f32.c) and the native kernels run (native/nhwc.c, AVX-512): elsewhere the new ops'
numpy path is their body, slower than the NCHW graph. The pass runs once per optimization.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import _REF_TYPES as _CONV_ATTRIBUTES  # (the Conv attributes the new ops pass on)
from .core import (
    EXTENDED,
    MS,
    STANDARD,
    PassContext,
    graph_pass,
    is_op,
    same_dims,
    static_shape,
)

#: (N, C, H, W) -> (N, H, W, C) and back.
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]

#: Elementwise ops of one tensor input (Clip's bounds, constants, may follow).
UNARY = frozenset(
    ("Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Neg")
)
BINARY = frozenset(("Add", "Sub", "Mul", "Div"))
#: ai.onyx elementwise ops of one tensor input (HardSigmoidMulFusion's hardswish).
ONYX_UNARY = frozenset(("HardSigmoidMul",))

#: Activations NhwcFusedConv applies (FusedConv's, which the native kernels apply).
_FUSED_ACTIVATIONS = frozenset(("Relu", "LeakyRelu", "Clip", "HardSigmoid"))

_ACTIVATION_ATTRIBUTES = {"activation": ir.AttrType.STRING, "activation_params": ir.AttrType.FLOATS}


def _worthwhile() -> bool:
    """Whether the channels-last kernels run here (tests force the pass elsewhere)."""
    from ..runtime.native import nhwc

    return nhwc.available()


# ---------------------------------------------------------------------------- what joins


def _rank4(v: ir.Value | None) -> tuple | None:
    shape = static_shape(v)
    return shape if shape is not None and len(shape) == 4 else None


def _is_float32(v: ir.Value | None) -> bool:
    t = v.type if v is not None else None
    return isinstance(t, ir.TensorType) and t.elem_type == ir.DataType.FLOAT


def _conv_kind(ctx: PassContext, node: ir.Node) -> str | None:
    """'depthwise' or 'conv' for a conv the chain takes, else None."""
    if is_op(node, "Conv"):
        pass
    elif node.domain == MS and node.op_type == "FusedConv":
        extra = node.inputs[3:]
        if any(v is not None and v.name for v in extra):  # (a residual: not taken)
            return None
        act = node.attr("activation", "")
        if act and act not in _FUSED_ACTIVATIONS:
            return None
    elif not (node.domain == ONYX_DOMAIN and node.op_type == "ConvHardSwish"):
        return None
    x = node.inputs[0]
    shape = _rank4(x)
    w = ctx.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if shape is None or w is None or w.dtype != np.float32 or w.ndim != 4 or not _is_float32(x):
        return None
    if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].name:
        if ctx.const(node.inputs[2]) is None:
            return None
    if node.attributes_have_refs() or not _rank4(node.outputs[0]):
        return None
    group, C = node.attr("group", 1), shape[1]
    if group == 1:
        return "conv"
    if isinstance(C, int) and group == C == w.shape[0] and w.shape[1] == 1:
        return "depthwise"
    return None


def _reduces_pixels(ctx: PassContext, node: ir.Node) -> bool:
    """GlobalAveragePool, or ReduceMean over axes (2, 3) keeping them, of a 4-D tensor."""
    if is_op(node, "GlobalAveragePool"):
        return _rank4(node.inputs[0]) is not None
    if not is_op(node, "ReduceMean") or _rank4(node.inputs[0]) is None:
        return False
    if not node.attr("keepdims", 1):
        return False
    if len(node.inputs) > 1 and node.inputs[1] is not None and node.inputs[1].name:
        axes = ctx.const(node.inputs[1])
        axes = None if axes is None else axes.reshape(-1).tolist()
    else:
        axes = node.attr("axes")
    return axes is not None and sorted(a % 4 for a in axes) == [2, 3]


def _constant_operand(ctx: PassContext, v: ir.Value) -> np.ndarray | None:
    c = ctx.const(v)
    return c if c is not None and c.ndim <= 4 else None


def _joins(ctx: PassContext, node: ir.Node, nhwc: dict) -> bool:
    """Whether ``node`` runs in the chain (nhwc: the values the chain holds so far). (Its op
    and whether it reads the chain are asked first: most nodes of a CNN fail there, before
    their output's shape is looked up.)"""
    op = node.op_type
    onyx_unary = node.domain == ONYX_DOMAIN and op in ONYX_UNARY
    if node.domain not in STANDARD and not onyx_unary:
        return False
    inputs = node.inputs
    if op in BINARY and len(inputs) == 2:
        a, b = inputs
        if a not in nhwc and b not in nhwc:
            return False
    elif op in UNARY or onyx_unary or op in _POOLS:
        if not inputs or inputs[0] not in nhwc:
            return False
    else:
        return False
    if len(node.outputs) != 1 or _rank4(node.outputs[0]) is None:
        return False
    if op in BINARY:
        return all(
            v in nhwc or _constant_operand(ctx, v) is not None or _rank4(v) is not None
            for v in inputs
        )
    if op in _POOLS:
        return _reduces_pixels(ctx, node)
    return all(ctx.const(v) is not None for v in inputs[1:] if v is not None and v.name)


#: The ops _reduces_pixels takes.
_POOLS = frozenset(("GlobalAveragePool", "ReduceMean"))


def _chains(ctx: PassContext) -> list[list[ir.Node]]:
    """The members, in graph order, of each chain worth running channels-last."""
    nhwc: dict[ir.Value, ir.Node] = {}  # chain value -> its producer
    members: list[ir.Node] = []
    kinds: dict[ir.Node, str] = {}
    for node in ctx.graph:
        kind = _conv_kind(ctx, node)
        if kind is None and not _joins(ctx, node, nhwc):
            continue
        kinds[node] = kind or ""
        members.append(node)
        nhwc[node.outputs[0]] = node
    # chains: members joined by the chain values one reads from another
    parent = {n: n for n in members}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in members:
        for v in n.inputs:
            if v in nhwc:
                parent[root(n)] = root(nhwc[v])
    chains: dict[ir.Node, list[ir.Node]] = {}
    for n in members:
        chains.setdefault(root(n), []).append(n)
    return [c for c in chains.values() if any(kinds[n] == "depthwise" for n in c)]


# ---------------------------------------------------------------------------- rewriting


def _permuted_type(v: ir.Value) -> ir.Type | None:
    shape = _rank4(v)
    if shape is None:
        return None
    return ir.TensorType(v.type.elem_type, [shape[i] for i in TO_NHWC])


def _transpose(ctx: PassContext, v: ir.Value, perm: list[int], name: str) -> ir.Node:
    node = ir.Node("Transpose", [v], [ctx.fresh_name(name)], name=ctx.fresh_name(name))
    node.set_attr("perm", perm)
    return node


def _entry(ctx: PassContext, v: ir.Value, entries: dict) -> ir.Value:
    """v (N, C, H, W) as (N, H, W, C): one Transpose per value, after its producer."""
    if v not in entries:
        t = _transpose(ctx, v, TO_NHWC, (v.name or "x") + "_nhwc")
        t.outputs[0].type = _permuted_type(v)
        if v.producer is not None and v.producer.graph is ctx.graph:
            ctx.graph.insert_after(v.producer, t)
        else:
            ctx.graph.insert_before(ctx.graph.nodes[0], t)
        entries[v] = t.outputs[0]
    return entries[v]


def _permuted_constant(ctx: PassContext, v: ir.Value, c: np.ndarray) -> ir.Value:
    if c.size == 1 and c.ndim <= 1:  # (broadcasts alike in any layout)
        return v
    c4 = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(TO_NHWC)
    return ctx.add_const(np.ascontiguousarray(c4), (v.name or "c") + "_nhwc")


def _conv_node(node: ir.Node, inputs: list, name: str) -> ir.Node:
    attrs = [a for a in node.attributes.values() if a.name in _CONV_ATTRIBUTES]
    if node.op_type == "ConvHardSwish":
        op = "NhwcConvHardSwish"
    else:
        op = "NhwcFusedConv"
        attrs += [a for a in node.attributes.values() if a.name in _ACTIVATION_ATTRIBUTES]
    return ir.Node(op, inputs[:3], [name], attrs, domain=ONYX_DOMAIN, name=name)


def _rewrite(ctx: PassContext, chain: list[ir.Node], entries: dict, names: Counter) -> None:
    """The chain's nodes as channels-last ones (a node keeps its name where it is unique)."""
    g = ctx.graph
    inside = set(chain)
    new_of: dict[ir.Value, ir.Value] = {}
    for node in chain:
        inputs = []
        for i, v in enumerate(node.inputs):
            if v is None or not v.name:
                inputs.append(v)
            elif v in new_of:
                inputs.append(new_of[v])
            elif node.op_type in BINARY and ctx.const(v) is not None:
                inputs.append(_permuted_constant(ctx, v, ctx.const(v)))
            elif i == 0 or node.op_type in BINARY:
                inputs.append(_entry(ctx, v, entries))
            else:  # (a conv's weights and bias, Clip's bounds)
                inputs.append(v)
        old = node.outputs[0]
        name = ctx.fresh_name((old.name or node.op_type) + "_nhwc")
        if node.op_type in ("Conv", "FusedConv", "ConvHardSwish"):
            new = _conv_node(node, inputs, name)
        elif node.op_type in ("GlobalAveragePool", "ReduceMean"):
            new = ir.Node(
                "NhwcGlobalAveragePool", inputs[:1], [name], domain=ONYX_DOMAIN, name=name
            )
        else:
            attrs = list(node.attributes.values())
            new = ir.Node(node.op_type, inputs, [name], attrs, domain=node.domain, name=name)
        if node.name and names[node.name] == 1:  # (profiles and onyx.compare name them)
            new.name = node.name
        new.outputs[0].type = _permuted_type(old)
        g.insert_before(node, new)
        new_of[old] = new.outputs[0]
    for node in chain:  # readers outside the chain get the NCHW tensor back
        old = node.outputs[0]
        outside = ctx.is_output(old) or any(u not in inside for u, _ in old.iter_uses())
        if outside:
            t = _transpose(ctx, new_of[old], TO_NCHW, (old.name or "y") + "_nchw")
            g.insert_before(node, t)
            t.take_over_outputs(node)
        g.remove(node, safe=False)


# ------------------------------------------------------- squeeze-excite scale and residual


def _pointwise(ctx: PassContext, node: ir.Node) -> bool:
    """A 1x1 conv of unit strides and no padding (its pixels are one GEMM's rows)."""
    w = ctx.const(node.inputs[1])
    if w is None or w.shape[2:] != (1, 1) or node.attr("group", 1) != 1:
        return False
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    strides, pads = node.attr("strides") or [1, 1], node.attr("pads") or [0, 0, 0, 0]
    return all(v == 1 for v in strides) and not any(pads)


def _fuse_scales(ctx: PassContext) -> None:
    """Mul(x, s) (s a chain tensor (N, 1, 1, C)) read only by a pointwise NhwcFusedConv:
    NhwcScaledFusedConv(x, s, W, B), the scale applied to the conv's weights per image."""
    for mul in ctx.nodes_of("Mul"):  # (the graph's Muls alone: a CNN holds few)
        if not is_op(mul, "Mul") or mul.graph is None:
            continue
        conv = ctx.single_use(mul.outputs[0])
        if conv is None or conv.op_type != "NhwcFusedConv" or conv.inputs[0] is not mul.outputs[0]:
            continue
        if not _pointwise(ctx, conv):
            continue
        x, s = _scale_operands(mul)
        if x is None:
            continue
        inputs = [x, s, *conv.inputs[1:3]]
        if len(inputs) < 4:
            inputs.append(None)
        fused = ir.Node(
            "NhwcScaledFusedConv", inputs, 1, list(conv.attributes.values()),
            domain=ONYX_DOMAIN, name=ctx.fresh_name((conv.name or "conv") + "_scaled"),
        )  # fmt: skip
        ctx.replace_nodes(conv, fused, [mul])
        ctx.count("ChannelsLastScale")


def _scale_operands(mul: ir.Node):
    """(x, s) of Mul(x, s) / Mul(s, x) with x (N, H, W, C) and s (N, 1, 1, C), else Nones."""
    a, b = mul.inputs
    for x, s in ((a, b), (b, a)):
        xs, ss = _rank4(x), _rank4(s)
        if xs is None or ss is None or not isinstance(xs[3], int):
            continue
        if same_dims(ss, (xs[0], 1, 1, xs[3])) and _is_float32(s):
            return x, s
    return None, None


def _fuse_residuals(ctx: PassContext) -> None:
    """Add(conv, r) of a channels-last conv without activation read only by the Add, r of its
    shape: the conv's residual input (NhwcFusedConvAdd), summed as it stores."""
    for add in ctx.nodes_of("Add"):
        if not is_op(add, "Add") or add.graph is None or len(add.inputs) != 2:
            continue
        for c, r in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            conv = c.producer
            if conv is None or conv.op_type not in ("NhwcFusedConv", "NhwcScaledFusedConv"):
                continue
            if conv.attr("activation", "") or ctx.single_use(c) is not add or r is c:
                continue
            if not same_dims(_rank4(c), _rank4(r)) or not _is_float32(r):
                continue
            op = conv.op_type + "Add"
            inputs = list(conv.inputs) + [None] * (
                len(CONV_INPUTS[conv.op_type]) - len(conv.inputs)
            )
            fused = ir.Node(
                op, [*inputs, r], 1, list(conv.attributes.values()), domain=ONYX_DOMAIN,
                name=ctx.fresh_name((conv.name or "conv") + "_add"),
            )  # fmt: skip
            ctx.replace_nodes(add, fused, [conv])
            ctx.count("ChannelsLastResidual")
            break


#: Inputs of the convs a residual joins (B may be absent).
CONV_INPUTS = {"NhwcFusedConv": ("X", "W", "B"), "NhwcScaledFusedConv": ("X", "S", "W", "B")}


# ---------------------------------------------------------------------------- functions


#: The channels-last convs: op -> (reads a scale S, adds a residual Z, applies HardSwish).
CONVS = {
    "NhwcFusedConv": (False, False, False),
    "NhwcFusedConvAdd": (False, True, False),
    "NhwcScaledFusedConv": (True, False, False),
    "NhwcScaledFusedConvAdd": (True, True, False),
    "NhwcConvHardSwish": (False, False, True),
}


def _ensure_function(ctx: PassContext, op: str) -> None:
    if op in CONVS:
        if not CONVS[op][2]:
            ctx.ensure_opset(MS)
        ctx.ensure_function(op, lambda: _conv_function(ctx, op))
    elif op == "NhwcGlobalAveragePool":
        ctx.ensure_function(op, lambda: _pool_function(ctx))


def _refs(names: dict) -> list[ir.Attr]:
    return [ir.Attr(a, t, ref_attr_name=a) for a, t in names.items()]


def _conv_function(ctx: PassContext, op: str) -> ir.Function:
    """Y = Transpose(conv(Transpose(X [* S], NCHW), W, B [, Transpose(Z, NCHW)]), NHWC), the
    conv com.microsoft FusedConv (its residual Z added before the activation), or Conv then
    HardSwish."""
    scaled, residual, hard_swish = CONVS[op]
    x, s, w, b, z = (ir.Value(n) for n in ("X", "S", "W", "B", "Z"))
    nodes, src = [], x
    if scaled:
        nodes.append(ir.Node("Mul", [x, s], ["x_scaled"]))
        src = nodes[-1].outputs[0]
    nodes.append(ir.Node("Transpose", [src], ["x_nchw"], {"perm": TO_NCHW}))
    conv_inputs = [nodes[-1].outputs[0], w, b]
    if residual:
        nodes.append(ir.Node("Transpose", [z], ["z_nchw"], {"perm": TO_NCHW}))
        conv_inputs.append(nodes[-1].outputs[0])
    if hard_swish:
        conv = ir.Node("Conv", conv_inputs, ["conv"], _refs(_CONV_ATTRIBUTES))
        nodes += [conv, ir.Node("HardSwish", [conv.outputs[0]], ["y_nchw"])]
        attributes, imports = tuple(_CONV_ATTRIBUTES), {"": ctx.opset()}
    else:
        refs = _refs(_CONV_ATTRIBUTES) + _refs(_ACTIVATION_ATTRIBUTES)
        nodes.append(ir.Node("FusedConv", conv_inputs, ["y_nchw"], refs, domain=MS))
        attributes = (*_CONV_ATTRIBUTES, *_ACTIVATION_ATTRIBUTES)
        imports = {"": ctx.opset(), MS: 1}
    nodes.append(ir.Node("Transpose", [nodes[-1].outputs[0]], ["Y"], {"perm": TO_NHWC}))
    inputs = [x, *([s] if scaled else []), w, b, *([z] if residual else [])]
    body = ir.Graph(inputs, [nodes[-1].outputs[0]], nodes, name=op)
    f = ir.Function(ONYX_DOMAIN, op, body, attributes=attributes, opset_imports=imports)
    f.doc_string = "a conv of channels-last tensors (N, H, W, C) (onyx runs it as one kernel)"
    return f


def _pool_function(ctx: PassContext) -> ir.Function:
    """Y = ReduceMean(X, axes=[1, 2], keepdims=1): the mean of each image's pixels."""
    x = ir.Value("X")
    opset = ctx.opset()
    if opset >= 18:
        axes = ir.Node("Constant", [], ["axes"])
        axes.set_attr("value_ints", [1, 2])
        mean = ir.Node("ReduceMean", [x, axes.outputs[0]], ["Y"], {"keepdims": 1})
        nodes = [axes, mean]
    else:
        nodes = [ir.Node("ReduceMean", [x], ["Y"], {"axes": [1, 2], "keepdims": 1})]
    body = ir.Graph([x], [nodes[-1].outputs[0]], nodes, name="NhwcGlobalAveragePool")
    f = ir.Function(
        ONYX_DOMAIN, "NhwcGlobalAveragePool", body, attributes=(), opset_imports={"": opset}
    )
    f.doc_string = "the mean of each image's pixels, channels-last (N, H, W, C) -> (N, 1, 1, C)"
    return f


# ---------------------------------------------------------------------------------- the pass


@graph_pass("ChannelsLastTransformer", EXTENDED)
def channels_last(ctx: PassContext) -> bool:
    """Each chain holding a depthwise conv runs channels-last (see the module's docstring)."""
    if ctx.memo.get("channels_last_done") or ctx.opset() < 14:
        return False
    chains = _chains(ctx)  # (first: a model with no chain never imports the kernels' family)
    if not chains or not _worthwhile():
        return False
    ctx.memo["channels_last_done"] = True
    entries: dict = {}
    names = Counter(n.name for n in ctx.graph)
    for chain in chains:
        _rewrite(ctx, chain, entries, names)
        ctx.count("ChannelsLastTransformer", len(chain))
    _fuse_scales(ctx)
    _fuse_residuals(ctx)
    # (in graph order, not a set's: string hashes vary by process, and so did the order of the
    # saved model's functions)
    for op in dict.fromkeys(n.op_type for n in ctx.graph if n.domain == ONYX_DOMAIN):
        _ensure_function(ctx, op)
    return True
