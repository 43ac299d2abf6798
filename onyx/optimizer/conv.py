"""Conv fusions: BatchNormalization / Add / Mul by constants folded into the weights and bias,
a following activation (with an optional residual Add) fused into com.microsoft FusedConv, and
a following HardSwish into ai.onyx ConvHardSwish (FusedConv has no HardSwish); and a Mul / Add
by a per-channel constant folded into the BatchNormalization before it."""

from __future__ import annotations

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from ..runtime.values import aligned_empty
from .core import (
    EXTENDED,
    MS,
    PassContext,
    graph_pass,
    inference_batch_norm,
    is_op,
    other_input,
    per_channel,
    producer,
    same_dims,
    static_shape,
)

# ----------------------------------------------------------------------- weights and bias


def _conv_weights(ctx: PassContext, conv: ir.Node):
    """(W, B) of a Conv with constant float weights (B zeros when absent), else None."""
    w = ctx.const(conv.inputs[1])
    if w is None or w.dtype.kind != "f" or w.ndim < 3:  # (a malformed W: the kernel says so)
        return None
    b_in = conv.inputs[2] if len(conv.inputs) > 2 else None
    if b_in is None or not b_in.name:
        return w, np.zeros(w.shape[0], dtype=w.dtype)
    b = ctx.const(b_in)
    return None if b is None else (w, b)


def _set_weights(ctx: PassContext, conv: ir.Node, w: np.ndarray, b: np.ndarray) -> None:
    dtype = ctx.const(conv.inputs[1]).dtype
    conv.set_input(1, ctx.add_const(w.astype(dtype, copy=False), conv.inputs[1].name + "_fused"))
    bias = ctx.add_const(b.astype(dtype), (conv.name or "conv") + "_bias_fused")
    if len(conv.inputs) > 2:
        conv.set_input(2, bias)
    else:
        conv.append_input(bias)


