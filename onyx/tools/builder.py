"""A typed model builder: operators are methods, checked against their schema as they are called.

    import numpy as np, onyx
    op = onyx.opset(21)
    x = op.input("x", "float32", ["N", 3])
    b = np.array([1, 2, 3], np.float32)
    y = op.Relu(op.Add(x, b))                # y.type: tensor(float) [N,3], known right here
    model = op.build([x], {"y": y})

Each call looks up the operator's schema at the builder's opset, checks the number of inputs,
the attribute names, types and required ones, and the element types of the inputs against the
schema's type constraints, then infers the outputs' types and shapes. A mistake raises an
``OnyxError`` from the call that made it, naming the operator, the caller's file and line and
what is wrong. numpy arrays and Python numbers given as inputs become constants.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import defs
from ..errors import OnyxError
from ..ir import Attr, AttrType, DataType, Graph, Model, Node, Tensor, TensorType, Value
from ..ir.dtypes import BY_NAME, from_numpy
from .helper import IR_VERSION_OF_OPSET, _coerce_attr

__all__ = ["BuildError", "Opset", "opset"]


class BuildError(OnyxError, ValueError):
    """A node the builder refused: unknown op, wrong attribute, inputs of a type it rejects."""


def opset(version: int | None = None, domain: str = "") -> Opset:
    """A builder for operators of ``domain`` at opset ``version`` (default: the newest)."""
    return Opset(version, domain)


def _elem_type(dtype) -> DataType:
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, int):
        return DataType(dtype)
    if isinstance(dtype, str):
        name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
        if name in BY_NAME:
            return BY_NAME[name].dtype
    try:
        return from_numpy(dtype)
    except (TypeError, ValueError):
        raise BuildError(f"unknown element type {dtype!r}") from None


def _caller() -> str:
    """'file:line' of the user's code that called the builder."""
    frame = inspect.currentframe().f_back
    here = frame.f_code.co_filename
    while frame is not None and frame.f_code.co_filename == here:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"


