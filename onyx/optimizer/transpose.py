"""Transpose cancellation: Transpose(p2) of Transpose(p1) is one Transpose (or none)."""

from __future__ import annotations

from .. import ir
from .core import EXTENDED, PassContext, graph_pass, producer, static_shape


def _perm(node: ir.Node) -> list[int] | None:
    perm = node.attr("perm")
    if perm is not None:
        return [int(p) for p in perm]
    shape = static_shape(node.inputs[0])
    return None if shape is None else list(range(len(shape)))[::-1]  # default: reverse


@graph_pass("TransposeOptimizer", EXTENDED)
def transpose_cancellation(ctx: PassContext) -> bool:
    changed = False
    for outer in ctx.nodes_of("Transpose"):
        if outer.op_type != "Transpose" or outer.graph is None:
            continue
        inner = producer(outer.inputs[0], "Transpose")
        if inner is None:
            continue
        p1, p2 = _perm(inner), _perm(outer)
        if p1 is None or p2 is None or len(p1) != len(p2):
            continue
        # out[i] = mid[p2[i]] = x[p1[p2[i]]]
        combined = [p1[i] for i in p2]
        if combined == list(range(len(combined))):
            if not ctx.replace_value(outer.outputs[0], inner.inputs[0]):
                continue
        else:
            outer.set_input(0, inner.inputs[0])
            outer.set_attr("perm", combined)
        ctx.count("TransposeOptimizer")
        changed = True
    return changed
