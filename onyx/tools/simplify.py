"""A portable simplification: the model stays standard ONNX (no com.microsoft fusions), so any
runtime runs the result.

    small = onyx.tools.simplify.simplify(model)
    print(onyx.tools.simplify.compare(model, small))   # nodes, op types, params, size

It is onyx.optimize's basic level (constant folding, identities, dead code, common
subexpressions) and three rewrites of its own, repeated until nothing changes: slices of a
Shape whose dims are static become constants; Add/Sub of zero and Mul/Div by one that change
neither shape nor type disappear; chains of Add (or Mul) by constants fold their constants.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np

from ..ir import Model, Node, Tensor, TensorType, Value
from ._common import as_model, copy_model

__all__ = ["compare", "simplify"]


def simplify(model, max_rounds: int = 8) -> Model:
    """A simplified copy of ``model`` (standard ops only)."""
    from ..inference import infer_shapes
    from ..optimizer import optimize
    from ._common import declared_names, keep_declared_types

    source = as_model(model)
    declared = declared_names(source)
    m, kept = _hide_quantized_weights(copy_model(source))
    m = optimize(m, level="basic", in_place=True)
    for _ in range(max_rounds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            infer_shapes(m)
        changed = _fold_static_shapes(m) + _drop_neutral(m) + _merge_constant_chains(m)
        if not changed:
            break
        m = optimize(m, level="basic", in_place=True)
    _restore_quantized_weights(m, kept)
    keep_declared_types(m, declared)
    return m


_HIDDEN = "__onyx_quantized__"


def _hide_quantized_weights(m: Model) -> tuple[Model, dict]:
    """Quantized weights (DequantizeLinear of an initializer) stay quantized: constant folding
    would store them as float (4x the bytes, and no integer kernels). They are shown to the
    optimizer as graph inputs meanwhile."""
    g = m.graph
    kept: dict[str, Value] = {}
    for node in g:
        if node.op_type != "DequantizeLinear" or not node.inputs:
            continue
        w = node.inputs[0]
        if w is None or w.const_value is None or g.initializers.get(w.name) is not w:
            continue
        name = _HIDDEN + w.name
        if name not in kept:
            kept[name] = w
            g.inputs.append(Value(name, w.type))
        node.set_input(0, next(v for v in g.inputs if v.name == name))
    return m, kept


def _restore_quantized_weights(m: Model, kept: dict) -> None:
    g = m.graph
    for v in [v for v in g.inputs if v.name in kept]:
        original = kept[v.name]
        target = g.initializers.get(original.name)
        if target is None:
            target = Value(original.name, original.type, original.const_value)
            g.add_initializer(target)
        v.replace_all_uses_with(target)
        g.inputs.remove(v)


def compare(before: Model, after: Model) -> str:
    """A before/after table: node count per op type that changed, params, serialized size."""
    from ..serde import dumps

    a = Counter(n.op_type for n in before.graph)
    b = Counter(n.op_type for n in after.graph)
    rows = [("op type", "before", "after")]
    for op in sorted(set(a) | set(b), key=lambda k: (-(a[k] + b[k]), k)):
        if a[op] != b[op]:
            rows.append((op, str(a[op]), str(b[op])))
    if len(rows) == 1:  # an empty section between two rules reads like a bug
        rows.append(("(no op type changed)", "", ""))
    rows.append(("nodes", str(len(before.graph)), str(len(after.graph))))
    rows.append(("params", f"{_params(before):,}", f"{_params(after):,}"))
    rows.append(("size", _size(len(dumps(before))), _size(len(dumps(after)))))
    w = max(len(r[0]) for r in rows)
    lines = [f"{r[0]:<{w}}  {r[1]:>12}  {r[2]:>12}" for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 3, "-" * len(lines[0]))
    return "\n".join(lines)


def _params(m: Model) -> int:
    return sum(
        v.const_value.size for v in m.graph.initializers.values() if v.const_value is not None
    )


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


# ---------------------------------------------------------------------------------- rewrites


def _const(v: Value | None) -> np.ndarray | None:
    if v is None:
        return None
    if v.const_value is not None:
        return v.const_value.numpy()
    p = v.producer
    if p is not None and p.op_type == "Constant" and "value" in p.attributes:
        t = p.attributes["value"].value
        return t.numpy() if t is not None else None
    return None


def _static_dims(v: Value) -> tuple | None:
    t = v.type
    if isinstance(t, TensorType) and t.shape is not None:
        return t.shape.dims
    return None


def _replace_with_constant(m: Model, node: Node, value: np.ndarray) -> None:
    out = node.outputs[0]
    const = Node("Constant", [], [out.name], {"value": Tensor(value)})
    const.outputs[0].type = TensorType(Tensor(value).dtype, value.shape)
    g = node.graph
    g.insert_before(node, const)
    out.replace_all_uses_with(const.outputs[0])
    g.outputs = [const.outputs[0] if v is out else v for v in g.outputs]
    g.remove(node, safe=False)


def _fold_static_shapes(m: Model) -> int:
    """Shape (with start/end) of a value whose dims there are all static -> a constant."""
    changed = 0
    for node in list(m.graph):
        if node.op_type != "Shape" or node.graph is not m.graph:
            continue
        dims = _static_dims(node.inputs[0])
        if dims is None:
            continue
        rank = len(dims)
        start, end = node.attr("start", 0), node.attr("end", rank)
        part = dims[slice(start, end)]
        if all(isinstance(d, int) for d in part):
            _replace_with_constant(m, node, np.array(part, np.int64))
            changed += 1
    return changed


_NEUTRAL = {"Add": (0, True), "Sub": (0, False), "Mul": (1, True), "Div": (1, False)}


def _drop_neutral(m: Model) -> int:
    """x + 0, x - 0, x * 1, x / 1 (a constant that changes neither x's shape nor its type)."""
    changed = 0
    g = m.graph
    outputs = {id(v) for v in g.outputs}
    for node in list(g):
        rule = _NEUTRAL.get(node.op_type)
        if rule is None or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        neutral, symmetric = rule
        for keep, const_at in ((0, 1), (1, 0)) if symmetric else ((0, 1),):
            x, c = node.inputs[keep], _const(node.inputs[const_at])
            out = node.outputs[0]
            if x is None or c is None or id(out) in outputs or not np.all(c == neutral):
                continue
            if x.type is None or out.type is None or x.type != out.type:
                continue  # broadcasting or a type change: not an identity
            out.replace_all_uses_with(x)
            g.remove(node, safe=False)
            changed += 1
            break
    return changed


def _merge_constant_chains(m: Model) -> int:
    """(x + a) + b -> x + (a + b), and the same for Mul, when the inner result has one use."""
    changed = 0
    g = m.graph
    outputs = {id(v) for v in g.outputs}
    for node in list(g):
        if node.op_type not in ("Add", "Mul") or node.graph is not g or len(node.inputs) != 2:
            continue
        b = _const(node.inputs[1])
        inner = node.inputs[0].producer if node.inputs[0] is not None else None
        if b is None or inner is None or inner.op_type != node.op_type or inner.graph is not g:
            continue
        a = _const(inner.inputs[1])
        mid = inner.outputs[0]
        if a is None or a.dtype != b.dtype or len(mid.uses()) != 1 or id(mid) in outputs:
            continue
        if a.ndim > 1 or b.ndim > 1 or a.size > 1 or b.size > 1:
            continue  # scalar constants only: nothing to learn about broadcasting
        merged = (a + b) if node.op_type == "Add" else (a * b)
        c = Node(
            "Constant", [], [f"{mid.name or 'c'}_merged"], {"value": Tensor(merged.astype(a.dtype))}
        )
        g.insert_before(node, c)
        node.set_input(0, inner.inputs[0])
        node.set_input(1, c.outputs[0])
        g.remove(inner, safe=False)
        changed += 1
    return changed
