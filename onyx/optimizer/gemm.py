"""MatMul + Add -> Gemm (2-D only, as Gemm's spec requires) and Gemm + activation ->
com.microsoft FusedGemm."""

from __future__ import annotations

from .. import ir
from .conv import activation
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
    for add in ctx.graph:
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
    for act in ctx.graph:
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
