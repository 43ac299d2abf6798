"""Tree ensembles: what a graph computes from a tree's leaf goes into the leaf's weight, and
trees whose results are summed become one ensemble.

skl2onnx writes an IsolationForest as one TreeEnsembleRegressor per tree, whose output is
the reached leaf's id, followed by some twenty nodes per tree that turn the id into the
leaf's path length (two LabelEncoders, Cast, Equal, Greater, Log, Max, Div, Mul, Add): 2,700
nodes, each a kernel call on a few values per run, summed by one Sum over the trees.

``TreeLeafFunctionFusion``: a regressor of one tree (one target, SUM, no post-transform or
base values, one weight on every leaf) can only output its leaves' weights. Nodes that
compute an elementwise function of that output alone (and of constants holding one value)
compute, for each row, a function of the leaf reached. The pass runs those nodes' own kernels
on the leaf weights (16 copies, as the lookup-table pass probes) and gives the regressor
the results as its weights, in place of the chain. A chain may also hold LabelEncoders and
Reshapes to [-1, 1] (the layout skl2onnx keeps); what it hands on must be float32 and keep the
regressor's [N, 1] shape, and its copies must agree (its kernels are elementwise after all);
no weight may be -0.0 (the regressor adds its weight to +0.0: the chain's -0.0 would be lost).
Chains laid out alike (the same ops, attributes and constants: an IsolationForest's hundred)
run together, each kernel once on all their trees' probes, a LabelEncoder (each tree's own
table) on each tree's part: the elementwise kernels give each element its own result.

``TreeSumFusion``: Sum(y_1, ..., y_k) of such regressors' outputs, all reading one input (or
outputs of alike nodes on the same inputs: each tree's own Gather of the same columns) and
read by the Sum alone, is one regressor holding every tree, numbered in the Sum's order: the
ensemble adds its trees' float32 weights tree after tree, as Sum adds its inputs, to the bit.

Both are basic passes (standard ops in, standard ops out) and run first: the other passes
then see the IsolationForest's 11 nodes, not its 2,700 (the Sum's trees merge in the first round).
"""

from __future__ import annotations

import warnings
from itertools import compress

import numpy as np

from .. import ir
from ..runtime.bind import bind
from ..runtime.registry import traits
from .core import STANDARD, PassContext, graph_pass, reachable_in_order

LEAF_PASS, SUM_PASS = "TreeLeafFunctionFusion", "TreeSumFusion"
ML = "ai.onnx.ml"
#: Copies of the leaf weights the chain runs on (see lookup.PROBE_COPIES).
PROBE_COPIES = 16
#: Regressor attributes a one-tree regressor may have (others: the pass leaves it alone).
_TREE_ATTRS = frozenset(
    {
        "n_targets",
        "nodes_nodeids",
        "target_nodeids",
        "nodes_treeids",
        "nodes_featureids",
        "nodes_values",
        "nodes_values_as_tensor",
        "target_weights",
        "nodes_falsenodeids",
        "nodes_hitrates",
        "nodes_hitrates_as_tensor",
        "nodes_missing_value_tracks_true",
        "nodes_modes",
        "nodes_truenodeids",
        "target_treeids",
        "target_ids",
        "aggregate_function",
        "post_transform",
        "base_values",
    }
)


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None or a.is_ref:
        return default
    v = a.value
    return v.decode() if isinstance(v, bytes) else v


def _one_tree(node: ir.Node) -> list[float] | None:
    """The leaf weights, in target order, of a regressor that outputs its one tree's reached
    leaf's weight (and nothing else), or None."""
    if node.op_type != "TreeEnsembleRegressor" or node.domain != ML:
        return None
    inputs = node.inputs
    if len(inputs) != 1 or len(node.outputs) != 1 or inputs[0] is None:
        return None
    if not node.attributes.keys() <= _TREE_ATTRS or node.attributes_have_refs():
        return None
    if _attr(node, "n_targets", 1) != 1 or _attr(node, "post_transform", "NONE") != "NONE":
        return None
    if _attr(node, "aggregate_function", "SUM") != "SUM" or _attr(node, "base_values"):
        return None
    trees = _attr(node, "nodes_treeids") or []
    if not len(trees) or not _all_equal(trees, trees[0]):  # (an ensemble: its ends differ)
        return None
    weights = _attr(node, "target_weights")
    target_trees = _attr(node, "target_treeids") or []
    target_nodes = _attr(node, "target_nodeids") or []
    n = min(len(target_trees), len(target_nodes))  # (the targets, as zip pairs them)
    if weights is None or len(weights) != n or any(_attr(node, "target_ids") or []):
        return None
    if not _all_equal(target_trees[:n], trees[0]):
        return None
    targets = set(target_nodes[:n])
    modes = _attr(node, "nodes_modes") or []
    ids = _attr(node, "nodes_nodeids") or []
    if len(targets) != n or len(modes) != len(ids):
        return None
    if set(compress(ids, map(_LEAF.__contains__, modes))) != targets:
        return None  # (a leaf without its weight would output 0)
    return list(weights)


