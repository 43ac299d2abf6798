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


def _shape_slice(ctx: PassContext, v: ir.Value, x: ir.Value) -> tuple[int, int] | None:
    """(start, end) when v = Slice(Shape(x), [start], [end]) (axis 0, step 1), else None."""
    sl = v.producer
    if not is_op(sl, "Slice") or len(sl.inputs) < 3:
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
    return int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])


def _leading_dims_of(ctx: PassContext, v: ir.Value, x: ir.Value) -> int | None:
    """k when v = Slice(Shape(x), [0], [k]) (axis 0, step 1), else None."""
    found = _shape_slice(ctx, v, x)
    if found is None or v.producer.graph is None:
        return None
    start, k = found
    return k if start == 0 and k > 0 else None


@graph_pass("ReshapeOwnShapeFusion", EXTENDED)
def reshape_own_shape(ctx: PassContext) -> bool:
    changed = False
    for reshape in ctx.nodes_of("Reshape"):
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
    for squeeze in ctx.nodes_of("Squeeze"):
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


def _leading_slice(ctx: PassContext, v: ir.Value, x: ir.Value, rank: int) -> bool:
    """v = Slice(Shape(x), start, end) taking x's dims [0, rank - 2) (start 0 or below -rank,
    as PyTorch writes INT64_MIN; end rank - 2 or -2; axis 0, step 1)."""
    found = _shape_slice(ctx, v, x)
    if found is None or len(v.producer.inputs) > 4:
        return False
    start, end = found
    return (start == 0 or start <= -rank) and end in (rank - 2, -2)


@graph_pass("FlattenedTransposeFusion", EXTENDED)
def flattened_transpose(ctx: PassContext) -> bool:
    """Reshape(Transpose(Reshape(x, [-1, a, b]), [0, 2, 1]), Concat(x's leading dims, [b],
    [a])) (PyTorch's k.transpose(-2, -1) of 4-D keys as the dynamo export writes it: flatten,
    swap, unflatten)  =>  Transpose(x) swapping its last two axes: two copies fewer, and a
    transpose that the attention fusions see through."""
    changed = False
    for r2 in ctx.nodes_of("Reshape"):
        if not is_op(r2, "Reshape") or r2.graph is None:
            continue
        t = r2.inputs[0].producer
        if not is_op(t, "Transpose") or t.attr("perm") != [0, 2, 1]:
            continue
        r1 = t.inputs[0].producer
        if not is_op(r1, "Reshape") or ctx.single_use(t.outputs[0]) is not r2:
            continue
        x, flat = r1.inputs[0], ctx.const(r1.inputs[1])
        dims = static_shape(x)
        if flat is None or dims is None or len(dims) < 3 or ctx.single_use(r1.outputs[0]) is not t:
            continue
        a, b = dims[-2:]
        if not isinstance(a, int) or not isinstance(b, int) or flat.tolist() != [-1, a, b]:
            continue
        concat = r2.inputs[1].producer
        if not is_op(concat, "Concat") or len(concat.inputs) != 3 or concat.attr("axis") != 0:
            continue
        tail = [ctx.const(v) for v in concat.inputs[1:]]
        if any(c is None or c.reshape(-1).tolist() != [d] for c, d in zip(tail, (b, a))):
            continue
        if not _leading_slice(ctx, concat.inputs[0], x, len(dims)):
            continue
        swap = ir.Node("Transpose", [x], 1, name=ctx.fresh_name((r2.name or "keys") + "_swap"))
        swap.set_attr("perm", [*range(len(dims) - 2), len(dims) - 1, len(dims) - 2])
        ctx.replace_nodes(r2, swap, [t, r1])
        ctx.count("FlattenedTransposeFusion")
        changed = True
    return changed
