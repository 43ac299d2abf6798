"""Ops that pad, tile, resample or crop a tensor's extent: Pad, Tile, Resize/Upsample,
DepthToSpace/SpaceToDepth, CenterCropPad, MaxUnpool, RoiAlign, MaxRoiPool. (Out of tensor.py
and nn.py, which a CNN's or a transformer's inference imports: few serving models hold these,
so a session imports this module only where its model does.)"""

from __future__ import annotations

import numpy as np

from . import symbolic as sym
from .engine import NodeContext, rule
from .tensor import _axis


@rule("Tile")
def tile(ctx: NodeContext) -> None:
    s, reps = ctx.shape(0), ctx.data(1)
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    if reps is None:
        ctx.set(0, ctx.dtype(0), (None,) * len(s))
        return
    ctx.set(0, ctx.dtype(0), [sym.mul(d, r) for d, r in zip(s, reps.dims)])


@rule("Pad")
def pad(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    r = len(s)
    if ctx.opset < 11:
        pads = ctx.attr("pads")
        pads = ctx.attr("paddings") if pads is None else pads
    else:
        d = ctx.data(1)
        pads = None if d is None else d.dims
    if pads is None:
        ctx.set(0, ctx.dtype(0), (None,) * r)
        return
    pads = [int(p) if isinstance(p, int | np.integer) else p for p in np.ravel(pads)]
    axes = ctx.value(3) if ctx.has(3) else None
    if ctx.has(3) and axes is None:
        ctx.set(0, ctx.dtype(0), (None,) * r)
        return
    axes = list(range(r)) if axes is None else [_axis(int(a), r) for a in np.ravel(axes)]
    n = len(axes)
    dims = list(s)
    for k, a in enumerate(axes):
        dims[a] = sym.add(dims[a], pads[k], pads[k + n])
    ctx.set(0, ctx.dtype(0), dims)


@rule("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    b = ctx.attr("blocksize")
    if s is None or len(s) != 4:
        ctx.set(0, ctx.dtype(0), (None,) * 4)
        return
    n, c, h, w = s
    mul, div = sym.mul, sym.floordiv
    if ctx.node.op_type == "DepthToSpace":
        ctx.set(0, ctx.dtype(0), (n, div(c, b * b), mul(h, b), mul(w, b)))
    else:
        ctx.set(0, ctx.dtype(0), (n, mul(c, b * b), div(h, b), div(w, b)))


@rule("Resize", "Upsample")
def resize(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    r = len(s)
    op = ctx.node.op_type
    if op == "Upsample" and ctx.opset < 9:
        scales, sizes = ctx.attr("scales"), None
    elif op == "Upsample":
        scales, sizes = ctx.value(1), None
    elif ctx.opset < 11:
        scales, sizes = ctx.value(1), None
    else:
        scales = ctx.value(2) if ctx.has(2) else None
        sizes = ctx.data(3) if ctx.has(3) else None
        sizes = None if sizes is None or None in sizes.dims else sizes.dims
    axes = ctx.attr("axes") if op == "Resize" else None
    axes = list(range(r)) if not axes else [_axis(a, r) for a in axes]
    dims = list(s)
    if sizes is not None and len(sizes):
        for a, n in zip(axes, sizes):
            dims[a] = n
        if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            dims = [None if k in axes else d for k, d in enumerate(dims)]
    elif scales is not None and np.size(scales):
        for a, f in zip(axes, np.ravel(scales)):
            dims[a] = _scaled(s[a], float(f))
    else:
        dims = [None if k in axes else d for k, d in enumerate(dims)]
    ctx.set(0, ctx.dtype(0), dims)


def _scaled(d, scale: float):
    """floor(d * scale); symbolic when the scale is a fraction with a small denominator (2.0,
    0.5, 1.5: exact in float), unknown otherwise (a float product's rounding is not a formula)."""
    if isinstance(d, int):
        return int(np.floor(d * scale))
    if d is None or not np.isfinite(scale) or scale < 0:
        return None
    # (a float's exact ratio, in lowest terms, as Fraction(scale) gives it: without importing
    # fractions and decimal, ~1.5 ms of a U-Net's cold start)
    numerator, denominator = float(scale).as_integer_ratio()
    if denominator > 64:
        return None
    return sym.floordiv(sym.mul(d, numerator), denominator)


@rule("MaxUnpool")
def max_unpool(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if ctx.has(2):  # an explicit output shape
        shape = ctx.data(2)
        ctx.set(0, ctx.dtype(0), None if shape is None else shape.dims)
        return
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    kernel = ctx.attr("kernel_shape")
    strides = ctx.attr("strides") or [1] * len(kernel)
    pads = ctx.attr("pads") or [0] * (2 * len(kernel))
    n = len(kernel)
    sp = [
        (d - 1) * strides[k] + kernel[k] - pads[k] - pads[k + n] if isinstance(d, int) else None
        for k, d in enumerate(x[2:])
    ]
    ctx.set(0, ctx.dtype(0), [x[0], x[1], *sp])


@rule("RoiAlign")
def roi_align(ctx: NodeContext) -> None:
    x, rois = ctx.shape(0), ctx.shape(1)
    h, w = ctx.attr("output_height", 1), ctx.attr("output_width", 1)
    n = rois[0] if rois is not None else None
    c = x[1] if x is not None else None
    ctx.set(0, ctx.dtype(0), (n, c, h, w))


@rule("CenterCropPad")
def center_crop_pad(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    shape = ctx.value(1)
    if x is None or shape is None:
        ctx.set(0, ctx.dtype(0), None if x is None else [None] * len(x))
        return
    axes = ctx.attr("axes") or list(range(len(x)))
    dims = list(x)
    for a, d in zip(axes, np.ravel(shape)):
        dims[a + len(x) if a < 0 else a] = int(d)
    ctx.set(0, ctx.dtype(0), dims)


@rule("MaxRoiPool")
def max_roi_pool(ctx: NodeContext) -> None:
    x, rois = ctx.shape(0), ctx.shape(1)
    ph, pw = ctx.attr("pooled_shape")
    ctx.set(0, ctx.dtype(0), (rois[0] if rois else None, x[1] if x else None, ph, pw))
