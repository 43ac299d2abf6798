"""Shape manipulation: Shape, Reshape, Transpose, Concat, Split, Slice, Gather, Squeeze, ...

These also propagate data (shape arithmetic) so that computed shapes reach Reshape/Expand.
"""

from __future__ import annotations

import numpy as np

from ..ir import DataType
from ..ir.dtypes import to_numpy
from . import symbolic as sym
from .engine import Data, InferenceError, NodeContext, cheap, data_fold, rule


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise InferenceError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@rule("Constant")
@cheap  # (a key holds the value's bytes, which the rule only hands on)
def constant(ctx: NodeContext) -> None:
    for name in (
        "value",
        "value_float",
        "value_floats",
        "value_int",
        "value_ints",
        "value_string",
        "value_strings",
        "sparse_value",
    ):
        a = ctx.node.attributes.get(name)
        if a is None or a.ref_attr_name:  # (is_ref, without a property call)
            continue
        v = a.value
        if name == "value":
            arr = v.numpy()
            ctx.set(0, v.dtype, v.shape)
        elif name == "sparse_value":
            values = getattr(v, "values", None)
            ctx.set(0, getattr(values, "dtype", None), tuple(getattr(v, "dims", ())))
            return
        else:
            dtype = {"float": np.float32, "int": np.int64, "string": object}[
                name.split("_")[1].rstrip("s")
            ]
            arr = np.array(v, dtype=dtype)
            ctx.set(
                0,
                {np.float32: DataType.FLOAT, np.int64: DataType.INT64, object: DataType.STRING}[
                    dtype
                ],
                arr.shape,
            )
        if arr.size <= 4096:
            ctx.set_data(0, arr)
        return


