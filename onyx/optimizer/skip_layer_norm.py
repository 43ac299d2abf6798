"""A residual sum's layer normalization, (x [+ bias]) + skip -> LayerNormalization over the
last axis, into one com.microsoft SkipLayerNormalization(x, skip, gamma, beta, bias): the op
onnxruntime's transformer optimizer makes of BERT's residual connections. Two elementwise nodes
fewer per normalization (each a pass over the activations and a dispatch)."""

from __future__ import annotations

import numpy as np

from .. import ir
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, same_dims, static_shape


def _float32(v: ir.Value | None) -> bool:
    return (
        v is not None
        and isinstance(v.type, ir.TensorType)
        and v.type.elem_type == ir.DataType.FLOAT
    )


def _vector(ctx: PassContext, v: ir.Value | None, width) -> bool:
    """Whether v is a float32 constant of shape [width] (SkipLayerNormalization's 1-D rule)."""
    c = ctx.const(v)
    return c is not None and c.dtype == np.float32 and c.shape == (width,)


def _bias_split(ctx: PassContext, v: ir.Value, reader: ir.Node, width):
    """(x, bias) when v = x + bias (bias a [width] constant, v read by ``reader`` only), else
    (v, None)."""
    add = v.producer
    if is_op(add, "Add") and ctx.single_use(v) is reader:
        for x, b in (add.inputs, add.inputs[::-1]):
            if (
                _vector(ctx, b, width)
                and ctx.const(x) is None
                and same_dims(static_shape(x), static_shape(v))
            ):
                return x, b, add
    return v, None, None


#: The norms fused with their residual sum: op type -> the fused com.microsoft op. RMS norms
#: (RMSNormalization, opset 23; SimplifiedLayerNormalization, onnxruntime's ONNX-domain op)
#: have no beta.
FUSED_NORMS = {
    "LayerNormalization": "SkipLayerNormalization",
    "RMSNormalization": "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization": "SkipSimplifiedLayerNormalization",
}


@graph_pass("SkipLayerNormFusion", EXTENDED)
def skip_layer_norm_fusion(ctx: PassContext) -> bool:
    """Add(a [+ bias], b) -> LayerNormalization(axis -1, gamma, beta) or an RMS norm, a and b
    of one shape, float32  =>  SkipLayerNormalization or SkipSimplifiedLayerNormalization
    (module docstring). A pre-norm layer's sum, read on by the next residual Add, is the
    fused op's fourth output (input_skip_bias_sum, as onnxruntime's fusion writes it)."""
    changed = False
    for ln in ctx.graph:
        if ln.op_type not in FUSED_NORMS or not is_op(ln, ln.op_type) or ln.graph is None:
            continue
        found = _match(ctx, ln)
        if found is None:
            continue
        x, skip, bias, dead = found
        rms = ln.op_type != "LayerNormalization"
        beta = ln.inputs[2] if len(ln.inputs) > 2 and not rms else None
        inputs = [x, skip, ln.inputs[1], *(() if rms else (beta,)), bias]
        while inputs[-1] is None:
            inputs.pop()
        total = ln.inputs[0]
        read_on = [n for n in total.consumers() if n is not ln] or ctx.is_output(total)
        fused = ir.Node(
            FUSED_NORMS[ln.op_type],
            inputs,
            4 if read_on else 1,
            domain=MS,
            name=ctx.fresh_name((ln.name or "layernorm") + "_skip"),
        )
        fused.set_attr("epsilon", float(ln.attr("epsilon", 1e-5)))
        ctx.ensure_opset(MS)
        if read_on:  # (placed where the sum was: its other readers may come before the norm)
            ctx.graph.insert_before(total.producer, fused)
            fused.take_over_outputs(ln)
            ctx.graph.remove(ln, safe=False)
            fused.outputs[3].name = ctx.fresh_name(total.name + "_sum")
            fused.outputs[3].type = total.type
            ctx.replace_value(total, fused.outputs[3])
            for n in dead:
                ctx.graph.remove(n, safe=False)
        else:
            ctx.replace_nodes(ln, fused, dead)
        ctx.count("SkipLayerNormFusion")
        changed = True
    return changed


def hidden_norm_width(ctx: PassContext, ln: ir.Node, shape: tuple | None) -> int | None:
    """The hidden width when LayerNormalization ``ln`` normalizes the last axis of a
    [batch, sequence, hidden] input of that static ``shape`` in float32 (stash_type 1), with
    its mean and inverse std outputs unread, as onnxruntime's fused norms require; else None."""
    if shape is None or len(shape) != 3 or not isinstance(shape[2], int):
        return None
    if ln.attr("axis", -1) not in (-1, 2) or ln.attr("stash_type", 1) != 1:
        return None
    if any(v.has_uses() or ctx.is_output(v) for v in ln.outputs[1:] if v.name):
        return None
    return shape[2]


def _match(ctx: PassContext, ln: ir.Node):
    s = ln.inputs[0]
    add = s.producer
    shape = static_shape(s)
    if not is_op(add, "Add") or not _float32(s) or add.graph is not ln.graph:
        return None
    if any(n is ln and i != 0 for n, i in s.uses()):  # (s only as the norm's input)
        return None
    width = hidden_norm_width(ctx, ln, shape)
    if width is None:
        return None
    params = ln.inputs[1:2] if ln.op_type != "LayerNormalization" else ln.inputs[1:3]
    if not all(_vector(ctx, p, width) for p in params if p is not None):
        return None
    a, b = add.inputs
    if a is b or not (same_dims(static_shape(a), shape) and same_dims(static_shape(b), shape)):
        return None
    for x, skip in ((a, b), (b, a)):
        x, bias, bias_add = _bias_split(ctx, x, add, width)
        if bias is not None:
            return x, skip, bias, [add, bias_add]
    return a, b, None, [add]
