"""Removing what does nothing: no-op nodes, dead nodes, unused initializers, duplicates."""

from __future__ import annotations

import math

import numpy as np

from .. import ir
from ..ir.dtypes import DataType
from ..runtime.registry import traits
from .core import BASIC, STANDARD, PassContext, graph_pass, same_dims, static_shape


def _bypass(ctx: PassContext, node: ir.Node, source: ir.Value | None) -> bool:
    """Readers of the node's first output read ``source`` instead."""
    if source is None or not ctx.replace_value(node.outputs[0], source):
        return False
    ctx.count(node.op_type + "Elimination")
    return True


@graph_pass("EliminateIdentity", BASIC)
def eliminate_identity(ctx: PassContext) -> bool:
    changed = False
    for node in ctx.nodes_of("Identity"):
        if node.op_type == "Identity" and node.domain in STANDARD:
            changed |= _bypass(ctx, node, node.inputs[0])
    return changed


@graph_pass("EliminateDropout", BASIC)
def eliminate_dropout(ctx: PassContext) -> bool:
    """Dropout is the identity at inference, unless training_mode is set or the mask is read."""
    changed = False
    for node in ctx.nodes_of("Dropout"):
        if node.op_type != "Dropout" or node.domain not in STANDARD:
            continue
        outs = node.outputs
        if len(outs) > 1 and (outs[1].has_uses() or ctx.is_output(outs[1])):
            continue
        ins = node.inputs
        training = ins[2] if len(ins) > 2 else None
        if training is not None and training.name and ctx.scalar(training) != 0:
            continue
        if ctx.opset() < 7 and not node.attr("is_test", 0):
            continue  # old Dropout without is_test drops (onnxruntime ignores it; we stay exact)
        changed |= _bypass(ctx, node, ins[0])
    return changed


def _is_noop(ctx: PassContext, node: ir.Node, symbols: set) -> bool:
    op = node.op_type
    ins = node._inputs  # noqa: SLF001 (asked of every candidate every round: no copy)
    x = ins[0] if ins else None
    if x is None:
        return False
    if op == "Cast":
        if not isinstance(x.type, ir.TensorType):
            return False
        to = node.attr("to")
        want = _DATA_TYPES.get(to) if type(to) is int else None  # (no enum call per Cast)
        return x.type.elem_type == (DataType(to) if want is None else want)
    if op == "CastLike":
        t = node.inputs[1].type if len(node.inputs) > 1 and node.inputs[1] else None
        return (
            isinstance(x.type, ir.TensorType)
            and isinstance(t, ir.TensorType)
            and (x.type.elem_type == t.elem_type)
        )
    if op == "Transpose":
        perm = node.attr("perm")
        return perm is not None and list(perm) == list(range(len(perm)))
    if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand"):
        # same shape in and out: dims known, or symbols of the graph inputs (the same dim)
        a, b = static_shape(x), static_shape(node.outputs[0])
        ok = same_dims(a, b) and all(isinstance(d, int) or d in symbols for d in a)
        return ok and isinstance(x.type, ir.TensorType)
    if op == "Concat" or op == "Sum" or op == "Max" or op == "Min" or op == "Mean":
        return len(node.inputs) == 1
    if op in ("Slice", "Pad"):
        return False
    return False


#: Each DataType by its number.
_DATA_TYPES = {int(t): t for t in DataType}