@rule("Shape")
def shape(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if s is None:
        ctx.set(0, DataType.INT64, (None,))
        return
    r = len(s)
    start = ctx.attr("start", 0) or 0
    end = ctx.attr("end", None)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else min(max(end + r if end < 0 else end, 0), r)
    dims = list(s[start:end]) if end > start else []
    ctx.set(0, DataType.INT64, (len(dims),))
    ctx.set_data(0, Data(dims))


@rule("Size")
def size(ctx: NodeContext) -> None:
    ctx.set(0, DataType.INT64, ())
    s = ctx.shape(0)
    n = None if s is None else sym.prod(s)
    if n is not None:
        ctx.set_data(0, Data([n], scalar=True))


@rule("Cast")
def cast(ctx: NodeContext) -> None:
    to = DataType(ctx.attr("to"))
    ctx.set(0, to, ctx.shape(0))
    d = ctx.data(0)
    if d is not None and to in (DataType.INT64, DataType.INT32):
        ctx.set_data(0, d)


@rule("CastLike")
def cast_like(ctx: NodeContext) -> None:
    ctx.set(0, ctx.dtype(1), ctx.shape(0))


@rule("Reshape")
def reshape(ctx: NodeContext) -> None:
    dtype = ctx.dtype(0)
    target = ctx.data(1)
    if target is None:
        r = ctx.shape(1)
        ctx.set(0, dtype, (None,) * r[0] if r and isinstance(r[0], int) else None)
        return
    allowzero = ctx.attr("allowzero", 0)
    src = ctx.shape(0)
    dims = list(target.dims)
    for k, d in enumerate(dims):
        if d == 0 and not allowzero:
            dims[k] = src[k] if src is not None and k < len(src) else None
    if -1 in dims:
        k = dims.index(-1)
        rest = [d for j, d in enumerate(dims) if j != k]
        # (a valid Reshape divides exactly: the quotient of the two products)
        dims[k] = sym.floordiv(sym.prod(src), sym.prod(rest)) if src is not None else None
    ctx.set(0, dtype, dims)
    _propagate_identity(ctx)


def _propagate_identity(ctx: NodeContext) -> None:
    d = ctx.data(0)
    if d is not None and ctx.node.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
        out = ctx.outputs.get(0)
        if out is not None and out.shape is not None and out.shape.rank <= 1:
            ctx.set_data(0, Data(list(d.dims), out.shape.rank == 0))


@rule("Transpose")
def transpose(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    perm = ctx.attr("perm")
    if s is None:
        ctx.set(0, ctx.dtype(0), None if perm is None else (None,) * len(perm))
        return
    perm = list(reversed(range(len(s)))) if not perm else perm
    if sorted(perm) != list(range(len(s))):
        raise InferenceError(f"perm {perm} does not permute rank {len(s)}")
    ctx.set(0, ctx.dtype(0), [s[p] for p in perm])


@rule("Concat")
def concat(ctx: NodeContext) -> None:
    shapes = [ctx.shape(i) for i in range(ctx.n_inputs) if ctx.has(i)]
    dtype = next((ctx.dtype(i) for i in range(ctx.n_inputs) if ctx.dtype(i)), None)
    known = [s for s in shapes if s is not None]
    if not known:
        ctx.set(0, dtype, None)
        return
    r = len(known[0])
    axis = _axis(ctx.attr("axis"), r)
    out = []
    for k in range(r):
        col = [s[k] if s is not None else None for s in shapes]
        if k == axis:
            out.append(sym.total(col))
        else:
            ints = {d for d in col if isinstance(d, int)}
            if len(ints) > 1:
                raise InferenceError(f"concat inputs disagree on dim {k}: {shapes}")
            out.append(ints.pop() if ints else sym.canonical(next((d for d in col if d), None)))
    ctx.set(0, dtype, out)
    datas = [ctx.data(i) for i in range(ctx.n_inputs) if ctx.has(i)]
    if r == 1 and all(d is not None for d in datas):
        ctx.set_data(0, Data([x for d in datas for x in d.dims]))


@rule("Split")
def split(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    n = len(ctx.node.outputs)
    if s is None:
        for i in range(n):
            ctx.set(i, ctx.dtype(0), None)
        return
    axis = _axis(ctx.attr("axis", 0), len(s))
    if ctx.has(1):
        d = ctx.data(1)
        sizes = None if d is None else d.dims
    else:
        sizes = ctx.attr("split")
    if sizes is None and not ctx.has(1):
        sizes = _equal_split(s[axis], ctx.attr("num_outputs", None), n)
    for i in range(n):
        dims = list(s)
        size = sizes[i] if sizes is not None and i < len(sizes) else None
        dims[axis] = None if isinstance(size, int) and size < 0 else size
        ctx.set(i, ctx.dtype(0), dims)
    data = ctx.data(0)
    if data is not None and len(s) == 1 and sizes is not None and len(sizes) >= n:
        if all(isinstance(k, int | np.integer) and k >= 0 for k in sizes[:n]):
            start = 0
            for i in range(n):  # (the pieces of a shape: Split(Shape(x)) -> batch, rest)
                ctx.set_data(i, Data(data.dims[start : start + int(sizes[i])]))
                start += int(sizes[i])


def _equal_split(total, num_outputs, n: int) -> list:
    """Split without sizes: equal parts; from opset 18 (num_outputs) the last may be smaller."""
    if num_outputs is None:  # (the parts must be equal: the division is exact)
        return [sym.floordiv(total, n)] * n
    chunk = sym.ceildiv(total, num_outputs)
    if isinstance(total, int):
        chunk = max(chunk, 1)
        sizes = [chunk] * (total // chunk) + ([total % chunk] if total % chunk else [])
        if len(sizes) == n:
            return sizes
    return [chunk] * (n - 1) + [sym.sub(total, sym.mul(chunk, n - 1))]


_UNKNOWN = "_onyx_unknown_"  # (stands for an unknown length in a slice's arithmetic)
_BIG = 2**31 - 1  # (exporters write INT_MAX or INT64_MAX for "to the end")


def _slice_dim(d, start, end, step: int):
    """The length of d[start:end:step]; symbolic bounds as onnxruntime's tool takes them: a
    symbolic end beyond a symbolic dim is not assumed, a negative index counts from the end."""
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(d)))
    if start is None or end is None:
        return None
    if d is None:  # x[-1:] has length 1 whatever x's length: the unknown may cancel out
        out = _slice_dim(_UNKNOWN, start, end, step)
        return None if _UNKNOWN in sym.symbols_of(out) else out
    # (as onnxruntime's tool, a symbolic slice is taken to be in bounds: no Max(0, ...))
    if step > 0:
        lo, hi = _clamp(start, d, 0), _clamp(end, d, 0)
        return _nonnegative(sym.ceildiv(sym.sub(hi, lo), step))
    lo, hi = _clamp(end, d, -1), _clamp(start, d, -1)
    return _nonnegative(sym.ceildiv(sym.sub(hi, lo), -step))


def _nonnegative(d):
    return max(d, 0) if isinstance(d, int) else d


def _clamp(index, d, low: int):
    """A slice bound normalized into [low, d] (negative: from the end; huge: the end)."""
    if isinstance(index, int):
        if index >= _BIG:
            return d if low == 0 else sym.sub(d, 1)
        if index <= -_BIG:
            return low
        if index < 0:
            index = sym.add(d, index)
            return index if not isinstance(index, int) else max(index, low)
        if isinstance(d, int):
            return min(index, d if low == 0 else d - 1)
        return index if index <= 1 else sym.dmin(index, d)
    if sym.nonpositive(index):  # (-seq, a negated dim: counts from the end)
        return sym.add(d, index)
    return sym.dmin(index, d)


@rule("Slice")
def slice_(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = _dims_of(ctx, 1), _dims_of(ctx, 2)
        axes = ctx.value(3) if ctx.has(3) else None
        steps = ctx.value(4) if ctx.has(4) else None
    if s is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    r = len(s)
    if (
        starts is None
        or ends is None
        or (ctx.has(3) and axes is None)
        or (ctx.has(4) and steps is None)
    ):
        ctx.set(0, ctx.dtype(0), (None,) * r)
        return
    axes = list(range(len(starts))) if axes is None else [_axis(int(a), r) for a in np.ravel(axes)]
    steps = [1] * len(starts) if steps is None else [int(x) for x in np.ravel(steps)]
    dims = list(s)
    for a, b, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise InferenceError("slice step is 0")
        dims[a] = _slice_dim(s[a], b, e, st)
    ctx.set(0, ctx.dtype(0), dims)
    d = ctx.data(0)
    if d is not None and r == 1 and len(axes) == 1:
        b, e = starts[0], ends[0]
        if isinstance(b, int) and isinstance(e, int):
            ctx.set_data(0, Data(d.dims[slice(b, e, steps[0])]))


def _dims_of(ctx: NodeContext, i: int):
    """A 1-D integer input's entries (ints or symbolic dims), or None."""
    d = ctx.data(i)
    if d is None or any(x is None for x in d.dims):
        return None
    return [int(x) if isinstance(x, np.integer) else x for x in d.dims]


@rule("Gather")
def gather(ctx: NodeContext) -> None:
    s, idx = ctx.shape(0), ctx.shape(1)
    if s is None or idx is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    axis = _axis(ctx.attr("axis", 0), len(s))
    ctx.set(0, ctx.dtype(0), list(s[:axis]) + list(idx) + list(s[axis + 1 :]))
    d, i = ctx.data(0), ctx.value(1)
    if d is not None and i is not None and len(s) == 1:
        n = len(d.dims)
        picked = [d.dims[int(k) + n if k < 0 else int(k)] for k in np.ravel(i)]
        ctx.set_data(0, Data(picked, i.ndim == 0))


def _axes(ctx: NodeContext, i: int = 1):
    if ctx.opset >= 13 or ctx.node.op_type in ("ReduceSum",):
        if ctx.has(i):
            v = ctx.value(i)
            return None if v is None else [int(x) for x in np.ravel(v)], True
        return [], False
    return ctx.attr("axes") or [], False


@rule("Squeeze")
def squeeze(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    axes, _ = _axes(ctx)
    if s is None or axes is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    r = len(s)
    if axes:
        drop = {_axis(a, r) for a in axes}
    else:
        if any(not isinstance(d, int) for d in s):
            ctx.set(0, ctx.dtype(0), None)
            return
        drop = {k for k, d in enumerate(s) if d == 1}
    ctx.set(0, ctx.dtype(0), [d for k, d in enumerate(s) if k not in drop])
    d = ctx.data(0)
    if d is not None:
        ctx.set_data(0, Data(list(d.dims), scalar=r - len(drop) == 0))


@rule("Unsqueeze")
def unsqueeze(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    axes, _ = _axes(ctx)
    if s is None or axes is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    r = len(s) + len(axes)
    put = sorted(_axis(a, r) for a in axes)
    dims, it = [], iter(s)
    for k in range(r):
        dims.append(1 if k in put else next(it))
    ctx.set(0, ctx.dtype(0), dims)
    d = ctx.data(0)
    if d is not None and r == 1:
        ctx.set_data(0, Data(list(d.dims)))


@rule("Flatten")
def flatten(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    if s is None:
        ctx.set(0, ctx.dtype(0), (None, None))
        return
    axis = ctx.attr("axis", 1)
    axis = axis + len(s) if axis < 0 else axis
    ctx.set(0, ctx.dtype(0), (sym.prod(s[:axis]), sym.prod(s[axis:])))


@rule("Expand")
def expand(ctx: NodeContext) -> None:
    from .elementwise import broadcast

    target = ctx.data(1)
    if target is None:
        n = ctx.shape(1)
        ctx.set(0, ctx.dtype(0), None)
        if n and isinstance(n[0], int) and ctx.shape(0) is not None:
            s = ctx.shape(0)
            r = max(n[0], len(s))
            # input dims > 1 survive broadcasting (the target dim is 1 or equal there)
            kept = [None] * (r - len(s)) + [d if isinstance(d, int) and d > 1 else None for d in s]
            ctx.set(0, ctx.dtype(0), kept)
        return
    s = ctx.shape(0)
    dims = [None if d is None or (isinstance(d, int) and d < 0) else d for d in target.dims]
    # a target dim of 1 keeps the input's dim; symbols follow broadcasting
    ctx.set(0, ctx.dtype(0), broadcast([s, tuple(dims)], ctx) if s is not None else dims)


@rule("ConstantOfShape")
def constant_of_shape(ctx: NodeContext) -> None:
    v = ctx.attr("value")
    dtype = DataType.FLOAT if v is None else _dtype_of(v)
    target = ctx.data(0)
    if target is not None:
        ctx.set(0, dtype, [None if isinstance(d, int) and d < 0 else d for d in target.dims])
        if target.known() and len(target.dims) <= 1 and int(np.prod(target.dims)) <= 64:
            fill = 0 if v is None else np.ravel(v)[0]
            ctx.set_data(0, np.full(target.dims, fill, dtype=to_numpy(dtype)))
    else:
        s = ctx.shape(0)
        ctx.set(0, dtype, (None,) * s[0] if s and isinstance(s[0], int) else None)


def _dtype_of(arr) -> DataType:
    from ..ir.dtypes import from_numpy

    return from_numpy(np.asarray(arr).dtype)


@rule("Range")
def range_(ctx: NodeContext) -> None:
    dtype = ctx.dtype(0)
    vals = [ctx.value(i) for i in range(3)]
    if all(v is not None for v in vals):
        start, limit, delta = (np.ravel(v)[0].item() for v in vals)
        n = max(int(np.ceil((limit - start) / delta)), 0) if delta else 0
        ctx.set(0, dtype, (n,))
        return
    # integer bounds that are dims: Max(ceiling((limit - start)/delta), 0)
    start, limit, delta = (_scalar_dim(ctx, i) for i in range(3))
    n = None
    if isinstance(delta, int) and delta != 0:
        n = sym.dmax(sym.ceildiv(sym.sub(limit, start), delta), 0)
    ctx.set(0, dtype, (n,))


def _scalar_dim(ctx: NodeContext, i: int):
    d = ctx.data(i)
    return d.dims[0] if d is not None and len(d.dims) == 1 else None


# -- small constant tensors through shape ops (a pads tensor built by Reshape/Slice/Transpose) ----

_FOLD_LIMIT = 4096


def _fold_reshape(ctx: NodeContext, x, shape):
    dims = [int(d) for d in shape]
    if not ctx.attr("allowzero", 0):
        dims = [x.shape[k] if d == 0 and k < x.ndim else d for k, d in enumerate(dims)]
    return x.reshape(dims)


def _fold_slice(ctx: NodeContext, x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else [int(a) % x.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, b, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(int(b), int(e), int(st))  # (Python clamps bounds as ONNX does)
    return x[tuple(index)]


def _fold_axes(ctx: NodeContext, x, axes=None):
    if axes is None:
        axes = ctx.attr("axes")
    return [int(a) for a in np.ravel(axes)] if axes is not None else None


def _fold_squeeze(ctx: NodeContext, x, axes=None):
    axes = _fold_axes(ctx, x, axes)
    return np.squeeze(x, tuple(a % x.ndim for a in axes)) if axes else np.squeeze(x)


def _fold_unsqueeze(ctx: NodeContext, x, axes=None):
    r = x.ndim + len(_fold_axes(ctx, x, axes))
    return x.reshape(
        [1 if k in {a % r for a in _fold_axes(ctx, x, axes)} else -1 for k in range(r)]
    )


_FOLDS = {
    "Reshape": _fold_reshape,
    "Transpose": lambda ctx, x: np.transpose(x, ctx.attr("perm") or None),
    "Slice": _fold_slice,
    "Squeeze": _fold_squeeze,
    "Unsqueeze": _fold_unsqueeze,
    "Concat": lambda ctx, *xs: np.concatenate(xs, axis=ctx.attr("axis")),
    "Gather": lambda ctx, x, i: np.take(x, i, axis=ctx.attr("axis", 0)),
    "Tile": lambda ctx, x, reps: np.tile(x, [int(r) for r in reps]),
    "Expand": lambda ctx, x, shape: x * np.ones([int(d) for d in shape], x.dtype),
    "Flatten": lambda ctx, x: x.reshape(int(np.prod(x.shape[: ctx.attr("axis", 1)])), -1),
}


@data_fold(ops=_FOLDS)
def fold_shape_ops(ctx: NodeContext) -> None:
    """Compute a shape op on small known integer tensors (any rank; rules cover 1-D data)."""
    op = ctx.node.op_type
    if op not in _FOLDS or ctx.node.domain not in ("", "ai.onnx") or ctx.opset < 13:
        return  # (before 13 some of these took attributes for what became inputs)
    if isinstance(ctx.out_data.get(0), np.ndarray):
        return
    first = ctx.value(0)
    if first is None or first.dtype.kind not in "iub":
        return
    args = [first] + [ctx.value(i) if ctx.has(i) else None for i in range(1, ctx.n_inputs)]
    if any(a is None and ctx.has(i) for i, a in enumerate(args)) or args[0].size > _FOLD_LIMIT:
        return
    try:
        out = np.asarray(_FOLDS[op](ctx, *args))
    except (ValueError, IndexError, TypeError):
        return  # (a malformed node: the rule reports what it finds)
    if out.size <= _FOLD_LIMIT:
        ctx.set_data(0, out)
