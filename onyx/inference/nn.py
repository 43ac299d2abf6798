"""Linear algebra, convolution, pooling, normalization and reductions."""

from __future__ import annotations

import numpy as np

from ..ir import DataType
from . import symbolic as sym
from .elementwise import broadcast
from .engine import InferenceError, NodeContext, rule


def _matmul_shape(a, b, ctx):
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise InferenceError("MatMul of a scalar")
    a1, b1 = len(a) == 1, len(b) == 1
    a = (1, *a) if a1 else a
    b = (*b, 1) if b1 else b
    if isinstance(a[-1], int) and isinstance(b[-2], int) and a[-1] != b[-2]:
        raise InferenceError(f"MatMul inner dims differ: {a} x {b}")
    batch = broadcast([a[:-2], b[:-2]], ctx)
    out = [*batch, a[-2], b[-1]]
    if a1:
        out.pop(-2)
    if b1:
        out.pop(-1)
    return out


@rule("MatMul")
def matmul(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(0), _matmul_shape(ctx.shape(0), ctx.shape(1), ctx))


@rule("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> None:
    ctx.set(0, DataType.INT32, _matmul_shape(ctx.shape(0), ctx.shape(1), ctx))


@rule("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(7), _matmul_shape(ctx.shape(0), ctx.shape(3), ctx))


@rule("Gemm")
def gemm(ctx: NodeContext) -> None:
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        ctx.set(0, ctx.dtype(0), (None, None))
        return
    m = a[1] if ctx.attr("transA", 0) else a[0]
    n = b[0] if ctx.attr("transB", 0) else b[1]
    ctx.set(0, ctx.dtype(0), (m, n))


def _spatial(ctx: NodeContext, x, kernel, *, transpose=False, ceil=False, out_channels=None):
    """Output dims of convolution / pooling from the input dims and kernel size (symbolic input
    dims give formulas: ``floor((h + 1)/2)`` for a 3x3 kernel at stride 2 with pads 1)."""
    n_sp = len(kernel)
    strides = ctx.attr("strides") or [1] * n_sp
    dil = ctx.attr("dilations") or [1] * n_sp
    pads = ctx.attr("pads") or [0] * (2 * n_sp)
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    out = []
    for k in range(n_sp):
        d = x[2 + k]
        if d is None or not isinstance(kernel[k], int):
            out.append(None)
            continue
        ek = (kernel[k] - 1) * dil[k] + 1
        st = strides[k]
        if transpose:
            shape = ctx.attr("output_shape")
            if shape:
                out.append(int(shape[-n_sp + k]))
                continue
            opad = (ctx.attr("output_padding") or [0] * n_sp)[k]
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                out.append(sym.mul(d, st))
            else:
                extra = opad + ek - pads[k] - pads[k + n_sp]
                out.append(sym.add(sym.mul(st, sym.sub(d, 1)), extra))
            continue
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(sym.ceildiv(d, st))
        elif auto_pad == "VALID":
            out.append(
                sym.add(sym.floordiv(sym.sub(d, ek), st), 1)
                if not ceil
                else sym.ceildiv(sym.sub(d, ek - 1), st)
            )
        elif isinstance(d, int):
            total = d + pads[k] + pads[k + n_sp] - ek
            if ceil:
                o = -(-total // st) + 1
                if (o - 1) * st >= d + pads[k]:
                    o -= 1  # the last window must start inside the input or left pad
            else:
                o = total // st + 1
            out.append(o)
        elif ceil and st > ek + pads[k] - pads[k + n_sp]:
            out.append(None)  # (the last-window correction may apply: it needs the number)
        else:
            total = sym.sub(sym.add(d, pads[k] + pads[k + n_sp]), ek)
            out.append(sym.add(sym.ceildiv(total, st) if ceil else sym.floordiv(total, st), 1))
    return out


@rule("Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "DeformConv")
def conv(ctx: NodeContext) -> None:
    op = ctx.node.op_type
    xi, wi = (0, 3) if op == "QLinearConv" else (0, 1)
    dtype = {
        "ConvInteger": DataType.INT32,
        "QLinearConv": ctx.dtype(7),
    }.get(op, ctx.dtype(0))
    x, w = ctx.shape(xi), ctx.shape(wi)
    if x is None:
        ctx.set(0, dtype, None if w is None else (None,) * len(w))
        return
    n_sp = len(x) - 2
    kernel = ctx.attr("kernel_shape") or (list(w[2:]) if w is not None else [None] * n_sp)
    group = ctx.attr("group", 1)
    if op == "ConvTranspose":
        channels = sym.mul(w[1], group) if w is not None else None
    else:
        channels = w[0] if w is not None else None
    out = _spatial(ctx, x, kernel, transpose=op == "ConvTranspose")
    ctx.set(0, dtype, [x[0], channels, *out])


@rule("MaxPool", "AveragePool", "LpPool", "MaxRoiPool_")
def pool(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    kernel = ctx.attr("kernel_shape")
    out = _spatial(ctx, x, kernel, ceil=bool(ctx.attr("ceil_mode", 0)))
    ctx.set(0, ctx.dtype(0), [x[0], x[1], *out])
    if len(ctx.node.outputs) > 1:
        ctx.set(1, DataType.INT64, [x[0], x[1], *out])


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), None if x is None else [x[0], x[1], *([1] * (len(x) - 2))])


@rule("LayerNormalization")
def layer_norm(ctx: NodeContext) -> None:
    ctx.same(0, 0)
    x = ctx.shape(0)
    stash = DataType(ctx.attr("stash_type", 1))
    if x is None:
        for i in (1, 2):
            ctx.set(i, stash, None)
        return
    axis = ctx.attr("axis", -1)
    axis = axis + len(x) if axis < 0 else axis
    stat = [*x[:axis], *([1] * (len(x) - axis))]
    for i in (1, 2):
        ctx.set(i, stash, stat)


# -- reductions -------------------------------------------------------------------------------

REDUCE = """ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceSumSquare""".split()

# the opset from which axes is an input rather than an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduced(ctx: NodeContext, x, axes, keep: bool):
    r = len(x)
    if axes is None:
        return None if not keep else [None] * r
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return list(x)
        axes = list(range(r))
    axes = {a + r if a < 0 else a for a in axes}
    if keep:
        return [1 if k in axes else d for k, d in enumerate(x)]
    return [d for k, d in enumerate(x) if k not in axes]


@rule(*REDUCE)
def reduce(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    keep = bool(ctx.attr("keepdims", 1))
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.node.op_type, 18):
        if ctx.has(1):
            v = ctx.value(1)
            axes = None if v is None else [int(a) for a in np.ravel(v)]
            if v is None and not keep:
                n = ctx.shape(1)
                rank = len(x) - n[0] if n and isinstance(n[0], int) else None
                ctx.set(0, ctx.dtype(0), None if rank is None else [None] * rank)
                return
        else:
            axes = []
    else:
        axes = ctx.attr("axes") or []
    ctx.set(0, ctx.dtype(0), _reduced(ctx, x, axes, keep))


@rule("ArgMax", "ArgMin")
def arg_reduce(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if x is None:
        ctx.set(0, DataType.INT64, None)
        return
    axis = ctx.attr("axis", 0)
    ctx.set(0, DataType.INT64, _reduced(ctx, x, [axis], bool(ctx.attr("keepdims", 1))))


@rule("Einsum")
def einsum(ctx: NodeContext) -> None:
    eq = ctx.attr("equation").replace(" ", "")
    dtype = ctx.dtype(0)
    if "->" not in eq:  # implicit output: letters used once, in alphabetical order
        letters_once = [c for c in sorted(set(eq)) if c.isalpha() and eq.count(c) == 1]
        eq = eq + "->" + ("..." if "..." in eq else "") + "".join(letters_once)
    lhs, rhs = eq.split("->")
    letters: dict[str, object] = {}
    ell = None
    for term, i in zip(lhs.split(","), range(ctx.n_inputs)):
        s = ctx.shape(i)
        if s is None:
            ctx.set(0, dtype, None if "..." in rhs else [None] * len(rhs))
            return
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(s) - len(head) - len(tail)
            e = tuple(s[len(head) : len(head) + n_ell])
            ell = e if ell is None or len(e) > len(ell) else ell
            dims = list(s[: len(head)]) + list(s[len(s) - len(tail) :])
            term = head + tail
        else:
            dims = list(s)
        for c, d in zip(term, dims):
            prev = letters.get(c)
            if prev is None or prev == 1:
                letters[c] = d
    out = []
    for part in rhs.split("..."):
        out.append([letters.get(c) for c in part])
    dims = out[0] + (list(ell or []) + out[1] if len(out) > 1 else [])
    ctx.set(0, dtype, dims)


@rule("SwiGLU")
def swiglu(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(0), broadcast([ctx.shape(0), ctx.shape(1)], ctx))


@rule("CastMap", domain="ai.onnx.ml")
def cast_map(ctx: NodeContext) -> None:
    to = ctx.attr("cast_to", "TO_FLOAT")
    dtype = {"TO_FLOAT": DataType.FLOAT, "TO_STRING": DataType.STRING}.get(to, DataType.INT64)
    n = ctx.attr("max_map", 1) if ctx.attr("map_form", "DENSE") == "SPARSE" else None
    ctx.set(0, dtype, (1, n))
