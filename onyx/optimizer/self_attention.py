"""An encoder's self-attention block, as PyTorch exporters write it, into one com.microsoft
Attention node (the op onnxruntime's transformer optimizer makes of BERT):

    q = Transpose(Reshape(x @ Wq + bq [* c], [B, S, N, H]), 0 2 1 3)     (k: perm 0 2 3 1, k^T;
    probs = Softmax(q @ k^T * scale [+ padding mask])                     v: as q)
    y = Reshape(Transpose(probs @ v, 0 2 1 3), [B, S, N * H])

becomes Attention(x, [Wq | Wk | Wv], [bq | bk | bv], mask) with num_heads N and the scale: one
GEMM for the three projections and the attention itself on the native step (attention.c) when
the optional C library is present. The mask, when there is one, must be the key padding mask
the exporters build from a [B, T] input: Unsqueeze to [B, 1, 1, T], maybe Expand, Cast to float,
1 - m, then Where(Cast(.., bool), fill, ..) or * fill. Attention adds its ``mask_filter_value``
(set to that fill) where the input mask is 0, which is the exported graph's sum for masks of 0
and 1 (a mask value other than 0 and 1 would count as 1 in Attention, as masked in the graph).
Any other addend to the scores (T5's position bias, a causal mask) leaves the block as it is.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .core import (
    EXTENDED,
    MS,
    PassContext,
    as_int32,
    graph_pass,
    is_op,
    scale_of,
    static_shape,
)

_HEADS_PERM = [0, 2, 1, 3]
_KEYS_T_PERM = [0, 2, 3, 1]


def _float32(v: ir.Value | None) -> bool:
    return (
        v is not None
        and isinstance(v.type, ir.TensorType)
        and v.type.elem_type == ir.DataType.FLOAT
    )


def _only_reader(ctx: PassContext, v: ir.Value, *op_types: str) -> ir.Node | None:
    n = ctx.single_use(v)
    return n if is_op(n, *op_types) else None


def _heads(ctx: PassContext, reshape: ir.Node, width: int) -> tuple[int, int] | None:
    """(N, H) of a Reshape of [B, S, width] to [B, S, N, H], N and H constants of its shape
    (one of them may be -1): a constant shape, or a Concat whose last two inputs are
    constants (the exporters' shape arithmetic)."""
    shape = ctx.const(reshape.inputs[1])
    if shape is not None:
        dims = shape.reshape(-1).tolist()
    else:
        cat = reshape.inputs[1].producer
        if not is_op(cat, "Concat") or len(cat.inputs) != 4:
            return None
        parts = [ctx.const(v) for v in cat.inputs[2:]]
        if any(p is None or p.size != 1 for p in parts):
            return None
        dims = [None, None, *(int(p.reshape(-1)[0]) for p in parts)]
    if len(dims) != 4 or reshape.attr("allowzero", 0):
        return None
    n, h = int(dims[2]), int(dims[3])
    if n == -1 and h > 0 and width % h == 0:
        n = width // h
    elif h == -1 and n > 0 and width % n == 0:
        h = width // n
    return (n, h) if n > 0 and h > 0 and n * h == width else None


def _projection(ctx: PassContext, v: ir.Value, perm: list[int], reader: ir.Node):
    """For v = Transpose(Reshape(x @ W [+ b] [* c], [B, S, N, H]), perm), read by ``reader``
    only: (x, W, b or None, c, (N, H), nodes); else None."""
    t = v.producer
    if not is_op(t, "Transpose") or t.attr("perm") != perm or ctx.single_use(v) is not reader:
        return None
    r = t.inputs[0].producer
    if not is_op(r, "Reshape") or ctx.single_use(t.inputs[0]) is not t:
        return None
    nodes, factor, w = [t, r], 1.0, r.inputs[0]
    p = w.producer
    if is_op(p, "Mul", "Div") and ctx.single_use(w) is r:
        inner = next((i for i in p.inputs if ctx.const(i) is None), None)
        c = scale_of(ctx, p, inner) if inner is not None else None
        if c is not None:
            nodes, factor, w = [*nodes, p], c, inner
    bias, p = None, w.producer
    if is_op(p, "Add") and ctx.single_use(w) is nodes[-1]:
        for mm_out, b in (p.inputs, p.inputs[::-1]):
            if is_op(mm_out.producer, "MatMul") and ctx.const(b) is not None:
                bias, nodes, w = b, [*nodes, p], mm_out
                break
    mm = w.producer
    if not is_op(mm, "MatMul") or ctx.single_use(w) is not nodes[-1]:
        return None
    weight = ctx.const(mm.inputs[1])
    if weight is None or weight.ndim != 2 or weight.dtype != np.float32:
        return None
    heads = _heads(ctx, r, weight.shape[1])
    if heads is None:
        return None
    b = None if bias is None else ctx.const(bias)
    if b is not None and (b.dtype != np.float32 or b.reshape(-1).shape != (weight.shape[1],)):
        return None
    return mm.inputs[0], weight, b, factor, heads, [*nodes, mm]


def _scores(ctx: PassContext, v: ir.Value):
    """(q, k^T, scale, nodes) for v = q @ k^T [* scale]: MatMul, a MatMul then a scalar Mul /
    Div, or FusedMatMul(alpha) without transposes."""
    n = v.producer
    c = None
    if is_op(n, "Mul", "Div"):
        inner = next((i for i in n.inputs if ctx.const(i) is None), None)
        c = scale_of(ctx, n, inner) if inner is not None else None
        mm = inner.producer if c is not None else None
        if is_op(mm, "MatMul") and ctx.single_use(inner) is n:
            return mm.inputs[0], mm.inputs[1], c, [n, mm]
        return None
    if is_op(n, "MatMul"):
        return n.inputs[0], n.inputs[1], 1.0, [n]
    if n is not None and n.domain == MS and n.op_type == "FusedMatMul" and len(n.inputs) == 2:
        if not any(n.attr(f, 0) for f in ("transA", "transB", "transBatchA", "transBatchB")):
            return n.inputs[0], n.inputs[1], float(n.attr("alpha", 1.0)), [n]
    return None


def _per_key(unsqueezes: list[list[int]]) -> bool:
    """Whether these Unsqueezes, in order, make [B, T] into [B, 1, 1, T]."""
    dims: list = ["B", "T"]
    for axes in unsqueezes:
        rank = len(dims) + len(axes)
        for a in sorted(a % rank if -rank <= a < rank else rank for a in axes):
            if a >= rank:
                return False
            dims.insert(a, 1)
    return dims == ["B", 1, 1, "T"]


def _unsqueezed_axes(ctx: PassContext, node: ir.Node) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1:
        c = ctx.const(node.inputs[1])
        axes = None if c is None else c.reshape(-1).tolist()
    return None if axes is None else [int(a) for a in axes]


def _padding_mask(ctx: PassContext, m: ir.Value) -> tuple[ir.Value, float] | None:
    """(the [B, T] mask input, the fill of its zeros) when m is the exporters' additive key
    padding mask (module docstring); else None. (The chain stays: the layers share it, and
    dead code elimination takes it once the last one is fused.)"""
    n, fill = m.producer, None
    if is_op(n, "Where") and n.inputs[0] is not None:
        cond, fill_v, inverted = n.inputs  # Where(Cast(1 - m, bool), fill, 1 - m)
        cast = cond.producer
        if is_op(cast, "Cast") and cast.attr("to") == ir.DataType.BOOL:
            if cast.inputs[0] is inverted:
                fill, m = ctx.scalar(fill_v), inverted
    elif is_op(n, "Mul"):  # (1 - m) * fill
        for x, c in (n.inputs, n.inputs[::-1]):
            if ctx.scalar(c) is not None and ctx.const(x) is None:
                fill, m = ctx.scalar(c), x
                break
    sub = m.producer
    if fill is None or fill > -1e4 or not is_op(sub, "Sub") or ctx.scalar(sub.inputs[0]) != 1.0:
        return None
    v, unsqueezes, expanded = sub.inputs[1], [], False
    while v.producer is not None:
        p = v.producer
        if is_op(p, "Cast") and p.attr("to") in (ir.DataType.FLOAT, ir.DataType.BOOL):
            pass
        elif is_op(p, "Expand") and not expanded:
            expanded = True
        elif is_op(p, "Unsqueeze"):
            axes = _unsqueezed_axes(ctx, p)
            if axes is None:
                return None
            unsqueezes.append(axes)
        else:
            break
        v = p.inputs[0]
    shape = static_shape(v)
    if shape is None or len(shape) != 2 or not _per_key(unsqueezes[::-1]):
        return None
    if not isinstance(v.type, ir.TensorType) or v.type.elem_type == ir.DataType.STRING:
        return None
    return v, fill


@graph_pass("SelfAttentionFusion", EXTENDED)
def self_attention_fusion(ctx: PassContext) -> bool:
    """An exported encoder self-attention block  =>  com.microsoft Attention (module
    docstring). Float32 only (onnxruntime's CPU Attention)."""
    changed = False
    masks: dict[int, ir.Value] = {}
    for sm in ctx.graph:
        if is_op(sm, "Softmax") and sm.graph is not None and sm.attr("axis", -1) in (-1, 3):
            found = _match(ctx, sm)
            if found is not None:
                _fuse(ctx, found, masks)
                changed = True
    return changed


def _match(ctx: PassContext, sm: ir.Node):
    out = _only_reader(ctx, sm.outputs[0], "MatMul")
    if out is None or out.inputs[0] is not sm.outputs[0]:
        return None
    merge_t = _only_reader(ctx, out.outputs[0], "Transpose")
    if merge_t is None or merge_t.attr("perm") != _HEADS_PERM:
        return None
    merge = _only_reader(ctx, merge_t.outputs[0], "Reshape")
    target = ctx.const(merge.inputs[1]) if merge is not None else None
    if merge is None or merge.attr("allowzero", 0):
        return None
    scores_v, mask, mask_nodes = sm.inputs[0], None, []
    add = scores_v.producer
    if is_op(add, "Add") and ctx.single_use(scores_v) is sm:
        for s, m in (add.inputs, add.inputs[::-1]):
            if _scores(ctx, s) is not None and ctx.single_use(s) is add:
                mask = _padding_mask(ctx, m)
                scores_v, mask_nodes = s, [add]
                summed = static_shape(add.outputs[0])
                if summed is not None and len(summed) != 4:  # (a mask of more axes)
                    return None
                break
        if mask is None:
            return None
    scores = _scores(ctx, scores_v)
    if scores is None or ctx.single_use(scores_v) is not (mask_nodes or [sm])[0]:
        return None
    q_t, kt, scale, score_nodes = scores
    first = score_nodes[-1]
    q = _projection(ctx, q_t, _HEADS_PERM, first)
    k = _projection(ctx, kt, _KEYS_T_PERM, first)
    v = _projection(ctx, out.inputs[1], _HEADS_PERM, out)
    if q is None or k is None or v is None or not (q[0] is k[0] is v[0]):
        return None
    if k[3] != 1.0 or v[3] != 1.0 or not q[4] == k[4] == v[4]:
        return None
    heads, size = q[4]
    if any(p[1].shape != q[1].shape or p[1].shape[1] != heads * size for p in (k, v)):
        return None
    x_shape = static_shape(q[0])
    if x_shape is None or len(x_shape) != 3 or not _float32(q[0]):
        return None
    if not _merges_heads(ctx, merge, target, heads * size, x_shape):
        return None
    if not all(_splits_tokens(p[5][1], x_shape) for p in (q, k, v)):
        return None
    if mask is not None and not _mask_fits(mask[0], x_shape):
        return None
    nodes = [merge_t, out, sm, *mask_nodes, *score_nodes, *q[5], *k[5], *v[5]]
    return merge, q, k, v, heads, scale * q[3], mask, nodes


def _splits_tokens(reshape: ir.Node, x_shape: tuple) -> bool:
    """Whether a heads Reshape keeps x's batch and sequence axes first, where both sides'
    sizes are known numbers (a constant [S, B, N, H] of a [B, S, D] x is no attention over S)."""
    dims = static_shape(reshape.outputs[0]) or (None, None)
    return not any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(dims, x_shape[:2])
    )