class Opset:
    """Operators of one domain and opset version as methods: ``op.Add(a, b)``."""

    def __init__(self, version: int | None = None, domain: str = ""):
        known = defs.domains().get("" if domain == "ai.onnx" else domain)
        if known is None:
            raise BuildError(f"unknown operator domain {domain!r}")
        self.domain = "" if domain == "ai.onnx" else domain
        self.version = int(version) if version is not None else known[1]
        if not known[0] <= self.version <= known[1]:
            raise BuildError(f"domain {domain!r} has opsets {known[0]}..{known[1]}, not {version}")
        self._nodes: list[Node] = []
        self._count = 0
        from ..inference.engine import Engine

        self._engine = Engine(Model(Graph(), {self.domain: self.version}), True, True)
        self._engine.subgraph_envs = []
        self._env = self._engine.new_env()

    # -- values -------------------------------------------------------------------------------
    def input(self, name: str, dtype="float32", shape: Sequence | None = None) -> Value:
        """A graph input: element type (name, numpy dtype or DataType) and dims (ints, names
        or None; ``shape=None``: rank unknown)."""
        v = Value(name, TensorType(_elem_type(dtype), None if shape is None else tuple(shape)))
        self._env["types"][id(v)] = v.type
        return v

    def const(self, value, name: str = "") -> Value:
        """A Constant node holding ``value`` (an array or a Python number)."""
        arr = np.asarray(value)
        if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats are float32 constants
        return self._node("Constant", [], {"value": Tensor(arr)}, 1, name)[0]

    def _fresh(self, op_type: str) -> str:
        self._count += 1
        return f"{op_type.lower()}_{self._count}"

    def _as_value(self, x, op_type: str, i: int) -> Value | None:
        if x is None or isinstance(x, Value):
            return x
        if isinstance(x, np.ndarray | int | float | np.generic | bool):
            return self.const(x)
        raise BuildError(f"{_caller()}: {op_type} input {i}: not a value: {x!r}")

    # -- operators ----------------------------------------------------------------------------
    def __getattr__(self, op_type: str):
        if op_type.startswith("_") or not op_type[:1].isupper():
            raise AttributeError(op_type)
        schema = defs.get_schema(op_type, self.version, self.domain)
        if schema is None:
            raise BuildError(f"{_caller()}: no operator {op_type!r} in {self._where()}")

        def call(*inputs, _outputs: int | None = None, _name: str = "", **attrs):
            outs = self._node(op_type, inputs, attrs, _outputs, _name)
            return outs[0] if len(outs) == 1 else outs

        call.__name__ = op_type
        call.__doc__ = f"{op_type}-{schema.since_version} ({self._where()})"
        return call

    def _where(self) -> str:
        return f"{self.domain or 'ai.onnx'} opset {self.version}"

    def _node(self, op_type: str, inputs, attrs: dict, n_out: int | None, name: str):
        schema = defs.get_schema(op_type, self.version, self.domain)
        where = f"{_caller()}: {op_type}"
        values = [self._as_value(x, op_type, i) for i, x in enumerate(inputs)]
        self._check_inputs(schema, values, where)
        attributes = self._attributes(schema, attrs, where)
        if n_out is None:
            n_out = max(1, sum(1 for p in schema.outputs if p.option == "single"))
        if not schema.min_output <= n_out <= schema.max_output:
            raise BuildError(
                f"{where}: {n_out} outputs asked for, it has {schema.min_output}..{schema.max_output}"
            )
        outs = [self._fresh(op_type) for _ in range(n_out)]
        node = Node(op_type, values, outs, attributes, self.domain, name)
        self._infer(node, where)
        self._nodes.append(node)
        return node.outputs

    def _check_inputs(self, schema, values: list, where: str) -> None:
        n = len(values)
        if not schema.min_input <= n <= schema.max_input:
            most = "any number" if schema.max_input > 1000 else schema.max_input
            raise BuildError(f"{where}: {n} inputs given, it takes {schema.min_input} to {most}")
        bound: dict[str, str] = {}
        for i, v in enumerate(values):
            p = schema.inputs[min(i, len(schema.inputs) - 1)]
            if v is None:
                if p.option == "single":
                    raise BuildError(f"{where}: input {i} ({p.name}) is required")
                continue
            t = self._env["types"].get(id(v), v.type)
            if not isinstance(t, TensorType) or not t.elem_type:
                continue
            from ..checker import type_string

            ts = type_string(t)
            allowed = schema.allowed_types(p.type_str)
            if allowed is not None and ts not in allowed:
                raise BuildError(
                    f"{where}: input {i} ({p.name}) is {ts}; {p.type_str} allows {', '.join(allowed)}"
                )
            if p.type_str in bound and bound[p.type_str] != ts and p.homogeneous:
                raise BuildError(
                    f"{where}: input {i} ({p.name}) is {ts} but an earlier {p.type_str} input "
                    f"is {bound[p.type_str]}"
                )
            bound.setdefault(p.type_str, ts)

    def _attributes(self, schema, attrs: dict, where: str) -> list[Attr]:
        out = []
        for key, value in attrs.items():
            if value is None:
                continue
            spec = schema.attributes.get(key)
            if spec is None:
                known = ", ".join(sorted(schema.attributes)) or "none"
                raise BuildError(f"{where}: no attribute {key!r} (it has: {known})")
            if isinstance(value, Attr):
                out.append(value)
                continue
            if spec.type == AttrType.TENSOR and not isinstance(value, Tensor):
                value = Tensor(np.asarray(value))
            try:
                value = _coerce_attr(key, spec.type, value)
            except OnyxError:
                raise BuildError(
                    f"{where}: attribute {key!r} takes {spec.type.name}, got {value!r}"
                ) from None
            if spec.type in (AttrType.INT, AttrType.FLOAT) and isinstance(value, list | tuple):
                raise BuildError(f"{where}: attribute {key!r} takes one {spec.type.name}")
            out.append(Attr(key, spec.type, value))
        missing = [a for a in schema.required_attributes if a not in attrs]
        if missing:
            raise BuildError(f"{where}: required attribute(s) {missing} missing")
        return out

    def _infer(self, node: Node, where: str) -> None:
        engine = self._engine
        engine.problems.clear()
        engine.infer_node(node, self._env, {self.domain: self.version}, {}, "builder")
        if engine.problems:
            problem = engine.problems[0].split(": ", 2)[-1]
            raise BuildError(f"{where}: {problem}")
        for v in node.outputs:
            t = self._env["types"].get(id(v))
            if t is not None and not (isinstance(t, TensorType) and not t.elem_type):
                v.type = t

    # -- the model ----------------------------------------------------------------------------
    def build(
        self,
        inputs: Sequence[Value],
        outputs: Sequence[Value] | dict[str, Value],
        name: str = "graph",
        ir_version: int | None = None,
    ) -> Model:
        """A model of the nodes that ``outputs`` depend on. ``outputs`` as a dict names them."""
        if isinstance(outputs, dict):
            for out_name, v in outputs.items():
                v.name = out_name
            outputs = list(outputs.values())
        needed = _needed(outputs)
        missing = [v.name for v in needed["free"] if not any(v is i for i in inputs)]
        if missing:
            raise BuildError(f"build: the outputs read {missing}, which are not among the inputs")
        nodes = [n for n in self._nodes if id(n) in needed["nodes"]]
        g = Graph(list(inputs), list(outputs), nodes, name=name)
        if ir_version is None:
            ir_version = IR_VERSION_OF_OPSET.get(self.version, 10) if not self.domain else 10
        return Model(g, {self.domain: self.version}, ir_version=ir_version)


def _needed(outputs) -> dict[str, Any]:
    """Ids of the nodes the outputs depend on, and the values they read that no node makes."""
    nodes: set[int] = set()
    free: dict[int, Value] = {}
    stack = list(outputs)
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        p = v.producer
        if p is None:
            free[id(v)] = v
            continue
        nodes.add(id(p))
        stack.extend(p.inputs)
    return {"nodes": nodes, "free": list(free.values())}
