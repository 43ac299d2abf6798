"""Selection and index ops: TopK, NonZero, Unique, Compress, GatherND, GatherElements, OneHot,
EyeLike. (Out of tensor.py, which every inference imports for its data folds: few serving
models hold these, so a session imports this module only where its model does.)"""

from __future__ import annotations

import numpy as np

from ..ir import DataType
from .engine import NodeContext, rule
from .tensor import _axis, _scalar_dim


@rule("GatherElements")
def gather_elements(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(0), ctx.shape(1))


@rule("GatherND")
def gather_nd(ctx: NodeContext) -> None:
    s, idx = ctx.shape(0), ctx.shape(1)
    b = ctx.attr("batch_dims", 0)
    if s is None or idx is None or not isinstance(idx[-1], int):
        ctx.set(0, ctx.dtype(0), None)
        return
    ctx.set(0, ctx.dtype(0), list(idx[:-1]) + list(s[b + idx[-1] :]))


@rule("NonZero")
def non_zero(ctx: NodeContext) -> None:
    r = ctx.rank(0)
    ctx.set(0, DataType.INT64, (r, None) if r is not None else (None, None))


@rule("TopK")
def top_k(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
        ctx.set(1, DataType.INT64, None)
        return
    axis = _axis(ctx.attr("axis", -1), len(s))
    k = ctx.attr("k") if ctx.opset < 10 else _scalar_dim(ctx, 1)
    dims = list(s)
    dims[axis] = int(k) if isinstance(k, int | np.integer) else k
    ctx.set(0, ctx.dtype(0), dims)
    ctx.set(1, DataType.INT64, dims)


@rule("OneHot")
def one_hot(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    depth = ctx.value(1)
    if s is None:
        ctx.set(0, ctx.dtype(2), None)
        return
    r = len(s) + 1
    axis = _axis(ctx.attr("axis", -1), r)
    dims = list(s)
    dims.insert(axis, int(np.ravel(depth)[0]) if depth is not None else None)
    ctx.set(0, ctx.dtype(2), dims)


@rule("Compress")
def compress(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    axis = ctx.attr("axis")
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
    elif axis is None:
        ctx.set(0, ctx.dtype(0), (None,))
    else:
        dims = list(s)
        dims[_axis(axis, len(s))] = None
        ctx.set(0, ctx.dtype(0), dims)


@rule("Unique")
def unique(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    axis = ctx.attr("axis")
    if axis is None or s is None:
        ctx.set(0, ctx.dtype(0), (None,))
    else:
        dims = list(s)
        dims[_axis(axis, len(s))] = None
        ctx.set(0, ctx.dtype(0), dims)
    for i in (1, 2, 3):
        ctx.set(i, DataType.INT64, (None,))


@rule("EyeLike")
def eye_like(ctx: NodeContext) -> None:
    dt = ctx.attr("dtype")
    ctx.set(0, DataType(dt) if dt is not None else ctx.dtype(0), ctx.shape(0))
