"""QDQDataMovement: a quantized model's movement ops (Reshape, Transpose, Gather, ...) between
a DequantizeLinear and a QuantizeLinear of the same parameters move the quantized bytes, and
a Where before a per-tensor QuantizeLinear picks quantized branches. Its own module (it was
fold.py's tail): its trigger is DequantizeLinear, so a float model's session never imports it."""

from __future__ import annotations

import numpy as np

from .. import ir
from .core import BASIC, STANDARD, PassContext, graph_pass, is_op

#: Ops that only move or select elements of input 0 (the other inputs are int64 parameters).
_MOVEMENT = {
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Split",
    "Slice",
    "Gather",
    "Expand",
}


#: The op types the pass starts from: a movement op (or Pad) reading a DQ's output, a Where.
_STARTS = frozenset(_MOVEMENT) | {"Pad", "Where"}

#: The zero point types whose bytes QDQDataMovement moves.
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _qparams(ctx: PassContext, node: ir.Node) -> tuple | None:
    """(scale, zero point) of a per-tensor Quantize/DequantizeLinear with constant float32
    parameters, an int8 or uint8 zero point and no attributes beyond axis, else None. (Not
    float8 or int4, also one byte a value in numpy: Where, Gather, Expand, Slice take no such
    type, so the moved graph would be a model onnx's checker and onnxruntime refuse.)"""
    if any(name != "axis" for name in node.attributes):
        return None
    scale = ctx.const(node.inputs[1])
    zp = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if scale is None or scale.size != 1 or scale.dtype != np.float32 or zp is None:
        return None
    s = float(scale.reshape(-1)[0])
    if not (np.isfinite(s) and s > 1e-30) or zp.size != 1 or zp.dtype not in _BYTES:
        return None
    return s, zp.dtype, int(zp.reshape(-1)[0])


@graph_pass("QDQDataMovement", BASIC)
def qdq_data_movement(ctx: PassContext) -> bool:
    """DequantizeLinear -> Reshape/Transpose/Split/... -> QuantizeLinear with the same scale and
    zero point  =>  the movement op on the quantized tensor.

    Exact: requantizing a dequantized 8-bit value at its own scale gives it back (|q - zp| <=
    255, so (q - zp) * s / s is within a few float32 ulps of an integer), and moving elements
    commutes with both element-wise ops. QDQ models wrap every such op in a pair; this saves
    two passes over the tensor per op (and the op moves a quarter of the bytes).

    A chain ending in a per-tensor QuantizeLinear at other parameters (a QOperator
    attention's q / k / v, split from the packed projection in float, then quantized each at
    its own scale) moves too, where LookupTableFusion will run: the movement ops on the bytes,
    then a DequantizeLinear at the first one's parameters on the moved bytes and the
    QuantizeLinear, which LookupTableFusion makes one table with what follows (the query's
    scaling QLinearMul). The same values: both are element-wise, per tensor.
    """
    g = ctx.graph
    changed = False
    for move in g:
        # (one set look-up a node: most nodes start nothing, and the pass walks the graph
        # again after every change of the basic rounds, six times on a quantized transformer)
        if move.op_type not in _STARTS or move.domain not in STANDARD or move.graph is None:
            continue
        if move.op_type == "Where":
            changed |= _quantize_before_where(ctx, move)
            continue
        if not move.inputs:
            continue
        dq = move.inputs[0].producer
        if not is_op(dq, "DequantizeLinear"):
            continue
        changed |= _shapes_read_source(ctx, dq)
        moves = _dequantized_readers(ctx, dq)
        if move not in moves:
            continue
        params = _qparams(ctx, dq)
        if params is None:  # (the spec gives DQ's input the zero point's type)
            continue
        requant = LOOKUP_PASS in ctx.enabled  # (else a table would not replace DQ -> Q)
        chains = [[_requantized_chain(ctx, v, params, requant) for v in m.outputs] for m in moves]
        if any(c is None for cs in chains for c in cs):
            continue
        parameters = [_moved_parameters(ctx, m, params) for m in moves]
        if any(p is None for p in parameters):
            continue
        for m, rest, cs in zip(moves, parameters, chains):
            _move_quantized(ctx, dq, m, rest, cs)
        g.remove(dq, safe=False)
        ctx.count("QDQDataMovement", len(moves))
        changed = True
    return changed


