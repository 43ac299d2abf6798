"""Model surgery: merge two models, prefix names, extract a sub-model, inline local functions,
set input and output dims. Every function takes a Model (or a path) and returns a new Model; the
argument is left as it was.

    m = onyx.merge_models(encoder, decoder, io_map=[("features", "x")], prefix2="dec/")
    part = onyx.extract_model(m, ["features"], ["logits"])
    flat = onyx.inline_functions(m)                       # every local function call expanded
    fixed = onyx.update_dims(m, {"input": [1, 3, 224, 224]})
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from ..errors import InvalidArgument, OnyxError
from ..ir import (
    Attr,
    AttrType,
    Function,
    Graph,
    Model,
    Node,
    Shape,
    TensorType,
    Value,
    captured_values,
)
from ._common import as_model, copy_model, move_nodes

__all__ = [
    "add_prefix",
    "extract_model",
    "inline_functions",
    "merge_models",
    "update_dims",
]


# ---------------------------------------------------------------------------------- prefixes


def add_prefix(
    model,
    prefix: str,
    rename_nodes: bool = True,
    rename_edges: bool = True,
    rename_inputs: bool = True,
    rename_outputs: bool = True,
    rename_initializers: bool = True,
    rename_value_infos: bool = True,
    rename_functions: bool = True,
    inplace: bool = False,
) -> Model:
    """``model`` with ``prefix`` put before its names, as onnx.compose.add_prefix does: node
    names, value names (edges, graph inputs, outputs, initializers) and local functions (the
    calls included). Empty names stay empty."""
    m = as_model(model) if inplace else copy_model(as_model(model))
    g = m.graph
    inits = {id(v) for v in g.initializers.values()}
    ins = {id(v) for v in g.inputs}
    outs = {id(v) for v in g.outputs}

    def wanted(v: Value) -> bool:
        if id(v) in inits:
            return rename_initializers
        if id(v) in ins:
            return rename_inputs
        if id(v) in outs:
            return rename_outputs
        return rename_edges

    for graph in _graphs(g):
        for node in graph:
            if rename_nodes and node.name:
                node.name = prefix + node.name
        for v in _defined(graph):
            if v.name and wanted(v):
                v.name = prefix + v.name
    for v in g.outputs:  # an output may be defined nowhere in the graph
        if v.name and not v.name.startswith(prefix) and v.producer is None and wanted(v):
            if id(v) not in ins and id(v) not in inits:
                v.name = prefix + v.name
    g.initializers = {v.name: v for v in g.initializers.values()}
    for v in g.initializers.values():
        if v.const_value is not None:
            v.const_value.name = v.name
    if rename_functions and m.functions:
        _prefix_functions(m, prefix)
    del rename_value_infos  # value_info entries are the Values themselves: renamed with them
    return m


def _prefix_functions(m: Model, prefix: str) -> None:
    renamed = {}
    for f in m.functions.values():
        renamed[(f.domain, f.name)] = prefix + f.name
        f.name = prefix + f.name
    m.functions = {f.key: f for f in m.functions.values()}
    bodies = [x for f in m.functions.values() for x in _graphs(f.graph)]
    for graph in [*_graphs(m.graph), *bodies]:
        for node in graph:
            new = renamed.get((node.domain, node.op_type))
            if new is not None:
                node.op_type = new


def _graphs(g: Graph):
    """``g`` and every subgraph in it."""
    yield g
    for node in g:
        for sub in node.subgraphs():
            yield from _graphs(sub)


def _defined(g: Graph):
    """Values defined in ``g`` itself: inputs, initializers, node outputs."""
    seen: set[int] = set()
    for v in itertools.chain(g.inputs, g.initializers.values(), (o for n in g for o in n.outputs)):
        if id(v) not in seen:
            seen.add(id(v))
            yield v


# ---------------------------------------------------------------------------------- merging


def merge_models(
    m1,
    m2,
    io_map: Sequence[tuple[str, str]],
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    prefix1: str | None = None,
    prefix2: str | None = None,
    name: str | None = None,
    doc_string: str | None = None,
    producer_name: str | None = "onyx.compose.merge_models",
    producer_version: str | None = None,
    domain: str | None = None,
    model_version: int | None = None,
) -> Model:
    """One model computing ``m2`` on ``m1``'s results: each ``(m1_output, m2_input)`` pair of
    ``io_map`` connects them (names before prefixing, as onnx.compose takes them).

    Inputs default to m1's and the m2 inputs ``io_map`` leaves open; outputs to the m1
    outputs ``io_map`` does not consume and all of m2's. The two must import the same version
    of every opset they share and agree on the IR version (else an OnyxError says which)."""
    a = add_prefix(m1, prefix1) if prefix1 else copy_model(as_model(m1))
    b = add_prefix(m2, prefix2) if prefix2 else copy_model(as_model(m2))
    io_map = [((prefix1 or "") + o, (prefix2 or "") + i) for o, i in io_map]
    if a.ir_version != b.ir_version:
        raise InvalidArgument(
            f"merge_models: IR versions differ ({a.ir_version} and {b.ir_version}); convert one"
        )
    opsets = dict(a.opset_imports)
    for d, v in b.opset_imports.items():
        if opsets.setdefault(d, v) != v:
            raise InvalidArgument(
                f"merge_models: opset {d or 'ai.onnx'} is {opsets[d]} in the first model and {v} "
                "in the second; convert one (onyx.convert_version)"
            )
    g1, g2 = a.graph, b.graph
    names1 = {v.name for gr in _graphs(g1) for v in _defined(gr) if v.name}
    names2 = {v.name for gr in _graphs(g2) for v in _defined(gr) if v.name}
    connected = {i for _, i in io_map}
    clash = sorted((names1 & names2) - connected)
    if clash:
        raise InvalidArgument(
            f"merge_models: both models define {clash[:8]}; give prefix1 / prefix2"
        )
    out1 = {v.name: v for v in g1.outputs}
    in2 = {v.name: v for v in g2.inputs}
    for o, i in io_map:
        if o not in out1:
            raise InvalidArgument(f"merge_models: the first model has no output {o!r}")
        if i not in in2:
            raise InvalidArgument(f"merge_models: the second model has no input {i!r}")
        _check_link(out1[o], in2[i])
        in2[i].replace_all_uses_with(out1[o])
        g2.outputs = [out1[o] if v is in2[i] else v for v in g2.outputs]
    consumed = {o for o, _ in io_map}
    all_inputs = [*g1.inputs, *(v for v in g2.inputs if v.name not in connected)]
    all_outputs = [*(v for v in g1.outputs if v.name not in consumed), *g2.outputs]
    g = Graph(
        _pick(all_inputs, inputs, "input"),
        _pick(all_outputs, outputs, "output"),
        (),
        [*g1.initializers.values(), *g2.initializers.values()],
        name=name or f"{g1.name}_{g2.name}",
    )
    move_nodes([*g1, *g2], g)
    g.value_info = [*g1.value_info, *g2.value_info]
    g.sparse_initializers = [*g1.sparse_initializers, *g2.sparse_initializers]
    g.doc_string = doc_string or ""
    m = Model(g, opsets, ir_version=a.ir_version, producer_name=producer_name or "")
    m.producer_version = producer_version or ""
    m.domain = domain or ""
    m.model_version = model_version or 0
    m.functions = {**a.functions, **b.functions}
    m.metadata_props = {**a.metadata_props, **b.metadata_props}
    return m


def _check_link(out: Value, inp: Value) -> None:
    """An output may feed an input of the same element type and rank (where both are known)."""
    a, b = out.type, inp.type
    if not isinstance(a, TensorType) or not isinstance(b, TensorType):
        return
    if a.elem_type and b.elem_type and a.elem_type != b.elem_type:
        raise InvalidArgument(
            f"merge_models: output {out.name!r} is {a} but input {inp.name!r} takes {b}"
        )
    if a.shape is not None and b.shape is not None and a.shape.rank != b.shape.rank:
        raise InvalidArgument(
            f"merge_models: output {out.name!r} has shape {a.shape}, input {inp.name!r} {b.shape}"
        )


def _pick(values: list[Value], names: Sequence[str] | None, what: str) -> list[Value]:
    if names is None:
        return values
    by_name = {v.name: v for v in values}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise InvalidArgument(f"merge_models: no {what}(s) {missing}; there are {list(by_name)}")
    return [by_name[n] for n in names]


# ---------------------------------------------------------------------------------- extraction


def extract_model(
    model,
    input_names: Sequence[str],
    output_names: Sequence[str],
    output_path: str | None = None,
    infer_shapes: bool = True,
) -> Model:
    """The part of ``model`` that computes ``output_names`` from ``input_names`` (value
    names anywhere in the main graph), with only the weights, functions and opsets it uses.

    onnx's argument order ``extract_model(input_path, output_path, input_names, output_names)``
    is accepted too; with ``output_path`` the result is also saved there."""
    if isinstance(input_names, str) and not isinstance(output_names, str):
        model, output_path, input_names, output_names = (
            model,
            input_names,
            output_names,
            output_path,
        )
    m = copy_model(as_model(model))
    if infer_shapes:
        from ..inference import infer_shapes as infer

        try:
            infer(m)
        except OnyxError:
            pass  # the types are a convenience; the cut does not need them
    g = m.graph
    by_name = {v.name: v for v in g.values() if v.name}
    for n in (*input_names, *output_names):
        if n not in by_name:
            raise InvalidArgument(f"extract_model: the graph has no value named {n!r}")
    stop = {id(by_name[n]) for n in input_names}
    nodes, reached = _backward(g, [by_name[n] for n in output_names], stop)
    graph_inputs = {id(v) for v in g.inputs}
    unlisted = [
        v.name
        for v in reached
        if v.producer is None
        and id(v) not in stop
        and id(v) in graph_inputs
        and v.name not in g.initializers
    ]
    if unlisted:
        raise InvalidArgument(
            f"extract_model: the outputs also depend on graph input(s) {unlisted}; list them in "
            "input_names"
        )
    new_inputs = []
    for n in input_names:
        v = by_name[n]
        if v.producer is None:
            new_inputs.append(v)
            continue
        fresh = Value(v.name, v.type)
        for node, i in v.uses():
            node.set_input(i, fresh)
        new_inputs.append(fresh)
    outputs = [by_name[n] for n in output_names]
    for n in g:
        if id(n) not in nodes:
            _detach_all(n)  # the kept values forget the uses of the nodes left out
    used = {id(v) for v in reached}
    kept = [n for n in g if id(n) in nodes]
    inits = [v for v in g.initializers.values() if id(v) in used and id(v) not in stop]
    out = Graph(new_inputs, outputs, (), inits, name=g.name)
    move_nodes(kept, out)
    made = {id(o) for n in kept for o in n.outputs}
    out.value_info = [v for v in g.value_info if id(v) in made and v not in outputs]
    out.doc_string = g.doc_string
    m.graph = out
    _drop_unused_functions(m)
    if output_path:
        from ..serde import save

        save(m, output_path)
    return m


def _backward(g: Graph, outputs: list[Value], stop: set[int]):
    """Ids of the nodes the outputs need (stopping at ``stop``) and every value they read."""
    nodes: set[int] = set()
    reached: dict[int, Value] = {}
    stack = list(outputs)
    while stack:
        v = stack.pop()
        if v is None or id(v) in reached:
            continue
        reached[id(v)] = v
        p = v.producer
        if p is None or id(v) in stop or p.graph is not g:
            continue
        if id(p) not in nodes:
            nodes.add(id(p))
            stack.extend(p.inputs)
            for sub in p.subgraphs():
                stack.extend(captured_values(sub))
    return nodes, list(reached.values())


def _detach_all(node: Node) -> None:
    node.detach()
    for sub in node.subgraphs():
        for n in sub:
            _detach_all(n)


def _called(graph: Graph, functions: dict) -> set:
    found = set()
    for gr in _graphs(graph):
        for n in gr:
            for key, f in functions.items():
                if (n.domain, n.op_type, n.overload) == key and key not in found:
                    found.add(key)
                    found |= _called(f.graph, functions)
    return found


def _drop_unused_functions(m: Model) -> None:
    if m.functions:
        used = _called(m.graph, m.functions)
        m.functions = {k: f for k, f in m.functions.items() if k in used}


# ---------------------------------------------------------------------------------- inlining


def inline_functions(model, names: Iterable | None = None, max_depth: int = 32) -> Model:
    """``model`` with calls of its local functions replaced by their bodies: all functions, or
    those named in ``names`` (function names, or (domain, name) pairs). Functions no longer
    called are dropped. Attribute references in a body take the call's attribute values (or
    the function's defaults)."""
    m = copy_model(as_model(model))
    wanted = None if names is None else {n if isinstance(n, tuple) else n for n in names}

    def selected(f: Function) -> bool:
        return wanted is None or f.name in wanted or (f.domain, f.name) in wanted

    funcs = {(f.domain, f.name, f.overload): f for f in m.functions.values() if selected(f)}
    counter = itertools.count()
    for _ in range(max_depth):
        if not _inline_pass(m.graph, funcs, counter):
            break
    else:
        raise OnyxError(f"inline_functions: calls nest deeper than {max_depth} (recursion?)")
    _drop_unused_functions(m)
    return m