_LEAF = frozenset({"LEAF", b"LEAF"})


def _all_equal(values, first) -> bool:
    """Whether every one of ``values`` equals ``first`` (list.count: one C loop); true of
    none (a tree without targets: its leaves weigh nothing)."""
    if isinstance(values, list | tuple):
        return not values or (values[-1] == first and values.count(first) == len(values))
    return all(v == first for v in values)


# ---------------------------------------------------------------------------------------------
# TreeLeafFunctionFusion


class _Chain:
    """A one-tree regressor and the chain of nodes that reads it (a plain class: a dataclass
    compiles its methods at import)."""

    __slots__ = ("tree", "root", "weights", "nodes", "exits", "layout")

    def __init__(self, tree, root, weights, nodes, exits, layout):
        self.tree, self.root, self.weights = tree, root, weights
        self.nodes, self.exits, self.layout = nodes, exits, layout


@graph_pass(LEAF_PASS)
def tree_leaf_function_fusion(ctx: PassContext) -> bool:
    order = list(ctx.graph)
    position = {id(n): i for i, n in enumerate(order)}
    look = _Lookups(ctx)
    chains = []
    for tree in order:
        if tree.op_type != "TreeEnsembleRegressor" or len(tree.outputs) != 1:
            continue
        # (the chain first: once fused, a tree's output feeds a Sum, and the walk ends at once)
        chain = _chain(look, tree, position)
        if chain is not None:
            chain.weights = _one_tree(tree)
            if chain.weights is not None:
                chains.append(chain)
    found = []  # (regressor, exit value, its weights): found first, then the graph changes
    fused = []  # the chains replaced
    for chain, tables in zip(chains, _tabulate_all(ctx, chains)):
        if tables is not None:
            found += [(chain.tree, out, table) for out, table in zip(chain.exits, tables)]
            fused.append(chain)
    for tree, out, table in found:
        node = ir.Node(
            tree.op_type,
            list(tree.inputs),
            1,
            domain=tree.domain,
            # (the name of the node it replaces, so unique: a fresh one would have every name
            # in the graph gathered first, 2,700 nodes of them)
            name=out.producer.name or ctx.fresh_name(out.name + "_leaves"),
        )
        node.attributes = dict(tree.attributes)
        node.attributes["target_weights"] = ir.Attr(
            "target_weights", ir.AttrType.FLOATS, table.tolist()
        )
        ctx.replace_nodes(out.producer, node)
        # (one tree still, of these weights: TreeSumFusion, next, need not check it again)
        ctx.memo[(LEAF_PASS, id(node))] = (node, node.attributes, table.size)
        ctx.count(LEAF_PASS)
    for chain in fused:  # gone now, not left to dead-code elimination: the passes between
        _remove_unread(ctx, [chain.tree, *chain.nodes], look.outputs)  # would work on 2,700
    return bool(found)


def _remove_unread(ctx: PassContext, nodes: list[ir.Node], outputs: set[int]) -> None:
    """Remove those of ``nodes`` (in graph order) whose outputs nothing reads any more
    (``outputs``: the ids of the graph's outputs)."""
    g = ctx.graph
    for node in reversed(nodes):
        if node.graph is not g:
            continue
        for v in node.outputs:
            if v.has_uses() or id(v) in outputs:
                break
        else:
            g.remove(node, safe=False)  # (checked just now)
            _unlink(node)


