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

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import _CONV_ATTRIBUTES, _REF_TYPES  # (ConvInteger's attributes are Conv's)
from .core import (
    EXTENDED,
    MS,
    PassContext,
    graph_pass,
    is_op,
    other_input,
    producer,
    static_shape,
)

#: (a dtype against a dtype: dtype.name is a Python property, microseconds a read)
_FLOAT32 = np.dtype(np.float32)


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
        if c is None or c.dtype != _FLOAT32 or c.ndim > 1 or c.size not in (1, n):
            continue
        a_scale = other_input(mul, b_scale)
        shape = static_shape(a_scale)
        if a_scale is not b_scale and shape is not None and all(d == 1 for d in shape):
            return a_scale, b_scale
    return None


def _cast_mul(ctx: PassContext, v: ir.Value) -> tuple[ir.Node, ir.Node, ir.Value] | None:
    """(cast, mul, scale): the Cast to float that alone reads ``v``, then the Mul by
    ``scale`` that alone reads the Cast."""
    cast = _only_reader(ctx, v, "Cast")
    if cast is None or cast.attr("to", 0) != int(ir.DataType.FLOAT):
        return None
    mul = _only_reader(ctx, cast.outputs[0], "Mul")
    if mul is None or mul.inputs[0] is mul.inputs[1]:
        return None
    return cast, mul, other_input(mul, cast.outputs[0])


def _bias(ctx: PassContext, y: ir.Value, shapes: tuple) -> tuple[ir.Node, ir.Value] | None:
    """The Add of a constant float32 bias, its shape one of ``shapes``, that alone reads
    ``y``."""
    add = _only_reader(ctx, y, "Add")
    if add is None or add.inputs[0] is add.inputs[1]:
        return None
    bias = other_input(add, y)
    c = ctx.const(bias)
    if c is None or c.dtype != _FLOAT32 or c.shape not in shapes:
        return None
    return add, bias


def _to_float(mmi: ir.Node, ctx: PassContext) -> ir.Node | None:
    """MatMulIntegerToFloat for ``mmi``'s chain, put in place of its last node; or None."""
    b = mmi.inputs[1]
    shape = static_shape(b)
    if shape is None or len(shape) != 2 or ctx.const(b) is None:
        return None
    n = shape[1]
    chain = _cast_mul(ctx, mmi.outputs[0])
    if chain is None:
        return None
    cast, mul, scale = chain
    scales = _scales(ctx, scale, n)
    if scales is None or ctx.is_output(scale):
        return None
    dead = [mmi, cast] + ([scale.producer] if ctx.single_use(scale) is mul else [])
    last, bias = mul, None
    found = _bias(ctx, mul.outputs[0], ((n,),))
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


# ------------------------------------------------------------------ ConvInteger to float

CONV_PASS = "ConvIntegerToFloatFusion"


@graph_pass(CONV_PASS, EXTENDED)
def conv_integer_to_float(ctx: PassContext) -> bool:
    """ConvInteger(x, W, xz, wz) -> Cast(float) -> Mul(scale) [-> Add(bias)], the chain
    onnxruntime's dynamic quantizer writes per Conv, => ai.onyx ConvIntegerToFloat(x, W, xz,
    wz, scale, bias) or, without the bias, ai.onyx ConvIntegerScaled(x, W, xz, wz, scale)
    (kernels/conv_to_float.py: the scale and bias in the GEMM's epilogue). Only a scale of
    one value and a constant float32 bias of one value per output channel, so nothing
    broadcasts; the zero points given, W and wz constants."""
    changed = False
    for conv in list(ctx.graph):
        found = _conv_chain(ctx, conv)
        if found is None:
            continue
        cast, mul, scale, add, bias = found
        op_type = "ConvIntegerScaled" if add is None else "ConvIntegerToFloat"
        ctx.ensure_function(op_type, lambda t=op_type: _conv_function(ctx, t))
        carried = [conv.attributes[a] for a in _CONV_ATTRIBUTES if a in conv.attributes]
        name = ctx.fresh_name((conv.name or "conv") + "_to_float")
        inputs = [*conv.inputs, scale] + ([] if bias is None else [bias])
        fused = ir.Node(op_type, inputs, 1, carried, ONYX_DOMAIN, name)
        if add is None:
            ctx.replace_nodes(mul, fused, (conv, cast))
        else:
            ctx.replace_nodes(add, fused, (conv, cast, mul))
        ctx.count(CONV_PASS)
        changed = True
    return changed


