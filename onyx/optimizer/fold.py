"""Constant folding: run the kernels on nodes whose inputs are all constants, and fold the
shape arithmetic that shape inference can evaluate (Shape -> Gather -> Concat -> Reshape)."""

from __future__ import annotations

import threading
import warnings

import numpy as np

from .. import ir
from ..errors import OnyxError
from ..ir.dtypes import DataType, to_numpy
from ..ir.tensor import wire_size
from ..runtime.bind import bind
from ..runtime.registry import traits
from .core import BASIC, STANDARD, PassContext, graph_pass, is_op, static_shape

#: (module constants: reading ``DataType.X`` goes through the enum class's ``__getattr__`` hook
#: (Python 3.11's EnumType defines one), and folding asks every constant it makes)
_STRING, _TENSOR = DataType.STRING, ir.AttrType.TENSOR

#: A folded result bigger than this that also outgrows its inputs 4x stays a computation
#: (ConstantOfShape / Expand / Tile would otherwise bloat the model file), except in a
#: session's model (PassContext.unbounded_folding): weights a model generates with
#: ConstantOfShape (onnx's light models) were otherwise made again on every run, and kept
#: BatchNormalization out of its conv.
MAX_GROWN_BYTES = 1 << 20


def _local_function(ctx: PassContext, node: ir.Node) -> bool:
    """The model defines a local function of node's domain and op type (it, not the op, is
    what runs)."""
    functions = ctx.model.functions
    key = (ir.canonical_domain(node.domain), node.op_type)
    return bool(functions) and any((f.domain, f.name) == key for f in functions.values())


def evaluate(ctx: PassContext, node: ir.Node, known: dict | None = None) -> tuple | None:
    """The node's outputs when it can be folded, else None. ``known``: id(value) -> array,
    values taken as given besides the constants."""
    with _Silenced() as silenced:
        return _evaluate(ctx, node, known, silenced)


class _Silenced:
    """Warnings ignored and numpy's floating-point errors too (a kernel run on constants that
    warns or fails does so again at run time, where the session reports it), from the first
    :meth:`enter` to the scope's end: constant folding keeps one scope for a whole run, not
    one per node it evaluates (each cost some 5 us, a tenth of a transformer's folding)."""

    def __init__(self):
        self._errors: np.errstate | None = None

    def enter(self) -> None:
        if self._errors is None:
            self._errors = np.errstate(all="ignore")  # (numpy's: per thread)
            self._errors.__enter__()
            _ignore_warnings(+1)

    def __enter__(self) -> _Silenced:
        return self

    def __exit__(self, *exc) -> None:
        if self._errors is not None:
            errors, self._errors = self._errors, None
            errors.__exit__(None, None, None)
            _ignore_warnings(-1)


#: The warning filters are one list for the process: scopes on several threads (sessions
#: created at once) overlap, not nest; each restoring the list it found left another's
#: "ignore" in place for good. One shared scope instead: the first to enter installs it,
#: the last to leave restores the filters.
_IGNORING = threading.Lock()
_ignoring: list = [0, None]  # (scopes open, the catch_warnings installed)


def _ignore_warnings(step: int) -> None:
    with _IGNORING:
        if step > 0 and not _ignoring[0]:
            caught = warnings.catch_warnings()
            caught.__enter__()
            warnings.simplefilter("ignore")
            _ignoring[1] = caught
        _ignoring[0] += step
        if step < 0 and not _ignoring[0]:
            caught, _ignoring[1] = _ignoring[1], None
            caught.__exit__(None, None, None)


def _evaluate(ctx: PassContext, node: ir.Node, known: dict | None, silenced: _Silenced):
    """evaluate, the kernel run in ``silenced``'s scope (entered here if it is not yet)."""
    args = _constant_inputs(ctx, node, known)  # first: most nodes fail here, and fast
    if args is None or node.has_subgraphs():
        return None
    # (after: the traits load the op's kernel module, which an op fused away never needs)
    if not traits(node.op_type, node.domain).deterministic:
        return None
    if _local_function(ctx, node):
        return None
    if node.attributes_have_refs():
        return None
    try:  # an attribute the kernel does not take: the session reports it, not the optimizer
        step = bind(node, ctx.model.opset_imports)
    except OnyxError:
        return None
    silenced.enter()
    try:
        result = step.call(args)
    except Exception:  # fails at run time too: the session will say why
        return None
    for v, r in zip(node.outputs, result):
        if not v.name:
            continue
        if not isinstance(r, np.ndarray | np.generic):
            return None  # sequences, maps, optionals are not initializers
        if (
            r.nbytes > MAX_GROWN_BYTES
            and not ctx.unbounded_folding
            and r.nbytes > 4 * _nbytes(args)
        ):
            return None
    return result


def _nbytes(args: list) -> int:
    return sum(a.nbytes for a in args if isinstance(a, np.ndarray))


