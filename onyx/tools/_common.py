"""What the tool commands share: loading a model from a path, atomic text writes."""

from __future__ import annotations

import os
import tempfile

from ..ir import Model, Value


def as_model(model) -> Model:
    """An ir.Model from a Model, a path or bytes."""
    if isinstance(model, Model):
        return model
    from ..serde import load, loads

    if isinstance(model, bytes | bytearray | memoryview):
        return loads(bytes(model))
    return load(os.fspath(model))


def copy_model(model: Model) -> Model:
    """A deep copy (through the lossless serialization: every field, nothing shared)."""
    from ..serde import dumps, loads

    m = loads(dumps(model))
    m.base_dir = model.base_dir
    return m


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (no half-written file)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".onyx-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def declared_names(model: Model) -> set[str]:
    """Names of the main graph's values whose types the file declares (value_info)."""
    return {v.name for v in model.graph.value_info if v.name}


def keep_declared_types(model: Model, declared: set[str]) -> None:
    """Forget the types inference added to intermediate values, keeping the declared ones:
    a tool's output then says no more than its input did (an inferred dim that another
    runtime would dispute stays out of the file)."""
    g = model.graph
    outputs = {id(v) for v in g.outputs}
    for node in g:
        for v in node.outputs:
            if id(v) not in outputs and v.name not in declared:
                v.type = None
    g.value_info = [v for v in g.value_info if v.name in declared and v.type is not None]


def put_after_output(g, v, build) -> Value:
    """Insert a node reading ``v`` right after ``v``'s producer, taking over ``v``'s name,
    readers and graph-output slots: ``build(v)`` returns the node (its first output gets
    ``v``'s name); ``v`` is renamed and read by that node only. Returns the node's output."""
    name = v.name
    v.name = f"{name}__{id(v) % 1000003}" if name else ""
    node = build(v)
    new = node.outputs[0]
    new.name = name
    for user, i in v.uses():
        if user is not node:
            user.set_input(i, new)
    g.outputs = [new if o is v else o for o in g.outputs]
    g.value_info = [new if o is v else o for o in g.value_info]
    g.insert_after(v.producer, node)
    return new


def move_nodes(nodes, dst) -> None:
    """Move ``nodes`` (in order) from their graphs to the end of graph ``dst``, keeping their
    inputs (a node belongs to one graph at a time)."""
    for n in list(nodes):
        inputs = list(n.inputs)
        if n.graph is not None:
            n.graph.remove(n, safe=False)
        n.set_inputs(inputs)
        dst.append(n)
