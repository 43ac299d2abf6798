"""Elementwise chains on a byte tensor -> one table lookup (ai.onyx TableLookup).

Quantized models compute many functions of one 8-bit tensor element by element. The QOperator
MobileNet's hard-swish is DequantizeLinear -> HardSigmoid -> QuantizeLinear -> QLinearMul(x,
that), four passes over the tensor; a quantized BERT's GELU is seven nodes reading one uint8
tensor (DequantizeLinear, Div, Erf, QuantizeLinear, QLinearAdd, two QLinearMul). Whatever such
a chain computes, it computes for each of the 256 values a byte can take. This pass runs the
chain's own kernels once on those 256 values and replaces the chain by a lookup in the table:
one pass over the bytes, 64 per instruction on AVX512-VBMI (native.lookup8).

The lookup gives the graph's result to the bit: the table comes from the kernels the session
would run, on a probe of 16 copies of the 256 values (so kernels that switch paths on size take
their large-tensor path), and a chain whose copies disagree is left as written. A chain may
read only the byte tensor, its own results and constants holding one value (of rank no higher
than the tensor's, so nothing broadcasts); every op in it is elementwise (its kernel declares the `elementwise` trait). Its
last value may be of any fixed-size type (8-bit, float, bool). Chains of one node stay.

The lookup is a model-local function of onyx's domain, ``ai.onyx.TableLookup(x, table)``, whose
body is Cast(x, int32) -> Gather(table): the saved model stays valid ONNX that other runtimes run
(an int8's negative values index the table from its end, as Gather does: the table is in the
bytes' bit-pattern order). onyx runs its kernel for it (kernels/fused.py).
"""

from __future__ import annotations

import heapq

import numpy as np

from .. import ir
from ..ir.dtypes import DataType
from ..runtime.registry import ONYX_DOMAIN, traits
from .core import EXTENDED, MS, STANDARD, PassContext, graph_pass, static_shape
from .fold import evaluate

PASS = "LookupTableFusion"

#: Copies of the 256 byte values the chain runs on.
PROBE_COPIES = 16
BYTE_TYPES = {DataType.UINT8: np.uint8, DataType.INT8: np.int8}


@graph_pass(PASS, EXTENDED)
def lookup_table_fusion(ctx: PassContext) -> bool:
    order = list(ctx.graph)
    position = {id(n): i for i, n in enumerate(order)}
    found = []  # (root, exit value, table): all found first, then the graph changes
    for root, byte in _byte_values(ctx, order):
        nodes = _chain_nodes(ctx, root, position)
        members = {id(n) for n in nodes}
        for out in _exits(ctx, nodes, members):
            chain = _ancestors(out, members, position)
            if len(chain) < 2:
                continue
            table = _tabulate(ctx, root, byte, out, chain)
            if table is not None:
                found.append((root, out, table))
    replaced = set()
    for root, out, table in found:
        if id(out) in replaced or out.producer is None:
            continue
        _replace(ctx, root, out, table)
        replaced.add(id(out))
    return bool(replaced)


def _byte_values(ctx: PassContext, order: list[ir.Node]):
    """The graph's 8-bit integer tensors (inputs and node outputs) that nodes read, with
    their numpy types."""
    values = list(ctx.graph.inputs) + [v for n in order for v in n.outputs]
    for v in values:
        byte = _byte_type(ctx, v) if v.has_uses() else None
        if byte is not None:
            yield v, byte


#: Ops whose input i must have the type of its zero point, input i + 2 (DequantizeLinear's x;
#: the QLinear binary ops' a and b).
_ZERO_POINT_AFTER = {("", "DequantizeLinear"): (0,), (MS, "QLinearAdd"): (0, 3),
                     (MS, "QLinearMul"): (0, 3)}  # fmt: skip


def _byte_type(ctx: PassContext, v: ir.Value):
    """v's type when it is int8 or uint8: the inferred one, or (where inference knows no rule
    for the producer, com.microsoft's QLinear ops) the type of a reader's zero point for it."""
    t = v.type
    if isinstance(t, ir.TensorType) and t.elem_type is not None:
        return BYTE_TYPES.get(t.elem_type)
    for node, i in v.iter_uses():
        domain = "" if node.domain in STANDARD else node.domain
        if i in _ZERO_POINT_AFTER.get((domain, node.op_type), ()) and len(node.inputs) > i + 2:
            zp = ctx.const(node.inputs[i + 2])
            if zp is not None:
                return zp.dtype.type if zp.dtype in (np.uint8, np.int8) else None
    return None


