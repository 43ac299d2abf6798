"""ShuffleNet's channel shuffle fused into the depthwise conv that reads it (issue 23's light
ShuffleNet).

A ShuffleNet unit shuffles its channels between the grouped 1x1 conv and the depthwise conv:
Reshape (N, C, H, W) -> (N, g, C / g, H, W), Transpose perm [0, 2, 1, 3, 4], Reshape back.
The Transpose is a view; the second Reshape copied every plane, and the three were three
steps. A depthwise conv reads each channel's plane on its own, so it can read them in the
shuffled order where they are: ``ChannelShuffleConvFusion`` makes the four nodes ai.onyx
ChannelShuffleConv (kernels/shuffle.py; depthwise.c reads the planes shuffled).
"""

from __future__ import annotations

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import _REF_TYPES
from .core import EXTENDED, MS, PassContext, graph_pass, is_op, static_shape

#: the conv attributes ChannelShuffleConv passes on to its body's FusedConv, and their types
_ATTR_TYPES = {
    "activation": ir.AttrType.STRING,
    "activation_params": ir.AttrType.FLOATS,
    **_REF_TYPES,  # (Conv's, in their order: the function's attribute list is saved)
}


#: the groups of the shuffle the fusion saw (its shape constant's), which the body does not
#: read: an IR 3 model's shape initializer is also an input a caller may feed, and the
#: unfused graph refuses a fed shape that shuffles otherwise (its first run's output check:
#: inference took the initializer's dims), so the kernel refuses it too
_GROUPS = "groups"


@graph_pass("ChannelShuffleConvFusion", EXTENDED)
def channel_shuffle_conv(ctx: PassContext) -> bool:
    """Reshape(X, shape) -> Transpose(perm=[0, 2, 1, 3, 4]) -> Reshape(., (N, C, H, W)) ->
    depthwise Conv / FusedConv (no Z) of constant weights  =>  ai.onyx ChannelShuffleConv(X,
    shape, W, B): X float32 of static shape (N, C, H, W), shape a constant resolving to
    (N, g, C / g, H, W), each intermediate read by the next node alone. A model-local
    function whose body is the four ops (the conv as FusedConv)."""
    if not ctx.inferred:
        ctx.infer()
    changed = False
    for back in list(ctx.graph):
        match = _shuffle_of(ctx, back)
        if match is None:
            continue
        front, turn, conv, groups = match
        ctx.ensure_opset(MS, 1)
        ctx.ensure_function("ChannelShuffleConv", lambda: _function(ctx))
        attrs = [a for a in conv.attributes.values() if a.name in _ATTR_TYPES]
        attrs.append(ir.Attr("groups", ir.AttrType.INT, groups))  # (see _GROUPS)
        fused = ir.Node(
            "ChannelShuffleConv",
            [front.inputs[0], front.inputs[1], *conv.inputs[1:3]],
            1,
            attrs,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((conv.name or "conv") + "_shuffled"),
        )
        ctx.replace_nodes(conv, fused, [front, turn, back])
        ctx.count("ChannelShuffleConvFusion")
        changed = True
    return changed


def _shuffle_of(ctx: PassContext, back: ir.Node) -> tuple | None:
    """(first Reshape, Transpose, conv, the shuffle's groups) of the pattern whose last
    Reshape is ``back``."""
    if not is_op(back, "Reshape") or back.graph is None or len(back.outputs) != 1:
        return None
    turn = back.inputs[0].producer if back.inputs[0] is not None else None
    if not is_op(turn, "Transpose") or list(turn.attr("perm") or []) != [0, 2, 1, 3, 4]:
        return None
    front = turn.inputs[0].producer
    if not is_op(front, "Reshape") or front.attr("allowzero", 0):
        return None
    if ctx.single_use(front.outputs[0]) is not turn or ctx.single_use(turn.outputs[0]) is not back:
        return None
    x, shape = front.inputs[0], ctx.const(front.inputs[1])
    dims = static_shape(x)
    if not isinstance(x.type, ir.TensorType) or x.type.elem_type != ir.DataType.FLOAT:
        return None
    if shape is None:
        return None
    if dims is None or len(dims) != 4 or not all(isinstance(d, int) for d in dims):
        return None
    five = static_shape(front.outputs[0])
    if static_shape(back.outputs[0]) != dims or five is None:
        return None
    N, C, H, W = dims
    if len(five) != 5 or five[0] != N or five[3:] != (H, W) or five[1] * five[2] != C:
        return None
    conv = ctx.single_use(back.outputs[0])
    return None if not _depthwise(ctx, conv, C) else (front, turn, conv, five[1])


def _depthwise(ctx: PassContext, conv: ir.Node | None, C: int) -> bool:
    """Whether ``conv`` is a depthwise 2-D Conv (or FusedConv without Z) of C channels, one
    output a channel, with constant weights (and bias)."""
    if conv is None or len(conv.outputs) != 1:
        return False
    if not (is_op(conv, "Conv") or conv.op_type == "FusedConv" and conv.domain == MS):
        return False
    if len(conv.inputs) > 3:  # (a FusedConv's Z)
        return False
    w = ctx.const(conv.inputs[1])
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if w is None or w.dtype != "float32" or w.shape[:2] != (C, 1) or w.ndim != 4:
        return False
    if b is not None and ctx.const(b) is None:
        return False
    return conv.attr("group", 1) == C and all(a in _ATTR_TYPES for a in conv.attributes)


def _function(ctx: PassContext) -> ir.Function:
    """ChannelShuffleConv(X, shape, W, B) = FusedConv(Reshape(Transpose(Reshape(X, shape),
    perm=[0, 2, 1, 3, 4]), Shape(X)), W, B), the conv's attributes passed on."""
    x, shape, w, b = ir.Value("X"), ir.Value("shape"), ir.Value("W"), ir.Value("B")
    front = ir.Node("Reshape", [x, shape], ["grouped"])
    perm = ir.Attr("perm", ir.AttrType.INTS, [0, 2, 1, 3, 4])
    turn = ir.Node("Transpose", [front.outputs[0]], ["turned"], [perm])
    dims = ir.Node("Shape", [x], ["dims"])
    back = ir.Node("Reshape", [turn.outputs[0], dims.outputs[0]], ["shuffled"])
    refs = [ir.Attr(k, t, ref_attr_name=k) for k, t in _ATTR_TYPES.items()]
    conv = ir.Node("FusedConv", [back.outputs[0], w, b], ["Y"], refs, domain=MS)
    nodes = [front, turn, dims, back, conv]
    body = ir.Graph([x, shape, w, b], [conv.outputs[0]], nodes, name="ChannelShuffleConv")
    f = ir.Function(
        ONYX_DOMAIN, "ChannelShuffleConv", body, attributes=(*_ATTR_TYPES, _GROUPS),
        opset_imports={"": ctx.opset(), MS: 1},
    )  # fmt: skip
    f.doc_string = (
        "Y = FusedConv(channel shuffle of X: Reshape(Transpose(Reshape(X, shape), perm=[0, 2, "
        "1, 3, 4]), Shape(X)), W, B) (onyx: the depthwise conv reads X's planes shuffled)"
    )
    return f
