"""MatMul + Add -> Gemm (2-D only, as Gemm's spec requires), Gemm + activation ->
com.microsoft FusedGemm, and MatMul of an A of another rank + Add of a constant bias [+ Relu]
-> ai.onyx MatMulAdd / MatMulAddRelu (a transformer's projections: one pass of the native GEMM
with the bias and the ReLU applied as it stores)."""

from __future__ import annotations

import functools

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import ACTIVATIONS, activation
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, other_input, producer, static_shape


def _gemm_bias_ok(c_shape, m, n) -> bool:
    """C broadcasts to (M, N) one way (Gemm's rule) and does not grow the result."""
    if c_shape is None or len(c_shape) > 2:
        return False
    full = (1,) * (2 - len(c_shape)) + tuple(c_shape)
    return all(d == 1 or (d == want and isinstance(d, int)) for d, want in zip(full, (m, n)))


@graph_pass("MatMulAddFusion", EXTENDED)
def matmul_add(ctx: PassContext) -> bool:
    changed = False
    if ctx.opset() < 7:  # older Gemm broadcasts C only with its `broadcast` attribute
        return False
    for add in ctx.nodes_of("Add"):
        if not is_op(add, "Add") or add.inputs[0] is add.inputs[1]:
            continue
        for v in add.inputs:
            mm = producer(v, "MatMul")
            if mm is not None and ctx.single_use(v) is add:
                break
        else:
            continue
        a, b = mm.inputs
        c = other_input(add, v)
        sa, sb = static_shape(a), static_shape(b)
        if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
            continue
        if not isinstance(a.type, ir.TensorType) or a.type.elem_type not in _FLOATS:
            continue
        if not _gemm_bias_ok(static_shape(c), sa[0], sb[1]):
            continue
        gemm = ir.Node("Gemm", [a, b, c], 1, name=ctx.fresh_name((mm.name or "matmul") + "_gemm"))
        ctx.replace_nodes(add, gemm, [mm])
        ctx.count("MatMulAddFusion")
        changed = True
    return changed


_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


@graph_pass("GemmActivationFusion", EXTENDED)
def gemm_activation(ctx: PassContext) -> bool:
    """Gemm -> Relu/Sigmoid/Tanh/LeakyRelu/HardSigmoid  =>  com.microsoft FusedGemm."""
    changed = False
    for act in ctx.nodes_of(ACTIVATIONS):
        spec = activation(ctx, act)
        if spec is None or spec[0] == "Clip" or act.graph is None:
            continue
        gemm = producer(act.inputs[0], "Gemm")
        if gemm is None or ctx.single_use(act.inputs[0]) is not act or ctx.opset() < 7:
            continue
        fused = ir.Node(
            "FusedGemm",
            list(gemm.inputs),
            1,
            [a for a in gemm.attributes.values() if not a.is_ref],
            domain=MS,
            name=ctx.fresh_name((gemm.name or "gemm") + "_fused"),
        )
        fused.set_attr("activation", spec[0])
        for name, p in zip(("activation_alpha", "activation_beta"), spec[1]):
            fused.set_attr(name, float(p))
        ctx.ensure_opset(MS)
        ctx.replace_nodes(act, fused, [gemm])
        ctx.count("GemmActivationFusion")
        changed = True
    return changed


def _bias_of(ctx: PassContext, add: ir.Node, mm: ir.Node) -> ir.Value | None:
    """Add's constant float32 bias [N] of MatMul mm's constant float32 B [K, N], else None."""
    v = mm.outputs[0]
    bias = other_input(add, v)
    b, c = ctx.const(mm.inputs[1]), ctx.const(bias)
    if b is None or c is None or b.dtype != np.float32 or c.dtype != np.float32:
        return None
    if b.ndim != 2 or c.shape != (b.shape[1],):
        return None
    return bias


@graph_pass("MatMulBiasFusion", EXTENDED)
def matmul_bias(ctx: PassContext) -> bool:
    """MatMul(A, B) + bias [-> Relu], B [K, N] and bias [N] float32 constants, A of a rank
    other than 2 (MatMulAddFusion makes a Gemm of those)  =>  ai.onyx MatMulAdd(A, B, bias) or
    MatMulAddRelu: model-local functions whose bodies are the ops, so a saved model runs
    anywhere. The sums are MatMul's, the bias added after them, as the ops do."""
    changed = False
    for add in ctx.nodes_of("Add"):
        if not is_op(add, "Add") or add.graph is None or add.inputs[0] is add.inputs[1]:
            continue
        mm = next((m for m in map(producer, add.inputs, ("MatMul",) * 2) if m), None)
        if mm is None or ctx.single_use(mm.outputs[0]) is not add:
            continue
        shape = static_shape(mm.inputs[0])
        if shape is not None and len(shape) == 2:
            continue
        bias = _bias_of(ctx, add, mm)
        if bias is None:
            continue
        last, dead, op_type = add, [mm], "MatMulAdd"
        relu = ctx.single_use(add.outputs[0])
        if is_op(relu, "Gelu", "FastGelu") and "BiasGeluFusion" in ctx.enabled:
            continue  # (BiasGeluFusion takes the bias)
        if is_op(relu, "Relu") and relu.graph is add.graph:
            last, dead, op_type = relu, [mm, add], "MatMulAddRelu"
        ctx.ensure_function(op_type, functools.partial(_matmul_add_function, ctx, op_type))
        fused = ir.Node(
            op_type,
            [mm.inputs[0], mm.inputs[1], bias],
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((mm.name or "matmul") + "_bias"),
        )
        ctx.replace_nodes(last, fused, dead)
        ctx.count("MatMulBiasFusion")
        changed = True
    return changed


def _matmul_add_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function MatMulAdd(A, B, bias) = Add(MatMul(A, B), bias), and
    MatMulAddRelu the same then Relu."""
    a, b, bias = ir.Value("A"), ir.Value("B"), ir.Value("bias")
    mm = ir.Node("MatMul", [a, b], ["product"])
    nodes = [mm, ir.Node("Add", [mm.outputs[0], bias], ["sum"])]
    if op_type == "MatMulAddRelu":
        nodes.append(ir.Node("Relu", [nodes[-1].outputs[0]], ["relu"]))
    body = ir.Graph([a, b, bias], [nodes[-1].outputs[0]], nodes, name=op_type)
    f = ir.Function(ONYX_DOMAIN, op_type, body, opset_imports={"": ctx.opset() or 13})
    f.doc_string = f"Y = {' -> '.join(n.op_type for n in nodes)} (onyx runs it as one kernel)"
    return f