def _unlink(node: ir.Node) -> None:
    """Free a removed node now: it and its outputs refer to each other, and only the cyclic
    collector would free them, after traversing them and their attributes' lists (an
    IsolationForest's 2,700 nodes and half a million numbers: a sixth of its creation)."""
    for v in node.outputs:
        v.producer = None
    node.attributes = {}


class _Lookups:
    """What one run of the pass asks about many times, answered once: the constants the chains
    read (an IsolationForest's hundred chains share a dozen), and which ops a chain takes."""

    def __init__(self, ctx: PassContext):
        self.ctx = ctx
        self.outputs = {id(v) for v in ctx.graph.outputs}
        self.consts: dict[int, tuple] = {}  # id(value) -> (value, its array, its ref)
        self.ops: dict[tuple[str, str], bool] = {}

    def const(self, v: ir.Value) -> tuple:
        """(its array or None, a key of its contents) for a value a chain reads."""
        known = self.consts.get(id(v))
        if known is None or known[0] is not v:
            c = self.ctx.const(v)
            ref = None if c is None else (None, c.dtype.str, c.shape, c.tobytes())
            known = self.consts[id(v)] = (v, c, ref)
        return known[1], known[2]

    def takes_op(self, op_type: str, domain: str) -> bool:
        known = self.ops.get((op_type, domain))
        if known is None:
            label_encoder = op_type == "LabelEncoder" and domain == ML
            known = label_encoder or traits(op_type, domain).elementwise
            self.ops[(op_type, domain)] = known
        return known


def _chain(look: _Lookups, tree: ir.Node, position: dict) -> _Chain | None:
    """The nodes computing elementwise functions of the tree's output alone (and constants),
    in graph order, with their layout (_layout), or None when there are none: the nodes
    reachable from the output's uses that _takes accepts, visited in graph order (``position``:
    node id -> index) so that a node's producers in the chain come first."""
    root = tree.outputs[0]
    where = {id(root): (-1, 0)}  # id of root and of each node's output -> where it is made
    nodes: list[ir.Node] = []
    made: list[ir.Value] = []  # each node's output
    layout = []
    taken: list[tuple] = []  # (the refs _takes found for the node just accepted)

    def accept(node: ir.Node) -> bool:
        refs = _takes(look, node, where)
        if refs is None:
            return False
        taken.append(refs)
        return True

    for node in reachable_in_order(root, position, accept):
        out = node.outputs[0]
        where[id(out)] = (len(nodes), 0)
        made.append(out)
        nodes.append(node)
        layout.append((node.op_type, node.domain, bool(out.name), taken[-1], _attr_key(node)))
    if not nodes:
        return None
    members = {id(n) for n in nodes}
    exits = [v for v in made if id(v) in look.outputs or _read_outside(v, members)]
    exit_refs = tuple(where[id(v)] for v in exits)
    return _Chain(tree, root, None, nodes, exits, (tuple(layout), exit_refs))


def _read_outside(v: ir.Value, members: set[int]) -> bool:
    """Whether a node not in ``members`` (ids) reads ``v``."""
    for user, _ in v.iter_uses():
        if id(user) not in members:
            return True
    return False


def _takes(look: _Lookups, node: ir.Node, where: dict) -> tuple | None:
    """Where each input of ``node`` comes from (the chain's ``where``, or a constant's
    contents), if the chain takes it, else None."""
    inputs = node.inputs
    for v in inputs:
        if v is None or not v.name:
            return None
    if len(node.outputs) != 1:
        return None
    if node.op_type == "Reshape" and node.domain in STANDARD:
        if len(inputs) != 2 or _attr(node, "allowzero", 0):
            return None
        first, (shape, ref) = where.get(id(inputs[0])), look.const(inputs[1])
        if first is None or shape is None or shape.tolist() not in ([-1, 1], [0, 1]):
            return None
        return first, ref
    if not look.takes_op(node.op_type, node.domain):
        return None
    refs = []
    for v in inputs:
        ref = where.get(id(v))
        if ref is None:
            c, ref = look.const(v)
            if c is None or c.size != 1 or c.ndim > 2:
                return None
        refs.append(ref)
    return tuple(refs)


def _attr_key(node: ir.Node) -> tuple | None:
    """The node's attributes as a key (_bound's), or None where one holds a list (a
    LabelEncoder's table: each tree's own) or refers to a function's attribute."""
    key = ()
    if not node.attributes:
        return key
    for name, a in node.attributes.items():
        value = a.value
        if type(value) not in _SCALARS or a.is_ref:
            return None
        key += ((name, a.type, value.hex() if type(value) is float else value),)  # (-0.0)
    return key