def _scaled(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """W * s per output channel, each product computed in float64 and rounded once to W's
    type (as W.astype(float64) * s, then cast back), without the float64 copies of W: a
    large model's weights faulted in three times their size of fresh memory."""
    out = aligned_empty(w.shape, w.dtype)  # (as the plan wants constants: not copied again)
    np.multiply(
        w, s.reshape((-1,) + (1,) * (w.ndim - 1)), out=out, dtype=np.float64, casting="unsafe"
    )
    return out


def _conv_feeding(ctx: PassContext, node: ir.Node):
    """(conv, other input) when ``node`` reads a Conv output that nothing else reads."""
    for v in node.inputs[:2]:
        conv = producer(v, "Conv")
        if conv is not None and ctx.single_use(v) is node:
            return conv, (other_input(node, v) if len(node.inputs) > 1 else None)
    return None, None


def _fold_into(ctx: PassContext, node: ir.Node, conv: ir.Node, w, b) -> bool:
    if not ctx.replace_value(node.outputs[0], conv.outputs[0]):
        return False
    _set_weights(ctx, conv, w, b)
    ctx.graph.remove(node, safe=False)
    ctx.count(f"Conv{node.op_type}Fusion")
    return True


@graph_pass("ConvBNFusion", EXTENDED)
def conv_bn(ctx: PassContext) -> bool:
    """Conv -> BatchNormalization (inference): W' = W*s, B' = (B - mean)*s + beta,
    s = scale / sqrt(var + eps); computed in float64."""
    changed = False
    for bn in ctx.nodes_of("BatchNormalization"):
        if not inference_batch_norm(ctx, bn):
            continue
        conv, _ = _conv_feeding(ctx, bn)
        params = [ctx.const(v) for v in bn.inputs[1:5]]
        wb = _conv_weights(ctx, conv) if conv is not None else None
        if wb is None or any(p is None for p in params):
            continue
        scale, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
        s = scale / np.sqrt(var + bn.attr("epsilon", 1e-5))
        w, b = wb
        w2 = _scaled(w, s)
        b2 = (b.astype(np.float64) - mean) * s + beta
        changed |= _fold_into(ctx, bn, conv, w2, b2)
    return changed


@graph_pass("ConvAddFusion", EXTENDED)
def conv_add(ctx: PassContext) -> bool:
    """Conv -> Add(per-channel constant): the constant joins the bias."""
    changed = False
    for add in ctx.nodes_of("Add"):
        if not is_op(add, "Add"):
            continue
        conv, other = _conv_feeding(ctx, add)
        wb = _conv_weights(ctx, conv) if conv is not None else None
        c = ctx.const(other)
        if wb is None or c is None or c.dtype != wb[0].dtype:
            continue
        w, b = wb
        per = per_channel(c, w.shape[0], w.ndim)
        if per is not None:
            changed |= _fold_into(ctx, add, conv, w, b.astype(np.float64) + per)
    return changed


@graph_pass("ConvMulFusion", EXTENDED)
def conv_mul(ctx: PassContext) -> bool:
    """Conv -> Mul(per-channel constant): scales the weights and the bias."""
    changed = False
    for mul in ctx.nodes_of("Mul"):
        if not is_op(mul, "Mul"):
            continue
        conv, other = _conv_feeding(ctx, mul)
        wb = _conv_weights(ctx, conv) if conv is not None else None
        c = ctx.const(other)
        if wb is None or c is None or c.dtype != wb[0].dtype:
            continue
        w, b = wb
        per = per_channel(c, w.shape[0], w.ndim)
        if per is not None:
            w2 = _scaled(w, per)
            changed |= _fold_into(ctx, mul, conv, w2, b.astype(np.float64) * per)
    return changed


# ------------------------------------------------------- BatchNormalization's own scale
# (no conv before it: Caffe2's SpatialBN and its scale layer, as onnx's light DenseNet writes
# each of its 121 normalizations after a Concat)


def _batch_norm_feeding(ctx: PassContext, node: ir.Node) -> tuple[ir.Node, ir.Value] | None:
    """(the inference BatchNormalization whose output only ``node`` reads, that output)."""
    for v in node.inputs[:2]:
        bn = v.producer if v is not None else None
        if inference_batch_norm(ctx, bn) and ctx.single_use(v) is node:
            return bn, v
    return None


@graph_pass("BatchNormScaleFusion", EXTENDED)
def batch_norm_scale(ctx: PassContext) -> bool:
    """BN(x) * c = (x - mean) * mult * c + B * c, BN(x) + c = ... + (B + c): scale' = scale * c
    and B' = B * c, or B' = B + c (in float64, then the parameters' type)."""
    changed = False
    for node in ctx.nodes_of(_MUL_ADD):
        if not is_op(node, "Mul", "Add") or len(node.inputs) != 2:
            continue
        found = _batch_norm_feeding(ctx, node)
        if found is None:
            continue
        bn, v = found
        c, scale, bias = (ctx.const(u) for u in (other_input(node, v), *bn.inputs[1:3]))
        shape = static_shape(v)
        if c is None or scale is None or bias is None or shape is None or c.dtype != scale.dtype:
            continue
        per = per_channel(c, scale.size, len(shape))
        if per is None or scale.ndim != 1 or bias.shape != scale.shape:
            continue
        if node.op_type == "Mul":
            scale, bias = scale.astype(np.float64) * per, bias.astype(np.float64) * per
        else:
            bias = bias.astype(np.float64) + per
        if not ctx.replace_value(node.outputs[0], bn.outputs[0]):
            continue
        base = bn.name or "batch_norm"
        bn.set_input(1, ctx.add_const(scale.astype(c.dtype), base + "_scale_fused"))
        bn.set_input(2, ctx.add_const(bias.astype(c.dtype), base + "_bias_fused"))
        ctx.graph.remove(node, safe=False)
        ctx.count("BatchNormScaleFusion")
        changed = True
    return changed


# ----------------------------------------------------------------------- activation fusion

_LOWEST, _HIGHEST = float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)


#: The ops :func:`activation` takes (their nodes are the ones its callers visit).
ACTIVATIONS = frozenset(("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Clip"))
_MUL_ADD = frozenset(("Mul", "Add"))


def activation(ctx: PassContext, node: ir.Node | None) -> tuple[str, list[float]] | None:
    """(name, parameters) of an activation FusedConv/FusedGemm can apply, else None."""
    if not is_op(node, "Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Clip"):
        return None
    op = node.op_type
    if op == "LeakyRelu":
        return op, [float(node.attr("alpha", 0.01))]
    if op == "HardSigmoid":
        return op, [float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))]
    if op == "Clip":
        if ctx.opset() < 11:
            return op, [float(node.attr("min", _LOWEST)), float(node.attr("max", _HIGHEST))]
        bounds = []
        for i, default in ((1, _LOWEST), (2, _HIGHEST)):
            v = node.inputs[i] if len(node.inputs) > i else None
            if v is None or not v.name:
                bounds.append(default)
                continue
            s = ctx.scalar(v)
            if s is None:
                return None
            bounds.append(s)
        return op, bounds
    return op, []


_STRING, _FLOATS = ir.AttrType.STRING, ir.AttrType.FLOATS


def _conv_attrs(conv: ir.Node) -> list[ir.Attr]:
    return [a for a in conv.attributes.values() if not a.is_ref]


def _is_pair_sum(node: ir.Node | None) -> bool:
    """A Sum of exactly two inputs: an Add (Caffe2's exports write residual adds so)."""
    return is_op(node, "Sum") and len(node.inputs) == 2 and all(v is not None for v in node.inputs)


