"""A product over the last axis between a Reshape that flattens its input to rows and one that
restores the leading dims (PyTorch's nn.Linear on a [S, B, D] tensor inside
nn.MultiheadAttention: Reshape [S * B, D], the projection, Reshape [S, B, N])  =>  the product
on the unflattened input: the ops below take any leading dims and compute the same rows in
the same order, so the results keep their bits; two dispatches of a small model's run go.
A plain Gemm (2-D only) with a constant B and bias becomes ai.onyx MatMulAdd for it.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, static_shape
from .gemm import _matmul_add_function

#: Products of A [..., K] by a constant [K, N] that treat A's leading dims as rows (their
#: kernels reshape A to rows themselves); a zero point per row (MatMulIntegerToFloat) is not.
_ROW_PRODUCTS = {
    (MS, "DynamicQuantizeMatMul"),
    (ONYX_DOMAIN, "DynamicQuantizeMatMulRelu"),
    (ONYX_DOMAIN, "MatMulAdd"),
    (ONYX_DOMAIN, "MatMulAddRelu"),
}


#: The op types _is_row_product takes (the nodes the pass visits).
_ROW_OPS = frozenset(("Gemm", "MatMul", *(op for _, op in _ROW_PRODUCTS)))


def _is_row_product(ctx: PassContext, node: ir.Node) -> bool:
    if (node.domain, node.op_type) in _ROW_PRODUCTS:
        return True
    if is_op(node, "Gemm"):
        return _plain_gemm(ctx, node) is not None
    b = ctx.const(node.inputs[1]) if is_op(node, "MatMul") else None
    return b is not None and b.ndim == 2  # (a constant 2-D B: A's leading dims are rows)


def _plain_gemm(ctx: PassContext, gemm: ir.Node) -> np.ndarray | None:
    """B as [K, N] when ``gemm`` is A B' + C with a constant float32 B and bias C [N] (alpha,
    beta 1, A not transposed): MatMulAdd's product."""
    if len(gemm.inputs) != 3 or gemm.attr("alpha", 1.0) != 1.0 or gemm.attr("beta", 1.0) != 1.0:
        return None
    if gemm.attr("transA", 0) or set(gemm.attributes) - {"alpha", "beta", "transA", "transB"}:
        return None
    b, c = ctx.const(gemm.inputs[1]), ctx.const(gemm.inputs[2])
    if b is None or c is None or b.ndim != 2 or b.dtype != np.float32 or c.dtype != np.float32:
        return None
    b = b.T if gemm.attr("transB", 0) else b
    return b if c.shape == (b.shape[1],) else None


def _flattening(ctx: PassContext, node: ir.Node) -> ir.Value | None:
    """x when ``node`` reads Reshape(x, [-1, K]) alone, x [..., K] of static K."""
    r = node.inputs[0].producer if node.inputs else None
    target = _constant_target(ctx, r)
    if target is None or ctx.single_use(r.outputs[0]) is not node:
        return None
    shape = static_shape(r.inputs[0])
    if shape is None or len(shape) < 3 or type(shape[-1]) is not int:
        return None
    return r.inputs[0] if target == [-1, shape[-1]] else None


def _restoring(ctx: PassContext, node: ir.Node, leading: tuple) -> ir.Node | None:
    """The Reshape that alone reads ``node``'s [rows, N] output and gives it back the leading
    dims (static ones as they are, the one dynamic dim as -1)."""
    r = ctx.single_use(node.outputs[0])
    target, out = _constant_target(ctx, r), static_shape(node.outputs[0])
    if target is None or out is None or len(out) != 2 or type(out[1]) is not int:
        return None
    expected = [d if type(d) is int else -1 for d in leading] + [out[1]]
    if expected.count(-1) > 1 or 0 in expected:
        return None
    return r if target == expected else None


def _constant_target(ctx: PassContext, r: ir.Node | None) -> list | None:
    """The constant target shape of ``r`` when it is a Reshape without allowzero, else None
    (a Reshape before opset 5 has no target input: its shape is an attribute)."""
    if not is_op(r, "Reshape") or r.attr("allowzero", 0) or len(r.inputs) < 2:
        return None
    target = ctx.const(r.inputs[1])
    return None if target is None else target.tolist()


@graph_pass("FlattenedMatMulFusion", EXTENDED)
def flattened_matmul(ctx: PassContext) -> bool:
    changed = False
    for node in ctx.nodes_of(_ROW_OPS):
        if node.graph is not ctx.graph or not node.inputs:
            continue
        first = node.inputs[0]  # (the cheap test first: _flattening's Reshape)
        if first is None or not is_op(first.producer, "Reshape"):
            continue
        if not _is_row_product(ctx, node):
            continue
        x = _flattening(ctx, node)
        restore = _restoring(ctx, node, static_shape(x)[:-1]) if x is not None else None
        if restore is None:
            continue
        fused = _unflattened(ctx, node, x)
        ctx.replace_nodes(restore, fused, [node.inputs[0].producer, node])
        ctx.count("FlattenedMatMulFusion")
        changed = True
    return changed


def _unflattened(ctx: PassContext, node: ir.Node, x: ir.Value) -> ir.Node:
    """``node`` on x; a Gemm as MatMulAdd (its B transposed where Gemm's was)."""
    name = ctx.fresh_name(node.name or node.op_type)
    if not is_op(node, "Gemm"):
        attrs = list(node.attributes.values())
        return ir.Node(node.op_type, [x, *node.inputs[1:]], 1, attrs, node.domain, name)
    b = node.inputs[1]
    if node.attr("transB", 0):
        b = ctx.add_const(np.ascontiguousarray(_plain_gemm(ctx, node)), b.name + "_T")
    ctx.ensure_function("MatMulAdd", functools.partial(_matmul_add_function, ctx, "MatMulAdd"))
    return ir.Node("MatMulAdd", [x, b, node.inputs[2]], 1, domain=ONYX_DOMAIN, name=name)
