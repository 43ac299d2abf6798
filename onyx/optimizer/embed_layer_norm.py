"""BERT's embedding sum, word[ids] + position[pos] [+ segment[segment_ids]] -> LayerNormalization
over the last axis, into one com.microsoft EmbedLayerNormalization (as onnxruntime's transformer
optimizer writes it): six nodes and their intermediate [B, S, D] arrays become one, and the
position ids go where the exporters' Slice of the constant 0 .. max - 1 buffer up to the
sequence length is recognised (EmbedLayerNormalization's own positions then), else they are
fed as they are. The ids are cast to int32, the op's type (onnxruntime's kernel takes no
other); a negative id, which Gather would count from the end, is an error there as here."""

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
    same_dims,
    static_shape,
)
from .skip_layer_norm import hidden_norm_width

_INTS = (ir.DataType.INT64, ir.DataType.INT32)


def _int_ids(v: ir.Value) -> bool:
    return isinstance(v.type, ir.TensorType) and v.type.elem_type in _INTS


def _leaves(ctx: PassContext, s: ir.Value, reader: ir.Node, depth: int = 0):
    """The terms of s as a tree of Adds read once (at most 3 terms), with the Adds."""
    add = s.producer
    if depth < 2 and is_op(add, "Add") and ctx.single_use(s) is reader:
        a, b = add.inputs
        left, right = _leaves(ctx, a, add, depth + 1), _leaves(ctx, b, add, depth + 1)
        if left is not None and right is not None:
            return left[0] + right[0], left[1] + right[1] + [add]
    return ([s], []) if ctx.single_use(s) is reader else None


def _lookup(ctx: PassContext, v: ir.Value, width: int):
    """(table, ids, node) when v = Gather(table [V, width] float32 constant, int ids)."""
    g = v.producer
    if not is_op(g, "Gather") or g.attr("axis", 0) != 0:
        return None
    table = ctx.const(g.inputs[0])
    if table is None or table.ndim != 2 or table.shape[1] != width or table.dtype != np.float32:
        return None
    return (g.inputs[0], g.inputs[1], g) if _int_ids(g.inputs[1]) else None


def _default_positions(ctx: PassContext, pos: ir.Value, tokens: list[ir.Value]) -> bool:
    """Whether pos = Slice(0 .. M - 1 [1, M], 0, Shape(ids)[1], axis 1): 0 .. S - 1."""
    sl = pos.producer
    if not is_op(sl, "Slice") or len(sl.inputs) < 4:
        return False
    buf = ctx.const(sl.inputs[0])
    if buf is None or buf.ndim != 2 or buf.shape[0] != 1:
        return False
    starts, axes = ctx.const(sl.inputs[1]), ctx.const(sl.inputs[3])
    steps = ctx.const(sl.inputs[4]) if len(sl.inputs) > 4 and sl.inputs[4] is not None else 1
    if starts is None or axes is None or steps is None:
        return False
    if np.ravel(starts).tolist() != [0] or np.ravel(axes).tolist() not in ([1], [-1]):
        return False
    if np.ravel(steps).tolist() != [1]:
        return False
    if not np.array_equal(buf[0], np.arange(buf.shape[1])):
        return False
    u = sl.inputs[2].producer
    g = u.inputs[0].producer if is_op(u, "Unsqueeze") else None
    shape = g.inputs[0].producer if is_op(g, "Gather") and ctx.scalar(g.inputs[1]) == 1 else None
    return (
        is_op(shape, "Shape")
        and shape.attr("start") is None
        and shape.attr("end") is None
        and any(shape.inputs[0] is t for t in tokens)
    )


@graph_pass("EmbedLayerNormFusion", EXTENDED)
def embed_layer_norm_fusion(ctx: PassContext) -> bool:
    """word + position [+ segment] embeddings -> LayerNormalization  =>  EmbedLayerNormalization
    (module docstring)."""
    changed = False
    casts: dict[int, ir.Value] = {}
    for ln in ctx.graph:
        if is_op(ln, "LayerNormalization") and ln.graph is not None:
            found = _match(ctx, ln)
            if found is not None:
                _fuse(ctx, ln, found, casts)
                changed = True
    return changed


def _match(ctx: PassContext, ln: ir.Node):
    s = ln.inputs[0]
    shape = static_shape(s)
    width = hidden_norm_width(ctx, ln, shape)
    if width is None:
        return None
    for p in ln.inputs[1:3]:
        c = ctx.const(p) if p is not None else np.zeros(width, np.float32)
        if c is None or c.shape != (width,) or c.dtype != np.float32:
            return None
    terms = _leaves(ctx, s, ln)
    if terms is None or len(terms[0]) not in (2, 3):
        return None
    lookups = [_lookup(ctx, v, width) for v in terms[0]]
    if any(x is None for x in lookups):
        return None
    tokens = [
        x for x in lookups if x[1].producer is None and same_dims(static_shape(x[1]), shape[:2])
    ]
    others = [x for x in lookups if all(x is not t for t in tokens)]
    if len(others) != 1 or not 1 <= len(tokens) <= 2:
        return None
    pos_shape = static_shape(others[0][1])
    if pos_shape is None or len(pos_shape) != 2 or pos_shape[0] not in (1, shape[0]):
        return None
    tokens.sort(key=lambda x: -ctx.const(x[0]).shape[0])  # (the word table is the larger)
    return tokens, others[0], terms[1] + [x[2] for x in lookups]


def _fuse(ctx: PassContext, ln: ir.Node, found, casts: dict) -> None:
    tokens, position, dead = found
    ids = [as_int32(ctx, t[1], casts) for t in tokens]
    word, segment = tokens[0], tokens[1] if len(tokens) > 1 else None
    pos_ids = position[1]
    default = _default_positions(ctx, pos_ids, [t[1] for t in tokens])
    gamma = ln.inputs[1]
    beta = ln.inputs[2] if len(ln.inputs) > 2 and ln.inputs[2] is not None else None
    if beta is None:
        beta = ctx.add_const(np.zeros(static_shape(ln.inputs[0])[2], np.float32), "embed_beta")
    inputs = [
        ids[0],
        ids[1] if segment is not None else None,
        word[0],
        position[0],
        segment[0] if segment is not None else None,
        gamma,
        beta,
        None,
        None if default else as_int32(ctx, pos_ids, casts),
    ]
    while inputs[-1] is None:
        inputs.pop()
    # (two outputs: onnxruntime's shape inference refuses the op without its mask index)
    fused = ir.Node(
        "EmbedLayerNormalization",
        inputs,
        ["", ctx.fresh_name("embed_mask_index")],
        domain=MS,
        name=ctx.fresh_name((ln.name or "embeddings") + "_embed"),
    )
    fused.set_attr("epsilon", float(ln.attr("epsilon", 1e-5)))
    ctx.ensure_opset(MS)
    ctx.replace_nodes(ln, fused, dead)
    ctx.count("EmbedLayerNormFusion")
