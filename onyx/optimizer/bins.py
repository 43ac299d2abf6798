"""KBinsDiscretizer's one-hot chains batched: skl2onnx writes one chain per column,
ArrayFeatureExtractor -> Less(edges) -> Cast -> Concat(the ones column) -> ArgMax ->
OneHotEncoder -> Reshape, and concatenates them (8 nodes a column, each a session step). The
same operators over a column axis do all the columns at once, element for element the same
operations (the ones column, broadcast, is the one every chain reads)."""

from __future__ import annotations

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import EXTENDED, STANDARD, PassContext, graph_pass, is_op, producer, static_shape

ML = "ai.onnx.ml"


def _ml_producer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    p = v.producer if v is not None else None
    return p if p is not None and p.op_type == op_type and p.domain == ML else None


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _chain(ctx: PassContext, v: ir.Value) -> dict | None:
    """One column's chain ending in v (Reshape's output), its parts, or None."""
    reshape = producer(v, "Reshape")
    if reshape is None or ctx.single_use(v) is None:
        return None
    shape = ctx.const(reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    onehot = _ml_producer(reshape.inputs[0], "OneHotEncoder")
    if shape is None or onehot is None or _attr(reshape, "allowzero", 0):
        return None
    cats = _attr(onehot, "cats_int64s")
    if not cats or list(cats) != list(range(len(cats))) or _attr(onehot, "cats_strings"):
        return None
    if shape.tolist() != [-1, len(cats)] or not _attr(onehot, "zeros", 1):
        return None
    argmax = producer(onehot.inputs[0], "ArgMax")
    if argmax is None or argmax.domain not in STANDARD or _attr(argmax, "select_last_index", 0):
        return None
    if _attr(argmax, "axis", 0) != 1 or not _attr(argmax, "keepdims", 1):
        return None
    concat = producer(argmax.inputs[0], "Concat")
    if concat is None or len(concat.inputs) != 2 or _attr(concat, "axis") != 1:
        return None
    cast = producer(concat.inputs[0], "Cast")
    less = producer(cast.inputs[0], "Less") if cast is not None else None
    if less is None or _attr(cast, "to") != ir.DataType.FLOAT or _attr(cast, "saturate", 1) != 1:
        return None
    edges = ctx.const(less.inputs[1])
    column = _ml_producer(less.inputs[0], "ArrayFeatureExtractor")
    if edges is None or edges.ndim != 1 or column is None:
        return None
    index = ctx.const(column.inputs[1])
    if index is None or index.size != 1 or index.dtype.kind != "i" or len(cats) != edges.size + 1:
        return None
    parts = [reshape, onehot, argmax, concat, cast, less]
    for node in parts[1:]:  # (each feeds only the next: the chain goes with its one reader)
        if any(ctx.single_use(o) is None for o in node.outputs):
            return None
    one_use_column = ctx.single_use(column.outputs[0]) is less
    features = column.inputs[0]
    if static_shape(features) is None or len(static_shape(features)) != 2:
        return None
    return dict(
        parts=parts,
        column=column,
        one_use_column=one_use_column,
        features=features,
        index=int(index.reshape(-1)[0]),
        edges=edges,
        ones=concat.inputs[1],
    )


@graph_pass("BinsOneHotBatching", EXTENDED)
def bins_one_hot_batching(ctx: PassContext) -> bool:
    changed = False
    if ctx.opset() < 13:  # (Unsqueeze's axes an input)
        return False
    for final in ctx.nodes_of("Concat"):
        if not is_op(final, "Concat") or len(final.inputs) < 2 or _attr(final, "axis") != 1:
            continue
        chains = [_chain(ctx, v) for v in final.inputs]
        if any(c is None for c in chains) or len({id(v) for v in final.inputs}) != len(chains):
            continue
        first = chains[0]
        same = ("features", "ones")
        if any(c[k] is not first[k] for c in chains for k in same):
            continue
        if len({(c["edges"].size, c["edges"].dtype) for c in chains}) != 1:
            continue
        _batch(ctx, final, chains)
        ctx.count("BinsOneHotBatching")
        changed = True
    return changed


def _batch(ctx: PassContext, final: ir.Node, chains: list[dict]) -> None:
    n, k = len(chains), chains[0]["edges"].size
    const = ctx.add_const
    inputs = [
        chains[0]["features"],
        const(np.array([c["index"] for c in chains], np.int64), "bins_columns"),
        const(np.stack([c["edges"] for c in chains]), "bins_edges"),
        chains[0]["ones"],
        const(np.array([2], np.int64), "bins_axis"),
        const(np.array([1, n, 1], np.int64), "bins_expand"),
        const(np.array([-1, n * (k + 1)], np.int64), "bins_shape"),
    ]
    # one onyx kernel (ml/preprocess.py), its body the batched chain in standard ops
    result = ir.Node(
        "BinsOneHot", inputs, 1, {"cats_int64s": list(range(k + 1))}, domain=ONYX_DOMAIN,
        name=ctx.fresh_name("bins_BinsOneHot"),
    )  # fmt: skip
    ctx.ensure_function("BinsOneHot", lambda: _bins_one_hot_function(ctx))
    dead = [p for c in chains for p in c["parts"]]
    dead += [c["column"] for c in chains if c["one_use_column"]]
    ctx.replace_nodes(final, result, dead)


def _bins_one_hot_function(ctx: PassContext) -> ir.Function:
    """The model-local function BinsOneHot: the batched chain over a column axis, in the
    standard and ai.onnx.ml ops skl2onnx wrote a chain in."""
    names = ("features", "columns", "edges", "ones", "axes", "expand", "shape")
    features, columns, edges, ones, axes, expand, shape = (ir.Value(n) for n in names)
    nodes = []

    def node(op, inputs, attrs=None, domain=""):
        made = ir.Node(op, inputs, [f"{op}_{len(nodes)}"], attrs or [], domain=domain)
        nodes.append(made)
        return made.outputs[0]

    columns_read = node("ArrayFeatureExtractor", [features, columns], domain=ML)
    less = node("Less", [node("Unsqueeze", [columns_read, axes]), edges])
    below = node("Cast", [less], [ir.Attr("to", ir.AttrType.INT, int(ir.DataType.FLOAT))])
    column = node("Expand", [node("Unsqueeze", [ones, axes]), expand])
    joined = node("Concat", [below, column], [ir.Attr("axis", ir.AttrType.INT, 2)])
    bins = node("ArgMax", [joined], [ir.Attr("axis", ir.AttrType.INT, 2),
                                      ir.Attr("keepdims", ir.AttrType.INT, 0)])  # fmt: skip
    cats = ir.Attr("cats_int64s", ir.AttrType.INTS, ref_attr_name="cats_int64s")
    onehot = node("OneHotEncoder", [bins], [cats], domain=ML)
    y = node("Reshape", [onehot, shape])
    graph = ir.Graph([features, columns, edges, ones, axes, expand, shape], [y], nodes,
                     name="BinsOneHot")  # fmt: skip
    f = ir.Function(
        ONYX_DOMAIN,
        "BinsOneHot",
        graph,
        attributes=["cats_int64s"],
        opset_imports={"": ctx.opset(), ML: ctx.opset(ML) or 1},
    )
    f.doc_string = "KBinsDiscretizer's one-hot chains batched (onyx runs it as one kernel)"
    return f