#: The ops _is_noop may find to do nothing.
_NOOP_OPS = frozenset(
    ("Cast", "CastLike", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand")
    + ("Concat", "Sum", "Max", "Min", "Mean")
)


@graph_pass("NoopElimination", BASIC)
def eliminate_noops(ctx: PassContext) -> bool:
    """Cast to the same type, Reshape/Squeeze/... to the same shape, identity Transpose,
    single-input Concat/Sum/Max/Min/Mean."""
    symbols = set()
    for v in ctx.graph.inputs:
        for d in static_shape(v) or ():
            if isinstance(d, str):
                symbols.add(d)
    changed = False
    for node in ctx.nodes_of(_NOOP_OPS):
        if node.domain in STANDARD and len(node.outputs) == 1 and _is_noop(ctx, node, symbols):
            changed |= _bypass(ctx, node, node.inputs[0])
    return changed


@graph_pass("DeadCodeElimination", BASIC)
def dead_code(ctx: PassContext) -> bool:
    g = ctx.graph
    ctx.swept = ctx.version  # (every node dead now is gone when this run ends)
    outputs = {id(v) for v in g.outputs}
    changed = False
    for node in reversed(g._nodes):  # noqa: SLF001 (removing makes a new order list)
        # (no output read nor a graph output; asked of every node every round: a loop
        # here, not a call, a generator and two property reads per output)
        for v in node._outputs:  # noqa: SLF001
            if v._uses or id(v) in outputs:  # noqa: SLF001
                break
        else:
            g.remove(node, safe=False)
            ctx.count("DeadCodeElimination")
            changed = True
    return changed


@graph_pass("UnusedInitializerElimination", BASIC)
def unused_initializers(ctx: PassContext) -> bool:
    g = ctx.graph
    # (unread ones first, the graph's inputs and outputs asked of those alone: most are read)
    unused = [k for k, v in g.initializers.items() if not v._uses]  # noqa: SLF001
    if unused:
        keep = {id(v) for v in g.inputs} | {id(v) for v in g.outputs}
        unused = [k for k in unused if id(g.initializers[k]) not in keep]
    for k in unused:
        del g.initializers[k]
    if unused:
        names = set(unused)  # (a list here made the walk quadratic: hundreds of each)
        dropped = {id(v) for v in g.value_info if v.name in names and v.producer is None}
        g.value_info = [v for v in g.value_info if id(v) not in dropped]
        ctx.count("UnusedInitializerElimination", len(unused))
    return bool(unused)


# ------------------------------------------------------------------- common subexpressions

#: Constants up to this many elements are compared by content and merged.
SMALL_CONST = 1024


def _attr_key(a: ir.Attr):
    v = a.value
    # floats by their bits: -0.0 == 0.0 and nan != nan, but a node with either is not the
    # other's twin (Pad's value, Clip's bounds), and two NaN attributes are the same
    if a.type == ir.AttrType.FLOATS:  # (a tree ensemble's lists: many thousand numbers)
        v = np.asarray(v, np.float64).tobytes()
    elif isinstance(v, list):
        v = tuple(id(x) for x in v) if a.type == ir.AttrType.TENSORS else tuple(v)
    elif isinstance(v, ir.Tensor):
        v = ("tensor", id(v))
    elif isinstance(v, float):
        v = v.hex()
    return (a.name, int(a.type), a.ref_attr_name, v)


def _attrs_key(node: ir.Node) -> tuple | None:
    """The node's attributes as a hashable key (None when one is not hashable)."""
    try:
        attrs = tuple(sorted(_attr_key(a) for a in node.attributes.values()))
        hash(attrs)
    except TypeError:
        return None
    return attrs


class _Twins:
    """The nodes with the same op and inputs seen so far, by attributes. The attributes of a
    node without a twin are never keyed: a tree ensemble's hold many thousand numbers."""

    def __init__(self, node: ir.Node):
        self._lone: ir.Node | None = node
        self._by_attrs: dict[tuple, ir.Node] = {}

    def first_like(self, node: ir.Node) -> ir.Node | None:
        """The first node seen with node's attributes (node itself when none; None when they
        are not hashable)."""
        if self._lone is not None:
            lone_attrs = _attrs_key(self._lone)
            if lone_attrs is not None:
                self._by_attrs[lone_attrs] = self._lone
            self._lone = None
        attrs = _attrs_key(node)
        return None if attrs is None else self._by_attrs.setdefault(attrs, node)


def _const_key(ctx: PassContext, v: ir.Value) -> tuple | None:
    """A small constant's content as a hashable key (None for others), kept per tensor: the
    pass runs every round and most of a quantized model's initializers are small."""
    t = v.const_value
    if t is None or math.prod(t.shape) > SMALL_CONST:
        return None  # (a weight: not read, nor its data decoded, to be found too big)
    c = ctx.const(v)
    if c is None or c.size > SMALL_CONST:
        return None
    arrays = _memo_table(ctx, "cse-arrays")
    known = arrays.get(id(c))
    if known is not None and known[0] is c:
        return known[1]
    key = None if c.dtype.hasobject else (c.dtype.str, c.shape, np.ascontiguousarray(c).tobytes())
    arrays[id(c)] = (c, key)
    return key


def _memo_table(ctx: PassContext, name: str) -> dict:
    """A table of the pass's own in ``ctx.memo`` (one per optimization, kept between its
    runs): its entries are looked up by an id, without a tuple made and hashed for each."""
    table = ctx.memo.get(name)
    if table is None:
        table = ctx.memo[name] = {}
    return table


#: What _const_keys keeps of a Value whose tensor is too large for a key (it stays so: the
#: tensor is part of the entry).
_TOO_LARGE = ("too large",)


def _const_keys(ctx: PassContext, g: ir.Graph, inputs: set[int]) -> list[tuple]:
    """(initializer, _const_key of it) of each of ``g``'s initializers, each kept per Value and
    its tensor (the pass runs every round over the same initializers; those too large for a
    key, a model's weights, are known as such by their tensor alone). ``inputs``: ids of the
    graph inputs that ctx.const does not take as constants (IR >= 4)."""
    keyed = _memo_table(ctx, "cse-values")
    found = []
    for v in list(g.initializers.values()):
        t = v.const_value
        known = keyed.get(id(v))
        if known is not None and known[0] is v and known[1] is t:
            key = known[2]
            if key is _TOO_LARGE:
                continue
            # (what ctx.const asks of the Value itself; its tensor is the one keyed)
            if v.producer is not None or id(v) in inputs or g.initializers.get(v.name) is not v:
                continue
        elif t is not None and math.prod(t.shape) > SMALL_CONST:
            keyed[id(v)] = (v, t, _TOO_LARGE)  # (the size of its tensor, which the entry holds)
            continue
        else:
            key = _const_key(ctx, v)
            if key is None:
                continue
            if t is not None:
                keyed[id(v)] = (v, t, key)
        found.append((v, key))
    return found


def _has_subgraph(node: ir.Node) -> bool:
    for a in node.attributes.values():  # (a loop: a generator made per node cost more)
        if a.type in _GRAPH_ATTRS:
            return True
    return False


_GRAPH_ATTRS = (ir.AttrType.GRAPH, ir.AttrType.GRAPHS)


@graph_pass("CommonSubexpressionElimination", BASIC)
def common_subexpressions(ctx: PassContext) -> bool:
    """Merge equal small constants, then nodes with the same op, inputs and attributes."""
    g = ctx.graph
    changed = False
    seen_consts: dict[tuple, ir.Value] = {}
    retyped = False  # (a reader of a merged constant now reads another declared type)
    outputs = {id(v) for v in g.outputs}
    inputs = {id(v) for v in g.inputs} if ctx.model.ir_version >= 4 else set()
    for v, key in _const_keys(ctx, g, inputs):
        if id(v) in outputs:
            continue
        first = seen_consts.setdefault(key, v)
        # (an unread duplicate, as an old model's initializer that is also an input, stays:
        # merging nothing is no change, else the rounds would never settle)
        if first is not v and v.has_uses():
            v.replace_all_uses_with(first)
            ctx.count("CommonSubexpressionElimination")
            changed = True
            retyped |= first.type != v.type
    if changed and not retyped:
        ctx.change_tag = CONSTANTS_MERGED  # (unless nodes are merged too: below)
    # (a node alone with its key is kept as it is: _Twins made for the second only)
    seen: dict[tuple, ir.Node | _Twins] = {}
    deterministic: dict[tuple[str, str], bool] = {}  # (per op: the pass runs every round)
    subgraphs = ctx.holds_subgraphs  # (False: no node has a subgraph to look for)
    for node in g:
        if subgraphs and node.attributes and _has_subgraph(node):
            continue
        # (flat, from the node's own lists: an absent input's id is None's, no Value's; the
        # input count is the key's length less four)
        key = (node.op_type, node.domain, node.overload, len(node._outputs), *map(id, node._inputs))  # noqa: SLF001
        twins = seen.get(key)
        if twins is None:
            seen[key] = node
            continue
        if type(twins) is not _Twins:
            twins = seen[key] = _Twins(twins)
        # (asked only of an op with a twin: the traits load its kernel module, which an op
        # fused away never needs)
        op = (node.op_type, node.domain)
        known = deterministic.get(op)
        if known is None:
            known = deterministic[op] = traits(node.op_type, node.domain).deterministic
        if not known:
            continue
        first = twins.first_like(node)
        if first is None or first is node:
            continue
        if all(not v.name or not ctx.is_output(v) for v in node.outputs):
            tag = None  # (the twin is dead now: DeadCodeElimination takes it)
            for a, b in zip(node.outputs, first.outputs):
                if a.name and b.name:
                    a.replace_all_uses_with(b)
                elif a.name and a.has_uses():
                    tag = TWIN_KEPT  # (still read: every run takes it again)
                    break
            ctx.change_tag = tag if ctx.change_tag != TWIN_KEPT else TWIN_KEPT
            ctx.count("CommonSubexpressionElimination")
            changed = True
    return changed


#: CommonSubexpressionElimination's change tags (pipeline.QUIET) besides its name: it merged
#: constants only, each into one of the same declared type; it merged a twin node that is
#: still read after (an output without a name in its first twin).
CONSTANTS_MERGED = "CommonSubexpressionElimination:constants"
TWIN_KEPT = "CommonSubexpressionElimination:twin-kept"