def _tabulate_all(ctx: PassContext, chains: list[_Chain]) -> list:
    """Each chain's tables (see _tabulate), or None. Chains laid out alike (an
    IsolationForest's hundred, one per tree) run together: each node's kernel once on all
    their probes one after the other (elementwise kernels: each element's result is its
    own), or where a node holds a list (a LabelEncoder's table), each chain's own on its
    part."""
    steps: dict = {}  # kernels bound for the chains' nodes, shared by nodes alike (_bound)
    groups: dict = {}
    for i, chain in enumerate(chains):
        groups.setdefault(chain.layout, []).append(i)
    tables: list = [None] * len(chains)
    for layout, members in groups.items():
        group = [chains[i] for i in members]
        got = _tabulate_together(ctx, layout, group, steps) if len(group) > 1 else None
        if got is None:  # (alone, or not all of them could run together: one by one)
            got = [_tabulate(ctx, c.root, c.weights, c.nodes, c.exits, steps) for c in group]
        for i, t in zip(members, got):
            tables[i] = t
    return tables


def _tabulate_together(ctx: PassContext, layout: tuple, group: list, steps: dict) -> list | None:
    """_tabulate of each chain of ``group`` (all laid out as ``layout``), their nodes run on
    all their probes at once; None where that cannot be done (a node that fails, or a value
    not of one row per probe element): the caller then takes them one by one."""
    node_layout, exit_refs = layout
    probes = [np.tile(np.asarray(c.weights, np.float32), PROBE_COPIES) for c in group]
    bounds = [0]
    for p in probes:
        bounds.append(bounds[-1] + p.size)
    known = {(-1, 0): np.concatenate(probes).reshape(-1, 1)}
    opsets, local = ctx.model.opset_imports, _local_functions(ctx)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for j, (op_type, domain, _, refs, attrs) in enumerate(node_layout):
            if (ir.canonical_domain(domain), op_type) in local:
                return None
            if not traits(op_type, domain).deterministic:
                return None
            args = [known[ref] if ref[0] is not None else ref for ref in refs]
            try:
                if attrs is not None:  # (alike in every chain: one kernel, one call)
                    first = group[0].nodes[j]
                    args = [_const_arg(ctx, first, i, a) for i, a in enumerate(args)]
                    out = _one_row_each(_bound(first, opsets, steps).call(args)[0], bounds[-1])
                else:
                    out = _each_chain(ctx, group, j, args, bounds, opsets)
            except Exception:  # (one by one, each chain gets its own verdict)
                return None
            if out is None:
                return None
            known[(j, 0)] = out
    result = []
    for t in range(len(group)):
        ys = [known[ref][bounds[t] : bounds[t + 1]] for ref in exit_refs]
        result.append(_tables(ys, bounds[t + 1] - bounds[t]))
    return result


def _const_arg(ctx: PassContext, node: ir.Node, i: int, arg):
    """``arg``, or where it is a constant's ref, that constant's array (node's input i)."""
    return ctx.const(node.inputs[i]) if type(arg) is tuple else arg


def _each_chain(ctx, group, j: int, args: list, bounds: list, opsets) -> np.ndarray | None:
    """Node j of each chain of ``group`` run on its chain's rows of ``args``, the results
    concatenated; None unless each has one row per probe element, all of one type."""
    outs = []
    for t, chain in enumerate(group):
        node = chain.nodes[j]
        if node.attributes_have_refs():  # (_evaluated's rule)
            return None
        lo, hi = bounds[t], bounds[t + 1]
        mine = [
            _const_arg(ctx, node, i, a) if type(a) is tuple else a[lo:hi]
            for i, a in enumerate(args)
        ]
        y = _one_row_each(bind(node, opsets).call(mine)[0], hi - lo)
        if y is None or (outs and y.dtype != outs[0].dtype):
            return None  # (of another type: concatenated, it would change the next nodes')
        outs.append(y)
    return np.concatenate(outs)


def _one_row_each(y, rows: int) -> np.ndarray | None:
    """``y`` as an array of shape [rows, 1], or None where it is not one."""
    if not isinstance(y, np.ndarray | np.generic):
        return None
    y = np.asarray(y)
    return y if y.shape == (rows, 1) else None


