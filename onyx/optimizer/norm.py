"""Add -> LayerNormalization => com.microsoft SkipLayerNormalization (onnxruntime's
SkipLayerNormFusion): a transformer's residual sum and its normalization in one node, the sum
not stored apart when nothing else reads it."""

from __future__ import annotations

from .. import ir
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, same_dims, static_shape


def _hidden(ctx: PassContext, ln: ir.Node) -> int | None:
    """The normalized size when ln normalizes the last axis of a float32 tensor with 1-D
    gamma (and beta), returning only its first output; else None."""
    x = ln.inputs[0]
    dims = static_shape(x)
    if dims is None or not dims or not isinstance(dims[-1], int):
        return None
    if ln.attr("axis", -1) not in (-1, len(dims) - 1) or ln.attr("stash_type", 1) != 1:
        return None
    if not isinstance(x.type, ir.TensorType) or x.type.elem_type != ir.DataType.FLOAT:
        return None
    if any(o.name and (o.uses() or ctx.is_output(o)) for o in ln.outputs[1:]):
        return None
    for v in ln.inputs[1:]:
        if v is not None and v.name and static_shape(v) != (dims[-1],):
            return None
    return dims[-1]


@graph_pass("SkipLayerNormFusion", EXTENDED)
def skip_layer_norm(ctx: PassContext) -> bool:
    changed = False
    for ln in ctx.graph:
        if not is_op(ln, "LayerNormalization") or ln.graph is None:
            continue
        add = ln.inputs[0].producer
        if not is_op(add, "Add") or ctx.single_use(add.outputs[0]) is not ln:
            continue
        a, b = add.inputs
        if _hidden(ctx, ln) is None or not same_dims(static_shape(a), static_shape(b)):
            continue  # (the two addends of one shape: SkipLayerNormalization's skip does not
        fused = ir.Node(  # broadcast as Add would)
            "SkipLayerNormalization",
            [a, b, ln.inputs[1], ln.inputs[2] if len(ln.inputs) > 2 else None],
            1,
            domain=MS,
            name=ctx.fresh_name((ln.name or "layernorm") + "_skip"),
        )
        fused.set_attr("epsilon", float(ln.attr("epsilon", 1e-5)))
        ctx.ensure_opset(MS)
        ctx.replace_nodes(ln, fused, [add])
        ctx.count("SkipLayerNormFusion")
        changed = True
    return changed