@graph_pass("ConvActivationFusion", EXTENDED)
def conv_activation(ctx: PassContext) -> bool:
    """Conv [-> Add(Z, same shape)] -> activation  =>  com.microsoft FusedConv(X, W, B, Z).
    A 2-input Sum stands for the Add: FusedConv adds Z to conv + bias before the activation,
    the same float operations as the unfused nodes."""
    changed = False
    for act in ctx.nodes_of(ACTIVATIONS):
        spec = activation(ctx, act)
        if spec is None or act.graph is None:
            continue
        src = act.inputs[0]
        add, z = None, None
        adds = is_op(src.producer, "Add") or _is_pair_sum(src.producer)
        if adds and ctx.single_use(src) is act:
            add = src.producer
            conv, z = _conv_feeding(ctx, add)
            if conv is None or not same_dims(static_shape(z), static_shape(conv.outputs[0])):
                continue
        else:
            conv = producer(src, "Conv")
            if conv is None or ctx.single_use(src) is not act:
                continue
        w = ctx.const(conv.inputs[1]) if len(conv.inputs) > 1 else None
        if w is None or w.dtype.kind != "f":
            continue
        inputs = list(conv.inputs) + [None] * (3 - len(conv.inputs))
        if z is not None:
            inputs.append(z)
        # (the activation's attributes made as what they are: set_attr would find their types)
        attrs = _conv_attrs(conv)
        attrs.append(ir.Attr("activation", _STRING, spec[0]))
        if spec[1]:
            attrs.append(ir.Attr("activation_params", _FLOATS, [float(p) for p in spec[1]]))
        name = ctx.fresh_name((conv.name or "conv") + "_fused")
        fused = ir.Node("FusedConv", inputs, 1, attrs, domain=MS, name=name)
        ctx.fuse(act, fused, [n for n in (add, conv) if n is not None])  # (MS imported)
        ctx.count("ConvActivationFusion")
        changed = True
    return changed


# ----------------------------------------------------------------------- Conv + HardSwish

#: The Conv attributes ConvHardSwish passes on to its body's Conv.
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@graph_pass("ConvHardSwishFusion", EXTENDED)
def conv_hard_swish(ctx: PassContext) -> bool:
    """Conv -> HardSwish  =>  ai.onyx ConvHardSwish(X, W, B): MobileNetV3's pair in one kernel
    that applies the activation as it stores (onnxruntime's FusedConv has no HardSwish). It is
    a model-local function whose body is the two ops, so a saved model runs anywhere."""
    changed = False
    if ctx.opset() < 14:  # (HardSwish came with opset 14; the body needs it)
        return False
    for hs in ctx.nodes_of("HardSwish"):
        if not is_op(hs, "HardSwish") or hs.graph is None:
            continue
        src = hs.inputs[0]
        conv = producer(src, "Conv")
        if conv is None or ctx.single_use(src) is not hs:
            continue
        w = ctx.const(conv.inputs[1]) if len(conv.inputs) > 1 else None
        if w is None or w.dtype.kind != "f":
            continue
        ctx.ensure_function("ConvHardSwish", lambda: _conv_hard_swish_function(ctx))
        inputs = list(conv.inputs) + [None] * (3 - len(conv.inputs))
        fused = ir.Node(
            "ConvHardSwish",
            inputs,
            1,
            _conv_attrs(conv),
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((conv.name or "conv") + "_hardswish"),
        )
        ctx.replace_nodes(hs, fused, [conv])
        ctx.count("ConvHardSwishFusion")
        changed = True
    return changed


def _conv_hard_swish_function(ctx: PassContext) -> ir.Function:
    """The model-local function ConvHardSwish(X, W, B) = HardSwish(Conv(X, W, B)), the Conv
    taking the call's attributes."""
    x, w, b = ir.Value("X"), ir.Value("W"), ir.Value("B")
    refs = [ir.Attr(a, _REF_TYPES[a], ref_attr_name=a) for a in _CONV_ATTRIBUTES]
    conv = ir.Node("Conv", [x, w, b], ["conv"], refs)
    hs = ir.Node("HardSwish", [conv.outputs[0]], ["Y"])
    body = ir.Graph([x, w, b], [hs.outputs[0]], [conv, hs], name="ConvHardSwish")
    f = ir.Function(
        ONYX_DOMAIN,
        "ConvHardSwish",
        body,
        attributes=_CONV_ATTRIBUTES,
        opset_imports={"": ctx.opset()},
    )
    f.doc_string = "Y = HardSwish(Conv(X, W, B)) (onyx runs it as one kernel)"
    return f


_REF_TYPES = {
    "auto_pad": ir.AttrType.STRING,
    "dilations": ir.AttrType.INTS,
    "group": ir.AttrType.INT,
    "kernel_shape": ir.AttrType.INTS,
    "pads": ir.AttrType.INTS,
    "strides": ir.AttrType.INTS,
}
