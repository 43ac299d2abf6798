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
        # (whether a node computes an input: evaluate's first test, made here, inline: most
        # nodes of every round stop here)
        for v in node._inputs:  # noqa: SLF001
            if v is not None and v.producer is not None and v.name:
                break
        else:
            v = None
        if v is not None:
            continue
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


#: The op types each of ShapeFolding's folds starts at (a Gather or Slice it folds reads a
#: Shape): a graph with none of them gives it nothing to fold. (The pass has no trigger in
#: pipeline.TRIGGERS: its first run infers the types the passes after it read, whatever the
#: graph holds.)
SHAPE_ROOTS = frozenset(("Shape", "Size", "Reshape"))
#: The op types of the nodes ShapeFolding folds (its walk visits these alone).
_SHAPE_FOLDED = frozenset(("Shape", "Size", "Gather", "Slice", "Reshape"))


@graph_pass("ShapeFolding", BASIC)
def shape_folding(ctx: PassContext) -> bool:
    """Fold what static dims decide: Shape/Size of known dims, Gather/Slice of a Shape picking
    known dims; a Reshape target Concat(known..., one 1-element unknown, known...) becomes a
    constant with -1 there (Reshape then computes exactly that dim)."""
    if not ctx.inferred:
        ctx.infer()  # once: later rounds only add constants, the shapes stay right
    if ctx.op_types().isdisjoint(SHAPE_ROOTS):
        return False  # (every fold below starts at one: most rounds of a CNN's walk found none)
    changed = False
    for node in ctx.nodes_of(_SHAPE_FOLDED):
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