def _mask_fits(raw: ir.Value, x_shape: tuple) -> bool:
    """The [B, T] mask has x's batch and sequence, where both are known."""
    dims = static_shape(raw)
    return all(a is None or b is None or a == b for a, b in zip(dims, x_shape[:2]))


def _merges_heads(ctx: PassContext, merge: ir.Node, target, width: int, x_shape: tuple) -> bool:
    """Whether the final Reshape gives [B, S, N * H] (x's own shape)."""
    if target is not None:
        dims = target.reshape(-1).tolist()
        if len(dims) != 3 or dims.count(-1) > 1:
            return False
        return all(d in (0, -1, want) for d, want in zip(dims, (*x_shape[:2], width)))
    cat = merge.inputs[1].producer
    if not is_op(cat, "Concat") or len(cat.inputs) != 3:
        return False
    last = ctx.const(cat.inputs[2])
    if last is None or last.size != 1 or int(last.reshape(-1)[0]) not in (width, -1):
        return False
    return x_shape[2] in (width, None)


def _fuse(ctx: PassContext, found, masks: dict[int, ir.Value]) -> None:
    merge, q, k, v, heads, scale, mask, nodes = found
    x = q[0]
    width = q[1].shape[1]
    weight = np.concatenate([q[1], k[1], v[1]], axis=1)
    zeros = np.zeros(width, np.float32)
    bias = np.concatenate([zeros if p[2] is None else p[2].reshape(-1) for p in (q, k, v)])
    inputs = [x, ctx.add_const(weight, "attention_qkv_weight"), ctx.add_const(bias, "qkv_bias")]
    if mask is not None:
        inputs.append(as_int32(ctx, mask[0], masks))
    att = ir.Node(
        "Attention", inputs, 1, domain=MS, name=ctx.fresh_name((merge.name or "attn") + "_fused")
    )
    att.set_attr("num_heads", int(heads))
    att.set_attr("scale", float(scale))
    if mask is not None:
        att.set_attr("mask_filter_value", float(mask[1]))
    ctx.ensure_opset(MS)
    ctx.replace_nodes(merge, att, nodes)
    ctx.count("SelfAttentionFusion")
