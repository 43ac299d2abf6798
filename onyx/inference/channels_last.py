"""Shape rules of the channels-last ops the optimizer's layout pass emits (ai.onyx
NhwcFusedConv and its variants, NhwcGlobalAveragePool: optimizer/layout.py). Each is a
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
