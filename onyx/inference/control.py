"""Control flow (If, Loop, Scan), sequences, optionals and a few typed-by-attribute ops."""

from __future__ import annotations

from ..ir import DataType, OptionalType, SequenceType, TensorType
from .engine import InferenceError, NodeContext, rule


def _unify(a, b):
    """The common part of two branch types: same element type, dims kept where they agree."""
    if a is None or b is None:
        return a or b
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.shape is None or b.shape is None or a.shape.rank != b.shape.rank:
            return TensorType(a.elem_type or b.elem_type)
        dims = [x if x == y else None for x, y in zip(a.shape.dims, b.shape.dims)]
        return TensorType(a.elem_type or b.elem_type, tuple(dims))
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        return SequenceType(_unify(a.elem, b.elem))
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return OptionalType(_unify(a.elem, b.elem))
    return a


@rule("If")
def if_(ctx: NodeContext) -> None:
    then_t = ctx.engine.infer_subgraph(ctx, ctx.attr("then_branch"), [])
    else_t = ctx.engine.infer_subgraph(ctx, ctx.attr("else_branch"), [])
    cond = ctx.value(0)
    for i in range(len(ctx.node.outputs)):
        a = then_t[i] if i < len(then_t) else None
        b = else_t[i] if i < len(else_t) else None
        if cond is not None:  # a constant condition picks one branch
            ctx.set_type(i, a if bool(cond.reshape(-1)[0]) else b)
        else:
            ctx.set_type(i, _unify(a, b))


def _strip_shape(t):
    return (
        TensorType(t.elem_type, (None,) * t.shape.rank if t.shape is not None else None)
        if (isinstance(t, TensorType))
        else t
    )


@rule("Loop")
def loop(ctx: NodeContext) -> None:
    body = ctx.attr("body")
    n_carried = ctx.n_inputs - 2
    carried = [ctx.type(i + 2) for i in range(n_carried)]
    inputs = [TensorType(DataType.INT64, ()), TensorType(DataType.BOOL, ()), *carried]
    outs = ctx.engine.infer_subgraph(ctx, body, inputs)
    for i in range(n_carried):
        t = outs[i + 1] if i + 1 < len(outs) else None
        # a carried value may change shape between iterations: keep what input and body agree on
        c = carried[i]
        if t is None or c is None or type(t) is not type(c):
            ctx.set_type(i, t if t is not None else c)
        else:
            ctx.set_type(i, _unify(c, t))
    for k, t in enumerate(outs[1 + n_carried :]):
        i = n_carried + k
        if isinstance(t, TensorType):
            dims = None if t.shape is None else (None, *t.shape.dims)
            ctx.set(i, t.elem_type, dims)
        elif t is not None:
            ctx.set_type(i, SequenceType(t))


def _drop_first(t):
    if isinstance(t, TensorType) and t.shape is not None and t.shape.rank:
        return TensorType(t.elem_type, t.shape.dims[1:])
    return t


@rule("Scan")
def scan(ctx: NodeContext) -> None:
    body = ctx.attr("body")
    n_scan = ctx.attr("num_scan_inputs")
    first = 1 if ctx.opset < 9 else 0  # Scan-8 has a sequence_lens input
    n_state = ctx.n_inputs - first - n_scan
    if not 0 < n_scan <= ctx.n_inputs - first:
        raise InferenceError(f"num_scan_inputs {n_scan} out of 1..{ctx.n_inputs - first}")
    in_axes = ctx.attr("scan_input_axes") or [0] * n_scan
    state = [ctx.type(first + i) for i in range(n_state)]
    if first:  # Scan-8: state variables carry the batch dim outside the body only
        state = [_drop_first(t) for t in state]
    per_iter = []
    seq_len = None
    for k in range(n_scan):
        i = first + n_state + k
        t = ctx.type(i)
        if isinstance(t, TensorType) and t.shape is not None:
            dims = list(t.shape.dims)
            axis = (in_axes[k] + len(dims)) if in_axes[k] < 0 else in_axes[k]
            if first:  # Scan-8: a batch dim first, scanning over dim 1
                axis = 1
            seq_len = seq_len if seq_len is not None else dims[axis]
            del dims[axis]
            if first:
                del dims[0]
            per_iter.append(TensorType(t.elem_type, tuple(dims)))
        else:
            per_iter.append(t)
    outs = ctx.engine.infer_subgraph(ctx, body, state + per_iter)
    for i in range(n_state):
        if first:
            ctx.same(i, first + i)
        else:
            ctx.set_type(i, outs[i] if i < len(outs) else state[i])
    out_axes = ctx.attr("scan_output_axes") or []
    for k, t in enumerate(outs[n_state:]):
        if not isinstance(t, TensorType) or t.shape is None:
            continue
        dims = list(t.shape.dims)
        axis = out_axes[k] if k < len(out_axes) else 0
        r = len(dims) + 1
        axis = axis + r if axis < 0 else axis
        if first:
            batch = ctx.shape(first + n_state)
            dims = [batch[0] if batch else None, seq_len, *dims]
        else:
            dims.insert(axis, seq_len)
        ctx.set(n_state + k, t.elem_type, dims)