def _chain_nodes(ctx: PassContext, root: ir.Value, position: dict) -> list[ir.Node]:
    """The nodes computing elementwise functions of root alone (and constants), in graph
    order."""
    shape = static_shape(root)
    rank = len(shape) if shape is not None else 0
    inside = {id(root)}
    members: list[ir.Node] = []
    heap = [(position[id(n)], id(n), n) for n, _ in root.iter_uses() if id(n) in position]
    heapq.heapify(heap)
    seen = set()
    while heap:  # in graph order: a node's producers inside the chain come first
        _, key, node = heapq.heappop(heap)
        if key in seen:
            continue
        seen.add(key)
        if not _takes(ctx, node, inside, rank):
            continue
        members.append(node)
        for v in node.outputs:
            inside.add(id(v))
            for user, _ in v.iter_uses():
                if id(user) in position:
                    heapq.heappush(heap, (position[id(user)], id(user), user))
    return members


def _takes(ctx: PassContext, node: ir.Node, inside: set[int], rank: int) -> bool:
    if not traits(node.op_type, node.domain).elementwise or len(node.outputs) != 1:
        return False
    for v in node.inputs:
        if v is None or not v.name or id(v) in inside:
            continue
        c = ctx.const(v)
        if c is None or c.size != 1 or c.ndim > rank:
            return False
    return True


def _exits(ctx: PassContext, nodes: list[ir.Node], members: set[int]) -> list[ir.Value]:
    """The chain's values read outside it (or graph outputs), in graph order."""
    return [v for n in nodes for v in n.outputs
            if ctx.is_output(v) or any(id(user) not in members for user, _ in v.iter_uses())]  # fmt: skip


def _ancestors(out: ir.Value, members: set[int], position: dict) -> list[ir.Node]:
    """The chain's nodes ``out`` depends on, in graph order."""
    found, stack = {}, [out.producer]
    while stack:
        node = stack.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        stack += [v.producer for v in node.inputs
                  if v is not None and v.producer is not None and id(v.producer) in members]  # fmt: skip
    return sorted(found.values(), key=lambda n: position[id(n)])


def _tabulate(ctx: PassContext, root: ir.Value, byte, out: ir.Value, chain: list[ir.Node]):
    """out as a function of root's 256 values (in bit-pattern order), or None."""
    values = np.arange(256, dtype=np.uint8).view(byte)
    known = {id(root): np.tile(values, PROBE_COPIES)}
    for node in chain:
        result = evaluate(ctx, node, known)
        if result is None:
            return None
        known[id(node.outputs[0])] = np.asarray(result[0])
    y = known[id(out)]
    if (
        y.size != 256 * PROBE_COPIES
        or y.dtype.kind in "OSU"
        or y.dtype.itemsize not in (1, 2, 4, 8)
    ):
        return None
    copies = np.ascontiguousarray(y).reshape(PROBE_COPIES, 256)
    as_bytes = copies.view(np.uint8)
    if not (as_bytes == as_bytes[0]).all():  # a kernel that is not elementwise after all
        return None
    return copies[0].copy()


def _replace(ctx: PassContext, root: ir.Value, out: ir.Value, table: np.ndarray) -> None:
    _ensure_function(ctx)
    t = ctx.add_const(table, out.name + "_table")
    name = ctx.fresh_name((out.producer.name or out.name) + "_lookup")
    node = ir.Node("TableLookup", [root, t], 1, domain=ONYX_DOMAIN, name=name)
    ctx.replace_nodes(out.producer, node)  # the chain's other nodes go as dead code
    ctx.count(PASS)


def _ensure_function(ctx: PassContext) -> None:
    """The model-local function TableLookup(x, table) = Gather(table, Cast(x, int32))."""
    m = ctx.model
    ctx.ensure_opset(ONYX_DOMAIN, 1)
    if (ONYX_DOMAIN, "TableLookup", "") in m.functions:
        return
    x, table = ir.Value("x"), ir.Value("table")
    cast = ir.Node("Cast", [x], ["index"], {"to": int(DataType.INT32)})
    gather = ir.Node("Gather", [table, cast.outputs[0]], ["y"], {"axis": 0})
    body = ir.Graph([x, table], [gather.outputs[0]], [cast, gather], name="TableLookup")
    f = ir.Function(ONYX_DOMAIN, "TableLookup", body, opset_imports={"": ctx.opset("") or 13})
    f.doc_string = "y = table[x] for a byte tensor x (int8 by bit pattern: -1 reads table[255])"
    m.functions[f.key] = f
