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
regressor's [N, 1] shape, and its copies must agree (its kernels are elementwise after all).

``TreeSumFusion``: Sum(y_1, ..., y_k) of such regressors' outputs, all reading one input and
read by the Sum alone, is one regressor holding every tree, numbered in the Sum's order: the
ensemble adds its trees' float32 weights tree after tree, as Sum adds its inputs, to the bit.

Both are basic passes (standard ops in, standard ops out) and run first: the other passes
then see the IsolationForest's 110 nodes, not its 2,700.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import ir
from ..runtime.bind import bind
from ..runtime.registry import traits
from .core import STANDARD, PassContext, downstream_chain, graph_pass

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
    if len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0] is None:
        return None
    if not set(node.attributes) <= _TREE_ATTRS or any(a.is_ref for a in node.attributes.values()):
        return None
    if _attr(node, "n_targets", 1) != 1 or _attr(node, "post_transform", "NONE") != "NONE":
        return None
    if _attr(node, "aggregate_function", "SUM") != "SUM" or _attr(node, "base_values"):
        return None
    trees = _attr(node, "nodes_treeids") or []
    weights = _attr(node, "target_weights")
    targets = list(zip(_attr(node, "target_treeids") or [], _attr(node, "target_nodeids") or []))
    if not trees or len(set(trees)) != 1 or weights is None or len(weights) != len(targets):
        return None
    if any(_attr(node, "target_ids") or []) or len(set(targets)) != len(targets):
        return None
    modes = [m.decode() if isinstance(m, bytes) else m for m in _attr(node, "nodes_modes") or []]
    ids = _attr(node, "nodes_nodeids") or []
    leaves = {(trees[0], i) for i, m in zip(ids, modes) if m == "LEAF"}
    if leaves != set(targets) or len(modes) != len(ids):
        return None  # (a leaf without its weight would output 0)
    return list(weights)


# ---------------------------------------------------------------------------------------------
# TreeLeafFunctionFusion


@graph_pass(LEAF_PASS)
def tree_leaf_function_fusion(ctx: PassContext) -> bool:
    order = list(ctx.graph)
    position = {id(n): i for i, n in enumerate(order)}
    found = []  # (regressor, exit value, its weights): found first, then the graph changes
    chains = []  # each regressor with its chain's nodes
    steps: dict = {}  # kernels bound for the chains' nodes, shared by nodes alike (_bound)
    for tree in order:
        weights = _one_tree(tree)
        if weights is None:
            continue
        root = tree.outputs[0]
        nodes = _chain(ctx, root, position)
        if not nodes:
            continue
        members = {id(n) for n in nodes}
        exits = [
            v
            for n in nodes
            for v in n.outputs
            if ctx.is_output(v) or any(id(u) not in members for u, _ in v.iter_uses())
        ]
        tables = _tabulate(ctx, root, weights, nodes, exits, steps)
        if tables is not None:
            found += [(tree, out, table) for out, table in zip(exits, tables)]
            chains.append([tree, *nodes])
    for tree, out, table in found:
        node = ir.Node(
            tree.op_type,
            list(tree.inputs),
            1,
            domain=tree.domain,
            name=ctx.fresh_name((out.producer.name or out.name) + "_leaves"),
        )
        node.attributes = dict(tree.attributes)
        node.attributes["target_weights"] = ir.Attr(
            "target_weights", ir.AttrType.FLOATS, [float(w) for w in table]
        )
        ctx.replace_nodes(out.producer, node)
        ctx.count(LEAF_PASS)
    for chain in chains:  # gone now, not left to dead-code elimination: the passes between
        _remove_unread(ctx, chain)  # would work on the 2,700 nodes
    return bool(found)


def _remove_unread(ctx: PassContext, nodes: list[ir.Node]) -> None:
    """Remove those of ``nodes`` (in graph order) whose outputs nothing reads any more."""
    for node in reversed(nodes):
        if node.graph is ctx.graph and not any(
            v.has_uses() or ctx.is_output(v) for v in node.outputs
        ):
            ctx.graph.remove(node)
            _unlink(node)


def _unlink(node: ir.Node) -> None:
    """Free a removed node now: it and its outputs refer to each other, and only the cyclic
    collector would free them, after traversing them and their attributes' lists (an
    IsolationForest's 2,700 nodes and half a million numbers: a sixth of its creation)."""
    for v in node.outputs:
        v.producer = None
    node.attributes = {}


def _chain(ctx: PassContext, root: ir.Value, position: dict) -> list[ir.Node]:
    """The nodes computing elementwise functions of root alone (and constants), in graph
    order."""
    return downstream_chain(root, position, lambda node, inside: _takes(ctx, node, inside))


def _takes(ctx: PassContext, node: ir.Node, inside: set[int]) -> bool:
    if len(node.outputs) != 1 or any(v is None or not v.name for v in node.inputs):
        return False
    if node.op_type == "Reshape" and node.domain in STANDARD:
        shape = ctx.const(node.inputs[1]) if len(node.inputs) == 2 else None
        return (
            id(node.inputs[0]) in inside
            and shape is not None
            and (shape.tolist() in ([-1, 1], [0, 1]) and not _attr(node, "allowzero", 0))
        )
    label_encoder = node.op_type == "LabelEncoder" and node.domain == ML
    if not label_encoder and not traits(node.op_type, node.domain).elementwise:
        return False
    for v in node.inputs:
        if id(v) not in inside:
            c = ctx.const(v)
            if c is None or c.size != 1 or c.ndim > 2:
                return False
    return True


def _tabulate(ctx, root, weights, nodes, exits, steps: dict) -> list[np.ndarray] | None:
    """Each exit's value at each leaf weight (float32), or None where the chain cannot be
    tabulated: a kernel that fails or is not elementwise, an exit of another type or shape."""
    probe = np.tile(np.asarray(weights, np.float32), PROBE_COPIES).reshape(-1, 1)
    known = _evaluated(ctx, root, probe, nodes, steps)
    if known is None:
        return None
    tables = []
    for out in exits:
        y = known.get(id(out))
        if y is None or y.dtype != np.float32 or y.shape != probe.shape:
            return None
        copies = y.reshape(PROBE_COPIES, len(weights))
        if not (copies.view(np.uint32) == copies[0].view(np.uint32)).all():
            return None
        tables.append(copies[0].copy())
    return tables


def _evaluated(
    ctx: PassContext, root: ir.Value, probe: np.ndarray, nodes, steps: dict
) -> dict | None:
    """id(value) -> its array, for root = probe and the chain's nodes run in order on their
    kernels (fold.evaluate's rules, set up once for the whole chain: an IsolationForest has
    two thousand such nodes), or None when a node cannot run here."""
    known = {id(root): probe}
    opsets, functions = ctx.model.opset_imports, ctx.model.functions
    local = {(f.domain, f.name) for f in functions.values()} if functions else set()
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
        if any(t is None or _one_tree(t) is None for t in trees):
            continue
        if len({id(t) for t in trees}) != len(trees) or len({id(t.inputs[0]) for t in trees}) != 1:
            continue
        if any(ctx.is_output(t.outputs[0]) or t.outputs[0].use_count() != 1 for t in trees):
            continue
        if not _mergeable(trees):
            continue
        merged = _merged(trees)
        merged.name = ctx.fresh_name(node.name or "trees")
        ctx.replace_nodes(node, merged, dead=trees)
        for tree in trees:
            _unlink(tree)
        ctx.count(SUM_PASS)
        changed = True
    return changed


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
