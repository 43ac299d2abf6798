"""Shape rules of the channels-last ops the optimizer's layout passes emit (ai.onyx
NhwcFusedConv and its variants, NhwcGlobalAveragePool: optimizer/layout.py; the int8
QLinearConvNhwc and QLinearConvLookupNhwc: optimizer/nhwc.py). Each is a
model-local function, whose body inference could follow; a rule gives the same shapes without
inferring three body nodes per call (a session's first run infers the planned model's types
to check its outputs against)."""

from __future__ import annotations

from ..runtime.registry import ONYX_DOMAIN
from .engine import NodeContext, rule

#: Where each conv's weights are among its inputs (X, [S], W, B, [Z]).
_W_INPUT = {
    "NhwcFusedConv": 1,
    "NhwcFusedConvAdd": 1,
    "NhwcConvHardSwish": 1,
    "NhwcScaledFusedConv": 2,
    "NhwcScaledFusedConvAdd": 2,
}


@rule(*_W_INPUT, domain=ONYX_DOMAIN)
def nhwc_conv(ctx: NodeContext) -> None:
    """(N, H, W, C) -> (N, OH, OW, M): Conv's shape on the transposed input."""
    from .nn import _spatial  # (here: importing nn registers its rules, the index's for nn)

    x, w = ctx.shape(0), ctx.shape(_W_INPUT[ctx.node.op_type])
    if x is None or len(x) != 4:
        ctx.set(0, ctx.dtype(0), None if w is None else (None,) * len(w))
        return
    kernel = ctx.attr("kernel_shape") or (list(w[2:]) if w is not None else [None, None])
    out = _spatial(ctx, [x[0], x[3], x[1], x[2]], kernel)
    ctx.set(0, ctx.dtype(0), [x[0], *out, w[0] if w is not None else None])


@rule("NhwcGlobalAveragePool", domain=ONYX_DOMAIN)
def nhwc_global_average_pool(ctx: NodeContext) -> None:
    """(N, H, W, C) -> (N, 1, 1, C)."""
    x = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), None if x is None else [x[0], *([1] * (len(x) - 2)), x[-1]])


#: The int8 convs on NHWC tensors (optimizer/nhwc.py): model-local functions Transpose ->
#: QLinearConv [-> Cast -> Gather(table)] -> Transpose, one per conv of a quantized CNN.
_QLINEAR_NHWC = ("QLinearConvNhwc", "QLinearConvLookupNhwc")


@rule(*_QLINEAR_NHWC, domain=ONYX_DOMAIN)
def qlinear_conv_nhwc(ctx: NodeContext) -> None:
    """(N, H, W, C) -> (N, OH, OW, M) of y_zero_point's type (the lookup's: its table's), as
    its body infers; where the body's path is less plain (an input of no known shape or type,
    another rank, a table not 1-D, attribute references) the body is inferred as before."""
    from .nn import _spatial

    x, w, zp = ctx.shape(0), ctx.shape(3), ctx.dtype(7)
    lookup = ctx.node.op_type == "QLinearConvLookupNhwc"
    if lookup:
        table, dtype = ctx.shape(9), ctx.dtype(9)
        plain = table is not None and len(table) == 1 and dtype is not None
    else:
        plain, dtype = True, zp
    if not plain or x is None or w is None or len(x) != 4 or len(w) != 4 or zp is None:
        _body(ctx)
    elif ctx.node.attributes_have_refs():
        _body(ctx)
    else:
        kernel = ctx.attr("kernel_shape") or list(w[2:])
        out = _spatial(ctx, [x[0], x[3], x[1], x[2]], kernel)
        ctx.set(0, dtype, [x[0], *out, w[0]])


def _body(ctx: NodeContext) -> None:
    """The node's function body inferred (what the engine does for an op without a rule)."""
    engine = ctx.engine
    f = engine.functions.get((ONYX_DOMAIN, ctx.node.op_type))
    if f is not None:
        # (the main graph's opsets, which a call's body is inferred under: the optimizer puts
        # these nodes there only)
        engine.infer_call(ctx, f, engine.model.opset_imports)
    # (not remembered, as a call was not: a body's rule may name a fresh dim unseen here)
    ctx.minted = True
