"""A dynamically quantized MatMul's standard-op chain -> one com.microsoft node, as onnxruntime's
MatMulIntegerToFloatFusion and DynamicQuantizeMatMulFusion (extended level) do:

    MatMulInteger(aq, B, azp, bzp) -> Cast(float) -> Mul(Mul(a_scale, b_scale)) [-> Add(bias)]
        => MatMulIntegerToFloat(aq, B, a_scale, b_scale, azp, bzp [, bias])
    DynamicQuantizeLinear(a) read by that node alone
        => DynamicQuantizeMatMul(a, B, b_scale, bzp [, bias])

``onyx.quantize(mode="dynamic")`` writes the chain (standard ops, so any runtime runs it); five
nodes per MatMul cost more to dispatch than the small products of a transformer. The fused
kernels compute the same float32 operations in the same order (the int32 accumulator cast to
float32, times the float32 product of the scales, plus the bias), so results keep their bits.
"""

from __future__ import annotations

from .. import ir
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, other_input, producer, static_shape


def _only_reader(ctx: PassContext, v: ir.Value, op_type: str) -> ir.Node | None:
    node = ctx.single_use(v)
    return node if is_op(node, op_type) else None


def _scales(ctx: PassContext, s: ir.Value, n: int) -> tuple[ir.Value, ir.Value] | None:
    """(a_scale, b_scale) when ``s`` is Mul(a_scale, b_scale) of one runtime value for A and a
    constant B scale per tensor or per column (n columns)."""
    mul = producer(s, "Mul")
    if mul is None or len(mul.inputs) != 2:
        return None
    for b_scale in mul.inputs:
        c = ctx.const(b_scale)
        if c is None or c.dtype.name != "float32" or c.ndim > 1 or c.size not in (1, n):
            continue
        a_scale = other_input(mul, b_scale)
        shape = static_shape(a_scale)
        if a_scale is not b_scale and shape is not None and all(d == 1 for d in shape):
            return a_scale, b_scale
    return None


def _bias(ctx: PassContext, y: ir.Value, n: int) -> tuple[ir.Node, ir.Value] | None:
    """The Add of a constant float32 bias of n values that alone reads ``y``."""
    add = _only_reader(ctx, y, "Add")
    if add is None or add.inputs[0] is add.inputs[1]:
        return None
    bias = other_input(add, y)
    c = ctx.const(bias)
    if c is None or c.dtype.name != "float32" or c.shape != (n,):
        return None
    return add, bias


def _to_float(mmi: ir.Node, ctx: PassContext) -> ir.Node | None:
    """MatMulIntegerToFloat for ``mmi``'s chain, put in place of its last node; or None."""
    b = mmi.inputs[1]
    shape = static_shape(b)
    if shape is None or len(shape) != 2 or ctx.const(b) is None:
        return None
    n = shape[1]
    cast = _only_reader(ctx, mmi.outputs[0], "Cast")
    if cast is None or cast.attr("to", 0) != int(ir.DataType.FLOAT):
        return None
    mul = _only_reader(ctx, cast.outputs[0], "Mul")
    if mul is None or mul.inputs[0] is mul.inputs[1]:
        return None
    scale = other_input(mul, cast.outputs[0])
    scales = _scales(ctx, scale, n)
    if scales is None or ctx.is_output(scale):
        return None
    dead = [mmi, cast] + ([scale.producer] if ctx.single_use(scale) is mul else [])
    last, bias = mul, None
    found = _bias(ctx, mul.outputs[0], n)
    if found is not None:
        dead.append(mul)
        last, bias = found
    zero_points = list(mmi.inputs[2:4]) + [None] * (4 - len(mmi.inputs))
    inputs = [mmi.inputs[0], b, *scales, *zero_points] + ([bias] if bias is not None else [])
    while inputs and inputs[-1] is None:
        inputs.pop()
    fused = ir.Node(
        "MatMulIntegerToFloat",
        inputs,
        1,
        domain=MS,
        name=ctx.fresh_name((mmi.name or "matmul") + "_to_float"),
    )
    ctx.ensure_opset(MS)
    ctx.replace_nodes(last, fused, dead)
    return fused


def _dynamic(ctx: PassContext, fused: ir.Node) -> bool:
    """Fold the DynamicQuantizeLinear feeding ``fused`` (and nothing else) into it."""
    dql = producer(fused.inputs[0], "DynamicQuantizeLinear")
    if (
        dql is None
        or len(fused.inputs) < 5
        or [fused.inputs[0], fused.inputs[2], fused.inputs[4]] != list(dql.outputs)
        or any(ctx.single_use(v) is not fused for v in dql.outputs)
    ):
        return False
    bias = fused.inputs[6] if len(fused.inputs) > 6 else None
    inputs = [dql.inputs[0], fused.inputs[1], fused.inputs[3], fused.inputs[5], bias]
    while inputs[-1] is None:
        inputs.pop()
    node = ir.Node(
        "DynamicQuantizeMatMul", inputs, 1, domain=MS, name=ctx.fresh_name(fused.name + "_dynamic")
    )
    ctx.replace_nodes(fused, node, [dql])
    return True


@graph_pass("MatMulIntegerToFloatFusion", EXTENDED)
def matmul_integer_to_float(ctx: PassContext) -> bool:
    changed = False
    for mmi in list(ctx.graph):
        if mmi.graph is None or not is_op(mmi, "MatMulInteger"):
            continue
        fused = _to_float(mmi, ctx)
        if fused is None:
            continue
        ctx.count("MatMulIntegerToFloatFusion")
        if _dynamic(ctx, fused):
            ctx.count("DynamicQuantizeMatMulFusion")
        changed = True
    return changed
