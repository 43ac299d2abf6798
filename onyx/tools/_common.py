"""What the tool commands share: loading a model from a path, atomic text writes."""

from __future__ import annotations

import os
import tempfile

from ..ir import Model


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