def _conv_chain(ctx: PassContext, conv: ir.Node) -> tuple | None:
    """(cast, mul, scale, add, bias) of ConvInteger ``conv``'s chain (add and bias None
    where no bias is added), or None."""
    if not is_op(conv, "ConvInteger") or conv.graph is not ctx.graph:  # (op type first: cheap)
        return None
    if conv.attributes_have_refs() or any(a not in _CONV_ATTRIBUTES for a in conv.attributes):
        return None
    if len(conv.inputs) != 4 or any(v is None or not v.name for v in conv.inputs):
        return None
    w, wz = ctx.const(conv.inputs[1]), ctx.const(conv.inputs[3])
    if w is None or wz is None or w.ndim != 4:
        return None
    chain = _cast_mul(ctx, conv.outputs[0])
    if chain is None:
        return None
    cast, mul, scale = chain
    shape = static_shape(scale)
    if shape is None or len(shape) > 4 or any(d != 1 for d in shape):
        return None
    M = w.shape[0]
    found = _bias(ctx, mul.outputs[0], ((M, 1, 1), (1, M, 1, 1)))
    return (cast, mul, scale) + (found if found is not None else (None, None))


def _conv_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function ConvIntegerToFloat = Add(Mul(Cast(ConvInteger(...), float),
    scale), bias) (ConvIntegerScaled: without the Add), its attributes ConvInteger's: the
    saved model stays valid ONNX."""
    biased = op_type == "ConvIntegerToFloat"
    names = ("x", "w", "x_zero_point", "w_zero_point", "scale") + (("bias",) if biased else ())
    params = [ir.Value(n) for n in names]
    refs = [ir.Attr(a, _REF_TYPES[a], ref_attr_name=a) for a in _CONV_ATTRIBUTES]
    conv = ir.Node("ConvInteger", params[:4], ["acc"], refs)
    cast = ir.Node("Cast", [conv.outputs[0]], ["accf"], {"to": int(ir.DataType.FLOAT)})
    mul = ir.Node("Mul", [cast.outputs[0], params[4]], ["scaled" if biased else "y"])
    nodes = [conv, cast, mul]
    if biased:
        nodes.append(ir.Node("Add", [mul.outputs[0], params[5]], ["y"]))
    body = ir.Graph(params, [nodes[-1].outputs[0]], nodes, name=op_type)
    f = ir.Function(
        ONYX_DOMAIN, op_type, body, _CONV_ATTRIBUTES, opset_imports={"": ctx.opset("") or 13}
    )
    f.doc_string = "y = float(ConvInteger(x, w, x_zero_point, w_zero_point)) * scale" + (
        " + bias" if biased else ""
    )
    return f


# ------------------------------------------------------------------ DynamicQuantizeMatMul + Relu

RELU_PASS = "DynamicQuantizeMatMulReluFusion"


@graph_pass(RELU_PASS, EXTENDED)
def dynamic_quantize_matmul_relu(ctx: PassContext) -> bool:
    """DynamicQuantizeMatMul read by a Relu alone (a quantized transformer's feed-forward
    layer)  =>  ai.onyx DynamicQuantizeMatMulRelu with the same inputs: the native GEMM's
    epilogue applies the Relu as it stores, where a Relu node made another pass over the
    rows. A model-local function holds the two ops, so the saved model stays valid."""
    changed = False
    for dqm in list(ctx.graph):
        if dqm.graph is not ctx.graph or dqm.op_type != "DynamicQuantizeMatMul":
            continue
        if dqm.domain != MS or any(v is None for v in dqm.inputs):
            continue
        relu = _only_reader(ctx, dqm.outputs[0], "Relu")
        if relu is None or relu.graph is not dqm.graph:
            continue
        ctx.ensure_function("DynamicQuantizeMatMulRelu", lambda: _relu_function(ctx))
        fused = ir.Node(
            "DynamicQuantizeMatMulRelu",
            list(dqm.inputs),
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((dqm.name or "matmul") + "_relu"),
        )
        ctx.replace_nodes(relu, fused, [dqm])
        ctx.count(RELU_PASS)
        changed = True
    return changed


def _relu_function(ctx: PassContext) -> ir.Function:
    """The model-local function DynamicQuantizeMatMulRelu = Relu(com.microsoft
    DynamicQuantizeMatMul(A, B, b_scale, b_zero_point, bias)); the last two may be omitted."""
    names = ("A", "B", "b_scale", "b_zero_point", "bias")
    params = [ir.Value(n) for n in names]
    dqm = ir.Node("DynamicQuantizeMatMul", params, ["product"], domain=MS)
    relu = ir.Node("Relu", [dqm.outputs[0]], ["Y"])
    body = ir.Graph(params, [relu.outputs[0]], [dqm, relu], name="DynamicQuantizeMatMulRelu")
    f = ir.Function(
        ONYX_DOMAIN,
        "DynamicQuantizeMatMulRelu",
        body,
        opset_imports={"": ctx.opset("") or 13, MS: 1},
    )
    f.doc_string = "Y = Relu(DynamicQuantizeMatMul(...)) (onyx runs it as one kernel)"
    return f
