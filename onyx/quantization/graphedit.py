"""Small IR helpers the quantizers share: constants, fresh names, inserting nodes."""

from __future__ import annotations

import itertools

import numpy as np

from .. import ir
from ..errors import InvalidArgument


class Editor:
    def __init__(self, model: ir.Model):
        self.model = model
        self.graph = model.graph
        self._taken = {v.name for v in self.graph.values()} | set(self.graph.initializers)
        self._counter = itertools.count()

    def name(self, base: str) -> str:
        base = base or "q"
        name = base
        while name in self._taken:
            name = f"{base}_{next(self._counter)}"
        self._taken.add(name)
        return name

    def const(self, base: str, array, dtype: ir.DataType | None = None) -> ir.Value:
        tensor = ir.Tensor(np.asarray(array), dtype=dtype)
        name = self.name(base)
        tensor.name = name
        value = ir.Value(name, ir.TensorType(tensor.dtype, ir.Shape(tensor.shape)), tensor)
        self.graph.add_initializer(value)
        return value

    def node(
        self,
        op_type: str,
        inputs,
        n_out: int = 1,
        base: str = "",
        domain: str = "",
        before: ir.Node | None = None,
        after: ir.Node | None = None,
        **attrs,
    ) -> ir.Node:
        outs = [
            self.name(f"{base}_{op_type}" + (f"_{i}" if n_out > 1 else "")) for i in range(n_out)
        ]
        node = ir.Node(
            op_type,
            inputs,
            outs,
            attrs or None,
            domain=domain,
            name=self.name(f"{base}_{op_type}_node"),
        )
        if after is not None:
            self.graph.insert_after(after, node)
        elif before is not None:
            self.graph.insert_before(before, node)
        else:
            self.graph.append(node)
        return node

    def use_opset(self, domain: str, version: int, bump_from: int | None = None) -> None:
        """Make sure the model imports ``domain`` at ``version`` or later. The default domain
        is raised only from ``bump_from`` up: other ops change form between opsets (Squeeze's
        axes at 13, ReduceMean's at 18), so an older model gets a clear error instead."""
        if domain:
            self.model.opset_imports.setdefault(domain, version)
            return
        have = self.model.opset("") or 0
        if have >= version:
            return
        if bump_from is None or have < bump_from:
            raise InvalidArgument(
                f"this quantization writes ops of opset {version}; the model "
                f"imports opset {have}: convert it to opset {version} first"
            )
        key = "ai.onnx" if "ai.onnx" in self.model.opset_imports else ""
        self.model.opset_imports[key] = version


def float_tensor(value: ir.Value | None) -> bool:
    t = getattr(value, "type", None)
    return isinstance(t, ir.TensorType) and t.elem_type == ir.DataType.FLOAT


def constant_of(graph: ir.Graph, value: ir.Value | None) -> np.ndarray | None:
    """The data of an initializer (not a graph input: those may be overridden)."""
    if value is None or value.const_value is None:
        return None
    if any(v is value for v in graph.inputs):
        return None
    return value.const_value.numpy()


def rename_output(graph: ir.Graph, old: ir.Value, new: ir.Value) -> None:
    """Make ``new`` produce the graph output ``old`` did, under ``old``'s name."""
    name = old.name
    old.name = name + "_float"
    new.name = name
    new.type = old.type
    graph.outputs = [new if v is old else v for v in graph.outputs]


def drop_unused_initializers(graph: ir.Graph) -> None:
    """Remove initializers nothing reads any more (the float weights that were quantized)."""
    inputs = {id(v) for v in graph.inputs} | {id(v) for v in graph.outputs}
    used = {id(v) for n in graph.all_nodes() for v in n.inputs if v is not None}
    for name, v in list(graph.initializers.items()):
        if id(v) not in used and id(v) not in inputs and not v.uses():
            del graph.initializers[name]
