"""Elementwise operators: same-shape unary ops, broadcasting binary/variadic ops, comparisons."""

from __future__ import annotations

import numpy as np

from ..ir import DataType
from . import symbolic as sym
from .engine import Data, InferenceError, NodeContext, cheap, data_fold, rule

# Output 0 has the type and shape of input 0.
SAME_AS_INPUT = """
Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor Log Neg Reciprocal Round Sigmoid
Sign Sin Sinh Sqrt Tan Tanh Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish Softplus Softsign
ThresholdedRelu Mish Gelu Shrink Swish Softmax LogSoftmax Hardmax Clip Not BitwiseNot Identity
LRN MeanVarianceNormalization InstanceNormalization LpNormalization CumSum Trilu ReverseSequence
ScatterElements ScatterND Scatter BatchNormalization GroupNormalization RMSNormalization
Binarizer
""".split()

BROADCAST_SAME_TYPE = """
Add Sub Mul Div Pow Mod BitShift BitwiseAnd BitwiseOr BitwiseXor Max Min Sum Mean
""".split()

BROADCAST_BOOL = "And Or Xor Equal Less Greater LessOrEqual GreaterOrEqual".split()

BOOL_SAME_SHAPE = "IsNaN IsInf".split()


def broadcast(shapes: list, ctx: NodeContext) -> tuple | None:
    """Multidirectional (numpy) broadcasting of shapes with symbolic dims: a 1 takes the other
    dim, equal dims (``seq + past`` and ``past + seq`` alike) merge, anything else is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        ints = {d for d in dims if isinstance(d, int)}
        big = ints - {1}
        if len(big) > 1:
            raise InferenceError(f"shapes {shapes} cannot broadcast")
        if big:
            out.append(big.pop())
            continue
        rest = [d for d in dims if d != 1]
        if not rest:
            out.append(1)
        elif all(sym.same(d, rest[0]) for d in rest[1:]):
            out.append(sym.canonical(rest[0]))  # N with 1s, or N with N
        else:
            out.append(_larger(rest))
    return tuple(out)


def _larger(dims: list):
    """Differing symbolic dims broadcast only where all but one are 1 at run time, so the result
    is the largest (``seq`` with ``Min(64, seq)``: seq); unknown unless one provably is."""
    if None in dims:
        return None
    top = sym.dmax(*dims)
    return top if any(sym.same(top, d) for d in dims) else None


@rule(*SAME_AS_INPUT)
@cheap  # (its output type is its input's: a memo key costs more)
def same_as_input(ctx: NodeContext) -> None:
    ctx.same(0, 0)
    op = ctx.node.op_type
    if op == "Identity":
        ctx.set_data(0, ctx.raw(0))
    elif op in _UNARY_DIMS and ctx.value(0) is None:
        d = ctx.data(0)
        if d is not None:
            ctx.set_data(0, Data([_UNARY_DIMS[op](x) for x in d.dims], d.scalar))
    if ctx.node.op_type == "BatchNormalization":
        # training mode: the extra outputs (running / saved statistics) are per channel
        for i in range(1, len(ctx.node.outputs)):
            ctx.set(i, ctx.dtype(3) or ctx.dtype(0), ctx.shape(1))


_UNARY_DIMS = {
    "Neg": lambda d: sym.sub(0, d),
    "Abs": lambda d: d if sym.nonnegative(d) else None,
}


@rule("Dropout")
def dropout(ctx: NodeContext) -> None:
    ctx.same(0, 0)
    if len(ctx.node.outputs) > 1:
        # the mask is bool from opset 10; before, it has the data's type T
        ctx.set(1, DataType.BOOL if ctx.opset >= 10 else ctx.dtype(0), ctx.shape(0))


@rule(*BOOL_SAME_SHAPE)
def bool_same_shape(ctx: NodeContext) -> None:
    ctx.set(0, DataType.BOOL, ctx.shape(0))


@rule(*BROADCAST_SAME_TYPE)
def broadcast_same_type(ctx: NodeContext) -> None:
    n = ctx.n_inputs
    dtype = next((ctx.dtype(i) for i in range(n) if ctx.dtype(i)), None)
    ctx.set(0, dtype, broadcast([ctx.shape(i) for i in range(n) if ctx.has(i)], ctx))
    _propagate_arith(ctx)


@rule(*BROADCAST_BOOL)
def broadcast_bool(ctx: NodeContext) -> None:
    ctx.set(0, DataType.BOOL, broadcast([ctx.shape(0), ctx.shape(1)], ctx))


@rule("Where")
def where(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(1) or ctx.dtype(2), broadcast([ctx.shape(i) for i in range(3)], ctx))


_ARITH = {
    "Add": sym.add,
    "Sub": sym.sub,
    "Mul": sym.mul,
    # (ONNX's integer Div truncates; dims are >= 0, where that is floor division)
    "Div": sym.floordiv,
    "Mod": sym.mod,
    "Max": sym.dmax,
    "Min": sym.dmin,
}


def _propagate_arith(ctx: NodeContext) -> None:
    """Shape arithmetic on propagated dims: ``Shape(x)[1] * 2 + past`` stays an expression."""
    op = ctx.node.op_type
    if op not in _ARITH or ctx.n_inputs != 2:
        return
    a, b = ctx.data(0), ctx.data(1)
    if a is None or b is None:
        return
    if len(a.dims) != len(b.dims):
        if len(a.dims) == 1:
            a = Data(a.dims * len(b.dims), a.scalar)
        elif len(b.dims) == 1:
            b = Data(b.dims * len(a.dims), b.scalar)
        else:
            return
    if a.known() and b.known():
        return  # (numbers: the constant fold below computes them with numpy's semantics)
    if op == "Mod" and ctx.attr("fmod", 0):
        return
    fn = _ARITH[op]
    ctx.set_data(0, Data([fn(x, y) for x, y in zip(a.dims, b.dims)], a.scalar and b.scalar))


# -- constant folding of small integer/bool tensors (shape arithmetic) --------------------------

FOLD = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Max": np.maximum,
    "Min": np.minimum,
    "Neg": np.negative,
    "Abs": np.abs,
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
    "Not": np.logical_not,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "Where": np.where,
}


@data_fold(ops=(*FOLD, "Div", "Mod"))
def fold(ctx: NodeContext) -> None:
    """Compute small integer/bool results when every input is known (no rule needed)."""
    op = ctx.node.op_type
    if 0 in ctx.out_data or (op not in FOLD and op not in ("Div", "Mod")):
        return
    args = [ctx.value(i) for i in range(ctx.n_inputs)]
    if not args or any(a is None or a.dtype.kind not in "iub" for a in args):
        if op == "Where" and args and args[0] is not None:
            _where_dims(ctx, args[0])
        elif op == "Equal":
            _equal_dims(ctx)
        return
    if op == "Div":
        out = np.trunc(args[0] / np.where(args[1] == 0, 1, args[1])).astype(args[0].dtype)
    elif op == "Mod":
        fmod = ctx.attr("fmod", 0)
        out = np.fmod(*args) if fmod else np.mod(args[0], np.where(args[1] == 0, 1, args[1]))
    else:
        out = FOLD[op](*args)
    if op in ("Add", "Sub", "Mul", "Max", "Min", "Neg", "Abs"):
        out = out.astype(args[0].dtype)
    ctx.set_data(0, np.asarray(out))


def _equal_dims(ctx: NodeContext) -> None:
    """Equal on symbolic dims where each pair is decidable: ``Equal(shape, -1)`` of a Reshape
    or Expand target (exporters write Where(Equal(s, -1), 1, s)) is all False for dims."""
    a, b = ctx.data(0), ctx.data(1)
    if a is None or b is None:
        return
    n = max(len(a.dims), len(b.dims))
    if min(len(a.dims), len(b.dims)) not in (1, n):
        return
    pick = lambda d, k: d.dims[k if len(d.dims) > 1 else 0]  # noqa: E731
    out = [sym.equal(pick(a, k), pick(b, k)) for k in range(n)]
    if None not in out:
        shape = () if a.scalar and b.scalar else (n,)
        ctx.set_data(0, np.array(out, dtype=bool).reshape(shape))


def _where_dims(ctx: NodeContext, cond) -> None:
    x, y = ctx.data(1), ctx.data(2)
    if x is None or y is None or cond.ndim > 1:
        return
    n = max(len(x.dims), len(y.dims), cond.size)
    pick = lambda d, k: d.dims[k if len(d.dims) > 1 else 0]  # noqa: E731
    c = np.broadcast_to(cond.reshape(-1), (n,))
    ctx.set_data(
        0, Data([pick(x, k) if c[k] else pick(y, k) for k in range(n)], x.scalar and y.scalar)
    )