def _inline_pass(g: Graph, funcs: dict, counter) -> bool:
    changed = False
    for gr in list(_graphs(g)):
        for node in list(gr):
            f = funcs.get((node.domain, node.op_type, node.overload))
            if f is not None:
                _inline_call(gr, node, f, next(counter))
                changed = True
    return changed


def _inline_call(g: Graph, call: Node, f: Function, serial: int) -> None:
    prefix = f"{call.name or f.name}_{serial}/"
    attrs = {a.name: a for a in f.attribute_defaults}
    attrs.update(call.attributes)
    vmap: dict[int, Value | None] = {}
    for i, v in enumerate(f.graph.inputs):
        vmap[id(v)] = call.inputs[i] if i < len(call.inputs) else None
    body = _clone_nodes(f.graph, vmap, prefix, attrs)
    outs = [vmap.get(id(v)) for v in f.graph.outputs]
    for node in body:
        g.insert_before(call, node)
    for old, new in zip(call.outputs, outs):
        if new is None:
            continue
        if new.producer is None or new.producer not in body:
            # the body passes an input (or an outer value) straight through
            ident = Node("Identity", [new], [old.name])
            g.insert_before(call, ident)
            new = ident.outputs[0]
        else:
            new.name = old.name
        new.type = new.type or old.type
        old.replace_all_uses_with(new)
        g.outputs = [new if v is old else v for v in g.outputs]
        g.value_info = [new if v is old else v for v in g.value_info]
    g.remove(call, safe=False)