#: The pass that makes a DequantizeLinear -> QuantizeLinear pair one table (lookup.py).
LOOKUP_PASS = "LookupTableFusion"


def _quantize_before_where(ctx: PassContext, where: ir.Node) -> bool:
    """Where(c, x, y) -> Q per tensor  =>  Where(c, Q(x), Q(y)), the same Q on each branch (a
    causal attention's masked scores: Where(mask, scores, -10000) -> Q before the softmax).

    Exact: Where picks each element from x or y, and the quantization is elementwise, so
    quantizing after the pick or before it gives the same bytes (broadcasts included: the
    same values are repeated). The Where moves bytes instead of floats, the constant branch
    folds to one byte, and the Q joins the chain that made x (DQ -> Mul -> Q: one table, with
    LookupTableFusion) instead of running as its own step."""
    out = where.outputs[0]
    q = ctx.single_use(out)
    if len(where.inputs) != 3 or ctx.is_output(out) or not is_op(q, "QuantizeLinear"):
        return False
    if q.graph is not ctx.graph or q.inputs[0] is not out or _qparams(ctx, q) is None:
        return False
    if any(v is None or v is out for v in where.inputs) or len(q.outputs) != 1:
        return False
    branches = []
    for k in (1, 2):
        v = where.inputs[k]
        node = ir.Node(
            "QuantizeLinear",
            [v, *q.inputs[1:]],
            [ctx.fresh_name(v.name + "_quantized")],
            list(q.attributes.values()),
            domain=q.domain,
            name=ctx.fresh_name((q.name or "QuantizeLinear") + f"_branch{k}"),
        )
        ctx.graph.insert_before(where, node)
        branches.append(node.outputs[0])
    moved = ir.Node(
        "Where",
        [where.inputs[0], *branches],
        [ctx.fresh_name(out.name + "_quantized")],
        name=ctx.fresh_name((where.name or "Where") + "_quantized"),
    )
    ctx.graph.insert_before(where, moved)
    moved.outputs[0].type = q.outputs[0].type
    ctx.replace_value(q.outputs[0], moved.outputs[0])
    ctx.graph.remove(q, safe=False)
    ctx.graph.remove(where, safe=False)
    ctx.count("QDQDataMovement")
    return True


def _requantized_chain(ctx: PassContext, v: ir.Value, params: tuple, requant: bool = False):
    """([movement ops], Q) where ``v`` goes through a chain of one-output movement ops, each
    its predecessor's only reader, to a QuantizeLinear at ``params`` (an attention mask's
    Expand -> Reshape -> Reshape between its DQ and Q), or, with ``requant``, at any per-tensor
    parameters of its own (the chain then keeps a DQ before its Q); None otherwise."""
    chain = []
    node = ctx.single_use(v)
    while (
        is_op(node, *_MOVEMENT)
        and node.graph is ctx.graph
        and len(node.outputs) == 1
        and node.inputs[0] is v
        and v not in node.inputs[1:]
    ):
        chain.append(node)
        v = node.outputs[0]
        node = ctx.single_use(v)
    if not is_op(node, "QuantizeLinear") or node.graph is not ctx.graph:
        return None  # (a Q inside a subgraph reads the outer value: it stays)
    own = _qparams(ctx, node)
    if own != params and not (requant and own is not None):
        return None
    return chain, node


def _dequantized_readers(ctx: PassContext, dq: ir.Node) -> list[ir.Node]:
    """The movement ops reading ``dq``'s output, when they are all its readers (each reading
    it once, as its data) and it is no graph output; else []. Several: the q / k / v Gathers
    of an attention's packed projection, each requantized at the projection's parameters."""
    out = dq.outputs[0]
    if ctx.is_output(out):
        return []
    readers = []
    for node, index in out.iter_uses():
        if index != 0 or node in readers or node.graph is not ctx.graph:
            return []
        if not is_op(node, *_MOVEMENT, "Pad") or out in node.inputs[1:]:
            return []
        readers.append(node)
    return readers


