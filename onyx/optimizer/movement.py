"""Data-movement chains that exporters write as several nodes, each a dispatch on a small
model's run, made one node:

- ``Reshape(x, Concat(Slice(Shape(x), 0, k), c...))`` (PyTorch's unflatten of the last axis:
  keep x's first k dims, split the rest) => ``Reshape(x, [0] * k + c)``: a Reshape's 0 copies
  the input's dim at its position (allowzero 0), which is what the Slice of x's own shape
  gives; three shape nodes go and the shape becomes a constant.
- ``Squeeze(Transpose(Unsqueeze(x, U), perm), S)`` where the Squeeze takes exactly the
  unsqueezed axes (PyTorch's packed q/k/v split: unsqueeze, swap, squeeze) => one Transpose of
  x (or none, when the composition keeps the order); ``Squeeze(Unsqueeze(x, U), U)`` => x.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .core import EXTENDED, PassContext, graph_pass, is_op, static_shape


def _ints(ctx: PassContext, node: ir.Node, index: int, attr: str) -> list[int] | None:
    """A node's integer list given as the constant input ``index`` (newer opsets) or as the
    attribute ``attr`` (older ones)."""
    if len(node.inputs) > index and node.inputs[index] is not None:
        c = ctx.const(node.inputs[index])
        return None if c is None or c.dtype.kind not in "iu" else [int(i) for i in c.reshape(-1)]
    value = node.attr(attr)
    return None if value is None else [int(i) for i in value]


def _leading_dims_of(ctx: PassContext, v: ir.Value, x: ir.Value) -> int | None:
    """k when v = Slice(Shape(x), [0], [k]) (axis 0, step 1), else None."""
    sl = v.producer
    if not is_op(sl, "Slice") or len(sl.inputs) < 3 or sl.graph is None:
        return None
    shape = sl.inputs[0].producer
    if not is_op(shape, "Shape") or shape.inputs[0] is not x:
        return None
    if shape.attr("start", 0) != 0 or shape.attr("end") is not None:
        return None
    starts, ends = ctx.const(sl.inputs[1]), ctx.const(sl.inputs[2])
    if starts is None or ends is None or starts.size != 1 or ends.size != 1:
        return None
    for index, default in ((3, 0), (4, 1)):  # axes and steps: absent or the defaults
        if len(sl.inputs) > index and sl.inputs[index] is not None and sl.inputs[index].name:
            c = ctx.const(sl.inputs[index])
            if c is None or c.reshape(-1).tolist() != [default]:
                return None
    k = int(ends.reshape(-1)[0])
    return k if int(starts.reshape(-1)[0]) == 0 and k > 0 else None


@graph_pass("ReshapeOwnShapeFusion", EXTENDED)
def reshape_own_shape(ctx: PassContext) -> bool:
    changed = False
    for reshape in ctx.graph:
        if not is_op(reshape, "Reshape") or reshape.graph is None or reshape.attr("allowzero", 0):
            continue
        x, target = reshape.inputs[0], reshape.inputs[1]
        concat = target.producer
        if not is_op(concat, "Concat") or not concat.inputs:
            continue
        k = _leading_dims_of(ctx, concat.inputs[0], x)
        rest = [ctx.const(v) for v in concat.inputs[1:]]
        if k is None or any(c is None or c.dtype != np.int64 or c.ndim != 1 for c in rest):
            continue
        dims = static_shape(x)
        if dims is None or len(dims) < k:
            continue  # (a Slice past x's rank takes fewer than k dims)
        shape = np.concatenate([np.zeros(k, np.int64)] + rest)
        reshape.set_input(1, ctx.add_const(shape, (reshape.name or "reshape") + "_shape"))
        ctx.count("ReshapeOwnShapeFusion")
        changed = True  # (the shape nodes go as dead code)
    return changed


def _squeezed_transpose(ctx: PassContext, squeeze: ir.Node) -> tuple[ir.Value, list, list] | None:
    """(x, the permutation of x, the nodes between) when squeeze reads Transpose(Unsqueeze(x))
    or Unsqueeze(x) and removes exactly the unsqueezed axes; None otherwise."""
    between, un = [], squeeze.inputs[0].producer
    perm = None
    if is_op(un, "Transpose") and ctx.single_use(un.outputs[0]) is squeeze:
        between, perm, un = [un], un.attr("perm"), un.inputs[0].producer
    if not is_op(un, "Unsqueeze") or ctx.single_use(un.outputs[0]) is not (between or [squeeze])[0]:
        return None
    added, removed = _ints(ctx, un, 1, "axes"), _ints(ctx, squeeze, 1, "axes")
    x_dims = static_shape(un.inputs[0])
    if added is None or not removed or (perm is None and x_dims is None):
        return None
    rank = len(perm) if perm is not None else len(x_dims) + len(added)
    perm = list(range(rank)) if perm is None else [int(p) for p in perm]
    added = sorted({a % rank for a in added if -rank <= a < rank})
    removed = sorted({s % rank for s in removed if -rank <= s < rank})
    if sorted(perm[s] for s in removed) != added or len(added) != len(removed):
        return None
    kept = [p for i, p in enumerate(perm) if i not in removed]
    return un.inputs[0], [p - sum(a < p for a in added) for p in kept], between + [un]


@graph_pass("UnsqueezeTransposeSqueezeFusion", EXTENDED)
def unsqueeze_transpose_squeeze(ctx: PassContext) -> bool:
    changed = False
    for squeeze in ctx.graph:
        if not is_op(squeeze, "Squeeze") or squeeze.graph is None:
            continue
        found = _squeezed_transpose(ctx, squeeze)
        if found is None:
            continue
        x, perm, dead = found
        if perm == list(range(len(perm))):
            if not ctx.replace_value(squeeze.outputs[0], x):
                continue
        else:
            name = ctx.fresh_name((squeeze.name or "squeeze") + "_transpose")
            ctx.replace_nodes(
                squeeze, ir.Node("Transpose", [x], 1, {"perm": perm}, name=name), dead
            )
        ctx.count("UnsqueezeTransposeSqueezeFusion")
        changed = True
    return changed
