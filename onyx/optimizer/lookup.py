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
last value may be of any fixed-size type (8-bit, float, bool). Chains of one node stay, but for
com.microsoft QLinearLeakyRelu and QLinearSigmoid (three passes in numpy, one as a lookup).

The lookup is a model-local function of onyx's domain, ``ai.onyx.TableLookup(x, table)``, whose
body is Cast(x, int32) -> Gather(table): the saved model stays valid ONNX that other runtimes run
(an int8's negative values index the table from its end, as Gather does: the table is in the
bytes' bit-pattern order). onyx runs its kernel for it (kernels/fused.py).

A chain may also read constants holding one value per channel (a GroupNorm's scale and bias
as QLinearMul -> QLinearAdd on the normalized bytes): constants whose shape is 1 but on one
axis, where the tensor's inferred size is theirs (so nothing broadcasts either), the same axis
for all of them. Such a chain is a function of the byte and its channel, tabulated on a probe
of every byte value in every channel, and becomes ``ai.onyx.ChannelTableLookup(x, table,
offsets)``: Gather(table, Cast(x, int32) + offsets), the table holding C runs of 256 values in
the byte's value order and ``offsets`` each channel's start (+128 for int8), shaped to
broadcast along the channel axis. An inference BatchNormalization of constant (C,)
parameters is such a per-channel function too (on axis 1): a pre-activation ResNet's
DQ -> BatchNormalization -> Q is one channel lookup.

A one-node chain whose table gives every byte back (a QLinearAdd of a constant of zero
points at its input's parameters: a quantized BERT's all-zero q / k / v bias) goes: its
readers read the root.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..ir.dtypes import DataType
from ..runtime.registry import ONYX_DOMAIN, traits
from .core import EXTENDED, MS, STANDARD, PassContext, downstream_chain, graph_pass, static_shape
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
    tabled: set[int] = set()  # the exits in found
    moved = 0
    for root, byte in _byte_values(ctx, order):
        nodes = _chain_nodes(ctx, root, position)
        if not nodes:
            continue
        members = {id(n) for n in nodes}
        moved += _shapes_from_root(ctx, root, nodes, members)
        for out in _exits(ctx, nodes, members):
            # (an exit already tabled from an earlier root is replaced by that table: the
            # byte values inside a GELU's chain are roots too, each a probe of its own)
            if id(out) in tabled:
                continue
            chain = _ancestors(out, members, position)
            alone = len(chain) < 2 and not _worth_alone(chain[0])
            if alone and not _may_be_identity(ctx, chain[0], root):
                continue
            table = _memo_tabulate(ctx, root, byte, out, chain)
            if alone and not _is_identity(table, byte):
                continue
            if table is not None:
                found.append((root, out, _IDENTITY if alone else table, chain))
                tabled.add(id(out))
    replaced = set()
    for root, out, table, chain in found:
        if out.producer is None:
            continue
        if table is _IDENTITY:
            if ctx.replace_value(out, root):  # (the node goes as dead code)
                ctx.count(PASS)
                replaced.add(id(out))
            continue
        if table.ndim == 2:
            _replace_channels(ctx, root, out, table, _chain_channel(ctx, root, chain))
        else:
            _replace(ctx, root, out, table)
        replaced.add(id(out))
    return bool(replaced) or bool(moved)


#: com.microsoft quantized activations that are a lookup's worth on their own: each is a
#: dequantization, a float function and a quantization (numpy's passes), where a lookup is one
#: pass. (Other one-node chains stay: their kernels are one native pass already.)
_ALONE = frozenset({"QLinearLeakyRelu", "QLinearSigmoid"})


def _worth_alone(node: ir.Node) -> bool:
    return node.domain == MS and node.op_type in _ALONE


#: found's mark of a one-node chain that gives every byte back: its readers read its root.
_IDENTITY = object()


def _may_be_identity(ctx: PassContext, node: ir.Node, root: ir.Value) -> bool:
    """Whether ``node`` is a QLinearAdd of ``root`` and a constant that dequantizes to zeros,
    its output at root's scale and zero point (a quantized BERT's packed q / k / v
    projection, whose bias is all zeros, quantized at scale 1: every byte comes back). The
    table then says whether it does, to the bit."""
    if node.domain != MS or node.op_type != "QLinearAdd" or len(node.inputs) != 8:
        return False
    mine = 0 if node.inputs[0] is root else 3 if node.inputs[3] is root else None
    if mine is None or any(v is None for v in node.inputs):
        return False
    other = 3 - mine
    c, zc = ctx.const(node.inputs[other]), ctx.const(node.inputs[other + 2])
    if c is None or zc is None or zc.size != 1 or not (c == zc.reshape(-1)[0]).all():
        return False
    same = [(ctx.const(node.inputs[mine + k]), ctx.const(node.inputs[5 + k])) for k in (1, 2)]
    return all(a is not None and b is not None and np.array_equal(a, b) for a, b in same)


def _is_identity(table: np.ndarray | None, byte) -> bool:
    """Whether a (C, 256) or (256,) table gives each byte pattern back, in root's type."""
    if table is None or table.dtype != np.dtype(byte):
        return False
    return bool((table.view(np.uint8) == np.arange(256, dtype=np.uint8)).all())


#: Readers that take only a tensor's shape.
_SHAPE_READERS = frozenset({"Shape", "Size"})


def _shapes_from_root(ctx: PassContext, root: ir.Value, nodes: list, members: set[int]) -> int:
    """Make Shape and Size nodes reading a chain's value read its root instead: the chain
    broadcasts nothing, so every value in it has root's shape. A quantized BERT's bias add
    (DequantizeLinear -> Add) also feeds a Shape; that float value would otherwise be
    tabulated per channel (a 768 x 256 float table, built at load and looked up every run)
    only for its shape. Returns how many readers moved."""
    moved = 0
    for node in nodes:
        for v in node.outputs:
            for user, i in list(v.iter_uses()):
                if (
                    user.op_type in _SHAPE_READERS
                    and user.domain in STANDARD
                    and id(user) not in members
                ):
                    user.set_input(i, root)
                    moved += 1
    return moved


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
_ZERO_POINT_AFTER = {
    ("", "DequantizeLinear"): (0,),
    (MS, "QLinearAdd"): (0, 3),
    (MS, "QLinearMul"): (0, 3),
}


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
    if not any(_elementwise(node) for node, _ in root.iter_uses()):
        return []  # (most byte values: a quantized conv's output read by the next conv)
    shape = static_shape(root) or ()
    channel: list = []  # [(axis, size)] once a per-channel constant joined the chain
    return downstream_chain(
        root, position, lambda node, inside: _takes(ctx, node, inside, shape, channel)
    )


def _elementwise(node: ir.Node) -> bool:
    """An elementwise op of one output: what a chain may hold (_takes' first test)."""
    return len(node.outputs) == 1 and traits(node.op_type, node.domain).elementwise


def _channel_op(ctx: PassContext, node: ir.Node, shape: tuple) -> tuple[int, int] | None:
    """(1, C) for an inference BatchNormalization of a value of inferred ``shape`` (N, C, ...)
    whose four parameters are constants of shape (C,): an affine map per channel on axis 1,
    each element's result a function of its value and channel alone (a pre-activation
    ResNet's DQ -> BatchNormalization [-> Relu] -> Q between its quantized convs); else None.
    (The optimizer's BatchNormRelu, a model-local function, is no chain's: evaluate refuses
    local functions.)"""
    if node.op_type != "BatchNormalization" or node.domain not in STANDARD:
        return None
    if len(node.outputs) != 1 or len(node.inputs) != 5 or len(shape) < 2:
        return None
    if node.attr("training_mode", 0) or not node.attr("spatial", 1):
        return None
    size = shape[1]
    for v in node.inputs[1:]:
        c = ctx.const(v) if v is not None and v.name else None
        if c is None or c.shape != (size,) or c.dtype != np.float32:
            return None
    return (1, size) if isinstance(size, int) else None


def _takes(ctx: PassContext, node: ir.Node, inside: set[int], shape: tuple, channel: list) -> bool:
    if node.op_type == "BatchNormalization":
        axis = node.inputs[0] is not None and id(node.inputs[0]) in inside
        axis = axis and _channel_op(ctx, node, shape)
        if not axis or channel and channel[0] != axis:
            return False
        if not channel:
            channel.append(axis)
        return True
    if not _elementwise(node):
        return False
    axes = []
    for v in node.inputs:
        if v is None or not v.name or id(v) in inside:
            continue
        c = ctx.const(v)
        if c is None or c.ndim > len(shape):
            return False
        if c.size != 1:
            axis = _channel_axis(c.shape, shape)
            if axis is None or channel and channel[0] != axis:
                return False
            axes.append(axis)
    if axes and not channel:
        channel.append(axes[0])
    return True


def _channel_axis(const_shape: tuple, shape: tuple) -> tuple[int, int] | None:
    """(axis, size) when a constant of ``const_shape`` holds one value per channel of a
    tensor of inferred ``shape``: 1 on every axis but one, where the tensor's size is the
    same (right-aligned, as numpy broadcasts)."""
    big = [i for i, d in enumerate(const_shape) if d != 1]
    if len(big) != 1:
        return None
    axis = len(shape) - len(const_shape) + big[0]
    size = const_shape[big[0]]
    return (axis, size) if shape[axis] == size and isinstance(size, int) else None


def _exits(ctx: PassContext, nodes: list[ir.Node], members: set[int]) -> list[ir.Value]:
    """The chain's values read outside it (or graph outputs), in graph order."""
    return [
        v
        for n in nodes
        for v in n.outputs
        if ctx.is_output(v) or any(id(user) not in members for user, _ in v.iter_uses())
    ]


def _ancestors(out: ir.Value, members: set[int], position: dict) -> list[ir.Node]:
    """The chain's nodes ``out`` depends on, in graph order."""
    found, stack = {}, [out.producer]
    while stack:
        node = stack.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        stack += [
            v.producer
            for v in node.inputs
            if v is not None and v.producer is not None and id(v.producer) in members
        ]
    return sorted(found.values(), key=lambda n: position[id(n)])


#: A chain's key (_chain_key) -> its table (read-only) or None: a process that creates
#: sessions of a model again tabulates its chains once (a quantized GPT's GELU chains, 1024
#: channels each, were most of its warm creation). Emptied when its tables and the constants'
#: bytes in its keys pass MAX_TABLE_BYTES; a chain whose constants hold more than
#: MAX_KEY_BYTES is tabulated without it.
TABLES: dict[tuple, np.ndarray | None] = {}
MAX_TABLE_BYTES = 32 << 20
MAX_KEY_BYTES = 256 << 10
_table_bytes = [0]
_UNKNOWN = object()  # (a chain not tabulated yet; None is a table that failed)


def _memo_tabulate(ctx: PassContext, root: ir.Value, byte, out: ir.Value, chain: list):
    """_tabulate's table, from TABLES when a chain of the same key was tabulated before (a
    copy: a session's initializer is its own)."""
    found = _chain_key(ctx, root, byte, out, chain)
    if found is None:
        return _tabulate(ctx, root, byte, out, chain)
    key, key_bytes = found
    # (one get, not a test then a read: another thread creating a session may empty TABLES
    # between the two)
    table = TABLES.get(key, _UNKNOWN)
    if table is not _UNKNOWN:
        return None if table is None else table.copy()
    table = _tabulate(ctx, root, byte, out, chain)
    held = key_bytes + (0 if table is None else table.nbytes)
    if held > MAX_TABLE_BYTES // 4:
        return table  # (not kept: a few such would empty the memo)
    if _table_bytes[0] + held > MAX_TABLE_BYTES:
        TABLES.clear()
        _table_bytes[0] = 0
    kept = None if table is None else table.copy()
    if kept is not None:
        kept.setflags(write=False)
    TABLES[key] = kept
    _table_bytes[0] += held
    return table


#: Attribute types whose values key a chain (plain numbers and strings).
_PLAIN_ATTRS = frozenset(
    (ir.AttrType.FLOAT, ir.AttrType.INT, ir.AttrType.STRING)
    + (ir.AttrType.FLOATS, ir.AttrType.INTS, ir.AttrType.STRINGS)
)


def _chain_key(
    ctx: PassContext, root: ir.Value, byte, out: ir.Value, chain: list
) -> tuple[tuple, int] | None:
    """What _tabulate's result depends on, as a hashable tuple: root's byte type and shape,
    each node's op, opset, attributes and inputs (root, an earlier node's output, or a
    constant's type, shape and bytes), which node's output ``out`` is, whether folding is
    bounded, and the native library's state (the kernels that run the probe). None when a
    node has an attribute of another kind, or a model-local function of its op, or the
    constants hold more than MAX_KEY_BYTES (then the chain is tabulated as it is, without
    the memo). With the key, the constants' bytes it holds."""
    from ..runtime import native

    functions = {(f.domain, f.name) for f in ctx.model.functions.values()}
    shape = static_shape(root)
    where: dict[int, tuple] = {id(root): ("x",)}
    parts: list = [np.dtype(byte).str, shape, ctx.unbounded_folding, native.load_status()]
    held = 0
    for k, node in enumerate(chain):
        if (ir.canonical_domain(node.domain), node.op_type) in functions:
            return None
        attrs = []
        for a in node.attributes.values():
            if a.type not in _PLAIN_ATTRS or a.ref_attr_name:
                return None
            attrs.append((a.name, int(a.type), repr(a.value)))  # (repr: -0.0 is not 0.0)
        inputs = []
        for v in node.inputs:
            ref = None if v is None or not v.name else where.get(id(v))
            if ref is None and v is not None and v.name:
                c = ctx.const(v)
                held += 0 if c is None else c.nbytes
                if c is None or held > MAX_KEY_BYTES:
                    return None
                ref = (c.dtype.str, c.shape, c.tobytes())
            inputs.append(ref)
        named = tuple(bool(v.name) for v in node.outputs)
        op = (node.domain, node.op_type, ctx.opset(node.domain))
        parts.append((*op, tuple(attrs), tuple(inputs), named))
        for j, v in enumerate(node.outputs):
            where[id(v)] = (k, j)
    parts.append(where.get(id(out)))
    return tuple(parts), held


def _tabulate(ctx: PassContext, root: ir.Value, byte, out: ir.Value, chain: list[ir.Node]):
    """out as a function of root's 256 values (in bit-pattern order), or None; per channel
    (shape (C, 256)) when the chain reads a per-channel constant."""
    values = np.arange(256, dtype=np.uint8).view(byte)
    channel = _chain_channel(ctx, root, chain)
    if channel is None:
        probe = np.tile(values, PROBE_COPIES)
    else:  # every value in every channel: the channel axis, then the values on the last
        probe = _channel_probe(values, channel, len(static_shape(root)), _channel_copies(channel))
        if probe is None:
            return None
    known = {id(root): probe}
    for node in chain:
        result = evaluate(ctx, node, known)
        if result is None:
            return None
        known[id(node.outputs[0])] = np.asarray(result[0])
    y = known[id(out)]
    if channel is not None:
        return _channel_table(y, channel)
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


def _chain_channel(ctx: PassContext, root: ir.Value, chain: list[ir.Node]):
    """(axis, size) of the per-channel constants ``chain`` reads, or None (it has none)."""
    shape = static_shape(root)
    inside = {id(root)} | {id(v) for n in chain for v in n.outputs}
    for node in chain:
        axis = _channel_op(ctx, node, shape)
        if axis is not None:
            return axis
        for v in node.inputs:
            if v is None or not v.name or id(v) in inside:
                continue
            c = ctx.const(v)
            if c is not None and c.size != 1:
                return _channel_axis(c.shape, shape)
    return None


def _channel_copies(channel: tuple[int, int]) -> int:
    """Copies of the byte values per channel in a channel probe: enough that the probe is as
    large as a plain one (kernels take their large-tensor path), at least two (the copies
    must agree). A 1024-channel probe of 16 copies was 4M elements per chain value: most of
    a quantized BERT's session creation and its peak memory."""
    return max(2, -(-PROBE_COPIES // channel[1]))


def _channel_probe(values: np.ndarray, channel: tuple[int, int], rank: int, copies: int):
    """Every byte value ``copies`` times in each of the channels: shape 1 but C on the
    channel axis and 256 * copies on the last (the one before when that is the channel
    axis)."""
    axis, size = channel
    spread = _spread_axis(axis, rank)
    if spread < 0:
        return None
    shape = [1] * rank
    shape[axis], shape[spread] = size, 256 * copies
    grid = np.broadcast_to(np.tile(values, copies), (size, 256 * copies))
    return np.ascontiguousarray(grid if axis < spread else grid.T).reshape(shape)


def _spread_axis(axis: int, rank: int) -> int:
    return rank - 1 if axis != rank - 1 else rank - 2


def _channel_table(y: np.ndarray, channel: tuple[int, int]):
    """The (C, 256) table of a channel probe's result, or None when the copies disagree or
    the result is not one value per probe element."""
    axis, size = channel
    spread = _spread_axis(axis, y.ndim)
    if y.dtype.kind in "OSU" or y.dtype.itemsize not in (1, 2, 4, 8):
        return None
    n = _channel_copies(channel)
    expect = [1] * y.ndim
    expect[axis], expect[spread] = size, 256 * n
    if list(y.shape) != expect:
        return None
    as_bytes = np.ascontiguousarray(y).view(np.uint8)
    # (copy, value, channel) or (channel, copy, value) bytes: the copies compared in place
    copies = as_bytes.reshape(size, n, -1) if axis < spread else as_bytes.reshape(n, -1)
    if not (copies == copies[:, :1] if axis < spread else copies == copies[:1]).all():
        return None
    first = y.reshape(size, -1)[:, :256] if axis < spread else y.reshape(-1, size)[:256].T
    return np.ascontiguousarray(first)


def _replace(ctx: PassContext, root: ir.Value, out: ir.Value, table: np.ndarray) -> None:
    ctx.ensure_function("TableLookup", lambda: _lookup_function(ctx))
    t = ctx.add_const(table, out.name + "_table")
    name = ctx.fresh_name((out.producer.name or out.name) + "_lookup")
    node = ir.Node("TableLookup", [root, t], 1, domain=ONYX_DOMAIN, name=name)
    ctx.replace_nodes(out.producer, node)  # the chain's other nodes go as dead code
    ctx.count(PASS)


def _lookup_function(ctx: PassContext) -> ir.Function:
    """The model-local function TableLookup(x, table) = Gather(table, Cast(x, int32))."""
    x, table = ir.Value("x"), ir.Value("table")
    cast = ir.Node("Cast", [x], ["index"], {"to": int(DataType.INT32)})
    gather = ir.Node("Gather", [table, cast.outputs[0]], ["y"], {"axis": 0})
    body = ir.Graph([x, table], [gather.outputs[0]], [cast, gather], name="TableLookup")
    f = ir.Function(ONYX_DOMAIN, "TableLookup", body, opset_imports={"": ctx.opset("") or 13})
    f.doc_string = "y = table[x] for a byte tensor x (int8 by bit pattern: -1 reads table[255])"
    return f


def _replace_channels(
    ctx: PassContext, root: ir.Value, out: ir.Value, table: np.ndarray, channel: tuple[int, int]
) -> None:
    """out = ChannelTableLookup(root, the table in value order, each channel's offset)."""
    axis, size = channel
    rank = len(static_shape(root))
    signed = _byte_type(ctx, root) is np.int8
    if signed:  # bit-pattern order -> value order: -128 first
        table = np.roll(table, 128, axis=1)
    offsets = np.arange(size, dtype=np.int32) * 256 + (128 if signed else 0)
    offsets = offsets.reshape([size] + [1] * (rank - 1 - axis))
    ctx.ensure_function("ChannelTableLookup", lambda: _channel_lookup_function(ctx))
    t = ctx.add_const(np.ascontiguousarray(table).reshape(-1), out.name + "_table")
    o = ctx.add_const(offsets, out.name + "_offsets")
    name = ctx.fresh_name((out.producer.name or out.name) + "_lookup")
    node = ir.Node("ChannelTableLookup", [root, t, o], 1, domain=ONYX_DOMAIN, name=name)
    ctx.replace_nodes(out.producer, node)  # the chain's other nodes go as dead code
    ctx.count(PASS)


def _channel_lookup_function(ctx: PassContext) -> ir.Function:
    """ChannelTableLookup(x, table, offsets) = Gather(table, Cast(x, int32) + offsets)."""
    x, table, offsets = ir.Value("x"), ir.Value("table"), ir.Value("offsets")
    cast = ir.Node("Cast", [x], ["value"], {"to": int(DataType.INT32)})
    add = ir.Node("Add", [cast.outputs[0], offsets], ["index"])
    gather = ir.Node("Gather", [table, add.outputs[0]], ["y"], {"axis": 0})
    body = ir.Graph(
        [x, table, offsets], [gather.outputs[0]], [cast, add, gather], name="ChannelTableLookup"
    )
    f = ir.Function(
        ONYX_DOMAIN, "ChannelTableLookup", body, opset_imports={"": ctx.opset("") or 13}
    )
    f.doc_string = (
        "y = table[x + offsets]: a function of a byte tensor x and its channel, the table "
        "C runs of 256 values in x's value order, offsets each channel's start (+128 for int8)"
    )
    return f