def _tables(ys: list, size: int) -> list[np.ndarray] | None:
    """Each exit's table from its values ``ys`` on the probe (``size`` elements): float32 of the
    probe's shape, its copies alike, else None."""
    tables = []
    for y in ys:
        if y is None or y.dtype != np.float32 or y.shape != (size, 1):
            return None
        copies = y.reshape(PROBE_COPIES, size // PROBE_COPIES)
        if not (copies.view(np.uint32) == copies[0].view(np.uint32)).all():
            return None
        if (copies[0].view(np.uint32) == _NEGATIVE_ZERO).any():
            return None  # (the regressor adds a leaf's weight to +0.0: -0.0 would come out +0.0)
        tables.append(copies[0].copy())
    return tables


_NEGATIVE_ZERO = np.float32(-0.0).view(np.uint32)


def _tabulate(ctx, root, weights, nodes, exits, steps: dict) -> list[np.ndarray] | None:
    """Each exit's value at each leaf weight (float32), or None where the chain cannot be
    tabulated: a kernel that fails or is not elementwise, an exit of another type or shape."""
    probe = np.tile(np.asarray(weights, np.float32), PROBE_COPIES).reshape(-1, 1)
    known = _evaluated(ctx, root, probe, nodes, steps)
    if known is None:
        return None
    return _tables([known.get(id(out)) for out in exits], len(probe))


def _evaluated(
    ctx: PassContext, root: ir.Value, probe: np.ndarray, nodes, steps: dict
) -> dict | None:
    """id(value) -> its array, for root = probe and the chain's nodes run in order on their
    kernels (fold.evaluate's rules, set up once for the whole chain: an IsolationForest has
    two thousand such nodes), or None when a node cannot run here."""
    known = {id(root): probe}
    opsets, local = ctx.model.opset_imports, _local_functions(ctx)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for node in nodes:
            if (ir.canonical_domain(node.domain), node.op_type) in local:
                return None
            if node.attributes_have_refs() or not traits(node.op_type, node.domain).deterministic:
                return None
            args = []
            for v in node.inputs:
                a = known.get(id(v))
                a = ctx.const(v) if a is None else a
                if a is None:
                    return None
                args.append(a)
            try:
                out = _bound(node, opsets, steps).call(args)[0]
            except Exception:  # (fails at run time too: the session will say why)
                return None
            if not isinstance(out, np.ndarray | np.generic):
                return None
            known[id(node.outputs[0])] = np.asarray(out)
    return known


def _local_functions(ctx: PassContext) -> set:
    """(domain, name) of the model's functions: a node calling one is not run here."""
    functions = ctx.model.functions
    return {(f.domain, f.name) for f in functions.values()} if functions else set()


def _bound(node: ir.Node, opsets, steps: dict):
    """``node`` bound to its kernel; nodes alike in op, input and output arity and scalar
    attributes share one binding (each of an IsolationForest's 100 chains repeats the same
    twenty-odd nodes, and binding them cost about as much as running them)."""
    key = (node.domain, node.op_type, len(node.inputs), tuple(bool(v.name) for v in node.outputs))
    for name, a in node.attributes.items():
        value = a.value
        if type(value) not in _SCALARS:
            return bind(node, opsets)  # (lists: LabelEncoder's tables, each tree's own)
        key += ((name, a.type, value.hex() if type(value) is float else value),)  # (-0.0)
    step = steps.get(key)
    if step is None:
        step = steps[key] = bind(node, opsets)
    return step


_SCALARS = frozenset({int, float, str, bytes})


# ---------------------------------------------------------------------------------------------
# TreeSumFusion


@graph_pass(SUM_PASS)
def tree_sum_fusion(ctx: PassContext) -> bool:
    changed = False
    for node in list(ctx.graph):
        if node.op_type != "Sum" or node.domain not in STANDARD or len(node.inputs) < 2:
            continue
        trees = [v.producer if v is not None else None for v in node.inputs]
        # (the cheap tests first: a Sum of trees reading inputs of their own is common)
        if not _one_input(trees) or len({id(t) for t in trees}) != len(trees):
            continue
        if any(ctx.is_output(t.outputs[0]) or t.outputs[0].use_count() != 1 for t in trees):
            continue
        if any(not _known_tree(ctx, t) and _one_tree(t) is None for t in trees):
            continue
        if not _mergeable(trees):
            continue
        merged = _merged(trees)
        merged.name = ctx.fresh_name(node.name or "trees")
        read = trees[0].inputs[0]
        feeders = {id(p): p for t in trees if (p := t.inputs[0].producer) is not None}
        ctx.replace_nodes(node, merged, dead=trees)
        for tree in trees:
            _unlink(tree)
        # (the alike nodes feeding the other trees, unread now: gone before the passes between
        # work on them, as the chains are)
        feeders.pop(id(read.producer), None)
        _remove_unread(ctx, list(feeders.values()), {id(v) for v in ctx.graph.outputs})
        ctx.count(SUM_PASS)
        changed = True
    return changed


def _known_tree(ctx: PassContext, tree: ir.Node) -> bool:
    """Whether TreeLeafFunctionFusion made ``tree`` (from a one-tree regressor, its
    attributes as it left them), so that it is one tree (_one_tree) without a second look."""
    known = ctx.memo.get((LEAF_PASS, id(tree)))
    return (
        known is not None
        and known[0] is tree
        and known[1] is tree.attributes
        and len(tree.attributes["target_weights"].value) == known[2]
    )


def _one_input(trees: list) -> bool:
    """Whether ``trees`` are all regressors of one output reading one value, or values nodes
    alike compute from the same inputs (skl2onnx gives each tree of an IsolationForest its own
    Gather of the same columns: merged here, the 100 trees are one node before the other
    passes see them, not after common-subexpression elimination has merged the Gathers)."""
    first = None
    for t in trees:
        if t is None or t.op_type != "TreeEnsembleRegressor" or len(t.outputs) != 1:
            return False
        inputs = t.inputs
        if len(inputs) != 1 or inputs[0] is None:
            return False
        if first is None:
            first = inputs[0]
        elif inputs[0] is not first and not _alike(inputs[0], first):
            return False
    return True


def _alike(a: ir.Value, b: ir.Value) -> bool:
    """Whether ``a`` and ``b`` are the same output of nodes of one deterministic op, with the
    same inputs and the same scalar attributes (so the same values)."""
    p, q = a.producer, b.producer
    if p is None or q is None or a.index != b.index:
        return False
    if p.op_type != q.op_type or p.domain != q.domain or p.overload != q.overload:
        return False
    ins, other = p.inputs, q.inputs
    if len(ins) != len(other) or any(x is not y for x, y in zip(ins, other)):
        return False
    if len(p.outputs) != len(q.outputs):
        return False
    key = _attr_key(p)
    return key is not None and key == _attr_key(q) and traits(p.op_type, p.domain).deterministic


#: Per-node and per-target lists, concatenated over the trees merged.
_PER_NODE = (
    "nodes_nodeids",
    "nodes_featureids",
    "nodes_values",
    "nodes_falsenodeids",
    "nodes_hitrates",
    "nodes_missing_value_tracks_true",
    "nodes_modes",
    "nodes_truenodeids",
)
_PER_TARGET = ("target_nodeids", "target_ids", "target_weights")


def _mergeable(trees: list[ir.Node]) -> bool:
    names = set(trees[0].attributes)
    return not any(n.endswith("_as_tensor") for n in names) and all(
        set(t.attributes) == names for t in trees
    )


def _merged(trees: list[ir.Node]) -> ir.Node:
    """One regressor holding each tree, numbered in order (node ids stay each tree's own)."""
    first = trees[0]
    attributes = dict(first.attributes)
    for name in _PER_NODE + _PER_TARGET:
        if name in attributes:
            merged = []
            for t in trees:  # (extend: an IsolationForest's lists hold ~12,000 each)
                merged.extend(t.attributes[name].value)
            attributes[name] = ir.Attr(name, attributes[name].type, merged)
    for name, per in (("nodes_treeids", "nodes_nodeids"), ("target_treeids", "target_nodeids")):
        numbers = []
        for k, t in enumerate(trees):
            numbers.extend([k] * len(t.attributes[per].value))
        attributes[name] = ir.Attr(name, ir.AttrType.INTS, numbers)
    node = ir.Node(first.op_type, [first.inputs[0]], 1, domain=first.domain)
    node.attributes = attributes
    return node