def _clone_nodes(g: Graph, vmap: dict, prefix: str, attrs: dict) -> list[Node]:
    """Copies of ``g``'s nodes with fresh output Values named ``prefix + name``; inputs mapped
    through ``vmap`` (extended as it goes); attribute references bound from ``attrs``."""
    nodes = []
    for n in g:
        new_attrs = []
        for a in n.attributes.values():
            if a.is_ref:
                target = attrs.get(a.ref_attr_name)
                if target is None:
                    continue  # unset without a default: the attribute is left out
                new_attrs.append(Attr(a.name, target.type, target.value))
            elif a.type == AttrType.GRAPH and a.value is not None:
                new_attrs.append(Attr(a.name, a.type, _clone_graph(a.value, vmap, prefix, attrs)))
            elif a.type == AttrType.GRAPHS:
                subs = [_clone_graph(s, vmap, prefix, attrs) for s in a.value]
                new_attrs.append(Attr(a.name, a.type, subs))
            else:
                new_attrs.append(Attr(a.name, a.type, a.value))
        outs = [Value(prefix + v.name if v.name else "", v.type) for v in n.outputs]
        for v, c in zip(n.outputs, outs):
            vmap[id(v)] = c
        ins = [vmap.get(id(v), v) if v is not None else None for v in n.inputs]
        c = Node(
            n.op_type, ins, outs, new_attrs, n.domain, prefix + n.name if n.name else "", n.overload
        )
        nodes.append(c)
    return nodes