# -- sequences ----------------------------------------------------------------------------------


def _seq_elem(ctx: NodeContext, i: int):
    t = ctx.type(i)
    return t.elem if isinstance(t, SequenceType) else None


@rule("SequenceConstruct")
def sequence_construct(ctx: NodeContext) -> None:
    elem = None
    for i in range(ctx.n_inputs):
        elem = _unify(elem, ctx.type(i)) if elem is not None else ctx.type(i)
    ctx.set_type(0, SequenceType(elem))


@rule("SequenceEmpty")
def sequence_empty(ctx: NodeContext) -> None:
    ctx.set_type(0, SequenceType(TensorType(DataType(ctx.attr("dtype", DataType.FLOAT)))))


@rule("SequenceAt")
def sequence_at(ctx: NodeContext) -> None:
    ctx.set_type(0, _seq_elem(ctx, 0))


@rule("SequenceInsert")
def sequence_insert(ctx: NodeContext) -> None:
    elem = _seq_elem(ctx, 0)
    ctx.set_type(0, SequenceType(_unify(elem, ctx.type(1)) if elem else ctx.type(1)))


@rule("SequenceErase")
def sequence_erase(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("SequenceLength")
def sequence_length(ctx: NodeContext) -> None:
    ctx.set(0, DataType.INT64, ())


@rule("SplitToSequence")
def split_to_sequence(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    dims = None
    if s is not None:
        axis = ctx.attr("axis", 0)
        axis = axis + len(s) if axis < 0 else axis
        keep = ctx.attr("keepdims", 1)
        dims = list(s)
        split = ctx.value(1) if ctx.has(1) else None
        if not ctx.has(1) and not keep:
            del dims[axis]
        elif split is not None and split.ndim == 0:
            dims[axis] = None
        else:
            dims[axis] = None
    ctx.set_type(0, SequenceType(TensorType(ctx.dtype(0), dims)))


@rule("ConcatFromSequence")
def concat_from_sequence(ctx: NodeContext) -> None:
    elem = _seq_elem(ctx, 0)
    if not isinstance(elem, TensorType):
        return
    if elem.shape is None:
        ctx.set(0, elem.elem_type, None)
        return
    dims = list(elem.shape.dims)
    axis = ctx.attr("axis")
    if ctx.attr("new_axis", 0):
        r = len(dims) + 1
        dims.insert(axis + r if axis < 0 else axis, None)
    else:
        dims[axis + len(dims) if axis < 0 else axis] = None
    ctx.set(0, elem.elem_type, dims)


@rule("Optional")
def optional(ctx: NodeContext) -> None:
    t = ctx.type(0) if ctx.has(0) else ctx.attr("type")
    ctx.set_type(0, OptionalType(t))


@rule("OptionalGetElement")
def optional_get_element(ctx: NodeContext) -> None:
    t = ctx.type(0)
    ctx.set_type(0, t.elem if isinstance(t, OptionalType) else t)


@rule("OptionalHasElement")
def optional_has_element(ctx: NodeContext) -> None:
    ctx.set(0, DataType.BOOL, ())


# -- types given by an attribute ------------------------------------------------------------------


@rule("RandomNormal", "RandomUniform")
def random(ctx: NodeContext) -> None:
    ctx.set(0, DataType(ctx.attr("dtype", 1)), ctx.attr("shape"))


@rule("RandomNormalLike", "RandomUniformLike")
def random_like(ctx: NodeContext) -> None:
    dt = ctx.attr("dtype")
    ctx.set(0, DataType(dt) if dt is not None else ctx.dtype(0), ctx.shape(0))


@rule("Multinomial")
def multinomial(ctx: NodeContext) -> None:
    s = ctx.shape(0)
    ctx.set(0, DataType(ctx.attr("dtype", 6)), (s[0] if s else None, ctx.attr("sample_size", 1)))


@rule("Bernoulli")
def bernoulli(ctx: NodeContext) -> None:
    dt = ctx.attr("dtype")
    ctx.set(0, DataType(dt) if dt is not None else ctx.dtype(0), ctx.shape(0))


@rule("QuantizeLinear")
def quantize_linear(ctx: NodeContext) -> None:
    dt = ctx.attr("output_dtype", 0)
    if ctx.has(2) and ctx.dtype(2):
        dtype = ctx.dtype(2)
    elif dt:
        dtype = DataType(dt)
    else:
        dtype = DataType.UINT8
    ctx.set(0, dtype, ctx.shape(0))


@rule("DequantizeLinear")
def dequantize_linear(ctx: NodeContext) -> None:
    dt = ctx.attr("output_dtype", 0)
    scale = ctx.dtype(1)
    if not dt and scale == DataType.FLOAT8E8M0:
        # (the output cannot be float8e8m0, which only scales: the spec does not say what it is
        # then; onyx's kernel, as it multiplies, gives float32)
        scale = DataType.FLOAT
    ctx.set(0, DataType(dt) if dt else scale or DataType.FLOAT, ctx.shape(0))


@rule("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext) -> None:
    ctx.set(0, DataType.UINT8, ctx.shape(0))
    ctx.set(1, DataType.FLOAT, ())
    ctx.set(2, DataType.UINT8, ())