def _constant_inputs(ctx: PassContext, node: ir.Node, known: dict | None) -> list | None:
    """The node's inputs as arrays (None for an absent optional one), or None when one of them
    is not a constant."""
    args = []
    for v in node.inputs:
        if v is None or not v.name:
            args.append(None)
            continue
        c = known.get(id(v)) if known else None
        if c is None:
            if v.producer is not None:
                return None
            c = ctx.const(v)
            if c is None:
                return None
        args.append(c)
    return args


def _computed_input(node: ir.Node) -> bool:
    """Whether an input of the node is made by a node (then it cannot be folded now)."""
    for v in node._inputs:  # noqa: SLF001 (asked of every node every round: no copy)
        if v is not None and v.producer is not None and v.name:
            return True
    return False


def _make_constant(ctx: PassContext, v: ir.Value, array) -> None:
    """Turn node output ``v`` into an initializer holding ``array`` (same Value, same name)."""
    arr = np.asarray(array)
    if v.type is not None and isinstance(v.type, ir.TensorType):
        want = to_numpy(v.type.elem_type)
        if arr.dtype != want and v.type.elem_type != _STRING:
            arr = arr.astype(want)
    v.producer, v.index = None, None
    v.const_value = ir.Tensor(arr, name=v.name)
    if v.type is None:
        v.type = ir.TensorType(ir.from_numpy(arr.dtype), arr.shape)
    ctx.graph.add_initializer(v)


def _held_tensor(ctx: PassContext, node: ir.Node) -> ir.Tensor | None:
    """The tensor a standard Constant node holds in its one attribute, ``value``, when folding
    it needs no kernel: its data in memory or in the file's bytes, of its output's declared
    type (a model's Constants are most of the nodes folded; the kernel copied each tensor)."""
    if node.op_type != "Constant" or node.domain not in STANDARD or len(node.attributes) != 1:
        return None
    a = node.attributes.get("value")
    if a is None or a.is_ref or a.type != _TENSOR or a.value is None:
        return None
    t, out = a.value, node.outputs[0]
    if not out.name or not (t.has_raw_bytes() or t.is_loaded()) or t.dtype == _STRING:
        return None
    if out.type is not None and getattr(out.type, "elem_type", None) != t.dtype:
        return None
    if not ctx.unbounded_folding and wire_size(t.dtype, t.shape) > MAX_GROWN_BYTES:
        return None  # (as evaluate's rule, which a Constant, reading nothing, grows past)
    if _local_function(ctx, node):
        return None  # (a local function of that name: evaluate leaves it too)
    return t


def _make_held_constant(ctx: PassContext, v: ir.Value, t: ir.Tensor) -> None:
    """Turn Constant output ``v`` into an initializer holding ``t``'s data (same Value)."""
    if t.has_raw_bytes():
        held = ir.Tensor.from_raw(t.raw_bytes(), t.dtype, t.shape, name=v.name)
    else:
        held = ir.Tensor(t.numpy(), name=v.name, dtype=t.dtype)
    v.producer, v.index = None, None
    v.const_value = held
    if v.type is None:
        v.type = ir.TensorType(t.dtype, t.shape)
    ctx.graph.add_initializer(v)


#: qdq.reads_quantized, once a DequantizeLinear first asks for it.
_READS_QUANTIZED: list = [None]


def _reads_quantized(ctx: PassContext, dq: ir.Node) -> bool:
    reads_quantized = _READS_QUANTIZED[0]
    if reads_quantized is None:  # (a big module: imported for models with a DQ only, once)
        from .qdq import reads_quantized

        _READS_QUANTIZED[0] = reads_quantized
    return reads_quantized(ctx, dq)


@graph_pass("ConstantFolding", BASIC)
def constant_folding(ctx: PassContext) -> bool:
    with _Silenced() as silenced:
        return _fold_constants(ctx, silenced)


def _fold_constants(ctx: PassContext, silenced: _Silenced) -> bool:
    g = ctx.graph
    changed = False
    for node in g:
        held = _held_tensor(ctx, node) if node.op_type == "Constant" else None
        if held is not None:  # a Constant: its tensor as it is, without running the kernel
            out = node.outputs[0]
            g.remove(node, safe=False)
            _make_held_constant(ctx, out, held)
            ctx.count("ConstantFolding")
            changed = True
            continue
        if _computed_input(node):
            continue  # (evaluate's first test, made here: most nodes of every round stop here)
        if is_op(node, "DequantizeLinear") and _reads_quantized(ctx, node):
            continue  # a QDQ unit's quantized weight: the QDQ fusion takes it as it is
        result = _evaluate(ctx, node, None, silenced)
        if result is None:
            continue
        outputs = node.outputs
        g.remove(node, safe=False)
        for v, r in zip(outputs, result):
            if v.name:
                _make_constant(ctx, v, r)
        ctx.count("ConstantFolding")
        changed = True
    return changed