def _clone_graph(g: Graph, vmap: dict, prefix: str, attrs: dict) -> Graph:
    vmap = dict(vmap)
    inputs = []
    for v in g.inputs:
        c = vmap[id(v)] = Value(prefix + v.name, v.type)
        inputs.append(c)
    inits = []
    for v in g.initializers.values():
        if id(v) not in vmap:
            vmap[id(v)] = Value(prefix + v.name, v.type, v.const_value)
        inits.append(vmap[id(v)])
    nodes = _clone_nodes(g, vmap, prefix, attrs)
    return Graph(inputs, [vmap.get(id(v), v) for v in g.outputs], nodes, inits, name=g.name)


# ---------------------------------------------------------------------------------- dims


def update_dims(
    model,
    input_dims: dict[str, Sequence] | None = None,
    output_dims: dict[str, Sequence] | None = None,
    infer: bool = True,
) -> Model:
    """``model`` with the dims of some inputs (and outputs) set: an int makes a dim static, a
    string names a symbolic dim, None or -1 makes it dynamic (named ``<value>_<axis>``, as
    onnx's update_inputs_outputs_dims does). With ``infer`` the intermediate types are
    inferred anew from the new inputs."""
    m = copy_model(as_model(model))
    g = m.graph
    for dims_of, values, what in (
        (input_dims, g.inputs, "input"),
        (output_dims, g.outputs, "output"),
    ):
        by_name = {v.name: v for v in values}
        for name, dims in (dims_of or {}).items():
            v = by_name.get(name)
            if v is None:
                raise InvalidArgument(
                    f"update_dims: no graph {what} {name!r}; there are {list(by_name)}"
                )
            if not isinstance(v.type, TensorType):
                raise InvalidArgument(f"update_dims: {what} {name!r} is not a tensor ({v.type})")
            new = tuple(_dim(d, name, i) for i, d in enumerate(dims))
            v.type = TensorType(v.type.elem_type, Shape(new), v.type.denotation)
    if infer:
        from ..inference import infer_shapes

        outputs = {id(v) for v in g.outputs}
        for v in g.value_info:
            if (
                id(v) not in outputs
                and v.producer is not None
                and v.producer.domain in ("", "ai.onnx", "ai.onnx.ml")
            ):
                v.type = None
        g.value_info = [v for v in g.value_info if v.type is not None]
        for node in g:
            if node.domain not in ("", "ai.onnx", "ai.onnx.ml"):
                continue  # no rule may know a custom op: its declared types stay
            for v in node.outputs:
                if id(v) not in outputs:
                    v.type = None
        requested = {id(v): v.type for v in g.outputs if v.name in (output_dims or {})}
        infer_shapes(m)
        for v in g.outputs:  # the dims asked for win over inferred ones (onnx's rule)
            v.type = requested.get(id(v), v.type)
    return m


def _dim(d, name: str, axis: int):
    if d is None or (isinstance(d, int) and d < 0):
        return f"{name}_{axis}"
    if isinstance(d, str):
        return d
    return int(d)