def _move_quantized(ctx: PassContext, dq: ir.Node, move: ir.Node, rest: list, chains) -> None:
    """``move`` (and each output's chain of movement ops) on dq's quantized input in place
    of DQ -> move [-> chain] -> Q."""
    moved = _moved(ctx, move, [dq.inputs[0], *rest])
    params = _qparams(ctx, dq)
    for (chain, q), new in zip(chains, moved.outputs):
        for node in chain:
            new = _moved(ctx, node, [new, *node.inputs[1:]]).outputs[0]
        if _qparams(ctx, q) != params:  # (a requantization: DQ -> Q on the moved bytes)
            new.type = _bytes_type(dq.inputs[0].type, q.inputs[0].type)
            _requantize(ctx, dq, new, q)
            for node in reversed(chain):
                ctx.graph.remove(node, safe=False)
            continue
        new.type = q.outputs[0].type  # (the shape, for passes after this one)
        ctx.replace_value(q.outputs[0], new)
        ctx.graph.remove(q, safe=False)
        for node in reversed(chain):
            ctx.graph.remove(node, safe=False)
    ctx.graph.remove(move, safe=False)


def _bytes_type(byte: ir.Type | None, moved: ir.Type | None) -> ir.TensorType | None:
    """The type of the moved bytes: ``byte``'s element type in the shape of ``moved`` (the
    float value the chain made), for passes after this one; None where either is unknown."""
    if isinstance(byte, ir.TensorType) and isinstance(moved, ir.TensorType):
        return ir.TensorType(byte.elem_type, moved.shape)
    return None


def _requantize(ctx: PassContext, dq: ir.Node, moved: ir.Value, q: ir.Node) -> None:
    """``q`` reads a copy of ``dq`` (its parameters and attributes) on the moved bytes."""
    out = ctx.fresh_name(q.inputs[0].name + "_dequantized")
    copy = ir.Node(
        dq.op_type,
        [moved, *dq.inputs[1:]],
        [out],
        list(dq.attributes.values()),
        domain=dq.domain,
        name=ctx.fresh_name((dq.name or dq.op_type) + "_moved"),
    )
    copy.outputs[0].type = q.inputs[0].type
    ctx.graph.insert_before(q, copy)
    q.set_input(0, copy.outputs[0])


def _moved(ctx: PassContext, node: ir.Node, inputs: list) -> ir.Node:
    """A copy of movement op ``node`` reading ``inputs``, inserted before it."""
    moved = ir.Node(
        node.op_type,
        inputs,
        [ctx.fresh_name(v.name + "_quantized") for v in node.outputs],
        list(node.attributes.values()),
        name=ctx.fresh_name((node.name or node.op_type) + "_quantized"),
    )
    ctx.graph.insert_before(node, moved)
    return moved


def _shapes_read_source(ctx: PassContext, dq: ir.Node) -> bool:
    """Shape nodes reading ``dq``'s output read its input instead (the same shape): the
    dequantized tensor then often has one reader left, which the movement needs."""
    shapes = [n for n, _ in dq.outputs[0].uses() if is_op(n, "Shape") and n.graph is ctx.graph]
    for n in shapes:
        n.set_input(0, dq.inputs[0])
    return bool(shapes)


def _moved_parameters(ctx: PassContext, move: ir.Node, params: tuple) -> list | None:
    """The movement op's inputs after the data, for the quantized tensor; None when it cannot
    move. Pad's constant (0, the only one taken) quantizes to the zero point exactly."""
    rest = list(move.inputs[1:])
    if move.op_type != "Pad":
        return rest
    if ctx.opset() < 11 or len(rest) > 3:
        return None
    if move.attr("mode", "constant") in ("constant", b"constant"):
        value = ctx.scalar(rest[1]) if len(rest) > 1 and rest[1] is not None else 0.0
        if value != 0.0:
            return None
        _, dtype, zp = params
        rest = [rest[0], ctx.add_const(np.array(zp, dtype), "pad_zero_point"), *rest[2:]]
    return rest