@graph_pass("ShapeFolding", BASIC)
def shape_folding(ctx: PassContext) -> bool:
    """Fold what static dims decide: Shape/Size of known dims, Gather/Slice of a Shape picking
    known dims; a Reshape target Concat(known..., one 1-element unknown, known...) becomes a
    constant with -1 there (Reshape then computes exactly that dim)."""
    if not ctx.inferred:
        ctx.infer()  # once: later rounds only add constants, the shapes stay right
    changed = False
    for node in ctx.graph:
        if node.domain not in STANDARD:
            continue
        dims = None
        if node.op_type == "Shape":
            dims = _shape_dims(node)
        elif node.op_type == "Size":
            shape = static_shape(node.inputs[0])
            if shape is not None and all(type(d) is int for d in shape):
                dims = int(np.prod(shape, dtype=np.int64))
        elif node.op_type in ("Gather", "Slice"):
            dims = _picked_dims(ctx, node)
        elif node.op_type == "Reshape" and len(node.inputs) > 1:
            changed |= _reshape_target(ctx, node)
        # (a graph output keeps its producer: replace_value would refuse the constant)
        if dims is None or ctx.is_output(node.outputs[0]) or not _fits_int64(dims):
            continue
        new = ctx.add_const(np.array(dims, dtype=np.int64), node.outputs[0].name + "_folded")
        if ctx.replace_value(node.outputs[0], new):
            ctx.count("ShapeFolding")
            changed = True
    return changed


def _fits_int64(dims) -> bool:
    """Whether inferred dims fit a shape tensor (huge declared dims can make them overflow)."""
    if isinstance(dims, np.ndarray):
        return True  # (already int64)
    values = dims if isinstance(dims, list) else [dims]
    return all(-(2**63) <= d < 2**63 for d in values)


def _shape_dims(node: ir.Node) -> list | None:
    shape = static_shape(node.inputs[0])
    if shape is None:
        return None
    # Python's slice clamps negative and out-of-range bounds exactly as Shape-15 does
    dims = list(shape[node.attr("start", 0) : node.attr("end", len(shape))])
    return dims if all(type(d) is int for d in dims) else None


def _picked_dims(ctx: PassContext, node: ir.Node) -> np.ndarray | None:
    """Gather/Slice of Shape(x), possibly through other Gathers/Slices of it (onnxruntime's
    transpose optimizer writes Shape(Transpose(x)) as Gather(Shape(x), perm)): run the ops
    on the dim positions, then look the dims up."""
    chain = [node]
    while is_op(chain[-1].inputs[0].producer, "Gather", "Slice"):
        chain.append(chain[-1].inputs[0].producer)
    shape_node = chain[-1].inputs[0].producer
    if not is_op(shape_node, "Shape"):
        return None
    shape = static_shape(shape_node.inputs[0])
    if shape is None:
        return None
    full = list(range(len(shape)))
    positions = np.array(full[shape_node.attr("start", 0) : shape_node.attr("end", len(shape))])
    picked = positions.astype(np.int64)
    for link in reversed(chain):
        picked = _run_on_positions(ctx, link, picked)
        if picked is None:
            return None
    dims = [shape[int(p)] for p in picked.reshape(-1)]
    if not all(type(d) is int for d in dims):
        return None
    return np.array(dims, dtype=np.int64).reshape(picked.shape)


def _run_on_positions(ctx: PassContext, node: ir.Node, positions: np.ndarray):
    """node (a Gather or Slice with constant parameters) run on dim positions, else None."""
    args = [positions]
    for v in node.inputs[1:]:
        c = ctx.const(v) if v is not None and v.name else None
        if c is None and v is not None and v.name:
            return None
        args.append(c)
    try:
        return np.asarray(bind(node, ctx.model.opset_imports).call(args)[0])
    except Exception:  # (OnyxError included: a node the session will report)
        return None


def _reshape_target(ctx: PassContext, node: ir.Node) -> bool:
    target = node.inputs[1]
    concat = target.producer
    if not is_op(concat, "Concat") or node.attr("allowzero", 0) or ctx.const(target) is not None:
        return False
    pieces, unknown = [], 0
    for v in concat.inputs:
        c = ctx.const(v)
        if c is not None:
            if c.ndim != 1 or np.any(c <= 0):
                return False  # a -1 or a 0 (copy) already: leave it
            pieces.append(c.astype(np.int64))
            continue
        shape = static_shape(v)
        if shape != (1,):
            return False
        unknown += 1
        pieces.append(np.array([-1], dtype=np.int64))
    if unknown != 1:
        return False
    node.set_input(1, ctx.add_const(np.concatenate(pieces), target.name + "_folded"))
    ctx.count("ShapeFolding")
    return True


# ------------------------------------------------------------------- quantized data movement

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
        if is_op(move, "Where") and move.graph is not None:
            changed |= _quantize_before_where(ctx, move)
            continue
        if not is_op(move, *_MOVEMENT, "Pad") or move.graph is None or not move.inputs:
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
